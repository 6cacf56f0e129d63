"""FlashAttention-3 (Hopper) split decode as vLLM builds and drives it (upstream-launchers.md section 7.2).

vLLM runs its own fork of FlashAttention: vllm-project/flash-attention. vLLM 0.33 pins fork commit
b273a026, which is not available here; this module mirrors the closest commit we have,
617264c1c7955c9e84817654ebeedff069f3c5f1 ("feat(cute): add SM90 FP8 KV support with in-kernel
dequantization (#164)"). The launches captured from vLLM 0.33.0's build on the H200 agree with it: the
tile shapes named in the kernels and the per-sequence split counts read back from the scheduler metadata
(benchmarks/results/capture-backends-h200.jsonl, fp8-backends-fa3-h200.jsonl.gz). Line numbers below are
the fork's at 617264c1:

- ``hopper/heuristics.h`` L10-14 ``use_one_mma_wg`` (new in the fork: one MMA warp group for hdim 64/128
  when ``seqlen_q * (h / h_k) <= 64`` and not local), L32-66 ``num_splits_heuristic`` (float32, no
  eligibility filter, ``n_blocks <= 4`` and 50 MiB L2 rules; as upstream);
- ``hopper/tile_size.h`` L10-93 ``tile_size_fwd_sm90`` with the fork's ``use_one_mma_wg`` decode tiles
  and its FP8 two-level-accumulation prefill tiles (vLLM's build leaves
  ``FLASHATTENTION_DISABLE_FP8_TWO_LEVEL_ACCUMULATION`` undefined);
- ``hopper/flash_api.cpp``: ``get_pagedkv_tma`` L464-474 (off for local attention), ``get_pack_gqa``
  L476-496 (hdim-64, 8:1, local override), ``get_num_splits`` L498-533 (varlen pretends batch = 1: an
  upper bound), the window and causality of ``mha_fwd`` L863-877, ``pack_gqa |= num_splits > 1`` and
  ``pack_gqa |= d == d_v`` (``FLASHATTENTION_PACKGQA_ONLY``) L1061-1066, no split above 992 sequences
  L1068-1070 (one prepare CTA up to ``PREPARE_VARLEN_MAX_BATCHES_1CTA`` = 992, L39), scratch
  L1180-1201 (``S <= 256``), the kernel instantiations of ``run_mha_fwd`` L297-434;
- vLLM's build flags, ``CMakeLists.txt`` L302-321: ``FLASHATTENTION_VARLEN_ONLY`` (``VARLEN_SWITCH``
  rejects non-varlen calls, ``hopper/static_switch.h`` L130-137), ``FLASHATTENTION_PACKGQA_ONLY``,
  ``FLASHATTENTION_DISABLE_CLUSTER``;
- ``hopper/flash_prepare_scheduler.cu`` L142-164: per-batch dynamic splits
  ``blocks_per_sm = ceilf(float(total_blocks) * 1.1f * float(num_head) / float(num_sm))``, evaluated
  left to right in float32, over ``cdiv(seqused_k, kBlockN)`` blocks per sequence (L97-121: the whole
  length, no window);
- ``hopper/block.h`` L24-63: a local query reads from the window's first key (``n_offset``), each split
  ``cdiv(n_blocks, num_splits)`` of the blocks it reads;
- ``hopper/flash_fwd_launch_template.h`` L77 (persistent unless split and not varlen), L169-170 (the
  prepare kernel gets the kernel's tile), L219 (the kernel uses one warp group only when also
  ``kHeadDimV == kHeadDim``); ``hopper/tile_scheduler.hpp`` L423-426 (varlen persistent grid = num_sm);
- the combine kernel: ``run_mha_fwd_combine`` L436-462 (``kBlockK`` 64 for ``d_v <= 64``, else 128),
  ``hopper/flash_fwd_combine_launch_template.h`` L68 (``kBlockM`` 8 for ``kBlockK % 128 == 0``, else 16),
  ``hopper/flash_fwd_combine_kernel.h`` L276-321 (``StaticVarlenTileScheduler``: the standard grid
  ``(cdiv(max_seqlen_q * h, kBlockM), cdiv(d_v, kBlockK), B)`` when at least half of it has work, else
  ``(cdiv(total_q * h, kBlockM) + B, cdiv(d_v, kBlockK))``), the grid measured on the H200.
"""

from __future__ import annotations

from decodecalc.derived import Explain, cdiv
from decodecalc.errors import UnsupportedError
from decodecalc.launchers.base import KernelKind, KernelLaunch, LaunchPlan
from decodecalc.launchers.details import Fa3Details
from decodecalc.launchers.flash_attn2 import f32
from decodecalc.launchers.guards import layer_window, require_not_mla, require_vendor
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

FA_REPO = "vllm-project/flash-attention"
FA_COMMIT = "617264c1"  # vLLM 0.33 pins b273a026 (not available); 617264c1 is the closest commit we have
FA = f"{FA_REPO}@{FA_COMMIT}"
SRC_HEUR = f"{FA} hopper/heuristics.h L32-66"
SRC_ONE_WG = f"{FA} hopper/heuristics.h L10-14"
SRC_API = f"{FA} hopper/flash_api.cpp"
SRC_TILE = f"{FA} hopper/tile_size.h L10-93"
SRC_PREP = f"{FA} hopper/flash_prepare_scheduler.cu L142-164"
SRC_BLOCK = f"{FA} hopper/block.h L24-63"
SRC_SCHED = f"{FA} hopper/tile_scheduler.hpp"
SRC_COMBINE = f"{FA} hopper/flash_fwd_combine_kernel.h L276-321"
SRC_BUILD = f"{FA} CMakeLists.txt L302-321"

MAX_SPLITS = 128  # get_num_splits passes 128 (flash_api.cpp L531)
MAX_SPLITS_ALLOWED = 256  # flash_api.cpp L1183
PREPARE_VARLEN_MAX_BATCHES_1CTA = 992  # flash_api.cpp L39
SIZE_L2 = 50 * 1024 * 1024  # hopper/heuristics.h L37 num_splits_heuristic: size_l2 (the H100's L2)
ONE_MMA_WG_MAX_ROWS = 64  # hopper/heuristics.h L13: seqlen_q * (h / h_k) <= 64


def num_splits_heuristic(total_mblocks: int, num_SMs: int, num_n_blocks: int, num_m_blocks: int,
                         size_one_kv_head: int, is_causal_or_local: bool, max_splits: int) -> int:
    """hopper/heuristics.h L32-66 with float32 efficiencies (no eligibility filter)."""
    if total_mblocks >= f32(0.8) * num_SMs:
        if size_one_kv_head > SIZE_L2 and num_m_blocks >= num_SMs * 2 and not is_causal_or_local:
            return min(cdiv(size_one_kv_head, SIZE_L2), max_splits)
        return 1
    if num_n_blocks <= 4:
        return 1
    max_splits = min(max_splits, num_SMs, num_n_blocks)
    eff: list[float] = []
    max_eff = 0.0
    for s in range(1, max_splits + 1):
        n_waves = f32(float(total_mblocks * s) / num_SMs)
        e = f32(n_waves / float(-(-n_waves // 1)))
        max_eff = max(max_eff, e)
        eff.append(e)
    for s in range(1, max_splits + 1):
        if eff[s - 1] >= 0.85 * max_eff:
            return s
    return 1


def round_up_headdim(d: int) -> int:
    """flash_api.cpp L554-580 (``round_up_headdim``; ``round_up_headdimv`` alike up to 256)."""
    for r in (64, 96, 128, 192, 256):
        if d <= r:
            return r
    return 512


def use_one_mma_wg(head_size: int, seqlen_q: int, qhead_per_khead: int, is_local: bool, arch: int = 90) -> bool:
    """hopper/heuristics.h L10-14: the host's condition (on the unrounded head size; rows as if PackGQA)."""
    return arch >= 90 and head_size in (64, 128) and not is_local and seqlen_q * qhead_per_khead <= ONE_MMA_WG_MAX_ROWS


def tile_size_fwd_sm90(headdim: int, headdim_v: int, is_causal: bool, is_local: bool, element_size: int = 2,
                       paged_kv_non_TMA: bool = False, softcap: bool = False,
                       use_one_mma_wg: bool = False) -> tuple[int, int]:
    """(kBlockM, kBlockN) of the fork's hopper/tile_size.h L10-93 (v_colmajor = False, FP8 two-level
    accumulation compiled in)."""
    causal_local_paged = is_causal or is_local or paged_kv_non_TMA
    if element_size == 2:
        if headdim <= 64:
            if headdim_v == 512:
                return 64, 64  # L18-19
            if headdim_v == 256:
                return 128, 96  # L20-21
            if use_one_mma_wg:
                return 64, 192  # L23-24
            return 192, 128 if is_causal else (160 if (is_local or paged_kv_non_TMA) else 192)  # L30
        if headdim <= 96:
            return 192, 128 if (is_local or paged_kv_non_TMA) else 144  # L39
        if headdim <= 128:
            if use_one_mma_wg:
                return 64, 128 if causal_local_paged else 176  # L41-42
            return 128, 128 if causal_local_paged else 160  # L44
        if headdim <= 192:
            return 128, 96 if (paged_kv_non_TMA or is_local) else (128 if headdim_v <= 128 else 96)  # L49
        return 128, 64 if is_local else 80  # L51
    if use_one_mma_wg:  # FP8 decode tiles, L55-61
        return (64, 128) if headdim <= 96 else (64, 96)
    # FP8 prefill tiles with two-level accumulation, L66-77
    if headdim <= 64:
        return 192, 128
    if headdim <= 96:
        return 128, 128
    if headdim <= 128:
        return 128, 192
    if headdim <= 192:
        return 128, 96
    return 128, 64 if is_local else 128


def kernel_headdims(d: int, dv: int, element_size: int) -> tuple[int, int]:
    """(kHeadDim, kHeadDimV) of the instantiation ``run_mha_fwd`` dispatches to (flash_api.cpp L316-423)."""
    if element_size == 1:  # fp8: only (192, 128) differs from (d, d)
        kd = round_up_headdim(d)
        return (192, 128) if kd == 192 and dv <= 128 else (kd, kd)
    if d <= 64:
        return 64, 512 if dv > 256 else (256 if dv > 64 else 64)
    kd = round_up_headdim(d)
    return (192, 128) if kd == 192 and dv <= 128 else (kd, kd)


def should_pack_gqa(varlen_q: bool, seqlen_q: int, qhead_per_khead: int, blockM: int) -> bool:
    """hopper/heuristics.h L16-24 ``should_pack_gqa`` (float32 efficiencies)."""
    if varlen_q:
        return True

    def round_up(a: int, b: int) -> int:
        return cdiv(a, b) * b
    nopack = f32(float(seqlen_q) / float(round_up(seqlen_q, blockM)))
    pack = f32(float(seqlen_q * qhead_per_khead) / float(round_up(seqlen_q * qhead_per_khead, blockM)))
    return nopack < 0.9 * pack


def blocks_per_sm(total_blocks: int, num_head: int, num_sm: int) -> int:
    """``ceilf(float(total_blocks) * 1.1f * float(num_head) / float(num_sm))``, float32 left to right."""
    x = f32(float(total_blocks) * f32(1.1))
    x = f32(x * float(num_head))
    x = f32(x / float(num_sm))
    return int(-(-x // 1))


def metadata_num_splits(metadata: list[int], batch: int) -> tuple[int, ...] | None:
    """The per-request split counts in FA3's scheduler metadata (what ``get_scheduler_metadata`` returns, or the
    buffer mha_fwd fills) of a call that splits dynamically, None when it is too short to hold them: int32 vectors of
    ``round_up(B, 4)`` entries (16-byte alignment), the packed query lengths first, then the split counts
    (``num_splits_dynamic_ptr``; flash_api.cpp L1080-1090, L704)."""
    b4 = cdiv(batch, 4) * 4
    if len(metadata) < b4 + batch:
        return None
    return tuple(int(x) for x in metadata[b4:b4 + batch])


def combine_grid(B: int, h: int, dv: int, max_seqlen_q: int, total_q: int) -> tuple[tuple[int, ...], int, int]:
    """(grid, kBlockM, kBlockK) of FlashAttnFwdCombine for a varlen call: ``run_mha_fwd_combine``
    (flash_api.cpp L436-462), flash_fwd_combine_launch_template.h L68, and the StaticVarlenTileScheduler
    of flash_fwd_combine_kernel.h L276-321 (trailing 1s dropped)."""
    kBlockK = 64 if dv <= 64 else 128
    kBlockM = 8 if kBlockK % 128 == 0 else (16 if kBlockK % 64 == 0 else 32)
    nk = cdiv(dv, kBlockK)
    if 2 * cdiv(total_q, kBlockM) >= B * cdiv(max_seqlen_q, kBlockM):  # STANDARD: dense enough
        grid: tuple[int, ...] = (cdiv(max_seqlen_q * h, kBlockM), nk, B)
    else:  # LINEARIZE_M_AND_BATCH: an upper bound of one extra partial block per sequence
        grid = (cdiv(total_q * h, kBlockM) + B, nk, 1)
    while len(grid) > 1 and grid[-1] == 1:
        grid = grid[:-1]
    return grid, kBlockM, kBlockK


def plan_flash_attn3(
    w: Workload, gpu: GPUSpec, *, varlen: bool = True, paged: bool = True, num_splits: int = 0,
    sm_margin: int = 0, layer: str = "auto", check_platform: bool = True,
) -> LaunchPlan:
    """FA3 decode as vLLM drives it (varlen: ``cu_seqlens_q`` and ``seqused_k``, paged KV; section 7.3).

    ``num_splits`` 0 = heuristic; > 0 is the static upper bound (vLLM passes
    ``flash_attn_max_num_splits_for_cuda_graph = 32`` under full CUDA graphs). ``varlen=False`` is
    refused: vLLM's build of the fork defines ``FLASHATTENTION_VARLEN_ONLY``.
    """
    system = "FlashAttention-3"
    require_vendor(gpu, "nvidia", system, check_platform)
    require_not_mla(w, system)
    if check_platform and (gpu.compute_capability is None or gpu.compute_capability[0] != 9):
        raise UnsupportedError(f"{system} (hopper/) is an SM90 kernel; {gpu.name} has compute capability "
                               f"{gpu.compute_capability}")
    if not varlen:
        raise UnsupportedError(f"{system}: vLLM's build is varlen only (FLASHATTENTION_VARLEN_ONLY, {SRC_BUILD}; "
                               "VARLEN_SWITCH, hopper/static_switch.h L130-137)")
    d, dv = w.head_size, w.head_size_v
    elem = 1 if w.kv_cache_dtype.startswith("fp8") else 2
    align = 16 if elem == 1 else 8  # mha_fwd L932-934
    if d > 256 or dv > 256 or d % align or dv % align:
        raise UnsupportedError(f"{system}: head sizes {d}/{dv} not supported (multiples of {align} up to 256)")
    if dv != d and not (128 < d <= 192 and 96 < dv <= 128) and not (d <= 64 and dv <= 512):  # mha_fwd L845-849
        raise UnsupportedError(f"{system}: V head size {dv} != {d} needs d in (128, 192] with d_v in (96, 128], "
                               "or d <= 64")
    if w.dtype not in ("float16", "bfloat16"):
        raise UnsupportedError(f"{system}: fp16/bf16 (or fp8) only, got {w.dtype}")
    ex = Explain()
    B, h, h_kv, g = w.batch, w.num_heads, w.num_kv_heads, w.group_size
    s_q = w.max_seqlen_q
    window = layer_window(w, layer)
    # mha_fwd L863-877 with vLLM's arguments (causal=True, window_size = (W - 1, 0), or (-1, -1) without a
    # window): a window covering max_seqlen_k is dropped; a one-token query without window is not causal,
    # except hdim in (64, 128] with a paged cache (kept causal for kBlockN 128). Found by
    # tests/test_oracles_fa3.py.
    wl, wr = (window - 1, 0) if window else (-1, -1)
    if wl >= w.max_seqlen_k - 1:
        wl = -1
    if wr >= s_q - 1:
        wr = -1
    causal_arg = not (s_q == 1 and wl == -1 and wr == -1 and (d <= 64 or d > 128 or not paged))
    if causal_arg:
        wr = 0
    is_causal = ex.add("is_causal", wl < 0 and wr == 0, "window_size_left < 0 and window_size_right == 0 (after "
                       "mha_fwd drops a covering window and causality of an unpaged one-token query)",
                       f"{SRC_API} L863-877, L197", window_size_left=wl, window_size_right=wr)
    is_local = (wl >= 0 or wr >= 0) and not is_causal
    if not is_local:
        window = None
    one_wg = ex.add("use_one_mma_wg", use_one_mma_wg(d, s_q, h // h_kv, is_local),
                    "arch >= 90 and d in (64, 128) and not is_local and seqlen_q * (h / h_k) <= 64",
                    SRC_ONE_WG, d=d, is_local=is_local, seqlen_q=s_q, h=h, h_k=h_kv)
    d_r = round_up_headdim(d)
    dv_r = d_r if dv == d else round_up_headdim(dv)  # set_params_fprop, mha_fwd L955-956
    kM_tma, kN_tma = tile_size_fwd_sm90(d_r, dv_r, is_causal, is_local, elem, False, False, one_wg)
    tma = paged and not is_local and w.block_size % kN_tma == 0 and s_q * g > kM_tma
    ex.add("pagedkv_tma", tma, "not is_local and page_size % kBlockN == 0 and seqlen_q * (h / h_k) > kBlockM",
           f"{SRC_API} L464-474", is_local=is_local, page_size=w.block_size, kBlockN=kN_tma, seqlen_q=s_q,
           kBlockM=kM_tma)
    paged_non_tma = paged and not tma
    kBlockM, kBlockN = tile_size_fwd_sm90(d_r, dv_r, is_causal, is_local, elem, paged_non_tma, False, one_wg)
    ex.add("kBlockN", kBlockN,
           "tile_size_fwd_sm90(d, d_v, causal, local, element_size, paged_kv_non_TMA, use_one_mma_wg)[1]",
           SRC_TILE, d=d_r, d_v=dv_r, causal=is_causal, local=is_local, element_size=elem,
           paged_kv_non_TMA=paged_non_tma, use_one_mma_wg=one_wg)
    maxL = w.max_seqlen_k
    # get_num_splits: local attention loads min(seqlen_k, left + right + 1 + kBlockM) keys
    seqlen_k_loaded = max(0, min(maxL, window + kBlockM)) if window else maxL
    if window:
        ex.add("seqlen_k_loaded", seqlen_k_loaded, "min(seqlen_k, window_size_left + window_size_right + 1 + kBlockM)",
               f"{SRC_API} L514-516", seqlen_k=maxL, window_size_left=window - 1, window_size_right=0,
               kBlockM=kBlockM)
    n_blocks = cdiv(seqlen_k_loaded, kBlockN)
    n_mblocks = cdiv(s_q * g, kBlockM)
    size_one_kv_head = maxL * (d + dv) * elem
    total_mblocks = ex.add("total_mblocks", h_kv * n_mblocks, "1 * h_k * cdiv(s_q * g, kBlockM)  (varlen: batch "
                           "taken as 1)", f"{SRC_API} L512-524", h_k=h_kv, s_q=s_q, g=g, kBlockM=kBlockM)
    n_sm = gpu.num_sms - sm_margin
    if num_splits > 0:
        S_arg = ex.add("num_splits_static", num_splits, "num_splits (caller's upper bound)", f"{SRC_API} L1059",
                       num_splits=num_splits)
    else:
        S_arg = ex.add(
            "num_splits_static",
            num_splits_heuristic(total_mblocks, n_sm, n_blocks, n_mblocks, size_one_kv_head,
                                 is_causal or is_local, MAX_SPLITS),
            "num_splits_heuristic(total_mblocks, num_SMs, num_n_blocks, num_m_blocks, size_one_kv_head, causal_or_local, 128)",
            SRC_HEUR, total_mblocks=total_mblocks, num_SMs=n_sm, num_n_blocks=n_blocks, num_m_blocks=n_mblocks,
            size_one_kv_head=size_one_kv_head, causal_or_local=is_causal or is_local)
    # get_pack_gqa (L476-496; vLLM passes cu_seqlens_q: varlen_q), then L1063 and, with vLLM's
    # FLASHATTENTION_PACKGQA_ONLY, L1064-1066
    override = g == 8 and is_local and d == 64 and dv == d
    pack_gqa = (S_arg > 1 or paged_non_tma or override or (h != h_kv and should_pack_gqa(True, s_q, g, kBlockM))
                or d == dv)
    ex.add("pack_gqa", pack_gqa, "num_splits > 1 or paged-non-TMA or (h / h_k == 8 and local and d == d_v == 64) "
           "or (h != h_k and varlen_q) or d == d_v  (FLASHATTENTION_PACKGQA_ONLY)",
           f"{SRC_API} L476-496, L1061-1066; {SRC_BUILD}", num_splits=S_arg, h=h, h_k=h_kv, d=d, d_v=dv)
    S_static = S_arg
    if B > PREPARE_VARLEN_MAX_BATCHES_1CTA and S_arg > 1:
        S_static = ex.add("num_splits", 1, "1 if batch > PREPARE_VARLEN_MAX_BATCHES_1CTA (992) else num_splits_static",
                          f"{SRC_API} L1068-1070", batch=B, num_splits_static=S_arg)
    if S_static > MAX_SPLITS_ALLOWED:
        raise UnsupportedError(f"{system}: num_splits {S_static} > 256")
    heads = h_kv if pack_gqa else h
    # the instantiation's tile (flash_fwd_launch_template.h L219: one warp group only if kHeadDimV == kHeadDim);
    # the prepare kernel and the scheduler use it (L152-170); the same as the host's when d == d_v
    kd, kdv = kernel_headdims(d, dv, elem)
    one_wg_k = one_wg and kd == kdv and kd in (64, 128)
    kM_k, kN_k = tile_size_fwd_sm90(kd, kdv, is_causal, is_local, elem, paged_non_tma, False, one_wg_k)
    n_full_b = [cdiv(L, kN_k) for L in w.seq_lens]  # prepare kernel L97-121: the whole length, no window
    # block.h L24-49: a local query block reads from the window's first key (n_offset), so one m-block of
    # q tokens reads min(L, W + q - 1) keys
    n_read_b = [cdiv(min(L, window + q - 1), kN_k) if window else n
                for L, q, n in zip(w.seq_lens, w.query_lens, n_full_b)]
    n_mblocks_b = [cdiv(q * (g if pack_gqa else 1), kM_k) for q in w.query_lens]
    if S_static > 1:
        total_blocks = sum(m * n for m, n in zip(n_mblocks_b, n_full_b))
        bps = ex.add("blocks_per_sm", blocks_per_sm(total_blocks, heads, n_sm),
                     "ceilf(float(total_blocks) * 1.1f * float(num_head) / float(num_sm))  (float32)",
                     SRC_PREP, total_blocks=total_blocks, num_head=heads, num_sm=n_sm)
        splits = tuple(max(min(cdiv(nb, max(bps, 1)), S_static), 1) for nb in n_full_b)
        ex.add("num_splits_dynamic", splits,
               "max(min(cdiv(cdiv(seqused_k_b, kBlockN), blocks_per_sm), num_splits_static), 1)",
               SRC_PREP, blocks_per_sm=bps, num_splits_static=S_static, kBlockN=kN_k)
    else:
        splits = (1,) * B
    blocks_per_split = [cdiv(nb, s) for nb, s in zip(n_read_b, splits)]  # block.h L54-63
    nonempty = tuple(cdiv(nb, bs) if bs else 0 for nb, bs in zip(n_read_b, blocks_per_split))
    tps = tuple(min(bs * kN_k, min(L, window + q - 1) if window else L)
                for bs, L, q in zip(blocks_per_split, w.seq_lens, w.query_lens))
    tiles = sum(m * heads * s for m, s in zip(n_mblocks_b, splits))
    busy_tiles = sum(m * heads * s for m, s in zip(n_mblocks_b, nonempty))
    # flash_fwd_launch_template.h L65-78: varlen is always persistent, VarlenDynamicPersistentTileScheduler
    # (tile_scheduler.hpp L423-426: grid = num_sm)
    kernels = [KernelLaunch(name="FlashAttnFwdSm90 (VarlenDynamicPersistentTileScheduler)", grid=(n_sm,),
                            working_programs=min(n_sm, busy_tiles), kind=KernelKind.FA3_FWD,
                            constexprs={"kBlockM": kM_k, "kBlockN": kN_k, "PackGQA": pack_gqa,
                                        "Split": S_static > 1, "Use_one_mma_wg": one_wg_k, "tiles": tiles})]
    rows = w.num_tokens * h
    per = 0
    if S_static > 1:
        grid_c, kBlockM_c, kBlockK_c = combine_grid(B, h, dv, s_q, w.num_tokens)
        ex.add("combine_grid", grid_c, "(cdiv(max_seqlen_q * h, kBlockM), cdiv(d_v, kBlockK), B) if "
               "2 * cdiv(total_q, kBlockM) >= B * cdiv(max_seqlen_q, kBlockM) else "
               "(cdiv(total_q * h, kBlockM) + B, cdiv(d_v, kBlockK))", SRC_COMBINE, max_seqlen_q=s_q, h=h,
               kBlockM=kBlockM_c, d_v=dv, kBlockK=kBlockK_c, B=B, total_q=w.num_tokens)
        nk = cdiv(dv, kBlockK_c)
        work_c = sum(cdiv(q * h, kBlockM_c) for q in w.query_lens) * nk
        programs_c = 1
        for x in grid_c:
            programs_c *= x
        kernels.append(KernelLaunch(name="FlashAttnFwdCombine", grid=grid_c, kind=KernelKind.FA3_COMBINE,
                                    working_programs=min(programs_c, work_c),
                                    constexprs={"kBlockM": kBlockM_c, "kBlockK": kBlockK_c}))
        per = ex.add("partial_state_bytes_per_token_head", S_static * (4 * dv + 4),
                     "num_splits_static * (4 * d_v + 4)  (out_accum, lse_accum fp32, allocated with the static bound)",
                     f"{SRC_API} L1180-1201", num_splits_static=S_static, d_v=dv, unit="bytes")
    used = sum(s * q * h * (4 * dv + 4) for s, q in zip(splits, w.query_lens) if s > 1) if S_static > 1 else 0
    return LaunchPlan(
        system="fa3", kernels=tuple(kernels), splits=splits, nonempty_splits=nonempty, tokens_per_split=tps,
        partial_state_bytes=rows * per, partial_state_bytes_used=used, scratch_bytes=rows * per,
        explain=ex.items(),
        details=Fa3Details(num_splits_static=S_static, kBlockM=kM_k, kBlockN=kN_k, pagedkv_tma=tma,
                           pack_gqa=pack_gqa, use_one_mma_wg=one_wg_k, element_size=elem, tiles=tiles,
                           varlen=varlen, dynamic_splits=S_static > 1, num_splits_arg=num_splits, source=SRC_API),
    )
