"""tune --measure without a GPU: the plan (what is timed, and the predictions it is compared with), the ratio
estimator and its interval, the pick rule, the saved-timings road (--measured), and the errors (no GPU, Ctrl-C)."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from decodecalc.api import load_workload, tune_for, tune_inputs
from decodecalc.cli import app
from decodecalc.launchers.sglang_triton import plan_sglang
from decodecalc.launchers.vllm_unified import plan_vllm
from decodecalc.reports.step_launches import step_lens_of
from decodecalc.reports.tune_measure import (
    MeasurePlan,
    plan_measurement,
    ratio_estimate,
    summarize_measurement,
    t95,
    timings_doc,
)
from decodecalc.reports.tune_space import engine_settings
from decodecalc.timemodel import launch_time_s, work_for_plan

runner = CliRunner()
MODEL = ["-w", "mix:prompt=3000,output=120,steps=60", "-m", "llama3.1-8b", "--gpu", "h200", "--heuristics", "none"]


@pytest.fixture(scope="module")
def result():
    inputs = tune_inputs("llama3.1-8b", tp=1, gpu="h200")
    return tune_for(inputs, load_workload(workload="mix:prompt=3000,output=120,steps=60"), heuristics="none")


@pytest.fixture(scope="module")
def plan(result) -> MeasurePlan:
    return plan_measurement(result, steps=8, leading=2, source="mix")


def fake_rows(plan: MeasurePlan, factor, noise: float = 0.0, seed: int = 0) -> list[dict]:
    """Timing rows as the GPU half writes them: each launch's time = its first item's prediction x factor(key)."""
    rng = random.Random(seed)
    pred = {(i.key, s): p for i in plan.items for s, p in zip(plan.steps, i.predicted_step_s)}
    rows = []
    for x in plan.sample.launches:
        keys = [f"{x.engine}:{s}" for s in x.settings]
        t = pred[(keys[0], x.step)] * factor(keys[0]) * (1 + noise * rng.gauss(0, 1))
        rows.append({"kind": "triton", "step": x.step, "engine": x.engine, "items": keys, "t_us": t * 1e6,
                     "status": "ok"})
    for r in plan.backend_runs:
        t = pred[(r.items[0], r.step)] * factor(r.items[0]) * (1 + noise * rng.gauss(0, 1))
        rows.append({"kind": "backend", "step": r.step, "kernel": r.kernel, "items": list(r.items), "t_us": t * 1e6,
                     "status": "ok"})
    return rows


def test_plan_times_the_default_the_pick_and_the_engines_default_backends(result, plan):
    keys = {i.key for i in plan.items}
    for engine, e in result.engines.items():
        assert f"{engine}:{e.default.label}" in keys and f"{engine}:{e.best.label}" in keys
    # on an H200 both engines default to FA3: each is measured, as the engine drives it
    defaults = [i for i in plan.items if "engine default" in i.roles]
    assert {(i.engine, i.kernel) for i in defaults} == {("vllm", "fa3"), ("sglang", "fa3")}
    assert len(plan.steps) == 8 and plan.steps[0] == 0 and plan.steps[-1] == result.ctx.steps.num_steps - 1
    # every Triton item is launched at every sampled step, every backend item has a run at every sampled step
    for it in plan.items:
        if it.kind == "triton":
            got = {x.step for x in plan.sample.launches if it.label in x.settings and x.engine == it.engine}
        else:
            got = {r.step for r in plan.backend_runs if it.key in r.items}
        assert got == set(plan.steps), it.key


def test_plan_predictions_are_the_scalar_models_per_step(result, plan):
    """The per-step predictions the measurement is compared with are the launch model's for that step (an
    independent loop: plan each sampled step and time it), not tune's estimates."""
    ctx = result.ctx
    lens = step_lens_of(ctx.steps, plan.steps)
    for it in plan.items:
        if it.kind != "triton":
            continue
        cand = next(c for c in result.engines[it.engine].candidates if c.label == it.label)
        s = engine_settings(ctx, it.engine, cand.setting)
        for (seq, q), got in zip(lens, it.predicted_step_s):
            w = dataclasses.replace(ctx.work, seq_lens=tuple(seq), query_lens=tuple(q))
            if it.engine == "vllm":
                vp = plan_vllm(w, ctx.gpu, s)
                p = vp.replay.plan if vp.replay is not None else vp.plan
            else:
                p = plan_sglang(w, ctx.gpu, s).plan
            assert got == pytest.approx(launch_time_s(work_for_plan(p, w, it.engine), ctx.profile), rel=1e-9)


def test_fa3_runs_with_the_split_argument_each_engine_passes(plan):
    """vLLM passes FA3 its cap under full CUDA graphs (32), SGLang 0 (the runtime's own sizing)."""
    by_engine = {}
    for r in plan.backend_runs:
        for k in r.items:
            if k.endswith(":FLASH_ATTN") or k.endswith(":fa3"):
                by_engine.setdefault(k.split(":")[0], set()).add(r.knobs["num_splits"])
    assert by_engine == {"vllm": {32}, "sglang": {0}}


def test_ratio_estimate_is_exact_for_proportional_times():
    r = ratio_estimate([2.2 * p for p in (1.0, 3.0, 5.0)], [1.0, 3.0, 5.0], [1, 2, 1])
    assert r.value == pytest.approx(2.2) and r.rel_ci95 == pytest.approx(0.0, abs=1e-12)
    assert math.isinf(ratio_estimate([1.0], [1.0], [1.0]).rel_ci95)
    assert t95(1) == pytest.approx(12.706) and t95(200) == 1.96


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_ratio_interval_covers_the_population_ratio(seed):
    """A population of 2,000 steps whose measured / predicted ratio wanders by 5%: a 16-step systematic sample's
    95% interval holds the population's ratio in most draws (checked over 40 draws per example: at least 30)."""
    rng = random.Random(seed)
    p = [rng.uniform(5, 80) for _ in range(2000)]
    m = [x * 1.07 * (1 + 0.05 * rng.gauss(0, 1)) for x in p]
    truth = sum(m) / sum(p)
    hits = 0
    for k in range(40):
        start = rng.randrange(125)
        idx = list(range(start, 2000, 125))
        r = ratio_estimate([m[i] for i in idx], [p[i] for i in idx], [1.0] * len(idx))
        hits += r.low <= truth <= r.high
    assert hits >= 30


def test_measured_totals_follow_the_timings(plan):
    rows = fake_rows(plan, lambda key: 1.10)
    mt = summarize_measurement(plan, rows, device="test")
    for m in mt.items:
        assert m.steps == len(plan.steps)
        assert m.measured_total_s == pytest.approx(1.10 * m.item.predicted_total_s, rel=1e-9)
        assert m.outside_stated_error == (0.10 > m.item.stated_error[1]) if m.item.stated_error else True
    assert all(v.by == "prediction" for v in mt.verdicts)


def _other_allowed(plan, engine):
    pick = next(i for i in plan.items if i.engine == engine and "pick" in i.roles)
    return pick, next(i for i in plan.items if i.engine == engine and i.kind == "triton" and i.allowed
                      and i.key != pick.key)


def test_pick_follows_the_measurement_only_beyond_the_sample_error(plan):
    engine = next(i.engine for i in plan.items if i.kind == "triton" and i.allowed and "pick" not in i.roles)
    pick, other = _other_allowed(plan, engine)
    ratio = pick.predicted_total_s / other.predicted_total_s
    # the other candidate measures 15% faster than the pick on every step: the measurement decides
    faster = fake_rows(plan, lambda key: 0.85 * ratio if key == other.key else 1.0)
    v = {x.engine: x for x in summarize_measurement(plan, faster).verdicts}[engine]
    assert v.by == "measurement" and v.pick == other.label and v.gap.low > 1.0
    # 0.5% faster on average, with 10% noise per step: within the sample's error, the prediction's pick stands
    close = fake_rows(plan, lambda key: 0.995 * ratio if key == other.key else 1.0, noise=0.10, seed=4)
    v2 = {x.engine: x for x in summarize_measurement(plan, close).verdicts}[engine]
    assert v2.pick == pick.label and v2.by == "prediction"


def test_failed_and_missing_launches_are_named_not_counted(plan):
    rows = fake_rows(plan, lambda key: 1.0)
    for r in rows:
        if r["kind"] == "backend":
            r.update({"status": "missing", "t_us": None, "error": "--system fa3 needs vLLM's FA3 build"})
    mt = summarize_measurement(plan, rows)
    backends = [m for m in mt.items if m.item.kind == "backend"]
    assert backends and all(m.steps == 0 and math.isnan(m.ratio.value) for m in backends)
    assert any("needs vLLM's FA3 build" in e for e in mt.errors)
    assert json.dumps(mt.to_dict(), allow_nan=False)  # no NaN reaches the JSON


def test_measured_file_round_trip_through_the_cli(plan, tmp_path):
    # the CLI plans with its default --measure-steps / --measure-leading: build the file from that plan
    inputs = tune_inputs("llama3.1-8b", tp=1, gpu="h200")
    res = tune_for(inputs, load_workload(workload="mix:prompt=3000,output=120,steps=60"), heuristics="none")
    cli_plan = plan_measurement(res, source="mix:prompt=3000,output=120,steps=60")
    path = tmp_path / "t.json"
    path.write_text(json.dumps(timings_doc(cli_plan, fake_rows(cli_plan, lambda key: 1.2), device="GPU X",
                                           complete=True)))
    r = runner.invoke(app, ["tune", *MODEL, "--measured", str(path), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)["measured"]
    assert doc["device"] == "GPU X" and len(doc["sampled_steps"]) == 16
    assert all(s["measured_vs_predicted"] == pytest.approx(1.2) for s in doc["settings"])
    assert set(doc["engines"]) == {"vllm", "sglang"}
    text = runner.invoke(app, ["tune", *MODEL, "--measured", str(path)], env={"COLUMNS": "120"})
    assert text.exit_code == 0 and "Measured on GPU X" in text.output and "pick by prediction" in text.output
    # timings of another workload are refused, with what differs
    bad = runner.invoke(app, ["tune", "-w", "mix:prompt=3000,output=120,steps=80", "-m", "llama3.1-8b", "--gpu",
                              "h200", "--heuristics", "none", "--measured", str(path)])
    assert bad.exit_code == 1 and "Error:" in bad.output and "num_steps" in bad.output


@pytest.mark.parametrize("args, needle", [
    (["--measure", "--measured", "x.json"], "either time on this GPU or read saved timings"),
    (["--save-measurements", "t.json"], "--save-measurements applies to --measure"),
    (["--measured", "no-such.json"], "no such file"),
    (["--measure", "--measure-steps", "1"], "--measure-steps 1"),
])
def test_option_errors(args, needle, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["tune", *MODEL, *args])
    assert r.exit_code != 0 and needle in r.output and "Traceback" not in r.output


def test_measure_without_a_gpu_fails_fast_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import decodecalc.verify.calibration as cal

    def no_gpu(what: str = "calibrate"):
        from decodecalc.errors import DecodecalcError
        raise DecodecalcError(f"{what} needs a CUDA GPU, and torch sees none")

    monkeypatch.setattr(cal, "cuda_or_error", no_gpu)
    t0 = time.monotonic()
    r = runner.invoke(app, ["tune", *MODEL, "--measure"])
    assert time.monotonic() - t0 < 10
    assert r.exit_code == 1 and "tune --measure needs a CUDA GPU" in r.output
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_keeps_the_timings_so_far(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import decodecalc.verify.tune_measure as vt

    monkeypatch.setattr(vt, "preflight", lambda plan, gpu, **kw: None)
    monkeypatch.setattr("decodecalc.commands.tune_measure._device_name", lambda: "GPU X")

    def interrupted(plan, gpu, *, save=None, progress=None, **kw):
        rows = fake_rows(plan, lambda key: 1.0)[:5]
        save(rows)
        raise KeyboardInterrupt

    monkeypatch.setattr(vt, "run_measurement", interrupted)
    out = tmp_path / "timings.json"
    r = runner.invoke(app, ["tune", *MODEL, "--measure", "--save-measurements", str(out)])
    assert r.exit_code == 130
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and len(doc["rows"]) == 5
    assert [p.name for p in tmp_path.iterdir()] == ["timings.json"]  # no temporary file left
