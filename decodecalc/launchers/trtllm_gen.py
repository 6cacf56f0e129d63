"""FlashInfer's trtllm-gen decode on SM100 (``trtllm_batch_decode_with_kv_cache``): the multi-CTA KV split.

FlashInfer 0.7.2.post1, ``include/flashinfer/trtllm/fmha/fmhaKernels.cuh`` ``computeCtaAndClusterConfig`` L574-793:

- the generation kernel groups the query heads of a KV head: the query tile ``stepQ`` is 8, 16, 32, 64 or 128 rows for
  ``n = G * q_len`` up to 8, 16, 32, 64 and above (``selectGqGenerationKernel`` L1173-1219; up to 32 rows the
  kernel swaps its MMA operands, ``SwapsMmaAbForGeneration``); a CTA holds ``min(G, stepQ)`` heads (L600-601);
- base grid ``X = ceil(q_len / max(1, stepQ // G))``, ``Y = Hq / headsPerCta``, ``Z = B`` (L584-614);
- ``numCtasPerSeqKv = min(ceil(maxSeqLenKv / (2 * stepKv)), max(1, SMs // (X * Y * Z)))`` (L652-686), with
  ``maxSeqLenKv`` the ``max_seq_len`` argument the engine passes (``trtllm_fmha_kernel_launcher.cu`` L225);
- new in 0.7.2.post1 (absent from 0.7.2): above 16 it is clamped to 16 when the kernel swaps its MMA operands, the
  V head is under 512 (and not 256 with several query tokens) and ``ceil(maxSeqLenKv / 16) <= 4096`` (L687-701);
- one split turns multi-CTA mode off (persistent scheduler, L707-712); 2-16 splits reduce through a CGA cluster
  of that many CTAs (L730-762); the grid is ``(X * numCtasPerSeqKv, Y, Z)``.

``stepKv`` comes from the cubins' metadata (downloaded at run time, not in the wheel); ``fmhaReduction.cu``
L154-155 says the KV tile "is always 128 for now", and decodecalc takes 128. Not verified on a GPU: the cubins
run on SM100 only.
"""

from __future__ import annotations

from decodecalc.derived import Explain, cdiv
from decodecalc.errors import ConfigError, UnsupportedError
from decodecalc.launchers.base import KernelKind, KernelLaunch, LaunchPlan
from decodecalc.launchers.details import TrtllmGenDetails
from decodecalc.launchers.guards import require_not_mla, require_vendor
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

SRC = "flashinfer-python 0.7.2.post1 include/flashinfer/trtllm/fmha/fmhaKernels.cuh"
STEP_KV = 128  # fmhaReduction.cu L154-155: "TileSizeKv is always 128 for now" (cubin metadata not in the wheel)
CLAMP_SPLITS = 16  # L687-701
#: the FlashInfer releases whose rule has the 16-split clamp (0.7.2.post1 on)
FLASHINFER_VERSIONS = ("0.7.2", "0.7.2.post1", "0.7.4")
CLAMP_FROM = "0.7.2.post1"


def step_q(rows: int) -> int:
    """The generation kernel's query tile for ``rows = G * q_len`` (L1173-1219)."""
    return next((t for t in (8, 16, 32, 64) if rows <= t), 128)


def num_ctas_per_seq_kv(*, max_seq_len: int, sm_count: int, base_ctas: int, rows: int, head_dim_v: int, q_len: int,
                        flashinfer_version: str = CLAMP_FROM) -> int:
    """L652-701: the KV split count of one request (``base_ctas`` = X * Y * Z)."""
    if flashinfer_version not in FLASHINFER_VERSIONS:
        raise ConfigError(f"FlashInfer version {flashinfer_version!r} is not modeled; known: "
                          f"{', '.join(FLASHINFER_VERSIONS)}")
    n = min(cdiv(max_seq_len, 2 * STEP_KV), max(1, sm_count // base_ctas))
    swaps_mma_ab = rows <= 32
    if n > CLAMP_SPLITS and flashinfer_version != "0.7.2" and swaps_mma_ab and head_dim_v < 512 and \
            (q_len == 1 or head_dim_v != 256) and cdiv(max_seq_len, 16) <= 4096:
        n = CLAMP_SPLITS
    return n


def plan_trtllm_gen(w: Workload, gpu: GPUSpec, *, max_seq_len: int, flashinfer_version: str = CLAMP_FROM,
                    check_platform: bool = True) -> LaunchPlan:
    """trtllm-gen's decode launch (``max_seq_len``: what the engine passes as the longest KV length)."""
    system = "FlashInfer trtllm-gen decode"
    require_vendor(gpu, "nvidia", system, check_platform)
    require_not_mla(w, system)
    cc = gpu.compute_capability or (0, 0)
    if check_platform and cc[0] != 10:
        raise UnsupportedError(f"{system} runs its SM100 cubins on SM 10.x only; {gpu.name} is {gpu.arch} "
                               "(flashinfer decode.py L4133-4136 picks XQA elsewhere)")
    if max_seq_len < w.max_seqlen_k:
        raise UnsupportedError(f"{system}: max_seq_len {max_seq_len:,} is below the batch's longest sequence "
                               f"({w.max_seqlen_k:,})")
    ex = Explain()
    q = w.max_seqlen_q
    g = w.group_size
    rows = g * q
    sq = ex.add("stepQ", step_q(rows), "8 / 16 / 32 / 64 / 128 for G * q_len up to 8 / 16 / 32 / 64 / more",
                f"{SRC} L1173-1219", G=g, q_len=q)
    heads_per_cta = min(g, sq)
    x = cdiv(q, max(1, sq // g))
    y = w.num_heads // heads_per_cta
    base = ex.add("base_ctas", x * y * w.batch, "X * Y * Z with X = ceil(q_len / max(1, stepQ // G)), "
                  "Y = Hq / min(G, stepQ), Z = B", f"{SRC} L584-614", X=x, Y=y, Z=w.batch)
    n = ex.add("numCtasPerSeqKv",
               num_ctas_per_seq_kv(max_seq_len=max_seq_len, sm_count=gpu.num_sms, base_ctas=base, rows=rows,
                                   head_dim_v=w.head_size_v, q_len=q, flashinfer_version=flashinfer_version),
               "min(ceil(max_seq_len / (2 * stepKv)), max(1, SMs // base_ctas)), clamped to 16 (0.7.2.post1 on) "
               "when the kernel swaps its MMA operands and ceil(max_seq_len / 16) <= 4096",
               f"{SRC} L652-701", max_seq_len=max_seq_len, stepKv=STEP_KV, SMs=gpu.num_sms,
               flashinfer_version=flashinfer_version)
    grid = (x * n, y, w.batch)
    mode = "disabled" if n <= 1 else ("CgaSmemReduction" if rows <= 32 and w.head_size_v < 512 else "GmemReduction")
    kv_tiles = [cdiv(L, STEP_KV) for L in w.seq_lens]
    nonempty = tuple(min(t, n) for t in kv_tiles)
    main = KernelLaunch(name="fmhaSm100Kernel (trtllm-gen generation cubin)", grid=grid,
                        working_programs=sum(nonempty) * x * y, kind=KernelKind.TRTLLM_GEN_FMHA,
                        constexprs={"stepQ": sq, "stepKv": STEP_KV, "multiCtasKvMode": mode,
                                    "clusterDimX": n if mode == "CgaSmemReduction" else 1})
    partial = (w.batch * n * w.num_heads * (w.head_size_v * 4 + 8)) if mode == "GmemReduction" else 0
    return LaunchPlan(
        system="trtllm-gen", kernels=(main,), splits=(n,) * w.batch, nonempty_splits=nonempty,
        tokens_per_split=tuple(cdiv(t, n) * STEP_KV for t in kv_tiles), partial_state_bytes=partial,
        partial_state_bytes_used=partial, scratch_bytes=partial, explain=ex.items(),
        details=TrtllmGenDetails(numCtasPerSeqKv=n, multiCtasKvMode=mode, max_seq_len=max_seq_len,
                                 flashinfer_version=flashinfer_version, source=SRC),
    )


__all__ = ["CLAMP_FROM", "FLASHINFER_VERSIONS", "num_ctas_per_seq_kv", "plan_trtllm_gen", "step_q"]
