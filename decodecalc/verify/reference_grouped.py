"""SGLang-shaped grouped two-stage reference kernels: ``ref_num_kv_splits``, ``ref_grouped_stage1``
(grid ``(B, cdiv(h, min(16, g)), max_splits)``) and ``ref_stage2`` (grid ``(B, h)``); see
:mod:`decodecalc.verify.reference_common`."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from decodecalc.launchers.sglang_triton import head_tiles
from decodecalc.verify.capture import RecordedLaunch
from decodecalc.verify.engine import sglang_max_num_seq
from decodecalc.verify.reference_common import cdiv_jit as _cdiv
from decodecalc.verify.reference_common import check_dtype, check_head_size

MIN_BLOCK_KV = 32  # SGLang's split granularity (tokens)
GROUPED_BLOCK_H = 16  # SGLang's head rows per stage-1 program


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
) -> list[RecordedLaunch]:
    """Launch the SGLang-shaped reference kernels (split count, stage 1, stage 2).

    ``compute_splits=False``: ``num_kv_splits`` already holds the counts (static/deterministic modes).
    """
    check_dtype(q.dtype)
    B, h, d = q.shape
    h_kv = k_buffer.shape[1]
    check_head_size(d)
    g = h // h_kv
    block_d = triton.next_power_of_2(d)
    max_num_seq = sglang_max_num_seq(B)  # the same MAX_NUM_SEQ as SGLang's host wrapper
    launches = []
    if compute_splits:
        ref_num_kv_splits[(1,)](num_kv_splits, seq_lens, B, h, h_kv, max_kv_splits, sm_count,
                                MAX_NUM_SEQ=max_num_seq)
        launches.append(RecordedLaunch("ref_num_kv_splits", (1,), {"MAX_NUM_SEQ": max_num_seq}, executed=True))
    grid1 = (B, head_tiles(h, h_kv), max_kv_splits)  # SGLang's stage-1 head tiling (the core's rule)
    c1 = dict(G=g, NUM_HEADS=h, HEAD_SIZE=d, BLOCK_D=block_d, BLOCK_N=32, BLOCK_H=GROUPED_BLOCK_H, MIN_KV=MIN_BLOCK_KV)
    ref_grouped_stage1[grid1](
        q, k_buffer, v_buffer, kv_indptr, kv_indices, part_out, part_lse, num_kv_splits, scale,
        q.stride(0), q.stride(1), k_buffer.stride(0), k_buffer.stride(1), v_buffer.stride(0), v_buffer.stride(1),
        part_out.stride(0), part_out.stride(1), part_out.stride(2),
        num_warps=num_warps, num_stages=num_stages, **c1,
    )
    launches.append(RecordedLaunch("ref_grouped_stage1", grid1, dict(c1), executed=True))
    grid2 = (B, h)
    c2 = dict(MAX_SPLITS=max_kv_splits, MIN_KV=MIN_BLOCK_KV, HEAD_SIZE=d, BLOCK_D=block_d)
    ref_stage2[grid2](
        part_out, part_lse, out, kv_indptr, num_kv_splits,
        part_out.stride(0), part_out.stride(1), part_out.stride(2), out.stride(0), out.stride(1),
        num_warps=4, num_stages=2, **c2,
    )
    launches.append(RecordedLaunch("ref_stage2", grid2, c2, executed=True))
    return launches
