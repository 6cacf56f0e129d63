"""The grid-order dispatch on arrays (decodecalc/batch/dispatch.py) against the scalar model it mirrors.

* the compiled twin (decodecalc/batch/_dispatch.c) and the Python reference give the same busy times to the last bit;
* a step timed from its array launches (ExactTimer.times_many: closed forms plus the dispatch) equals
  ``launch_time_s`` of the scalar work of the same step, at every occupancy point, for both engines' recipes;
* the cells a kernel keeps rebuild the scalar work's grid order exactly;
* tune's answers do not depend on which dispatch ran.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decodecalc.batch import dispatch
from decodecalc.batch.evaluate import ExactTimer
from decodecalc.batch.kernels import DELTAS, cost_of
from decodecalc.batch.launches import SglangRecipe, SglangSplitsRecipe, VllmForcedRecipe, VllmRecipe
from decodecalc.batch.steps import from_trace
from decodecalc.launchers.sglang_triton import SglangSettings
from decodecalc.launchers.vllm_unified import VllmSettings
from decodecalc.reports.tune import make_context, tune
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.timemodel import launch_time_s, resolve_profile
from decodecalc.timemodel.predict import iteration_cost, kernel_time_s
from decodecalc.timemodel.work import KernelWork, planes_order
from decodecalc.workload import make_workload

from helpers import random_steps_trace

GPU = resolve_gpu("h200")
PROFILE = resolve_profile(GPU)
compiled = pytest.mark.skipif(dispatch._compiled is None, reason="the C twin was not built (no compiler)")


def _recipes(base):
    return [VllmRecipe(base, GPU, VllmSettings()),
            VllmRecipe(base, GPU, VllmSettings(num_par_softmax_segments=256, min_launch_grid_size_2d=4096)),
            VllmForcedRecipe(base, 1), VllmForcedRecipe(base, 4), VllmForcedRecipe(base, 64),
            VllmForcedRecipe(base, 512),
            SglangRecipe(base, GPU, SglangSettings()),
            SglangRecipe(base, GPU, SglangSettings(max_kv_splits=2, static_kv_splits=True)),
            SglangRecipe(base, GPU, SglangSettings(max_kv_splits=64, static_kv_splits=True)),
            SglangRecipe(base, GPU, SglangSettings(max_kv_splits=256))]


@pytest.mark.parametrize("model, tp", [("llama3.1-8b", 1), ("llama3.1-70b", 8), ("qwen2.5-72b", 4),
                                       ("gemma-2-9b", 1), ("phi-3-mini", 1)])
def test_array_exact_times_are_launch_time_s(model, tp, monkeypatch):
    """Every step, every occupancy point: the array path (whichever dispatch is built) equals the scalar model, and
    the Python reference equals the compiled twin bit for bit."""
    base = make_workload(resolve_model(model), tp=tp)
    sa = from_trace(random_steps_trace(17, n=60, max_len=70000, batches=(1, 3, 8, 16, 31, 64, 100, 256)))
    timer = ExactTimer(base, sa, PROFILE)
    idx = np.arange(sa.num_steps)
    timed = 0
    for r in _recipes(base):
        got = timer.times_many(r, idx)
        monkeypatch.setenv(dispatch.REFERENCE_ENV, "1")
        ref = timer.times_many(r, idx)
        monkeypatch.delenv(dispatch.REFERENCE_ENV)
        assert np.array_equal(got, ref), r.key
        for i in range(sa.num_steps):
            lw = r.launch_work(timer.work(i), i)
            want = [launch_time_s(lw, PROFILE, d) for d in DELTAS]
            assert got[:, i] == pytest.approx(want, rel=1e-12), (r.key, i)
            timed += 1
    assert timed == 10 * sa.num_steps


def test_only_the_prediction_when_asked():
    base = make_workload(resolve_model("llama3.1-8b"))
    sa = from_trace(random_steps_trace(3, n=20))
    timer = ExactTimer(base, sa, PROFILE)
    r = VllmForcedRecipe(base, 16)
    got = timer.times_many(r, [4, 2, 9], all_points=False)
    assert np.isnan(got[1:]).all()
    assert list(got[0]) == [timer.times_many(r, [i])[0, 0] for i in (4, 2, 9)]


def test_a_rule_recipe_and_the_backends_step_by_step():
    """Per-sequence split rules (the heuristics) go through the arrays; a backend without arrays step by step: both
    equal the scalar model."""
    from decodecalc.batch.launches import BackendRecipe
    from decodecalc.reports.tune_backends import engine_planner

    base = make_workload(resolve_model("llama3.1-70b"), tp=8)
    sa = from_trace(random_steps_trace(5, n=30))
    timer = ExactTimer(base, sa, PROFILE)
    rule = SglangSplitsRecipe(base, lambda b: np.minimum(8, 1 + b.lens // 4096), sa.offsets, 8, True, "split-count",
                              "t", sa)
    backend = BackendRecipe(base, GPU, "fa3", "vllm", engine_planner("fa3", "vllm"))
    for r in (rule, backend):
        got = timer.times_many(r, np.arange(sa.num_steps))
        for i in range(sa.num_steps):
            lw = r.launch_work(timer.work(i), i)
            assert got[:, i] == pytest.approx([launch_time_s(lw, PROFILE, d) for d in DELTAS], rel=1e-12)


cells = st.lists(st.tuples(st.integers(1, 9), st.integers(0, 40), st.integers(1, 40), st.integers(1, 3)),
                 min_size=1, max_size=40)


@compiled
@settings(max_examples=300, deadline=None)
@given(cells=cells, planes=st.integers(1, 12), repeats=st.integers(1, 9), occ=st.integers(1, 8),
       sms=st.sampled_from([1, 2, 3, 7, 132]), family=st.sampled_from(["vllm_3d", "sglang_stage1", "vllm_2d"]))
def test_compiled_twin_equals_the_reference(cells, planes, repeats, occ, sms, family):
    """Random cells, grids and slot counts (few SMs: many waves, the whole-round shortcut; long rows: the coarse
    path past MAX_EXACT_RUNS): the C twin's busy time is the reference's and kernel_time_s's, to the last bit."""
    cells = [(min(a, planes), full, last, q) for a, full, last, q in cells]
    order = planes_order(cells, planes, repeats)
    hist: dict[int, int] = {}
    for row, rep in order:
        for i, k in row:
            hist[i] = hist.get(i, 0) + k * rep
    kw = KernelWork(family=family, iters=tuple(sorted(hist.items())), bytes_per_iter=16384, order=order,
                    occupancy=occ)
    fam = PROFILE.family(family)
    cost = iteration_cost(kw, fam, sms, PROFILE.idle_program_s, PROFILE.hbm_bandwidth_bytes_per_s)
    if kw.programs <= cost.slots or len(kw.iters) == 1:
        return  # closed forms: not the dispatch's
    a, full, last, q = (np.array(x, dtype=np.int64) for x in zip(*cells))
    off = np.array([0, len(cells)], dtype=np.int64)
    c = dispatch.busy_s(a, full, last, q, off, planes, repeats, cost)
    ref = dispatch.busy_s(a, full, last, q, off, planes, repeats, cost, reference=True)
    assert c[0] == ref[0]
    assert c[0] == kernel_time_s(kw, fam, sms, PROFILE.idle_program_s, PROFILE.hbm_bandwidth_bytes_per_s)


@compiled
def test_compiled_twin_many_launches_and_bad_input():
    cells_a = [(3, 5, 2, 1), (1, 0, 7, 1), (2, 4, 4, 2)] * 30
    cells_b = [(1, 0, 9, 1), (1, 0, 3, 1)] * 50
    flat = cells_a + cells_b
    a, full, last, q = (np.array(x, dtype=np.int64) for x in zip(*flat))
    off = np.array([0, len(cells_a), len(flat)], dtype=np.int64)
    kw = KernelWork(family="vllm_3d", iters=((1, 1), (2, 1)), bytes_per_iter=16384)
    cost = cost_of(kw, PROFILE)  # type: ignore[arg-type]
    both = dispatch.busy_s(a, full, last, q, off, 3, 8, cost)
    for r, (lo, hi) in enumerate([(0, len(cells_a)), (len(cells_a), len(flat))]):
        one = dispatch.busy_s(a[lo:hi], full[lo:hi], last[lo:hi], q[lo:hi], np.array([0, hi - lo]), 3, 8, cost)
        assert one[0] == both[r]
    with pytest.raises(ValueError, match="offsets"):
        dispatch.busy_s(a, full, last, q, np.array([0, len(flat) + 5], dtype=np.int64), 3, 8, cost)
    assert list(dispatch.busy_s(a.astype(np.int32), full, last, q, off, 3, 8, cost)) == list(both)  # cast, not read


def test_tune_answers_do_not_depend_on_the_dispatch(monkeypatch):
    """The same totals and picks with the compiled twin, the Python reference, and none built at all (a small anchor
    budget, so that the totals are estimates from anchors the dispatch timed)."""
    base = make_workload(resolve_model("llama3.1-8b"))
    trace = random_steps_trace(23, n=200, max_len=20000, batches=(8, 16, 32, 64))

    def run():
        res = tune(make_context(trace, base, GPU, PROFILE, max_anchors=24), max_regression=0.05, backends=False)
        assert res.ctx.timer.report()["method"] == "estimated"
        return {(e, c.label): c.stats.total_s for e, et in res.engines.items() for c in et.candidates}, \
            {e: et.best.label for e, et in res.engines.items()}

    first = run()
    monkeypatch.setenv(dispatch.REFERENCE_ENV, "1")
    assert not dispatch.accelerated()
    assert run() == first
    monkeypatch.delenv(dispatch.REFERENCE_ENV)
    monkeypatch.setattr(dispatch, "_compiled", None)
    assert run() == first
