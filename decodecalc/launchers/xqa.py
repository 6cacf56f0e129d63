"""FlashInfer's XQA decode kernels: how many sub-sequences (KV splits) each sequence gets, and the grid.

FlashInfer 0.7.2.post1 (``flashinfer/data/csrc/xqa``; the kernel sources are byte-identical in 0.7.2 and 0.7.4, the
Python wrappers differ only in docstrings). Two kernels, both named ``kernel_mha`` in a profiler:

- ``mha.cu`` (bf16 / fp16 KV cache; fp8 above head dim 256): ``launchMHAFlashInfer`` L3123-3129
  ``nbSubSeqPerSeq = min(max(1, SMs / (B * Hkv)), divUp(maxSeqLen, ctaTile.x))`` with ``ctaTile.x`` = 256 tokens
  (L100-102), integer division; grid ``(nbSubSeqPerSeq, Hkv, B)`` L3130-3135, 256 threads L3136. Sub-sequence ``i``
  reads the 256-token tiles ``i, i + n, i + 2n, ...`` of its request (L1797-1804); no CTA exits early: every one
  writes a partial and bumps its sequence's semaphore, and the last one merges all ``n`` partials in the kernel
  (L2701-2866). About 145 KB of shared memory at head dim 128: one CTA per SM on SM90.
- ``mha_sm90.cu`` (fp8 e4m3 KV cache on SM90, head dim <= 256): ``launchHopperF8MHAFlashInfer`` L3059-3065
  ``nbSubSeqPerSeq = min(max(1, round(floor(3 * SMs / (B * Hkv)) * 0.25)), divUp(maxSeqLen, 64))``; grid
  ``(1, nbSubSeqPerSeq, Hkv * B)`` L3072, 384 threads L3073. In the kernel a request of ``t`` 64-token tiles uses
  ``min(t, gridDim.y)`` sub-sequences when ``t >= 2``, else one; the other CTAs return at once (L707-724).

``maxSeqLen`` is not the batch's longest sequence: ``flashinfer/xqa.py`` L361-363 takes the block table's width times
the page size, and the engines pass the table at full width (``max_model_len``). ``SMs`` is the device's SM count
(``decode.py`` L4721). ``XQA_NB_SUB_SEQ`` is read only by the launchers FlashInfer does not call (``launchMHA``
L3020-3026, ``launchHopperF8MHA`` L2961-2967): it has no effect through FlashInfer, whatever its documentation says.
"""

from __future__ import annotations

import math

from decodecalc.derived import Explain, cdiv
from decodecalc.errors import UnsupportedError
from decodecalc.launchers.base import KernelKind, KernelLaunch, LaunchPlan
from decodecalc.launchers.details import XqaDetails
from decodecalc.launchers.guards import require_decode, require_not_mla, require_vendor
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

FI = "flashinfer-python 0.7.2.post1"
SRC_MHA = f"{FI} csrc/xqa/mha.cu"
SRC_SM90 = f"{FI} csrc/xqa/mha_sm90.cu"
SRC_PY = f"{FI} flashinfer/xqa.py"
SRC_JIT = f"{FI} flashinfer/jit/xqa.py"

CTA_TILE_TOKENS = 256  # mha.cu L100-102: ctaTile.x = warpTile.x (64) * ctaShapeInWarps.x (4)
GEMM0_CTA_TILE_TOKENS = 64  # mha_sm90.cu L68, L93-94: gemm0CtaTileNbTokens
MHA_THREADS = 256  # mha.cu L3136: dim3{32 * 4, 1, 2}
SM90_THREADS = 384  # mha_sm90.cu L3073: dim3{128, 1, 3}
PAGE_SIZES = (16, 32, 64, 128)  # jit/xqa.py L82-86
#: the largest query group one CTA holds (the persistent Q tile's 16 KiB, mha.cu L129-130; mha_sm90.cu L177-178 for
#: fp8), by padded head dim; both verified by compiling the wheel's sources for sm_90a
MAX_GROUP_MHA = {64: 128, 128: 64, 256: 32, 512: 16}
MAX_GROUP_SM90 = {64: 64, 128: 40, 256: 32}
#: XQA's JIT builds for SM 9.x, 10.x and 12.x (jit/xqa.py L139-142; xqa.py L402-403)
ARCH_MAJORS = (9, 10, 12)


def head_elems(head_dim: int) -> int:
    """The kernel's padded head size: 64, 128, 256 or 512 (mha.h L33-36)."""
    return next(e for e in (64, 128, 256, 512) if head_dim <= e)


def nb_sub_seq_mha(sm_count: int, batch: int, num_kv_heads: int, max_seq_len: int) -> int:
    """mha.cu L3123-3129 (``allowMultiBlockMode`` true: the JIT never clears it)."""
    return min(max(1, sm_count // (batch * num_kv_heads)), cdiv(max_seq_len, CTA_TILE_TOKENS))


def nb_sub_seq_sm90(sm_count: int, batch: int, num_kv_heads: int, max_seq_len: int) -> int:
    """mha_sm90.cu L3059-3065: floor(3 * SMs / (B * Hkv)) quarters, rounded half away from zero (C ``round``)."""
    quarters = (sm_count * 3) // (batch * num_kv_heads)
    return min(max(1, math.floor(quarters * 0.25 + 0.5)), cdiv(max_seq_len, GEMM0_CTA_TILE_TOKENS))


def uses_sm90_kernel(w: Workload, gpu: GPUSpec) -> bool:
    """xqa.py L386-393: ``run_sm90_fp8_mha`` = an fp8 e4m3 cache on SM 9.x with head dim <= 256."""
    cc = gpu.compute_capability or (0, 0)
    return w.kv_cache_dtype in ("fp8", "fp8_e4m3") and cc[0] == 9 and w.head_size <= 256


def unsupported_reason(w: Workload, gpu: GPUSpec) -> str | None:
    """Why FlashInfer's XQA cannot decode ``w`` on ``gpu`` (None: it can), from the JIT's checks and the kernels'
    compile-time limits."""
    cc = gpu.compute_capability
    if gpu.vendor != "nvidia" or cc is None or cc[0] not in ARCH_MAJORS:
        return f"XQA is built for SM 9.x, 10.x and 12.x only; {gpu.name} is {gpu.arch} ({SRC_JIT} L139-142)"
    if w.model.is_mla:
        return f"XQA's MLA kernel runs on SM 12.x only, with 128 query heads ({SRC_PY} L633-634)"
    if w.block_size not in PAGE_SIZES:
        return (f"XQA is compiled for page sizes {', '.join(map(str, PAGE_SIZES))}; block size {w.block_size} "
                f"({SRC_JIT} L82-86)")
    d = w.head_size
    if d % 16 or not 16 <= d <= 512 or w.head_size_v != d:
        return f"XQA needs a head dim that is a multiple of 16 in 16-512 (K and V alike); got {d} ({SRC_JIT} L88-91)"
    if w.kv_cache_dtype == "fp8_e5m2":
        return f"XQA reads bf16, fp16, int8 or fp8 e4m3 caches; not fp8_e5m2 ({SRC_JIT} L73-80)"
    g, e = w.group_size, head_elems(d)
    if d > 256 and g > 16:
        return f"XQA above head dim 256 takes at most 16 query heads per KV head; got {g} ({SRC_JIT} L92-103)"
    limits, src = (MAX_GROUP_SM90, f"{SRC_SM90} L177-178") if uses_sm90_kernel(w, gpu) else (
        MAX_GROUP_MHA, f"{SRC_MHA} L129-130")
    if g > limits.get(e, 0):
        return f"XQA holds at most {limits.get(e, 0)} query heads per KV head at head dim {e}; got {g} ({src})"
    return None


def default_max_seq_len(w: Workload, max_model_len: int | None) -> int:
    """The block table's width in tokens as the engines size it: ``max_model_len`` (the model's context length when
    not given), never less than the batch's longest sequence."""
    width = max_model_len or w.model.context_length or w.max_seqlen_k
    return max(width, w.max_seqlen_k)


def plan_xqa(w: Workload, gpu: GPUSpec, *, max_seq_len: int | None = None, max_model_len: int | None = None,
             sm_count: int | None = None, kernel: str | None = None, check_platform: bool = True) -> LaunchPlan:
    """The XQA launch of one decode step as FlashInfer's ``xqa_batch_decode_with_kv_cache`` makes it.

    ``max_seq_len``: the block table's width times the page size (default :func:`default_max_seq_len` of
    ``max_model_len``); ``sm_count``: the SM count passed to the launcher (default the GPU's: a smaller or larger
    one is how decodecalc times another engine's split count on FlashInfer's kernel); ``kernel``: "mha" or "sm90"
    to refuse a workload the other kernel runs (None: whichever runs it)."""
    system = "FlashInfer XQA"
    require_vendor(gpu, "nvidia", system, check_platform)
    require_not_mla(w, system)
    require_decode(w, system)
    why = unsupported_reason(w, gpu)
    if why:
        raise UnsupportedError(f"{system}: {why}")
    ex = Explain()
    B, h_kv, g = w.batch, w.num_kv_heads, w.group_size
    sms = sm_count or gpu.num_sms
    width = max_seq_len if max_seq_len is not None else default_max_seq_len(w, max_model_len)
    if width < w.max_seqlen_k:
        raise UnsupportedError(f"{system}: a block table of {width:,} tokens cannot hold a sequence of "
                               f"{w.max_seqlen_k:,}")
    ex.add("maxSeqLen", width, "page_table.shape[-1] * page_size: the block table's width, which the engines size for "
           "max_model_len (the model's context length when not given)", f"{SRC_PY} L361-363",
           max_model_len=max_model_len or w.model.context_length, page_size=w.block_size, unit="tokens")
    sm90 = uses_sm90_kernel(w, gpu)
    if kernel is not None and kernel != ("sm90" if sm90 else "mha"):
        runs = "mha_sm90.cu (fp8 e4m3 KV, SM90, head dim <= 256)" if sm90 else "mha.cu"
        raise UnsupportedError(f"{system}: this workload runs {runs} ({SRC_PY} L386-393); use "
                               f"{'xqa-fp8' if sm90 else 'xqa'}")
    scratch_rows = cdiv(g, 16) * 16
    if sm90:
        n = ex.add("nbSubSeqPerSeq", nb_sub_seq_sm90(sms, B, h_kv, width),
                   "min(max(1, round(floor(SMs * 3 / (B * Hkv)) * 0.25)), ceil(maxSeqLen / 64))",
                   f"{SRC_SM90} L3059-3065", SMs=sms, B=B, Hkv=h_kv, maxSeqLen=width)
        tiles = [cdiv(L, GEMM0_CTA_TILE_TOKENS) for L in w.seq_lens]
        splits = tuple(min(t, n) if n > 1 and t >= 2 else 1 for t in tiles)
        ex.add("splits", splits, "min(tiles, gridDim.y) if gridDim.y > 1 and tiles >= 2 else 1, tiles = "
               "ceil(seq_len / 64); the other CTAs return at once", f"{SRC_SM90} L707-724")
        grid = (1, n, h_kv * B)
        working = sum(splits) * h_kv
        nonempty = splits
        tps = tuple(cdiv(t, s) * GEMM0_CTA_TILE_TOKENS for t, s in zip(tiles, splits))
        main = KernelLaunch(name="kernel_mha", grid=grid, working_programs=working, kind=KernelKind.XQA_MHA_SM90,
                            constexprs={"threads": SM90_THREADS, "tile_tokens": GEMM0_CTA_TILE_TOKENS,
                                        "nbSubSeqPerSeq": n})
        row_bytes = g * (w.head_size * w.q_bytes + 8)  # mha_sm90.cu L492-527: G x (head_dim x 2 B + sum, max)
        used = sum(s for s in splits if s > 1) * h_kv * row_bytes
    else:
        n = ex.add("nbSubSeqPerSeq", nb_sub_seq_mha(sms, B, h_kv, width),
                   "min(max(1, SMs // (B * Hkv)), ceil(maxSeqLen / 256))", f"{SRC_MHA} L3123-3129",
                   SMs=sms, B=B, Hkv=h_kv, maxSeqLen=width)
        tiles = [cdiv(L, CTA_TILE_TOKENS) for L in w.seq_lens]
        splits = (n,) * B
        nonempty = tuple(min(t, n) for t in tiles)
        grid = (n, h_kv, B)
        working = B * n * h_kv  # no CTA exits early (mha.cu L2615): each runs and writes its partial
        tps = tuple(cdiv(t, n) * CTA_TILE_TOKENS for t in tiles)
        main = KernelLaunch(name="kernel_mha", grid=grid, working_programs=working, kind=KernelKind.XQA_MHA,
                            constexprs={"threads": MHA_THREADS, "tile_tokens": CTA_TILE_TOKENS,
                                        "nbSubSeqPerSeq": n})
        # mha.cu L2701-2722: per (split, KV head, request) two row-max/row-sum blocks and the partial output tile
        row_bytes = 2 * cdiv(scratch_rows, 32) * 32 * 4 + scratch_rows * head_elems(w.head_size) * 2
        used = (B * n * h_kv * row_bytes) if n > 1 else 0
    ex.add("grid", grid, "(1, nbSubSeqPerSeq, Hkv * B)" if sm90 else "(nbSubSeqPerSeq, Hkv, B)",
           f"{SRC_SM90} L3072" if sm90 else f"{SRC_MHA} L3130-3135")
    allocated = (max(splits) * B * h_kv * row_bytes) if max(splits) > 1 else 0
    return LaunchPlan(
        system="xqa-fp8" if sm90 else "xqa", kernels=(main,), splits=splits, nonempty_splits=nonempty,
        tokens_per_split=tps, partial_state_bytes=allocated, partial_state_bytes_used=used,
        scratch_bytes=allocated, explain=ex.items(),
        details=XqaDetails(kernel="mha_sm90.cu" if sm90 else "mha.cu", nbSubSeqPerSeq=n, maxSeqLen=width,
                           sm_count=sms, tile_tokens=GEMM0_CTA_TILE_TOKENS if sm90 else CTA_TILE_TOKENS,
                           in_kernel_merge=True, strided_tile_tokens=GEMM0_CTA_TILE_TOKENS if sm90 else CTA_TILE_TOKENS,
                           source=SRC_SM90 if sm90 else SRC_MHA),
    )


__all__ = ["CTA_TILE_TOKENS", "GEMM0_CTA_TILE_TOKENS", "default_max_seq_len", "nb_sub_seq_mha", "nb_sub_seq_sm90",
           "plan_xqa", "unsupported_reason", "uses_sm90_kernel"]
