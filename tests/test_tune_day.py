"""A day of traffic as intervals per request (issue 43, item 1): the event-driven batching makes the steps the
step-by-step model makes, the intervals give every per-step figure the runs give, and memory follows the requests."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decodecalc.batch.intervals import IntervalSteps, request_steps
from decodecalc.batch.runs import RunSteps
from decodecalc.errors import ConfigError
from decodecalc.traffic.requests import BatchingLimits, batching_intervals, batching_runs


def _trace(seed: int, n: int | None = None) -> tuple[list[int], list[int], list[float], BatchingLimits]:
    rng = random.Random(seed)
    n = n or rng.randint(1, 80)
    prompt = [rng.choice([1, 2, 5, 50, 300, 3000, 9000]) + rng.randint(0, 50) for _ in range(n)]
    output = [rng.choice([1, 2, 3, 10, 40, 200]) for _ in range(n)]
    arrival = sorted(rng.choice([0.0, 0.0, rng.random() * 3, rng.random() * 30]) for _ in range(n))
    limits = BatchingLimits(max_num_seqs=rng.choice([1, 2, 4, 16, 256]),
                            max_num_batched_tokens=rng.choice([256, 512, 8192]))
    return prompt, output, arrival, limits


def _steps_of_runs(br) -> list[tuple[int, tuple[int, ...]]]:
    return [(r.first_engine_step + j, tuple(L + j for L in r.base)) for r in br.runs for j in range(r.steps)]


def _steps_of_intervals(iv) -> list[tuple[int, tuple[int, ...]]]:
    by_step: dict[int, list[int]] = {}
    for s, b, m in zip(iv.start, iv.base, iv.steps):
        for j in range(m):
            by_step.setdefault(s + j, []).append(b + j)
    return [(k, tuple(by_step[k])) for k in sorted(by_step)]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9))
def test_intervals_make_the_steps_the_step_by_step_model_makes(seed):
    """Every decode step, at the same engine step, with the same lengths in the same (admission) order."""
    prompt, output, arrival, limits = _trace(seed)
    assert _steps_of_intervals(batching_intervals(prompt, output, arrival, limits)) == \
        _steps_of_runs(batching_runs(prompt, output, arrival, limits))


def test_the_worked_example_of_the_docstring():
    iv = batching_intervals([3, 4, 2], [3, 2, 2], [0.0, 0.0, 0.0], BatchingLimits(max_num_seqs=2,
                                                                                  max_num_batched_tokens=8))
    assert [s for _, s in _steps_of_intervals(iv)] == [(4, 5), (5,), (3,)]


def test_speculation_and_a_budget_below_the_batch_fall_back_to_runs():
    prompt, output, arrival = [100, 200], [10, 20], [0.0, 0.0]
    assert batching_intervals(prompt, output, arrival, BatchingLimits(num_speculative_tokens=2)) is None
    assert batching_intervals(prompt, output, arrival, BatchingLimits(max_num_seqs=64,
                                                                      max_num_batched_tokens=32)) is None
    got = request_steps(prompt, output, arrival, BatchingLimits(num_speculative_tokens=2), max_steps=100, source="x")
    assert isinstance(got, RunSteps)
    assert isinstance(request_steps(prompt, output, arrival, BatchingLimits(), max_steps=100, source="x"),
                      IntervalSteps)


@pytest.mark.parametrize("seed", range(40))
def test_interval_steps_give_what_the_runs_give(seed):
    prompt, output, arrival, limits = _trace(seed)
    br = batching_runs(prompt, output, arrival, limits)
    if not br.runs:
        return
    runs, iv = RunSteps.of(br.runs, "t"), IntervalSteps.of(batching_intervals(prompt, output, arrival, limits), "t")
    a, b = runs.expand(), iv.expand()
    assert np.array_equal(a.offsets, b.offsets) and np.array_equal(a.seq_lens, b.seq_lens)
    assert [a.origin(i) for i in range(a.num_steps)] == [b.origin(i) for i in range(b.num_steps)]
    assert np.array_equal(runs.covariates(), iv.covariates())
    assert all(np.array_equal(x, y) for x, y in zip(runs.length_counts(), iv.length_counts()))
    got, want = iv.summary(), runs.summary()
    # a step's lengths count as a multiset here (its power sums): two steps that hold the same lengths in another
    # order are one shape
    multisets = {tuple(sorted(b.step_lens(i)[0])) for i in range(b.num_steps)}
    assert got.pop("distinct_shapes") == len(multisets)
    assert want.pop("distinct_shapes") >= len(multisets)
    assert got == want
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(a.num_steps, size=min(7, a.num_steps), replace=False))
    ta, tb = runs.take(idx), iv.take(idx)
    assert np.array_equal(ta.offsets, tb.offsets) and np.array_equal(ta.seq_lens, tb.seq_lens)


def test_longest_sequence_against_brute_force():
    rng = np.random.default_rng(3)
    n = 300
    first = np.sort(rng.integers(0, 500, n))
    count = rng.integers(1, 200, n)
    base = rng.integers(1, 5000, n)
    iv = IntervalSteps(first=first, base=base, count=count, engine_offset=np.zeros(n, dtype=np.int64), source="t")
    t = np.arange(iv.num_steps)
    held = (first[None, :] <= t[:, None]) & (t[:, None] < (first + count)[None, :])
    lens = np.where(held, base[None, :] + t[:, None] - first[None, :], -1)
    ok = held.any(axis=1)
    assert np.array_equal(iv.longest()[ok], lens.max(axis=1)[ok])
    assert np.array_equal(iv.batch, held.sum(axis=1))


def test_memory_follows_requests_not_the_batch():
    """Twice the concurrency (every request twice as long) doubles the sequence-steps, not what is stored."""
    n = 4000
    rng = random.Random(1)
    arrival = sorted(rng.random() * 200 for _ in range(n))
    prompt = [rng.randint(100, 3000) for _ in range(n)]
    sizes = []
    for out in (100, 200):
        iv = IntervalSteps.of(batching_intervals(prompt, [out] * n, arrival, BatchingLimits()), "t")
        stored = iv.first.nbytes + iv.base.nbytes + iv.count.nbytes + iv.engine_offset.nbytes
        sizes.append((stored, int(iv.batch.sum())))
    assert sizes[0][0] == sizes[1][0]  # one interval per request either way
    assert sizes[1][1] > 1.8 * sizes[0][1]  # about twice the (step, sequence) pairs


def test_too_many_steps_and_no_decode_are_one_error():
    with pytest.raises(ConfigError, match="more than 10 decode steps"):
        request_steps([10], [50], [0.0], BatchingLimits(), max_steps=10, source="big.csv")
    with pytest.raises(ConfigError, match="no decode steps"):
        request_steps([10, 20], [1, 1], [0.0, 0.0], BatchingLimits(), max_steps=10, source="one.csv")
