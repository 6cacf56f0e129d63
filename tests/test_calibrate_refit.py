"""`calibrate --from-measurements` and `--from-scratch`: the fitting half of calibrate without a GPU, on the timings
the H200 calibration of 2026-12-01 saved (benchmarks/results/calibrate-h200-measurements.json; BENCHMARKS.md,
"calibrate on the H200 against the shipped profile")."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from decodecalc.cli import app
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import packaged_profile
from decodecalc.timemodel.calibration_fit import TRITON_PREFIXES, neutral_start
from decodecalc.timemodel.fit import DEFAULT_FAMILY

runner = CliRunner()
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
MEASURED = RESULTS / "calibrate-h200-measurements.json"


def _refit(tmp_path: Path, *extra: str) -> tuple[dict, str]:
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--gpu", "h200", "--from-measurements", str(MEASURED), "-o", str(out),
                              *extra])
    assert res.exit_code == 0, res.output
    return yaml.safe_load(out.read_text()), res.output


def test_the_saved_timings_fit_the_profile_the_gpu_run_wrote(tmp_path):
    # the device run wrote calibrate-h200.yaml; the same timings fitted here give the same parameters (the fit is
    # deterministic), so the committed profile is reproducible without the GPU
    got, out = _refit(tmp_path)
    ref = yaml.safe_load((RESULTS / "calibrate-h200.yaml").read_text())
    assert "80 timings" in out
    for fam in ("vllm_2d", "vllm_3d", "vllm_reduce", "sglang_stage1", "sglang_mha_stage1", "sglang_stage2"):
        for key, value in ref["families"][fam].items():
            if isinstance(value, float):
                assert got["families"][fam][key] == pytest.approx(value, rel=1e-9), (fam, key)
            else:
                assert got["families"][fam][key] == value, (fam, key)
    assert got["launch_overhead_s"] == pytest.approx(ref["launch_overhead_s"], rel=1e-12)


def test_from_scratch_starts_from_nothing_fitted():
    shipped = packaged_profile("h200")
    cold = neutral_start(shipped)
    triton = [f for f in shipped.families if f.startswith(TRITON_PREFIXES)]
    assert triton and all(cold.families[f].latency_s == DEFAULT_FAMILY["latency_s"] and
                          cold.families[f].sm_bandwidth_bytes_per_s == DEFAULT_FAMILY["sm_bandwidth_bytes_per_s"]
                          for f in triton)
    others = [f for f in shipped.families if not f.startswith(TRITON_PREFIXES)]
    assert others and all(cold.families[f] == shipped.families[f] for f in others)
    assert cold.residuals is None and not cold.calibrated
    assert cold.hbm_bandwidth_bytes_per_s != shipped.hbm_bandwidth_bytes_per_s


def test_from_scratch_fits_other_parameters_and_says_where_the_rest_come_from(tmp_path):
    warm, _ = _refit(tmp_path)
    cold, _ = _refit(tmp_path, "--from-scratch")
    assert cold["fit"]["rows"] == 80
    assert "packaged profile's values" in cold["source"]
    assert cold["families"]["vllm_3d"]["sm_bandwidth_bytes_per_s"] != warm["families"]["vllm_3d"][
        "sm_bandwidth_bytes_per_s"]
    # both fits leave the families calibrate never times listed as uncalibrated
    assert "flashinfer_tc" in cold["fit"]["uncalibrated_families"]
    assert "vllm_2d" not in cold["fit"]["uncalibrated_families"]


@pytest.mark.parametrize("edit, needle", [
    (lambda d: d.update(cases=[]), "non-empty 'cases'"),
    (lambda d: d.update(gpu="h100"), "field 'gpu'"),
    (lambda d: d["cases"][3].update(variant="vllm-3d-S7"), "cases[3]: field 'variant'"),
    (lambda d: d["cases"][0].update(seq_len=10 ** 12), "cases[0]: field 'seq_len'"),
    (lambda d: d["cases"][1].update(t_us=-5.0), "cases[1]: field 't_us'"),
    (lambda d: d["cases"][2].update(num_kv_heads=3), "not a multiple"),
    (lambda d: d.update(launch_overhead_s=-1), "field 'launch_overhead_s'"),
    (lambda d: d.update(num_sms=114), "field 'num_sms'"),
])
def test_bad_measurements_are_one_line_errors_and_write_nothing(tmp_path, edit, needle):
    data = json.loads(MEASURED.read_text())
    edit(data)
    src = tmp_path / "m.json"
    src.write_text(json.dumps(data))
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--gpu", "h200", "--from-measurements", str(src), "-o", str(out)])
    assert res.exit_code == 1
    assert res.output.startswith("Error:") and needle in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_from_measurements_does_not_save_them_again(tmp_path):
    res = runner.invoke(app, ["calibrate", "--gpu", "h200", "--from-measurements", str(MEASURED),
                              "--save-measurements", str(tmp_path / "m.json"), "-o", str(tmp_path / "p.yaml")])
    assert res.exit_code == 1 and "already saved" in res.output


def test_gpu_spec_of_the_measurements_is_the_h200():
    assert json.loads(MEASURED.read_text())["num_sms"] == resolve_gpu("h200").num_sms


def test_the_thorough_plan_spans_the_layouts_and_every_row_has_a_time_model():
    from decodecalc.timemodel.calibration_fit import THOROUGH_VARIANTS, calibration_plan
    from decodecalc.timemodel.fit import measurements_from_rows

    plan = calibration_plan(thorough=True)
    assert sum(len(v) for _, v in plan) == 550
    layouts = {(h, kv, d) for (h, kv, d, _), _ in plan}
    assert {h // kv for h, kv, _ in layouts} >= {1, 2, 4, 5, 6, 8, 12} and {d for *_, d in layouts} == {64, 128, 256}
    assert {"vllm-3d-S256", "sglang-static-S128"} <= set(THOROUGH_VARIANTS)
    rows = [{"variant": v, "num_q_heads": h, "num_kv_heads": kv, "head_dim": d, "batch": len(lens),
             "seq_len": max(lens), "seq_lens": list(lens), "t_us": 100.0} for (h, kv, d, lens), vs in plan for v in vs]
    ms = measurements_from_rows(rows)
    assert len(ms) == 550
    # the 256-segment launches reach reduce_segments' 255-register regime; the spill family starts at 512
    assert any(k.family == "vllm_reduce" and k.occupancy == 2 for m in ms for k in m.work.kernels if m.splits == 256)


def test_quick_and_thorough_together_is_an_error():
    res = runner.invoke(app, ["calibrate", "--gpu", "h200", "--quick", "--thorough"])
    assert res.exit_code == 1 and res.output.startswith("Error:") and "--thorough" in res.output


def test_calibrate_refuses_to_write_another_gpus_profile():
    # an H200 and an H100 SXM both have 132 SMs: before this check an H200 wrote a profile for --gpu h100-sxm
    from decodecalc.errors import DecodecalcError
    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.verify.calibration import check_device_is

    with pytest.raises(DecodecalcError, match=r"the local GPU is NVIDIA H200 \(h200\), not --gpu h100-sxm"):
        check_device_is("NVIDIA H200", resolve_gpu("h100-sxm"))
    check_device_is("NVIDIA H200", resolve_gpu("h200"))
    check_device_is("NVIDIA H100 80GB HBM3", resolve_gpu("h100"))  # the names nvidia-smi and torch print
    check_device_is("NVIDIA H200 NVL", resolve_gpu("h200"))  # a name the table does not know: the user's word


def test_the_calibrate_recipes_are_the_ones_the_validations_chose():
    """recipe.CALIBRATE (warm: the families' idle costs and saturation gaps kept) and CALIBRATE_COLD (the shipped
    options) are what six workload validations chose on the same 80 H200 timings (results/calibrate-recipe-choice.json)."""
    from decodecalc.timemodel.recipe import CALIBRATE, CALIBRATE_COLD, SHIPPED

    data = json.loads((RESULTS / "calibrate-recipe-choice.json").read_text())["arms"]
    for arm in data.values():  # the totals are the sums of the validations
        parts = [v for k, v in arm.items() if k not in ("all", "description")]
        assert arm["all"]["within_5pct"] == sum(p["within_5pct"] for p in parts) and len(parts) == 6
    within = {key: arm["all"]["within_5pct"] for key, arm in data.items()}
    assert within["warm_kept"] > within["warm_free"]  # from the packaged profile: keep them
    assert CALIBRATE.own_idle_kernels == () and CALIBRATE.saturating_kernels == ()
    assert within["cold_free"] > within["cold_kept"]  # from scratch: fit them, as the shipped fit does
    assert (CALIBRATE_COLD.own_idle_kernels, CALIBRATE_COLD.saturating_kernels) == \
        (SHIPPED.own_idle_kernels, SHIPPED.saturating_kernels) != ((), ())


def test_the_grid_plan_is_a_quarter_of_the_shipped_shapes_at_their_static_launches():
    # decodecalc/data/calibration_grid.json is what benchmarks/make_calibration_grid.py draws from the committed shape
    # timings behind the shipped profile (the development grid included): 75 shapes, 509 static launches, every head
    # layout family of that fit
    from benchmarks.make_calibration_grid import grid
    from decodecalc.timemodel.calibration_fit import calibration_plan
    from decodecalc.timemodel.fit import measurements_from_rows

    plan = calibration_plan(grid=True)
    drawn = [((*e["heads"], tuple(e["seq_lens"])), tuple(e["variants"])) for e in grid()]
    assert drawn == plan
    assert len(plan) == 75 and sum(len(v) for _, v in plan) == 509
    layouts = {(h, kv, d) for (h, kv, d, _), _ in plan}
    assert {h // kv for h, kv, _ in layouts} >= {1, 4, 8, 12} and {d for *_, d in layouts} == {64, 96, 128, 256}
    variants = {v for _, vs in plan for v in vs}
    assert "vllm-2d" in variants and all(v == "vllm-2d" or v.startswith(("vllm-3d-S", "sglang-static-S"))
                                         for v in variants)
    rows = [{"variant": v, "num_q_heads": h, "num_kv_heads": kv, "head_dim": d, "batch": len(lens),
             "seq_len": max(lens), "seq_lens": list(lens), "t_us": 100.0} for (h, kv, d, lens), vs in plan for v in vs]
    assert len(measurements_from_rows(rows)) == 509


@pytest.mark.parametrize("flags", [["--grid", "--quick"], ["--grid", "--thorough"], ["--grid", "--keep-physics"]])
def test_grid_with_another_plan_is_an_error(flags):
    res = runner.invoke(app, ["calibrate", "--gpu", "h200", *flags])
    assert res.exit_code == 1 and res.output.startswith("Error:") and "--grid" in res.output


def test_the_grid_runs_vllm_timings_fit_the_vllm_physics_the_gpu_run_wrote(tmp_path):
    # `calibrate --gpu h200 --from-scratch --grid --backends none` on the H200 (2026-12-04, 204 s) wrote
    # calibrate-grid-h200.yaml; its 292 saved vLLM timings, fitted here from scratch, give its vLLM families and HBM
    # bandwidth (each family group is fitted on its own kernels' rows). The SGLang families are not pinned: their
    # occupancy search meets float-noise ties on these timings, and Python 3.12's compensated sum() breaks them
    # otherwise than 3.11's (under 3.12 the whole profile is the device's to the last digit; BENCHMARKS.md)
    data = json.loads(gzip.decompress((RESULTS / "calibrate-grid-h200-measurements.json.gz").read_bytes()))
    data["cases"] = [c for c in data["cases"] if c["variant"].startswith("vllm")]
    src, out = tmp_path / "vllm.json", tmp_path / "p.yaml"
    src.write_text(json.dumps(data))
    res = runner.invoke(app, ["calibrate", "--gpu", "h200", "--from-scratch", "--from-measurements", str(src),
                              "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "292 timings" in res.output
    got, ref = yaml.safe_load(out.read_text()), yaml.safe_load((RESULTS / "calibrate-grid-h200.yaml").read_text())
    for fam in ("vllm_2d", "vllm_3d", "vllm_reduce"):
        assert set(got["families"][fam]) == set(ref["families"][fam])
        for key, value in ref["families"][fam].items():
            assert got["families"][fam][key] == (pytest.approx(value, rel=1e-8) if isinstance(value, float) else value)
    assert got["hbm_bandwidth_bytes_per_s"] == pytest.approx(ref["hbm_bandwidth_bytes_per_s"], rel=1e-8)
    assert got["families"]["vllm_3d"] != yaml.safe_load((RESULTS / "calibrate-h200-from-scratch.yaml").read_text())[
        "families"]["vllm_3d"]  # not a profile the 80-timing plan wrote


def test_grid_hands_the_grid_plan_to_the_gpu_run(tmp_path, monkeypatch):
    # the device half faked: the CLI passes --grid through, and the verify layer's plan is calibration_plan(grid=True)
    from decodecalc.timemodel.calibration_fit import calibration_plan
    from decodecalc.verify import calibration

    seen = {}

    def fake_run(gpu, *, grid, cold, **kw):
        seen.update(grid=grid, cold=cold)
        return packaged_profile("h200"), []

    monkeypatch.setattr(calibration, "cuda_or_error", lambda: None)
    monkeypatch.setattr(calibration, "run_calibration", fake_run)
    res = runner.invoke(app, ["calibrate", "--gpu", "h200", "--grid", "--from-scratch", "--backends", "none",
                              "-o", str(tmp_path / "p.yaml")])
    assert res.exit_code == 0, res.output
    assert seen == {"grid": True, "cold": True}
    assert calibration_plan(grid=True) != calibration_plan() and len(calibration_plan(grid=True)) == 75


def test_timings_saved_before_the_backends_ran_fit_alone_and_say_so(tmp_path):
    # calibrate with --backends saves the Triton timings first, marked pending (decodecalc/verify/calibration.py): a
    # run killed during the backends leaves a file that fits the Triton kernels alone, and the refit says why
    saved = json.loads(MEASURED.read_text())
    saved["pending"] = ["backends"]
    path = tmp_path / "killed.json"
    path.write_text(json.dumps(saved))
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--gpu", "h200", "--from-measurements", str(path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "saved before the compiled backends ran" in res.output
    got = yaml.safe_load(out.read_text())
    ref = yaml.safe_load((RESULTS / "calibrate-h200.yaml").read_text())
    assert got["families"]["vllm_2d"]["sm_bandwidth_bytes_per_s"] == pytest.approx(
        ref["families"]["vllm_2d"]["sm_bandwidth_bytes_per_s"], rel=1e-9)
    # the note is about the pending file only: the complete file says nothing of the kind
    assert "saved before" not in _refit(tmp_path)[1]
