"""fp8 KV caches and 32-token blocks (issue 18, item 2): the H200 timings of benchmarks/measure_kv_formats_h200.py
(benchmarks/results/kv-formats-h200.json), the report benchmarks/kv_formats_report.py writes from them, and what the
measured domain (decodecalc.timemodel.domain) concludes: block 32 outside it for vLLM's 2D kernel, fp8 outside for
vLLM and inside for SGLang's grouped kernel on its own family (benchmarks/leaveout_fp8.py), validated on six layouts no
fit saw (benchmarks/validate_fp8.py, kv-formats-h200-unseen.json)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "results" / "kv-formats-h200.json"
MD = ROOT / "benchmarks" / "results" / "kv-formats-h200.md"
NOTE = ROOT / "docs" / "lab" / "2026-12-03-fp8-kv-triton.md"  # the lab note that shows these reports' tables


@pytest.fixture(scope="module")
def data() -> dict:
    return json.loads(DATA.read_text())


def _pairs(data: dict, kv: str, block: int, engine: str) -> list[float]:
    """Measured t(format) / t(bf16, block 16) of every shape and variant (this file's own pairing)."""
    base = {(r["model"], r["batch"], r["seq_len"], r["variant"]): r["t_us"] for r in data["cases"]
            if r["kv_cache_dtype"] == "bfloat16" and r["block_size"] == 16}
    return [r["t_us"] / base[(r["model"], r["batch"], r["seq_len"], r["variant"])] for r in data["cases"]
            if r["kv_cache_dtype"] == kv and r["block_size"] == block and r["variant"].startswith(engine)]


def test_fp8_is_not_the_halved_bytes_the_model_predicts(data):
    """The domain's reason to keep fp8 outside: measured, an fp8 cache saves far less than half the time."""
    from decodecalc.timemodel.fit import measurements_from_rows

    for engine in ("vllm", "sglang"):
        assert 0.75 < statistics.median(_pairs(data, "fp8", 16, engine)) < 0.95
    fp8 = [r for r in data["cases"] if r["kv_cache_dtype"] == "fp8"][:3]
    assert all(m.shape.kv_bytes_per_element == 1 for m in measurements_from_rows(fp8))


def test_the_report_is_what_the_data_give():
    """benchmarks/results/kv-formats-h200.md is the report of the committed data and the packaged profile, and
    its lab note shows its tables."""
    from benchmarks import kv_formats_report
    text = kv_formats_report.report(json.loads(DATA.read_text()))
    assert text == MD.read_text(), "re-run python -m benchmarks.kv_formats_report"
    bench = NOTE.read_text()
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) > 15 and [line for line in table if line not in bench] == []


def test_report_recomputes_the_measured_ratios():
    """The report's measured-ratio medians equal this file's own pairing of the rows."""
    from benchmarks import kv_formats_report
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

    from benchmarks import kv_formats_report
    assert packaged_profile("h200").fit["outside_domain"] == kv_formats_report.outside_domain(data)


def test_warnings_outside_the_domain_name_the_measured_miss():
    """A prediction outside the domain says what timing that format measured, for the engine and GPU it was timed on
    only: none on another GPU; FlashInfer and FA3 have fp8 families of their own (inside)."""
    from types import SimpleNamespace

    from typer.testing import CliRunner

    from decodecalc.cli import app
    from decodecalc.timemodel.domain import measured_miss
    from decodecalc.timemodel.profile_sources import packaged_profile

    r = CliRunner().invoke(app, ["compare", "--kv-cache-dtype", "fp8", "--json"])
    assert r.exit_code == 0, r.output
    by = {p["name"]: p for p in json.loads(r.stdout)["policies"]}
    rec = packaged_profile("h200").fit["outside_domain"]["kv_cache_dtype"]["fp8"]
    want = f"median {100 * rec['vllm']['median']:+.1f}%"
    assert any(want in w and f"{rec['vllm']['rows']} launches" in w for w in by["vllm"]["predicted_warnings"])
    assert "sglang" not in rec and by["sglang"]["predicted_calibrated"] is True  # its fp8 family: inside its domain
    # FlashInfer's and FA3's fp8 families (benchmarks/fit_backends_fp8_h200.py): inside their own domains too, and
    # calibrated where their family met the fit's goals on the left-out layouts (else marked, without a domain warning)
    uncal = set(packaged_profile("h200").fit["uncalibrated_families"])
    family = {"flashinfer": "flashinfer_decode_fp8", "flashinfer-tc": "flashinfer_tc_fp8", "fa3": "fa3_fwd_fp8"}
    for name, fam in family.items():
        assert by[name]["predicted_calibrated"] is (fam not in uncal), name
        warned = by[name].get("predicted_warnings") or []
        assert not any("KV-cache dtype" in w for w in warned), name  # inside the domain
        if fam in uncal:  # the warning names the family and the figure that missed
            assert any(fam in w and "missed the fit's 5% / 15% goals" in w for w in warned), warned
    odd = CliRunner().invoke(app, ["compare", "--kv-cache-dtype", "fp8", "--json", "-m", "llama3-8b", "--tp", "4"])
    assert odd.exit_code == 0, odd.output  # 8:2 d128, group 4 as measured: inside; no vLLM-style measured miss
    fi = {p["name"]: p for p in json.loads(odd.stdout)["policies"]}["flashinfer"]
    assert not any("timed on" in w for w in fi.get("predicted_warnings") or ())
    prof = packaged_profile("h200")
    assert measured_miss(prof, "block_size", 32, "vllm", "h200")["rows"] == 180
    assert measured_miss(prof, "block_size", 32, "vllm", "h100-sxm") is None
    assert measured_miss(prof, "block_size", 64, "vllm", "h200") is None
    assert measured_miss(SimpleNamespace(fit={}), "kv_cache_dtype", "fp8", "vllm", "h200") is None


def test_the_lab_note_shows_the_fp8_leave_out_folds():
    """The fp8 lab note carries benchmarks/leaveout_fp8.py's fold table as its stored results give it, and every fold
    left out one whole layout of the twelve."""
    from benchmarks import leaveout_fp8
    res = json.loads((ROOT / "benchmarks" / "results" / "leaveout-fp8-h200.json").read_text())
    assert len(res["layouts"]) == 12 and len(res["folds"]) == 24
    for f in res["folds"]:
        # vLLM: 5 batches x 6 launches; SGLang: 5 thorough batches x 5 + 4 short-context batches x 10 launches
        assert f["left_out"] in res["layouts"] and f["fitted"]["rows"] == (30 if f["engine"] == "vllm" else 65)
        assert ("short" in f) is (f["engine"] == "sglang") and f.get("short", {"rows": 40})["rows"] == 40
        assert f["train_rows"] == 11 * f["fitted"]["rows"]
    bench = NOTE.read_text()
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


UNSEEN = ROOT / "benchmarks" / "results" / "kv-formats-h200-unseen.json"


def _bench(name: str):
    import importlib

    return importlib.import_module(f"benchmarks.{name}")


def test_the_shipped_fp8_family_is_the_one_fitted_without_the_unseen_layouts():
    """decodecalc/profiles/h200.yaml's sglang_stage1_fp8 is benchmarks/leaveout_fp8.py's fit on the twelve layouts of
    kv-formats-h200*.json, none of which is a layout of the validation run."""
    from decodecalc.timemodel.profile_sources import packaged_profile

    res = json.loads((ROOT / "benchmarks" / "results" / "leaveout-fp8-h200.json").read_text())
    shipped = packaged_profile("h200").families["sglang_stage1_fp8"].as_dict()
    fitted = res["sglang_stage1_fp8"]["family"]
    assert shipped["occupancy_by_head_dim"] == {int(k): v for k, v in fitted["occupancy_by_head_dim"].items()}
    for key in ("latency_s", "program_bandwidth_bytes_per_s", "sm_bandwidth_bytes_per_s", "program_overhead_s"):
        assert shipped[key] == pytest.approx(fitted[key], rel=1e-12), key
    unseen = {r["model"] for r in json.loads(UNSEEN.read_text())["cases"]}
    assert len(unseen) == 6 and not unseen & set(res["layouts"])


def test_validate_fp8_report_is_what_the_data_give():
    """benchmarks/results/validate-fp8-h200.md is benchmarks/validate_fp8.py's report of the unseen-layout run, and the
    run is complete: 6 layouts x 5 batches x (bf16, fp8) x (6 vLLM + 5 SGLang static + 2 adaptive launches)."""
    data = json.loads(UNSEEN.read_text())
    assert len(data["cases"]) == 6 * 5 * 2 * 13 and all(r["status"] == "ok" for r in data["cases"])
    assert all(r["num_kv_splits"] and r["max_kv_splits"] in (8, 64) for r in data["cases"]
               if r["variant"] == "sglang-adaptive")
    v = _bench("validate_fp8")
    text = v.report(data)
    assert (ROOT / "benchmarks" / "results" / "validate-fp8-h200.md").read_text() == text
    bench = NOTE.read_text()
    assert [line for line in text.splitlines() if line.startswith("|") and line not in bench] == []


def test_the_fp8_family_beats_the_bf16_one_on_layouts_no_fit_saw():
    """The claim the adoption rests on, recomputed here from the timings: inside SGLang's fp8 domain the packaged
    profile's median error on the unseen layouts is under 4% and under 0.3x the unfitted model's; at head size 256
    (left outside) it is not."""
    v = _bench("validate_fp8")
    rows = [x for x in v.scored_rows(json.loads(UNSEEN.read_text())) if x["engine"] == "sglang" and x["kv"] == "fp8"]
    inside = [x for x in rows if x["d"] != 256]
    med = statistics.median(abs(x["packaged"]) for x in inside)
    assert med < 0.04 and med < 0.3 * statistics.median(abs(x["unfitted"]) for x in inside)
    d256 = [x for x in rows if x["d"] == 256]
    assert statistics.median(abs(x["packaged"]) for x in d256) > 0.10


def test_a_profile_without_the_fp8_family_predicts_as_before():
    """A profile fitted before sglang_stage1_fp8 existed borrows sglang_stage1's numbers and map cells (the
    prediction it made then) and lists the family uncalibrated."""
    import dataclasses

    from decodecalc.timemodel.fit import measurements_from_rows
    from decodecalc.timemodel.predict import launch_time_s
    from decodecalc.timemodel.profile import profile_from_mapping
    from decodecalc.timemodel.profile_sources import packaged_profile

    prof = packaged_profile("h200")
    raw = __import__("yaml").safe_load((ROOT / "decodecalc" / "profiles" / "h200.yaml").read_text())
    del raw["families"]["sglang_stage1_fp8"]
    old = profile_from_mapping(raw, origin="test")
    assert "sglang_stage1_fp8" in old.fit["uncalibrated_families"]
    row = {"variant": "sglang-static-S16", "num_q_heads": 32, "num_kv_heads": 8, "head_dim": 128, "batch": 4,
           "seq_len": 8192, "t_us": 1.0, "kv_cache_dtype": "fp8"}
    (m,) = measurements_from_rows([row])
    assert m.work.kernels[0].family == "sglang_stage1_fp8"
    as_bf16 = dataclasses.replace(m.work, kernels=(dataclasses.replace(m.work.kernels[0], family="sglang_stage1"),
                                                   *m.work.kernels[1:]))
    assert launch_time_s(m.work, old) == pytest.approx(launch_time_s(as_bf16, prof), rel=1e-12)
    assert old.residuals.factor(m.work, old) != 1.0  # the parent's cells are read
    assert launch_time_s(m.work, prof) != pytest.approx(launch_time_s(m.work, old), rel=1e-3)
