"""BENCHMARKS.md's "Other backends on whole workloads" recomputed from the committed H200 run (issue 18: every
backend's workload total within 5%, the fastest backend picked): the table and the counts under the shipped
profile, with the steps re-derived from the workloads (the run stored them; a change to the workloads fails)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from benchmarks.validate_backends_workload_h200 import RESULTS, compare, table

ROOT = Path(__file__).resolve().parents[1]
TRITON = ("validate_tune_h200_in_graph.json", "validate_tune_h200_top0_chat.json", "validate_tune_h200_top0_405b.json")


def test_the_table_and_the_counts_are_the_committed_runs():
    with contextlib.redirect_stdout(io.StringIO()):
        got = compare(RESULTS / "validate-backends-workload-h200.json", [RESULTS / t for t in TRITON])
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert table(got) in text
    assert (f"**Not met: {got['within_5pct']} of {got['backend_totals']} backend totals within 5%, the fastest "
            f"system picked on {got['fastest_picked']} of {got['cases']}") in " ".join(text.split())
    assert got["cases"] == 7 and got["backend_totals"] == 21
    # every case has all three backend paths and both Triton defaults measured
    for row in got["rows"]:
        assert len(row["totals"]) == 5, row["model"]
