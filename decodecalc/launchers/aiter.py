"""AMD aiter Triton unified attention: 2D/3D choice and segment count (peers-and-user-needs.md 1.9).

Read from ROCm/aiter @ e4048607a535ace3a2b51ded31b1c8c2d45c0879 (2026-08-22),
``aiter/ops/triton/attention/unified_attention.py`` (last changed by 70e9b025, 2026-08-05):
- ``unified_attention`` L395-407: ``target_num_prgms = cu_count * 4``; for an all-decode batch
  ``total_num_q_blocks = num_seqs`` (else ``num_tokens // BLOCK_Q + num_seqs``);
  ``num_2d_prgms = total_num_q_blocks * num_kv_heads``;
- ``use_2d_kernel`` L284-304: 2D if sliding window, ``max_seqlen_k <= 512`` or
  ``num_2d_prgms > target_num_prgms`` (gfx1250: 2D only for sliding window or prefill;
  ``head_size >= 512`` prefill on CDNA: 2D);
- ``select_3d_config`` L140-282 (CDNA branch L207-245): ``occ = waves_per_eu * 4 // attn_warps``
  (2 * 4 // 2 = 4; attn_warps 4 for head_size >= 512), ``target_num_prgms *= occ``,
  ``TILE_SIZE = min(64, np2(block_size))``, ``MAX_SEGMENTS = min(128, ceil(max_seqlen_k / TILE))``,
  ``MIN_SEGMENTS = min(8, MAX_SEGMENTS)`` (16 for head_size >= 512),
  ``num_segments = np2(max(min(ceil(target / num_2d), MAX), MIN))``; fp8 q and KV: ``TILE = max(32, TILE)``
  after the segment count; gfx1250 branch L166-196;
- grids: 2D ``(num_kv_heads, total_num_q_blocks)``; 3D ``(total_num_q_blocks, num_kv_heads,
  NUM_SEGMENTS)``; ``reduce_segments (num_tokens, num_query_heads)`` only if ``NUM_SEGMENTS > 1``
  (L535-560, L689); scratch ``[num_tokens, h, NUM_SEGMENTS, np2(d)]`` + max + expsum fp32;
- kernel (``aiter/ops/triton/_triton_kernels/attention/unified_attention.py`` L552-555, L898-902):
  ``tiles_per_segment = cdiv(seq_len, NUM_SEGMENTS * TILE)``, active segments
  ``cdiv(seq_len, tiles_per_segment * TILE)`` (the vLLM rule).
``cu_count`` is ``get_num_sms()`` (CUs), :attr:`GPUSpec.num_sms` here.

The package index's only release (amd-aiter 0.1.7.post2.dev18, 2025-11) predates that commit and
chooses differently; :func:`plan_aiter_release` mirrors it. tests/test_oracles_aiter.py runs the
release's own ``unified_attention`` against it, and the commit's selection functions against
:func:`plan_aiter` when a checkout is at hand (DECODECALC_AITER_SRC).
"""

from __future__ import annotations

import math

from decodecalc.derived import Explain, cdiv, next_power_of_2
from decodecalc.errors import UnsupportedError
from decodecalc.launchers.base import KernelLaunch, LaunchPlan, LengthKey
from decodecalc.launchers.details import AiterDetails
from decodecalc.launchers.guards import layer_window, require_not_mla, require_vendor
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

AITER_COMMIT = "e4048607"
SRC = f"aiter@{AITER_COMMIT} aiter/ops/triton/attention/unified_attention.py"
MAX_SEQLEN_K_2D = 512  # use_2d_kernel L284-304: short sequences take the 2D kernel
SRC_KERN = f"aiter@{AITER_COMMIT} aiter/ops/triton/_triton_kernels/attention/unified_attention.py L552-555, L898-902"


def block_shape(num_queries_per_kv: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_Q) as aiter computes them for itself (``select_2d_config`` / ``select_3d_config`` in
    aiter/ops/triton/attention/unified_attention.py @ e4048607): aiter's own copy of the packing vLLM uses,
    kept here because it follows aiter's releases, not vLLM's (vLLM's is launchers.vllm_unified.block_shape).
    BLOCK_M is 16 up to 16 query heads per KV head, else their next power of 2."""
    block_m = next_power_of_2(num_queries_per_kv) if num_queries_per_kv > 16 else 16
    return block_m, block_m // num_queries_per_kv


def tile_size(block_size: int) -> int:
    """``TILE_SIZE = min(64, np2(block_size))`` (select_3d_config L219); decodecalc uses it for the all-decode
    2D launch as well."""
    return min(64, next_power_of_2(block_size))


def plan_aiter(w: Workload, gpu: GPUSpec, *, layer: str = "auto", check_platform: bool = True) -> LaunchPlan:
    """aiter ``unified_attention`` launch (the Triton path vLLM's ROCm AITER unified backend calls)."""
    system = "aiter unified attention"
    require_vendor(gpu, "amd", system, check_platform)
    require_not_mla(w, system)
    if w.kv_cache_dtype not in ("float16", "bfloat16", "fp8", "fp8_e4m3"):
        raise UnsupportedError(f"{system}: KV cache dtype {w.kv_cache_dtype} not supported (f16, bf16, fp8)")
    ex = Explain()
    arch = str(gpu.gfx_arch or "gfx942")
    gfx12 = arch == "gfx1250"
    rdna = arch.startswith("gfx1")
    B, h_kv, g, d = w.batch, w.num_kv_heads, w.group_size, w.head_size
    T = w.num_tokens
    maxL = w.max_seqlen_k
    BLOCK_M, BLOCK_Q = block_shape(g)
    all_decode = w.max_seqlen_q == 1
    q_blocks = ex.add("total_num_q_blocks", B if all_decode else T // BLOCK_Q + B,
                      "num_seqs if all decode else num_tokens // BLOCK_Q + num_seqs", f"{SRC} L402-406",
                      num_seqs=B, num_tokens=T, BLOCK_Q=BLOCK_Q)
    target = ex.add("target_num_prgms", gpu.num_sms * 4, "cu_count * 4", f"{SRC} L400-401", cu_count=gpu.num_sms)
    num_2d = ex.add("num_2d_prgms", q_blocks * h_kv, "total_num_q_blocks * num_kv_heads", f"{SRC} L407",
                    total_num_q_blocks=q_blocks, num_kv_heads=h_kv)
    window = bool(layer_window(w, layer))
    if gfx12:
        use_2d = window or not all_decode
        rule = "sliding_window > 0 or not all_decode  (gfx1250)"
    elif d >= 512 and not rdna and not all_decode:
        use_2d = True
        rule = "head_size >= 512 and not all_decode"
    else:
        use_2d = window or maxL <= MAX_SEQLEN_K_2D or num_2d > target
        rule = "sliding_window > 0 or max_seqlen_k <= 512 or num_2d_prgms > target_num_prgms"
    ex.add("use_2d_kernel", use_2d, rule, f"{SRC} L284-304", max_seqlen_k=maxL, num_2d_prgms=num_2d,
           target_num_prgms=target)
    fp8 = w.dtype.startswith("fp8") and w.kv_cache_dtype.startswith("fp8")  # q is never fp8 in a Workload
    if use_2d:
        tile = tile_size(w.block_size) if all_decode else 64
        kernels = (KernelLaunch(name="kernel_unified_attention_2d", grid=(h_kv, q_blocks),
                                working_programs=h_kv * sum(cdiv(q, BLOCK_Q) for q in w.query_lens),
                                constexprs={"BLOCK_M": BLOCK_M, "BLOCK_Q": BLOCK_Q, "TILE_SIZE": tile}),)
        return LaunchPlan(
            system="aiter", kernels=kernels, splits=(1,) * B, nonempty_splits=(1,) * B, tokens_per_split=w.seq_lens,
            partial_state_bytes=0, partial_state_bytes_used=0, scratch_bytes=0, explain=ex.items(),
            details=AiterDetails(path="2D", arch=arch, source=SRC),
        )
    if gfx12:
        tile = w.block_size
        occ = 1 * 4 // 1  # waves_per_eu 1 (fallback), attn_warps 1
        max_seg = max(1, math.ceil(maxL / tile))
        S = next_power_of_2(min(max_seg, max(1, target // 4 * occ // max(1, num_2d))))
        ex.add("NUM_SEGMENTS", S, "np2(min(MAX_SEGMENTS, max(1, target_num_prgms // 4 * occ // num_2d_prgms)))",
               f"{SRC} L187-194", MAX_SEGMENTS=max_seg, target_num_prgms=target, occ=occ, num_2d_prgms=num_2d)
    else:
        attn_warps = 4 if (d >= 512 and not rdna) else 2
        occ = 2 * 4 // attn_warps
        target_occ = target * occ
        tile = tile_size(w.block_size)
        max_seg = min(128, math.ceil(maxL / tile))
        min_seg = min(16 if (d >= 512 and not rdna) else 8, max_seg)
        S = math.ceil(target_occ / num_2d)
        S = next_power_of_2(max(min(S, max_seg), min_seg))
        ex.add("NUM_SEGMENTS", S,
               "np2(max(min(ceil(target_num_prgms * occ / num_2d_prgms), MAX_SEGMENTS), MIN_SEGMENTS))",
               f"{SRC} L207-231", target_num_prgms=target, occ=occ, num_2d_prgms=num_2d, MAX_SEGMENTS=max_seg,
               MIN_SEGMENTS=min_seg)
        if fp8:
            tile = max(32, tile)
    ex.add("TILE_SIZE", tile, "min(64, np2(block_size))", f"{SRC} L219", block_size=w.block_size)
    return _plan_3d(w, ex, q_blocks, S, tile, arch=arch, source=SRC)


def _plan_3d(w: Workload, ex: Explain, q_blocks: int, S: int, tile: int, *, source: str, arch: str | None = None,
             release: str | None = None) -> LaunchPlan:
    """The 3D launch both releases share: grid (total_num_q_blocks, num_kv_heads, NUM_SEGMENTS), the
    kernel's segment early exit, reduce_segments over (num_tokens, num_query_heads) when S > 1."""
    B, T, h, h_kv, d = w.batch, w.num_tokens, w.num_heads, w.num_kv_heads, w.head_size
    BLOCK_M, BLOCK_Q = block_shape(w.group_size)
    tps = [cdiv(L, S * tile) for L in w.seq_lens]
    active = tuple(cdiv(L, t * tile) for L, t in zip(w.seq_lens, tps))
    ex.add("active_segments", active, "cdiv(seq_len, cdiv(seq_len, NUM_SEGMENTS * TILE) * TILE)", SRC_KERN,
           NUM_SEGMENTS=S, TILE=tile)
    kernels_l = [KernelLaunch(name="kernel_unified_attention_3d", grid=(q_blocks, h_kv, S),
                              working_programs=h_kv * sum(cdiv(q, BLOCK_Q) * a for q, a in zip(w.query_lens, active)),
                              constexprs={"BLOCK_M": BLOCK_M, "BLOCK_Q": BLOCK_Q, "TILE_SIZE": tile,
                                          "NUM_SEGMENTS_PER_SEQ": S})]
    per = 0
    if S > 1:
        kernels_l.append(KernelLaunch(name="reduce_segments", grid=(T, h), working_programs=T * h))
        per = ex.add("partial_state_bytes_per_token_head", S * (4 * next_power_of_2(d) + 8),
                     "NUM_SEGMENTS * (4 * np2(d) + 4 + 4)", f"{SRC} L535-558", NUM_SEGMENTS=S, d=d, unit="bytes")
    used = sum(a * q * h * (4 * next_power_of_2(d) + 8) for a, q in zip(active, w.query_lens)) if S > 1 else 0
    return LaunchPlan(
        system="aiter", kernels=tuple(kernels_l), splits=(S,) * B, nonempty_splits=active,
        tokens_per_split=tuple(min(t * tile, L) for t, L in zip(tps, w.seq_lens)),
        partial_state_bytes=T * h * per, partial_state_bytes_used=used, scratch_bytes=T * h * per,
        explain=ex.items(),
        details=AiterDetails(path="3D", NUM_SEGMENTS=S, TILE_SIZE=tile, arch=arch, release=release, source=source),
    )


#: the one aiter release on the package index (2025-11), older than the commit plan_aiter mirrors
RELEASE = "0.1.7.post2.dev18"
SRC_RELEASE = f"amd-aiter {RELEASE} aiter/ops/triton/unified_attention.py"


def plan_aiter_release(w: Workload, gpu: GPUSpec, *, layer: str = "auto", check_platform: bool = True) -> LaunchPlan:
    """``unified_attention`` as the package-index release writes it (checked against it by
    tests/test_oracles_aiter.py): total_num_q_blocks = num_tokens // BLOCK_Q + num_seqs for every batch
    (L163); 2D if sliding window, max_seqlen_k <= 512 or num_2d_prgms > cu_count * 4 (L87-100); 2D
    TILE_SIZE = block_size for an all-decode batch, else 64 (L27-38); 3D TILE_SIZE = block_size and
    NUM_SEGMENTS = max(min(np2(ceil(target / num_2d)), 128), 16 if TILE_SIZE <= 16 else 8) (L56-69), no
    occupancy factor and no MAX_SEGMENTS clamp; reduce_segments always (L313-320)."""
    system = "aiter unified attention"
    require_vendor(gpu, "amd", system, check_platform)
    require_not_mla(w, system)
    ex = Explain()
    B, h_kv, g = w.batch, w.num_kv_heads, w.group_size
    T, maxL = w.num_tokens, w.max_seqlen_k
    BLOCK_M, BLOCK_Q = block_shape(g)
    q_blocks = ex.add("total_num_q_blocks", T // BLOCK_Q + B, "num_tokens // BLOCK_Q + num_seqs",
                      f"{SRC_RELEASE} L163", num_tokens=T, BLOCK_Q=BLOCK_Q, num_seqs=B)
    target = ex.add("target_num_prgms", gpu.num_sms * 4, "cu_count * 4", f"{SRC_RELEASE} L164", cu_count=gpu.num_sms)
    num_2d = q_blocks * h_kv
    window = bool(layer_window(w, layer))
    use_2d = ex.add("use_2d_kernel", window or maxL <= MAX_SEQLEN_K_2D or num_2d > target,
                    "sliding_window > 0 or max_seqlen_k <= 512 or num_2d_prgms > target_num_prgms",
                    f"{SRC_RELEASE} L87-100", max_seqlen_k=maxL, num_2d_prgms=num_2d, target_num_prgms=target)
    if use_2d:
        block_m = 128 if w.max_seqlen_q >= 256 else BLOCK_M  # select_2d_config L41-44
        q_blocks_2d = T // (block_m // g) + B
        tile = w.block_size if w.max_seqlen_q == 1 else 64
        kernels = (KernelLaunch(name="kernel_unified_attention_2d", grid=(h_kv, q_blocks_2d),
                                working_programs=h_kv * sum(cdiv(q, block_m // g) for q in w.query_lens),
                                constexprs={"BLOCK_M": block_m, "BLOCK_Q": block_m // g, "TILE_SIZE": tile}),)
        return LaunchPlan(
            system="aiter", kernels=kernels, splits=(1,) * B, nonempty_splits=(1,) * B, tokens_per_split=w.seq_lens,
            partial_state_bytes=0, partial_state_bytes_used=0, scratch_bytes=0, explain=ex.items(),
            details=AiterDetails(path="2D", release=RELEASE, source=SRC_RELEASE),
        )
    tile = w.block_size
    min_seg = 16 if tile <= 16 else 8
    S = ex.add("NUM_SEGMENTS", max(min(next_power_of_2(math.ceil(target / num_2d)), 128), min_seg),
               "max(min(np2(ceil(target_num_prgms / num_2d_prgms)), 128), 16 if TILE_SIZE <= 16 else 8)",
               f"{SRC_RELEASE} L56-69", target_num_prgms=target, num_2d_prgms=num_2d, TILE_SIZE=tile)
    return _plan_3d(w, ex, q_blocks, S, tile, release=RELEASE, source=SRC_RELEASE)


def length_key(w: Workload) -> LengthKey:
    """For the sweep: a uniform decode batch's launch depends on the length through its tile count and
    the 2D rule's length limit; the 3D split length is tiles_per_segment * TILE_SIZE."""
    tile = tile_size(w.block_size)

    def tokens_per_split(p: LaunchPlan, L: int) -> int:
        d = p.details
        if not isinstance(d, AiterDetails) or d.NUM_SEGMENTS is None or d.TILE_SIZE is None:  # the 2D path
            return L
        S, t = d.NUM_SEGMENTS, d.TILE_SIZE
        return min(cdiv(L, S * t) * t, L)
    return LengthKey(lambda L: (cdiv(L, tile), L <= MAX_SEQLEN_K_2D), tokens_per_split)
