"""The in-graph regime (issue 18, item 3): a launch inside a decode layer's graph costs its back-to-back time plus a
measured per-launch cost per system (the profile's ``in_graph`` block, from benchmarks/in_graph_h200.py), chosen
with ``--regime``; the lab note's figures and the packaged block recomputed from the committed H200 run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from decodecalc.cli import app
from decodecalc.commands.options import REGIME_NAMES
from decodecalc.errors import ChoiceError, ConfigError
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.timemodel import launch_time_s, packaged_profile, predict_plan, profile_from_mapping
from decodecalc.timemodel.profile import IN_GRAPH_DEFAULT, REGIMES
from decodecalc.timemodel.fit import Shape
from decodecalc.timemodel.work import sglang_work, vllm_work
from decodecalc.workload import make_workload

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "results" / "in-graph-h200.jsonl"
runner = CliRunner()


@pytest.fixture(scope="module")
def h200():
    prof = packaged_profile("h200")
    assert prof is not None and prof.in_graph_launch_s
    return prof


def _shape(lens=(512,), h=8, h_kv=1, d=128) -> Shape:
    return Shape(num_heads=h, num_kv_heads=h_kv, seq_lens=tuple(lens), head_size=d, head_size_v=d)


def test_the_cli_names_the_core_regimes():
    assert REGIME_NAMES == REGIMES


def test_back_to_back_is_the_default_and_adds_nothing(h200):
    assert h200.regime == "back-to-back"
    assert h200.regime_launch_s("vllm") == 0.0
    assert h200.in_regime("back-to-back") is h200


def test_in_graph_adds_each_systems_measured_cost(h200):
    ig = h200.in_regime("in-graph")
    for work in (vllm_work(_shape(), splits=16, use_3d=True), vllm_work(_shape((4096, 300)), splits=1, use_3d=False),
                 sglang_work(_shape((2000,)), splits=(8,), max_kv_splits=8, adaptive=True)):
        added = launch_time_s(work, ig) - launch_time_s(work, h200)
        assert added == pytest.approx(h200.in_graph_launch_s[work.kernel], rel=1e-9, abs=1e-15)
        assert added > 0


def test_a_system_the_run_did_not_measure_takes_the_default(h200):
    ig = h200.in_regime("in-graph")
    assert "flashmla" not in h200.in_graph_launch_s
    assert ig.regime_launch_s("flashmla") == h200.in_graph_launch_s[IN_GRAPH_DEFAULT]


def test_predict_plan_carries_the_regimes_cost(h200):
    from decodecalc.launchers.flashinfer import plan_flashinfer_tc

    w = make_workload(resolve_model("llama3-70b"), tp=8, seq_lens=(512,), block_size=16)
    plan = plan_flashinfer_tc(w, resolve_gpu("h200"), cuda_graph=True)
    b2b = predict_plan(plan, w, resolve_gpu("h200"), "flashinfer-tc", profile=h200)
    ig = predict_plan(plan, w, resolve_gpu("h200"), "flashinfer-tc", profile=h200.in_regime("in-graph"))
    assert b2b.regime_s == 0.0
    assert ig.regime_s == h200.in_graph_launch_s["flashinfer-tc"]
    assert ig.time_s - b2b.time_s == pytest.approx(ig.regime_s)


def test_unknown_regime_and_a_profile_without_in_graph_data_are_errors(h200):
    with pytest.raises(ChoiceError, match="--regime 'inline'; valid: back-to-back, in-graph"):
        h200.in_regime("inline")
    bare = dataclasses.replace(h200, in_graph_launch_s={})
    with pytest.raises(ConfigError, match="no in-graph measurements"):
        bare.in_regime("in-graph")


def test_the_block_round_trips_and_bad_blocks_are_refused(h200):
    data = h200.to_mapping()
    assert data["in_graph"]["launch_s"] == dict(h200.in_graph_launch_s)
    again = profile_from_mapping(data, origin="x.yaml")
    assert again.in_graph_launch_s == h200.in_graph_launch_s and again.in_graph_source == h200.in_graph_source
    for bad, msg in (({"launch_s": {"flashmla2": 1e-6}}, "unknown system 'flashmla2'"),
                     ({"launch_s": {"vllm": 0.5}}, "in_graph.launch_s.vllm must be seconds"),
                     ({"launch_s": {"vllm": "fast"}}, "in_graph.launch_s.vllm must be seconds"),
                     ({"launch_s": {}}, "non-empty 'launch_s'"), ([1, 2], "'in_graph' must be a mapping")):
        with pytest.raises(ConfigError, match=msg):
            profile_from_mapping({**data, "in_graph": bad}, origin="x.yaml")


def test_tune_totals_in_graph_add_one_cost_per_step():
    from decodecalc.api import tune

    steps = [{"seq_lens": [1000 + i, 2000 + i, 300]} for i in range(40)]
    b2b, ig = (tune("llama3-8b", steps=steps, heuristics="none", regime=r) for r in REGIMES)
    prof = packaged_profile("h200")
    for engine in ("vllm", "sglang"):
        added = ig.engines[engine].default.stats.total_s - b2b.engines[engine].default.stats.total_s
        assert added == pytest.approx(40 * prof.in_graph_launch_s[engine], rel=1e-6)
    assert ig.to_dict()["regime"]["name"] == "in-graph" and b2b.to_dict()["regime"]["name"] == "back-to-back"


def test_cli_regime_option_json_and_errors():
    args = ["recommend", "--model", "llama3-70b", "--tp", "8", "--batch", "1", "--seq-len", "512", "--json"]
    res = runner.invoke(app, [*args, "--regime", "in-graph"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["regime"]["name"] == "in-graph" and data["regime"]["launch_s"]["vllm"] > 0
    base = json.loads(runner.invoke(app, args).stdout)
    assert base["regime"] == {"name": "back-to-back", "launch_s": {"vllm": 0.0, "sglang": 0.0}}
    assert (data["kernels"]["vllm"]["recommended"]["predicted_time_s"]
            > base["kernels"]["vllm"]["recommended"]["predicted_time_s"])
    res = runner.invoke(app, [*args, "--regime", "inline"])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "Error: --regime 'inline'; valid: back-to-back, in-graph" in res.output


def test_text_output_states_the_regime():
    res = runner.invoke(app, ["recommend", "--model", "llama3-8b", "--batch", "4", "--seq-len", "2048"])
    assert res.exit_code == 0, res.output
    assert "times: back to back" in " ".join(res.output.split())
    res = runner.invoke(app, ["recommend", "--model", "llama3-8b", "--batch", "4", "--seq-len", "2048",
                              "--regime", "in-graph"])
    assert "times: in a decode layer's graph" in " ".join(res.output.split())


def test_packaged_costs_and_the_summary_recomputed_from_the_committed_run(h200):
    from benchmarks.in_graph_compare import summary_of, table

    got = summary_of(DATA)
    assert got["in_graph_launch_s"] == pytest.approx(dict(h200.in_graph_launch_s), abs=1e-12)
    # the committed summary is what today's code computes; the lab note's table is that summary's
    # (tests/test_benchmarks_tables.py)
    saved = json.loads((DATA.parent / "in-graph-h200-summary.json").read_text())
    assert table(got["backends"]) == table(saved["backends"])
    # the run's own claim: every system pays more inside a layer's graph than back to back
    for system, cost in got["in_graph_launch_s"].items():
        assert cost > 0, system


def test_workload_figures_in_the_lab_note_recomputed_from_the_committed_run():
    from benchmarks.in_graph_compare import workload_figures

    got = workload_figures()
    text = " ".join((ROOT / "docs" / "lab" / "2026-12-02-in-graph-regime.md").read_text().split())
    plain, regime, b2b = (got[k] for k in ("in-graph, back-to-back prediction", "in-graph, with the regime's cost",
                                           "back-to-back"))
    assert plain["totals"] == regime["totals"] == b2b["totals"] == 42
    assert (f"the back-to-back prediction puts {plain['within_5pct']} of 42 within 5% (median "
            f"{plain['median_abs_err']:.1%})") in text
    assert f"`--regime in-graph` {regime['within_5pct']} of 42 (median {regime['median_abs_err']:.1%})" in text
    assert f"back to back against back to back, {b2b['within_5pct']} of 42 ({b2b['median_abs_err']:.1%})" in text
    ratio = got["in_graph_over_back_to_back"]
    assert f"a median {ratio['median']:.1%} longer ({ratio['min']:+.1%} to {ratio['max']:+.1%}" in text


def test_compare_regime_moves_every_predicted_backend_by_its_cost():
    from decodecalc.api import compare

    kw = dict(tp=8, batch=1, seq_len=512, policies="vllm,sglang,fa3,flashinfer,flashinfer-tc")
    b2b, ig = (compare("llama3-70b", regime=r, **kw) for r in REGIMES)
    prof = packaged_profile("h200")
    for x, y in zip(b2b.policies, ig.policies):
        assert x.extra["predicted_regime"] == "back-to-back" and y.extra["predicted_regime"] == "in-graph"
        added = y.extra["predicted_time_s"] - x.extra["predicted_time_s"]
        assert added == pytest.approx(prof.in_graph_launch_s[x.name], rel=1e-9), x.name
    res = runner.invoke(app, ["compare", "-m", "llama3-70b", "--tp", "8", "--regime", "in-graph"])
    assert res.exit_code == 0 and "in a decode layer's graph" in " ".join(res.output.split())
    res = runner.invoke(app, ["compare", "--regime", "x"])
    assert res.exit_code != 0 and "Error: --regime 'x'; valid: back-to-back, in-graph" in res.output


def test_grid_regime_adds_the_cost_and_says_so():
    from decodecalc.api import grid

    b2b, ig = (grid("llama3-70b", tp=8, batch=1, seq_len=512, regime=r) for r in REGIMES)
    prof = packaged_profile("h200")
    for x, y in zip(b2b.to_dict()["systems"].values(), ig.to_dict()["systems"].values()):
        assert x["predicted_regime"] == "back-to-back" and y["predicted_regime"] == "in-graph"
    for name in ("vllm", "sglang"):
        added = ig.to_dict()["systems"][name]["predicted_time_s"] - b2b.to_dict()["systems"][name]["predicted_time_s"]
        assert added == pytest.approx(prof.in_graph_launch_s[name], rel=1e-9)
    res = runner.invoke(app, ["grid", "-m", "llama3-70b", "--tp", "8", "--regime", "in-graph"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "(in a layer's graph)" in res.output
    res = runner.invoke(app, ["grid", "--regime", "x"])
    assert res.exit_code != 0 and "Error: --regime 'x'; valid: back-to-back, in-graph" in res.output
