"""FlashAttention-2 split-KV decode (upstream-launchers.md section 7.1).

flash-attn 2.8.3.post2 (the PyPI source archive; checked against its own host code by
tests/test_oracles_fa2.py):
- ``csrc/flash_attn/flash_api.cpp`` ``run_mha_fwd`` L243-255, ``num_splits_heuristic`` L263-297,
  ``set_params_splitkv`` L299-329, ``seqlenq_ngroups_swapped`` L408/L592/L1278, varlen splits only
  when swapped L700-706, kvcache seqlen_k L1265, head_size_rounded L1321-1324, splits L1441-1443,
  forced split kernel L1457;
- ``csrc/flash_attn/src/flash_fwd_launch_template.h`` grid L106-107, combine tile L140-141, split
  tile L165-168; ``src/static_switch.h`` HEADDIM_SWITCH L90-111;
- ``csrc/flash_attn/src/flash_fwd_kernel.h`` (a split past the sequence writes 0 / -inf and exits;
  read at Dao-AILab/flash-attention@0251105a L535-544).

The heuristic runs in float32: ``n_waves = float(a * s) / n_sm``, ``eff = n_waves / ceil(n_waves)``
and compares with ``0.85 * max_eff`` in double. :func:`f32` rounds a Python float to float32
(IEEE double rounding is innocuous for one +, -, *, / of float32 operands, so computing each
operation in double and rounding once gives the float32 result exactly).
"""

from __future__ import annotations

import struct

from decodecalc.derived import Explain, cdiv
from decodecalc.errors import UnsupportedError
from decodecalc.launchers.base import KernelKind, KernelLaunch, LaunchPlan, LengthKey
from decodecalc.launchers.details import Fa2Details
from decodecalc.launchers.guards import layer_window, require_no_sinks, require_not_mla, require_vendor
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

FA_VERSION = "2.8.3.post2"
SRC_API = f"flash-attn {FA_VERSION} csrc/flash_attn/flash_api.cpp"
SRC_TMPL = f"flash-attn {FA_VERSION} csrc/flash_attn/src/flash_fwd_launch_template.h"
SRC_KERN = "flash-attention@0251105a csrc/flash_attn/src/flash_fwd_kernel.h"

MAX_SPLITS = 128  # set_params_splitkv L317; "num_splits <= 128" L325
kBlockM = 64  # split kernel tile, launch template L165


def f32(x: float) -> float:
    """Round ``x`` to IEEE float32 (the value a C++ ``float`` would hold)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def num_splits_heuristic(batch_nheads_mblocks: int, num_SMs: int, num_n_blocks: int, max_splits: int) -> int:
    """flash_api.cpp L263-297, float32 efficiencies, with the FA2 eligibility filter."""
    # `batch_nheads_mblocks >= 0.8f * num_SMs`: the product is a float (rounded), so e.g. 272 >= 0.8f * 340
    # holds (272.0000041 rounds to 272.0f); found by tests/test_oracles_fa2.py
    if batch_nheads_mblocks >= f32(f32(0.8) * num_SMs):
        return 1
    max_splits = min(max_splits, num_SMs, num_n_blocks)

    def eligible(s: int) -> bool:
        return s == 1 or cdiv(num_n_blocks, s) != cdiv(num_n_blocks, s - 1)

    eff: list[float] = []
    max_eff = 0.0
    for s in range(1, max_splits + 1):
        if not eligible(s):
            eff.append(0.0)
            continue
        n_waves = f32(float(batch_nheads_mblocks * s) / num_SMs)
        e = f32(n_waves / float(int(-(-n_waves // 1))))
        max_eff = max(max_eff, e)
        eff.append(e)
    for s in range(1, max_splits + 1):
        if eligible(s) and eff[s - 1] >= 0.85 * max_eff:  # 0.85 is a double literal
            return s
    return 1


def block_n(d: int) -> int:
    """set_params_splitkv L305: ``256 if d <= 64 else (128 if d <= 128 else 64)``."""
    return 256 if d <= 64 else (128 if d <= 128 else 64)


def head_size_rounded(d: int) -> int:
    """``round_multiple(head_size, head_size <= 128 ? 32 : 64)`` with ``head_size = round_multiple(d, 8)``
    (flash-attn 2.8.3.post2 flash_api.cpp L1321-1324)."""
    hs = cdiv(d, 8) * 8
    m = 32 if hs <= 128 else 64
    return cdiv(hs, m) * m


def head_dim_bucket(d: int) -> int:
    """``HEADDIM_SWITCH(params.d)``: the compiled head dim the kernel runs, 32/64/96/128/192/256
    (flash-attn 2.8.3.post2 src/static_switch.h L90-111; no 160 bucket)."""
    return next(b for b in (32, 64, 96, 128, 192, 256) if d <= b)


def plan_flash_attn2(
    w: Workload, gpu: GPUSpec, *, entry: str = "kvcache", num_splits: int = 0, layer: str = "auto",
    paged: bool | None = None, check_platform: bool = True,
) -> LaunchPlan:
    """FA2 decode. ``entry``: "kvcache" (``flash_attn_with_kvcache``, the decode API) or
    "varlen" (``flash_attn_varlen_func``). ``num_splits`` 0 = heuristic (the default of both).

    Upstream FA2 takes a paged KV cache only with ``page_block_size % 256 == 0``
    (flash_api.cpp L583, L1264). ``paged=None`` models a paged cache when the block size allows
    it and a contiguous cache (``cache_seqlens``) otherwise; the split rule is the same for both
    entries except varlen without the GQA swap. vLLM's own FA fork accepts smaller pages (not
    verified here)."""
    system = "FlashAttention-2"
    require_vendor(gpu, "nvidia", system, check_platform)
    require_not_mla(w, system)
    # FA2 runs no sinks (vLLM: fa_utils.py L319-322 accepts them on FA3 and FA4 only)
    require_no_sinks(w, system, "vllm 0.33.0 vllm/v1/attention/backends/fa_utils.py L319-322")
    d = w.head_size
    if w.head_size_v != d:
        raise UnsupportedError(f"{system}: K and V head sizes must match, got {d} and {w.head_size_v}")
    if d > 256 or d % 8:
        raise UnsupportedError(f"{system}: head size {d} not supported (multiple of 8, at most 256)")
    if w.dtype not in ("float16", "bfloat16") or w.kv_cache_dtype != w.dtype:
        raise UnsupportedError(f"{system}: fp16/bf16 query and KV cache only (got {w.dtype} / {w.kv_cache_dtype})")
    if gpu.compute_capability is not None and gpu.compute_capability < (8, 0):
        raise UnsupportedError(f"{system}: needs compute capability 8.0 or newer")
    if entry not in ("kvcache", "varlen"):
        raise UnsupportedError(f"{system}: entry must be kvcache or varlen, got {entry!r}")
    if entry == "kvcache" and len(set(w.query_lens)) != 1:
        raise UnsupportedError(f"{system}: flash_attn_with_kvcache takes one query length for the batch")
    ex = Explain()
    page_ok = w.block_size % 256 == 0
    if paged and not page_ok:
        raise UnsupportedError(f"{system}: a paged KV cache needs page_block_size % 256 == 0, got {w.block_size} "
                               f"({SRC_API} L583, L1264)")
    paged = page_ok if paged is None else paged
    ex.add("paged_kv", paged, "page_block_size % 256 == 0 (else a contiguous cache with cache_seqlens)",
           f"{SRC_API} L583, L1264", page_block_size=w.block_size)
    B, h, h_kv = w.batch, w.num_heads, w.num_kv_heads
    s_q = w.max_seqlen_q
    window = bool(layer_window(w, layer))
    swapped = ex.add("seqlenq_ngroups_swapped", s_q == 1 and h > h_kv and not window and d % 8 == 0,
                     "s_q == 1 and h > h_kv and no window and no dropout and d % 8 == 0 and no ALiBi",
                     f"{SRC_API} L408, L592, L1278", s_q=s_q, h=h, h_kv=h_kv, d=d)
    s_q_k, h_k = (w.group_size, h_kv) if swapped else (s_q, h)
    bN = ex.add("kBlockN", block_n(d), "256 if d <= 64 else (128 if d <= 128 else 64)", f"{SRC_API} L305", d=d)
    maxL = w.max_seqlen_k
    if paged and entry == "kvcache":
        # seqlen_k = max_num_blocks_per_seq * page_block_size (L1265): the block table's width, taken
        # here as the longest sequence's pages
        maxL = ex.add("seqlen_k", cdiv(maxL, w.block_size) * w.block_size,
                      "max_num_blocks_per_seq * page_block_size, max_num_blocks_per_seq = cdiv(max_seqlen_k, "
                      "page_block_size)", f"{SRC_API} L1265", max_seqlen_k=w.max_seqlen_k,
                      page_block_size=w.block_size)
    n_blocks = ex.add("num_n_blocks", cdiv(maxL, bN), "cdiv(seqlen_k, kBlockN)", f"{SRC_API} L306",
                      seqlen_k=maxL, kBlockN=bN)
    mblocks = ex.add("num_m_blocks", cdiv(s_q_k, kBlockM), "cdiv(seqlen_q, 64)", f"{SRC_API} L309", seqlen_q=s_q_k)
    n_sm = 2 * gpu.num_sms
    a = B * h_k * mblocks
    if num_splits >= 1:
        S = ex.add("num_splits", num_splits, "user num_splits", f"{SRC_API} L1441-1443", num_splits=num_splits)
    elif entry == "varlen" and not swapped:
        S = ex.add("num_splits", 1, "varlen without GQA swap: no split (paged KV requires num_splits <= 1)",
                   f"{SRC_API} L700-706")
    else:
        S = ex.add("num_splits", num_splits_heuristic(a, n_sm, n_blocks, MAX_SPLITS),
                   "num_splits_heuristic(batch_nheads_mblocks, 2 * num_SMs, num_n_blocks, 128)",
                   f"{SRC_API} L263-297, L317", batch_nheads_mblocks=a, num_SMs=gpu.num_sms,
                   num_n_blocks=n_blocks)
    if S > MAX_SPLITS:
        raise UnsupportedError(f"{system}: num_splits {S} > 128")
    n_blocks_per_split = cdiv(n_blocks, S)
    ex.add("n_blocks_per_split", n_blocks_per_split, "cdiv(cdiv(max_seqlen_k, kBlockN), num_splits)",
           f"{SRC_KERN} L535-544", max_seqlen_k=maxL, kBlockN=bN, num_splits=S)
    nonempty = tuple(cdiv(cdiv(L, bN), n_blocks_per_split) for L in w.seq_lens)
    tps = tuple(min(n_blocks_per_split * bN, L) for L in w.seq_lens)
    d_round = ex.add("head_size_rounded", head_size_rounded(d), "round_multiple(d, d <= 128 ? 32 : 64)",
                     f"{SRC_API} L1321-1324", d=d)
    rows = w.num_tokens * h  # (query token, query head) pairs (after unswap)
    if S > 1:
        grid: tuple[int, ...] = (mblocks, S, B * h_k)
        working = mblocks * h_k * sum(nonempty)
    else:
        grid = (mblocks, B, h_k)
        working = mblocks * B * h_k
    # run_mha_fwd (L243-255): the split kernel when num_splits > 1 or forced; mha_fwd_kvcache forces
    # it for a paged cache (L1457; decodecalc appends no new keys and passes no cache_batch_idx)
    split_kernel = S > 1 or (entry == "kvcache" and paged)
    kernels = [KernelLaunch(name="flash_fwd_splitkv_kernel" if split_kernel else "flash_fwd_kernel",
                            grid=grid, working_programs=working, kind=KernelKind.FA2_FWD,
                            constexprs={"kBlockM": kBlockM, "kBlockN": bN, "Split": S > 1,
                                        "split_kernel": split_kernel})]
    per = 0
    if S > 1:
        kHeadDim = head_dim_bucket(d)
        kBlockM_c = 4 if kHeadDim % 128 == 0 else (8 if kHeadDim % 64 == 0 else 16)
        comb = cdiv(B * h_k * s_q_k, kBlockM_c)
        ex.add("combine_grid", comb, "cdiv(B * h * s_q, kBlockM_combine), kBlockM_combine = 4 if kHeadDim % 128 == 0 "
               "else (8 if kHeadDim % 64 == 0 else 16)", f"{SRC_TMPL} L140-141; static_switch.h L90-111", B=B,
               h=h_k, s_q=s_q_k, kHeadDim=kHeadDim)
        kernels.append(KernelLaunch(name="flash_fwd_splitkv_combine_kernel", grid=(comb,), working_programs=comb,
                                    kind=KernelKind.FA2_COMBINE, constexprs={"kBlockM": kBlockM_c}))
        per = ex.add("partial_state_bytes_per_token_head", S * (4 * d_round + 4),
                     "num_splits * (4 * d_rounded + 4)  (out_accum, softmax_lse_accum fp32)",
                     f"{SRC_API} L320-321", num_splits=S, d_rounded=d_round, unit="bytes")
    used = sum(n * q * h * (4 * d_round + 4) for n, q in zip(nonempty, w.query_lens)) if S > 1 else 0
    return LaunchPlan(
        system="fa2", kernels=tuple(kernels), splits=(S,) * B, nonempty_splits=nonempty if S > 1 else (1,) * B,
        tokens_per_split=tps if S > 1 else w.seq_lens, partial_state_bytes=rows * per,
        partial_state_bytes_used=used, scratch_bytes=rows * per, explain=ex.items(),
        details=Fa2Details(paged_kv=paged, seqlenq_ngroups_swapped=swapped, kBlockN=bN, num_n_blocks=n_blocks,
                           n_blocks_per_split=n_blocks_per_split, entry=entry, source=SRC_API),
    )


def length_key(w: Workload) -> LengthKey:
    """For the sweep: a uniform batch's launch depends on the length only through its kBlockN block count."""
    bN = block_n(w.head_size)
    page = w.block_size if w.block_size % 256 == 0 else 1  # a paged cache counts whole pages (seqlen_k)
    return LengthKey(lambda L: cdiv(cdiv(L, page) * page, bN),
                     lambda p, L: min(p.details_as(Fa2Details).n_blocks_per_split * bN, L) if p.splits[0] > 1 else L)
