"""calibrate's map steps (``--map-steps``; with ``--grid`` by default, issue 18 item 5): the reference workloads'
sampled steps it times (decodecalc/reports/step_launches.py ``reference_samples``), their timings in the residual map
beside the plan's, their saved record read back, and the bad input refused before any GPU work."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from decodecalc.cli import app
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import packaged_profile
from decodecalc.timemodel.calibration_fit import MAP_MODELS, MAP_WORKLOADS, neutral_start
from decodecalc.timemodel.calibration_saved import calibration_from_measurements
from decodecalc.timemodel.fit import error_summary

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
runner = CliRunner()
H200 = resolve_gpu("h200")


@pytest.fixture(scope="module")
def samples():
    from decodecalc.reports.step_launches import reference_samples

    return reference_samples(H200, neutral_start(packaged_profile("h200")), 2)


def test_the_reference_workloads_are_the_shipped_maps_and_every_step_runs_its_candidates(samples):
    """Six samples: the models and presets whose per-step H200 timings built the shipped map (validate_tune_h200.py's
    MODELS and WORKLOADS), at their per-rank layouts (32:8 and 8:1, d128), two steps each, each step under both
    engines' launches, none twice."""
    from benchmarks.validate_tune_h200 import MODELS, WORKLOADS

    assert tuple(MODELS) == MAP_MODELS and tuple(WORKLOADS) == MAP_WORKLOADS
    assert [(s.model, s.tp, s.source) for s in samples] == [(m, tp, w) for m, tp in MAP_MODELS for w in MAP_WORKLOADS]
    assert {(s.num_heads, s.num_kv_heads, s.head_size) for s in samples} == {(32, 8, 128), (8, 1, 128)}
    for s in samples:
        assert len(s.steps) == 2 and s.steps[0] == 0 and s.steps[1] == s.num_steps - 1
        for step in s.steps:
            mine = [x for x in s.launches if x.step == step]
            assert {x.engine for x in mine} == {"vllm", "sglang"}
            keys = [(x.engine, json.dumps(dict(x.launch), sort_keys=True)) for x in mine]
            assert len(keys) == len(set(keys)) >= 4


def _grid_run() -> dict:
    return json.loads(gzip.decompress((RESULTS / "calibrate-grid-h200-measurements.json.gz").read_bytes()))


def _map_records(per_workload: int) -> list[dict]:
    """Map-step records of real H200 timings: validate_tune_h200.py --per-step's rows of the same models and presets
    (benchmarks/results/validate_tune_h200_steps.json, 2026-11-30), ``per_workload`` steps of each."""
    from decodecalc.specs.models import resolve_model
    from decodecalc.workload import make_workload

    out = []
    for case in json.loads((RESULTS / "validate_tune_h200_steps.json").read_text())["cases"]:
        w = make_workload(resolve_model(case["model"]), tp=int(case["tp"]))
        steps = sorted({r["shape_index"] for r in case["per_step"]})[:per_workload]
        rows = [r for r in case["per_step"] if r["shape_index"] in steps]
        out.append({"model": case["model"], "tp": case["tp"], "source": case["workload"], "num_heads": w.num_heads,
                    "num_kv_heads": w.num_kv_heads, "head_size": w.head_size, "head_size_v": w.head_size_v,
                    "num_steps": 200, "sampled_steps": steps, "rows": rows})
    return out


@pytest.fixture(scope="module")
def fitted():
    """The grid run's first 60 timings (a short warm fit) with and without four steps of each reference workload."""
    data = _grid_run()
    data["cases"] = data["cases"][:60]
    base = packaged_profile("h200")
    plain = calibration_from_measurements(data, gpu=H200, base=base, source="grid")
    with_map = calibration_from_measurements({**data, "map_steps": _map_records(4)}, gpu=H200, base=base, source="grid")
    return plain, with_map


def test_map_steps_join_the_map_and_fit_no_physics(fitted):
    """The map steps change the map (more group-cell points where the reference layouts run), not the physics (the same
    families, to the last digit), and the profile records them, with their in-sample error under the map lower than
    the physics'."""
    plain, with_map = fitted
    assert plain.families == with_map.families and plain.idle_program_s == with_map.idle_program_s
    rec = with_map.fit["map_steps"]
    assert rec["workloads"] == [f"{m} TP{tp} {w}" for m, tp in MAP_MODELS for w in MAP_WORKLOADS]
    assert rec["steps_per_workload"] == 4 and rec["timings"] == sum(len(r["rows"]) for r in _map_records(4))
    assert rec["median_abs_err"] < rec["physics_median_abs_err"]
    assert "map_steps" not in plain.fit and with_map.fit["rows"] == plain.fit["rows"] + rec["timings"]
    assert "24 sampled steps of 6 reference workloads" in with_map.residuals.source
    for cell in ("sglang_stage1/g8/d128/split-count", "vllm_3d/g4/d128"):
        assert sum(p[3] for p in with_map.residuals.cells[cell]) > sum(p[3] for p in plain.residuals.cells.get(cell, ()))


def test_the_map_steps_map_predicts_other_steps_of_the_reference_workloads_better(fitted):
    """Out of sample: steps 5-10 of the same workloads (never in the map) are predicted closer with the map steps' map
    than with the plan's timings alone."""
    from decodecalc.timemodel.calibration_fit import workload_measurements

    plain, with_map = fitted
    later = []
    for rec in _map_records(10):
        rec = {**rec, "rows": [r for r in rec["rows"] if r["shape_index"] not in rec["sampled_steps"][:4]]}
        later += workload_measurements(rec)
    assert len(later) > 500
    assert error_summary(with_map, later)["median_abs_err"] < error_summary(plain, later)["median_abs_err"]


def test_saved_map_steps_are_merged_and_bad_ones_refused_with_their_index(tmp_path):
    from decodecalc.errors import ConfigError
    from decodecalc.timemodel.calibration_saved import merge_measurements

    data = {**_grid_run(), "map_steps": _map_records(1)}
    merged, _ = merge_measurements([(data, "a"), ({"cases": data["cases"][:2], "map_steps": _map_records(1)[:1]}, "b")])
    assert len(merged["map_steps"]) == 7
    bad = json.loads(json.dumps(data["map_steps"]))
    bad[2]["rows"][0]["t_us"] = -1
    with pytest.raises(ConfigError, match=r"x: map_steps\[2\]: rows\[0\]: field 't_us'"):
        calibration_from_measurements({**data, "map_steps": bad}, gpu=H200, base=packaged_profile("h200"), source="x")
    with pytest.raises(ConfigError, match="field 'map_steps': expected a list"):
        calibration_from_measurements({**data, "map_steps": {}}, gpu=H200, base=packaged_profile("h200"), source="x")


@pytest.mark.parametrize("args, says", [
    (["--grid", "--map-steps", "65"], "--map-steps 65: expected an integer in [0, 64]"),
    (["--map-steps", "-1"], "--map-steps -1"),
    (["--quick", "--map-steps", "4"], "--map-steps 4 with --quick"),
    (["-m", "llama3-8b", "--keep-physics", "--map-steps", "4"], "--map-steps 4 with --keep-physics"),
    (["--from-measurements", "x.json", "--map-steps", "4"], "--map-steps 4 with --from-measurements"),
])
def test_bad_map_steps_options_fail_before_any_gpu_work(args, says):
    res = runner.invoke(app, ["calibrate", *args])
    assert res.exit_code == 1 and res.output.startswith("Error:") and says in res.output, res.output
    assert res.output.count("\n") == 1


def test_pool_copies_rotate_past_l2_within_the_memory_there_is():
    from decodecalc.errors import DecodecalcError
    from decodecalc.verify.calibration import POOL_MAX_COPIES, pool_copies

    # a small step: as many copies as rotate 256 MiB, at most 16
    assert pool_copies(64, 512, 8 << 20, 1, 128, 2, free_bytes=100 << 30) == POOL_MAX_COPIES
    assert pool_copies(64, 512, 128 << 20, 8, 128, 2, free_bytes=100 << 30) == 2
    # a large pool: what fits in 80% of the free memory less 1 GiB
    per_copy = 64 * 32768 * 8 * 128 * 2 * 2  # 8 GiB
    assert pool_copies(64, 32768, 1 << 20, 8, 128, 2, free_bytes=2 * per_copy) == 1
    assert pool_copies(64, 32768, 1 << 20, 8, 128, 2, free_bytes=100 << 30) == 3  # at most 24 GiB
    with pytest.raises(DecodecalcError, match="out of GPU memory: a map sample's KV pool"):
        pool_copies(64, 32768, 1 << 20, 8, 128, 2, free_bytes=per_copy)


# --- the spilling reduce (vllm_reduce_spill) in a from-scratch calibration: fitted on the map steps' launches ---

H100_RUN = RESULTS / "calibrate-grid-map-h100-sxm-measurements.json.gz"


def _h100_run() -> dict:
    return json.loads(gzip.decompress(H100_RUN.read_bytes()))


def test_the_spill_family_fitted_on_other_workloads_predicts_a_left_out_ones_spilling_launches():
    """benchmarks/spill_fit_h100.py's fold that leaves Llama-3.1-8B's agentic steps out, recomputed from the H100 run's
    committed timings: the family fitted on the other three workloads' spilling launches (144) predicts the left-out
    48 as the record says (to its rounding), and several times closer than the run's neutral family."""
    from benchmarks.spill_fit_h100 import OUT, RUN, spilling
    from decodecalc.timemodel import load_profile_file
    from decodecalc.timemodel.calibration_fit import map_name, workload_measurements
    from decodecalc.timemodel.fit import abs_pct_errors, percentile
    from decodecalc.timemodel.recipe import fit_spill_family

    import dataclasses

    rec = json.loads(OUT.read_text())
    physics = dataclasses.replace(load_profile_file(Path(f"{RUN}.yaml")), residuals=None)
    by = {map_name(d): spilling(list(workload_measurements(d))) for d in _h100_run()["map_steps"]}
    out = "llama3.1-8b TP1 agentic"
    fitted, n = fit_spill_family(physics, [m for k, ms in by.items() if k != out for m in ms])
    fold = rec["folds"][out]
    assert n == fold["training_launches"] == 144 and len(by[out]) == 48
    after = percentile(abs_pct_errors(fitted, by[out]), 0.5)
    before = percentile(abs_pct_errors(physics, by[out]), 0.5)
    assert round(after, 4) == fold["fitted on the other workloads"]["median_abs_err"]
    assert round(before, 4) == fold["as run"]["median_abs_err"]
    assert after < before / 4
    pooled = rec["pooled"]
    assert pooled["fitted on the other workloads"]["median_abs_err"] < pooled["as run"]["median_abs_err"] / 3


def test_too_few_spilling_launches_leave_the_family_as_it_was():
    """Below SPILL_MIN_LAUNCHES the fit does nothing (six numbers from a handful of launches would be noise)."""
    import dataclasses

    from benchmarks.spill_fit_h100 import RUN, spilling
    from decodecalc.timemodel import load_profile_file
    from decodecalc.timemodel.calibration_fit import workload_measurements
    from decodecalc.timemodel.recipe import SPILL_MIN_LAUNCHES, fit_spill_family

    physics = dataclasses.replace(load_profile_file(Path(f"{RUN}.yaml")), residuals=None)
    few = [m for d in _h100_run()["map_steps"] for m in spilling(list(workload_measurements(d)))][:SPILL_MIN_LAUNCHES - 1]
    same, n = fit_spill_family(physics, few)
    assert n == 0 and same is physics


def test_a_from_scratch_calibration_fits_the_spill_family_a_warm_one_keeps_it():
    """calibrate --from-scratch on the H100 run's timings (the plan's first 40 and the map steps of the two
    long-context workloads of Llama-3.1-8B): the spill family is fitted, recorded (fit.spill_family) and not listed
    uncalibrated; the warm calibrate on the same timings keeps its start's family."""
    from decodecalc.timemodel.calibration_fit import neutral_start
    from decodecalc.timemodel.profile_sources import datasheet_profile
    from decodecalc.timemodel.work import REDUCE_SPILL_FAMILY as SPILL_FAMILY

    gpu = resolve_gpu("h100-sxm")
    data = _h100_run()
    data["cases"] = data["cases"][:40]
    data["map_steps"] = [d for d in data["map_steps"] if d["model"] == "llama3.1-8b" and d["source"] != "chat"]
    start = datasheet_profile(gpu)
    cold = calibration_from_measurements(data, gpu=gpu, base=neutral_start(start), source="h100", cold=True)
    rec = cold.fit["spill_family"]
    assert rec["family"] == SPILL_FAMILY and rec["launches"] == 80
    assert SPILL_FAMILY not in cold.fit["uncalibrated_families"]
    assert cold.families[SPILL_FAMILY] != neutral_start(start).families[SPILL_FAMILY]
    warm = calibration_from_measurements(data, gpu=gpu, base=start, source="h100")
    assert "spill_family" not in warm.fit and warm.families[SPILL_FAMILY] == start.families[SPILL_FAMILY]
    assert SPILL_FAMILY in warm.fit["uncalibrated_families"]


def test_a_from_scratch_calibration_predicts_what_it_did_not_fit_as_before_it():
    """Families a from-scratch calibration did not fit (here: the spilling reduce, with no map steps to fit it on;
    SGLang's fp8 kernel and the reference kernels, which the plan never times) held neutral_start's guesses (1 us,
    60 GB/s an SM): a prediction of nothing. They now take the values decodecalc had for the GPU before calibrating
    (the H100: its packaged profile's, the datasheet fallback's before it shipped), stay listed uncalibrated, and the
    source line names where they came from."""
    from decodecalc.timemodel.fit import DEFAULT_FAMILY
    from decodecalc.timemodel.profile import FamilyParams
    from decodecalc.timemodel.profile_sources import prior_profile
    from decodecalc.timemodel.work import REDUCE_SPILL_FAMILY as SPILL_FAMILY

    gpu = resolve_gpu("h100-sxm")
    data = _h100_run()
    data["cases"], data["map_steps"] = data["cases"][:40], []
    start = prior_profile(gpu)
    cold = calibration_from_measurements(data, gpu=gpu, base=neutral_start(start), source="h100", cold=True,
                                         start_note="the packaged profile's")
    neutral = FamilyParams(**DEFAULT_FAMILY)
    fitted = {"vllm_2d", "vllm_3d", "vllm_reduce", "sglang_stage1", "sglang_stage2"}
    unfitted = {SPILL_FAMILY, "sglang_stage1_fp8", "ref_vllm_2d", "ref_sglang_stage1"}
    for fam in fitted:
        assert cold.families[fam] not in (neutral, start.families[fam]), fam
        assert fam not in cold.fit["uncalibrated_families"]
    for fam in unfitted:
        assert cold.families[fam] == start.families[fam] != neutral, fam
        assert fam in cold.fit["uncalibrated_families"]
    assert "families not measured keep the packaged profile's values" in cold.source
    assert not any(p == neutral for p in cold.families.values())


@pytest.mark.parametrize("ships", [True, False])
def test_calibrate_from_scratch_names_where_the_unfitted_families_come_from(tmp_path, monkeypatch, ships):
    # the H100 SXM ships a profile (2026-12-06); without it (as on any GPU with none) the datasheet fallback's
    from decodecalc.timemodel import profile_sources

    if not ships:
        real = profile_sources.packaged_profile

        def no_h100(name):  # the H200's stays: the datasheet fallback is built from it
            return None if name.startswith("h100") else real(name)

        monkeypatch.setattr(profile_sources, "packaged_profile", no_h100)
        monkeypatch.setattr("decodecalc.timemodel.packaged_profile", no_h100)
    data = _h100_run()
    data["cases"], data["map_steps"] = data["cases"][:20], []
    src, out = tmp_path / "m.json", tmp_path / "p.yaml"
    src.write_text(json.dumps(data))
    res = runner.invoke(app, ["calibrate", "--gpu", "h100-sxm", "--from-scratch", "--from-measurements", str(src),
                              "-o", str(out)])
    assert res.exit_code == 0, res.output
    import yaml

    doc = yaml.safe_load(out.read_text())
    where = "the packaged profile's" if ships else "the datasheet fallback's"
    assert f"families not measured keep {where} values" in doc["source"]
    ref = profile_sources.prior_profile(resolve_gpu("h100-sxm"))
    assert ref.calibrated is ships
    from decodecalc.timemodel import load_profile_file

    assert load_profile_file(out).families["sglang_stage1_fp8"] == ref.families["sglang_stage1_fp8"]
