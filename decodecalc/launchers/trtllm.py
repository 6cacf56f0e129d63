"""TensorRT-LLM's generation attention: XQA with its multi-block count, and masked MHA (MMHA) with its multi-block grid.

NVIDIA/TensorRT-LLM at b35ac1b6 (``tensorrt_llm/version.py``: 1.2.0rc2), ``cpp/tensorrt_llm/kernels/
decoderMaskedMultiheadAttention/``:

- ``decoderXQAImplCommon.h`` L357-392 ``computeMultiBlockCount``: ``TRTLLM_XQA_BLOCKS_PER_SEQUENCE`` (> 0) returns
  as is; else ``m = hist // 128``, ``m = max(1, min(m, round(sqrt(8 m))))``, past 8 waves
  (``B * Hkv * m / SMs / 8 > 1``) ``m = floor(m / that)``, then ``max(1, min(m, 6000 // B))``; ``hist`` is the
  batch's longest KV length, ``B`` the requests. Constants in ``decoderXQAConstants.h`` L26 (128 history tokens per
  block), L29 (target wave factor 8), L35-40 (6000 sub-sequences, 500 for MLA).
- L399-482 ``computeMultiBlockCountSpecDecGMMA`` (speculative decoding on the Hopper fp8 kernel): 1 past 32 requests
  or below 2,048 tokens; else the largest power of two of ``SMs // (specDecBlocks * Hkv * B)``, at most 64, cut for
  short histories.
- ``decoderXQAImplJIT/decoderXQAImplJIT.cpp`` L509-525: the grid ``(m, Hkv, B)`` with 256 threads for ``mha.cu``,
  ``(specDecBlocks, m, Hkv * B)`` with 384 for ``mha_sm90.cu`` (the Hopper kernel runs only an fp8 e4m3 cache:
  ``kernelUtils.cpp`` L84-120); L74-97 ``mayHavePerfGain``: XQA only when
  ``Hkv * B * max(1, hist // 128) * 4 >= SMs`` (``kEnableMinBlockFactor`` 4.0), else MMHA.
- ``kernelUtils.cpp`` L33-171: no XQA for plain MHA (as many KV heads as query heads), head sizes off 16-256 or not a
  multiple of 16, more than 32 query heads per KV head, pages outside 16-128.
- ``decoderMaskedMultiheadAttentionLaunch.h`` L99-149 ``multi_block_grid_setup`` and L256-345: MMHA's grid
  ``(Hq, B, seq_len_tile)``, ``seq_len_tile = clamp(ceil(SMs * occ / (B * Hq)), min_tiles, min(max_tiles,
  ceil((t + 1) / (8 * ceil(block / threads_per_value)))))`` with ``max_tiles = ceil(SMs / (B * Hq))``
  (``attentionOp.cpp`` ``getMaxNumSeqLenTile``); ``TRTLLM_MMHA_BLOCKS_PER_SEQUENCE`` counts only with
  ``TRTLLM_ENABLE_MMHA_MULTI_BLOCK_DEBUG=1``.

The kernel XQA runs is the one FlashInfer ships (``csrc/xqa/mha.cu``): decodecalc times TensorRT-LLM's split on it
by passing ``m * B * Hkv`` as the SM count to FlashInfer's launcher (``launchers.xqa.plan_xqa(sm_count=...)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from decodecalc.derived import Explain, cdiv, next_power_of_2
from decodecalc.errors import ConfigError, UnsupportedError
from decodecalc.launchers import xqa
from decodecalc.launchers.base import KernelKind, KernelLaunch, LaunchPlan
from decodecalc.launchers.details import MmhaDetails, TrtllmXqaDetails
from decodecalc.launchers.guards import layer_window, require_not_mla, require_vendor
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

TRTLLM = "NVIDIA/TensorRT-LLM@b35ac1b6 (1.2.0rc2)"
_DIR = "cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention"
SRC_COMMON = f"{TRTLLM} {_DIR}/decoderXQAImplCommon.h"
SRC_CONST = f"{TRTLLM} {_DIR}/decoderXQAConstants.h"
SRC_JIT = f"{TRTLLM} {_DIR}/decoderXQAImplJIT/decoderXQAImplJIT.cpp"
SRC_KU = f"{TRTLLM} {_DIR}/decoderXQAImplJIT/kernelUtils.cpp"
SRC_MMHA = f"{TRTLLM} {_DIR}/decoderMaskedMultiheadAttentionLaunch.h"
SRC_AOP = f"{TRTLLM} cpp/tensorrt_llm/common/attentionOp.cpp"

kMinHistoryTokensPerBlock = 128  # decoderXQAConstants.h L26
kEnableMinBlockFactor = 4.0  # L28
kTargetWaveFactor = 8  # L29
XQA_MAX_NUM_SUB_SEQ = 6000  # L35-40 getXqaMaxNumSubSeq (500 for MLA)
MMHA_THREADS = 256  # decoderMaskedMultiheadAttentionLaunch.h L402, L408: THDS_PER_BLOCK
#: cudaDevAttrMaxSharedMemoryPerBlockOptin by compute capability major.minor (the CUDA programming guide's table):
#: estimate_min_multi_block_count's budget
SHARED_MEMORY_OPTIN = {(8, 0): 166_912, (8, 6): 101_376, (8, 9): 101_376, (9, 0): 232_448, (10, 0): 232_448,
                       (12, 0): 101_376}


@dataclass(frozen=True, slots=True, kw_only=True)
class TrtllmSettings:
    """The TensorRT-LLM knobs that decide decode attention's launch."""

    multi_block_mode: bool = True  # on by default since 0.13.0 (release notes); the PyTorch backend's default too
    xqa_blocks_per_sequence: int | None = None  # TRTLLM_XQA_BLOCKS_PER_SEQUENCE
    mmha_blocks_per_sequence: int | None = None  # TRTLLM_MMHA_BLOCKS_PER_SEQUENCE (with ..._MULTI_BLOCK_DEBUG=1)
    force_xqa: bool = False  # TRTLLM_FORCE_XQA: skips mayHavePerfGain, not the support checks
    enable_xqa: bool = True  # enable_xqa (the PyTorch backend's default)

    def __post_init__(self) -> None:
        for name in ("xqa_blocks_per_sequence", "mmha_blocks_per_sequence"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ConfigError(f"TensorRT-LLM {name} must be a whole number >= 1, got {v!r}")


def compute_multi_block_count(*, batch_size: int, num_kv_heads: int, history_length: int, multiprocessor_count: int,
                              env_blocks: int | None = None, mla: bool = False) -> int:
    """decoderXQAImplCommon.h L357-392, step by step (the doubles in the source's order)."""
    if env_blocks is not None and env_blocks > 0:
        return env_blocks
    max_sub = 500 if mla else XQA_MAX_NUM_SUB_SEQ
    m = history_length // kMinHistoryTokensPerBlock
    m = min(m, round(math.sqrt(m * 8.0)))  # float sqrt then std::round; an integer m never ties
    m = max(m, 1)
    wave_count = float(batch_size) * num_kv_heads * m / float(multiprocessor_count)
    adj = wave_count / float(kTargetWaveFactor)
    if adj > 1.0:
        m = int(m / adj)
    m = max(m, 1)
    return max(min(m, max_sub // batch_size), 1)


def compute_multi_block_count_spec_dec_gmma(*, batch_size: int, num_kv_heads: int, history_length: int,
                                            multiprocessor_count: int, spec_dec_blocks: int,
                                            env_blocks: int | None = None) -> int:
    """decoderXQAImplCommon.h L399-482 (Hopper fp8 kernel under speculative decoding)."""
    if env_blocks is not None and env_blocks > 0:
        return env_blocks
    if batch_size > 32 or history_length < 2048:
        return 1
    single = spec_dec_blocks * num_kv_heads * batch_size
    if single / float(multiprocessor_count) >= 1:
        return 1
    m = multiprocessor_count // single
    m = 1 << (m.bit_length() - 1) if m > 0 else 0  # highestPowerOf2
    m = min(max(m, 1), 64)
    if single <= 8 and m >= 16 and history_length < 65536:
        if history_length < 2048:
            m = min(m, 4)
        elif single == 8 and history_length <= 8192:
            m >>= 1
        else:
            m >>= 3 - (int(math.log2(history_length)) - 10) // 2
    return m


def xqa_unsupported_reason(w: Workload, gpu: GPUSpec) -> str | None:
    """Why TensorRT-LLM's XQA does not serve ``w`` (kernelUtils.cpp supportConfigCommon / HMMA / QGMMA)."""
    cc = gpu.compute_capability or (0, 0)
    if cc < (8, 0):
        return f"XQA needs SM 8.0 or newer ({SRC_KU} L122-171)"
    if w.num_heads == w.num_kv_heads and w.max_seqlen_q == 1:
        return f"plain MHA (as many KV heads as query heads) never runs XQA ({SRC_KU} L55-66)"
    d = w.head_size
    if d % 16 or not 16 <= d <= 256:
        return f"XQA needs a head size that is a multiple of 16 in 16-256; got {d} ({SRC_KU} L122-171)"
    if w.group_size > 32:
        return f"XQA takes at most 32 query heads per KV head; got {w.group_size} ({SRC_KU} L122-171)"
    if w.block_size not in (16, 32, 64, 128):
        return f"XQA's paged cache takes 16-128 tokens per block; got {w.block_size} ({SRC_KU} L122-171)"
    return None


def uses_gmma_kernel(w: Workload, gpu: GPUSpec) -> bool:
    """kernelUtils.cpp L84-120 supportConfigQGMMA: SM 9.0 exactly with an fp8 e4m3 cache."""
    return gpu.compute_capability == (9, 0) and w.kv_cache_dtype in ("fp8", "fp8_e4m3")


def multi_block_allowed(w: Workload, gpu: GPUSpec, settings: TrtllmSettings) -> bool:
    """attentionOp.cpp convertMMHAParamsToXQAParams: multi-block off for an int8 cache, or fp8 below SM90 / from
    SM120."""
    cc = gpu.compute_capability or (0, 0)
    if w.kv_cache_dtype.startswith("fp8") and (cc < (9, 0) or cc >= (12, 0)):
        return False
    return settings.multi_block_mode


def xqa_may_have_perf_gain(w: Workload, gpu: GPUSpec, settings: TrtllmSettings) -> bool:
    """decoderXQAImplJIT.cpp L74-97: ``block_count * 4.0 >= SMs`` with the un-reduced ``max(1, hist // 128)``."""
    if settings.force_xqa or w.max_seqlen_q > 1:
        return True
    mbc = max(1, w.max_seqlen_k // kMinHistoryTokensPerBlock) if multi_block_allowed(w, gpu, settings) else 1
    return w.num_kv_heads * w.batch * mbc * kEnableMinBlockFactor >= gpu.num_sms


def uses_xqa(w: Workload, gpu: GPUSpec, settings: TrtllmSettings) -> tuple[bool, str]:
    """Whether TensorRT-LLM's generation step runs XQA (else MMHA), and why (attentionOp.cpp enqueueGeneration)."""
    if not settings.enable_xqa:
        return False, "enable_xqa is off"
    why = xqa_unsupported_reason(w, gpu)
    if why:
        return False, why
    if not xqa_may_have_perf_gain(w, gpu, settings):
        mbc = max(1, w.max_seqlen_k // kMinHistoryTokensPerBlock)
        return False, (f"Hkv * B * max(1, hist // 128) * 4 = {w.num_kv_heads * w.batch * mbc * 4} < {gpu.num_sms} SMs "
                       "(mayHavePerfGain)")
    return True, "XQA supports the layout and Hkv * B * max(1, hist // 128) * 4 >= SMs (mayHavePerfGain)"


def _check(w: Workload, gpu: GPUSpec, system: str) -> None:
    require_vendor(gpu, "nvidia", system, True)
    require_not_mla(w, system)
    cc = gpu.compute_capability or (0, 0)
    if cc[0] == 10:
        raise UnsupportedError(f"{system}: on SM 10.x TensorRT-LLM decodes with trtllm-gen "
                               f"({TRTLLM} cpp/tensorrt_llm/kernels/xqaDispatcher.cpp)")


def plan_trtllm_xqa(w: Workload, gpu: GPUSpec, *, settings: TrtllmSettings | None = None) -> LaunchPlan:
    """TensorRT-LLM's XQA launch for one generation step (multi-block count and grid)."""
    settings = settings or TrtllmSettings()
    system = "TensorRT-LLM XQA"
    _check(w, gpu, system)
    why = xqa_unsupported_reason(w, gpu)
    if why:
        raise UnsupportedError(f"{system}: {why}")
    ex = Explain()
    B, h_kv = w.batch, w.num_kv_heads
    hist = w.max_seqlen_k
    gmma = uses_gmma_kernel(w, gpu)
    spec_blocks = cdiv(w.max_seqlen_q, max(1, 64 // w.group_size)) if w.max_seqlen_q > 1 else 1
    if not multi_block_allowed(w, gpu, settings):
        m = ex.add("multi_block", 1, "1 (multi_block_mode off, or an fp8 cache outside SM 9.x-11.x)",
                   f"{SRC_AOP} convertMMHAParamsToXQAParams")
    elif gmma and w.max_seqlen_q > 1:
        m = ex.add("multi_block", compute_multi_block_count_spec_dec_gmma(
            batch_size=B, num_kv_heads=h_kv, history_length=hist, multiprocessor_count=gpu.num_sms,
            spec_dec_blocks=spec_blocks, env_blocks=settings.xqa_blocks_per_sequence),
            "TRTLLM_XQA_BLOCKS_PER_SEQUENCE if set, else 1 past 32 requests (B) or below 2,048 tokens (hist); else "
            "pow2(SMs // (specDecBlocks * Hkv * B)), at most 64, cut for short histories", f"{SRC_COMMON} L399-482",
            B=B, Hkv=h_kv, hist=hist, SMs=gpu.num_sms, specDecBlocks=spec_blocks,
            TRTLLM_XQA_BLOCKS_PER_SEQUENCE=settings.xqa_blocks_per_sequence)
    else:
        m = ex.add("multi_block", compute_multi_block_count(
            batch_size=B, num_kv_heads=h_kv, history_length=hist, multiprocessor_count=gpu.num_sms,
            env_blocks=settings.xqa_blocks_per_sequence),
            "TRTLLM_XQA_BLOCKS_PER_SEQUENCE if set, else m = hist // 128; m = max(1, min(m, round(sqrt(8 m)))); "
            "m = floor(m / (B * Hkv * m / SMs / 8)) past 8 waves; max(1, min(m, 6000 // B))", f"{SRC_COMMON} L357-392; {SRC_CONST} L26-40",
            B=B, Hkv=h_kv, hist=hist, SMs=gpu.num_sms, TRTLLM_XQA_BLOCKS_PER_SEQUENCE=settings.xqa_blocks_per_sequence)
    if gmma:
        grid = (spec_blocks, m, h_kv * B)
        tile, threads, kind = xqa.GEMM0_CTA_TILE_TOKENS, xqa.SM90_THREADS, KernelKind.XQA_MHA_SM90
        tiles = [cdiv(L, tile) for L in w.seq_lens]
        splits = tuple(min(t, m) if m > 1 and t >= 2 else 1 for t in tiles)
        working = sum(splits) * h_kv * spec_blocks
    else:
        grid = (m, h_kv, B)
        tile, threads, kind = xqa.CTA_TILE_TOKENS, xqa.MHA_THREADS, KernelKind.XQA_MHA
        tiles = [cdiv(L, tile) for L in w.seq_lens]
        splits = (m,) * B
        working = B * m * h_kv
    ex.add("grid", grid, "(specDecBlocks, multi_block, Hkv * B)" if gmma else "(multi_block, Hkv, B)",
           f"{SRC_JIT} L523-525")
    rows = cdiv(w.group_size, 16) * 16
    row_bytes = 2 * cdiv(rows, 32) * 32 * 4 + rows * xqa.head_elems(w.head_size) * 2
    scratch = XQA_MAX_NUM_SUB_SEQ * h_kv * row_bytes  # the dispatcher's workspace is sized for 6000 sub-sequences
    used = B * m * h_kv * row_bytes if m > 1 else 0
    return LaunchPlan(
        system="trtllm-xqa", kernels=(KernelLaunch(name="kernel_mha", grid=grid, working_programs=working, kind=kind,
                                                   constexprs={"threads": threads, "tile_tokens": tile,
                                                               "nbSubSeqPerSeq": m}),),
        splits=splits, nonempty_splits=tuple(min(t, s) for t, s in zip(tiles, splits)),
        tokens_per_split=tuple(cdiv(t, s) * tile for t, s in zip(tiles, splits)), partial_state_bytes=used,
        partial_state_bytes_used=used, scratch_bytes=scratch, explain=ex.items(),
        details=TrtllmXqaDetails(multi_block=m, kernel="mha_sm90.cu" if gmma else "mha.cu", history_length=hist,
                                 xqa_sm_count=m * B * h_kv, in_kernel_merge=True, strided_tile_tokens=tile,
                                 source=SRC_COMMON),
    )


def estimate_min_multi_block_count(max_timesteps: int, smem_optin: int, elem_bytes: int = 2) -> int:
    """decoderMaskedMultiheadAttention.h estimate_min_multi_block_count: how many blocks the softmax buffer of the
    whole history needs in shared memory (24 bytes per 4 timesteps for fp16 / bf16)."""
    qk_elts = cdiv(max_timesteps + 1, 4)
    size_per_elts = 16 + (4 * elem_bytes if elem_bytes != 4 else 0)
    elts_per_block = (smem_optin - 2048) // size_per_elts
    return max(1, cdiv(qk_elts, elts_per_block))


def plan_trtllm_mmha(w: Workload, gpu: GPUSpec, *, settings: TrtllmSettings | None = None,
                     block_size: int = MMHA_THREADS, layer: str = "auto") -> LaunchPlan:
    """TensorRT-LLM's masked MHA launch for one generation step. ``block_size``: the threads per block the occupancy
    tuning picks (256, 512 or 1024: it needs the compiled kernel's registers; decodecalc takes the base 256)."""
    settings = settings or TrtllmSettings()
    system = "TensorRT-LLM masked MHA"
    _check(w, gpu, system)
    if w.max_seqlen_q > 1:
        raise UnsupportedError(f"{system}: one query token per request (speculative decoding runs XQA or errors, "
                               f"{SRC_AOP} enqueueGeneration)")
    if block_size not in (256, 512, 1024):
        raise ConfigError(f"{system}: block size {block_size}; valid: 256, 512, 1024")
    ex = Explain()
    B, H, d = w.batch, w.num_heads, w.head_size
    t = w.max_seqlen_k - 1  # params.timestep: the past KV length (the current token is t + 1)
    window = layer_window(w, layer)
    max_timesteps = min(t, window) if window else t
    optin = SHARED_MEMORY_OPTIN.get(gpu.compute_capability or (0, 0), 101_376)
    est_min = ex.add("estimated_min_multi_block_count", estimate_min_multi_block_count(max_timesteps, optin),
                     "max(1, ceil(ceil((max_timesteps + 1) / 4) / ((smem_optin - 2048) / 24)))",
                     f"{TRTLLM} {_DIR}/decoderMaskedMultiheadAttention.h", max_timesteps=max_timesteps,
                     smem_optin=optin)
    multi = settings.multi_block_mode
    if multi and settings.mmha_blocks_per_sequence:
        max_tiles = max(64, settings.mmha_blocks_per_sequence)
    else:
        max_tiles = cdiv(gpu.num_sms, B * H) if multi else 0
    max_tiles = max(max_tiles, est_min)
    min_tiles = max(1, est_min)
    enabled = (multi and max_tiles > 1) or est_min > 1
    if not enabled:
        tiles = 1
        ex.add("seq_len_tile", 1, "multi-block off: (multi_block_mode and max_tiles > 1) or est_min > 1 is false",
               f"{SRC_AOP} enqueueGeneration")
    else:
        tpv = next_power_of_2(max(d, 32)) * 2 // 16
        per_loop = cdiv(block_size, tpv) * 8
        balanced = cdiv(gpu.num_sms, B * H)  # SMs * occupancy / (B * Hq) at occupancy 1: the clamp's upper end decides
        if settings.mmha_blocks_per_sequence:
            balanced, top = settings.mmha_blocks_per_sequence, max_tiles
        else:
            top = min(cdiv(t + 1, per_loop), max_tiles)
        tiles = ex.add("seq_len_tile", min(max(balanced, min_tiles), max(top, min_tiles)),
                       "clamp(ceil(SMs * occ / (B * Hq)), min_tiles, min(max_tiles, ceil((t + 1) / (8 * "
                       "ceil(block / threads_per_value)))))", f"{SRC_MMHA} L99-149", SMs=gpu.num_sms, B=B, Hq=H,
                       max_tiles=max_tiles, min_tiles=min_tiles, t=t, block=block_size, threads_per_value=tpv)
    grid = (H, B, tiles)
    ex.add("grid", grid, "(Hq, B * beam, seq_len_tile)", f"{SRC_MMHA} L259, L306")
    per_block = cdiv(max_timesteps + 1, tiles)
    nonempty = tuple(min(tiles, cdiv(L, per_block)) for L in w.seq_lens)
    scratch = (B * H * d * w.q_bytes + 8 * B * H) * max_tiles if enabled else 0
    return LaunchPlan(
        system="trtllm-mmha", kernels=(KernelLaunch(name="masked_multihead_attention_kernel", grid=grid,
                                                    working_programs=sum(nonempty) * H, kind=KernelKind.MMHA,
                                                    constexprs={"threads": block_size, "timesteps_per_block": per_block}),),
        splits=(tiles,) * B, nonempty_splits=nonempty, tokens_per_split=(min(per_block, max(w.seq_lens)),) * B,
        partial_state_bytes=scratch, partial_state_bytes_used=sum(nonempty) * H * (d * w.q_bytes + 8) if tiles > 1 else 0,
        scratch_bytes=scratch, explain=ex.items(),
        details=MmhaDetails(seq_len_tile=tiles, multi_block=enabled, block_size=block_size,
                            timesteps_per_block=per_block, source=SRC_MMHA),
    )


def plan_trtllm(w: Workload, gpu: GPUSpec, *, settings: TrtllmSettings | None = None) -> LaunchPlan:
    """What TensorRT-LLM launches: XQA where it is supported and may gain, else masked MHA."""
    settings = settings or TrtllmSettings()
    use, _ = uses_xqa(w, gpu, settings)
    return plan_trtllm_xqa(w, gpu, settings=settings) if use else plan_trtllm_mmha(w, gpu, settings=settings)


__all__ = ["TrtllmSettings", "compute_multi_block_count", "compute_multi_block_count_spec_dec_gmma",
           "estimate_min_multi_block_count", "plan_trtllm", "plan_trtllm_mmha", "plan_trtllm_xqa", "uses_xqa"]
