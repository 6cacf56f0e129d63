"""The calibrate lab notes' tables (docs/lab/, once BENCHMARKS.md's) recomputed with today's time model from the
committed H200 data: the per-layout errors of the 550 thorough timings under three profiles, `calibrate --model`'s
layout cells on single launches of eight unseen layouts with each batch left out, and the re-predictions and transfer
scores behind them. The notes' tables and sentences that are committed arithmetic (no decodecalc code) are checked by
benchmarks/record_checks.py, run by tests/test_benchmarks_tables.py."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import launch_time_s, load_profile_file, packaged_profile
from decodecalc.timemodel.calibration_fit import CALIBRATION_VARIANTS, fit_calibration_rows
from decodecalc.timemodel.fit import measurements_from_rows, percentile

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
LAB = ROOT / "docs" / "lab"


def _pct(x: float) -> str:
    return f"{x:.1%}"


def _section(note: str) -> str:
    # the lab note (docs/lab/, once a section of BENCHMARKS.md) whose tables and sentences these tests recompute
    return (LAB / f"{note}.md").read_text()


def _errors(profile, ms) -> list[float]:
    return [abs(launch_time_s(m.work, profile) / m.time_s - 1) for m in ms]


def test_the_per_layout_table_of_the_thorough_timings():
    section = _section("2026-12-04-calibrate-h200")
    ms = measurements_from_rows(json.loads((RESULTS / "calibrate-h200-thorough-measurements.json").read_text())["cases"],
                                num_sms=132)
    profiles = (packaged_profile("h200"), load_profile_file(RESULTS / "calibrate-h200-thorough.yaml"),
                load_profile_file(RESULTS / "calibrate-h200-from-scratch.yaml"))
    rows = re.findall(r"^\| (\d+:\d+ d\d+) \| (sglang|vllm) \| (\d+) \| (.+) \|$", section, re.M)
    assert len(rows) == 20
    for layout, kernel, n, cells in rows:
        h, kv, d = map(int, re.match(r"(\d+):(\d+) d(\d+)", layout).groups())
        sub = [m for m in ms if (m.shape.num_heads, m.shape.num_kv_heads, m.shape.head_size, m.kernel) ==
               (h, kv, d, kernel)]
        assert len(sub) == int(n)
        want = [f"{_pct(statistics.median(e))} / {_pct(percentile(e, 0.9))}"
                for e in (_errors(p, sub) for p in profiles)]
        assert [c.strip() for c in cells.split("|")] == want, (layout, kernel)


def test_the_layout_cells_table_of_single_launches_with_each_batch_left_out():
    section = _section("2026-12-02-calibrate-model")
    header = re.search(r"^\| \| (14:2 .+) \|$", section, re.M).group(1).split(" | ")
    shipped = re.search(r"^\| shipped profile: median \| (.+) \|$", section, re.M).group(1).split(" | ")
    cells = re.search(r"^\| with the layout's cells \| (.+) \|$", section, re.M).group(1).split(" | ")
    data = json.loads((RESULTS / "layouts-h200-unseen.json").read_text())
    gpu, base = resolve_gpu("h200"), packaged_profile("h200")
    every = {"shipped": [], "layout": []}
    names = [h for h in header if not h.startswith("all")]
    for col, name in enumerate(names):
        parts = name.split()
        layout = f"{parts[0]}-d{parts[1][1:] if len(parts) > 1 else 128}"
        rows = [r for r in data["cases"] if r["model"] == layout and "slots" not in r and r.get("status") == "ok"]
        es, el = [], []
        for batch in sorted({(r["batch"], r["seq_len"]) for r in rows}):
            train = [r for r in rows if (r["batch"], r["seq_len"]) != batch and r["variant"] in CALIBRATION_VARIANTS]
            test = measurements_from_rows([r for r in rows if (r["batch"], r["seq_len"]) == batch], num_sms=132)
            prof = fit_calibration_rows(train, gpu=gpu, base=base, num_sms=132, launch_overhead_s=None,
                                        keep_physics=True)
            es += _errors(base, test)
            el += _errors(prof, test)
        assert len(es) == 55, layout
        assert (shipped[col], cells[col]) == (_pct(statistics.median(es)), _pct(statistics.median(el))), layout
        every["shipped"] += es
        every["layout"] += el
    for key, text in (("shipped", shipped[-1]), ("layout", cells[-1])):
        e = every[key]
        assert text == f"{_pct(statistics.median(e))} (p90 {_pct(percentile(e, 0.9))})"
    assert statistics.median(every["layout"]) < statistics.median(every["shipped"])


def test_the_device_profiles_re_prediction_is_recomputed():
    # the `calibrate --backends` run's profile on the `heldout` validation: the committed re-prediction (the table's
    # last column) is what repredict computes with that profile now
    from benchmarks.validate_tune_h200 import repredict

    got = repredict(ROOT / "benchmarks" / "results" / "validate_tune_h200_heldout.json",
                    profile_path=RESULTS / "calibrate-backends-h200.yaml")
    want = json.loads((RESULTS / "calibrate-backends-h200-repredict-heldout.json").read_text())
    for key in ("within_5pct", "settings", "median_abs_error", "max_abs_error", "picks_within_3pct"):
        assert got[key] == pytest.approx(want[key], rel=1e-9), key


def test_the_physics_or_map_table_is_the_record_and_one_cell_recomputes():
    # benchmarks/calibrate_map_experiment.py: the table is the committed record; the shipped physics without its map on
    # `layouts` is recomputed (the cold fits take minutes each and are recorded)
    import dataclasses

    from benchmarks.calibrate_map_experiment import OUT, VALIDATIONS, cell, cold_name
    from decodecalc.timemodel import packaged_profile

    doc = json.loads(OUT.read_text())  # the lab note shows it (tests/test_benchmarks_tables.py)
    bare = dataclasses.replace(packaged_profile("h200"), residuals=None)
    got = cell(bare, "layouts")
    want = doc["variants"]["shipped physics, no map"]["layouts"]
    assert got["within_5pct"] == want["within_5pct"] and got["median_abs_error"] == pytest.approx(want["median_abs_error"], abs=1e-6)
    # what the text says: calibrate's cold recipe on all the shipped shapes is within 1.5x of the shipped median on all six
    shipped, cold = doc["variants"]["shipped"], doc["variants"][cold_name(1.0)]
    assert all(cold[v]["median_abs_error"] <= 1.5 * shipped[v]["median_abs_error"] for v in VALIDATIONS)
    assert all(doc["variants"]["from scratch"][v]["median_abs_error"] > 1.5 * shipped[v]["median_abs_error"]
               for v in ("heldout", "layouts2", "fresh5"))
    # and what it says of calibrate --grid's device run: within 1.5x on the new layouts `layouts` and `layouts3`, not on
    # `heldout`; with the 300 steps' map over its physics, within 1.5x on all six
    from benchmarks.calibrate_map_experiment import GRID_RUN_NAME

    grid, stepped = doc["variants"][GRID_RUN_NAME], doc["variants"][f"{GRID_RUN_NAME}, all 300 steps"]
    ratio = {v: grid[v]["median_abs_error"] / shipped[v]["median_abs_error"] for v in VALIDATIONS}
    assert ratio["layouts"] < 1 and ratio["layouts3"] < 1.1 and ratio["heldout"] > 1.5 and ratio["fresh5"] > 4
    assert all(stepped[v]["median_abs_error"] <= 1.5 * shipped[v]["median_abs_error"] for v in VALIDATIONS)


def test_score_gpu_transfer_scores_each_kind_of_timing_by_each_profile(tmp_path):
    # benchmarks/score_gpu_transfer.py on the grid run's saved timings: the shipped profile and the run's own, per
    # engine kernel, recomputed here from the rows with launch_time_s
    from benchmarks.score_gpu_transfer import main

    saved = RESULTS / "calibrate-grid-h200-measurements.json.gz"
    out = tmp_path / "s.json"
    assert main([str(saved), "--profile", f"run={RESULTS / 'calibrate-grid-h200.yaml'}", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    import gzip

    rows = json.loads(gzip.decompress(saved.read_bytes()))["cases"]
    ms = [m for m in measurements_from_rows(rows) if m.kernel == "sglang"]
    for name, prof in (("shipped", packaged_profile("h200")), ("run", load_profile_file(RESULTS / "calibrate-grid-h200.yaml"))):
        errs = [abs(launch_time_s(m.work, prof) / m.time_s - 1) for m in ms]
        got = doc["scores"]["shapes: sglang"][name]
        assert got["timings"] == len(ms) > 100
        assert got["median_abs_err"] == pytest.approx(statistics.median(errs), abs=1e-4)
        assert got["within_5pct"] == pytest.approx(sum(e <= 0.05 for e in errs) / len(errs), abs=1e-4)
    assert doc["gpu"] == "h200" and set(doc["scores"]) == {"shapes: vllm", "shapes: sglang"}


def test_the_h100_record_is_the_datasheet_transfer_of_the_h200_physics():
    # results/score-gpu-transfer-h100-sxm.json (BENCHMARKS.md, "A GPU no fit saw"): the H100 run's SGLang shape
    # timings scored by the profile decodecalc uses on an H100 without calibrating, recomputed from the rows; that
    # profile is uncalibrated and carries the H200's fitted families (scaled), so the figure is of a GPU no fit saw
    import gzip

    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.timemodel.profile_sources import datasheet_profile

    doc = json.loads((RESULTS / "score-gpu-transfer-h100-sxm.json").read_text())
    saved = json.loads(gzip.decompress((RESULTS / "calibrate-grid-map-h100-sxm-measurements.json.gz").read_bytes()))
    gpu = resolve_gpu("h100-sxm")
    prof = datasheet_profile(gpu)
    assert saved["gpu"] == doc["gpu"] == "h100-sxm" and not prof.calibrated  # (the H100 ships a profile since)
    # the H200's fitted family, its bandwidths scaled by the datasheets' HBM ratio (3.35 / 4.8 TB/s)
    mine, h200 = prof.families["sglang_stage1"], packaged_profile("h200").families["sglang_stage1"]
    assert mine.latency_s == h200.latency_s and mine.max_programs_per_sm == h200.max_programs_per_sm
    assert mine.sm_bandwidth_bytes_per_s / h200.sm_bandwidth_bytes_per_s == pytest.approx(3350 / 4800, rel=1e-3)
    ms = [m for m in measurements_from_rows(saved["cases"], num_sms=gpu.num_sms) if m.kernel == "sglang"]
    errs = [abs(launch_time_s(m.work, prof) / m.time_s - 1) for m in ms]
    got = doc["scores"]["shapes: sglang"]["datasheet (uncalibrated)"]
    assert got["timings"] == len(ms) == 217
    assert got["median_abs_err"] == pytest.approx(statistics.median(errs), abs=1e-4)
    # calibrating on the H100 halves the error or better, in sample
    assert doc["scores"]["shapes: sglang"]["calibrated, as run"]["median_abs_err"] < got["median_abs_err"] / 2


def test_flashinfer_on_the_h100_runs_at_the_sm90_occupancy_and_the_record_recomputes():
    # results/score-gpu-transfer-h100-sxm-flashinfer.json: FlashInfer's CUDA-core runs timed on an H100 (660), scored
    # by the uncalibrated H100 profile; its decode kernel is planned at the CTAs an SM measured for sm_90 on the H200
    # (9 for 128-thread CTAs; the 6.2x gap came from the register bound of 2), and the record's median recomputes from the runs
    import gzip

    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.timemodel.profile_sources import datasheet_profile
    from decodecalc.verify.backend_calibration import record_measurements

    gpu = resolve_gpu("h100-sxm")
    saved = json.loads(gzip.decompress((RESULTS / "calibrate-flashinfer-h100-sxm-measurements.json.gz").read_bytes()))
    ms = record_measurements(saved["backend_cases"], gpu)
    assert len(ms) == 660 and {m.kernel for m in ms} == {"flashinfer"}
    occ = [k.occupancy for m in ms for k in m.work.kernels if k.family.startswith("flashinfer_decode")]
    h200 = [k.occupancy for m in record_measurements(saved["backend_cases"], resolve_gpu("h200"))
            for k in m.work.kernels if k.family.startswith("flashinfer_decode")]
    assert occ == h200 and 9 in occ and min(occ) > 2  # the sm_90 table the H200 measured, not the register bound
    prof = datasheet_profile(gpu)
    errs = [abs(launch_time_s(m.work, prof) / m.time_s - 1) for m in ms]
    got = json.loads((RESULTS / "score-gpu-transfer-h100-sxm-flashinfer.json").read_text())
    cell = got["scores"]["backends: flashinfer"]["datasheet (uncalibrated)"]
    assert cell["timings"] == 660 and cell["median_abs_err"] == pytest.approx(statistics.median(errs), abs=1e-4)
    assert cell["median_abs_err"] < 0.5  # within 2x, where the register bound was 6.2x off
