"""The one command on the H200 (docs/lab/2026-12-04-calibrate-h200.md, "The one command on the H200, measured"; issue 18,
item 5), recomputed from the committed records: the profile fitted from the two device calls' saved timings, and its
row of the calibrate-map table (`results/calibrate-map-experiment-h200.json`). The calls' records themselves and the
note's times are checked by benchmarks/record_checks.py (tests/test_benchmarks_tables.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decodecalc.timemodel import load_profile_file

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BENCH = (ROOT / "docs" / "lab" / "2026-12-04-calibrate-h200.md").read_text()  # the run's lab note
NAME = "calibrate --grid on the H200 (from scratch), its own map steps"


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
