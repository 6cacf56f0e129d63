"""The shipped time profile against the committed H200 measurements of workloads (BENCHMARKS.md, "tune on the
H200"): the per-step timings of sampled workload steps and the workload totals of a run whose steps no fit
used. Both are recomputed from the committed JSON with the profile of the day, so a change to the time model
or the profile that makes tune's predictions worse fails here.

Sources: benchmarks/results/validate_tune_h200_steps.json (`validate_tune_h200.py --per-step 20`: 2,697
launches of 120 steps of Llama-3.1-8B TP1 / 70B TP8 chat, long-doc-qa, agentic), and
benchmarks/results/validate_tune_h200_fresh.json (`--skip-steps 200`: steps 200-399 of the same presets, every
candidate of the search and every heuristic, one CUDA graph per (workload, setting)) and
benchmarks/results/validate_tune_h200_fresh2.json (`--skip-steps 400`: steps 400-599, measured after the profile
was fitted; its bounds store their launches, so they are re-predicted too), and fresh3 / fresh4 / fresh5 (steps
600-799, 1000-1199, 1200-1399; fresh5 measured after the last change to the model and the pick rule).
"""

from __future__ import annotations

import functools
import statistics
from pathlib import Path

import pytest

from benchmarks.fit_timemodel import load_steps
from benchmarks.validate_tune_h200 import (
    exact_context,
    forced_time_s,
    launch_recipe,
    plan_entries,
    recipe_time_s,
    repredict,
    uses_engine_rule,
    vllm_forced,
    workload_trace,
)
from decodecalc.reports.heuristics import score_heuristics, select_heuristics
from decodecalc.reports.tune import tune
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.timemodel import launch_time_s, packaged_profile, resolve_profile
from decodecalc.workload import make_workload

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


@functools.cache
def _repredict(name: str) -> dict:
    return repredict(RESULTS / name)


def test_per_step_timings_are_predicted_within_their_recorded_accuracy():
    ms, _ = load_steps([RESULTS / "validate_tune_h200_steps.json"])
    assert len(ms) == 2697 and {m.kernel for m in ms} == {"vllm", "sglang"}
    prof = packaged_profile("h200")
    assert prof is not None
    errs = {k: [abs(launch_time_s(m.work, prof) / m.time_s - 1) for m in ms if m.kernel == k] for k in ("vllm", "sglang")}
    # BENCHMARKS.md "time model", per-step workload data: the shipped profile's median |error| per engine (in-sample
    # for the residual map, which these timings feed)
    assert statistics.median(errs["sglang"]) <= 0.015
    assert statistics.median(errs["vllm"]) <= 0.016
    assert max(max(e) for e in errs.values()) < 0.25


# BENCHMARKS.md "tune on the H200": (settings, totals within 5% at least, median at most, worst at most, picks)
FRESH_RUNS = {
    "validate_tune_h200_fresh.json": (354, 335, 0.012, 0.11, 12),
    "validate_tune_h200_fresh2.json": (354, 333, 0.013, 0.08, 12),
    "validate_tune_h200_fresh3.json": (354, 350, 0.012, 0.07, 12),
    "validate_tune_h200_fresh4.json": (354, 344, 0.014, 0.085, 12),
    "validate_tune_h200_fresh5.json": (354, 349, 0.013, 0.08, 12),
}
#: the runs whose bounds stored their launches (so every row is re-predicted with today's model): the issue's goal,
#: every (workload, setting) that tune reports (default, pick, heuristics, bounds) within 5%
GOAL_RUNS = ("validate_tune_h200_fresh3.json", "validate_tune_h200_fresh4.json", "validate_tune_h200_fresh5.json")


@pytest.mark.parametrize("path", sorted(FRESH_RUNS))
def test_workload_totals_of_unseen_steps(path):
    settings, within, median, worst, picks = FRESH_RUNS[path]
    rep = _repredict(path)
    # totals within 5% and picks within 3% of the best measured, with the shipped profile
    assert rep["settings"] == settings
    assert rep["within_5pct"] >= within
    assert rep["median_abs_error"] <= median
    assert rep["max_abs_error"] <= worst
    assert rep["picks_within_3pct"] >= picks and rep["engines"] == 12


@pytest.mark.parametrize("path", GOAL_RUNS)
def test_every_reported_setting_within_5_percent(path):
    rep = _repredict(path)
    goal = [r for r in rep["rows"] if r["kind"] != "candidate"]
    assert len(goal) == 58
    assert [(r["model"], r["workload"], r["setting"], round(r["error"], 3)) for r in goal if abs(r["error"]) > 0.05] == []


def test_stored_bound_launches_are_predicted_as_their_search_made_them():
    # a bound's launches (launch_recipe per shape) are re-predicted by recipe_time_s: a launch some candidate makes
    # takes that candidate's prediction (its CUDA-graph padding included); a forced one is predicted as the bound
    # forces it
    gpu = resolve_gpu("h200")
    ctx = exact_context(workload_trace("chat", 12), make_workload(resolve_model("llama3.1-8b"), tp=1), gpu,
                        resolve_profile(gpu))
    result = tune(ctx, objective="mean", max_regression=0.05)
    scores = {s.name: s for s in score_heuristics(ctx, result, select_heuristics(None, None))}
    entries = [e for e in plan_entries(ctx, result, scores, -1) if e["kind"] != "bound"]
    for e in entries:
        for i, spec in enumerate(e["specs"]):
            assert recipe_time_s(ctx, entries, e["engine"], i, launch_recipe(spec),
                                 engine_rule=uses_engine_rule(e)) == pytest.approx(e["predicted"][i])
    b = int(ctx.steps.batch[0])
    forced = launch_recipe(vllm_forced(4096, b))  # 4,096 segments: no candidate of the search launches it
    assert not any(launch_recipe(e["specs"][0]) == forced for e in entries if e["engine"] == "vllm")
    assert recipe_time_s(ctx, entries, "vllm", 0, forced) == forced_time_s(ctx, 0, 4096)


def test_the_whole_range_on_a_real_trace():
    """BENCHMARKS.md "tune on real traffic": every candidate of the engines' whole range measured on the H200 on a
    long-context mix and the first 216 requests of the Azure 2023 conversation trace (8 case-engine pairs); today's
    model keeps at least the recorded 399 of 608 totals within 5% and 5 of 8 picks within 3% of the best measured
    (the replayed trace's steps are stored in the JSON: the trace file itself is not needed)."""
    rep = _repredict("validate_tune_h200_range.json")
    assert rep["settings"] == 608 and rep["engines"] == 8
    assert rep["within_5pct"] >= 399 and rep["median_abs_error"] <= 0.031
    assert rep["picks_within_3pct"] >= 5


def test_head_layouts_no_fit_saw():
    """BENCHMARKS.md "tune on head layouts no fit saw": qwen2.5-7b (28:4), llama3.2-1b (32:8 d64) and gemma-3-27b
    TP2 (16:8) on code completion, replayed on the H200; today's model keeps at least the recorded 44 of 66 totals
    within 5% and 3 of 6 picks within 3% of the best measured (the second run, 174 totals, is checked by the same
    arithmetic in BENCHMARKS.md; it is left out here for CI time)."""
    rep = _repredict("validate_tune_h200_layouts.json")
    assert rep["settings"] == 66 and rep["engines"] == 6
    assert {r["model"] for r in rep["rows"]} == {"qwen2.5-7b", "llama3.2-1b", "gemma-3-27b"}
    assert rep["within_5pct"] >= 44 and rep["median_abs_error"] <= 0.034
    # 3 of 6 under the worst-step guard; 4 under the p99 guard widened by the model's launch error (issue 43)
    assert rep["picks_within_3pct"] >= 4


def test_four_more_head_layouts_no_fit_saw():
    """BENCHMARKS.md "tune on head layouts no fit saw", the second run: qwen3-32b (64:8), llama3-405b TP8 (16:1),
    mistral-large TP8 (12:1) and gemma-2-9b (16:8 d256), chat and a long-prompt mix, replayed on the H200; today's
    model keeps at least the recorded 64 of 175 totals within 5% (median 6.8%) and 14 of 16 picks within 3%."""
    rep = _repredict("validate_tune_h200_layouts3.json")
    assert rep["settings"] == 175 and rep["engines"] == 16
    assert {r["model"] for r in rep["rows"]} == {"qwen3-32b", "llama3-405b", "mistral-large", "gemma-2-9b"}
    assert rep["within_5pct"] >= 64 and rep["median_abs_error"] <= 0.069
    # 14 of 16 under the worst-step guard; 13 under the p99 guard widened by the model's launch error (issue 43):
    # qwen3-32b chat on SGLang now picks adaptive 4 (p99 step ratio 1.055, within 5% + the 6.8% median launch error
    # of a layout no fit saw; predicted 9.7% faster, measured 8.7% slower), while test_head_layouts_no_fit_saw gains
    # one (3 -> 4 of 6): 17 of 22 either way
    assert rep["picks_within_3pct"] >= 13


@pytest.mark.parametrize("name", ["fresh5", "range", "layouts", "layouts3"])
def test_the_committed_comparisons_are_todays_predictions(name):
    """BENCHMARKS.md's table of these runs is rendered from their committed comparisons (benchmarks/tables.py): each is
    what today's model and tune predict for its run. A change to either fails here until the comparison is re-run
    (`python -m benchmarks.validate_tune_h200 --repredict RUN --out RUN_compare.json`, then `python -m benchmarks.tables`)."""
    import json

    rep = _repredict(f"validate_tune_h200_{name}.json")
    committed = json.loads((RESULTS / f"validate_tune_h200_{name}_compare.json").read_text())
    for key in ("settings", "within_5pct", "picks_within_3pct", "engines"):
        assert rep[key] == committed[key], key
    for key in ("median_abs_error", "max_abs_error"):
        assert rep[key] == pytest.approx(committed[key], abs=5e-4), key
