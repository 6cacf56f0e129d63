"""fp8 KV caches and 32-token blocks (issue 18, item 2): the H200 timings of benchmarks/measure_kv_formats_h200.py
(benchmarks/results/kv-formats-h200.json), the report benchmarks/kv_formats_report.py writes from them, and what the
measured domain (decodecalc.timemodel.domain) concludes: block 32 inside it for vLLM, fp8 outside."""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "results" / "kv-formats-h200.json"
MD = ROOT / "benchmarks" / "results" / "kv-formats-h200.md"


@pytest.fixture(scope="module")
def data() -> dict:
    return json.loads(DATA.read_text())


def _pairs(data: dict, kv: str, block: int, engine: str) -> list[float]:
    """Measured t(format) / t(bf16, block 16) of every shape and variant (this file's own pairing)."""
    base = {(r["model"], r["batch"], r["seq_len"], r["variant"]): r["t_us"] for r in data["cases"]
            if r["kv_cache_dtype"] == "bfloat16" and r["block_size"] == 16}
    return [r["t_us"] / base[(r["model"], r["batch"], r["seq_len"], r["variant"])] for r in data["cases"]
            if r["kv_cache_dtype"] == kv and r["block_size"] == block and r["variant"].startswith(engine)]


def test_the_run_is_complete_and_paired(data):
    """Six layouts x five batches: every vLLM variant in four formats, every SGLang one in two, all timed."""
    assert all(r["status"] == "ok" and r["t_us"] > 0 for r in data["cases"])
    count = defaultdict(int)
    for r in data["cases"]:
        count[(r["variant"].split("-")[0], r["kv_cache_dtype"], r["block_size"])] += 1
    assert count == {("vllm", kv, b): 180 for kv in ("bfloat16", "fp8") for b in (16, 32)} | {
        ("sglang", kv, 16): 150 for kv in ("bfloat16", "fp8")}
    assert len({r["model"] for r in data["cases"]}) == 6


def test_block_32_moves_vllms_2d_kernel_only(data):
    """The domain's reason to keep block 32 outside (decodecalc.timemodel.domain): vLLM's 3D launches take the time they
    take at block 16, as the model (which has no block-size term) says, but its 2D kernel does not."""
    base = {(r["model"], r["batch"], r["seq_len"], r["variant"]): r["t_us"] for r in data["cases"]
            if r["kv_cache_dtype"] == "bfloat16" and r["block_size"] == 16}
    by: dict[bool, list[float]] = defaultdict(list)
    for r in data["cases"]:
        if r["kv_cache_dtype"] == "bfloat16" and r["block_size"] == 32:
            by[r["variant"] == "vllm-2d"].append(r["t_us"] / base[(r["model"], r["batch"], r["seq_len"], r["variant"])])
    assert sum(abs(x - 1) <= 0.05 for x in by[False]) >= 0.99 * len(by[False])  # 3D
    assert min(by[True]) < 0.85 and max(by[True]) > 1.03  # 2D: faster on some layouts, slower on others


def test_fp8_is_not_the_halved_bytes_the_model_predicts(data):
    """The domain's reason to keep fp8 outside: measured, an fp8 cache saves far less than half the time."""
    from decodecalc.timemodel.fit import measurements_from_rows

    for engine in ("vllm", "sglang"):
        assert 0.75 < statistics.median(_pairs(data, "fp8", 16, engine)) < 0.95
    fp8 = [r for r in data["cases"] if r["kv_cache_dtype"] == "fp8"][:3]
    assert all(m.shape.kv_bytes_per_element == 1 for m in measurements_from_rows(fp8))


def test_the_report_is_what_the_data_give():
    """benchmarks/results/kv-formats-h200.md is the report of the committed data and the packaged profile, and
    BENCHMARKS.md shows its tables."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import kv_formats_report
    finally:
        sys.path.pop(0)
    text = kv_formats_report.report(json.loads(DATA.read_text()))
    assert text == MD.read_text(), "re-run benchmarks/kv_formats_report.py"
    bench = (ROOT / "BENCHMARKS.md").read_text()
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) > 15 and [line for line in table if line not in bench] == []


def test_report_recomputes_the_measured_ratios():
    """The report's measured-ratio medians equal this file's own pairing of the rows."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import kv_formats_report
    finally:
        sys.path.pop(0)
    d = json.loads(DATA.read_text())
    rows = kv_formats_report.paired_rows(d)
    for kv, block, engine in (("fp8", 16, "vllm"), ("fp8", 16, "sglang"), ("bfloat16", 32, "vllm")):
        mine = statistics.median(_pairs(d, kv, block, engine))
        theirs = statistics.median(x["meas_ratio"] for x in rows if (x["kv"], x["block"], x["engine"]) == (kv, block,
                                                                                                          engine))
        assert theirs == pytest.approx(mine, rel=1e-12)


def test_the_profile_records_the_measured_miss(data):
    """decodecalc/profiles/h200.yaml's fit.outside_domain is benchmarks/kv_formats_report.py's record of this data."""
    from decodecalc.timemodel.profile_sources import packaged_profile

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import kv_formats_report
    finally:
        sys.path.pop(0)
    assert packaged_profile("h200").fit["outside_domain"] == kv_formats_report.outside_domain(data)


def test_warnings_outside_the_domain_name_the_measured_miss():
    """A prediction outside the domain says what timing that format measured, for the engine and GPU it was timed on
    only: none for FlashInfer (not timed in fp8), none on another GPU."""
    from types import SimpleNamespace

    from typer.testing import CliRunner

    from decodecalc.cli import app
    from decodecalc.timemodel.domain import measured_miss
    from decodecalc.timemodel.profile_sources import packaged_profile

    r = CliRunner().invoke(app, ["compare", "--kv-cache-dtype", "fp8", "--json"])
    assert r.exit_code == 0, r.output
    by = {p["name"]: p for p in json.loads(r.stdout)["policies"]}
    rec = packaged_profile("h200").fit["outside_domain"]["kv_cache_dtype"]["fp8"]
    for name in ("vllm", "sglang"):
        want = f"median {100 * rec[name]['median']:+.1f}%"
        assert any(want in w and f"{rec[name]['rows']} launches" in w for w in by[name]["predicted_warnings"]), name
    assert not any("timed on" in w for w in by["flashinfer"]["predicted_warnings"])
    prof = packaged_profile("h200")
    assert measured_miss(prof, "block_size", 32, "vllm", "h200")["rows"] == 180
    assert measured_miss(prof, "block_size", 32, "vllm", "h100-sxm") is None
    assert measured_miss(prof, "block_size", 64, "vllm", "h200") is None
    assert measured_miss(SimpleNamespace(fit={}), "kv_cache_dtype", "fp8", "vllm", "h200") is None


def test_benchmarks_md_shows_the_fp8_leave_out_folds():
    """BENCHMARKS.md carries benchmarks/leaveout_fp8.py's fold table as its stored results give it, and every fold
    left out one whole layout of the twelve."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import leaveout_fp8
    finally:
        sys.path.pop(0)
    res = json.loads((ROOT / "benchmarks" / "results" / "leaveout-fp8-h200.json").read_text())
    assert len(res["layouts"]) == 12 and len(res["folds"]) == 24
    for f in res["folds"]:
        assert f["left_out"] in res["layouts"] and f["fitted"]["rows"] == (30 if f["engine"] == "vllm" else 25)
        assert f["train_rows"] == 11 * f["fitted"]["rows"]
    bench = (ROOT / "BENCHMARKS.md").read_text()
    missing = [line for line in leaveout_fp8.markdown(res).splitlines() if line not in bench]
    assert missing == []


def test_a_failing_variant_is_a_row_not_a_stopped_run():
    """verify.calibration.timed_row (the measurement scripts' row): the shape, the caller's fields, and the error that
    stopped the variant in place of a time."""
    from types import SimpleNamespace

    from decodecalc.verify.calibration import timed_row

    def step(variant):
        raise RuntimeError(f"no kernel for {variant}")

    bench = SimpleNamespace(lens=(100, 300), h=16, h_kv=2, d=128, kv_bytes=12345, copies=2, step=step)
    row = timed_row(bench, "vllm-2d", kv_cache_dtype="fp8", block_size=32)
    assert row["status"] == "error" and "t_us" not in row and row["error"] == "RuntimeError: no kernel for vllm-2d"
    assert (row["model"], row["batch"], row["seq_len"], row["seq_lens"]) == ("16:2-d128", 2, 300, [100, 300])
    assert (row["kv_cache_dtype"], row["block_size"], row["kv_bytes"]) == ("fp8", 32, 12345)
