"""vLLM-shaped paged split-KV reference kernels: ``ref_split_kv`` (grid ``(T // BLOCK_Q + B, h_kv[, S])``)
and ``ref_reduce_segments`` (grid ``(T, h)``); see :mod:`decodecalc.verify.reference_common`."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from decodecalc.verify.capture import RecordedLaunch
from decodecalc.verify.reference_common import cdiv_jit as _cdiv
from decodecalc.verify.reference_common import check_dtype, check_head_size


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
) -> list[RecordedLaunch]:
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
    launches = [RecordedLaunch("ref_split_kv", grid, dict(consts), executed=True)]
    if use_3d:
        rgrid = (T, h)
        rconsts = dict(NUM_HEADS=h, TILE_SIZE=tile, HEAD_SIZE=d, HEAD_SIZE_PADDED=d_pad, NUM_SEGMENTS=S)
        ref_reduce_segments[rgrid](
            out, segm_out, segm_max, segm_sum, seq_lens, query_start, B, out.stride(0), out.stride(1),
            num_warps=4, **rconsts,
        )
        launches.append(RecordedLaunch("ref_reduce_segments", rgrid, rconsts, executed=True))
    return launches
