"""The one command's run on an H100 and its validation on workloads no fit saw (docs/lab/2026-12-06-calibrate-h100-one-
command.md, "The one command with everything" and "Workloads no fit saw"; BENCHMARKS.md's H100 claims; issue 18), recomputed from the
committed records: `results/calibrate-one-command-h100-sxm.*` and `results/score-gpu-workloads-h100-sxm.json`."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import statistics
from pathlib import Path

import pytest

from decodecalc.timemodel import launch_time_s, load_profile_file
from decodecalc.timemodel.fit import percentile

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# the lab note of the run (docs/lab/, once BENCHMARKS.md's section); its tables are checked by test_benchmarks_tables.py
BENCH = (ROOT / "docs" / "lab" / "2026-12-06-calibrate-h100-one-command.md").read_text()
RUN = RESULTS / "calibrate-one-command-h100-sxm"


def test_the_one_command_ran_in_ten_minutes_and_wrote_the_shipped_form():
    # the log's own account of the command (calibrate prints it), and the profile it wrote: physics of every Triton
    # family, the spilling reduce fitted, a residual map, and the compiled backends' families judged out of fold
    log = RUN.with_suffix(".log").read_text()
    took = re.search(r"took (\d+) s: the Triton kernels (\d+) s, the map steps (\d+) s, the backends (\d+) s"
                     r" \(their JIT compile included\), the fit (\d+) s", log)
    assert took, "calibrate's timing line is missing from the log"
    total, *parts = (int(x) for x in took.groups())
    assert total <= 600 and sum(parts) <= total and total - sum(parts) < 0.1 * total
    assert "**496 s** for the whole\ncommand" in BENCH and total == 496
    prof = load_profile_file(RUN.with_suffix(".yaml"))
    assert prof.calibrated and prof.residuals is not None and prof.gpu == "h100-sxm"
    fit = prof.fit
    assert fit["rows"] == 1997 and fit["map_steps"]["timings"] == 1488
    assert fit["spill_family"]["launches"] == 192 and "vllm_reduce_spill" not in fit["uncalibrated_families"]
    fams = fit["backend_calibration"]["families"]
    goals = fit["backend_calibration"]["goals"]
    assert sum(f["rows"] for f in fams.values()) == 2244
    for name, f in fams.items():  # calibrated exactly where the left-out figure meets calibrate's bar
        ok = f["left_out"]["median_abs_err"] <= goals["median"] and f["left_out"]["p90_abs_err"] <= goals["p90"]
        assert f["calibrated"] == ok and (name in fit["uncalibrated_families"]) == (not ok), name
    assert [n for n, f in fams.items() if f["calibrated"]] == ["fa3_fwd"]
    tc = fams["flashinfer_tc"]["left_out"]
    assert (round(tc["median_abs_err"], 3), round(tc["p90_abs_err"], 3)) == (0.051, 0.155)
    assert "its tensor cores 5.1% / 15.5%" in BENCH


def test_the_tensor_core_transfer_row_recomputes_from_the_runs():
    # the gpu-transfer table's tensor-core row: the H100's FlashInfer tensor-core runs of the one command, scored by the
    # profile decodecalc uses on an H100 without calibrating (a GPU no fit saw)
    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.timemodel.profile_sources import datasheet_profile
    from decodecalc.verify.backend_calibration import record_measurements

    gpu = resolve_gpu("h100-sxm")
    saved = json.loads(gzip.decompress(RUN.with_name(RUN.name + "-measurements.json.gz").read_bytes()))
    ms = [m for m in record_measurements(saved["backend_cases"], gpu) if m.kernel == "flashinfer-tc"]
    prof = datasheet_profile(gpu)
    assert not prof.calibrated
    errs = [abs(launch_time_s(m.work, prof) / m.time_s - 1) for m in ms]
    doc = json.loads((RESULTS / "score-gpu-transfer-h100-sxm-one-command.json").read_text())
    cell = doc["scores"]["backends: flashinfer-tc"]["datasheet (uncalibrated)"]
    assert cell["timings"] == len(ms) == 720
    assert cell["median_abs_err"] == pytest.approx(percentile(errs, 0.5), abs=1e-4)
    row = (f"| backends: flashinfer, tensor cores (the one command, below) | 720 | {cell['median_abs_err']:.1%} / "
           f"{cell['p90_abs_err']:.1%} ({cell['within_5pct']:.0%}) |")
    assert row in BENCH


def test_the_workload_record_says_what_the_note_says():
    doc = json.loads((RESULTS / "score-gpu-workloads-h100-sxm.json").read_text())  # its table: test_benchmarks_tables
    cal, ref = doc["on_the_reference_settings"]["calibrated (one command)"], \
        doc["on_the_reference_settings"]["shipped H200 profile on the H200's replay"]
    # the prose's ratios against the shipped profile on its own GPU (median, p90, worst)
    ratios = [cal[k] / ref[k] for k in ("median_abs_error", "p90_abs_error", "max_abs_error")]
    assert f"**{ratios[0]:.2f}x, {ratios[1]:.2f}x and {ratios[2]:.2f}x**" in BENCH and max(ratios) < 1.5
    assert doc["replay_noise"]["settings"] == 89 and doc["replay_noise"]["max_abs_diff"] < 0.02


def test_one_run_of_the_workload_record_recomputes():
    # the second H100 replay (Gemma-2-9B, Mistral-Large, Llama-3-405B on chat) re-predicted with the one command's
    # profile: every by-case cell of its models is what the record holds (405B's chat was scored from the first run)
    from benchmarks.score_gpu_workloads import PROFILES, case_of, summary
    from benchmarks.validate_tune_h200 import repredict

    doc = json.loads((RESULTS / "score-gpu-workloads-h100-sxm.json").read_text())
    prof = load_profile_file(RESULTS / "calibrate-one-command-h100-sxm.yaml")
    rep = repredict(RESULTS / "validate_tune_h100_layouts_b.json", profile=prof)
    cases = {case_of(r) for r in rep["rows"] if r["model"] in ("gemma-2-9b", "mistral-large")}
    assert len(cases) == 4
    for c in cases:
        got = summary([r for r in rep["rows"] if case_of(r) == c])
        assert got == doc["by_case"][c][PROFILES[1]], c
    gemma = [r for r in rep["rows"] if r["model"] == "gemma-2-9b" and r["engine"] == "vllm"]
    assert statistics.median(r["error"] for r in gemma) < -0.05  # the named miss: Gemma-2-9B's vLLM, predicted fast


def test_the_packaged_h100_profile_is_the_one_command_run_refitted():
    # decodecalc/profiles/h100-sxm.yaml: `calibrate --gpu h100-sxm --from-scratch --from-measurements` on the run's
    # committed timings (the current fit; the device wrote its own under Python 3.12, whose vLLM families agree with
    # 3.11's to eleven digits: docs/recommend.md). Families the run did not fit are the datasheet fallback's.
    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.timemodel import packaged_profile
    from decodecalc.timemodel.profile_sources import datasheet_profile

    shipped, device = packaged_profile("h100-sxm"), load_profile_file(RUN.with_suffix(".yaml"))
    assert shipped is not None and shipped.calibrated and shipped.residuals is not None
    assert shipped.fit["rows"] == device.fit["rows"] == 1997 and shipped.fit["device_name"] == "NVIDIA H100 80GB HBM3"
    for fam, rel in (("vllm_2d", 1e-8), ("vllm_3d", 1e-8), ("vllm_reduce", 1e-8), ("vllm_reduce_spill", 1e-2)):
        # (the spill family is fitted over the rest by a bounded search: it lands within 1%, not to the digit)
        for f in dataclasses.fields(device.families[fam]):
            value, got = getattr(device.families[fam], f.name), getattr(shipped.families[fam], f.name)
            assert got == (pytest.approx(value, rel=rel) if isinstance(value, float) else value), (fam, f.name)
    ds = datasheet_profile(resolve_gpu("h100-sxm"))
    for fam in ("sglang_stage1_fp8", "ref_vllm_2d", "flashmla_fwd"):
        assert fam in shipped.fit["uncalibrated_families"] and shipped.families[fam] == ds.families[fam], fam
    assert "families not measured keep the datasheet fallback's values" in shipped.source


def test_the_packaged_h100_profile_carries_out_of_sample_figures_for_the_triton_kernels():
    # `calibrate --left-out-folds 11` on the run's timings (one head layout left out per fold, and a quarter of every
    # layout's shapes): vLLM's and SGLang's expected error, its rows those the folds predict, and tune's totals
    # (score_gpu_workloads.py --write-totals: the H100 replays of models no fit saw, re-predicted by this profile)
    from benchmarks.score_gpu_workloads import RUNS, totals_records
    from decodecalc.timemodel import packaged_profile
    from decodecalc.timemodel.accuracy import expected_error
    from decodecalc.timemodel.calibration_fit import workload_measurements
    from decodecalc.timemodel.calibration_folds import shape_left_out
    from decodecalc.timemodel.fit import measurements_from_rows

    shipped = packaged_profile("h100-sxm")
    block = shipped.fit["expected_error"]
    saved = json.loads(gzip.decompress(RUN.with_name(RUN.name + "-measurements.json.gz").read_bytes()))
    ms = measurements_from_rows(saved["cases"], num_sms=132)
    every = [*ms, *(m for rec in saved["map_steps"] for m in workload_measurements(rec))]
    for kernel in ("vllm", "sglang"):
        rec = block["kernels"][kernel]
        assert len(rec["fitted_layouts"]) == 11 and "32:8 d128" in rec["fitted_layouts"]
        assert rec["new_layout"]["rows"] == sum(m.kernel == kernel for m in every)
        assert rec["fitted_layout"]["rows"] == sum(m.kernel == kernel and shape_left_out(m) for m in every)
        assert "11 folds" in rec["new_layout"]["evidence"]
    totals = totals_records(shipped, RUNS)
    for kernel, figs in totals.items():
        assert block["kernels"][kernel]["workload_totals"] == figs and set(figs) == {"new_layout"}, kernel
    # what a user on the H100 then reads: a ± on a layout the run timed, and one no fit saw
    fitted = expected_error(shipped, "vllm", 32, 8, 128, 2)
    new = expected_error(shipped, "sglang", 16, 1, 128, 2)
    assert fitted.layout_fitted and not new.layout_fitted
    assert fitted.median_abs_err < new.median_abs_err
    tune_side = expected_error(shipped, "vllm", 16, 1, 128, 2, of="workload total")
    assert tune_side.rows == totals["vllm"]["new_layout"]["rows"]
