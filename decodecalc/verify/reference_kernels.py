"""decodecalc's own Triton decode-attention kernels, written from the launch rules alone.

Two families, each the shape of one engine's launch so that ``verify`` can check a predicted
grid with no engine installed:

* ``vllm``-style paged split-KV (``ref_split_kv`` + ``ref_reduce_segments``): grid
  ``(T // BLOCK_Q + B, h_kv[, S])``; one program packs ``g`` query heads x ``BLOCK_Q`` tokens
  into ``BLOCK_M`` rows; in the 3D form segment ``s`` of a sequence of length ``L`` reads
  tiles ``[s*tps, (s+1)*tps)`` with ``tps = cdiv(L, S*TILE)`` and returns at once when
  ``s*tps*TILE >= L``; it writes the unnormalised accumulator, the running max and the
  exp-sum, and the reduce kernel (grid ``(T, h)``) merges the live segments.
* ``sglang``-style grouped two-stage (``ref_num_kv_splits``, ``ref_grouped_stage1``,
  ``ref_stage2``): per-sequence split counts from SGLang's rule, stage 1 on
  ``(B, cdiv(h, min(16, g)), max_splits)`` with split length rounded up to 32 tokens, empty
  splits storing nothing, stage 2 on ``(B, h)``.

This module imports torch and triton at import time: import it only through
``decodecalc.verify.runner`` (after the optional ``verify`` extra has been checked), and set
``TRITON_INTERPRET=1`` before importing it to run on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import triton
import triton.language as tl

MIN_BLOCK_KV = 32  # SGLang's split granularity (tokens)
GROUPED_BLOCK_H = 16  # SGLang's head rows per stage-1 program
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass
class Launch:
    """One launch as we issued it (the observed side for our own kernels)."""

    name: str
    grid: tuple[int, ...]
    constexprs: dict[str, Any] = field(default_factory=dict)


def check_head_size(head_size: int) -> None:
    from decodecalc.errors import UnsupportedError

    if head_size < 16 or head_size > 256:
        raise UnsupportedError(
            f"the reference kernels take head sizes 16..256 (padded to a power of two); got {head_size}")


def check_dtype(dtype: torch.dtype) -> None:
    from decodecalc.errors import UnsupportedError

    if dtype not in SUPPORTED_DTYPES:
        raise UnsupportedError(f"the reference kernels take float16, bfloat16 or float32 tensors, not {dtype}")


# --------------------------------------------------------------------------------------------
# vLLM-style split-KV
# --------------------------------------------------------------------------------------------


@triton.jit
def _cdiv(x, y):
    return (x + y - 1) // y


@triton.jit
def ref_split_kv(
    out_ptr,
    segm_out_ptr,
    segm_max_ptr,
    segm_sum_ptr,
    q_ptr,
    k_ptr,
    v_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    query_start_ptr,
    scale,
    num_seqs,
    stride_q0: tl.int64,
    stride_q1: tl.int64,
    stride_o0: tl.int64,
    stride_o1: tl.int64,
    stride_k0: tl.int64,
    stride_k1: tl.int64,
    stride_k2: tl.int64,
    stride_v0: tl.int64,
    stride_v1: tl.int64,
    stride_v2: tl.int64,
    stride_bt: tl.int64,
    NUM_HEADS: tl.constexpr,
    G: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_SIZE: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    HEAD_SIZE_PADDED: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    NUM_SEGMENTS: tl.constexpr,
    IS_3D: tl.constexpr,
):
    q_block = tl.program_id(0)
    kv_head = tl.program_id(1)
    segm = tl.program_id(2) if IS_3D else 0

    # Which sequence owns this q-block: q-blocks of sequence i start at qsl[i] // BLOCK_Q + i.
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        start_blk = tl.load(query_start_ptr + mid) // BLOCK_Q + mid
        if start_blk <= q_block:
            lo = mid + 1
        else:
            hi = mid
    seq = lo - 1
    q_start = tl.load(query_start_ptr + seq)
    q_len = tl.load(query_start_ptr + seq + 1) - q_start
    local = q_block - (q_start // BLOCK_Q + seq)
    if local * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    if IS_3D:
        tiles_per_segment = _cdiv(seq_len, NUM_SEGMENTS * TILE_SIZE)
        if segm * tiles_per_segment * TILE_SIZE >= seq_len:
            return
    else:
        tiles_per_segment = 0

    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_SIZE_PADDED)
    offs_t = tl.arange(0, TILE_SIZE)
    q_pos = local * BLOCK_Q + offs_m // G
    head = kv_head * G + offs_m % G
    row_mask = (q_pos < q_len) & (offs_m < BLOCK_Q * G)
    d_mask = offs_d < HEAD_SIZE
    tok = q_start + q_pos

    q = tl.load(q_ptr + tok[:, None] * stride_q0 + head[:, None] * stride_q1 + offs_d[None, :],
                mask=row_mask[:, None] & d_mask[None, :], other=0.0)

    context_len = seq_len - q_len
    # longest prefix any row of this block may see (causal)
    prefix = tl.minimum(context_len + local * BLOCK_Q + BLOCK_Q, seq_len)
    num_tiles = _cdiv(prefix, TILE_SIZE)
    if IS_3D:
        t_lo = segm * tiles_per_segment
        t_hi = tl.minimum((segm + 1) * tiles_per_segment, num_tiles)
    else:
        t_lo = 0
        t_hi = num_tiles

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_SIZE_PADDED], dtype=tl.float32)
    bt_row = block_tables_ptr + seq * stride_bt
    q_abs = context_len + q_pos

    for j in range(t_lo, t_hi):
        kv_pos = j * TILE_SIZE + offs_t
        t_mask = kv_pos < prefix
        blk = tl.load(bt_row + kv_pos // BLOCK_SIZE, mask=t_mask, other=0).to(tl.int64)
        slot = kv_pos % BLOCK_SIZE
        k = tl.load(k_ptr + blk[None, :] * stride_k0 + slot[None, :] * stride_k1 + kv_head * stride_k2
                    + offs_d[:, None], mask=d_mask[:, None] & t_mask[None, :], other=0.0)
        v = tl.load(v_ptr + blk[:, None] * stride_v0 + slot[:, None] * stride_v1 + kv_head * stride_v2
                    + offs_d[None, :], mask=t_mask[:, None] & d_mask[None, :], other=0.0)
        s = tl.dot(q, k) * scale
        keep = row_mask[:, None] & t_mask[None, :] & (kv_pos[None, :] <= q_abs[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new > float("-inf"), m_new, 0.0)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    if IS_3D:
        row = tok.to(tl.int64) * NUM_HEADS + head
        base = row * NUM_SEGMENTS + segm
        tl.store(segm_out_ptr + base[:, None] * HEAD_SIZE_PADDED + offs_d[None, :], acc,
                 mask=row_mask[:, None] & d_mask[None, :])
        tl.store(segm_max_ptr + base, m_i, mask=row_mask)
        tl.store(segm_sum_ptr + base, l_i, mask=row_mask)
    else:
        acc = acc / l_i[:, None]
        tl.store(out_ptr + tok[:, None] * stride_o0 + head[:, None] * stride_o1 + offs_d[None, :],
                 acc.to(out_ptr.dtype.element_ty), mask=row_mask[:, None] & d_mask[None, :])


@triton.jit
def ref_reduce_segments(
    out_ptr,
    segm_out_ptr,
    segm_max_ptr,
    segm_sum_ptr,
    seq_lens_ptr,
    query_start_ptr,
    num_seqs,
    stride_o0: tl.int64,
    stride_o1: tl.int64,
    NUM_HEADS: tl.constexpr,
    TILE_SIZE: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    HEAD_SIZE_PADDED: tl.constexpr,
    NUM_SEGMENTS: tl.constexpr,
):
    token = tl.program_id(0)
    head = tl.program_id(1)
    if token >= tl.load(query_start_ptr + num_seqs):
        return
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        if tl.load(query_start_ptr + mid) <= token:
            lo = mid + 1
        else:
            hi = mid
    seq_len = tl.load(seq_lens_ptr + lo - 1)
    if seq_len <= 0:
        return
    tps = _cdiv(seq_len, NUM_SEGMENTS * TILE_SIZE)
    live = _cdiv(seq_len, tps * TILE_SIZE)
    offs_s = tl.arange(0, NUM_SEGMENTS)
    offs_d = tl.arange(0, HEAD_SIZE_PADDED)
    s_mask = offs_s < live
    d_mask = offs_d < HEAD_SIZE
    base = (token.to(tl.int64) * NUM_HEADS + head) * NUM_SEGMENTS
    m = tl.load(segm_max_ptr + base + offs_s, mask=s_mask, other=float("-inf"))
    ls = tl.load(segm_sum_ptr + base + offs_s, mask=s_mask, other=0.0)
    valid = s_mask & (ls > 0) & (m > float("-inf"))
    m = tl.where(valid, m, float("-inf"))
    m_all = tl.max(m, axis=0)
    w = tl.where(valid, tl.exp(m - m_all), 0.0)
    l_all = tl.sum(ls * w, axis=0)
    o = tl.load(segm_out_ptr + (base + offs_s)[:, None] * HEAD_SIZE_PADDED + offs_d[None, :],
                mask=valid[:, None] & d_mask[None, :], other=0.0)
    acc = tl.sum(o * w[:, None], axis=0)
    acc = tl.where(l_all == 0.0, 0.0, acc / l_all)
    tl.store(out_ptr + token * stride_o0 + head * stride_o1 + offs_d, acc.to(out_ptr.dtype.element_ty),
             mask=d_mask)


def vllm_block_shape(num_heads: int, num_kv_heads: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_Q) as vLLM packs query heads and tokens into one program (the core's model)."""
    from decodecalc.launchers.vllm_unified import block_shape

    return block_shape(num_heads // num_kv_heads)


def vllm_tile_size(q_dtype: torch.dtype, is_3d: bool) -> int:
    """vLLM's TILE_SIZE for a global-attention layer (the core's ``get_tile_size``)."""
    from decodecalc.launchers.vllm_unified import get_tile_size

    return get_tile_size(0, 0, torch.tensor([], dtype=q_dtype).element_size(), is_prefill=not is_3d)


def run_split_kv(
    *,
    q: torch.Tensor,  # [T, h, d]
    k_cache: torch.Tensor,  # [num_blocks, block_size, h_kv, d]
    v_cache: torch.Tensor,
    out: torch.Tensor,  # [T, h, d]
    query_start: torch.Tensor,  # [B + 1] int32
    seq_lens: torch.Tensor,  # [B] int32
    block_table: torch.Tensor,  # [B, max_blocks] int32
    scale: float,
    use_3d: bool,
    num_segments: int,
    segm_out: torch.Tensor | None = None,  # [rows >= T, h, S, d_pad] fp32
    segm_max: torch.Tensor | None = None,  # [rows, h, S] fp32
    segm_sum: torch.Tensor | None = None,
    num_warps: int = 4,
    num_stages: int = 3,
) -> list[Launch]:
    """Launch the vLLM-shaped reference kernel(s) and return the launches issued."""
    check_dtype(q.dtype)
    T, h, d = q.shape
    h_kv = k_cache.shape[2]
    block_size = k_cache.shape[1]
    check_head_size(d)
    B = seq_lens.shape[0]
    g = h // h_kv
    block_m, block_q = vllm_block_shape(h, h_kv)
    d_pad = triton.next_power_of_2(d)
    tile = vllm_tile_size(q.dtype, use_3d)
    total_q_blocks = T // block_q + B
    S = num_segments if use_3d else 1
    grid = (total_q_blocks, h_kv, S) if use_3d else (total_q_blocks, h_kv)
    consts = dict(NUM_HEADS=h, G=g, BLOCK_SIZE=block_size, TILE_SIZE=tile, HEAD_SIZE=d,
                  HEAD_SIZE_PADDED=d_pad, BLOCK_Q=block_q, BLOCK_M=block_m, NUM_SEGMENTS=S, IS_3D=use_3d)
    dummy = out
    ref_split_kv[grid](
        out, segm_out if use_3d else dummy, segm_max if use_3d else dummy, segm_sum if use_3d else dummy,
        q, k_cache, v_cache, block_table, seq_lens, query_start, scale, B,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_table.stride(0),
        num_warps=num_warps, num_stages=num_stages, **consts,
    )
    launches = [Launch("ref_split_kv", grid, dict(consts))]
    if use_3d:
        rgrid = (T, h)
        rconsts = dict(NUM_HEADS=h, TILE_SIZE=tile, HEAD_SIZE=d, HEAD_SIZE_PADDED=d_pad, NUM_SEGMENTS=S)
        ref_reduce_segments[rgrid](
            out, segm_out, segm_max, segm_sum, seq_lens, query_start, B, out.stride(0), out.stride(1),
            num_warps=4, **rconsts,
        )
        launches.append(Launch("ref_reduce_segments", rgrid, rconsts))
    return launches


# --------------------------------------------------------------------------------------------
# SGLang-style grouped two-stage
# --------------------------------------------------------------------------------------------


@triton.jit
def ref_num_kv_splits(
    splits_ptr,
    seq_lens_ptr,
    num_seqs,
    num_heads,
    num_kv_heads,
    max_kv_splits,
    sm_count,
    MAX_NUM_SEQ: tl.constexpr,
):
    offs = tl.arange(0, MAX_NUM_SEQ)
    mask = offs < num_seqs
    lens = tl.load(seq_lens_ptr + offs, mask=mask, other=0)
    l_max = tl.max(lens)
    lens = tl.load(seq_lens_ptr + offs, mask=mask, other=l_max)
    l_min = tl.min(lens)
    if l_max * 8 < l_min * 10:  # within 25%: treat the batch as uniform
        l_min = l_max
    m1 = tl.minimum(_cdiv(l_max, l_min), max_kv_splits)
    c1 = _cdiv(l_max, m1)
    ext = tl.cast(sm_count * tl.maximum(tl.log2(tl.cast(l_max, tl.float32) / 64.0), 1.0), tl.int32)
    g = num_heads // num_kv_heads
    if g == 1:
        programs = num_seqs * num_heads
    else:
        programs = num_seqs * _cdiv(num_heads, tl.minimum(16, g))
    m2 = tl.minimum(_cdiv(ext, programs), max_kv_splits)
    c2 = _cdiv(l_max, m2)
    n = tl.maximum(_cdiv(lens, c1), _cdiv(lens, c2))
    tl.store(splits_ptr + offs, n, mask=mask)


@triton.jit
def ref_grouped_stage1(
    q_ptr,
    k_ptr,
    v_ptr,
    kv_indptr,
    kv_indices,
    part_out_ptr,
    part_lse_ptr,
    num_kv_splits_ptr,
    scale,
    stride_qb: tl.int64,
    stride_qh: tl.int64,
    stride_kt: tl.int64,
    stride_kh: tl.int64,
    stride_vt: tl.int64,
    stride_vh: tl.int64,
    stride_pb: tl.int64,
    stride_ph: tl.int64,
    stride_ps: tl.int64,
    G: tl.constexpr,
    NUM_HEADS: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_H: tl.constexpr,
    MIN_KV: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    head_tile = tl.program_id(1)
    split = tl.program_id(2)
    VALID_H: tl.constexpr = BLOCK_H if BLOCK_H < G else G
    kv_head = head_tile // _cdiv(G, BLOCK_H)
    heads = head_tile * VALID_H + tl.arange(0, BLOCK_H)
    h_mask = (heads < (head_tile + 1) * VALID_H) & (heads < NUM_HEADS)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_SIZE

    start = tl.load(kv_indptr + b)
    seq_len = tl.load(kv_indptr + b + 1) - start
    n_splits = tl.load(num_kv_splits_ptr + b)
    per_split = _cdiv(_cdiv(seq_len, n_splits), MIN_KV) * MIN_KV
    lo = per_split * split
    hi = tl.minimum(lo + per_split, seq_len)
    if hi > lo:
        q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                    mask=h_mask[:, None] & d_mask[None, :], other=0.0)
        m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_D], dtype=tl.float32)
        k_base = k_ptr + kv_head * stride_kh + offs_d[:, None]
        v_base = v_ptr + kv_head * stride_vh + offs_d[None, :]
        for n0 in tl.range(lo, hi, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            n_mask = offs_n < hi
            loc = tl.load(kv_indices + start + offs_n, mask=n_mask, other=0).to(tl.int64)
            k = tl.load(k_base + loc[None, :] * stride_kt, mask=n_mask[None, :] & d_mask[:, None], other=0.0)
            s = tl.dot(q, k) * scale
            s = tl.where(h_mask[:, None] & n_mask[None, :], s, float("-inf"))
            v = tl.load(v_base + loc[:, None] * stride_vt, mask=n_mask[:, None] & d_mask[None, :], other=0.0)
            m_new = tl.maximum(tl.max(s, 1), m_i)
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new[:, None])
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            l_i = l_i * alpha + tl.sum(p, 1)
            m_i = m_new
        base = b * stride_pb + heads * stride_ph + split * stride_ps
        tl.store(part_out_ptr + base[:, None] + offs_d[None, :], acc / l_i[:, None],
                 mask=h_mask[:, None] & d_mask[None, :])
        tl.store(part_lse_ptr + base // stride_ps, m_i + tl.log(l_i), mask=h_mask)


@triton.jit
def ref_stage2(
    part_out_ptr,
    part_lse_ptr,
    out_ptr,
    kv_indptr,
    num_kv_splits_ptr,
    stride_pb: tl.int64,
    stride_ph: tl.int64,
    stride_ps: tl.int64,
    stride_ob: tl.int64,
    stride_oh: tl.int64,
    MAX_SPLITS: tl.constexpr,
    MIN_KV: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    seq_len = tl.load(kv_indptr + b + 1) - tl.load(kv_indptr + b)
    n_splits = tl.load(num_kv_splits_ptr + b)
    per_split = _cdiv(_cdiv(seq_len, n_splits), MIN_KV) * MIN_KV
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_SIZE
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    base = b * stride_pb + head * stride_ph
    for s in tl.range(0, MAX_SPLITS):
        lo = per_split * s
        hi = tl.minimum(lo + per_split, seq_len)
        if hi > lo:
            o = tl.load(part_out_ptr + base + s * stride_ps + offs_d, mask=d_mask, other=0.0)
            lse = tl.load(part_lse_ptr + (base + s * stride_ps) // stride_ps)
            m_new = tl.maximum(lse, m_i)
            old = tl.exp(m_i - m_new)
            w = tl.exp(lse - m_new)
            acc = acc * old + w * o
            l_i = l_i * old + w
            m_i = m_new
    tl.store(out_ptr + b * stride_ob + head * stride_oh + offs_d, (acc / l_i).to(out_ptr.dtype.element_ty),
             mask=d_mask)


def sglang_head_tiles(num_heads: int, num_kv_heads: int) -> int:
    g = num_heads // num_kv_heads
    return triton.cdiv(num_heads, min(GROUPED_BLOCK_H, g))


def run_grouped(
    *,
    q: torch.Tensor,  # [B, h, d]
    k_buffer: torch.Tensor,  # [tokens, h_kv, d]
    v_buffer: torch.Tensor,
    out: torch.Tensor,  # [B, h, d]
    kv_indptr: torch.Tensor,  # [B + 1] int32
    kv_indices: torch.Tensor,  # [sum L] int32 token slots
    seq_lens: torch.Tensor,  # [B] int32
    part_out: torch.Tensor,  # [B, h, max_splits, d] fp32
    part_lse: torch.Tensor,  # [B, h, max_splits] fp32
    num_kv_splits: torch.Tensor,  # [B] int32 (written here)
    max_kv_splits: int,
    sm_count: int,
    scale: float,
    num_warps: int = 4,
    num_stages: int = 2,
    compute_splits: bool = True,
) -> list[Launch]:
    """Launch the SGLang-shaped reference kernels (split count, stage 1, stage 2).

    ``compute_splits=False``: ``num_kv_splits`` already holds the counts (static/deterministic modes).
    """
    check_dtype(q.dtype)
    B, h, d = q.shape
    h_kv = k_buffer.shape[1]
    check_head_size(d)
    g = h // h_kv
    block_d = triton.next_power_of_2(d)
    max_num_seq = max(256, triton.next_power_of_2(B))
    launches = []
    if compute_splits:
        ref_num_kv_splits[(1,)](num_kv_splits, seq_lens, B, h, h_kv, max_kv_splits, sm_count,
                                MAX_NUM_SEQ=max_num_seq)
        launches.append(Launch("ref_num_kv_splits", (1,), {"MAX_NUM_SEQ": max_num_seq}))
    grid1 = (B, sglang_head_tiles(h, h_kv), max_kv_splits)
    c1 = dict(G=g, NUM_HEADS=h, HEAD_SIZE=d, BLOCK_D=block_d, BLOCK_N=32, BLOCK_H=GROUPED_BLOCK_H, MIN_KV=MIN_BLOCK_KV)
    ref_grouped_stage1[grid1](
        q, k_buffer, v_buffer, kv_indptr, kv_indices, part_out, part_lse, num_kv_splits, scale,
        q.stride(0), q.stride(1), k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        part_out.stride(0), part_out.stride(1), part_out.stride(2),
        num_warps=num_warps, num_stages=num_stages, **c1,
    )
    launches.append(Launch("ref_grouped_stage1", grid1, dict(c1)))
    grid2 = (B, h)
    c2 = dict(MAX_SPLITS=max_kv_splits, MIN_KV=MIN_BLOCK_KV, HEAD_SIZE=d, BLOCK_D=block_d)
    ref_stage2[grid2](
        part_out, part_lse, out, kv_indptr, num_kv_splits,
        part_out.stride(0), part_out.stride(1), part_out.stride(2), out.stride(0), out.stride(1),
        num_warps=4, num_stages=2, **c2,
    )
    launches.append(Launch("ref_stage2", grid2, c2))
    return launches
