"""tune's batch evaluator (decodecalc.batch) against the scalar time model, step by step and in totals.

* the array launches: every kernel's program histogram equals vllm_work's / sglang_work's;
* the closed forms (uniform loops, one wave): equal to launch_time_s at every occupancy point;
* the estimate of ragged multi-wave launches: totals within their stated error of the exact per-step evaluation,
  and tune's answers (every contender's total within 0.1%, the picks) the same as with every step timed exactly
  (the issue's "same answers" check, on a few thousand continuous-batching steps);
* the continuous-batching runs and the array conversions.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import numpy as np
import pytest

from decodecalc.batch.evaluate import ExactTimer, proxies
from decodecalc.batch.kernels import DELTAS
from decodecalc.batch.launches import SglangRecipe, SglangSplitsRecipe, VllmForcedRecipe, VllmRecipe
from decodecalc.batch.runs import from_runs
from decodecalc.batch.steps import from_trace
from decodecalc.launchers.sglang_triton import SglangSettings
from decodecalc.launchers.vllm_unified import VllmSettings
from decodecalc.reports.tune import make_context, tune
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.timemodel import launch_time_s, resolve_profile
from decodecalc.traffic import DecodeStep, Request, StepTrace, batch_requests
from decodecalc.traffic.requests import BatchingLimits, _columns, batching_runs
from decodecalc.workload import make_workload

from helpers import random_steps_trace as random_steps

GPU = resolve_gpu("h200")
PROFILE = resolve_profile(GPU)


def recipes(base, gpu=GPU):
    return [VllmRecipe(base, gpu, VllmSettings()),
            VllmRecipe(base, gpu, VllmSettings(num_par_softmax_segments=64, min_launch_grid_size_2d=4096)),
            VllmForcedRecipe(base, 1), VllmForcedRecipe(base, 256), VllmForcedRecipe(base, 512),
            SglangRecipe(base, gpu, SglangSettings()),
            SglangRecipe(base, gpu, SglangSettings(max_kv_splits=64, static_kv_splits=True)),
            SglangRecipe(base, gpu, SglangSettings(max_kv_splits=1024))]


@pytest.mark.parametrize("model, tp", [("llama3.1-8b", 1), ("llama3.1-70b", 8), ("qwen2.5-72b", 4),
                                       ("gemma-2-9b", 1), ("mistral-7b", 1)])
def test_array_launches_are_the_scalar_works(model, tp):
    """Program for program: the histogram of every kernel's (iterations, programs), the programs that exit at once,
    the family and the bytes equal those of the scalar work the recipe builds for the same step."""
    base = make_workload(resolve_model(model), tp=tp)
    sa = from_trace(random_steps(7, n=40))
    timer = ExactTimer(base, sa, PROFILE)
    for r in recipes(base):
        for block in sa.blocks():
            for la in r.block_launches(block):
                for j, row in enumerate(block.rows[la.rows].tolist()):
                    lw = r.launch_work(timer.work(row), row)
                    assert len(lw.kernels) == len(la.kernels)
                    for kw, ka in zip(lw.kernels, la.kernels):
                        got = Counter()
                        for i, c in zip(ka.iters[j].tolist(), ka.counts[j].tolist()):
                            if c:
                                got[i] += c
                        assert dict(got) == dict(kw.iters), (r.key, kw.family)
                        assert (ka.family, ka.head_dim, ka.bytes_per_iter, int(ka.idle[j])) == \
                            (kw.family, kw.head_dim, kw.bytes_per_iter, kw.idle_programs)
                        assert ka.occupancy == kw.occupancy


@pytest.mark.parametrize("seed", [1, 2])
def test_closed_forms_equal_the_scalar_model(seed):
    base = make_workload(resolve_model("llama3.1-8b"))
    sa = from_trace(random_steps(seed))
    timer = ExactTimer(base, sa, PROFILE)
    checked = 0
    for r in recipes(base):
        px = proxies(r, sa, PROFILE)
        for i in range(sa.num_steps):
            lw = r.launch_work(timer.work(i), i)
            for k, d in enumerate(DELTAS):
                if px.exact[k, i]:
                    assert px.times[k, i] == pytest.approx(launch_time_s(lw, PROFILE, d), rel=1e-12)
                    checked += 1
    assert checked > 500  # many launches here have a closed form at some occupancy point


def test_exact_timer_equals_launch_time_s():
    """The exact reference memoizes kernels without their empty programs: still launch_time_s to the last bit."""
    base = make_workload(resolve_model("llama3.1-8b"))
    sa = from_trace(random_steps(3, n=30))
    timer = ExactTimer(base, sa, PROFILE)
    for r in recipes(base):
        for i in range(sa.num_steps):
            lw = r.launch_work(timer.work(i), i)
            assert list(timer.times(r, i)) == [launch_time_s(lw, PROFILE, d) for d in DELTAS]


def test_splits_recipe_rule_and_flat_array_agree():
    base = make_workload(resolve_model("llama3.1-8b"))
    sa = from_trace(random_steps(4, n=30))
    rule = SglangRecipe(base, GPU, SglangSettings(max_kv_splits=16))
    flat = np.concatenate([rule.splits(sa.block_of([i]))[0, :sa.batch[i]] for i in range(sa.num_steps)])
    a = SglangSplitsRecipe(base, rule.splits, sa.offsets, 16, True, "split-count", "a", sa)
    b = SglangSplitsRecipe(base, flat, sa.offsets, 16, True, "split-count", "b", sa)
    pa, pb = proxies(a, sa, PROFILE), proxies(b, sa, PROFILE)
    assert np.array_equal(pa.times, pb.times)
    timer = ExactTimer(base, sa, PROFILE)
    for i in range(sa.num_steps):  # and the same launches as the engine's own plan
        assert timer.times(a, i)[0] == timer.times(rule, i)[0]


# ------------------------------------------------------------------------------------------------ estimates


@pytest.fixture(scope="module")
def chat_trace():
    """3,000 continuous-batching steps of 700 requests with arrivals: every step a distinct shape."""
    rng = random.Random(11)
    t, reqs = 0.0, []
    for _ in range(700):
        t += rng.expovariate(4.0)
        reqs.append(Request(max(1, int(rng.lognormvariate(7.2, 0.9))), max(2, int(rng.lognormvariate(5.3, 0.8))),
                            round(t, 3)))
    tr = batch_requests(reqs, BatchingLimits(max_num_seqs=256)).trace
    return StepTrace(steps=tr.steps[:3000], source="chat-like", notes=tr.notes)


def test_tune_answers_match_every_step_timed_exactly(chat_trace):
    """The issue's check: against every step timed by the scalar model (--exact), every candidate's total within
    0.1% (and within four of its stated standard errors), the same picks."""
    base = make_workload(resolve_model("llama3.1-8b"))
    fast = tune(make_context(chat_trace, base, GPU, PROFILE), max_regression=0.05)
    exact = tune(make_context(chat_trace, base, GPU, PROFILE, max_anchors=0), max_regression=0.05)
    assert exact.ctx.timer.report()["method"] == "exact"
    assert fast.ctx.timer.report()["method"] == "estimated"
    compared = 0
    for engine, e in fast.engines.items():
        ref = {c.label: c for c in exact.engines[engine].candidates}
        assert e.best.label == exact.engines[engine].best.label
        assert set(ref) == {c.label for c in e.candidates}
        for c in e.candidates:
            err = c.stats.total_s / ref[c.label].stats.total_s - 1
            assert abs(err) <= 1e-3, (engine, c.label, err)
            assert abs(err) <= max(4 * c.rel_se, 1e-9), (engine, c.label, err, c.rel_se)
            compared += 1
    assert compared > 100  # both engines' whole ranges


def test_sample_totals_are_unbiased():
    """A large workload's candidates are first ranked on a stratified sample: its weighted totals equal the whole
    workload's up to sampling noise, for every quantity (here the KV tokens of each step)."""
    sa = from_trace(random_steps(9, n=5000, batches=(1, 4, 16, 64)))
    sub, idx = sa.sample(512)
    full = float((sa.weights * sa.per_step_sum(sa.seq_lens)).sum())
    est = float((sub.weights * sub.per_step_sum(sub.seq_lens)).sum())
    assert sub.weights.sum() == pytest.approx(sa.weights.sum())
    assert abs(est / full - 1) < 0.05
    assert np.all(np.diff(idx) > 0)


# ------------------------------------------------------------------------------------------------ batching


@pytest.mark.parametrize("k", [0, 2])
def test_runs_expand_to_the_steps(k):
    rng = random.Random(5)
    reqs = [Request(rng.randint(1, 300), rng.randint(1, 60), round(rng.random() * 2, 3)) for _ in range(60)]
    lim = BatchingLimits(max_num_seqs=7, max_num_batched_tokens=200, num_speculative_tokens=k)
    a = from_trace(batch_requests(reqs, lim, source="x").trace)
    b = from_runs(batching_runs(*_columns(reqs), lim).runs, "x")
    for f in ("offsets", "seq_lens", "query_lens", "weights", "tokens"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert [a.origin(i) for i in range(a.num_steps)] == [b.origin(i) for i in range(b.num_steps)]


def test_pure_decode_stretches_are_one_run():
    """Two requests decoding with nothing waiting: one run per stretch between finishes, not a run per step."""
    br = batching_runs([10, 20], [50, 30], [0.0, 0.0], BatchingLimits(max_num_seqs=4))
    assert br.decode_steps == 49 and len(br.runs) <= 3
    assert br.runs[0].steps >= 28


def test_max_steps_stops_a_runaway_trace():
    from decodecalc.errors import ConfigError

    with pytest.raises(ConfigError, match="more than 100 decode steps"):
        batching_runs([10] * 10, [100] * 10, [0.0] * 10, BatchingLimits(max_num_seqs=2), max_steps=100)


def test_engine_step_origins_name_the_engine_step():
    br = batching_runs([4, 5], [3, 2], [0.0, 0.0], BatchingLimits(max_num_seqs=2, max_num_batched_tokens=8))
    sa = from_runs(br.runs, "f.csv")
    assert sa.origin(0) == "f.csv, engine step 1" and sa.num_steps == 2
    assert dataclasses.asdict(br.runs[0])["steps"] == 1


@pytest.mark.parametrize("k", [0, 2])
def test_runs_give_what_the_expanded_steps_give(k):
    """A request trace kept as runs (decodecalc.batch.runs): the workload block, the covariates of every step and
    the stratified sample are those of the expanded steps, computed without expanding them."""
    from decodecalc.batch.population import covariates
    from decodecalc.batch.runs import RunSteps
    from decodecalc.batch.summary import workload_summary

    rng = random.Random(11 + k)
    reqs = [Request(rng.randint(1, 3000), rng.randint(1, 400), round(rng.random() * 30, 3)) for _ in range(300)]
    lim = BatchingLimits(max_num_seqs=32, num_speculative_tokens=k)
    runs = RunSteps.of(batching_runs(*_columns(reqs), lim).runs, "x", ("a note",))
    steps = runs.expand()
    assert runs.num_steps == steps.num_steps > 1000
    assert runs.summary() == workload_summary(steps)
    assert np.array_equal(runs.covariates(), covariates(steps))
    assert runs.max_seq_len == int(steps.seq_lens.max())
    a, ia = runs.sample(200)
    b, ib = steps.sample(200)
    assert np.array_equal(ia, ib)
    for f in ("offsets", "seq_lens", "query_lens", "weights", "tokens"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert [a.origin(i) for i in range(a.num_steps)] == [b.origin(i) for i in range(b.num_steps)]


def test_a_large_request_trace_is_sampled_from_its_runs():
    """Above MEASURE_STEPS steps tune never expands a request trace: its context holds the sample, and the workload
    block and population totals come from the runs (equal to the expanded steps')."""
    from decodecalc.batch.population import Population, covariates
    from decodecalc.batch.runs import RunSteps
    from decodecalc.batch.summary import workload_summary
    from decodecalc.reports.tune import MEASURE_STEPS

    reqs = [Request(100 + 37 * i % 900, 150 + i % 60, 0.0) for i in range(200)]
    runs = RunSteps.of(batching_runs(*_columns(reqs), BatchingLimits(max_num_seqs=2)).runs, "r")
    assert runs.num_steps > MEASURE_STEPS
    ctx = make_context(runs, make_workload(resolve_model("llama3.1-8b")), GPU, PROFILE)
    steps = runs.expand()
    assert ctx.summary == workload_summary(steps)
    assert ctx.steps.num_steps <= MEASURE_STEPS and ctx.population.steps == steps.num_steps
    assert np.allclose(ctx.population.sums[:4], covariates(steps).sum(axis=0))
    # the batch classes' columns (decodecalc.batch.population), summed from the runs as from the expanded steps
    assert np.allclose(ctx.population.sums, Population.of(steps, np.arange(steps.num_steps), steps).sums)
    assert ctx.max_seq_len == int(steps.seq_lens.max())


def test_population_fits_a_jump_at_a_power_of_two_batch():
    """A candidate whose time jumps where vLLM's gate switches kernels (num_seqs <= 64: 3D) is estimated over the
    whole workload from a sample with the batch classes' covariates: the jump leaves nothing in the residuals."""
    from decodecalc.batch.population import Population

    rng = np.random.default_rng(3)
    batches = np.concatenate([np.full(600, b) for b in (48, 64, 65, 100, 64, 128, 40, 65)])
    lens = [rng.integers(100, 5000, size=int(b)) for b in batches]
    sa = from_trace(StepTrace(steps=tuple(DecodeStep(seq_lens=tuple(int(x) for x in ls), query_lens=(1,) * len(ls))
                                          for ls in lens), source="jump"))
    sub, idx = sa.sample(400)
    pop = Population.of(sa, idx, sub)

    def time(st):  # 3D: a large cost per sequence up to 64 sequences, then the 2D kernel's
        b, kv = st.batch.astype(float), st.per_step_sum(st.seq_lens.astype(float))
        return np.where(b <= 64, 50e-6 + 4e-6 * b + 1e-9 * kv, 10e-6 + 1e-6 * b + 2e-9 * kv)

    truth = float((sa.weights * time(sa)).sum())
    total, rel_se = pop.total(time(sub))
    # the size alone (the four base covariates) leaves the jump in the residuals
    size_only = Population(sums=pop.sums[:4], x=pop.x[:, :4], weights=pop.weights, steps=pop.steps, tokens=pop.tokens)
    total4, rel_se4 = size_only.total(time(sub))
    assert abs(total / truth - 1) < 1e-9 and rel_se < 1e-9  # every class sampled: the fit is exact
    assert rel_se4 > 1e-4 and abs(total4 / truth - 1) > 1e-6
