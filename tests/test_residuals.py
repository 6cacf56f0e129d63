"""The time model's residual map (decodecalc/timemodel/residuals.py): the measured bias of the physics per regime.

Synthetic maps check the arithmetic (shrinkage, locality, the clamp), the profile section's parsing and round trip,
and the packaged H200 map; benchmarks/fit_timemodel.with_residuals builds maps from Measurements.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from pathlib import Path

import pytest
import yaml
from helpers import H200, LLAMA3_8B, work
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decodecalc.errors import ConfigError
from decodecalc.timemodel import (
    dump_profile,
    launch_time_s,
    packaged_profile,
    predict_time_s,
    profile_from_mapping,
    sglang_work,
    vllm_work,
    work_for_plan,
)
from decodecalc.timemodel.fit import Measurement, Shape
from decodecalc.timemodel.predict import model_launch_time_s
from decodecalc.timemodel.residuals import (
    BIN_OCTAVES,
    DEFAULT_BANDWIDTH_OCTAVES,
    MAX_LOG_FACTOR,
    ResidualMap,
    build_residual_map,
    launch_coordinates,
)

ROOT = Path(__file__).resolve().parents[1]
BIAS = 1.10


@pytest.fixture(scope="module")
def h200():
    prof = packaged_profile("h200")
    assert prof is not None
    return prof


@pytest.fixture(scope="module")
def bare(h200):
    return dataclasses.replace(h200, residuals=None)


def gqa(batch: int, seq_len: int, h: int = 32, h_kv: int = 8, d: int = 128) -> Shape:
    return Shape(num_heads=h, num_kv_heads=h_kv, seq_lens=(seq_len,) * batch, head_size=d, head_size_v=d)


def launches() -> list:
    """A few real launches of 32:8 d128: vLLM 3D and 2D, SGLang static and adaptive."""
    s = gqa(64, 2048)
    s2 = gqa(8, 8192)
    return [vllm_work(s, splits=16, use_3d=True), vllm_work(s2, splits=8, use_3d=True),
            vllm_work(s, splits=1, use_3d=False), sglang_work(s, splits=8, max_kv_splits=8),
            sglang_work(s2, splits=(8,) * 8, max_kv_splits=8, adaptive=True)]


def biased(lws, profile, bias: float, repeat: int):
    """(work, measured, modelled) samples with measured = bias * modelled, each launch ``repeat`` times."""
    return [(lw, bias * model_launch_time_s(lw, profile), model_launch_time_s(lw, profile))
            for lw in lws for _ in range(repeat)]


def one_launch_map(profile, bias: float, repeat: int, **kw) -> tuple[ResidualMap, object]:
    lw = vllm_work(gqa(64, 2048), splits=16, use_3d=True)
    return build_residual_map(biased([lw], profile, bias, repeat), profile, **kw), lw


# -- no map ------------------------------------------------------------------------------------


def test_no_map_is_the_physics(bare):
    for lw in launches():
        assert launch_time_s(lw, bare) == model_launch_time_s(lw, bare)
        assert launch_time_s(lw, bare, occupancy_delta=1) == model_launch_time_s(lw, bare, occupancy_delta=1)


# -- building a map ----------------------------------------------------------------------------


def test_uniform_bias_is_recovered_shrunk_by_the_prior(bare):
    lws = launches()
    rmap = build_residual_map(biased(lws, bare, BIAS, 50), bare)
    assert rmap.launches == 50 * len(lws)
    for lw in lws:
        f = rmap.factor(lw, bare)
        assert 1.08 < f < BIAS, (lw.label, f)
        c = rmap.correction(lw, bare)
        assert c.factor == f and c.support_launches >= 0.5 * 50  # its own bin is within the memo grid's step
        # the profile's prediction is the physics times the factor
        prof = dataclasses.replace(bare, residuals=rmap)
        assert launch_time_s(lw, prof) == pytest.approx(model_launch_time_s(lw, bare) * f, rel=1e-12)


def test_no_prior_recovers_the_bias_exactly(bare):
    lws = launches()
    rmap = build_residual_map(biased(lws, bare, BIAS, 3), bare, prior_launches=0)
    for lw in lws:
        assert rmap.factor(lw, bare) == pytest.approx(BIAS, abs=1e-9)
    one, lw = one_launch_map(bare, BIAS, 1, prior_launches=0)
    assert sum(len(p) for p in one.cells.values()) == 1
    assert one.factor(lw, bare) == pytest.approx(BIAS, abs=1e-9)


def test_a_bin_holds_the_mean_log_residual(bare):
    """Launches of one bin pool as the mean of their log residuals (a geometric mean of the ratios)."""
    lw = vllm_work(gqa(64, 2048), splits=16, use_3d=True)
    t = model_launch_time_s(lw, bare)
    ratios = (1.0, 1.21, 0.95, 1.3)
    rmap = build_residual_map([(lw, r * t, t) for r in ratios], bare, prior_launches=0)
    ((_, _, r, n),) = next(iter(rmap.cells.values()))
    assert n == len(ratios)
    assert r == pytest.approx(sum(map(math.log, ratios)) / len(ratios), rel=1e-12)
    assert rmap.factor(lw, bare) == pytest.approx(math.prod(ratios) ** (1 / len(ratios)), rel=1e-12)


def test_single_bin_factor_matches_the_formula(bare):
    """exp(w n r / (w n + prior)), w the Gaussian weight of the bin centre's distance from the launch."""
    n = 7
    rmap, lw = one_launch_map(bare, BIAS, n)
    cell, u, v = launch_coordinates(lw, bare)
    ((pu, pv, r, cnt),) = rmap.cells[cell]
    assert cnt == n and r == pytest.approx(math.log(BIAS), rel=1e-12)
    assert pu == round(u / BIN_OCTAVES) * BIN_OCTAVES and pv == round(v / BIN_OCTAVES) * BIN_OCTAVES
    step = 1 / 16  # the lookup's memo grid
    qu, qv = round(u / step) * step, round(v / step) * step
    w = math.exp(-((pu - qu) ** 2 + (pv - qv) ** 2) / (2 * DEFAULT_BANDWIDTH_OCTAVES ** 2)) * n
    expect = math.exp(w * math.log(BIAS) / (w + rmap.prior_launches))
    assert rmap.factor(lw, bare) == pytest.approx(expect, rel=1e-12)
    assert rmap.correction(lw, bare).support_launches == pytest.approx(w, rel=1e-12)


def test_samples_without_a_positive_time_are_skipped(bare):
    lw = vllm_work(gqa(64, 2048), splits=16, use_3d=True)
    t = model_launch_time_s(lw, bare)
    rmap = build_residual_map([(lw, 0.0, t), (lw, t, 0.0), (lw, -t, t), (lw, 1.2 * t, t)], bare)
    assert rmap.launches == 1
    assert build_residual_map([], bare).cells == {}
    assert build_residual_map([], bare).factor(lw, bare) == 1.0


def test_unmeasured_cell_gets_no_correction(bare):
    rmap = build_residual_map(biased(launches(), bare, BIAS, 50), bare)
    others = [
        vllm_work(gqa(64, 2048, h=8, h_kv=1), splits=16, use_3d=True),  # group size 8
        vllm_work(gqa(64, 2048, h=32, h_kv=32), splits=16, use_3d=True),  # group size 1
        vllm_work(gqa(64, 2048, d=64), splits=16, use_3d=True),  # head dim 64
        vllm_work(gqa(64, 2048, d=256), splits=16, use_3d=True),  # head dim 256
        vllm_work(gqa(64, 2048), splits=16, use_3d=True, prefix="ref_vllm"),  # decodecalc's own kernel
        sglang_work(gqa(64, 2048, h=32, h_kv=32), splits=8, max_kv_splits=8),  # SGLang's MHA stage 1
    ]
    for lw in others:
        cell, _, _ = launch_coordinates(lw, bare)
        assert cell not in rmap.cells
        assert rmap.factor(lw, bare) == 1.0
        assert rmap.correction(lw, bare).support_launches == 0.0


def test_far_from_every_point_gets_no_correction(bare):
    rmap, near = one_launch_map(bare, BIAS, 50)
    cell, _, _ = launch_coordinates(near, bare)
    assert rmap.factor(near, bare) > 1.05
    # same cell (vLLM 3D, 32:8, d128), other regimes: one short sequence, and many long ones
    for far in (vllm_work(gqa(1, 16), splits=1, use_3d=True), vllm_work(gqa(256, 65536), splits=64, use_3d=True)):
        c, u, v = launch_coordinates(far, bare)
        assert c == cell
        assert min(math.hypot(pu - u, pv - v) for pu, pv, _, _ in rmap.cells[cell]) > 3.5 * rmap.bandwidth_octaves
        assert rmap.factor(far, bare) == 1.0
        assert rmap.correction(far, bare).support_launches == 0.0


def test_correction_decays_with_distance(bare):
    """A launch between its bin and 3 bandwidths away gets a correction between none and the bin's own."""
    rmap, lw = one_launch_map(bare, BIAS, 50)
    cell, _, _ = launch_coordinates(lw, bare)
    ((pu, pv, _, _),) = rmap.cells[cell]
    bw = rmap.bandwidth_octaves
    vals = [rmap._log_factor(cell, pu + k * bw, pv)[0] for k in (0, 0.5, 1, 2, 2.9, 3.2)]
    assert all(a > b for a, b in itertools.pairwise(vals))
    assert vals[-1] == 0.0 and vals[-2] > 0


def test_shrinkage_fewer_samples_nearer_one(bare):
    for bias in (BIAS, 1 / BIAS):
        fs = [rmap.factor(lw, bare) for rmap, lw in (one_launch_map(bare, bias, n) for n in (1, 3, 10, 100))]
        logs = [abs(math.log(f)) for f in fs]
        assert all(a < b for a, b in itertools.pairwise(logs)), fs
        assert all((f > 1) == (bias > 1) for f in fs)
        assert logs[-1] < abs(math.log(bias))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n1=st.integers(1, 200), n2=st.integers(1, 200), log_bias=st.floats(-0.35, 0.35).filter(lambda x: abs(x) > 1e-3),
       prior=st.floats(0.5, 50))
def test_shrinkage_property(bare, n1, n2, log_bias, prior):
    lo, hi = sorted((n1, n2))
    bias = math.exp(log_bias)
    f_lo = one_launch_map(bare, bias, lo, prior_launches=prior)
    f_hi = one_launch_map(bare, bias, hi, prior_launches=prior)
    l_lo = math.log(f_lo[0].factor(f_lo[1], bare))
    l_hi = math.log(f_hi[0].factor(f_hi[1], bare))
    assert 0 < l_lo / log_bias <= l_hi / log_bias < 1


def test_huge_bias_is_clamped(bare):
    lws = launches()
    up = build_residual_map(biased(lws, bare, 10.0, 50), bare)
    down = build_residual_map(biased(lws, bare, 0.1, 50), bare)
    for lw in lws:
        assert up.factor(lw, bare) <= math.exp(MAX_LOG_FACTOR) <= 1.5 + 1e-12
        assert up.factor(lw, bare) == pytest.approx(1.5, rel=1e-12)
        assert down.factor(lw, bare) >= 1 / 1.5 - 1e-12
        assert down.factor(lw, bare) == pytest.approx(1 / 1.5, rel=1e-12)
    # even with no shrinkage
    assert build_residual_map(biased(lws, bare, 10.0, 1), bare, prior_launches=0).factor(lws[0], bare) <= 1.5 + 1e-12


@pytest.mark.parametrize("kw", [{"bandwidth_octaves": 0.01}, {"bandwidth_octaves": 5.0},
                                {"bandwidth_octaves": float("nan")}, {"prior_launches": -1.0},
                                {"prior_launches": float("inf")}])
def test_map_parameters_are_checked(bare, kw):
    with pytest.raises(ConfigError, match="residuals\\.(bandwidth_octaves|prior_launches)"):
        build_residual_map([], bare, **kw)


# -- round trip through a profile ---------------------------------------------------------------


def _assert_same_map(a: ResidualMap, b: ResidualMap, lws, profile) -> None:
    assert set(a.cells) == set(b.cells)
    for c in a.cells:
        assert len(a.cells[c]) == len(b.cells[c])
        for p, q in zip(a.cells[c], b.cells[c]):
            assert p[0] == pytest.approx(q[0], abs=1e-4) and p[1] == pytest.approx(q[1], abs=1e-4)
            assert p[2] == pytest.approx(q[2], abs=1e-5) and p[3] == q[3]
    assert a.bandwidth_octaves == b.bandwidth_octaves and a.prior_launches == b.prior_launches
    assert a.launches == b.launches
    for lw in lws:
        assert a.factor(lw, profile) == pytest.approx(b.factor(lw, profile), rel=1e-4)


def test_round_trip_through_mapping_and_yaml(bare):
    lws = launches()
    samples = biased(lws[:3], bare, BIAS, 20) + biased(lws[3:], bare, 0.93, 5)
    rmap = build_residual_map(samples, bare, bandwidth_octaves=0.5, prior_launches=2.5, source="synthetic")
    prof = dataclasses.replace(bare, residuals=rmap)
    back = profile_from_mapping(prof.to_mapping(), origin="x")
    assert back.residuals is not None and back.residuals.source == "synthetic"
    _assert_same_map(rmap, back.residuals, lws, bare)
    for lw in lws:
        assert launch_time_s(lw, back) == pytest.approx(launch_time_s(lw, prof), rel=1e-4)
    loaded = profile_from_mapping(yaml.safe_load(dump_profile(prof)), origin="y")
    assert loaded.residuals is not None
    _assert_same_map(rmap, loaded.residuals, lws, bare)
    # a profile without a map writes no section, and reads back without one
    assert "residuals" not in bare.to_mapping()
    assert profile_from_mapping(yaml.safe_load(dump_profile(bare)), origin="z").residuals is None


def test_packaged_map_round_trips(h200):
    back = profile_from_mapping(yaml.safe_load(dump_profile(h200)), origin="x")
    assert back.residuals == h200.residuals  # points are stored rounded, so they read back identical
    for lw in launches():
        assert launch_time_s(lw, back) == launch_time_s(lw, h200)


# -- bad sections -------------------------------------------------------------------------------

GOOD_CELL = "vllm_3d/g4/d128"


def _section(**changes):
    sec = {"bandwidth_octaves": 0.35, "prior_launches": 4.0, "source": "t",
           "cells": {GOOD_CELL: [[3.0, 3.5, 0.01, 5]]}}
    sec.update(changes)
    return sec


def _cells(*points):
    return {GOOD_CELL: list(points)}


BAD_SECTIONS = [
    pytest.param("not a map", r"'residuals' must be a mapping", id="residuals-string"),
    pytest.param([1, 2], r"'residuals' must be a mapping", id="residuals-list"),
    pytest.param(_section(cells=[1, 2]), r"residuals\.cells", id="cells-list"),
    pytest.param(_section(cells="x"), r"residuals\.cells", id="cells-string"),
    pytest.param({"bandwidth_octaves": 0.35}, r"residuals\.cells", id="cells-missing"),
    pytest.param(_section(cells={GOOD_CELL: "x"}), rf"residuals\.cells\.{GOOD_CELL}", id="points-not-list"),
    pytest.param(_section(cells=_cells([3.0, 3.5, 0.01])), rf"residuals\.cells\.{GOOD_CELL}\[0\]", id="3-list"),
    pytest.param(_section(cells=_cells([3.0, 3.5, 0.01, 5, 1])), rf"residuals\.cells\.{GOOD_CELL}\[0\]", id="5-list"),
    pytest.param(_section(cells=_cells([3.0, 3.5, 0.01, 5], 7)), rf"residuals\.cells\.{GOOD_CELL}\[1\]", id="scalar"),
    pytest.param(_section(cells=_cells({"u": 3})), rf"residuals\.cells\.{GOOD_CELL}\[0\]", id="point-map"),
    pytest.param(_section(cells=_cells([float("nan"), 3.5, 0.01, 5])), r"\[0\]", id="nan-u"),
    pytest.param(_section(cells=_cells([3.0, float("inf"), 0.01, 5])), r"\[0\]", id="inf-v"),
    pytest.param(_section(cells=_cells([3.0, 3.5, float("-inf"), 5])), r"\[0\]", id="inf-r"),
    pytest.param(_section(cells=_cells([3.0, 3.5, 0.01, 0])), r"\[0\].*launches", id="launches-0"),
    pytest.param(_section(cells=_cells([3.0, 3.5, 0.01, -2])), r"\[0\].*launches", id="launches-negative"),
    pytest.param(_section(cells=_cells([3.0, 3.5, 0.01, 2.0])), r"\[0\].*launches", id="launches-float"),
    pytest.param(_section(cells=_cells([3.0, 3.5, 0.01, True])), r"\[0\]", id="launches-bool"),
    pytest.param(_section(cells=_cells([3.0, 3.5, "0.01", 5])), r"\[0\]", id="r-string"),
    pytest.param(_section(cells=_cells([3.0, 3.5, 5.5, 5])), r"\[0\].*log_residual", id="log-residual-big"),
    pytest.param(_section(cells=_cells([3.0, 3.5, -5.01, 5])), r"\[0\].*log_residual", id="log-residual-small"),
    pytest.param(_section(cells=_cells([100.0, 3.5, 0.01, 5])), r"\[0\]", id="u-absurd"),
    pytest.param(_section(bandwidth_octaves=0.01), r"residuals\.bandwidth_octaves", id="bandwidth-small"),
    pytest.param(_section(bandwidth_octaves=4.5), r"residuals\.bandwidth_octaves", id="bandwidth-big"),
    pytest.param(_section(bandwidth_octaves=float("nan")), r"residuals\.bandwidth_octaves", id="bandwidth-nan"),
    pytest.param(_section(bandwidth_octaves="wide"), r"residuals\.bandwidth_octaves", id="bandwidth-string"),
    pytest.param(_section(bandwidth_octaves=[1]), r"residuals\.bandwidth_octaves", id="bandwidth-list"),
    pytest.param(_section(prior_launches=-1), r"residuals\.prior_launches", id="prior-negative"),
    pytest.param(_section(prior_launches=float("nan")), r"residuals\.prior_launches", id="prior-nan"),
]


@pytest.mark.parametrize(("section", "pattern"), BAD_SECTIONS)
def test_bad_residual_section_names_the_field(h200, section, pattern):
    with pytest.raises(ConfigError, match=r"^time profile t: ") as e:
        profile_from_mapping({**h200.to_mapping(), "residuals": section}, origin="t")
    assert re.search(pattern, str(e.value)), str(e.value)


def test_good_residual_section_edges_load(h200):
    """The limits themselves are accepted: log residual +-5, bandwidth 0.05 and 4, integer launches."""
    for sec in (_section(cells=_cells([3.0, 3.5, 5, 1], [3.25, 3.5, -5.0, 2])), _section(bandwidth_octaves=0.05),
                _section(bandwidth_octaves=4), _section(prior_launches=0), _section(cells={})):
        prof = profile_from_mapping({**h200.to_mapping(), "residuals": sec}, origin="t")
        assert prof.residuals is not None
    # a section without a source names the file it came from
    sec = _section()
    del sec["source"]
    assert profile_from_mapping({**h200.to_mapping(), "residuals": sec}, origin="my.yaml").residuals.source == "my.yaml"


# -- the packaged H200 map ----------------------------------------------------------------------


def test_packaged_map_is_present_and_described(h200):
    rmap = h200.residuals
    assert rmap is not None and rmap.cells
    assert "measured vLLM and SGLang launches" in rmap.source
    n = int(re.search(r"(\d+) measured vLLM and SGLang launches", rmap.source).group(1))
    assert rmap.launches == n
    assert h200.fit["residual_rows"] >= n  # the map's data include the reference kernels the map leaves out
    for cell, pts in rmap.cells.items():
        assert cell.split("/")[0] in ("vllm_2d", "vllm_3d", "sglang_stage1", "sglang_mha_stage1"), cell
        for u, v, r, k in pts:
            assert u / BIN_OCTAVES == round(u / BIN_OCTAVES) and v / BIN_OCTAVES == round(v / BIN_OCTAVES)
            assert abs(r) < 1 and k >= 1


def test_packaged_cells_of_launches(h200):
    s = gqa(64, 2048)
    assert launch_coordinates(vllm_work(s, splits=16, use_3d=True), h200)[0] == "vllm_3d/g4/d128"
    assert launch_coordinates(vllm_work(s, splits=1, use_3d=False), h200)[0] == "vllm_2d/g4/d128"
    adaptive = launch_coordinates(sglang_work(s, splits=(2,) * 64, max_kv_splits=8, adaptive=True), h200)[0]
    assert adaptive == "sglang_stage1/g4/d128/split-count"  # the engine's split-count kernel runs first
    copied = sglang_work(s, splits=(2,) * 64, max_kv_splits=8, adaptive=True, aux_kernel="copy")
    assert launch_coordinates(copied, h200)[0] == "sglang_stage1/g4/d128/copy"
    # both cells were measured, and the engine's kernel costs more than a copy in the same regime
    assert copied.extra_launches == 1 and h200.residuals.cells["sglang_stage1/g8/d128/copy"]
    assert launch_coordinates(sglang_work(s, splits=8, max_kv_splits=8), h200)[0] == "sglang_stage1/g4/d128"
    assert launch_coordinates(vllm_work(gqa(4, 1000, h=8, h_kv=1), splits=4, use_3d=True), h200)[0] == "vllm_3d/g8/d128"
    assert launch_coordinates(sglang_work(gqa(4, 1000, h=32, h_kv=32), splits=4), h200)[0] == \
        "sglang_mha_stage1/g1/d128"
    for cell in ("vllm_3d/g4/d128", "vllm_2d/g4/d128", "sglang_stage1/g4/d128", "sglang_stage1/g4/d128/split-count",
                 "vllm_3d/g8/d128", "sglang_stage1/g8/d128"):
        assert cell in h200.residuals.cells


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.integers(1, 256), seq_len=st.integers(16, 131072), splits=st.integers(1, 64),
       heads=st.sampled_from([(32, 8), (8, 1)]), kind=st.sampled_from(["vllm-3d", "vllm-2d", "sglang", "sglang-adaptive"]))
def test_packaged_factors_are_bounded_and_deterministic(h200, bare, batch, seq_len, splits, heads, kind):
    s = gqa(batch, seq_len, h=heads[0], h_kv=heads[1])
    if kind == "vllm-3d":
        lw = vllm_work(s, splits=splits, use_3d=True)
    elif kind == "vllm-2d":
        lw = vllm_work(s, splits=1, use_3d=False)
    elif kind == "sglang":
        lw = sglang_work(s, splits=splits, max_kv_splits=splits)
    else:
        lw = sglang_work(s, splits=(min(splits, 16),) * batch, max_kv_splits=16, adaptive=True)
    f = h200.residuals.factor(lw, h200)
    assert 1 / 1.5 - 1e-12 <= f <= 1.5 + 1e-12
    assert h200.residuals.factor(lw, h200) == f
    assert h200.residuals.correction(lw, h200).factor == f
    assert launch_time_s(lw, h200) == pytest.approx(model_launch_time_s(lw, bare) * f, rel=1e-12)
    assert model_launch_time_s(lw, h200) == model_launch_time_s(lw, bare)


# -- the packaged map in the commands' predictions ---------------------------------------------


@pytest.mark.parametrize(("batch", "seq_len", "kernel", "label"),
                         [(8, 4096, "vllm", "3D S=16"), (64, 2048, "vllm", "2D"),
                          (8, 4096, "sglang", "adaptive (max 8)")])
def test_predictions_carry_the_packaged_correction(h200, bare, batch, seq_len, kernel, label):
    from decodecalc.launchers.sglang_triton import plan_sglang
    from decodecalc.launchers.vllm_unified import plan_vllm

    w = work(LLAMA3_8B, batch=batch, seq_len=seq_len)
    plan = (plan_vllm(w, H200) if kernel == "vllm" else plan_sglang(w, H200)).plan
    lw = work_for_plan(plan, w, kernel)
    assert lw.label == label and lw.group_size == 4
    t, cal = predict_time_s(plan, w, H200, kernel, profile=h200)
    t0, cal0 = predict_time_s(plan, w, H200, kernel, profile=bare)
    assert cal and cal0
    f = h200.residuals.factor(lw, h200)
    assert t != t0 and f != 1.0  # measured regimes: the map has points near these launches
    assert t / t0 == pytest.approx(f, rel=1e-12)


def test_explicit_vllm_3d_s16_inside_the_data(h200, bare):
    lw = vllm_work(gqa(64, 2048), splits=16, use_3d=True)
    assert h200.residuals.correction(lw, h200).support_launches > 1
    t, t0 = launch_time_s(lw, h200), launch_time_s(lw, bare)
    assert t != t0
    assert t / t0 == pytest.approx(h200.residuals.factor(lw, h200), rel=1e-12)


# -- the fit's map (benchmarks/fit_timemodel.py) ------------------------------------------------


def _fit_module():
    from benchmarks import fit_timemodel

    return fit_timemodel


def test_with_residuals_maps_the_upstream_kernels_only(h200, bare):
    with_residuals = _fit_module().with_residuals
    s = gqa(64, 2048)
    ms = []
    for splits in (8, 16):
        lw = vllm_work(s, splits=splits, use_3d=True)
        t = model_launch_time_s(lw, bare)
        ms += [Measurement(shape=s, kernel="vllm", variant=f"vllm-3d-S{splits}", splits=splits, time_s=1.2 * t, work=lw)
               for _ in range(3)]
    lw_sg = sglang_work(s, splits=8, max_kv_splits=8)
    ms.append(Measurement(shape=s, kernel="sglang", variant="sglang-static-S8", splits=8,
                          time_s=0.9 * model_launch_time_s(lw_sg, bare), work=lw_sg))
    lw_ref = vllm_work(s, splits=16, use_3d=True, prefix="ref_vllm")
    refs = [Measurement(shape=s, kernel="reference-vllm", variant="reference-vllm-3d-S16", splits=16,
                        time_s=3 * model_launch_time_s(lw_ref, bare), work=lw_ref) for _ in range(4)]
    # the vLLM 3D S16 launch measured by the reference kernel's work too: it must not count
    refs.append(Measurement(shape=s, kernel="reference-vllm", variant="reference-vllm-3d-S16", splits=16,
                            time_s=3 * model_launch_time_s(ms[3].work, bare), work=ms[3].work))
    prof = with_residuals(h200, ms + refs, source="tiny")  # the packaged map is replaced, not added to
    rmap = prof.residuals
    assert rmap is not None and rmap.source == "tiny"
    assert rmap.launches == 7
    assert set(rmap.cells) == {"vllm_3d/g4/d128", "sglang_stage1/g4/d128"}
    assert sum(p[3] for p in rmap.cells["vllm_3d/g4/d128"]) == 6
    assert all(p[2] == pytest.approx(math.log(1.2)) for p in rmap.cells["vllm_3d/g4/d128"])
    assert rmap.cells["sglang_stage1/g4/d128"][0][2] == pytest.approx(math.log(0.9))
    assert 1 < rmap.factor(ms[0].work, prof) < 1.2
    assert 0.9 < rmap.factor(lw_sg, prof) < 1
    assert rmap.factor(lw_ref, prof) == 1.0
    # the physics is untouched
    assert dataclasses.replace(prof, residuals=None) == bare
    assert model_launch_time_s(ms[0].work, prof) == model_launch_time_s(ms[0].work, bare)


def test_with_residuals_of_nothing_is_an_empty_map(h200, bare):
    prof = _fit_module().with_residuals(h200, [])
    assert prof.residuals is not None and prof.residuals.cells == {} and prof.residuals.launches == 0
    for lw in launches():
        assert launch_time_s(lw, prof) == model_launch_time_s(lw, bare)


# -- edges: a wild measurement, a falsy section -------------------------------------------------------------------


def test_any_built_map_reads_back(bare):
    """A bin 200x off the physics is kept within what a profile may hold, so the fit never writes an unreadable file."""
    lw = vllm_work(gqa(64, 2048), splits=16, use_3d=True)
    t = model_launch_time_s(lw, bare)
    prof = dataclasses.replace(bare, residuals=build_residual_map([(lw, 200 * t, t)], bare))
    back = profile_from_mapping(yaml.safe_load(dump_profile(prof)), origin="x")
    assert back.residuals.factor(lw, back) == prof.residuals.factor(lw, prof)


@pytest.mark.parametrize("section", [[], 0, "", False])
def test_falsy_non_mapping_residuals_are_refused(h200, section):
    with pytest.raises(ConfigError, match="'residuals' must be a mapping"):
        profile_from_mapping({**h200.to_mapping(), "residuals": section}, origin="t")


def test_a_fit_drops_the_map_of_its_starting_profile(h200):
    """calibrate starts from the packaged H200 profile; the H200's residuals must not follow its fit to another GPU
    (and a refitted physics makes any old map stale)."""
    from decodecalc.timemodel.fit import fit_profile

    s = gqa(8, 4096)
    lw = vllm_work(s, splits=16, use_3d=True)
    m = Measurement(shape=s, kernel="vllm", variant="vllm-3d-S16", splits=16, time_s=model_launch_time_s(lw, h200),
                    work=lw)
    assert h200.residuals is not None
    fitted = fit_profile([m], h200, restarts=1, max_evals=20, search_occupancy=False, fit_globals=False)
    assert fitted.residuals is None


def test_the_backend_fit_keeps_the_map(tmp_path):
    """benchmarks/fit_backends_h200.py --write-profile rewrites the backends' families and fit entry of the shipped
    profile; the residual map (after them in the file) and every other family must survive it."""
    import shutil

    from benchmarks import fit_backends_h200 as fb
    from decodecalc.timemodel import load_profile_file

    dest = tmp_path / "h200.yaml"
    shutil.copy(fb.PROFILE, dest)
    before = load_profile_file(dest)
    doc = {"data": ["x.json"], "heldout": {"fa3": {"median_abs_err": 0.05}}, "recommendation_heldout": {},
           "domain": {}, "uncalibrated_families": list(before.fit.get("uncalibrated_families") or [])}
    fb.write_profile(before, doc, dest)
    after = load_profile_file(dest)
    assert after.residuals == before.residuals and after.families == before.families
    assert after.fit["backend_families"]["heldout"] == {"fa3": {"median_abs_err": 0.05}}
    assert {k: v for k, v in after.fit.items() if k != "backend_families"} == \
        {k: v for k, v in before.fit.items() if k != "backend_families"}
