"""FlashAttention-3 (Hopper) split decode (upstream-launchers.md section 7.2).

Dao-AILab/flash-attention @ 0251105a2fb19d2957484b7f023cd8c115286ced:
- ``hopper/heuristics.h`` L25-59 ``num_splits_heuristic`` (float32, no eligibility filter,
  ``n_blocks <= 4`` and 50 MiB L2 rules);
- ``hopper/flash_api.cpp`` ``get_pagedkv_tma`` L415-424, ``get_pack_gqa`` L426-429,
  ``get_num_splits`` L442-471 (varlen pretends batch = 1: an upper bound), is_causal dropped
  for ``max_seqlen_q == 1`` without window L799-802, scratch L1092-1103 (``S <= 256``),
  one prepare CTA up to 992 sequences L42;
- ``hopper/tile_size.h`` L10-54 ``tile_size_fwd_sm90``;
- ``hopper/flash_prepare_scheduler.cu`` L140-161: per-batch dynamic splits
  ``blocks_per_sm = ceilf(float(total_blocks) * 1.1f * float(num_head) / float(num_sm))``,
  evaluated left to right in float32;
- ``hopper/flash_fwd_launch_template.h`` L75 (persistent unless split and not varlen),
  ``hopper/tile_scheduler.hpp`` L548-549 (varlen persistent grid = num_sm), L66-67
  (SingleTileScheduler grid ``(n_mblocks, S * heads, B)``).

The combine kernel's grid was not derived upstream (section 12); it is the grid measured on the H200
(vLLM 0.33.0's FA3 build): ``(cdiv(rows, kBlockM) + B, cdiv(d_v, kBlockK))`` for varlen batches of more
than one request, ``kBlockM = 8`` for ``d_v % 128 == 0`` (16 for 64), ``kBlockK = min(d_v, 128)``.
"""

from __future__ import annotations

from decodecalc.derived import Explain, cdiv
from decodecalc.errors import UnsupportedError
from decodecalc.launchers.base import KernelKind, KernelLaunch, LaunchPlan
from decodecalc.launchers.flash_attn2 import f32
from decodecalc.launchers.guards import layer_window, require_not_mla, require_vendor
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

FA_COMMIT = "0251105a"
SRC_HEUR = f"flash-attention@{FA_COMMIT} hopper/heuristics.h L25-59"
SRC_API = f"flash-attention@{FA_COMMIT} hopper/flash_api.cpp"
SRC_TILE = f"flash-attention@{FA_COMMIT} hopper/tile_size.h L10-54"
SRC_PREP = f"flash-attention@{FA_COMMIT} hopper/flash_prepare_scheduler.cu L140-161"
SRC_SCHED = f"flash-attention@{FA_COMMIT} hopper/tile_scheduler.hpp"

MAX_SPLITS = 128  # get_num_splits passes 128
MAX_SPLITS_ALLOWED = 256  # flash_api.cpp L1095
PREPARE_VARLEN_MAX_BATCHES_1CTA = 992  # flash_api.cpp L42
SIZE_L2 = 50 * 1024 * 1024  # hopper/heuristics.h L30 num_splits_heuristic: size_l2 (the H100's L2)


def num_splits_heuristic(total_mblocks: int, num_SMs: int, num_n_blocks: int, num_m_blocks: int,
                         size_one_kv_head: int, is_causal_or_local: bool, max_splits: int) -> int:
    """hopper/heuristics.h L25-59 with float32 efficiencies (no eligibility filter)."""
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
    for r in (64, 96, 128, 192, 256):
        if d <= r:
            return r
    return d


def tile_size_fwd_sm90(headdim: int, headdim_v: int, is_causal: bool, is_local: bool, element_size: int = 2,
                       paged_kv_non_TMA: bool = False, softcap: bool = False) -> tuple[int, int]:
    """(kBlockM, kBlockN) of hopper/tile_size.h L10-54 (v_colmajor = False)."""
    if element_size == 2:
        if headdim <= 64:
            if headdim_v == 512:
                return 64, 64
            if headdim_v == 256:
                return 128, 96
            return 192, 128 if (is_causal or is_local or paged_kv_non_TMA) else 192
        if headdim <= 96:
            return 192, 128 if (is_local or paged_kv_non_TMA) else 144
        if headdim <= 128:
            return 128, 128 if (is_causal or is_local or paged_kv_non_TMA) else 176
        if headdim <= 192:
            return 128, 96 if (paged_kv_non_TMA or is_local) else (128 if headdim_v <= 128 else 112)
        return 128, 64 if is_local else 80
    if headdim <= 64:
        return 192, 160
    if headdim <= 96:
        return 192, 128
    if headdim <= 128:
        return 128, 160 if paged_kv_non_TMA else (192 if (softcap and is_local) else 224)
    if headdim <= 192:
        return 128, 128 if ((paged_kv_non_TMA or softcap) and is_local) else 160
    return 128, 64 if is_local else 128


def should_pack_gqa(seqlen_q: int, qhead_per_khead: int, blockM: int) -> bool:
    """hopper/heuristics.h ``should_pack_gqa`` for non-varlen q (float32 efficiencies)."""
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


def plan_flash_attn3(
    w: Workload, gpu: GPUSpec, *, varlen: bool = True, paged: bool = True, num_splits: int = 0,
    sm_margin: int = 0, layer: str = "auto", check_platform: bool = True,
) -> LaunchPlan:
    """FA3 decode as vLLM drives it (varlen with ``seqused_k``, paged KV; section 7.3).

    ``num_splits`` 0 = heuristic; > 0 is the static upper bound (vLLM passes
    ``flash_attn_max_num_splits_for_cuda_graph = 32`` under full CUDA graphs).
    """
    system = "FlashAttention-3"
    require_vendor(gpu, "nvidia", system, check_platform)
    require_not_mla(w, system)
    if check_platform and (gpu.compute_capability is None or gpu.compute_capability[0] != 9):
        raise UnsupportedError(f"{system} (hopper/) is an SM90 kernel; {gpu.name} has compute capability "
                               f"{gpu.compute_capability}")
    d, dv = w.head_size, w.head_size_v
    if d > 256 or dv > 256 or d % 8 or dv % 8:
        raise UnsupportedError(f"{system}: head sizes {d}/{dv} not supported (multiples of 8 up to 256)")
    if w.dtype not in ("float16", "bfloat16"):
        raise UnsupportedError(f"{system}: fp16/bf16 (or fp8) only, got {w.dtype}")
    if not varlen and len(set(w.seq_lens)) != 1:
        raise UnsupportedError(f"{system}: non-varlen calls need one KV length for the whole batch")
    ex = Explain()
    B, h, h_kv, g = w.batch, w.num_heads, w.num_kv_heads, w.group_size
    s_q = w.max_seqlen_q
    elem = 1 if w.kv_cache_dtype.startswith("fp8") else 2
    window = layer_window(w, layer)
    # mha_fwd L796-805 and set_params_fprop L148-149 with vLLM's arguments (causal=True,
    # window_size = (W - 1, 0), or (-1, -1) without a window): a window covering max_seqlen_k is
    # dropped; a one-token query without window is not causal, except hdim in (64, 128] with a paged
    # cache (kept causal for kBlockN 128). Found by tests/test_oracles_fa3.py.
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
                       f"{SRC_API} L796-805, L148", window_size_left=wl, window_size_right=wr)
    is_local = (wl >= 0 or wr >= 0) and not is_causal
    if not is_local:
        window = None
    d_r, dv_r = round_up_headdim(d), round_up_headdim(dv)
    kM_tma, kN_tma = tile_size_fwd_sm90(d_r, dv_r, is_causal, is_local, elem, False)
    tma = paged and w.block_size % kN_tma == 0 and s_q * g > kM_tma
    ex.add("pagedkv_tma", tma, "page_size % kBlockN == 0 and seqlen_q * (h / h_k) > kBlockM",
           f"{SRC_API} L415-424", page_size=w.block_size, kBlockN=kN_tma, seqlen_q=s_q, kBlockM=kM_tma)
    kBlockM, kBlockN = tile_size_fwd_sm90(d_r, dv_r, is_causal, is_local, elem, paged and not tma)
    ex.add("kBlockN", kBlockN, "tile_size_fwd_sm90(d, d_v, causal, local, element_size, paged_kv_non_TMA)[1]",
           SRC_TILE, d=d_r, d_v=dv_r, causal=is_causal, local=is_local, element_size=elem,
           paged_kv_non_TMA=paged and not tma)
    maxL = w.max_seqlen_k

    def loaded(L: int) -> int:
        # flash_api.cpp get_num_splits: local attention loads min(seqlen_k, left + right + 1 + kBlockM) keys
        # (vLLM passes window_size = (W - 1, 0) for decode); used per sequence too (an approximation
        # of the prepare kernel's per-batch local block count, which was not derived upstream)
        return max(0, min(L, window + kBlockM)) if window else L

    if window:
        ex.add("seqlen_k_loaded", loaded(maxL), "min(seqlen_k, window_size_left + window_size_right + 1 + kBlockM)",
               f"{SRC_API} L442-471", seqlen_k=maxL, window_size_left=window - 1, window_size_right=0,
               kBlockM=kBlockM)
    n_blocks = cdiv(loaded(maxL), kBlockN)
    n_mblocks = cdiv(s_q * g, kBlockM)
    size_one_kv_head = maxL * (d + dv) * elem
    total_mblocks = ex.add("total_mblocks", (1 if varlen else B) * h_kv * n_mblocks,
                           "(1 if varlen else B) * h_k * cdiv(s_q * g, kBlockM)", f"{SRC_API} L442-471",
                           B=B, h_k=h_kv, s_q=s_q, g=g, kBlockM=kBlockM)
    n_sm = gpu.num_sms - sm_margin
    if num_splits > 0:
        S_static = ex.add("num_splits_static", num_splits, "num_splits (caller's upper bound)", f"{SRC_API}",
                          num_splits=num_splits)
    else:
        S_static = ex.add(
            "num_splits_static",
            num_splits_heuristic(total_mblocks, n_sm, n_blocks, n_mblocks, size_one_kv_head,
                                 is_causal or is_local, MAX_SPLITS),
            "num_splits_heuristic(total_mblocks, num_SMs, num_n_blocks, num_m_blocks, size_one_kv_head, causal_or_local, 128)",
            SRC_HEUR, total_mblocks=total_mblocks, num_SMs=n_sm, num_n_blocks=n_blocks, num_m_blocks=n_mblocks,
            size_one_kv_head=size_one_kv_head, causal_or_local=is_causal or is_local)
    if S_static > MAX_SPLITS_ALLOWED:
        raise UnsupportedError(f"{system}: num_splits {S_static} > 256")
    pack_gqa = S_static > 1 or (paged and not tma) or (
        h != h_kv and (varlen or should_pack_gqa(s_q, g, kBlockM)))
    ex.add("pack_gqa", pack_gqa, "num_splits > 1 or paged-non-TMA or (h != h_k and (varlen_q or should_pack_gqa))",
           f"{SRC_API} L426-429; hopper/heuristics.h should_pack_gqa", num_splits=S_static)
    heads = h_kv if pack_gqa else h
    n_blocks_b = [cdiv(loaded(L), kBlockN) for L in w.seq_lens]
    n_mblocks_b = [cdiv(q * (g if pack_gqa else 1), kBlockM) for q in w.query_lens]
    if varlen and S_static > 1 and B <= PREPARE_VARLEN_MAX_BATCHES_1CTA:
        total_blocks = sum(m * n for m, n in zip(n_mblocks_b, n_blocks_b))
        bps = ex.add("blocks_per_sm", blocks_per_sm(total_blocks, heads, n_sm),
                     "ceilf(float(total_blocks) * 1.1f * float(num_head) / float(num_sm))  (float32)",
                     SRC_PREP, total_blocks=total_blocks, num_head=heads, num_sm=n_sm)
        splits = tuple(max(min(cdiv(nb, bps), S_static), 1) for nb in n_blocks_b)
        ex.add("num_splits_dynamic", splits, "max(min(cdiv(num_n_blocks_b, blocks_per_sm), num_splits_static), 1)",
               SRC_PREP, blocks_per_sm=bps, num_splits_static=S_static)
    elif varlen:
        splits = (1,) * B
    else:
        splits = (S_static,) * B
    if varlen:
        blocks_per_split = [cdiv(nb, s) for nb, s in zip(n_blocks_b, splits)]
    else:
        blocks_per_split = [cdiv(n_blocks, S_static)] * B
    nonempty = tuple(cdiv(nb, bs) for nb, bs in zip(n_blocks_b, blocks_per_split))
    tps = tuple(min(bs * kBlockN, loaded(L)) for bs, L in zip(blocks_per_split, w.seq_lens))
    tiles = sum(m * heads * s for m, s in zip(n_mblocks_b, splits))
    busy_tiles = sum(m * heads * s for m, s in zip(n_mblocks_b, nonempty))
    if varlen:
        grid: tuple[int, ...] = (n_sm,)
        kname = "FlashAttnFwdSm90 (VarlenDynamicPersistentTileScheduler)"
        working = min(n_sm, busy_tiles)
    elif S_static > 1:
        grid = (n_mblocks, S_static * heads, B)
        kname = "FlashAttnFwdSm90 (SingleTileScheduler)"
        working = busy_tiles
    else:
        grid = (min(n_sm, tiles),)
        kname = "FlashAttnFwdSm90 (StaticPersistentTileScheduler; grid assumed min(num_sm, tiles))"
        working = grid[0]
    kernels = [KernelLaunch(name=kname, grid=grid, working_programs=working, kind=KernelKind.FA3_FWD,
                            constexprs={"kBlockM": kBlockM, "kBlockN": kBlockN, "PackGQA": pack_gqa,
                                        "Split": S_static > 1, "tiles": tiles})]
    rows = w.num_tokens * h
    per = 0
    if S_static > 1:
        kBlockM_c = 8 if dv % 128 == 0 else (16 if dv % 64 == 0 else 32)
        kBlockK_c = min(dv, 128)
        # measured, not derived: vLLM 0.33.0's _vllm_fa3_C on the H200 launched FlashAttnFwdCombine with
        # grid (cdiv(total_q * h, kBlockM) + B, cdiv(d_v, kBlockK)) for varlen batches of B > 1 and
        # (cdiv(h, kBlockM), ...) for B = 1, over 192 captures (benchmarks/results/capture-backends-h200.jsonl)
        comb = cdiv(rows, kBlockM_c) + (B if varlen and B > 1 else 0)
        grid_c: tuple[int, ...] = (comb, cdiv(dv, kBlockK_c)) if dv > kBlockK_c else (comb,)
        kernels.append(KernelLaunch(name="FlashAttnFwdCombine", grid=grid_c, kind=KernelKind.FA3_COMBINE,
                                    working_programs=comb * grid_c[-1] if len(grid_c) > 1 else comb,
                                    constexprs={"kBlockM": kBlockM_c, "kBlockK": kBlockK_c}))
        per = ex.add("partial_state_bytes_per_token_head", S_static * (4 * dv + 4),
                     "num_splits_static * (4 * d_v + 4)  (out_accum, lse_accum fp32, allocated with the static bound)",
                     f"{SRC_API} L1092-1103", num_splits_static=S_static, d_v=dv, unit="bytes")
    used = sum(s * q * h * (4 * dv + 4) for s, q in zip(splits, w.query_lens) if s > 1) if S_static > 1 else 0
    return LaunchPlan(
        system="fa3", kernels=tuple(kernels), splits=splits, nonempty_splits=nonempty, tokens_per_split=tps,
        partial_state_bytes=rows * per, partial_state_bytes_used=used, scratch_bytes=rows * per,
        explain=ex.items(),
        details={"num_splits_static": S_static, "kBlockM": kBlockM, "kBlockN": kBlockN, "pagedkv_tma": tma,
                 "pack_gqa": pack_gqa, "tiles": tiles, "varlen": varlen, "source": SRC_API},
    )
