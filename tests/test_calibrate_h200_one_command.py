"""The one command on the H200 (BENCHMARKS.md, "The one command on the H200, measured"; issue 18, item 5), recomputed
from the committed records: the two device calls' saved timings (`results/calibrate-grid-map-h200-*`), the profile
fitted from them, and its row of the calibrate-map table (`results/calibrate-map-experiment-h200.json`)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from decodecalc.timemodel import load_profile_file

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BENCH = (ROOT / "BENCHMARKS.md").read_text()
NAME = "calibrate --grid on the H200 (from scratch), its own map steps"


def _saved(name: str) -> dict:
    return json.loads(gzip.decompress((RESULTS / name).read_bytes()))


def test_the_two_calls_timed_the_one_commands_plan_and_their_times_are_the_texts():
    first = _saved("calibrate-grid-map-h200-measurements.json.gz")
    second = _saved("calibrate-grid-map-h200-backends-measurements.json.gz")
    only = _saved("calibrate-grid-map-h200-backends-only-measurements.json.gz")
    assert first["device_name"] == second["device_name"] == "NVIDIA H200"
    assert first["pending"] == ["backends"] and "backend_cases" not in first  # saved before the backends, then cut
    assert len(first["cases"]) == 509 and sum(len(r["rows"]) for r in first["map_steps"]) == 1488
    # the backends-only file is the second call's runs without its three --quick shapes, nothing else changed
    assert only["cases"] == [] and only["backend_cases"] == second["backend_cases"] and len(second["backend_cases"]) == 2244
    assert {k: v for k, v in only.items() if k not in ("cases", "note")} == {k: v for k, v in second.items() if k != "cases"}
    el = first["elapsed"]
    log = (RESULTS / "calibrate-grid-map-h200-backends.log").read_text()
    took = re.search(r"took (\d+) s: the Triton kernels \d+ s, the backends (\d+) s", log)
    assert took and round(second["elapsed"]["backends_s"]) == int(took.group(2)) == 198
    text = f"**the plan's kernels {el['triton_s']:.0f} s, the map steps {el['map_s']:.0f} s**"
    assert text in BENCH and f"**the backends {int(took.group(2))} s**" in BENCH
    assert el["triton_s"] + el["map_s"] + second["elapsed"]["backends_s"] > 0.9 * 600  # over 10 minutes with the fit


def test_the_profile_is_those_timings_fitted():
    prof = load_profile_file(RESULTS / "calibrate-grid-map-h200.yaml")
    fit = prof.fit
    assert prof.calibrated and prof.gpu == "h200" and prof.residuals is not None
    assert fit["rows"] == 1997 and fit["map_steps"]["timings"] == 1488
    assert sum(f["rows"] for f in fit["backend_calibration"]["families"].values()) == 2244
    assert [n for n, f in fit["backend_calibration"]["families"].items() if f["calibrated"]] == ["fa3_fwd"]
    assert "1,997 Triton timings, in sample " + f"{fit['median_abs_err']:.1%} / {fit['p90_abs_err']:.1%}" in BENCH


def test_its_row_recomputes_and_the_ratios_are_the_texts():
    from benchmarks.calibrate_map_experiment import OUT, cell

    doc = json.loads(OUT.read_text())
    row, shipped = doc["variants"][NAME], doc["variants"]["shipped"]
    got = cell(load_profile_file(RESULTS / "calibrate-grid-map-h200.yaml"), "layouts")
    assert got["within_5pct"] == row["layouts"]["within_5pct"]
    assert got["median_abs_error"] == pytest.approx(row["layouts"]["median_abs_error"], abs=1e-6)
    ratios = {v: row[v]["median_abs_error"] / shipped[v]["median_abs_error"]
              for v in ("heldout", "range", "layouts", "layouts2", "layouts3")}
    text = ", ".join(f"`{v}` {r:.2f}x" for v, r in ratios.items())
    assert f"**{text}**" in BENCH
    assert sum(r <= 1.5 for r in ratios.values()) == 4 and ratios["layouts2"] > 1.5  # "within 1.5x on four"
