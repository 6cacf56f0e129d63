"""The leave-out accuracy tables (benchmarks/results/leaveout-timemodel-h200.md, written by
benchmarks/leaveout_timemodel.py) against the per-row data they were computed from (leaveout-timemodel-h200.json).

Pure recomputation, no fit: every number in the Markdown tables is recomputed here from the stored measured and
predicted times (with this file's own statistics, not the script's), and every fold's left-out rows are checked to be
exactly one whole group, sharing no group key with the fold's training rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
JSON_PATH = RESULTS / "leaveout-timemodel-h200.json"
MD_PATH = RESULTS / "leaveout-timemodel-h200.md"
#: the row table's column holding each fold kind's group key
GROUP_COLUMN = {"layout": "layout", "preset": "preset", "model": "workload_model"}


@pytest.fixture(scope="module")
def res() -> dict:
    assert JSON_PATH.exists(), f"{JSON_PATH} is missing (benchmarks/leaveout_timemodel.py writes it)"
    return json.loads(JSON_PATH.read_text())


@pytest.fixture(scope="module")
def md_rows() -> dict[tuple[str, ...], list[str]]:
    """Table lines of the Markdown up to the same-rows table, keyed by their label cells: (label,) for the two fold
    tables, (label, kernel) for the by-kernel table."""
    assert MD_PATH.exists(), f"{MD_PATH} is missing (benchmarks/leaveout_timemodel.py --report writes it)"
    out: dict[tuple[str, ...], list[str]] = {}
    for line in MD_PATH.read_text().split("## The same rows")[0].splitlines():  # the fold and by-kernel tables
        if not line.startswith("| ") or line.startswith("| left out"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        key = (cells[0], cells[1]) if cells[1] in ("vllm", "sglang", "reference") else (cells[0],)
        assert key not in out, f"table row {key} appears twice"
        out[key] = cells
    return out


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _stats(meas: list[float], pred: list[float]) -> dict[str, float]:
    e = [abs(p / m - 1.0) for m, p in zip(meas, pred)]
    return {"rows": len(e), "median": _percentile(e, 0.5), "p90": _percentile(e, 0.9), "worst": max(e),
            "within": sum(x <= 0.05 for x in e) / len(e)}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _label(fold: dict) -> str:
    return fold["value"] if fold["kind"] == "layout" else f"{fold['kind']} {fold['value']}"


def _kernel(k: str) -> str:
    return "reference" if k.startswith("reference") else k


def _sides(res: dict, fold: dict) -> tuple[list[int], list[int]]:
    left = set(fold["left_out"])
    n = len(res["rows"]["measured_us"])
    return sorted(left), [i for i in range(n) if i not in left]


def test_every_fold_is_in_the_tables(res, md_rows):
    assert res["folds"], "no fold in the JSON"
    labels = {_label(f) for f in res["folds"].values()}
    assert labels == {k[0] for k in md_rows if len(k) == 1}


def test_fold_tables_recomputed_from_rows(res, md_rows):
    meas = res["rows"]["measured_us"]
    for name, fold in res["folds"].items():
        assert len(fold["physics_us"]) == len(fold["map_us"]) == len(meas), name
        left, train = _sides(res, fold)
        st = {(side, model): _stats([meas[i] for i in idx], [fold[f"{model}_us"][i] for i in idx])
              for side, idx in (("left", left), ("train", train)) for model in ("physics", "map")}
        want = [_label(fold), str(len(left))]
        for model in ("physics", "map"):
            want += [_pct(st["left", model][q]) for q in ("median", "p90", "worst", "within")]
        want.append(str(len(train)))
        for model in ("physics", "map"):
            want += [_pct(st["train", model][q]) for q in ("median", "p90", "within")]
        moved = sum(abs(fold["map_us"][i] / fold["physics_us"][i] - 1.0) > 0.005 for i in left) / len(left)
        want.append(_pct(moved))
        assert md_rows[(_label(fold),)] == want, name


def test_kernel_table_recomputed_from_rows(res, md_rows):
    meas, kernels = res["rows"]["measured_us"], res["rows"]["kernel"]
    seen = 0
    for name, fold in res["folds"].items():
        left, train = _sides(res, fold)
        for k in ("vllm", "sglang", "reference"):
            lk = [i for i in left if _kernel(kernels[i]) == k]
            tk = [i for i in train if _kernel(kernels[i]) == k]
            if not lk:
                assert (_label(fold), k) not in md_rows
                continue
            want = [_label(fold), k, str(len(lk))]
            for model in ("physics", "map"):
                s = _stats([meas[i] for i in lk], [fold[f"{model}_us"][i] for i in lk])
                want += [_pct(s[q]) for q in ("median", "p90", "worst", "within")]
            t = _stats([meas[i] for i in tk], [fold["map_us"][i] for i in tk])
            want += [_pct(t["median"]), _pct(t["p90"])]
            assert md_rows[(_label(fold), k)] == want, (name, k)
            seen += 1
    assert seen == sum(len(k) == 2 for k in md_rows)


def test_left_out_rows_are_one_whole_group(res):
    """Each fold's left-out rows are exactly the rows of its group, and its training rows hold none of that group: no
    group key is shared between the two sides."""
    rows = res["rows"]
    for name, fold in res["folds"].items():
        col = rows[GROUP_COLUMN[fold["kind"]]]
        left, train = _sides(res, fold)
        assert left and train, name
        assert {col[i] for i in left} == {fold["value"]}, name
        assert fold["value"] not in {col[i] for i in train}, name
        if fold["kind"] != "layout":  # the workload folds leave out step rows only
            assert all(rows["step"][i] for i in left), name
        assert fold["left_out_rows"] == len(left) and fold["train_rows"] == len(train), name


def test_stored_statistics_match_the_rows(res):
    """The JSON's own statistics (what the script printed) agree with the rows it stores."""
    meas = res["rows"]["measured_us"]
    for name, fold in res["folds"].items():
        left, train = _sides(res, fold)
        for side, idx in (("left_out", left), ("train", train)):
            for model in ("physics", "map"):
                got = fold["stats"][side][model]["all"]
                s = _stats([meas[i] for i in idx], [fold[f"{model}_us"][i] for i in idx])
                assert got["rows"] == s["rows"], name
                for a, b in (("median_abs_err", "median"), ("p90_abs_err", "p90"), ("max_abs_err", "worst"),
                             ("within_5pct", "within")):
                    assert got[a] == pytest.approx(s[b], abs=1e-12), (name, side, model, a)


def test_same_rows_table_recomputed_from_rows(res):
    """The in-sample / out-of-sample table of the same left-out rows: the in-sample fold trained on all of them."""
    meas = res["rows"]["measured_us"]
    lines = {line.split("|")[1].strip(): [c.strip() for c in line.strip().strip("|").split("|")]
             for line in MD_PATH.read_text().split("## The same rows")[1].splitlines() if line.startswith("| ")
             and not line.startswith("| left out")}
    labels = {_label(f): f for f in res["folds"].values()}
    assert set(lines) == set(labels)
    for label, cells in lines.items():
        left = labels[label]["left_out"]
        ref = labels[cells[6]]
        assert not set(left) & set(ref["left_out"]), label  # the in-sample fold did train on these rows
        want = [label, str(len(left))]
        for fold in (labels[label], ref):
            for model in ("physics", "map"):
                s = _stats([meas[i] for i in left], [fold[f"{model}_us"][i] for i in left])
                want += [_pct(s["median"]), _pct(s["p90"])]
        assert cells == want[:6] + [cells[6]] + want[6:], label


def test_benchmarks_md_shows_the_recomputed_tables():
    """BENCHMARKS.md ("Left out whole") carries the fold tables and the same-rows table exactly as the generated
    Markdown has them (whose numbers the tests above recompute from the rows)."""
    bench = (RESULTS.parents[1] / "BENCHMARKS.md").read_text()
    section = bench.split("### Left out whole", 1)[1].split("\n### ", 1)[0]
    md = MD_PATH.read_text()
    wanted = [line for title in ("## Left out by head layout", "## Left out by workload preset",
                                 "## The same rows in sample")
              for line in md.split(title, 1)[1].split("\n## ", 1)[0].splitlines() if line.startswith("| ")]
    assert len(wanted) > 20
    missing = [line for line in wanted if line not in section]
    assert missing == []
