"""The shipped time profile against the committed H200 measurements of workloads (BENCHMARKS.md, "tune on the
H200"): the per-step timings of sampled workload steps and the workload totals of a run whose steps no fit
used. Both are recomputed from the committed JSON with the profile of the day, so a change to the time model
or the profile that makes tune's predictions worse fails here.

Sources: benchmarks/results/validate_tune_h200_steps.json (`validate_tune_h200.py --per-step 20`: 2,697
launches of 120 steps of Llama-3.1-8B TP1 / 70B TP8 chat, long-doc-qa, agentic), and
benchmarks/results/validate_tune_h200_fresh.json (`--skip-steps 200`: steps 200-399 of the same presets, every
candidate of the search and every heuristic, one CUDA graph per (workload, setting)).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from benchmarks.fit_timemodel import load_steps
from benchmarks.validate_tune_h200 import repredict
from decodecalc.timemodel import launch_time_s, packaged_profile

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def test_per_step_timings_are_predicted_within_their_recorded_accuracy():
    ms, _ = load_steps([RESULTS / "validate_tune_h200_steps.json"])
    assert len(ms) == 2697 and {m.kernel for m in ms} == {"vllm", "sglang"}
    prof = packaged_profile("h200")
    assert prof is not None
    errs = {k: [abs(launch_time_s(m.work, prof) / m.time_s - 1) for m in ms if m.kernel == k] for k in ("vllm", "sglang")}
    # BENCHMARKS.md "time model", per-step workload data: the shipped profile's median |error| per engine
    assert statistics.median(errs["sglang"]) <= 0.035
    assert statistics.median(errs["vllm"]) <= 0.045
    assert max(max(e) for e in errs.values()) < 0.25


@pytest.mark.parametrize("path", ["validate_tune_h200_fresh.json"])
def test_workload_totals_of_unseen_steps(path):
    rep = repredict(RESULTS / path)
    # BENCHMARKS.md "tune on the H200", fresh run: totals within 5% and picks within 3% of the best measured
    assert rep["settings"] == 354
    assert rep["within_5pct"] >= 245
    assert rep["median_abs_error"] <= 0.04
    assert rep["max_abs_error"] <= 0.13
    assert rep["picks_within_3pct"] >= 11 and rep["engines"] == 12
