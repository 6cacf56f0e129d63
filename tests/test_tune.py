"""decodecalc tune: the search, its per-shape evaluation against a plain per-step loop, the CLI contract."""

from __future__ import annotations

import heapq
import json
import random

import pytest
from typer.testing import CliRunner

from decodecalc.cli import app
from decodecalc.launchers.sglang_triton import SglangSettings, plan_sglang
from decodecalc.launchers.vllm_unified import VllmSettings, plan_vllm
from decodecalc.reports.tune import make_context, parse_regression, tune
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.timemodel import launch_time_s, resolve_profile, work_for_plan
from decodecalc.timemodel.predict import _list_schedule_s
from decodecalc.traffic import DecodeStep, StepTrace
from decodecalc.workload import make_workload

runner = CliRunner()
EXAMPLE = "examples/workloads/long-context-ramp.jsonl"


def heap_makespan(durations, slots):
    """Oracle: place the programs one by one on the least-loaded slot (the time model's former loop)."""
    heap = [0.0] * slots
    for dur, k in durations:
        for _ in range(k):
            heapq.heapreplace(heap, heap[0] + dur)
    return max(heap)


def test_grouped_list_scheduling_equals_one_by_one():
    rng = random.Random(3)
    for _ in range(300):
        slots = rng.randint(1, 40)
        groups = sorted(((rng.choice([0.5, 1.0, 1.5, 2.0, 3.25, 7.0]) * rng.randint(1, 9), rng.randint(1, 30))
                         for _ in range(rng.randint(1, 6))), reverse=True)
        assert _list_schedule_s(groups, slots) == heap_makespan(groups, slots)


@pytest.fixture(scope="module")
def setup():
    model = resolve_model("llama3-8b")
    gpu = resolve_gpu("h200")
    return model, gpu, resolve_profile(gpu), make_workload(model)


def random_trace(seed=1, n=60, max_batch=40):
    rng = random.Random(seed)
    steps = []
    for k in range(n):
        b = rng.choice([1, 2, 3, 8, 13, 16, 17, 24, max_batch])
        steps.append(DecodeStep(seq_lens=tuple(rng.randint(1, 20000) for _ in range(b)), query_lens=(1,) * b,
                                weight=rng.choice([1, 1, 2]), origin=f"t, line {k + 1}"))
    steps.append(steps[0])  # a repeated shape
    return StepTrace(steps=tuple(steps), source="random")


def plain_loop(trace, work, gpu, profile, vllm, sglang):
    """Every step planned and timed from scratch, in order (what tune must equal)."""
    import dataclasses
    out = {"vllm": [], "sglang": []}
    for s in trace.steps:
        w = dataclasses.replace(work, seq_lens=s.seq_lens, query_lens=s.query_lens)
        vp = plan_vllm(w, gpu, vllm)
        run = vp.replay.plan if vp.replay is not None else vp.plan
        out["vllm"].append((launch_time_s(work_for_plan(run, w, "vllm"), profile), s.weight))
        sp = plan_sglang(w, gpu, sglang)
        out["sglang"].append((launch_time_s(work_for_plan(sp.plan, w, "sglang"), profile), s.weight))
    return out


@pytest.mark.parametrize("vllm, sglang", [
    (VllmSettings(), SglangSettings()),
    (VllmSettings(num_par_softmax_segments=64, min_launch_grid_size_2d=512), SglangSettings(max_kv_splits=32,
                                                                                          static_kv_splits=True)),
    (VllmSettings(cudagraph_mode="NONE", num_par_softmax_segments=4, min_launch_grid_size_2d=64),
     SglangSettings(max_kv_splits=2)),
])
def test_shape_evaluation_equals_a_plain_per_step_loop(setup, vllm, sglang):
    model, gpu, profile, work = setup
    trace = random_trace()
    ctx = make_context(trace, work, gpu, profile, vllm=vllm, sglang=sglang)
    assert len(ctx.shapes.shapes) == ctx.shapes.distinct == len({s.shape for s in trace.steps}) < len(trace.steps)
    ref = plain_loop(trace, work, gpu, profile, vllm, sglang)
    for engine, times in (("vllm", ctx.timer.vllm(vllm)), ("sglang", ctx.timer.sglang(sglang))):
        per_step = [times[i] for i in ctx.shapes.step_shape]
        assert per_step == pytest.approx([t for t, _ in ref[engine]], rel=1e-12)
        total = sum(t * w for t, w in ref[engine])
        from decodecalc.reports.tune_eval import stats
        assert stats(times, ctx.shapes).total_s == pytest.approx(total, rel=1e-12)


def test_default_candidate_is_the_engine_default_and_best_is_the_minimum(setup):
    model, gpu, profile, work = setup
    ctx = make_context(random_trace(2), work, gpu, profile)
    res = tune(ctx, max_regression=None)
    for engine, e in res.engines.items():
        assert e.candidates[0] is e.default
        ref = ctx.timer.vllm(VllmSettings()) if engine == "vllm" else ctx.timer.sglang(SglangSettings())
        assert e.default.times == ref
        # ranked as recommend ranks: by the robust score (occupancy +-1), reported with the plain prediction
        assert e.best.score.mean_step_s == min(c.score.mean_step_s for c in e.candidates)
        assert e.best.score.mean_step_s >= e.best.stats.mean_step_s * 0.5
    # the vLLM grid varies both constants
    settings = {tuple(c.setting.values()) for c in res.engines["vllm"].candidates}
    assert (16, 128) in settings and (64, 4096) in settings and len(settings) == 40


def test_guard_and_objective(setup):
    model, gpu, profile, work = setup
    ctx = make_context(random_trace(4), work, gpu, profile)
    strict = tune(ctx, max_regression=0.0)
    for e in strict.engines.values():
        assert all(b <= d * (1 + 1e-12) for b, d in zip(e.best.times, e.default.times))
    p99 = tune(ctx, objective="p99", max_regression=None)
    for e in p99.engines.values():
        assert e.best.score.p99_step_s == min(c.score.p99_step_s for c in e.candidates)


def test_parse_regression():
    assert parse_regression("5%") == pytest.approx(0.05)
    assert parse_regression("0.1") == pytest.approx(0.1)
    assert parse_regression("none") is None
    from decodecalc.errors import ConfigError
    for bad in ("5", "x%", "-1%"):
        with pytest.raises(ConfigError):
            parse_regression(bad)


def test_sampling_keeps_weights(setup):
    model, gpu, profile, work = setup
    trace = random_trace(5, n=80)
    ctx = make_context(trace, work, gpu, profile, max_shapes=10)
    assert ctx.shapes.sampled and len(ctx.shapes.shapes) == 10
    assert ctx.shapes.total_weight == trace.num_steps
    assert sorted(set(ctx.shapes.step_shape)) == list(range(10))


# ---------------------------------------------------------------------------------------------- CLI


def test_json_contract(tmp_path):
    out = tmp_path / "t.json"
    r = runner.invoke(app, ["tune", "--steps", EXAMPLE, "--json", "-o", str(out)])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert json.loads(out.read_text()) == d
    wl = d["workload"]
    assert wl["steps"] == 36 + 4 * 3  # 36 lines, four of them weight 4 and {"p50", "p90", "p99", "max"} <= set(wl["batch"]) and "generated_tokens" in wl
    for engine in ("vllm", "sglang"):
        e = d["engines"][engine]
        for key in ("default", "best"):
            assert {"setting", "mean_step_s", "p99_step_s", "total_s"} <= set(e[key])
        assert all({"setting", "mean_step_s", "p99_step_s", "total_s"} <= set(c) for c in e["candidates"])
        assert e["apply"] and isinstance(e["apply"], list)
        assert e["attention_s_per_1k_tokens"]["default"] > 0
    assert d["engines"]["vllm"]["default"]["setting"] == {"NUM_PAR_SOFTMAX_SEGMENTS": 16, "MIN_LAUNCH_GRID_SIZE_2D": 128}
    assert d["engines"]["sglang"]["default"]["setting"] == {"triton_attention_num_kv_splits": 8,
                                                           "static_kv_splits": False}
    names = [h["name"] for h in d["heuristics"]]
    assert "vllm-bound" in names and "sglang-pr27786" in names
    for h in d["heuristics"]:
        assert {"name", "engine", "mean_step_s", "p99_step_s", "vs_default", "vs_bound"} <= set(h)
        assert h["vs_bound"] >= -1e-12


def test_per_1k_tokens_is_total_times_layers_over_tokens():
    r = runner.invoke(app, ["tune", "--steps", EXAMPLE, "--json", "--heuristics", "none", "--engine", "vllm"])
    d = json.loads(r.stdout)
    e = d["engines"]["vllm"]
    want = e["default"]["total_s"] * d["layers"] / d["workload"]["generated_tokens"] * 1000
    assert e["attention_s_per_1k_tokens"]["default"] == pytest.approx(want)


def test_table_output_and_apply():
    r = runner.invoke(app, ["tune", "--workload", "agentic", "--heuristics", "none"])
    assert r.exit_code == 0, r.output
    assert "NUM_PAR_SOFTMAX_SEGMENTS" in r.output or "keep the default" in r.output
    assert "--triton-attention-num-kv-splits" in r.output or "keep the default" in r.output
    # backends: compared where the profile calibrates their families (FA3, FlashInfer CUDA cores on the H200), else
    # "not compared"; either way every lever has its line
    assert "backend vllm -> FlashInfer" in r.output and "backend sglang -> FlashAttention-3" in r.output


@pytest.mark.parametrize("content, args, needle", [
    ('{"seq_lens": [10, 20]}\n{"seq_lens": [5, "x"]}\n', [], "line 2, field 'seq_lens'"),
    ("", [], "empty"),
    ('{"seq_lens": [10, 20, 30]}\n', ["--max-num-seqs", "2"], "line 1, field 'seq_lens': 3 sequences"),
    ('{"seq_lens": [10, 0]}\n', [], "line 1, field 'seq_lens': lengths must be >= 1"),
    ('{"seq_lens": [10]}\n', ["--heuristics", "nope"], "unknown heuristic 'nope'"),
])
def test_bad_input_errors(tmp_path, content, args, needle):
    f = tmp_path / "w.jsonl"
    f.write_text(content)
    out = tmp_path / "o.json"
    r = runner.invoke(app, ["tune", "--steps", str(f), "--json", "-o", str(out), *args])
    assert r.exit_code == 1
    assert r.stdout == ""
    assert "Error:" in r.stderr and needle in r.stderr, r.stderr
    if "heuristic" not in needle:
        assert str(f) in r.stderr
    assert not out.exists()


def test_unknown_preset_and_conflicting_sources(tmp_path):
    r = runner.invoke(app, ["tune", "--workload", "chatty"])
    assert r.exit_code == 1 and "unknown workload preset 'chatty'" in r.stderr
    r = runner.invoke(app, ["tune", "--workload", "chat", "--steps", EXAMPLE])
    assert r.exit_code == 1 and "exactly one workload" in r.stderr
    r = runner.invoke(app, ["tune"])
    assert r.exit_code == 1 and "exactly one workload" in r.stderr


def test_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "t.png"
    r = runner.invoke(app, ["tune", "--steps", EXAMPLE, "--heuristics", "none", "--plot", str(png), "--json"])
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*tmp*"))  # written through a temporary file, nothing left behind
