"""The default backends on an fp8 KV cache (issue 18, item 2): their own time-model families, chosen by the
launch, fitted on twelve head layouts and judged on six no fit saw (benchmarks/fit_backends_fp8_h200.py on the H200
runs of benchmarks/measure_backends_fp8_h200.py); a family that misses stays marked uncalibrated."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from decodecalc.launchers import flash_attn3, flashinfer
from decodecalc.reports.tune_backends import _uncalibrated_why
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.timemodel import kernel_families, packaged_profile, profile_from_mapping, work_for_plan
from decodecalc.timemodel.domain import domain_warnings
from decodecalc.workload import make_workload

ROOT = Path(__file__).resolve().parents[1]
H200 = resolve_gpu("h200")
RECORD = ROOT / "benchmarks" / "results" / "fit-backends-fp8-h200.json"


def _w(model: str = "llama3-8b", kv: str = "fp8", lens: tuple[int, ...] = (4096,) * 8, heads: tuple[int, int] | None = None):
    m = resolve_model(model)
    if heads:
        m = dataclasses.replace(m, name=f"{m.name}-{heads[0]}x{heads[1]}", num_attention_heads=heads[0],
                                num_key_value_heads=heads[1])
    return make_workload(m, seq_lens=lens, kv_cache_dtype=kv)


@pytest.mark.parametrize("kv, cuda, tc", [("fp8", "flashinfer_decode_fp8", "flashinfer_tc_fp8"),
                                          ("auto", "flashinfer_decode", "flashinfer_tc")])
def test_flashinfer_family_follows_the_kv_dtype(kv: str, cuda: str, tc: str) -> None:
    w = _w(kv=kv)
    lw = work_for_plan(flashinfer.plan_flashinfer(w, H200), w, "flashinfer")
    assert lw.kernels[0].family == cuda and lw.kernels[0].bytes_per_iter > 0
    lw = work_for_plan(flashinfer.plan_flashinfer_tc(w, H200), w, "flashinfer-tc")
    assert lw.kernels[0].family == tc


@pytest.mark.parametrize("model, heads, family", [
    ("llama3-8b", None, "fa3_fwd_fp8"),        # d128, g 4: one MMA warpgroup (64 x 96 tiles)
    ("llama3.2-1b", None, "fa3_fwd_fp8"),      # d64
    ("gemma-2-9b", None, "fa3_fwd_fp8_wide"),  # d256: two warpgroups
])
def test_fa3_family_follows_the_fork_tiles(model: str, heads, family: str) -> None:
    w = _w(model, heads=heads)
    plan = flash_attn3.plan_flash_attn3(w, H200, layer="global")
    lw = work_for_plan(plan, w, "fa3")
    assert lw.kernels[0].family == family
    assert plan.details.use_one_mma_wg == (family == "fa3_fwd_fp8")
    bf16 = _w(model, kv="auto", heads=heads)
    assert work_for_plan(flash_attn3.plan_flash_attn3(bf16, H200, layer="global"), bf16, "fa3").kernels[0].family == "fa3_fwd"


def test_kernel_families_by_kv_bytes() -> None:
    assert kernel_families("flashinfer", 1) == ("flashinfer_merge", "flashinfer_decode_fp8")
    assert kernel_families("flashinfer", 2) == ("flashinfer_decode", "flashinfer_merge")
    assert set(kernel_families("fa3", 1)) == {"fa3_combine", "fa3_fwd_fp8", "fa3_fwd_fp8_wide"}
    assert "sglang_stage1" not in kernel_families("sglang", 1) and "sglang_mha_stage1" in kernel_families("sglang", 1)
    assert len(kernel_families("fa3")) == 4


def test_a_profile_without_the_fp8_families_borrows_and_marks_them() -> None:
    raw = packaged_profile("h200").to_mapping()
    raw["families"] = {k: v for k, v in raw["families"].items() if "_fp8" not in k}
    raw["fit"] = dict(raw["fit"], uncalibrated_families=[])
    old = profile_from_mapping(raw, origin="test")
    assert {"flashinfer_decode_fp8", "fa3_fwd_fp8"} <= set(old.fit["uncalibrated_families"])
    assert old.family("flashinfer_decode_fp8") == old.family("flashinfer_decode")
    why = _uncalibrated_why("flashinfer", old, 1)
    assert "flashinfer_decode_fp8" in why
    assert _uncalibrated_why("flashinfer", old, 2) == ""


def test_shipped_fp8_families_are_the_fit_and_the_record_recomputes() -> None:
    """The committed record's left-out figures follow from the committed timings with the shipped numbers, and the
    profile marks exactly the families that missed fit_backends_h200's goals (median 5%, p90 15%)."""
    from benchmarks.fit_backends_fp8_h200 import FP8_FAMILIES, UNSEEN_LAYOUTS, DATA, layout_of, main_family, stats
    from benchmarks.fit_backends_h200 import measurements_from

    rec = json.loads(RECORD.read_text())
    prof = packaged_profile("h200")
    uncal = set(prof.fit.get("uncalibrated_families") or ())
    assert prof.fit["backend_fp8_families"]["unseen"].keys() == rec["families"].keys()
    ms = [m for m in measurements_from(DATA) if m.shape.kv_bytes_per_element == 1 and layout_of(m) in UNSEEN_LAYOUTS]
    for fam, r in rec["families"].items():
        shipped = {k: v for k, v in prof.families[fam].as_dict().items() if isinstance(v, float)}
        assert shipped == pytest.approx({k: rec["params"][fam][k] for k in shipped}), fam
        got = stats(prof, [m for m in ms if m.kernel == r["kernel"] and main_family(m) == fam])
        assert got["rows"] == r["unseen"]["rows"] >= 20, fam
        assert got["median_abs_err"] == pytest.approx(r["unseen"]["median_abs_err"], abs=1e-3), fam
        assert got["p90_abs_err"] == pytest.approx(r["unseen"]["p90_abs_err"], abs=1e-3), fam
        miss = got["median_abs_err"] > rec["goals"]["median"] or got["p90_abs_err"] > rec["goals"]["p90"]
        assert (fam in uncal) == miss, fam
        # fitted: better on the left-out layouts than the bf16 families with fp8 bytes
        assert got["median_abs_err"] < r["before_unseen"]["median_abs_err"], fam
    assert {f for fams in FP8_FAMILIES.values() for f in fams} == set(rec["families"])


def test_fp8_domain_is_scoped_to_the_measured_layouts() -> None:
    prof = packaged_profile("h200")
    inside = _w()  # 32:8 d128, g 4: measured
    assert domain_warnings(inside, H200, prof, kernel="flashinfer") == ()
    odd = _w(heads=(40, 4))  # g 10: no fp8 run
    assert any("fp8" in x and "group size 10" in x for x in domain_warnings(odd, H200, prof, kernel="flashinfer-tc"))


def test_uncalibrated_note_names_the_family_and_its_left_out_figures() -> None:
    from decodecalc.timemodel.profile import uncalibrated_note

    prof = packaged_profile("h200")
    rec = prof.fit["backend_fp8_families"]["unseen"]["fa3_fwd_fp8"]
    note = uncalibrated_note(prof, {"fa3_fwd_fp8"})
    assert note.startswith("fa3_fwd_fp8: left-out median") and f"{100 * rec['median_abs_err']:.1f}%" in note
    fa2 = uncalibrated_note(prof, {"fa2_fwd", "fa2_combine"})
    assert fa2.startswith("fa2_combine, fa2_fwd: fa2's held-out median") and fa2.count("missed") == 1
    assert uncalibrated_note(prof, {"vllm_2d"}) == "vllm_2d: no fit of this profile calibrated it"


def test_the_fp8_records_status_is_the_profiles() -> None:
    # its table is the lab note's (tests/test_benchmarks_tables.py); the record's status column is the profile's
    rec = json.loads(RECORD.read_text())
    uncal = set(packaged_profile("h200").fit["uncalibrated_families"])
    assert {f for f, r in rec["families"].items() if not r["calibrated"]} == uncal & set(rec["families"])


def test_the_fp8_split_sweep_is_recomputed_and_in_its_lab_note() -> None:
    """The fp8 sweep (never fitted on): the recommended split and the runs' errors the record states follow from the
    committed timings with the shipped profile, and the lab note quotes them."""
    from benchmarks.fit_backends_fp8_h200 import SWEEP_DATA, stats
    from benchmarks.fit_backends_h200 import measurements_from
    from decodecalc.timemodel.fit import recommendation_quality

    rec = json.loads(RECORD.read_text())["sweep"]
    prof = packaged_profile("h200")
    ms = measurements_from(SWEEP_DATA)
    text = " ".join((ROOT / "docs" / "lab" / "2026-12-04-fp8-backends.md").read_text().split())
    for kernel in ("fa3", "flashinfer-tc"):
        sub = [m for m in ms if m.kernel == kernel]
        assert stats(prof, sub) == rec[kernel]["runs"]
        got = recommendation_quality(prof, sub)[kernel]
        assert got["shapes"] == rec[kernel]["recommendation"]["shapes"] == 47
        assert got["worst"] == pytest.approx(rec[kernel]["recommendation"]["worst"], rel=1e-9)
        assert f"worst {got['worst']:.3f}" in text
