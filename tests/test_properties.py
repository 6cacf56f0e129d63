"""Hypothesis properties of the launch models (issue 2: segments partition [0, s), G_3D = G_2D x S,
S* is the least split that fills the SMs, SGLang splits in [1, max] covering each sequence, and the
rescale identity of the merge equals a direct softmax)."""

from __future__ import annotations

import math
import random

import pytest
from helpers import H200, gpu, model, work
from hypothesis import given, settings
from hypothesis import strategies as st

from decodecalc.derived import cdiv
from decodecalc.launchers import sglang_triton, vllm_unified
from decodecalc.reports.grid import grid_report

seq = st.integers(min_value=1, max_value=300_000)
heads = st.sampled_from([(32, 8), (8, 1), (64, 8), (16, 1), (32, 32), (28, 4), (40, 8), (12, 2), (96, 8), (20, 4),
                         (16, 16), (128, 8), (64, 1)])


@given(s=seq, segments=st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128]), tile=st.sampled_from([16, 32]))
def test_vllm_segments_partition_the_sequence(s, segments, tile):
    ranges = vllm_unified.segment_ranges(s, segments, tile)
    working = [r for r in ranges if r[1] > r[0]]
    assert len(working) == vllm_unified.active_segments(s, segments, tile) <= segments
    assert working[0][0] == 0 and working[-1][1] == s
    for (a0, a1), (b0, b1) in zip(working, working[1:]):
        assert a1 == b0  # no gap, no overlap
    # empty segments are exactly the trailing ones (the kernel's early exit)
    assert all(r[0] == r[1] for r in ranges[len(working):])


@given(hk=heads, b=st.integers(1, 64), s=seq)
@settings(max_examples=150)
def test_g3d_is_g2d_times_segments(hk, b, s):
    h, h_kv = hk
    p = vllm_unified.plan_vllm(work(model(h, h_kv), batch=b, seq_len=s), H200,
                               vllm_unified.VllmSettings(cudagraph_mode="NONE"))
    g2d = p.launch.total_num_q_blocks * h_kv
    if p.launch.use_3d:
        assert p.plan.main.programs == g2d * p.launch.num_segments
        assert p.plan.main.working_programs <= p.plan.main.programs
    else:
        assert p.plan.main.programs == g2d


@given(hk=heads, b=st.integers(1, 300), sms=st.integers(1, 400))
@settings(max_examples=150)
def test_s_star_is_least_split_that_fills(hk, b, sms):
    h, h_kv = hk
    d = grid_report(work(model(h, h_kv), batch=b), gpu(sms), systems=("vllm", "sglang")).systems
    for r in d:
        g2d, s_star = r.data["g_2d"], r.data["s_star"]
        assert g2d * s_star >= sms
        assert s_star == 1 or g2d * (s_star - 1) < sms


@given(lens=st.lists(seq, min_size=1, max_size=40), hk=heads, sms=st.integers(1, 400),
       maxs=st.sampled_from([1, 2, 4, 8, 16, 32]))
@settings(max_examples=200)
def test_sglang_splits_bounded_and_cover(lens, hk, sms, maxs):
    h, h_kv = hk
    splits = sglang_triton.get_num_kv_splits(tuple(lens), num_head=h, num_kv_head=h_kv, device_core_count=sms,
                                             max_kv_splits=maxs)
    for L, n in zip(lens, splits):
        assert 1 <= n <= maxs
        step = sglang_triton.kv_len_per_split(L, n)
        assert step % 32 == 0 and n * step >= L  # the splits cover the sequence
        ranges = [r for r in sglang_triton.split_ranges(L, n, maxs) if r[1] > r[0]]
        assert ranges[0][0] == 0 and ranges[-1][1] == L
        assert len(ranges) == sglang_triton.nonempty_splits(L, n) <= n


def _kernel_segment(L: int, segments: int, tile: int, s: int) -> tuple[int, int]:
    """Segment ``s`` of vLLM 0.33.0 kernel_unified_attention's 3D path, written from the kernel itself
    (triton_unified_attention.py L321-327): tiles_per_segment = cdiv(L, NUM_SEGMENTS * TILE_SIZE); the
    segment scans tiles [s * tps, (s + 1) * tps) cut at L, and returns early when it starts at or past L."""
    tps = -(-L // (segments * tile))
    start, end = s * tps * tile, min((s + 1) * tps * tile, L)
    return (L, L) if start >= L else (start, end)


def _merged_softmax(ranges, scores, values):
    """Online softmax per segment, then reduce_segments' combine: m = max M_s, L = sum L_s e^(M_s - m),
    O = sum O_s e^(M_s - m) / L (vLLM 0.33.0 triton_unified_attention.py L741-790)."""
    partials = []
    for a, b in ranges:
        if b <= a:
            continue  # early exit: masked in the reduce
        m = max(scores[a:b])
        ws = [math.exp(x - m) for x in scores[a:b]]
        partials.append((m, sum(ws), [sum(wi * v[j] for wi, v in zip(ws, values[a:b])) for j in range(len(values[0]))]))
    overall = max(p[0] for p in partials)
    total = sum(L * math.exp(m - overall) for m, L, _ in partials)
    return [sum(acc[j] * math.exp(m - overall) for m, _, acc in partials) / total for j in range(len(values[0]))], \
        len(partials)


def _check_merge(segment_ranges, s, segments, tile, d, seed):
    rng = random.Random(seed)
    scores = [rng.uniform(-30, 30) for _ in range(s)]
    values = [[rng.uniform(-1, 1) for _ in range(d)] for _ in range(s)]
    mx = max(scores)
    w = [math.exp(x - mx) for x in scores]
    direct = [sum(wi * v[j] for wi, v in zip(w, values)) / sum(w) for j in range(d)]
    ranges = segment_ranges(s, segments, tile)
    # the core's segments are the kernel's: same count, same key ranges, same early exits
    assert tuple(ranges) == tuple(_kernel_segment(s, segments, tile, k) for k in range(segments))
    merged, n_partials = _merged_softmax(ranges, scores, values)
    assert n_partials == vllm_unified.active_segments(s, segments, tile)
    assert all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) for x, y in zip(direct, merged))


@given(s=st.integers(1, 5000), segments=st.integers(1, 20), tile=st.sampled_from([16, 32]), d=st.integers(1, 8),
       seed=st.integers(0, 10**6))
@settings(max_examples=100)
def test_merge_rescale_identity_equals_direct_softmax(s, segments, tile, d, seed):
    """The merge of the core's segments (vllm_unified.segment_ranges) equals a direct softmax, and those
    segments are the kernel's."""
    _check_merge(vllm_unified.segment_ranges, s, segments, tile, d, seed)


def test_merge_check_fails_for_a_wrong_segment_split():
    """The check above is not vacuous: one segment holding the whole sequence (a merge that is still exact)
    or segments off by one tile are both rejected."""
    def one_segment(L, n, t):
        return ((0, L),) + ((L, L),) * (n - 1)

    def shifted(L, n, t):
        return tuple((min(a + t, L), min(b + t, L)) if b > a else (a, b) for a, b in vllm_unified.segment_ranges(L, n, t))

    for wrong in (one_segment, shifted):
        with pytest.raises(AssertionError):
            _check_merge(wrong, 1000, 8, 16, 4, 0)


@given(b=st.integers(1, 600), k=st.integers(0, 8), hk=heads)
@settings(max_examples=150)
def test_padding_never_turns_2d_into_3d(b, k, hk):
    # upstream-launchers.md 3.3 (e): the reverse (unpadded 2D, replay 3D) cannot happen
    h, h_kv = hk
    p = vllm_unified.plan_vllm(work(model(h, h_kv), batch=b, num_speculative_tokens=k), H200,
                               vllm_unified.VllmSettings(num_speculative_tokens=k))
    if p.replay is not None:
        assert p.replay.num_reqs_padded >= b
        assert not (p.replay.launch.use_3d and not p.launch.use_3d)
        if k == 0:  # with k = 0 the threshold is a capture size, so both decisions agree
            assert p.replay.launch.use_3d == p.launch.use_3d


@given(L=seq, tile=st.sampled_from([16, 32]))
def test_active_segments_bounded_and_exact_below_16_tiles(L, tile):
    a = vllm_unified.active_segments(L, 16, tile)
    # the segments that do not exit early (kernel L325-327), counted from the kernel's own segment layout
    assert a == sum(1 for s in range(16) if _kernel_segment(L, 16, tile, s)[1] > _kernel_segment(L, 16, tile, s)[0])
    assert 1 <= a <= 16
    if L <= 16 * tile:  # up to 16 tiles: one tile per segment, so every tile is its own active segment
        assert a == cdiv(L, tile)
