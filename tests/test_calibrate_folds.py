"""`calibrate --left-out-folds`: vLLM's and SGLang's expected error from fits that left whole head layouts (and a
quarter of every layout's shapes) out (decodecalc.timemodel.calibration_folds), on the H100 one-command run's committed
timings (benchmarks/results/calibrate-one-command-h100-sxm-measurements.json.gz)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from decodecalc.cli import app
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import packaged_profile
from decodecalc.timemodel.accuracy import check_block, expected_error
from decodecalc.timemodel.calibration_fit import fit_calibration_rows, workload_measurements
from decodecalc.timemodel.calibration_folds import (FOLD_KERNELS, expected_error_records, fold_errors, layout_of,
                                                    shape_left_out)
from decodecalc.timemodel.fit import measurements_from_rows
from decodecalc.timemodel.predict import launch_time_s

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "benchmarks" / "results" / "calibrate-one-command-h100-sxm-measurements.json.gz"
runner = CliRunner()


@pytest.fixture(scope="module")
def run() -> dict:
    return json.loads(gzip.decompress(RUN.read_bytes()))


@pytest.fixture(scope="module")
def timings(run):
    ms = measurements_from_rows(run["cases"], num_sms=132)
    map_ms = [m for rec in run["map_steps"] for m in workload_measurements(rec)]
    return ms, map_ms


def test_every_fold_predicts_only_timings_its_fit_did_not_see(timings):
    # a stand-in fit that records what it was given: each layout fold's training rows hold none of its layouts, the
    # shape fold's none of its shapes, and every timed layout is left out by exactly one layout fold
    ms, map_ms = timings
    h100 = packaged_profile("h100-sxm")
    seen: list[tuple[set, set]] = []

    def fit(train, train_map):
        seen.append(({layout_of(m) for m in [*train, *train_map]}, {m.shape.key for m in [*train, *train_map]}))
        return h100

    out = fold_errors(ms, map_ms, fit, folds=3)
    layouts = {layout_of(m) for m in ms}
    assert len(out["folds"]) == 3 and len(seen) == 4
    left = [set(f) for f in out["folds"]]
    assert sorted(x for f in left for x in f) == sorted(f"{h}:{kv} d{d}" for h, kv, d in layouts)
    for f, (train_layouts, _) in zip(left, seen):
        assert not f & {f"{h}:{kv} d{d}" for h, kv, d in train_layouts}
    quarter = {m.shape.key for m in [*ms, *map_ms] if shape_left_out(m)}
    assert quarter and not quarter & seen[-1][1]
    share = len({m.shape.key for m in ms if shape_left_out(m)}) / len({m.shape.key for m in ms})
    assert 0.1 < share < 0.4
    # every Triton timing of the engines' kernels is predicted once by a layout fold (the reference kernels never)
    engines = [m for m in [*ms, *map_ms] if m.kernel in FOLD_KERNELS]
    assert len(out["new_layout"]) == len(engines)
    assert len(out["fitted_layout"]) == sum(shape_left_out(m) for m in engines)
    # the errors are the stand-in profile's own on those timings
    errs = sorted(e for _, _, e in out["new_layout"])
    assert errs == pytest.approx(sorted(launch_time_s(m.work, h100) / m.time_s - 1 for m in engines))


def test_records_are_the_pooled_errors_and_the_block_reads_them_back():
    errors = {"folds": [["8:1 d128"], ["32:8 d128"]],
              "new_layout": [("vllm", "8:1 d128", 0.02), ("vllm", "32:8 d128", -0.10), ("vllm", "8:1 d128", 0.04),
                             ("sglang", "8:1 d128", 0.5)],
              "fitted_layout": [("vllm", "8:1 d128", -0.01)]}
    recs = expected_error_records(errors, ["8:1 d128", "32:8 d128"], "test timings")
    v, s = recs["vllm"], recs["sglang"]
    assert v["new_layout"]["rows"] == 3 and v["new_layout"]["layouts"] == 2
    assert v["new_layout"]["median_abs_err"] == 0.04 and v["new_layout"]["p90_abs_err"] == pytest.approx(0.088)
    assert v["fitted_layout"]["median_abs_err"] == 0.01 and "fitted_layout" not in s
    block = {"source": "t", "goals": {"median": 0.03, "p90": 0.08}, "kernels": recs}
    check_block(block)

    class P:
        fit = {"expected_error": block}

    fitted = expected_error(P(), "vllm", 8, 1, 128, 2)
    new = expected_error(P(), "vllm", 24, 3, 128, 2)  # a new layout of a class the folds left out (g5-8 d128)
    assert fitted.layout_fitted and fitted.median_abs_err == 0.01
    assert not new.layout_fitted and new.median_abs_err == 0.04 and not new.meets_goal
    assert expected_error(P(), "vllm", 16, 1, 128, 2) is None  # g9-16 d128: no left-out layout of its class
    assert expected_error(P(), "sglang", 8, 1, 128, 2) is None  # a fitted layout with no shape fold behind it


def test_a_calibration_with_folds_carries_its_out_of_sample_figures(run, timings):
    # a warm calibration of the run's first 120 timings: two layout folds and the shape fold; the profile's figures
    # are those of fold_errors with the same fit, and grid's ± reads them
    gpu = resolve_gpu("h100-sxm")
    base = packaged_profile("h100-sxm")
    rows = run["cases"][:120]
    lines: list[str] = []
    prof = fit_calibration_rows(rows, gpu=gpu, base=base, num_sms=132, launch_overhead_s=run["launch_overhead_s"],
                                left_out_folds=2, progress=lines.append)
    assert sum(line.startswith("left-out fold") for line in lines) >= 2
    block = prof.fit["expected_error"]
    check_block(block)
    assert "--left-out-folds" in block["source"]
    v = block["kernels"]["vllm"]
    timed = sorted({layout_of(m) for m in measurements_from_rows(rows, num_sms=132)})
    assert v["fitted_layouts"] == sorted(f"{h}:{kv} d{d}" for h, kv, d in timed)
    new = v["new_layout"]
    assert new["rows"] == sum(m.kernel == "vllm" for m in measurements_from_rows(rows, num_sms=132))
    assert 0 < new["median_abs_err"] < new["p90_abs_err"] < 1
    # without folds the Triton kernels get no figure (calibrate fits every layout it times)
    plain = fit_calibration_rows(rows, gpu=gpu, base=base, num_sms=132, launch_overhead_s=run["launch_overhead_s"])
    assert "expected_error" not in plain.fit
    assert plain.families == prof.families  # the folds change no parameter of the profile itself


@pytest.mark.parametrize("args, needle", [
    (["--left-out-folds", "1"], "--left-out-folds 1: expected 0 or an integer in [2, 12]"),
    (["--left-out-folds", "13"], "--left-out-folds 13"),
    (["--left-out-folds", "3", "--keep-physics", "--model", "llama3.1-8b"], "--keep-physics fits nothing"),
])
def test_bad_fold_counts_are_one_line_errors(tmp_path, args, needle):
    res = runner.invoke(app, ["calibrate", "--gpu", "h100-sxm", "-o", str(tmp_path / "p.yaml"), *args])
    assert res.exit_code != 0 and needle in res.output and "Traceback" not in res.output
    assert not (tmp_path / "p.yaml").exists()


def test_a_family_a_fold_cannot_fit_comes_from_the_given_prior_not_the_packaged_profile():
    # the packaged H100 profile was fitted on the very timings the folds leave out: a fold that leaves SGLang's MHA
    # layout out must not take that family from it (calibrate passes the datasheet fallback to its folds)
    from decodecalc.timemodel.calibration_fit import neutral_start, unfitted_from_start
    from decodecalc.timemodel.profile_sources import datasheet_profile

    gpu = resolve_gpu("h100-sxm")
    packaged, ds = packaged_profile("h100-sxm"), datasheet_profile(gpu)
    cold = neutral_start(packaged)
    fam = "sglang_mha_stage1"
    assert packaged.families[fam] != ds.families[fam]
    assert unfitted_from_start(cold, gpu, set()).families[fam] == packaged.families[fam]
    assert unfitted_from_start(cold, gpu, set(), ds).families[fam] == ds.families[fam]
    assert unfitted_from_start(cold, gpu, {fam}, ds).families[fam] == cold.families[fam]  # fitted: left alone


def test_the_cli_writes_and_prints_the_folds_figures(tmp_path, run):
    # calibrate --from-measurements with --left-out-folds: the lines a user reads and the profile block they come from
    from decodecalc.timemodel import load_profile_file

    saved = {k: v for k, v in run.items() if k not in ("map_steps", "backend_cases", "pending")}
    saved["cases"] = run["cases"][:120]
    src = tmp_path / "m.json"
    src.write_text(json.dumps(saved))
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--gpu", "h100-sxm", "--from-measurements", str(src), "--left-out-folds", "2",
                              "-o", str(out)])
    assert res.exit_code == 0, res.output
    prof = load_profile_file(out)
    f = prof.fit["expected_error"]["kernels"]["vllm"]["new_layout"]
    assert (f"vllm, head layouts left out: {f['median_abs_err']:.1%} median, {f['p90_abs_err']:.1%} p90 on {f['rows']} "
            "timings") in res.output
    # without the option nothing of the kind is printed, nor written for the Triton kernels
    plain = runner.invoke(app, ["calibrate", "--gpu", "h100-sxm", "--from-measurements", str(src), "-o", str(out)])
    assert plain.exit_code == 0 and "head layouts left out" not in plain.output
    assert "vllm" not in (load_profile_file(out).fit.get("expected_error") or {}).get("kernels", {})
