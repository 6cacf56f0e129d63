"""FlashInfer batch decode planning (upstream-launchers.md section 8).

flashinfer-ai/flashinfer @ fb28d7242b3506a2348265962041acc1fb56cca4:
- CUDA-core decode: ``include/flashinfer/attention/scheduler.cuh``
  ``PartitionPagedKVCacheBinarySearchMinNumPagePerBatch`` L73-99,
  ``BatchDecodeWithPagedKVCacheWorkEstimationDispatched`` L148-210, ``DecodeSplitKVIndptr``
  L349-363, ``DecodePlanImpl`` L426-500; launch ``decode.cuh`` L775-776;
- tensor-core decode (``use_tensor_cores=True``, the prefill plan): ``PrefillBinarySearchKVChunkSize``
  L101-130, ``PrefillSplitQOKVIndptr`` L545-680, ``PrefillPlanImpl`` L764-800 (fixed 2 CTAs/SM),
  ``include/flashinfer/utils.cuh`` ``FA2DetermineCtaTileQ`` L408; grid ``prefill.cuh`` L4171;
- merge: ``cascade.cuh`` ``VariableLengthMergeStates`` L693-740.

The one run-time input: the CUDA-core kernel sizes its grid with
``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` (register dependent, not derivable from source).
``occupancy=None`` uses the value measured for this GPU and kernel variant when
``decodecalc/data/occupancy.yaml`` has one (the H200: 9 CTAs/SM for the decode kernel, 56 registers
per thread; 10-12 for the merge kernel), else :func:`occupancy_lower_bound`: the CTAs/SM guaranteed by the kernel's
threads and shared memory (both from source) and the worst legal register use (255 per thread,
allocated in 256-register warp units). For 128-thread CTAs that bound is 2, the value for which
the section-2.1 table gives ``(20, 8)`` for Llama-3-8B; pass ``occupancy=`` to use a measured value.
"""

from __future__ import annotations

import functools
from typing import Any

from decodecalc.derived import Explain, cdiv
from decodecalc.errors import UnsupportedError
from decodecalc.launchers.base import KernelKind, KernelLaunch, LaunchPlan, LengthKey
from decodecalc.launchers.details import FlashInferDecodeDetails, FlashInferDetails, FlashInferTcDetails
from decodecalc.launchers.guards import layer_window, require_no_sinks, require_not_mla, require_vendor
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

FI_COMMIT = "fb28d724"
SRC_SCHED = f"flashinfer@{FI_COMMIT} include/flashinfer/attention/scheduler.cuh"
SRC_CASCADE = f"flashinfer@{FI_COMMIT} include/flashinfer/attention/cascade.cuh L693-740"
SRC_UTILS = f"flashinfer@{FI_COMMIT} include/flashinfer/utils.cuh"

HEAD_DIMS = (64, 128, 256)  # DISPATCH_HEAD_DIM of the CUDA-core decode kernel

# Per-SM limits by compute capability (CUDA programming guide, "Compute capabilities" table):
# (max threads/SM, max CTAs/SM, shared memory/SM bytes, registers/SM)
_SM_LIMITS = {
    (8, 0): (2048, 32, 164 * 1024, 65536),
    (8, 6): (1536, 16, 100 * 1024, 65536),
    (8, 9): (1536, 24, 100 * 1024, 65536),
    (9, 0): (2048, 32, 228 * 1024, 65536),
    (10, 0): (2048, 32, 228 * 1024, 65536),
    (12, 0): (1536, 32, 100 * 1024, 65536),
}


def occupancy_lower_bound(threads: int, smem_bytes: int, compute_capability: tuple[int, int] | None) -> int:
    """CTAs/SM guaranteed whatever the register count: min of the thread, CTA, shared-memory and
    worst-case register limits (255 registers/thread rounded to 256 per warp lane, 1 KiB
    shared memory reserved per CTA)."""
    lim = _SM_LIMITS.get(compute_capability or (9, 0), _SM_LIMITS[(9, 0)])
    max_threads, max_ctas, smem_sm, regs = lim
    warps = cdiv(threads, 32)
    by_threads = max_threads // (warps * 32)
    by_smem = smem_sm // (smem_bytes + 1024)
    by_regs = regs // (warps * 32 * 256)
    return max(1, min(max_ctas, by_threads, by_smem, by_regs))


def decode_kernel_tiling(w: Workload) -> tuple[int, int, int, int, int]:
    """(bdx, bdy, bdz, tile_size_per_bdx, threads) of BatchDecodeWithPagedKVCacheKernel (scheduler.cuh L160-172):
    one step of its KV loop takes ``tile_size_per_bdx * bdy * bdz`` tokens into shared memory."""
    kv = w.kv_bytes_per_element
    d, g = w.head_size, w.group_size
    vec = max(16 // kv, d // 32)
    bdx = d // vec
    bdy = g
    threads = max(128, bdx * bdy)
    bdz = threads // (bdx * bdy)
    tile = (2 if kv == 1 else 4) if g == 1 else 1
    return bdx, bdy, bdz, tile, threads


def decode_kernel_resources(w: Workload, compute_capability: tuple[int, int] | None) -> tuple[int, int]:
    """(threads, shared memory bytes) of BatchDecodeWithPagedKVCacheKernel (scheduler.cuh L160-172)."""
    kv, d = w.kv_bytes_per_element, w.head_size
    _, bdy, bdz, tile, threads = decode_kernel_tiling(w)
    stages = 2 if (compute_capability or (9, 0)) >= (8, 0) else 1  # utils.cuh L330-337
    smem = 2 * stages * tile * bdy * bdz * d * kv + max(tile * threads * 8, 2 * bdy * bdz * 4)
    return threads, smem


def binary_search_min_num_pages(max_grid_size: int, gdy: int, num_pages: list[int], min_pages: int) -> tuple[int, int]:
    """``PartitionPagedKVCacheBinarySearchMinNumPagePerBatch`` (scheduler.cuh L73-99)."""
    low, high = min_pages, max(num_pages)
    while low < high:
        mid = (low + high) // 2
        if sum(cdiv(p, mid) for p in num_pages) * gdy > max_grid_size:
            low = mid + 1
        else:
            high = mid
    return low, sum(cdiv(max(p, 1), low) for p in num_pages)


def _merge_kernel(w: Workload, gpu: GPUSpec, merge_occupancy: int | None, ex: Explain) -> KernelLaunch:
    rows = w.num_tokens
    d = w.head_size_v
    out_b = w.q_bytes
    vec = max(16 // out_b, d // 32)
    bdx = d // vec
    bdy = 128 // bdx
    smem = 4 * bdy * d * out_b + 128 * 4
    measured = measured_occupancy(gpu, "flashinfer_merge", str(d))
    if merge_occupancy:
        occ_m = merge_occupancy
    elif measured:
        occ_m = ex.add("merge_occupancy", measured[0], "occupancy.yaml[architecture][head_dim]: CTAs/SM of the merge "
                       "kernel measured for this build", measured[1], architecture=gpu.arch, head_dim=d)
    else:
        occ_m = occupancy_lower_bound(128, smem, gpu.compute_capability)
    n = ex.add("merge_grid", gpu.num_sms * min(occ_m, cdiv(rows * w.num_heads, gpu.num_sms)),
               "num_sms * min(occ_merge, cdiv(seq_len * num_heads, num_sms))", SRC_CASCADE,
               num_sms=gpu.num_sms, occ_merge=occ_m, seq_len=rows, num_heads=w.num_heads)
    return KernelLaunch(name="PersistentVariableLengthMergeStatesKernel", grid=(n,), kind=KernelKind.FLASHINFER_MERGE,
                        working_programs=min(n, rows * w.num_heads),
                        constexprs={"occupancy": occ_m, "bdx": bdx, "bdy": bdy})


#: data/occupancy.yaml: measured CTAs/SM per compiled architecture and kernel variant (the one run-time input of the
#: grid)
OCCUPANCY_DATA = "occupancy.yaml"


@functools.cache
def _occupancy_table() -> dict[str, Any]:
    from importlib import resources

    from decodecalc.yamlio import safe_load

    data = safe_load(resources.files("decodecalc.data").joinpath(OCCUPANCY_DATA).read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def measured_occupancy(gpu: GPUSpec, kernel: str, variant: str) -> tuple[int, str] | None:
    """(CTAs/SM, source) measured for ``kernel`` ("flashinfer_decode" keyed "head_dim/group_size",
    "flashinfer_merge" keyed "head_dim") on a GPU of ``gpu``'s compiled architecture (decodecalc/data/occupancy.yaml:
    registers and shared memory are the build's, the same on every GPU of an architecture), or None."""
    arch = gpu.arch
    entry = _occupancy_table().get(arch, {}) if arch else {}
    row = (entry.get(kernel) or {}).get(variant) if isinstance(entry, dict) else None
    if not isinstance(row, dict) or not isinstance(row.get("occupancy"), int) or row["occupancy"] < 1:
        return None
    on = entry.get("measured_on", "?")
    return row["occupancy"], (f"measured on the {on} ({arch}; every {arch} GPU runs the same build): "
                              f"decodecalc/data/occupancy.yaml {arch} {kernel} {variant} ({entry.get('source', '')})")


#: group sizes the CUDA-core decode kernel is compiled for (DISPATCH_GQA_GROUP_SIZE; others raise
#: "Unsupported group_size", seen on the H200 for 7)
GROUP_SIZES = (1, 2, 3, 4, 6, 8, 16)
SRC_GROUPS = "flashinfer 0.7.2.post1 include/flashinfer/utils.cuh L142-167 DISPATCH_GQA_GROUP_SIZE"


def decode_variant(w: Workload) -> str:
    """The occupancy.yaml key of the CUDA-core decode kernel compiled for ``w``: ``head_dim/group_size``, plus
    ``/e4m3`` for an fp8 KV cache (another template instance: 16-byte vectors of 16 KV elements, its own
    registers per thread; bf16 query either way, as vLLM and SGLang call it)."""
    key = f"{w.head_size}/{w.group_size}"
    return key + "/e4m3" if w.kv_bytes_per_element == 1 else key


def _check(w: Workload, gpu: GPUSpec, system: str, check_platform: bool) -> None:
    require_vendor(gpu, "nvidia", system, check_platform)
    require_not_mla(w, system)
    # the wrapper's kernels take no sinks: vLLM allows sinks on FlashInfer only through XQA / trtllm-gen
    # (vllm 0.33.0 vllm/v1/attention/backends/flashinfer.py L707-726), SGLang sends sink models to triton
    require_no_sinks(w, system, "vllm 0.33.0 vllm/v1/attention/backends/flashinfer.py L707-726")
    if w.head_size not in HEAD_DIMS or w.head_size_v != w.head_size:
        raise UnsupportedError(f"{system}: head size {w.head_size} not compiled (64, 128, 256)")


def plan_flashinfer(
    w: Workload, gpu: GPUSpec, *, occupancy: int | None = None, cuda_graph: bool = False,
    merge_occupancy: int | None = None, check_platform: bool = True,
) -> LaunchPlan:
    """CUDA-core ``BatchDecodeWithPagedKVCacheWrapper`` plan (``use_tensor_cores=False``)."""
    system = "FlashInfer decode (CUDA cores)"
    _check(w, gpu, system, check_platform)
    if w.max_seqlen_q != 1:
        raise UnsupportedError(f"{system}: one query token per request (use the tensor-core path for q > 1)")
    ex = Explain()
    B, h, h_kv, page = w.batch, w.num_heads, w.num_kv_heads, w.block_size
    threads, smem = decode_kernel_resources(w, gpu.compute_capability)
    if w.group_size not in GROUP_SIZES:
        raise UnsupportedError(f"{system}: group size {w.group_size} (query heads per KV head) not compiled; "
                               f"compiled: {', '.join(map(str, GROUP_SIZES))} ({SRC_GROUPS})")
    variant = decode_variant(w)
    measured = measured_occupancy(gpu, "flashinfer_decode", variant) if occupancy is None else None
    if measured is not None:
        occ = ex.add("occupancy", measured[0], "occupancy.yaml[architecture][decode_variant]: "
                     "cudaOccupancyMaxActiveBlocksPerMultiprocessor measured for this build", measured[1],
                     architecture=gpu.arch, decode_variant=variant)
    elif occupancy is None:
        occ = ex.add("occupancy", occupancy_lower_bound(threads, smem, gpu.compute_capability),
                     "lower bound of cudaOccupancyMaxActiveBlocksPerMultiprocessor: min(threads, CTAs, smem, 255-register limits)",
                     f"{SRC_SCHED} L175-182 (runtime query; bound documented in decodecalc)",
                     threads=threads, smem=smem)
    else:
        if occupancy < 1:
            raise UnsupportedError(f"{system}: occupancy must be >= 1, got {occupancy}")
        occ = ex.add("occupancy", occupancy, "user / measured occupancy", "input", occupancy=occupancy)
    max_grid = ex.add("max_grid_size", occ * gpu.num_sms, "num_blocks_per_sm * num_sm", f"{SRC_SCHED} L175-182",
                      num_blocks_per_sm=occ, num_sm=gpu.num_sms)
    gdy = h_kv
    pages = [cdiv(L, page) for L in w.seq_lens]
    if B * gdy >= max_grid:
        split, chunk, new_bs = False, max(max(pages), 1), B
        ex.add("split_kv", False, "batch_size * gdy >= max_grid_size", f"{SRC_SCHED} L183-190",
               batch_size=B, gdy=gdy, max_grid_size=max_grid)
    else:
        min_pages = max(128 // page, 1)
        chunk, new_bs = binary_search_min_num_pages(max_grid, gdy, pages, min_pages)
        ex.add("kv_chunk_size_in_pages", chunk,
               "smallest c >= max(128 // page_size, 1) with sum_i cdiv(pages_i, c) * gdy <= max_grid_size",
               f"{SRC_SCHED} L73-99, L199", page_size=page, gdy=gdy, max_grid_size=max_grid)
        split = ex.add("split_kv", not (new_bs == B and not cuda_graph),
                       "not (new_batch_size == batch_size and not enable_cuda_graph)", f"{SRC_SCHED} L200-206",
                       new_batch_size=new_bs, batch_size=B, enable_cuda_graph=cuda_graph)
    if cuda_graph:
        padded_bs = max_grid // gdy if split else B
    else:
        padded_bs = new_bs
    ex.add("padded_batch_size", padded_bs,
           "(max_grid_size // gdy if split_kv else batch_size) if enable_cuda_graph else new_batch_size",
           f"{SRC_SCHED} L443-444", max_grid_size=max_grid, gdy=gdy, split_kv=split, batch_size=B,
           enable_cuda_graph=cuda_graph, new_batch_size=new_bs)
    chunks = tuple(cdiv(max(p, 1), chunk) for p in pages) if split else (1,) * B
    tps = tuple(min(chunk * page, L) for L in w.seq_lens) if split else w.seq_lens
    kernels = [KernelLaunch(name="BatchDecodeWithPagedKVCacheKernel", grid=(padded_bs, h_kv), kind=KernelKind.FLASHINFER_DECODE,
                            working_programs=(sum(chunks) if split else B) * h_kv,
                            constexprs={"threads": threads, "smem_bytes": smem, "occupancy": occ,
                                        "kv_chunk_size": chunk * page, "tiling": decode_kernel_tiling(w)})]
    allocated = used = 0
    if split:
        kernels.append(_merge_kernel(w, gpu, merge_occupancy, ex))
        allocated = ex.add("tmp_bytes", h * padded_bs * (w.head_size_v * 4 + 4),
                           "num_qo_heads * padded_batch_size * (HEAD_DIM * 4 + 4)  (tmp_v, tmp_s sized as fp32)",
                           f"{SRC_SCHED} L485-488", num_qo_heads=h, padded_batch_size=padded_bs,
                           HEAD_DIM=w.head_size_v, unit="bytes")
        used = sum(chunks) * h * (w.head_size_v * w.q_bytes + 4)  # bf16 partial O + fp32 lse (batch_decode.cu L231-232)
    return LaunchPlan(
        system="flashinfer", kernels=tuple(kernels), splits=chunks, nonempty_splits=chunks,
        tokens_per_split=tps, partial_state_bytes=allocated, partial_state_bytes_used=used,
        scratch_bytes=allocated, explain=ex.items(),
        details=FlashInferDecodeDetails(occupancy=occ, max_grid_size=max_grid, kv_chunk_size_in_pages=chunk,
                                        split_kv=split, padded_batch_size=padded_bs,
                                        new_batch_size=(sum(chunks) if split else B), cuda_graph=cuda_graph,
                                        source=SRC_SCHED),
    )


def fa2_determine_cta_tile_q(avg_packed_qo_len: int, head_dim: int) -> int:
    """``FA2DetermineCtaTileQ`` (utils.cuh L408) for sm80+ and head dims <= 256 (smem probe passes)."""
    if avg_packed_qo_len > 64 and head_dim < 256:
        return 128
    return 64 if avg_packed_qo_len > 16 else 16


#: the FlashInfer decode path each engine's FlashInfer backend runs
SRC_ENGINE_PATH = {
    # BatchDecodeWithPagedKVCacheWrapper(..., use_tensor_cores=True): always ("the perf would be at least as good as
    # cuda cores for all attention ops in latest gpus")
    "vllm": "vllm 0.33.0 vllm/v1/attention/backends/flashinfer.py L1487-1499",
    # should_use_tensor_core: SGLANG_FLASHINFER_USE_TENSOR_CORE overrides; an fp8 KV cache -> tensor cores; fp16 / bf16
    # -> GQA group size >= 4 (the flashinfer <= 0.1.6 probe before it is absent from 0.7.2.post1)
    "sglang": "sglang 0.5.23 python/sglang/srt/layers/attention/flashinfer_backend.py L2670-2716",
}


def engine_uses_tensor_cores(engine: str, w: Workload) -> bool:
    """Whether ``engine``'s FlashInfer backend decodes ``w`` on tensor cores (SRC_ENGINE_PATH; the environment
    overrides are not modelled)."""
    if engine == "vllm":
        return True
    if engine == "sglang":
        return w.kv_cache_dtype.startswith("fp8") or w.num_heads // w.num_kv_heads >= 4
    raise UnsupportedError(f"no FlashInfer decode-path rule for engine {engine!r}; known: vllm, sglang")


def plan_flashinfer_tc(
    w: Workload, gpu: GPUSpec, *, cuda_graph: bool = False, fixed_split_size: int | None = None,
    disable_split_kv: bool = False, merge_occupancy: int | None = None, layer: str = "auto",
    check_platform: bool = True,
) -> LaunchPlan:
    """Tensor-core decode (``use_tensor_cores=True``): the prefill plan with ``num_blocks_per_sm = 2``.

    ``fixed_split_size`` is in pages (flashinfer/decode.py L1095-1096); with it the chunking
    depends only on each request's own length (batch-invariant).
    """
    system = "FlashInfer decode (tensor cores)"
    _check(w, gpu, system, check_platform)
    ex = Explain()
    B, h, h_kv, g, page = w.batch, w.num_heads, w.num_kv_heads, w.group_size, w.block_size
    max_grid = 2 * gpu.num_sms
    max_bs = ex.add("max_batch_size_if_split", max_grid // h_kv, "(2 * num_sm - colocated_ctas) // num_kv_heads",
                    f"{SRC_SCHED} L788-791", num_sm=gpu.num_sms, colocated_ctas=0, num_kv_heads=h_kv)
    packed = [q * g for q in w.query_lens]
    # the decode wrapper passes uniform_q_len = q_len only when q_len > 1 (flashinfer 0.7.2.post1
    # decode.py L1795); single-token decode under CUDA graph takes the ragged bound (seen on the H200)
    if cuda_graph and len(set(w.query_lens)) == 1 and w.query_lens[0] > 1:
        cta_tile_q = fa2_determine_cta_tile_q(packed[0], w.head_size_v)
        total_tiles_q = B * cdiv(packed[0], cta_tile_q)
    elif cuda_graph:
        max_qo = (w.num_tokens - B + 1) * g
        cta_tile_q = fa2_determine_cta_tile_q(max_qo, w.head_size_v)
        total_tiles_q = cdiv(w.num_tokens * g, cta_tile_q) + B - 1
    else:
        cta_tile_q = fa2_determine_cta_tile_q(sum(packed) // B, w.head_size_v)
        total_tiles_q = sum(cdiv(p, cta_tile_q) for p in packed)
    ex.add("cta_tile_q", cta_tile_q, "FA2DetermineCtaTileQ(packed_qo_len = q_len * g, head_dim)",
           f"{SRC_UTILS} L408", q_len=w.max_seqlen_q, g=g)
    window = layer_window(w, layer)
    kv_pages = [cdiv(L, page) for L in w.seq_lens]
    if window:
        # window_left = sliding_window - 1 as vLLM and SGLang pass it; effective pages
        # min(ceil_div(window_left + cta_tile_q, page_size), kv_pages) (0.7.2.post1 scheduler.cuh L628-634;
        # the off-by-one found by tests/test_oracles_flashinfer.py)
        kv_pages = [min(cdiv(window - 1 + cta_tile_q, page), p) for p in kv_pages]
    min_chunk = max(128 // page, 1)
    split = False
    if disable_split_kv:
        chunk = None
    elif fixed_split_size is not None and fixed_split_size > 0:
        chunk = fixed_split_size
    else:
        max_kv = max([1, *kv_pages])
        low, high = min_chunk, max_kv
        tiles = [(cdiv(p, cta_tile_q), max(k, 1)) for p, k in zip(packed, kv_pages)]  # loop invariants
        while low < high:
            mid = (low + high) // 2
            nb = sum(t * cdiv(k, mid) for t, k in tiles)
            if nb > max_bs:
                low = mid + 1
            else:
                high = mid
        chunk = low
        split = cuda_graph or low < max_kv
    chunks = tuple(1 if chunk is None else cdiv(max(k, 1), chunk) for k in kv_pages)
    if fixed_split_size and not disable_split_kv:
        split = split or any(c > 1 for c in chunks)
    ex.add("kv_chunk_size_in_pages", chunk if chunk is not None else "inf",
           "fixed_split_size, or inf if disable_split_kv, else smallest c >= max(128 // page_size, 1) with sum_i cdiv(packed_q_i, cta_tile_q) * cdiv(pages_i, c) <= max_batch_size_if_split",
           f"{SRC_SCHED} L101-130, L545-680", page_size=page, max_batch_size_if_split=max_bs)
    new_bs = sum(cdiv(p, cta_tile_q) * c for p, c in zip(packed, chunks))
    padded_bs = max(max_bs, total_tiles_q) if cuda_graph else new_bs
    if new_bs > padded_bs:
        raise UnsupportedError(f"{system}: new batch size {new_bs} exceeds the padded batch size {padded_bs} "
                               "(fixed split size under CUDA graph)")
    ex.add("padded_batch_size", padded_bs, "max(max_batch_size_if_split, total_num_tiles_q) if cuda_graph else new_batch_size",
           f"{SRC_SCHED} L672-673", max_batch_size_if_split=max_bs, total_num_tiles_q=total_tiles_q,
           cuda_graph=cuda_graph, new_batch_size=new_bs)
    splits = chunks if split else (1,) * B
    tps = tuple(min((chunk or 0) * page, L) if (split and chunk) else L for L in w.seq_lens)
    kernels = [KernelLaunch(name="BatchPrefillWithPagedKVCacheKernel", grid=(padded_bs, 1, h_kv),
                            kind=KernelKind.FLASHINFER_PREFILL,
                            working_programs=new_bs * h_kv,
                            constexprs={"CTA_TILE_Q": cta_tile_q, "kv_chunk_size": (chunk or 0) * page})]
    allocated = used = 0
    if split:
        kernels.append(_merge_kernel(w, gpu, merge_occupancy, ex))
        allocated = ex.add("tmp_bytes", h * padded_bs * cta_tile_q * (w.head_size_v * 4 + 4),
                           "num_qo_heads * padded_batch_size * cta_tile_q * (head_dim_vo * 4 + 4)  (tmp_v, tmp_s fp32)",
                           f"{SRC_SCHED} PrefillPlanImpl L860-864", num_qo_heads=h, padded_batch_size=padded_bs,
                           cta_tile_q=cta_tile_q, head_dim_vo=w.head_size_v, unit="bytes")
        used = sum(c * q for c, q in zip(splits, w.query_lens)) * h * (w.head_size_v * w.q_bytes + 4)
    return LaunchPlan(
        system="flashinfer-tc", kernels=tuple(kernels), splits=splits, nonempty_splits=splits,
        tokens_per_split=tps, partial_state_bytes=allocated, partial_state_bytes_used=used,
        scratch_bytes=allocated, explain=ex.items(),
        details=FlashInferTcDetails(kv_chunk_size_in_pages=chunk, split_kv=split, padded_batch_size=padded_bs,
                                    new_batch_size=new_bs, cta_tile_q=cta_tile_q, cuda_graph=cuda_graph,
                                    fixed_split_size=fixed_split_size, disable_split_kv=disable_split_kv,
                                    source=SRC_SCHED),
    )


def length_key(w: Workload) -> LengthKey:
    """For the sweep (CUDA-core and tensor-core plans): a uniform batch's launch depends on the length only
    through its page count; the split length is the chunk of pages when the KV is split."""
    page = w.block_size

    def tokens_per_split(p: LaunchPlan, L: int) -> int:
        d = p.details_as(FlashInferDetails)
        chunk = d.kv_chunk_size_in_pages
        return min(chunk * page, L) if (d.split_kv and chunk) else L
    return LengthKey(lambda L: cdiv(L, page), tokens_per_split)
