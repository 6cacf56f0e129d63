"""`calibrate --workload` (issue 18): the launches it times for sampled steps of the user's traffic
(decodecalc/reports/step_launches.py), the fit of their layout cells, its saved timings read back, its bad input,
and the H200 device runs reproduced from their timings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from helpers import fit_without_inherited
from typer.testing import CliRunner

from decodecalc.cli import app
from decodecalc.launchers.sglang_triton import plan_sglang
from decodecalc.launchers.vllm_unified import plan_vllm
from decodecalc.reports.step_launches import (
    candidate_step_launches,
    sample_steps,
    timed_candidates,
    workload_sample,
)
from decodecalc.reports.tune_space import engine_settings

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "benchmarks" / "results" / "calibrate-workload"
runner = CliRunner()


@given(st.integers(1, 5000), st.integers(1, 64))
def test_sampled_steps_are_evenly_spread_and_distinct(n, k):
    got = sample_steps(n, k)
    assert got == sorted(set(got)) and all(0 <= i < n for i in got)
    assert len(got) == min(n, k)
    if n > k > 1:  # first and last step, gaps that differ by at most one step
        assert got[0] == 0 and got[-1] == n - 1
        gaps = {b - a for a, b in zip(got, got[1:])}
        assert max(gaps) - min(gaps) <= 1


@pytest.fixture(scope="module")
def chat_result():
    from decodecalc.api import load_workload, tune_for, tune_inputs

    steps = [{"seq_lens": [300 + 40 * j + i for j in range(5)]} for i in range(12)]
    return tune_for(tune_inputs("llama3-8b", tp=1, gpu="h200"), load_workload(steps=steps), heuristics="none")


def test_each_launch_is_what_the_launcher_modules_plan_for_its_settings(chat_result):
    """Every timed launch is the launch plan_vllm / plan_sglang make for each setting it is listed under (the module
    only reads their plans), and one step never has the same launch twice."""
    ctx = chat_result.ctx
    launches = candidate_step_launches(chat_result, [0, 11])
    assert {x.step for x in launches} == {0, 11}
    by_label = {(e, c.label): c for e, et in chat_result.engines.items() for c in et.candidates}
    import dataclasses

    for x in launches:
        work = dataclasses.replace(ctx.work, seq_lens=x.seq_lens, query_lens=(1,) * len(x.seq_lens))
        for label in x.settings:
            st_ = engine_settings(ctx, x.engine, by_label[(x.engine, label)].setting)
            if x.engine == "vllm":
                p = plan_vllm(work, ctx.gpu, st_)
                assert x.launch["batch_run"] == (p.replay.num_reqs_padded if p.replay else len(x.seq_lens))
                assert x.launch["segments"] == (p.backend.num_par_softmax_segments if x.launch["use_3d"] else 1)
            else:
                p = plan_sglang(work, ctx.gpu, st_)
                assert x.launch["splits"] == list(p.num_kv_splits) and x.launch["max_kv_splits"] == p.max_kv_splits
                assert x.engine_split_kernel == (p.mode == "adaptive")
    keys = [(x.step, x.engine, json.dumps(dict(x.launch), sort_keys=True)) for x in launches]
    assert len(keys) == len(set(keys))
    # five sequences run as the FULL graph's padded batch of 8 (vLLM's capture sizes)
    assert all(x.launch["batch_run"] == 8 for x in launches if x.engine == "vllm")


def test_the_timed_settings_are_the_default_the_pick_and_the_leading_candidates(chat_result):
    for et in chat_result.engines.values():
        got = timed_candidates(et, "mean", 2)
        assert got[0] is et.default and et.best in got and len(got) <= 4
        assert len({(c.stats.mean_step_s, c.stats.total_s) for c in got[2:]}) == len(got[2:])
        assert timed_candidates(et, "mean", -1) == list(et.candidates)


def test_the_saved_record_holds_what_a_refit_needs(chat_result):
    s = workload_sample(chat_result, 3, model="llama3-8b", tp=1, source="steps")
    doc = s.saved([x.row() | {"t_us": 10.0} for x in s.launches])
    assert doc["sampled_steps"] == [0, 6, 11] and (doc["num_heads"], doc["num_kv_heads"], doc["head_size"]) == (32, 8, 128)
    assert len(doc["rows"]) == len(s.launches) and {r["shape_index"] for r in doc["rows"]} == {0, 6, 11}


def _measured(tmp_path: Path, chat_result, factor: float = 1.2) -> Path:
    """A --save-measurements file of calibrate --workload --keep-physics whose timings are the packaged physics'
    predictions times ``factor`` (what a GPU with a layout 20% slower than modelled would give)."""
    from decodecalc.timemodel import launch_time_s, packaged_profile
    from decodecalc.timemodel.calibration_fit import workload_measurements

    s = workload_sample(chat_result, 4, model="llama3-8b", tp=1, source="my-steps.jsonl")
    rows = [x.row() | {"t_us": 1.0, "status": "ok"} for x in s.launches]
    prof = packaged_profile("h200")
    for r, m in zip(rows, workload_measurements(s.saved(rows))):
        r["t_us"] = launch_time_s(m.work, prof) * 1e6 * factor
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"gpu": "h200", "num_sms": 132, "launch_overhead_s": 2e-6, "device_name": "NVIDIA H200",
                                "cases": [], "workload": s.saved(rows)}))
    return path


def test_from_measurements_gives_the_layout_cells_of_the_sampled_steps(tmp_path, chat_result):
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--from-measurements", str(_measured(tmp_path, chat_result)),
                              "--keep-physics", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "sampled steps of 12; median error on them 16.7% before the layout cells" in " ".join(res.output.split())
    prof = yaml.safe_load(out.read_text())
    wl = prof["fit"]["workload"]
    assert wl["median_abs_err_before"] == pytest.approx(1 - 1 / 1.2, abs=2e-3)
    assert wl["median_abs_err_after"] < 0.02 and wl["sampled_steps"] == [0, 4, 7, 11]
    assert any(c.endswith("/g4/d128/kv8") for c in prof["residuals"]["cells"])
    # dense samples of one traffic: the layout cells get their local term (calibrate --model's do not)
    assert prof["residuals"]["layout_local_bandwidth_octaves"] == 0.35
    assert prof["residuals"]["layout_local_prior_launches"] == 0.1
    assert "4 sampled steps of my-steps.jsonl under the engines' own launches" in prof["source"]


@pytest.mark.parametrize("field, value, says", [
    ("num_kv_heads", 3, "not a multiple"),
    ("head_size", 0, "field 'head_size'"),
    ("sampled_steps", [], "field 'sampled_steps'"),
    ("rows", "x", "field 'rows'"),
    ("model", "", "field 'model'"),
])
def test_a_bad_saved_workload_record_is_refused(tmp_path, chat_result, field, value, says):
    path = _measured(tmp_path, chat_result)
    data = json.loads(path.read_text())
    data["workload"][field] = value
    path.write_text(json.dumps(data))
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--from-measurements", str(path), "--keep-physics", "-o", str(out)])
    assert res.exit_code == 1 and res.output.startswith("Error:") and says in res.output, res.output
    assert res.output.count("\n") == 1 and not out.exists()


@pytest.mark.parametrize("row_change, says", [
    ({"t_us": -1}, "field 't_us'"),
    ({"engine": "trtllm"}, "field 'engine'"),
    ({"seq_lens": [1, "x"]}, "field 'seq_lens'"),
    ({"launch": {"engine": "vllm", "use_3d": "yes", "segments": 4}}, "field 'launch'"),
])
def test_a_bad_saved_step_row_is_refused_with_its_index(tmp_path, chat_result, row_change, says):
    path = _measured(tmp_path, chat_result)
    data = json.loads(path.read_text())
    data["workload"]["rows"][3].update(row_change)
    path.write_text(json.dumps(data))
    res = runner.invoke(app, ["calibrate", "--from-measurements", str(path), "--keep-physics", "-o",
                              str(tmp_path / "p.yaml")])
    assert res.exit_code == 1 and "workload: rows[3]" in res.output and says in res.output, res.output


@pytest.mark.parametrize("args, says", [
    (["-w", "chat"], "--workload needs exactly one --model"),
    (["-w", "chat", "-m", "llama3-8b", "-m", "qwen3-32b"], "got 2"),
    (["-m", "llama3-8b", "-w", "chat", "--sample-steps", "0"], "--sample-steps 0"),
    (["-m", "llama3-8b", "--sample-steps", "4"], "--sample-steps applies to a workload"),
    (["-m", "llama3-8b", "-w", "chat", "--from-measurements", "x.json"], "--workload with --from-measurements"),
    (["-m", "deepseek-v3", "-w", "chat"], "uses MLA"),
    (["-m", "llama3-8b", "-w", "nonsense"], "nonsense"),
])
def test_bad_workload_options_fail_before_any_gpu_work(args, says):
    res = runner.invoke(app, ["calibrate", *args])
    assert res.exit_code == 1 and res.output.startswith("Error:") and says in res.output, res.output
    assert res.output.count("\n") == 1


def test_a_bad_request_trace_fails_before_the_gpu_is_looked_at(tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-5,10\n")
    res = runner.invoke(app, ["calibrate", "-m", "llama3-8b", "--requests", str(bad)])
    assert res.exit_code == 1 and str(bad) in res.output and "CUDA" not in res.output, res.output


@pytest.mark.parametrize("case", sorted(p.name.removesuffix("-measurements.json") for p in RUNS.glob("*-measurements.json")))
def test_the_device_runs_are_reproduced_from_their_timings(tmp_path, case):
    """Each `calibrate -m MODEL --tp TP --steps FILE --keep-physics --save-measurements` of
    benchmarks/calibrate_workload_h200.py --run (H200, 2026-12-02): its saved timings give the same profile here."""
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--from-measurements", str(RUNS / f"{case}-measurements.json"),
                              "--keep-physics", "-o", str(out)])
    assert res.exit_code == 0, res.output
    got, ref = yaml.safe_load(out.read_text()), yaml.safe_load((RUNS / f"{case}.yaml").read_text())
    # (the starting profile's backend records ride along unchanged; they move when the packaged profile's do)
    assert got["residuals"]["cells"] == ref["residuals"]["cells"]
    assert fit_without_inherited(got["fit"]) == fit_without_inherited(ref["fit"])
    assert ref["fit"]["workload"]["timings"] >= 60


def test_a_full_fit_with_a_workload_fits_the_physics_and_adds_the_workloads_cells(tmp_path):
    """Without --keep-physics: the physics is fitted on calibrate's shapes, and the layout cells come from the
    workload's steps, over the new physics (the saved timings of two H200 runs joined)."""
    res_dir = ROOT / "benchmarks" / "results"
    shapes = json.loads((res_dir / "calibrate-h200-measurements.json").read_text())
    steps = json.loads((RUNS / "qwen3-32b-chat-measurements.json").read_text())
    path = tmp_path / "both.json"
    path.write_text(json.dumps({**shapes, "workload": steps["workload"]}))
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--from-measurements", str(path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    prof = yaml.safe_load(out.read_text())
    assert prof["fit"]["rows"] == len(shapes["cases"]) + prof["fit"]["workload"]["timings"]
    cells = prof["residuals"]["cells"]
    assert any(c.endswith("/g8/d128/kv8") for c in cells) and any(c.endswith("/g8/d128") for c in cells)
    assert prof["residuals"]["layout_local_bandwidth_octaves"] == 0.35
    # the same shapes alone: no layout cell, and other physics than the starting profile's
    alone = tmp_path / "alone.yaml"
    assert runner.invoke(app, ["calibrate", "--from-measurements", str(res_dir / "calibrate-h200-measurements.json"),
                               "-o", str(alone)]).exit_code == 0
    bare = yaml.safe_load(alone.read_text())
    assert not any("/kv" in c for c in bare["residuals"]["cells"]) and bare["families"] == prof["families"]


def test_tune_says_whose_traffic_the_profiles_layout_cells_come_from():
    prof = RUNS / "qwen3-32b-chat.yaml"
    args = ["tune", "-m", "qwen3-32b", "-w", "chat", "--engine", "vllm", "--heuristics", "none", "--profile", str(prof)]
    res = runner.invoke(app, args + ["--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)["profile"]["workload"]
    assert got == {"source": yaml.safe_load(prof.read_text())["fit"]["workload"]["source"], "model": "qwen3-32b",
                   "tp": 1, "sampled_steps": 6}
    text = runner.invoke(app, args)
    assert "its layout cells come from 6 sampled steps of" in " ".join(text.output.split())
    plain = runner.invoke(app, args[:-2] + ["--json"])  # the packaged profile: no such record
    assert "workload" not in json.loads(plain.output)["profile"]
