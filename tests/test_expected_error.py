"""The expected error of a predicted time (decodecalc.timemodel.accuracy, the profile's ``fit.expected_error``):
recomputed from the committed data it was written from (benchmarks/expected_error.py; BENCHMARKS.md's table of that
record is checked by tests/test_benchmarks_tables.py),
which figure a launch gets, and how grid / compare carry it."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from decodecalc.cli import app
from decodecalc.errors import ConfigError
from decodecalc.timemodel import dump_profile, load_profile_file, packaged_profile
from decodecalc.timemodel.accuracy import GOAL_MEDIAN, GOAL_P90, ExpectedError, check_block, expected_error

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
runner = CliRunner()
ENV = {"COLUMNS": "200", "NO_COLOR": "1", "TERMINAL_WIDTH": "200"}


@pytest.fixture(scope="module")
def block() -> dict:
    prof = packaged_profile("h200")
    assert prof is not None
    return prof.fit["expected_error"]


@pytest.fixture(scope="module")
def recomputed() -> dict:
    from benchmarks import expected_error as ee

    return ee.compute()


def test_the_profile_block_is_what_the_committed_data_give(block, recomputed):
    from benchmarks import expected_error as ee

    assert ee.profile_block(recomputed) == block
    saved = json.loads((RESULTS / "expected-error-h200.json").read_text())
    assert saved["profile_block"] == block
    assert saved["kernels"] == recomputed["kernels"]


def _median_p90(errors: list[float]) -> tuple[float, float]:
    a = np.asarray(errors)
    return float(np.quantile(a, 0.5)), float(np.quantile(a, 0.9))  # numpy's linear rule, not the script's percentile


@pytest.mark.parametrize("kernel", ["vllm", "sglang"])
def test_triton_new_layout_figure_from_the_leave_out_rows(block, kernel):
    """Independently of the script: pool every layout fold's left-out rows of the kernel (their with-map predictions,
    from a fit that never saw the layout) and take median and p90."""
    lo = json.loads((RESULTS / "leaveout-timemodel-h200.json").read_text())
    rows = lo["rows"]
    errs, lays = [], set()
    for fold in lo["folds"].values():
        if fold["kind"] != "layout":
            continue
        for i in fold["left_out"]:
            if rows["kernel"][i] == kernel:
                assert rows["layout"][i] == fold["value"]  # a layout fold leaves out its layout, and only it
                errs.append(abs(fold["map_us"][i] / rows["measured_us"][i] - 1))
                lays.add(rows["layout"][i])
    med, p90 = _median_p90(errs)
    fig = block["kernels"][kernel]["new_layout"]
    assert fig["rows"] == len(errs) and fig["layouts"] == len(lays)
    assert fig["median_abs_err"] == pytest.approx(med, abs=6e-5)
    assert fig["p90_abs_err"] == pytest.approx(p90, abs=6e-5)
    # out of sample is worse than new shapes of fitted layouts, for both engines (what the figure is for)
    assert fig["median_abs_err"] > block["kernels"][kernel]["fitted_layout"]["median_abs_err"]


@pytest.mark.parametrize("kernel", ["vllm", "sglang"])
def test_triton_fitted_layout_figure_from_the_random_held_out_rows(block, kernel):
    """The fit script's held-out record with the map (its rows store the physics alone: recomputed here, they are
    the record's physics twin, so the record is of exactly these rows)."""
    fit = json.loads((RESULTS / "timemodel-fit-h200.json").read_text())
    held = [r for r in fit["rows_detail"] if r["kernel"] == kernel and r["held_out"]]
    med, p90 = _median_p90([abs(r["holdout_pred_us"] / r["measured_us"] - 1) for r in held])
    phys = fit["holdout_fit"]["holdout_physics"][kernel]
    assert phys["rows"] == len(held)
    assert (phys["median_abs_err"], phys["p90_abs_err"]) == pytest.approx((med, p90), abs=6e-5)
    rec = fit["holdout_fit"]["holdout"][kernel]
    fig = block["kernels"][kernel]["fitted_layout"]
    assert fig["rows"] == rec["rows"] == len(held)
    assert fig["layouts"] == len({" ".join(r["shape"].split()[:2]) for r in held})
    assert (fig["median_abs_err"], fig["p90_abs_err"]) == pytest.approx((rec["median_abs_err"], rec["p90_abs_err"]),
                                                                        abs=6e-5)


def test_new_layout_evidence_never_includes_a_fitted_layout(recomputed):
    for kernel, rec in recomputed["kernels"].items():
        fig = rec.get("new_layout")
        if fig is None or kernel in ("vllm", "sglang"):  # the Triton folds left out layouts the shipped fit has
            continue
        assert not set(fig["layout_list"]) & set(rec["fitted_layouts"]), kernel


def _profile(block: dict):
    return dataclasses.replace(packaged_profile("h200"), fit={"expected_error": block})


def test_a_launch_gets_the_figure_of_its_side(block):
    prof = packaged_profile("h200")
    seen = expected_error(prof, "vllm", 32, 8, 128, 2)  # Llama-3-8B, a layout of the fit
    new = expected_error(prof, "vllm", 16, 8, 256, 2)  # Gemma-2-9B, no fit saw it
    assert seen is not None and seen.layout_fitted and seen.layout == "32:8 d128"
    assert seen.median_abs_err == block["kernels"]["vllm"]["fitted_layout"]["median_abs_err"]
    assert new is not None and not new.layout_fitted
    assert new.p90_abs_err == block["kernels"]["vllm"]["new_layout"]["p90_abs_err"]
    # no figure rather than a borrowed one: FA2 on a layout its fit lacks, fp8 on a fitted layout, an unknown kernel
    assert expected_error(prof, "fa2", 16, 8, 256, 2) is None
    assert expected_error(prof, "fa3", 32, 8, 128, 1) is None  # 32:8 d128 is an fp8 fit layout
    assert expected_error(prof, "fa3", 24, 8, 128, 1) is not None  # one of the fp8 fit's left-out layouts
    assert expected_error(prof, "reference", 32, 8, 128, 2) is None
    assert expected_error(dataclasses.replace(prof, fit={}), "vllm", 32, 8, 128, 2) is None


@given(med=st.floats(0, 0.2), p90=st.floats(0, 0.5))
def test_meets_goal_is_both_bounds(med, p90):
    e = ExpectedError(kernel="vllm", layout="8:1 d128", layout_fitted=True, median_abs_err=med, p90_abs_err=p90,
                      rows=10, layouts=1, evidence="x")
    assert e.meets_goal == (med <= GOAL_MEDIAN and p90 <= GOAL_P90)
    assert ("misses" in e.text()) != e.meets_goal
    assert e.to_json()["meets_goal"] == e.meets_goal


@given(within=st.floats(0, 1), worst=st.floats(0, 0.5))
def test_a_totals_goal_is_share_within_5pct_and_worst(within, worst):
    e = ExpectedError(kernel="vllm", layout="8:1 d128", layout_fitted=False, median_abs_err=0.01, p90_abs_err=0.02,
                      rows=10, layouts=1, evidence="x", of="workload total", within_5pct=within, max_abs_err=worst)
    assert e.meets_goal == (within >= 0.95 and worst <= 0.10)
    assert e.to_json()["goal"] == {"within_5pct": 0.95, "max_abs_err": 0.10}
    assert ("misses 95%-within-5% goal" in e.text()) != e.meets_goal


def _fig(**kw):
    return {"rows": 3, "layouts": 1, "median_abs_err": 0.02, "p90_abs_err": 0.05, "evidence": "e", **kw}


@pytest.mark.parametrize("bad, named", [
    ([], "'fit.expected_error' must be a mapping"),
    ({"kernels": []}, "kernels must be a mapping"),
    ({"kernels": {"vllm": {"fitted_layouts": "32:8 d128"}}}, "fitted_layouts must be a list"),
    ({"kernels": {"vllm": {"new_layout": {"rows": 3}}}}, "vllm.new_layout must hold"),
    ({"kernels": {"vllm": {"new_layout": _fig(median_abs_err=-0.1)}}}, "median_abs_err must be a fraction"),
    ({"kernels": {"vllm": {"new_layout": _fig(p90_abs_err="8%")}}}, "p90_abs_err must be a fraction"),
    ({"kernels": {"vllm": {"fitted_layout": _fig(rows=0)}}}, "rows must be a positive integer"),
    ({"goals": {"median": "3%"}, "kernels": {}}, "goals must map"),
])
def test_a_malformed_block_is_refused_by_name(bad, named):
    with pytest.raises(ConfigError, match=named.replace("(", r"\(")):
        check_block(bad)


def test_a_profile_file_with_a_malformed_block_is_one_error_line(tmp_path):
    prof = packaged_profile("h200")
    path = tmp_path / "h200.yaml"
    path.write_text(dump_profile(dataclasses.replace(prof, fit={**prof.fit, "expected_error": {"kernels": 3}})))
    with pytest.raises(ConfigError, match="kernels must be a mapping"):
        load_profile_file(path)


def _invoke(*args: str):
    r = runner.invoke(app, list(args), env=ENV)
    assert r.exit_code == 0, r.output
    return r.output


def test_grid_json_and_screen_carry_it(block):
    data = json.loads(_invoke("grid", "-m", "gemma-2-9b", "-b", "4", "-s", "2048", "--json"))
    for name in ("vllm", "sglang"):
        err = data["systems"][name]["predicted_error"]
        assert err["layout"] == "16:8 d256" and err["layout_fitted"] is False
        assert err["median_abs_err"] == block["kernels"][name]["new_layout"]["median_abs_err"]
        assert err["meets_goal"] is False and err["goal"] == {"median_abs_err": 0.03, "p90_abs_err": 0.08}
    out = _invoke("grid", "-m", "llama3-8b", "-b", "4", "-s", "2048", "--system", "vllm")
    fig = block["kernels"]["vllm"]["fitted_layout"]
    assert f"±{100 * fig['median_abs_err']:.1f}%" in out
    assert f"{100 * fig['p90_abs_err']:.0f}% p90 (fitted head layout" in out


def test_compare_json_csv_and_table_carry_it(block):
    args = ("compare", "-m", "gemma-2-9b", "-b", "4", "-s", "2048", "-p", "vllm,fa2,fa3,flashinfer-tc")
    by = {p["name"]: p for p in json.loads(_invoke(*args, "--json"))["policies"]}
    assert by["fa3"]["predicted_error"]["layout_fitted"] is True  # 16:8 d256 is among FA3's captured layouts
    assert "predicted_error" not in by["fa2"]  # no run of a layout FA2's fit lacks
    rows = {r["name"]: r for r in csv.DictReader(io.StringIO(_invoke(*args, "--csv")))}
    assert float(rows["vllm"]["predicted_error_median"]) == by["vllm"]["predicted_error"]["median_abs_err"]
    assert rows["fa2"]["predicted_error_p90"] == ""
    table = _invoke(*args)
    assert f"±{100 * by['vllm']['predicted_error']['median_abs_err']:.0f}%" in table


def test_in_graph_figures_in_that_regime_and_none_on_another_gpu(block):
    ing = json.loads(_invoke("grid", "-m", "llama3-8b", "-b", "4", "-s", "2048", "--json", "--regime", "in-graph"))
    err = ing["systems"]["vllm"]["predicted_error"]
    assert err["regime"] == "in-graph" and err["layout_fitted"] is True
    assert err["median_abs_err"] == block["kernels"]["vllm"]["in_graph"]["fitted_layout"]["median_abs_err"]
    b2b = json.loads(_invoke("grid", "-m", "llama3-8b", "-b", "4", "-s", "2048", "--json"))
    assert b2b["systems"]["vllm"]["predicted_error"]["regime"] == "back-to-back"
    other = json.loads(_invoke("grid", "-m", "llama3-8b", "-b", "4", "-s", "2048", "--json", "--gpu", "a100-80gb"))
    assert all("predicted_error" not in s for s in other["systems"].values())


def test_in_graph_figures_recomputed_from_the_runs(block):
    """The in-graph runs scored again here: back-to-back prediction plus the other half's median in-graph cost."""
    from benchmarks import in_graph_compare as ig

    from decodecalc.specs.models import resolve_model
    from decodecalc.workload import make_workload

    rs = ig.rows(RESULTS / "in-graph-h200.jsonl", packaged_profile("h200"))
    for system in ("vllm", "flashinfer-tc"):
        fitted = set(block["kernels"][system]["fitted_layouts"])
        errs: dict[bool, list[float]] = {True: [], False: []}
        for half in ig.HALVES:
            gaps = [r["in_graph_us"] - r["back_to_back_us"] for r in rs if r["backend"] == system
                    and r["model"] not in half]
            cost = float(np.quantile(np.asarray(gaps), 0.5))
            for r in rs:
                if r["backend"] == system and r["model"] in half:
                    w = make_workload(resolve_model(r["model"]), tp=r["tp"], batch=1, seq_len=1)
                    side = f"{w.num_heads}:{w.num_kv_heads} d{w.head_size}" in fitted
                    errs[side].append(abs((r["predicted_us"] + cost) / r["in_graph_us"] - 1))
        for side, name in ((True, "fitted_layout"), (False, "new_layout")):
            fig = block["kernels"][system]["in_graph"][name]
            med, p90 = _median_p90(errs[side])
            assert fig["rows"] == len(errs[side])
            # (the script's costs are rounded to the nanosecond, as the profile stores them)
            assert (fig["median_abs_err"], fig["p90_abs_err"]) == pytest.approx((med, p90), abs=2e-4)


def test_workload_totals_by_side_recomputed(block):
    """tune's totals: every (workload, setting) of tune's own search once, split by the model's per-rank layout."""
    from benchmarks import expected_error as ee

    from decodecalc.specs.models import resolve_model
    from decodecalc.workload import make_workload

    for engine in ("vllm", "sglang"):
        fitted = set(block["kernels"][engine]["fitted_layouts"])
        errs: dict[bool, dict[tuple, float]] = {True: {}, False: {}}
        for name in ee.WORKLOAD_FILES:
            for r in json.loads((RESULTS / name).read_text())["rows"]:
                if r["engine"] != engine or r["kind"] not in ("default", "tuned", "candidate"):
                    continue
                w = make_workload(resolve_model(r["model"]), tp=int(r["tp"]), batch=1, seq_len=1)
                side = f"{w.num_heads}:{w.num_kv_heads} d{w.head_size}" in fitted
                key = (r["model"], r["tp"], r["workload"], r["setting"])
                errs[side].setdefault(key, abs(r["predicted_total_s"] / r["measured_total_s"] - 1))
        for side, fig_name in ((True, "fitted_layout"), (False, "new_layout")):
            e = list(errs[side].values())
            fig = block["kernels"][engine]["workload_totals"][fig_name]
            med, p90 = _median_p90(e)
            assert fig["rows"] == len(e)
            assert (fig["median_abs_err"], fig["p90_abs_err"]) == pytest.approx((med, p90), abs=6e-5)
            assert fig["within_5pct"] == pytest.approx(sum(x <= 0.05 for x in e) / len(e), abs=6e-5)
            assert fig["max_abs_err"] == pytest.approx(max(e), abs=6e-5)


def test_the_compared_totals_are_the_current_models(tmp_path):
    """The committed comparison the totals come from is what the current profile predicts (validate_tune_h200.py
    --repredict of its measurements, no GPU), so the figures describe the model that ships."""
    from benchmarks import validate_tune_h200 as vt

    committed = json.loads((RESULTS / "validate_tune_h200_layouts_compare.json").read_text())
    fresh = vt.repredict(RESULTS / "validate_tune_h200_layouts.json")
    got = {(r["model"], r["workload"], r["engine"], r["setting"]): r["predicted_total_s"] for r in fresh["rows"]}
    for r in committed["rows"]:
        assert got[(r["model"], r["workload"], r["engine"], r["setting"])] == pytest.approx(r["predicted_total_s"],
                                                                                             rel=1e-9)


def test_tune_json_and_screen_carry_the_totals_error(block):
    out = json.loads(_invoke("tune", "-m", "gemma-2-9b", "--workload", "chat", "--engine", "sglang", "--json"))
    err = out["engines"]["sglang"]["predicted_error"]
    fig = block["kernels"]["sglang"]["workload_totals"]["new_layout"]
    assert err["of"] == "workload total" and err["layout_fitted"] is False
    assert (err["median_abs_err"], err["within_5pct"], err["max_abs_err"]) == (
        fig["median_abs_err"], fig["within_5pct"], fig["max_abs_err"])
    assert err["meets_goal"] is (fig["within_5pct"] >= 0.95 and fig["max_abs_err"] <= 0.10)
    text = _invoke("tune", "-m", "llama3.1-8b", "--workload", "chat", "--engine", "vllm")
    fitted = block["kernels"]["vllm"]["workload_totals"]["fitted_layout"]
    assert f"expected error of these totals: ±{100 * fitted['median_abs_err']:.1f}% median" in " ".join(text.split())
    ing = json.loads(_invoke("tune", "-m", "llama3.1-8b", "--workload", "chat", "--engine", "vllm", "--json",
                             "--regime", "in-graph"))
    assert "predicted_error" not in ing["engines"]["vllm"]  # no workload totals' figure in that regime


def test_recommend_carries_the_same_figure_as_grid():
    """One function behind every command: grid's and recommend's figures for the same step are the same record."""
    args = ("-m", "gemma-2-9b", "-b", "4", "-s", "8192")
    grid = json.loads(_invoke("grid", *args, "--json"))["systems"]
    rec = json.loads(_invoke("recommend", *args, "--json"))["kernels"]
    for k in ("vllm", "sglang"):
        assert rec[k]["predicted_error"] == grid[k]["predicted_error"]
    assert "expected error of these times ±" in " ".join(_invoke("recommend", *args).split())


def test_explain_shows_the_figure_its_inputs_and_source(block):
    raw = _invoke("grid", "-m", "llama3-8b", "-b", "4", "-s", "2048", "--system", "vllm", "--explain")
    out = " ".join(raw.split())
    fig = block["kernels"]["vllm"]["fitted_layout"]
    assert f"predicted_error = {fig['median_abs_err']}" in out
    assert "layout=32:8 d128" in out and f"launches={fig['rows']}" in out
    flat = "".join(ch for ch in raw if not ch.isspace() and ch != "│")  # the panel wraps its lines
    assert "fit.expected_error.kernels.vllm.fitted_layout" in flat


def test_backend_workload_totals_recomputed(block):
    """The backends' totals: each run's paths under the current profile (the benchmark's compare), split here by the
    model's layout against the kernel's record; a side with fewer than 3 totals has no figure."""
    import contextlib
    import io

    from benchmarks import expected_error as ee
    from benchmarks import validate_backends_workload_h200 as vbw

    from decodecalc.specs.models import resolve_model
    from decodecalc.workload import make_workload

    errs: dict[tuple[str, str], list[float]] = {}
    for name in ee.BACKEND_WORKLOAD_FILES:
        with contextlib.redirect_stdout(io.StringIO()):
            got = vbw.compare(RESULTS / name, [])
        for row in got["rows"]:
            w = make_workload(resolve_model(row["model"]), tp=int(row["tp"]), batch=1, seq_len=1)
            lay = f"{w.num_heads}:{w.num_kv_heads} d{w.head_size}"
            for path, t in row["totals"].items():
                if path in ("flashinfer", "flashinfer-tc", "fa3"):
                    key = path + ("/fp8" if row["kv_cache_dtype"] != "auto" else "")
                    side = "fitted_layout" if lay in block["kernels"][key]["fitted_layouts"] else "new_layout"
                    errs.setdefault((key, side), []).append(abs(t["predicted_s"] / t["measured_s"] - 1))
    assert {k for k, _ in errs} == {"flashinfer", "flashinfer-tc", "fa3", "flashinfer/fp8", "flashinfer-tc/fp8",
                                    "fa3/fp8"}
    for (key, side), e in errs.items():
        fig = block["kernels"][key].get("workload_totals", {}).get(side)
        if len(e) < 3:
            assert fig is None, (key, side)
            continue
        med, p90 = _median_p90(e)
        assert fig["rows"] == len(e) and fig["max_abs_err"] == pytest.approx(max(e), abs=6e-5), (key, side)
        assert (fig["median_abs_err"], fig["p90_abs_err"]) == pytest.approx((med, p90), abs=6e-5)


def test_tune_backend_lines_carry_their_totals_error(block):
    out = json.loads(_invoke("tune", "-m", "llama3.1-8b", "--workload", "chat", "--json"))
    fa3 = out["default_backends"]["vllm"]  # vLLM's default on the H200: FA3, timed as the baseline
    fig = block["kernels"]["fa3"]["workload_totals"]["fitted_layout"]
    assert fa3["predicted_error"]["of"] == "workload total"
    assert fa3["predicted_error"]["median_abs_err"] == fig["median_abs_err"]
