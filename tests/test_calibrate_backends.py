"""`calibrate --backends`: the compiled backends' plan, the saved runs, their checks and the fit judged on head
layouts it left out (issue 18, item 5), on the H200 runs committed in benchmarks/results
(measure_backends_fp8_h200.py runs calibrate's plan; docs/lab/2026-12-04-calibrate-backends.md)."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from decodecalc.cli import app
from decodecalc.errors import ConfigError
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import packaged_profile
from decodecalc.timemodel.backend_fit import (BACKEND_LAYOUTS, BACKEND_SHAPES, BACKEND_SHORT_SHAPES, KV_DTYPES,
                                              backend_plan, calibrate_backends, layout_folds, layout_of, main_family,
                                              parse_backends)
from decodecalc.timemodel.calibration_saved import check_backend_record, merge_measurements
from decodecalc.timemodel.predict import launch_time_s
from decodecalc.verify.backend_calibration import record_measurement, record_measurements, saved_record

runner = CliRunner()
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
TRITON = RESULTS / "calibrate-h200-measurements.json"
H200 = resolve_gpu("h200")


def _runs(name: str, tag: str) -> list[dict]:
    with gzip.open(RESULTS / name, "rt") as f:
        return [r for r in map(json.loads, f) if r["shape"].get("tag") == tag]


@pytest.fixture(scope="module")
def fa3_fit_runs() -> list[dict]:
    return _runs("fp8-backends-fa3-h200.jsonl.gz", "fit")


@pytest.fixture(scope="module")
def tc_fit_runs() -> list[dict]:
    return [r for r in _runs("fp8-backends-flashinfer-h200.jsonl.gz", "fit") if r["backend"] == "flashinfer-tc"]


# ---- the plan -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, want", [(None, None), ("auto", None), ("none", []), ("fa3", ["fa3"]),
                                        (" fa3 , flashinfer-tc,fa3", ["fa3", "flashinfer-tc"])])
def test_parse_backends(spec, want):
    assert parse_backends(spec) == want


@pytest.mark.parametrize("spec", ["flashmla", "fa3,triton", ",", ""])
def test_parse_backends_names_the_bad_value(spec):
    if spec == "":
        assert parse_backends(spec) is None  # empty means the default
        return
    with pytest.raises(ConfigError, match="valid: auto, none"):
        parse_backends(spec)


def test_the_plan_spans_the_experiment_and_pairs_each_case_by_kv_dtype():
    plan = backend_plan(["flashinfer", "flashinfer-tc", "fa3"])
    # every case twice, bf16 then fp8, the same shape and launch options
    assert len(plan) % 2 == 0
    for a, b in zip(plan[::2], plan[1::2]):
        assert (a[0], a[2]) == (b[0], b[2]) and (a[1]["kv_cache_dtype"], b[1]["kv_cache_dtype"]) == KV_DTYPES
        assert a[1]["seq_lens"] == b[1]["seq_lens"] and a[1]["heads"] == b[1]["heads"]
    layouts = {s["layout"] for _, s, _ in plan}
    assert len(layouts) == len(BACKEND_LAYOUTS) == 12
    groups = {h // kv for h, kv, _ in BACKEND_LAYOUTS}
    assert min(groups) == 2 and max(groups) == 16  # the experiment: group size 2-16 ...
    assert {kv for _, kv, _ in BACKEND_LAYOUTS} == {1, 2, 4, 8}  # ... 1-8 KV heads ...
    assert {d for *_, d in BACKEND_LAYOUTS} == {64, 128, 256}  # ... head dims 64, 128, 256
    lens = [s["seq_lens"] for _, s, _ in plan]
    assert min(map(len, lens)) == 1 and max(map(len, lens)) == 256 and max(map(max, lens)) == 32768
    assert any(len(set(x)) > 1 for x in lens)  # ragged batches
    # FA3: every long shape eager and under CUDA graphs; the short steps under CUDA graphs only
    fa3 = [(s["tag"], cg) for b, s, cg in plan if b == "fa3"]
    per_layout = 2 * (2 * len(BACKEND_SHAPES) + len(BACKEND_SHORT_SHAPES))
    assert len(fa3) == 12 * per_layout
    assert all(cg for tag, cg in fa3 if tag.endswith("short"))
    # a stable order, whatever order the layouts come in (the cases are sorted by a hash of their content)
    assert backend_plan(["fa3"], tuple(reversed(BACKEND_LAYOUTS))) == backend_plan(["fa3"])


def test_the_plan_is_the_one_the_committed_h200_runs_ran(fa3_fit_runs):
    # measure_backends_fp8_h200.py times this plan (its fit layouts): its committed runs are calibrate's data
    want = sorted(json.dumps([b, s, cg]) for b, s, cg in backend_plan(["fa3"], short=False))
    got = sorted(json.dumps([r["backend"], r["shape"], r["cuda_graph"]]) for r in fa3_fit_runs)
    assert got == want


@pytest.mark.parametrize("folds", [2, 3, 5])
def test_layout_folds_leave_out_whole_layouts_and_keep_every_head_dim(folds):
    groups = layout_folds(BACKEND_LAYOUTS, folds)
    flat = [x for g in groups for x in g]
    assert sorted(flat) == sorted(BACKEND_LAYOUTS) and len(groups) == folds
    for g in groups:  # each fit keeps rows of every head dim
        assert {d for *_, d in BACKEND_LAYOUTS} <= {x[2] for x in BACKEND_LAYOUTS if x not in g}
    # a user's own layout goes into a fold too
    assert (40, 8, 128) in {x for g in layout_folds([*BACKEND_LAYOUTS, (40, 8, 128)], folds) for x in g}


# ---- saved runs ---------------------------------------------------------------------------------------------------


def test_a_saved_run_is_small_and_measures_the_same(fa3_fit_runs, tc_fit_runs):
    for r in fa3_fit_runs[:40] + tc_fit_runs[:40]:
        s = saved_record(r)
        assert len(json.dumps(s)) < len(json.dumps(r))
        assert all(x["role"] in ("main", "merge") and len(x["name"]) <= 100 for x in s["launches"])
        a, b = record_measurement(r, H200), record_measurement(s, H200)
        assert (a is None) == (b is None)
        if a is not None:
            assert a.time_s == pytest.approx(b.time_s, abs=1e-10)  # saved to 0.1 ns
            assert (a.splits, a.work) == (b.splits, b.work)
            check_backend_record(s, "x")  # what --save-measurements writes passes the check


def test_a_run_whose_launch_is_not_the_plan_is_not_fitted(fa3_fit_runs):
    r = copy.deepcopy(next(r for r in fa3_fit_runs if record_measurement(r, H200) is not None))
    main = next(x for x in r["launches"] if x["role"] == "main")
    main["grid"] = [main["grid"][0] + 1, *main["grid"][1:]]
    assert record_measurement(r, H200) is None
    assert record_measurement({**r, "error": "RuntimeError: x"}, H200) is None
    assert record_measurement({**r, "timing": {}}, H200) is None


@pytest.mark.parametrize("edit, needle", [
    (lambda r: r.update(backend="flashmla"), "field 'backend'"),
    (lambda r: r["shape"].update(heads=[12, 5]), "field 'shape.heads'"),
    (lambda r: r["shape"].update(seq_lens=[0]), "field 'shape.seq_lens'"),
    (lambda r: r["shape"].update(seq_lens=[1] * 5000), "field 'shape.seq_lens'"),
    (lambda r: r["shape"].update(model="llama3-70b"), "field 'shape.model'"),
    (lambda r: r["shape"].update(kv_cache_dtype="fp8_e5m2"), "field 'shape.kv_cache_dtype'"),
    (lambda r: r.update(block_size=32), "field 'block_size'"),
    (lambda r: r.update(timing={"t_us": -1}), "field 'timing.t_us'"),
    (lambda r: r.update(launches=[{"name": "k", "role": "main", "grid": ["x"], "block": [1]}]), "field 'launches'"),
    (lambda r: r.update(knobs={"num_splits": 4}), "field 'knobs'"),
])
def test_a_bad_saved_run_is_named_field_by_field(fa3_fit_runs, edit, needle):
    r = saved_record(fa3_fit_runs[0])
    edit(r)
    with pytest.raises(ConfigError, match=needle):
        check_backend_record(r, "m.json: backend_cases[0]")
    check_backend_record({"error": "anything"}, "x")  # a failed run is skipped, whatever else it holds


def _measurements(tmp_path: Path, backend_cases: list[dict], name: str = "m.json", **extra) -> Path:
    data = json.loads(TRITON.read_text())
    data.update(backend_cases=backend_cases, **extra)
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


def test_bad_backend_runs_are_one_line_errors_and_write_nothing(tmp_path, fa3_fit_runs):
    bad = saved_record(fa3_fit_runs[0])
    bad["shape"]["heads"] = [12, 5]
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--gpu", "h200", "--from-measurements",
                              str(_measurements(tmp_path, [bad])), "-o", str(out)])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "backend_cases[0]: field 'shape.heads'" in res.output and not out.exists()
    res = runner.invoke(app, ["calibrate", "--gpu", "h200", "--from-measurements",
                              str(_measurements(tmp_path, {"x": 1})), "-o", str(out)])
    assert res.exit_code != 0 and "field 'backend_cases'" in res.output and not out.exists()


@pytest.mark.parametrize("args, needle", [
    (["--backends", "flashmla"], "--backends flashmla: flashmla; valid: auto, none"),
    (["--backends", "fa3", "--keep-physics", "-m", "llama3-8b"], "--backends fa3 with --keep-physics"),
    (["--backends", "fa3", "--from-measurements", str(TRITON)], "--backends fa3 with --from-measurements"),
])
def test_backends_flag_errors(tmp_path, args, needle):
    res = runner.invoke(app, ["calibrate", "--gpu", "h200", "-o", str(tmp_path / "p.yaml"), *args])
    assert res.exit_code != 0 and needle in res.output and "Traceback" not in res.output
    assert not (tmp_path / "p.yaml").exists()


def test_a_named_backend_that_is_not_installed_is_an_error(monkeypatch):
    from decodecalc.verify import backend_calibration, profiler

    monkeypatch.setattr(profiler, "missing_backend", lambda b: f"--system {b} needs vllm" if b == "fa3" else None)
    with pytest.raises(ConfigError, match="--backends fa3: not installed here"):
        backend_calibration.resolve_backends("fa3")
    assert backend_calibration.resolve_backends("auto") == (["flashinfer", "flashinfer-tc", "xqa"],
                                                            {"fa3": "--system fa3 needs vllm"})
    assert backend_calibration.resolve_backends("none") == ([], {})


# ---- several saved files --------------------------------------------------------------------------------------------


def test_merge_measurements_puts_runs_together_and_refuses_two_gpus(tmp_path, fa3_fit_runs, tc_fit_runs):
    a = json.loads(TRITON.read_text())
    b = {"gpu": a["gpu"], "cases": [], "backend_cases": [saved_record(r) for r in fa3_fit_runs[:3]]}
    c = {"gpu": a["gpu"], "cases": [], "backend_cases": [saved_record(r) for r in tc_fit_runs[:2]]}
    got, src = merge_measurements([(a, "a.json"), (b, "b.json"), (c, "c.json")])
    assert len(got["cases"]) == len(a["cases"]) and len(got["backend_cases"]) == 5
    assert got["launch_overhead_s"] == a["launch_overhead_s"] and src == "a.json + b.json + c.json"
    with pytest.raises(ConfigError, match="b.json: field 'gpu': 'h100-sxm'"):
        merge_measurements([(a, "a.json"), ({**b, "gpu": "h100-sxm"}, "b.json")])
    with pytest.raises(ConfigError, match="a second workload sample"):
        merge_measurements([({**a, "workload": {}}, "a.json"), ({**b, "workload": {}}, "b.json")])
    with pytest.raises(ConfigError, match="expected a calibration's measurements"):
        merge_measurements([(a, "a.json"), ({"cases": []}, "b.json")])


def test_gzip_measurements_are_read_within_their_limit(tmp_path):
    from decodecalc.yamlio import load_json_file

    p = tmp_path / "m.json.gz"
    with gzip.open(p, "wt") as f:
        f.write(TRITON.read_text())
    assert load_json_file(p)["cases"] == json.loads(TRITON.read_text())["cases"]
    with pytest.raises(ConfigError, match="over the supported 1,000 bytes uncompressed"):
        load_json_file(p, max_bytes=1000)
    (tmp_path / "bad.json.gz").write_text("not gzip")
    with pytest.raises(ConfigError, match="not a gzip file"):
        load_json_file(tmp_path / "bad.json.gz")


# ---- the fit, judged on layouts it left out ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_fit(fa3_fit_runs, tc_fit_runs):
    """A small calibration: the bf16 and fp8 runs of four layouts (two head dims) of FA3 and the tensor cores, from
    scratch, with a short search."""
    keep = {"8:1-d128", "32:8-d128", "16:2-d128", "32:4-d64"}
    recs = [r for r in fa3_fit_runs + tc_fit_runs if r["shape"]["layout"] in keep]
    ms = record_measurements(recs, H200)
    fit = calibrate_backends(ms, packaged_profile("h200"), cold=True, max_evals=80, restarts=1, folds=2, workers=1)
    return ms, fit


def test_every_family_is_judged_by_fits_that_never_saw_its_layout(small_fit):
    ms, fit = small_fit
    assert len(fit.held_out_layouts) == 2
    folds = [set(g.split(", ")) for g in fit.held_out_layouts]
    assert set().union(*folds) == {"8:1-d128", "32:8-d128", "16:2-d128", "32:4-d64"} and not folds[0] & folds[1]
    for fam, rec in fit.families.items():
        rows = [m for m in ms if main_family(m) == fam]
        assert rec["rows"] == len(rows) == rec["left_out"]["rows"]  # every row predicted out of fold
        goal = rec["left_out"]["median_abs_err"] <= 0.05 and rec["left_out"]["p90_abs_err"] <= 0.15
        assert rec["calibrated"] is goal
        assert rec["left_out"]["median_abs_err"] >= rec["training"]["median_abs_err"] * 0.5
    assert set(fit.uncalibrated) == {f for f, r in fit.families.items() if not r["calibrated"]}
    assert {"fa3_fwd", "fa3_fwd_fp8", "flashinfer_tc", "flashinfer_tc_fp8"} <= set(fit.families)


def test_the_expected_error_is_each_kernels_out_of_fold_figure(small_fit):
    """fit.expected_error of a calibration: per kernel entry (fp8 apart), the layouts timed and, for a layout no fit saw,
    the out-of-fold errors of that kernel's every run (its merge or combine launches included: the whole launch)."""
    from decodecalc.timemodel.accuracy import expected_error

    ms, fit = small_fit
    assert set(fit.expected_error) == {"fa3", "fa3/fp8", "flashinfer-tc", "flashinfer-tc/fp8"}
    for key, rec in fit.expected_error.items():
        kernel, fp8 = key.split("/")[0], key.endswith("/fp8")
        mine = [m for m in ms if m.kernel == kernel and (m.shape.kv_bytes_per_element == 1) == fp8]
        assert rec["fitted_layouts"] == sorted({f"{m.shape.num_heads}:{m.shape.num_kv_heads} d{m.shape.head_size}"
                                                for m in mine})
        assert rec["new_layout"]["rows"] == len(mine) and rec["new_layout"]["layouts"] == len(rec["fitted_layouts"])
        assert "fitted_layout" not in rec  # every run of a timed layout was fitted: no out-of-sample figure
    fams = [f for f, r in fit.families.items() if r["kernel"] == "fa3" and not f.endswith(("fp8", "wide"))]
    assert fams == ["fa3_fwd"]
    assert fit.expected_error["fa3"]["new_layout"]["rows"] == fit.families["fa3_fwd"]["left_out"]["rows"]
    assert fit.expected_error["fa3"]["new_layout"]["median_abs_err"] == fit.families["fa3_fwd"]["left_out"]["median_abs_err"]
    prof = dataclasses.replace(fit.profile, fit={"expected_error": {"kernels": dict(fit.expected_error)}})
    assert expected_error(prof, "fa3", 64, 8, 128, 2).median_abs_err == fit.expected_error["fa3"]["new_layout"][
        "median_abs_err"]  # 64:8 d128 was not timed here
    assert expected_error(prof, "fa3", 8, 1, 128, 2) is None  # timed: no out-of-sample figure


def test_the_left_out_figure_is_the_fold_fit_that_left_the_layout_out(small_fit, fa3_fit_runs, tc_fit_runs):
    # refit one fold by hand: the first fold's layouts predicted by a fit on the others' rows reproduce the record
    ms, fit = small_fit
    from decodecalc.timemodel.backend_fit import _oof_stats, fit_backends, layout_label

    left = set(fit.held_out_layouts[0].split(", "))
    train = [m for m in ms if layout_label(layout_of(m)) not in left]
    prof = fit_backends(train, packaged_profile("h200"), cold=True, max_evals=80, restarts=1)
    rows = [m for m in ms if layout_label(layout_of(m)) in left and main_family(m) == "fa3_fwd"]
    one_fold = _oof_stats([(m, prof) for m in rows])
    assert one_fold["rows"] == len(rows) > 0
    # the fitted profile differs from the start where it was fitted, and predicts its training rows
    start = packaged_profile("h200").families["fa3_fwd"]
    assert fit.profile.families["fa3_fwd"].latency_s != start.latency_s
    errs = sorted(abs(launch_time_s(m.work, fit.profile) / m.time_s - 1) for m in ms)
    assert errs[len(errs) // 2] < 0.15


def test_calibrate_from_measurements_writes_the_backends_and_their_verdicts(tmp_path, fa3_fit_runs, monkeypatch):
    # the CLI end to end on a small file (FA3's runs of three layouts; the fit budget cut for the test's time)
    from decodecalc.timemodel import backend_fit

    monkeypatch.setattr(backend_fit, "CALIBRATE_MAX_EVALS", 60)
    keep = {"8:1-d128", "32:8-d128", "16:2-d256"}
    runs = [saved_record(r) for r in fa3_fit_runs if r["shape"]["layout"] in keep]
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--gpu", "h200", "--from-scratch", "--from-measurements",
                              str(_measurements(tmp_path, runs)), "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load(out.read_text())
    cal = doc["fit"]["backend_calibration"]
    assert set(cal["families"]) == {"fa3_fwd", "fa3_fwd_fp8", "fa3_fwd_fp8_wide"}
    assert len(cal["left_out_folds"]) == 3 and "fa3_fwd (fa3, " in res.output
    for fam, rec in cal["families"].items():
        assert (fam in doc["fit"]["uncalibrated_families"]) is (not rec["calibrated"])
        assert rec["rows"] == sum(1 for r in runs if record_measurement(r, H200) is not None
                                  and main_family(record_measurement(r, H200)) == fam)
    # the domain of the backend calibrated is what was timed; the others' domains are the starting profile's
    dom = doc["fit"]["backend_families"]["domain"]
    assert dom["fa3"]["head_sizes"] == [128, 256] and dom["fa3"]["kv_cache_dtypes"] == ["bfloat16", "fp8", "fp8_e4m3"]
    shipped_dom = packaged_profile("h200").fit["backend_families"]["domain"]
    assert dom["flashmla"] == shipped_dom["flashmla"]
    # the families it did not time are the starting profile's, and the fitted ones are not
    shipped = packaged_profile("h200").families
    assert doc["families"]["flashinfer_tc"]["latency_s"] == pytest.approx(shipped["flashinfer_tc"].latency_s)
    assert doc["families"]["fa3_fwd"]["latency_s"] != pytest.approx(shipped["fa3_fwd"].latency_s)
    # the profile's expected error: the backend it calibrated, out of fold; the Triton kernels none (nothing held out)
    ee = doc["fit"]["expected_error"]["kernels"]
    assert set(ee) == {"fa3", "fa3/fp8"} and ee["fa3"]["fitted_layouts"] == ["16:2 d256", "32:8 d128", "8:1 d128"]
    assert ee["fa3"]["new_layout"]["rows"] == cal["families"]["fa3_fwd"]["left_out"]["rows"]


def test_an_uncalibrated_family_names_calibrates_left_out_figures():
    from decodecalc.timemodel.profile import uncalibrated_note

    prof = dataclasses.replace(packaged_profile("h200"), fit={"backend_calibration": {"left_out": {
        "fa3_fwd": {"rows": 10, "median_abs_err": 0.071, "p90_abs_err": 0.2}}}})
    note = uncalibrated_note(prof, ["fa3_fwd", "flashinfer_tc"])
    assert "fa3_fwd: left-out median 7.1%, p90 20.0%" in note and "calibrate --backends" in note
    assert "flashinfer_tc: no fit of this profile calibrated it" in note


def test_from_scratch_keeps_the_kept_backends_record():
    from decodecalc.timemodel.calibration_fit import neutral_start

    shipped = packaged_profile("h200")
    cold = neutral_start(shipped)
    assert cold.fit == {"backend_families": shipped.fit["backend_families"]}


def test_a_backend_that_failed_is_reported_and_the_others_still_fit(tmp_path, fa3_fit_runs, monkeypatch):
    # the H200 run of 2026-12-04 with a FlashInfer that could not build its kernels: FA3 is fitted, FlashInfer's
    # failures are printed and recorded, its families stay uncalibrated
    from decodecalc.timemodel import backend_fit

    monkeypatch.setattr(backend_fit, "CALIBRATE_MAX_EVALS", 30)
    keep = {"8:1-d128", "32:8-d128"}
    runs = [saved_record(r) for r in fa3_fit_runs if r["shape"]["layout"] in keep]
    boom = "RuntimeError: Ninja build failed. " + "x" * 900 + " fatal error: flashinfer/page.cuh: No such file"
    failed = [{"shape": runs[0]["shape"], "backend": "flashinfer", "cuda_graph": False, "block_size": 16,
               "error": backend_fit.error_text(RuntimeError(boom[14:])), "launches": [], "timing": {}}] * 6
    assert "No such file" in failed[0]["error"] and len(failed[0]["error"]) <= 610
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--gpu", "h200", "--from-measurements",
                              str(_measurements(tmp_path, runs + failed)), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "flashinfer: 6 runs failed, none fitted: its families keep the starting profile's values" in res.output
    assert "No such file" in res.output
    doc = yaml.safe_load(out.read_text())
    assert doc["fit"]["backend_calibration"]["failed"]["flashinfer"]["runs"] == 6
    assert {"flashinfer_decode", "flashinfer_tc"} <= set(doc["fit"]["uncalibrated_families"])
    # nothing fitted at all is a one-line error, naming the failure
    res = runner.invoke(app, ["calibrate", "--gpu", "h200", "--from-measurements",
                              str(_measurements(tmp_path, failed, name="f.json")), "-o", str(out)])
    assert res.exit_code != 0 and "none of the 6 backend runs could be fitted (flashinfer: 6 runs failed" in res.output


# ---- the H200 runs of `calibrate --backends --from-scratch` and their scores (docs/lab/2026-12-04-calibrate-backends.md)


def test_the_device_run_is_calibrates_whole_plan():
    from benchmarks.calibrate_backends_h200 import DEVICE_RUN

    data = json.loads(gzip.open(DEVICE_RUN, "rt").read())
    assert not any("error" in r for r in data["backend_cases"]) and data["elapsed"]["backends_s"] < 600
    # every run of calibrate's plan where a kernel is compiled (FlashInfer's CUDA cores have none at group 7), once
    plan = {json.dumps([b, s, cg]) for b, s, cg in backend_plan(["flashinfer", "flashinfer-tc", "fa3"])}
    got = [json.dumps([r["backend"], r["shape"], r["cuda_graph"]]) for r in data["backend_cases"]]
    assert len(set(got)) == len(got) and set(got) <= plan
    missing = {json.loads(x)[1]["layout"] for x in plan - set(got)}
    assert missing == {"14:2-d128"} and all(json.loads(x)[0] == "flashinfer" for x in plan - set(got))
    assert len(record_measurements(data["backend_cases"], H200)) == len(got)  # every launch as planned


def test_the_committed_scores_are_the_profiles():
    # the record's table is the lab note's (tests/test_benchmarks_tables.py); here the record is today's score
    from benchmarks.calibrate_backends_h200 import OUT, score
    from decodecalc.timemodel import load_profile_file

    rec = json.loads(OUT.read_text())
    root = Path(__file__).resolve().parents[1]
    profiles = {"shipped": packaged_profile("h200"),
                **{n: load_profile_file(root / p, expect_gpu="h200") for n, p in rec["sources"].items()}}
    got = score(profiles)
    for name in profiles:
        assert got["profiles"][name]["unseen_layouts"] == rec["profiles"][name]["unseen_layouts"], name
        assert got["profiles"][name]["workloads"]["totals"] == rec["profiles"][name]["workloads"]["totals"], name


def test_the_gpu_path_saves_gzipped_timings_before_the_fit_and_prints_its_phases(tmp_path, monkeypatch, fa3_fit_runs):
    # the device half faked: run_calibration hands its timings to `measured` as the real one does, then "fits"
    from decodecalc.verify import backend_calibration, calibration

    saved = json.loads(TRITON.read_text())
    runs = [saved_record(r) for r in fa3_fit_runs[:4]]

    def fake_run(gpu, *, measured, backends, **kw):
        assert backends == ["fa3"]
        measured({**{k: saved[k] for k in ("num_sms", "launch_overhead_s", "device_name", "versions", "cases")},
                  "backend_cases": runs, "elapsed": {"triton_s": 39.0, "backends_s": 204.0}})
        return packaged_profile("h200"), saved["cases"]

    monkeypatch.setattr(calibration, "cuda_or_error", lambda: None)
    monkeypatch.setattr(calibration, "run_calibration", fake_run)
    monkeypatch.setattr(backend_calibration, "resolve_backends", lambda spec: (["fa3"], {"flashinfer": "not here"}))
    dest, out = tmp_path / "m.json.gz", tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--gpu", "h200", "--save-measurements", str(dest), "-o", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(gzip.decompress(dest.read_bytes()))
    assert data["backend_cases"] == runs and data["gpu"] == "h200" and data["elapsed"]["backends_s"] == 204.0
    assert "the Triton kernels 39 s, the backends 204 s" in res.output
    assert "backends not timed" in res.output and "flashinfer: not here" in res.output


def test_the_measurement_script_runs_calibrates_plan():
    # measure_backends_fp8_h200.py (the committed runs' script) takes its plan from backend_fit: one home
    from benchmarks.measure_backends_fp8_h200 import UNSEEN_LAYOUTS, plan_cases

    assert plan_cases("fit", ["fa3"]) == backend_plan(["fa3"], short=False)
    short = plan_cases("fit", ["fa3"], short=True)
    assert short and all(s["tag"] == "fit-short" and cg for _, s, cg in short)
    unseen = {s["layout"] for _, s, _ in plan_cases("unseen", ["fa3"])}
    assert len(unseen) == len(UNSEEN_LAYOUTS) and not unseen & {s["layout"] for _, s, _ in short}
    assert len(plan_cases("all", ["fa3"])) == len(plan_cases("fit", ["fa3"])) + len(plan_cases("unseen", ["fa3"]))


def test_the_flashinfer_step_cost_table_is_the_committed_record():
    # benchmarks/flashinfer_wide_ctas.py's figures (its fits take minutes; the record is what it wrote; the lab note shows
    # it, tests/test_benchmarks_tables.py), and the record's layouts are the committed runs'
    from benchmarks.flashinfer_wide_ctas import OUT, UNSEEN, VARIANTS

    doc = json.loads(OUT.read_text())
    assert list(doc["variants"]) == list(VARIANTS)
    with gzip.open(UNSEEN, "rt") as f:
        runs = [json.loads(x) for x in f]
    unseen = {r["shape"]["layout"] for r in runs} - set(doc["variants"]["resident threads"]["in_sample_signed_median"])
    assert unseen == set(doc["variants"]["resident threads"]["unseen_signed_median"]) and len(unseen) == 6
    assert all(doc["variants"][v]["unseen"]["rows"] == 18 * 6 for v in VARIANTS)
    assert len(record_measurements(runs, H200)) == len(runs)  # every launch as planned


@pytest.mark.parametrize(("backends", "quick", "keep_physics", "timed"), [
    (None, False, False, True),      # the default: every installed backend
    ("auto", False, False, True),
    (None, True, False, False),      # --quick: the three Triton shapes only ...
    ("auto", True, False, True),     # ... unless --backends is given, auto included (it was skipped without a word)
    ("fa3", True, False, True),
    ("none", False, False, False),
    (None, False, True, False),      # --keep-physics fits nothing
])
def test_which_runs_time_the_backends(backends, quick, keep_physics, timed):
    from decodecalc.reports.calibrate_request import times_backends

    assert times_backends(backends, quick=quick, keep_physics=keep_physics) is timed
