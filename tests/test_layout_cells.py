"""Layout cells of the residual map (decodecalc/timemodel/residuals.py) and `calibrate --model` / `--keep-physics`,
which times a user's own head layout and adds its cells (decodecalc/timemodel/calibration_fit.py).

A group cell (family, query heads per KV head, head dim) pools every layout of a group size: 8:1 and 64:8 read the
same corrections, although SGLang's stage 1 differs by up to 18% between such layouts on the H200 (BENCHMARKS.md,
"SGLang's stage 1 by head layout"). A layout cell adds the KV heads per rank; a launch reads it where the map has it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import pytest
import yaml
from helpers import fit_without_inherited
from typer.testing import CliRunner

from decodecalc.batch.evaluate import ExactTimer, residual_factor
from decodecalc.batch.launches import SglangRecipe, VllmRecipe
from decodecalc.batch.steps import from_trace
from decodecalc.cli import app
from decodecalc.launchers.sglang_triton import SglangSettings
from decodecalc.launchers.vllm_unified import VllmSettings
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.timemodel import packaged_profile, profile_from_mapping, sglang_work, vllm_work
from decodecalc.timemodel.calibration_fit import CALIBRATION_VARIANTS, LAYOUT_BATCHES, calibration_plan
from decodecalc.timemodel.fit import Shape
from decodecalc.timemodel.predict import model_launch_time_s
from decodecalc.timemodel.residuals import (
    DEFAULT_LAYOUT_PRIOR_LAUNCHES,
    DEFAULT_PRIOR_LAUNCHES,
    WORKLOAD_LOCAL_BANDWIDTH_OCTAVES,
    WORKLOAD_LOCAL_PRIOR_LAUNCHES,
    build_residual_map,
    is_layout_cell,
    launch_cells,
)
from decodecalc.traffic import DecodeStep, StepTrace
from decodecalc.workload import make_workload

ROOT = Path(__file__).resolve().parents[1]
UNSEEN = ROOT / "benchmarks" / "results" / "layouts-h200-unseen.json"
runner = CliRunner()
H200 = resolve_gpu("h200")


@pytest.fixture(scope="module")
def bare():
    prof = packaged_profile("h200")
    assert prof is not None
    return dataclasses.replace(prof, residuals=None)


def shape(h: int, h_kv: int, batch: int = 64, seq_len: int = 2048) -> Shape:
    return Shape(num_heads=h, num_kv_heads=h_kv, seq_lens=(seq_len,) * batch, head_size=128, head_size_v=128)


def biased(lws, profile, bias: float):
    return [(lw, bias * model_launch_time_s(lw, profile), model_launch_time_s(lw, profile)) for lw in lws]


def test_cells_of_a_launch_name_its_group_and_its_layout():
    lw = sglang_work(shape(64, 8), splits=8, max_kv_splits=8)
    assert launch_cells(lw) == ("sglang_stage1/g8/d128", "sglang_stage1/g8/d128/kv8")
    ad = sglang_work(shape(64, 8), splits=(8,) * 64, max_kv_splits=8, adaptive=True)
    group, layout = launch_cells(ad)
    assert layout == group.replace("/d128/", "/d128/kv8/") and is_layout_cell(layout) and not is_layout_cell(group)
    assert launch_cells(vllm_work(shape(8, 1), splits=16, use_3d=True))[1] == "vllm_3d/g8/d128/kv1"
    # the split-count kernel's name holds "kv" but is not a layout
    assert not is_layout_cell("sglang_stage1/g8/d128/get_num_kv_splits_triton")


def test_a_layout_cell_is_read_by_its_layout_only(bare):
    wide = [sglang_work(shape(64, 8, b), splits=8, max_kv_splits=8) for b in (16, 64)]
    narrow = sglang_work(shape(8, 1, 64), splits=8, max_kv_splits=8)  # the same group size and head dim
    rmap = build_residual_map(biased(wide * 5, bare, 1.2), bare, layout_cells=True, group_cells=False)
    assert set(rmap.cells) == {"sglang_stage1/g8/d128/kv8"}
    # no group cell: the layout's offset alone, 10 timings of log 1.2 shrunk by one pseudo-launch, wherever it is read
    offset = 10 * math.log(1.2) / (10 + DEFAULT_LAYOUT_PRIOR_LAUNCHES)
    far = sglang_work(shape(64, 8, 1, 64), splits=1, max_kv_splits=1)
    for lw in (*wide, far):
        c = rmap.correction(lw, bare)
        assert c.cell == "sglang_stage1/g8/d128/kv8" and math.log(c.factor) == pytest.approx(offset, rel=1e-12)
    assert rmap.factor(narrow, bare) == 1.0
    # with the group cells too, the other layout reads the group cell; its own layout still reads its layout cell
    both = build_residual_map(biased(wide * 5, bare, 1.2) + biased([narrow] * 5, bare, 0.8), bare, layout_cells=True)
    assert set(both.cells) == {"sglang_stage1/g8/d128", "sglang_stage1/g8/d128/kv8", "sglang_stage1/g8/d128/kv1"}
    assert both.correction(wide[1], bare).cell == "sglang_stage1/g8/d128/kv8"
    assert both.factor(wide[1], bare) > 1.1 and both.factor(narrow, bare) < 0.9
    only_group = build_residual_map(biased(wide * 5, bare, 1.2) + biased([narrow] * 5, bare, 0.8), bare)
    assert set(only_group.cells) == {"sglang_stage1/g8/d128"}  # the default pools both layouts


def test_a_layout_cell_is_its_group_cell_moved_by_the_layout_offset(bare):
    """log factor = the group cell's log factor at the launch + sum_i n_i (r_i - group(u_i, v_i)) / (N + prior)."""
    wide = [sglang_work(shape(64, 8, b, L), splits=s, max_kv_splits=s) for b, L, s in ((16, 4096, 8), (64, 2048, 4))]
    narrow = [sglang_work(shape(8, 1, b, 8192), splits=8, max_kv_splits=8) for b in (8, 32, 128)]
    both = build_residual_map(biased(wide * 3, bare, 1.15) + biased(narrow * 4, bare, 0.9), bare, layout_cells=True)
    group = dataclasses.replace(both, cells={"sglang_stage1/g8/d128": both.cells["sglang_stage1/g8/d128"]}, _memo={})
    pts = both.cells["sglang_stage1/g8/d128/kv8"]

    def group_lf(u, v):
        return group.log_factor_at("sglang_stage1/g8/d128", round(u * 16), round(v * 16))[0]

    offset = sum(n * (r - group_lf(u, v)) for u, v, r, n in pts) / (sum(p[3] for p in pts) + DEFAULT_LAYOUT_PRIOR_LAUNCHES)
    assert offset > 0.02  # the wide layout runs slower than its group cell (which the narrow one pulls down) says
    for lw in (*wide, sglang_work(shape(64, 8, 2, 100000), splits=32, max_kv_splits=32)):
        c = both.correction(lw, bare)
        assert math.log(c.factor) == pytest.approx(math.log(group.correction(lw, bare).factor) + offset, rel=1e-9)


def test_a_layout_cell_shrinks_by_its_own_prior(bare):
    lw = sglang_work(shape(64, 8), splits=8, max_kv_splits=8)
    layout = build_residual_map(biased([lw], bare, 1.2), bare, layout_cells=True, group_cells=False)
    group = build_residual_map(biased([lw], bare, 1.2), bare)
    w = group.correction(lw, bare).support_launches  # the Gaussian weight of the one timing at this launch
    assert math.log(layout.factor(lw, bare)) == pytest.approx(math.log(1.2) / (1 + DEFAULT_LAYOUT_PRIOR_LAUNCHES))
    assert math.log(group.factor(lw, bare)) == pytest.approx(w * math.log(1.2) / (w + DEFAULT_PRIOR_LAUNCHES))
    assert layout.factor(lw, bare) > group.factor(lw, bare)


def test_layout_prior_round_trips_and_is_checked(bare):
    lw = sglang_work(shape(64, 8), splits=8, max_kv_splits=8)
    rmap = build_residual_map(biased([lw], bare, 1.2), bare, layout_cells=True)
    rmap = dataclasses.replace(rmap, layout_prior_launches=2.5, _memo={})
    prof = dataclasses.replace(bare, residuals=rmap)
    back = profile_from_mapping(yaml.safe_load(yaml.safe_dump(prof.to_mapping())), origin="t")
    assert back.residuals.layout_prior_launches == 2.5
    assert back.residuals.factor(lw, back) == pytest.approx(rmap.factor(lw, prof), rel=1e-5)  # stored to 5 digits
    bad = prof.to_mapping()
    bad["residuals"]["layout_prior_launches"] = -1
    with pytest.raises(Exception, match="layout_prior_launches"):
        profile_from_mapping(bad, origin="t")


def _two_regimes(bare):
    """One layout whose 3D launches at few segments run 25% slow and at many segments 20% fast: one offset per family
    cannot follow both (Llama-3-405B's chat error changes sign between settings)."""
    few = [vllm_work(shape(16, 1, b, 2048), splits=2, use_3d=True) for b in (4, 8, 16)]
    many = [vllm_work(shape(16, 1, b, 65536), splits=256, use_3d=True) for b in (4, 8, 16)]
    rmap = build_residual_map(biased(few * 3, bare, 1.25) + biased(many * 3, bare, 0.8), bare, layout_cells=True,
                              group_cells=False)
    return few, many, rmap


def test_the_local_term_follows_a_layout_bias_that_changes_with_the_regime(bare):
    few, many, offset_only = _two_regimes(bare)
    local = dataclasses.replace(offset_only, layout_local_bandwidth_octaves=WORKLOAD_LOCAL_BANDWIDTH_OCTAVES, _memo={})
    assert local.layout_local_prior_launches == WORKLOAD_LOCAL_PRIOR_LAUNCHES
    # the offset averages the two regimes; the local term moves each back to what was measured there
    for lw in few:
        assert abs(math.log(offset_only.factor(lw, bare))) < 0.05 and local.factor(lw, bare) == pytest.approx(1.25, rel=0.03)
    for lw in many:
        assert local.factor(lw, bare) == pytest.approx(0.8, rel=0.03)
    # far from every timing the local term is zero: the offset alone
    far = vllm_work(shape(16, 1, 256, 512), splits=1, use_3d=False)
    far3 = vllm_work(shape(16, 1, 128, 512), splits=8, use_3d=True)
    assert local.factor(far3, bare) == pytest.approx(offset_only.factor(far3, bare), rel=1e-12)
    assert local.factor(far, bare) == offset_only.factor(far, bare) == 1.0  # another family: no cell


def test_the_local_term_round_trips_and_is_checked(bare):
    few, _, rmap = _two_regimes(bare)
    rmap = dataclasses.replace(rmap, layout_local_bandwidth_octaves=0.5, layout_local_prior_launches=0.3, _memo={})
    prof = dataclasses.replace(bare, residuals=rmap)
    back = profile_from_mapping(yaml.safe_load(yaml.safe_dump(prof.to_mapping())), origin="t").residuals
    assert (back.layout_local_bandwidth_octaves, back.layout_local_prior_launches) == (0.5, 0.3)
    assert back.factor(few[0], bare) == pytest.approx(rmap.factor(few[0], bare), rel=1e-5)
    assert "layout_local_bandwidth_octaves" not in dataclasses.replace(bare, residuals=dataclasses.replace(
        rmap, layout_local_bandwidth_octaves=None)).to_mapping()["residuals"]
    for field, value in (("layout_local_bandwidth_octaves", 0), ("layout_local_prior_launches", -1),
                         ("layout_local_bandwidth_octaves", "x")):
        bad = prof.to_mapping()
        bad["residuals"][field] = value
        with pytest.raises(Exception, match="layout_local"):
            profile_from_mapping(bad, origin="t")


@pytest.mark.parametrize("local", [None, WORKLOAD_LOCAL_BANDWIDTH_OCTAVES])
@pytest.mark.parametrize("model, tp", [("qwen3-32b", 1), ("llama3.1-8b", 1)])
def test_the_array_model_reads_the_cell_the_scalar_model_reads(bare, model, tp, local):
    """tune's array model (batch/evaluate.residual_factor) and the scalar correction pick the same cell: a map whose
    layout cell covers this layout for one family and whose group cell covers another layout of the same group."""
    base = make_workload(resolve_model(model), tp=tp)
    h, h_kv = base.num_heads, base.num_kv_heads
    other = h_kv * 2 if h_kv * 2 <= h else 1
    samples = []
    for b in (1, 8, 64):
        for s in (1, 8, 32):
            samples += biased([sglang_work(shape(h, h_kv, b, 4096), splits=s, max_kv_splits=s)], bare, 1.25)
            samples += biased([vllm_work(shape(h * other // h_kv, other, b, 4096), splits=s, use_3d=s > 1)], bare, 0.8)
    rmap = dataclasses.replace(build_residual_map(samples, bare, layout_cells=True), layout_local_bandwidth_octaves=local)
    prof = dataclasses.replace(bare, residuals=rmap)
    rng = random.Random(5)
    steps = [DecodeStep(seq_lens=tuple(rng.randint(1, 20000) for _ in range(b)), query_lens=(1,) * b, weight=1,
                        origin=f"r{i}") for i, b in enumerate(rng.choice((1, 4, 32, 96)) for _ in range(12))]
    sa = from_trace(StepTrace(steps=tuple(steps), source="t"))
    timer = ExactTimer(base, sa, prof)
    compared = moved = 0
    for recipe in (VllmRecipe(base, H200, VllmSettings(num_par_softmax_segments=32)),
                   SglangRecipe(base, H200, SglangSettings(max_kv_splits=16, static_kv_splits=True))):
        for block in sa.blocks():
            for la in recipe.block_launches(block):
                got = residual_factor(la, prof)
                for j, row in enumerate(block.rows[la.rows].tolist()):
                    want = rmap.factor(recipe.launch_work(timer.work(row), row), prof)
                    assert (got[j] if not isinstance(got, float) else got) == pytest.approx(want, rel=1e-12)
                    compared += 1
                    moved += want != 1.0
    assert compared >= 24 and moved > 0


def test_calibration_plan_times_each_layout_at_the_layout_batches():
    base = calibration_plan()
    plan = calibration_plan(layouts=[(64, 8, 128), (64, 8, 128), (16, 1, 128)])
    extra = plan[len(base):]
    assert plan[:len(base)] == base
    assert len(extra) == 2 * len(LAYOUT_BATCHES) and all(v == CALIBRATION_VARIANTS for _, v in extra)
    assert {s[:3] for s, _ in extra} == {(64, 8, 128), (16, 1, 128)}
    assert calibration_plan(layouts=[(64, 8, 128)], layouts_only=True) == extra[:len(LAYOUT_BATCHES)]
    assert sum(len(v) for _, v in calibration_plan(layouts=[(64, 8, 128)], layouts_only=True)) == 40


def _layout_rows(tmp_path: Path, layout: str = "64:8-d128") -> Path:
    """The 40 timings `calibrate -m qwen3-32b` takes (64:8 d128 at the layout batches and calibrate's split counts),
    from the H200 run of benchmarks/measure_layouts_h200.py (results/layouts-h200-unseen.json)."""
    data = json.loads(UNSEEN.read_text())
    data["cases"] = [r for r in data["cases"] if r["model"] == layout and r["variant"] in CALIBRATION_VARIANTS
                     and "slots" not in r]
    assert len(data["cases"]) == 40
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    return path


def test_keep_physics_adds_the_layout_cells_to_the_packaged_profile(tmp_path):
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--from-measurements", str(_layout_rows(tmp_path)), "--keep-physics",
                              "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "40 timings" in res.output
    got = yaml.safe_load(out.read_text())
    shipped = packaged_profile("h200").to_mapping()
    assert got["families"] == shipped["families"]  # nothing refitted
    for key in ("launch_overhead_s", "idle_program_s", "hbm_bandwidth_bytes_per_s"):
        assert got[key] == shipped[key]
    cells, old = got["residuals"]["cells"], shipped["residuals"]["cells"]
    added = set(cells) - set(old)
    assert added and all(is_layout_cell(c) and "/g8/d128/kv8" in c for c in added)
    assert {c: cells[c] for c in old} == old  # the packaged cells stay as they are
    assert got["fit"]["rows"] == 40 and got["fit"].get("domain") == shipped["fit"].get("domain")
    assert got["fit"]["backend_families"] == shipped["fit"]["backend_families"]
    assert "64:8 d128" in got["source"]
    # in sample, the layout cells bring the timings closer than the packaged profile does
    assert got["fit"]["median_abs_err"] < got["fit"]["physics_median_abs_err"]


@pytest.mark.parametrize("args, needle", [
    (["--keep-physics"], "--keep-physics needs --model"),
    (["--keep-physics", "-m", "qwen3-32b", "--from-scratch"], "fits nothing"),
    (["--keep-physics", "-m", "qwen3-32b", "--thorough"], "fits nothing"),
    (["-m", "deepseek-v2-lite"], "MLA"),
    (["-m", "llama3-8b", "--tp", "3"], "not divisible by --tp 3"),
    (["-m", "no-such-model"], "no-such-model"),
])
def test_bad_model_options_are_one_line_errors(args, needle):
    res = runner.invoke(app, ["calibrate", *args])
    assert res.exit_code == 1, res.output
    assert needle in res.output and res.output.startswith("Error:") and "Traceback" not in res.output


def test_model_with_saved_measurements_is_an_error(tmp_path):
    res = runner.invoke(app, ["calibrate", "--from-measurements", str(_layout_rows(tmp_path)), "-m", "qwen3-32b",
                              "-o", str(tmp_path / "p.yaml")])
    assert res.exit_code == 1 and "the saved timings say which layouts" in res.output
    assert not (tmp_path / "p.yaml").exists()


def test_a_full_calibration_gives_layout_cells_to_the_model_layouts_only(tmp_path):
    """`calibrate -m qwen3-32b` (no --keep-physics): the ten shapes and the model's 40 timings are fitted together; the
    map has group cells from all of them and layout cells from the model's layout alone (it saves ``layouts``)."""
    std = json.loads((ROOT / "benchmarks" / "results" / "calibrate-h200-measurements.json").read_text())
    own = json.loads(_layout_rows(tmp_path).read_text())["cases"]
    data = {**std, "layouts": [[64, 8, 128]], "cases": std["cases"] + own}
    (tmp_path / "both.json").write_text(json.dumps(data))
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--from-measurements", str(tmp_path / "both.json"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    cells = yaml.safe_load(out.read_text())["residuals"]["cells"]
    layout = {c for c in cells if is_layout_cell(c)}
    assert layout and all("/g8/d128/kv8" in c for c in layout)
    assert "sglang_stage1/g8/d128" in cells and "sglang_stage1/g4/d128" in cells  # 64:8 and 8:1 pool; 32:8
    # without the saved layouts: group cells only (the device run of benchmarks/results/calibrate-h200.yaml)
    res = runner.invoke(app, ["calibrate", "--from-measurements", str(ROOT / "benchmarks" / "results" /
                                                                       "calibrate-h200-measurements.json"),
                              "-o", str(out)])
    assert res.exit_code == 0 and not any(is_layout_cell(c) for c in yaml.safe_load(out.read_text())["residuals"]["cells"])


@pytest.mark.parametrize("layouts", ["64:8", [[64, 8]], [[64, 8, 0]], [[64, True, 128]]])
def test_bad_saved_layouts_are_refused(tmp_path, layouts):
    data = json.loads(_layout_rows(tmp_path).read_text())
    data["layouts"] = layouts
    (tmp_path / "bad.json").write_text(json.dumps(data))
    res = runner.invoke(app, ["calibrate", "--from-measurements", str(tmp_path / "bad.json"), "-o",
                              str(tmp_path / "p.yaml")])
    assert res.exit_code == 1 and "field 'layouts'" in res.output and not (tmp_path / "p.yaml").exists()


def test_the_device_run_of_calibrate_model_keep_physics_is_reproduced_from_its_timings(tmp_path):
    """`calibrate --gpu h200 -m qwen3-32b --keep-physics --save-measurements ...` ran on the H200 (2026-12-02, 18 s);
    its saved timings give the same map, physics and statistics here."""
    res_dir = ROOT / "benchmarks" / "results"
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--from-measurements",
                              str(res_dir / "calibrate-h200-qwen3-32b-measurements.json"), "--keep-physics",
                              "-o", str(out)])
    assert res.exit_code == 0, res.output
    got, ref = yaml.safe_load(out.read_text()), yaml.safe_load((res_dir / "calibrate-h200-qwen3-32b.yaml").read_text())
    # the other backends' families and records ride along from the starting profile (they move when its do)
    # and so does SGLang's fp8 family, which the packaged profile got after that run (with its kernel domain)
    backend = ("fa3_", "fa2_", "flashinfer_", "flashmla_", "sglang_stage1_fp8", "xqa")
    assert got["residuals"] == ref["residuals"]
    assert {k: v for k, v in got["families"].items() if not k.startswith(backend)} == \
        {k: v for k, v in ref["families"].items() if not k.startswith(backend)}
    assert fit_without_inherited(got["fit"]) == fit_without_inherited(ref["fit"])
    assert any(c.endswith("/g8/d128/kv8") for c in ref["residuals"]["cells"])
    assert "layout_local_bandwidth_octaves" not in got["residuals"]  # 40 uniform timings: the offset alone
