"""The work of the default backends' launches - FlashInfer (CUDA-core and tensor-core decode), FlashAttention-3,
FlashMLA and FlashAttention-2 - read from their launchers' :class:`~decodecalc.launchers.base.LaunchPlan` (the kernels' kinds,
grids, per-sequence splits and the constants the launchers recorded), never from kernel names.

Every loop unit here is what the launcher's upstream rule cuts the KV sequence into:

* FlashInfer: one KV page (``block_size`` tokens) of one KV head; a CTA reads its chunk
  (``kv_chunk_size_in_pages`` pages, the last chunk the rest); the tensor-core grid's work items are recorded in
  grid order (request-major x-line, once per KV head), TC_STEP_TOKENS tokens per iteration, its SM and HBM times
  blended (TC_BLEND_POWER). The merge kernel is persistent: CTA j merges the
  (token, query head) rows j, j + grid, ... reading each row's partial states (``d_v`` outputs in the query
  dtype + one fp32 LSE per split). The decode kernel's
  resident CTAs/SM is the occupancy its plan used (measured, decodecalc/data/occupancy.yaml); the tensor-core
  (prefill) kernel's is the 2 CTAs/SM its plan assumes (the captured kernels' registers give 2 as well).
* FA3: one ``kBlockN`` block of one KV head per work tile (m-block x head x split), tiles list-scheduled over
  the persistent grid of one CTA per SM; empty splits exit at once; the combine kernel reads each row's splits.
* FlashMLA: one 64-token block of the 576-wide latent per iteration; the most loaded SM part (the scheduler's
  part loads) decides: its blocks plus a start-up per piece (MLA_PIECE_ITERS); the query m-blocks of a part share
  each block's HBM read (L2 serves the second); the combine kernel, launched behind the main kernel (PDL), reads
  the splits of the requests that were split, in grid order.
* FA2: one ``kBlockN`` block of one KV head per iteration; a program takes its split's blocks (n_blocks_per_split,
  the last split the rest; an empty split's program runs none); the combine kernel's programs read every split.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Callable

from decodecalc.derived import cdiv, next_power_of_2
from decodecalc.errors import ConfigError
from decodecalc.launchers import flashmla
from decodecalc.launchers.base import KernelKind, KernelLaunch, LaunchPlan
from decodecalc.launchers.details import Fa2Details, Fa3Details, FlashInferDetails, FlashMlaDetails
from decodecalc.launchers.names import Backend
from decodecalc.launchers.registry import TIMED_BACKENDS
from decodecalc.timemodel.work import KernelWork, LaunchWork, Order, Row, WorkShape, add_block, row_runs

#: the --kernel / compare policy names whose launches this module describes: the registered backends with time-model
#: families (launchers/registry.py), each with its work function in WORK below
BACKEND_KERNELS: tuple[str, ...] = tuple(b.value for b in TIMED_BACKENDS)
BACKEND_KINDS = frozenset({KernelKind.FLASHINFER_DECODE, KernelKind.FLASHINFER_PREFILL, KernelKind.FLASHINFER_MERGE,
                           KernelKind.FA3_FWD, KernelKind.FA3_COMBINE, KernelKind.FLASHMLA_DECODE,
                           KernelKind.FLASHMLA_COMBINE, KernelKind.FA2_FWD, KernelKind.FA2_COMBINE,
                           KernelKind.XQA_MHA, KernelKind.XQA_MHA_SM90})
_MLA_BLOCK = flashmla.block_size_n
#: CUDA-core decode: heads per KV head below which a bf16 step is bound by its bytes (fitted on the H200 training
#: shapes, benchmarks/fit_backends_h200.py: 2.6 beat 2.0 there)
CUDA_CORE_G0 = 2.6
#: tokens of one tensor-core loop iteration in the model (four 16-token MMA fragments; the kernel's step, CTA_TILE_KV,
#: is 64 KiB: 256 / 128 / 64 tokens at d = 64 / 128 / 256). A lone CTA takes 1.88 / 1.59 / 1.36 us per 64 KiB step
#: (sweep-backends-h200.jsonl, disable_split_kv, 131,072 tokens), so a step costs a fixed time per 64 tokens plus
#: its bytes; 64 beat 16, 32 and 64 KiB steps on the H200 training shapes (benchmarks/fit_backends_h200.py)
TC_STEP_TOKENS = 64
#: L^p blend of an iteration's SM and HBM times (KernelWork.blend_power), chosen on the H200 training shapes:
#: tensor cores 3 (of 1.5, 2, 3, 4, max), FlashMLA 4 (of 2-8, max)
TC_BLEND_POWER = 3.0
MLA_BLEND_POWER = 4.0
FA2_BLEND_POWER = 4.0  # FA2's split kernels, chosen the same way (of 0 = max, 2, 3, 4)
#: FlashMLA: the time of one piece's start-up and write-out (a request's share of one SM part) in block
#: iterations, (fixed, per 64 query rows of the CTA); chosen on the H200 training shapes (upstream's scheduler
#: weighs a piece as 5 blocks, fixed_overhead_num_blocks, whatever its rows)
MLA_PIECE_ITERS = (5.0, 3.0)


def flashinfer_family(tensor_cores: bool, kv_bytes_per_element: int) -> str:
    """The time-model family of FlashInfer's decode kernel: the CUDA-core or tensor-core path, each with its own
    family on an fp8 KV cache (another template instance: the CUDA-core kernel converts e4m3 to the bf16 query's
    type in registers at 16 elements a vector, the tensor-core one before its MMAs; measured t(fp8)/t(bf16) on the
    same launch 1.31 and 0.98 on the H200, benchmarks/results/fit-backends-fp8-h200.json), where bytes alone would
    predict 0.5-0.6."""
    base = "flashinfer_tc" if tensor_cores else "flashinfer_decode"
    return base + "_fp8" if kv_bytes_per_element == 1 else base


def fa3_family(details: Fa3Details, kv_bytes_per_element: int) -> str:
    """The time-model family of FA3's FlashAttnFwdSm90 for a plan's ``details``: bf16 ``fa3_fwd``; on an fp8 KV cache
    (the fork's in-kernel dequantization, query quantized to e4m3) ``fa3_fwd_fp8`` for the one-MMA-warpgroup decode
    tiles (``use_one_mma_wg``: d 64 or 128, g <= 64; 64 x 128 / 64 x 96) and ``fa3_fwd_fp8_wide`` for the
    two-warpgroup tiles (d 256: 128 x 128), two kernels with different pipelines (launchers.flash_attn3)."""
    if kv_bytes_per_element != 1:
        return "fa3_fwd"
    return "fa3_fwd_fp8" if details.use_one_mma_wg else "fa3_fwd_fp8_wide"


def _hist(pairs: list[tuple[int, int]], scale: int = 1) -> tuple[tuple[int, int], ...]:
    out: Counter[int] = Counter()
    for v, n in pairs:
        if n > 0:
            out[v] += n * scale
    return tuple(sorted(out.items()))


def cuda_core_step_factor(group_size: int, kv_bytes_per_element: int) -> float:
    """How many times its KV bytes one step of FlashInfer's CUDA-core decode loop costs: 1 where it is bound by its
    bytes; past that in proportion to the step's arithmetic per KV byte, group_size multiply-adds per element over
    kv_bytes_per_element bytes, which reaches a bf16 step's bytes at CUDA_CORE_G0 heads per KV head (an e4m3 cache
    at half of it: the same arithmetic on half the bytes).

    Source: scored on head layouts no fit saw, bf16 by benchmarks/flashinfer_wide_ctas.py and
    benchmarks/cuda_core_step_rule.py (benchmarks/results/flashinfer-wide-ctas-h200.json,
    cuda-core-step-rule-h200.json), e4m3 by benchmarks/fit_backends_fp8_h200.py
    (benchmarks/results/fit-backends-fp8-h200.json)."""
    return max(1.0, group_size * 2 / (kv_bytes_per_element * CUDA_CORE_G0))


def _pieces(units: int, splits: int, per_split: int) -> list[tuple[int, int]]:
    """A sequence of ``units`` cut into splits of ``per_split`` units: (units of a split, how many)."""
    if splits <= 1 or per_split <= 0 or per_split >= units:
        return [(max(units, 1), 1)]
    full = cdiv(units, per_split) - 1
    return [(per_split, full), (units - full * per_split, 1)]


def _kernel(plan: LaunchPlan, kind: KernelKind) -> KernelLaunch | None:
    return next((k for k in plan.kernels if k.kind is kind), None)


def _rows_merge(shape: WorkShape, plan: LaunchPlan, family: str, k: KernelLaunch, *, row_bytes: int,
                rows_per_program: int = 1, states_per_iter: int = 1, occupancy: int | None = None) -> KernelWork:
    """A merge kernel: per sequence, its (token, head) rows, each reading ``splits_i`` partial states,
    ``states_per_iter`` of them at a time."""
    h = shape.num_heads
    pairs = [(cdiv(max(s, 1), states_per_iter), cdiv(q * h, rows_per_program))
             for s, q in zip(plan.splits, shape.query_lens)]
    work_programs = sum(n for _, n in pairs)
    return KernelWork(family=family, iters=_hist(pairs), bytes_per_iter=row_bytes * rows_per_program * states_per_iter,
                      idle_programs=max(0, k.programs - work_programs) if rows_per_program > 1 else 0,
                      head_dim=next_power_of_2(shape.head_size_v), occupancy=occupancy)


def _persistent_merge(shape: WorkShape, plan: LaunchPlan, k: KernelLaunch, *, row_bytes: int) -> KernelWork:
    """FlashInfer's PersistentVariableLengthMergeStatesKernel (cascade.cuh): a persistent grid of ``k.programs``
    CTAs; CTA j merges the (token, head) rows j, j + grid, j + 2 grid, ... (token-major), one row at a time, its
    bdy thread rows taking bdy partial states per step. Each CTA is one program running the steps of its rows."""
    bdy = int(k.constexprs.get("bdy") or 1)
    h = shape.num_heads
    costs: list[int] = []
    for s, q in zip(plan.splits, shape.query_lens):
        costs += [cdiv(max(s, 1), bdy)] * (q * h)
    n = max(1, k.programs)
    # CTA j's cost: the sum of costs[j::n], added a grid-wide stride of rows at a time
    sums = costs[:n]
    for start in range(n, len(costs), n):
        chunk = costs[start:start + n]
        sums[:len(chunk)] = map(operator.add, sums[:len(chunk)], chunk)
    per_cta = Counter(sums)
    return KernelWork(family="flashinfer_merge", iters=tuple(sorted(per_cta.items())), bytes_per_iter=row_bytes * bdy,
                      idle_programs=max(0, n - len(costs)), head_dim=next_power_of_2(shape.head_size_v),
                      occupancy=int(k.constexprs.get("occupancy") or 0) or None)


def flashinfer_work(plan: LaunchPlan, shape: WorkShape, *, tensor_cores: bool) -> LaunchWork:
    page = int(getattr(shape, "block_size", 16))
    d, dv, kvb, h_kv = shape.head_size, shape.head_size_v, shape.kv_bytes_per_element, shape.num_kv_heads
    kind = KernelKind.FLASHINFER_PREFILL if tensor_cores else KernelKind.FLASHINFER_DECODE
    main = _kernel(plan, kind)
    if main is None:
        raise ConfigError(f"no FlashInfer {'prefill' if tensor_cores else 'decode'} kernel in the {plan.system} plan")
    det = plan.details_as(FlashInferDetails)
    chunk = det.kv_chunk_size_in_pages or 0
    split = det.split_kv
    q_tiles = [1] * len(shape.seq_lens)
    if tensor_cores:
        tile_q = int(main.constexprs.get("CTA_TILE_Q") or 16)
        g = shape.num_heads // h_kv
        q_tiles = [cdiv(q * g, tile_q) for q in shape.query_lens]
    pairs: list[tuple[int, int]] = []
    line: list[int] = []  # one x-line of the grid in order, in pages: request, then its q tiles, then its chunks
    for L, s, qt in zip(shape.seq_lens, plan.splits, q_tiles):
        pieces = _pieces(cdiv(L, page), s if split else 1, int(chunk))
        pairs += [(u, n * qt) for u, n in pieces]
        line += [u for u, n in pieces for _ in range(n)] * qt
    iters = _hist(pairs, h_kv)
    order: Order = ()
    working = sum(n for _, n in iters)
    unit_bytes = page * (d + dv) * kvb
    if not tensor_cores and main.constexprs.get("tiling"):
        # CUDA cores: one step of the KV loop takes tile * bdy * bdz tokens. Its arithmetic is g * d multiply-adds
        # per token for QK and again for PV: past CUDA_CORE_G0 heads per KV head (bf16) a step costs like more bytes,
        # in proportion to its arithmetic per KV byte (cuda_core_step_factor)
        bdx, bdy, bdz, tile, _ = main.constexprs["tiling"]
        step = tile * bdy * bdz
        factor = cuda_core_step_factor(shape.num_heads // h_kv, kvb)
        iters = tuple((cdiv(u * page, step), n) for u, n in iters)
        unit_bytes = int(step * (d + dv) * kvb * factor)
    if tensor_cores:
        # tensor cores (the prefill kernel at CTA_TILE_Q 16): one step of its KV loop takes CTA_TILE_KV tokens, 64 KiB
        # of bf16 K and V: 128 tokens at d 128, 64 at 256, 256 at 64 (the captured kernels' shared memory,
        # (16 + 2 * CTA_TILE_KV) * d * 2 bytes: 69,632 / 73,728 / 67,584); the model counts TC_STEP_TOKENS at a time
        step = TC_STEP_TOKENS
        iters = tuple((cdiv(u * page, step), n) for u, n in iters)
        unit_bytes = step * (d + dv) * kvb
        # grid (padded_batch_size, 1, num_kv_heads): the x-line of work items (request-major) once per KV head,
        # the padding past new_batch_size exiting at once (prefill.cuh BatchPrefillWithPagedKVCacheKernel)
        blocks: list[tuple[Row, int]] = []
        add_block(blocks, row_runs((cdiv(u * page, step), 1) for u in line), h_kv)
        order = tuple(blocks)
    occ = 2 if tensor_cores else int(main.constexprs.get("occupancy") or 0) or None  # PrefillPlanImpl: 2 CTAs/SM
    kernels = [KernelWork(family=flashinfer_family(tensor_cores, kvb), iters=iters,
                          bytes_per_iter=unit_bytes, idle_programs=max(0, main.programs - working),
                          head_dim=next_power_of_2(d), occupancy=occ, order=order,
                          blend_power=TC_BLEND_POWER if tensor_cores else 0.0)]
    merge = _kernel(plan, KernelKind.FLASHINFER_MERGE)
    if merge is not None:
        kernels.append(_persistent_merge(shape, plan, merge, row_bytes=dv * shape.q_bytes + 4))
    return LaunchWork(kernel="flashinfer-tc" if tensor_cores else "flashinfer", splits=max(plan.splits or (1,)),
                      kernels=tuple(kernels), label=f"chunk {chunk} pages" if split else "unsplit")


def fa3_work(plan: LaunchPlan, shape: WorkShape) -> LaunchWork:
    main = _kernel(plan, KernelKind.FA3_FWD)
    if main is None:
        raise ConfigError(f"no FlashAttnFwdSm90 kernel in the {plan.system} plan")
    det = plan.details_as(Fa3Details)
    kbn, kbm, pack = det.kBlockN, det.kBlockM, det.pack_gqa
    d, dv, kvb = shape.head_size, shape.head_size_v, shape.kv_bytes_per_element
    g = shape.num_heads // shape.num_kv_heads
    heads = shape.num_kv_heads if pack else shape.num_heads
    pairs: list[tuple[int, int]] = []
    empty = 0
    for L, q, s, ne, tps in zip(shape.seq_lens, shape.query_lens, plan.splits, plan.nonempty_splits,
                                plan.tokens_per_split):
        mb = cdiv(q * (g if pack else 1), kbm) * heads
        nb = cdiv(L, kbn)
        pairs += [(u, n * mb) for u, n in _pieces(nb, ne, cdiv(tps, kbn))]
        empty += (s - ne) * mb
    persistent = det.varlen  # VarlenDynamicPersistentTileScheduler: one CTA per SM
    kernels = [KernelWork(family=fa3_family(det, kvb), iters=_hist(pairs), bytes_per_iter=kbn * (d + dv) * kvb,
                          idle_programs=empty, head_dim=next_power_of_2(d), occupancy=1 if persistent else None,
                          persistent=persistent)]
    comb = _kernel(plan, KernelKind.FA3_COMBINE)
    if comb is not None:
        kbm_c = int(comb.constexprs.get("kBlockM") or 8)
        kernels.append(_rows_merge(shape, plan, "fa3_combine", comb, row_bytes=4 * dv + 4, rows_per_program=kbm_c))
    return LaunchWork(kernel="fa3", splits=max(plan.splits or (1,)), kernels=tuple(kernels),
                      label=f"num_splits {det.num_splits_static}")


def flashmla_work(plan: LaunchPlan, shape: WorkShape) -> LaunchWork:
    main = _kernel(plan, KernelKind.FLASHMLA_DECODE)
    if main is None:
        raise ConfigError(f"no flash_fwd_splitkv_mla_kernel in the {plan.system} plan")
    det = plan.details_as(FlashMlaDetails)
    parts, busy = det.num_sm_parts, max(1, det.busy_parts)
    per_part = main.programs // max(parts, 1)
    # grid (n_mblocks, h_k, num_sm_parts): a CTA takes the query rows of one m-block through its SM part's pieces
    # (the scheduler's part loads, launchers.flashmla.schedule_parts). Its loop iterations are the part's 64-token
    # blocks plus a start-up and write-out per piece that grows with its rows (Q in, the output or the fp32
    # partial out; MLA_PIECE_ITERS); all parts run at once, so the most loaded one decides. Only the real blocks
    # read the latent from HBM, and the n_mblocks CTAs of one part read the same block at about the same time: HBM
    # sees it once, L2 serves the other reads
    mblocks = max(1, main.grid[0])
    rows = cdiv(shape.num_heads // shape.num_kv_heads * max(shape.query_lens or (1,)), mblocks)
    piece_iters = MLA_PIECE_ITERS[0] + MLA_PIECE_ITERS[1] * rows / 64
    loads = [(b, n) for b, n in det.part_loads if n]
    iters = max(1, max(math.ceil(b + piece_iters * n) for b, n in loads))
    block_bytes = _MLA_BLOCK * shape.head_size * shape.kv_bytes_per_element
    kernels = [KernelWork(family="flashmla_fwd", iters=((iters, busy * per_part),), bytes_per_iter=block_bytes,
                          hbm_bytes_per_iter=block_bytes // mblocks,
                          idle_programs=(parts - busy) * per_part, head_dim=next_power_of_2(shape.head_size),
                          occupancy=1, blend_power=MLA_BLEND_POWER)]
    comb = _kernel(plan, KernelKind.FLASHMLA_COMBINE)
    if comb is not None and comb.working_programs:
        tiles = comb.grid[2] if len(comb.grid) == 3 else 1
        pairs = [(s, q * tiles) for s, q in zip(plan.splits, shape.query_lens) if s > 1]
        # grid (B * s_q, 1, cdiv(h_q, 8)): x the requests' tokens in batch order (those of unsplit requests exit at
        # once), z the head tiles; a program reads its request's splits one after another
        grid_order: list[tuple[Row, int]] = []
        add_block(grid_order, row_runs((s, q) for s, q in zip(plan.splits, shape.query_lens) if s > 1), tiles)
        kernels.append(KernelWork(family="flashmla_combine", iters=_hist(pairs),
                                  bytes_per_iter=cdiv(shape.num_heads, tiles) * (4 * shape.head_size_v + 4),
                                  idle_programs=max(0, comb.programs - comb.working_programs),
                                  head_dim=next_power_of_2(shape.head_size_v), order=tuple(grid_order)))
    # the combine kernel starts before the main kernel ends (programmatic dependent launch: on the H200 the graph
    # replay took 0.3 us less than the two kernels' profiled durations, where FA3's and FlashInfer's pairs took
    # 1.1-1.5 us more), so its launch adds no gap
    return LaunchWork(kernel="flashmla", splits=max(plan.splits or (1,)), kernels=tuple(kernels),
                      overlapped_launches=len(kernels) - 1, label=f"{parts} SM parts")


def fa2_work(plan: LaunchPlan, shape: WorkShape) -> LaunchWork:
    """flash-attn 2's decode (launchers.flash_attn2): grid (m-blocks, num_splits, B x h_k) for the split kernel, or
    (m-blocks, B, h_k); each program reads its split's kBlockN blocks of one KV head (an empty split's program
    reads none but starts and writes its partial state);
    the combine kernel's programs each merge kBlockM rows, reading every split's partial state (families fa2_fwd,
    fa2_fwd_plain for flash_fwd_kernel, fa2_combine)."""
    main = _kernel(plan, KernelKind.FA2_FWD)
    if main is None:
        raise ConfigError(f"no flash_fwd kernel in the {plan.system} plan")
    det = plan.details_as(Fa2Details)
    bn, per_split = det.kBlockN, det.n_blocks_per_split
    d, dv, kvb = shape.head_size, shape.head_size_v, shape.kv_bytes_per_element
    s = max(plan.splits or (1,))
    mb_heads = main.grid[0] * shape.num_kv_heads  # the m-blocks of every KV head of one sequence
    pairs: list[tuple[int, int]] = []
    for L, ne in zip(shape.seq_lens, plan.nonempty_splits):
        pairs += [(u, n * mb_heads) for u, n in _pieces(cdiv(L, bn), ne, per_split if s > 1 else 0)]
        if s > 1:  # an empty split's programs still write their zero output and -inf LSE for the combine kernel
            pairs.append((0, (s - ne) * mb_heads))
    work = sum(n for _, n in pairs)
    # flash_fwd_splitkv_kernel (split, or forced by a paged cache) and flash_fwd_kernel are two kernels: on the
    # H200 the second took 1.45x as long on the same grid (capture-fa2-h200-contiguous.jsonl against the paged run)
    family = "fa2_fwd" if main.constexprs["split_kernel"] else "fa2_fwd_plain"
    kernels = [KernelWork(family=family, iters=_hist(pairs), bytes_per_iter=bn * (d + dv) * kvb,
                          idle_programs=max(0, main.programs - work), head_dim=next_power_of_2(d),
                          blend_power=FA2_BLEND_POWER)]
    comb = _kernel(plan, KernelKind.FA2_COMBINE)
    if comb is not None:
        rows = int(comb.constexprs["kBlockM"])
        kernels.append(KernelWork(family="fa2_combine", iters=((s, comb.programs),), bytes_per_iter=rows * (4 * dv + 4),
                                  head_dim=next_power_of_2(dv)))
    return LaunchWork(kernel="fa2", splits=s, kernels=tuple(kernels), label=f"num_splits {s}")


#: tokens of one modelled XQA loop iteration: mha.cu reads 256-token tiles (mha_sm90.cu 64-token ones) in pieces of
#: 64-token V tiles (mha.cu L106-124, cacheVTileSeqLen 64 on SM90), and a partial last tile reads what it holds
XQA_STEP_TOKENS = 64


def xqa_family(sm90: bool, head_elems: int) -> str:
    """The time-model family of an XQA kernel: the Hopper fp8 kernel (mha_sm90.cu), or mha.cu, whose 256-wide heads
    are a family of their own (their steps cost more than twice a 128-wide head's on the H100: four MMA warps per
    group instead of two, mha.cu L95-98)."""
    if sm90:
        return "xqa_sm90"
    return "xqa_wide" if head_elems >= 256 else "xqa"


def _xqa_cta_steps(L: int, subseqs: int, tile: int) -> list[tuple[int, int]]:
    """(64-token steps of one CTA, how many such CTAs) for a request of ``L`` tokens over ``subseqs`` sub-sequences:
    sub-sequence i reads the tiles i, i + n, i + 2n, ... (mha.cu L1797-1804, mha_sm90.cu L716-761); the one that
    holds the last tile reads only what the request has there; the sub-sequences past the last tile read none."""
    tiles = cdiv(L, tile)
    q, r = divmod(tiles, subseqs)
    full = tile // XQA_STEP_TOKENS
    last = cdiv(L - (tiles - 1) * tile, XQA_STEP_TOKENS) if tiles else 0
    owner = (tiles - 1) % subseqs if tiles else -1  # the sub-sequence that reads the last tile
    out: list[tuple[int, int]] = []
    for n_tiles, count in ((q + 1, r), (q, subseqs - r)):
        if count <= 0:
            continue
        holds_last = (owner < r) if n_tiles == q + 1 else (owner >= r)
        if holds_last and n_tiles:
            out.append((n_tiles * full - full + last, 1))
            count -= 1
        if count:
            out.append((n_tiles * full, count))
    return out


def xqa_work(plan: LaunchPlan, shape: WorkShape) -> LaunchWork:
    """XQA's ``kernel_mha`` (FlashInfer's and TensorRT-LLM's): one CTA per (sub-sequence, KV head, request) holds the
    KV head's whole query group and reads its strided 256-token tiles (64 on the fp8 Hopper kernel) in 64-token
    steps; mha.cu runs every CTA, an empty one too (it writes an empty partial, L2615); mha_sm90.cu's CTAs past a
    request's tiles return at once (L707-724). The last CTA of each (request, KV head) merges the sub-sequences'
    partials in the same kernel (family xqa_merge, no launch of its own): a partial is the group's rows of the padded
    head plus a row max and sum."""
    main = plan.main
    if main.kind not in (KernelKind.XQA_MHA, KernelKind.XQA_MHA_SM90):
        raise ConfigError(f"no XQA kernel in the {plan.system} plan")
    sm90 = main.kind is KernelKind.XQA_MHA_SM90
    tile = int(main.constexprs["tile_tokens"])
    n = int(main.constexprs["nbSubSeqPerSeq"])
    d, dv, kvb, h_kv = shape.head_size, shape.head_size_v, shape.kv_bytes_per_element, shape.num_kv_heads
    pairs: list[tuple[int, int]] = []
    idle = 0
    for L, s in zip(shape.seq_lens, plan.splits):
        pairs += [(u, c * h_kv) for u, c in _xqa_cta_steps(L, s, tile)]
        idle += (n - s) * h_kv  # mha_sm90.cu only: its splits are per request
    # the SM side works on the head padded to 64 / 128 / 256 / 512 (mha.h L33-36: a head dim of 96 computes as 128),
    # HBM reads the cache's real rows
    padded = next_power_of_2(max(d, 64))
    kernels = [KernelWork(family=xqa_family(sm90, padded), iters=_hist(pairs),
                          bytes_per_iter=XQA_STEP_TOKENS * 2 * padded * kvb,
                          hbm_bytes_per_iter=XQA_STEP_TOKENS * (d + dv) * kvb, idle_programs=idle,
                          head_dim=padded, occupancy=None if sm90 else 1)]
    merged = [(s, h_kv) for s in plan.splits if s > 1]
    if merged:
        g = shape.num_heads // h_kv
        rows = g if sm90 else cdiv(g, 16) * 16
        kernels.append(KernelWork(family="xqa_sm90_merge" if sm90 else "xqa_merge", iters=_hist(merged),
                                  bytes_per_iter=rows * (next_power_of_2(dv) * 2 + 8), head_dim=next_power_of_2(dv)))
    return LaunchWork(kernel=plan.system, splits=max(plan.splits or (1,)), kernels=tuple(kernels),
                      overlapped_launches=len(kernels) - 1, label=f"{n} sub-sequences")


#: each timed backend's work function (its time family); tests/test_backend_table.py checks every TIMED_BACKENDS has one
WORK: dict[Backend, Callable[[LaunchPlan, WorkShape], LaunchWork]] = {
    Backend.FLASHINFER: lambda plan, shape: flashinfer_work(plan, shape, tensor_cores=False),
    Backend.FLASHINFER_TC: lambda plan, shape: flashinfer_work(plan, shape, tensor_cores=True),
    Backend.FA3: fa3_work,
    Backend.FLASHMLA: flashmla_work,
    Backend.FA2: fa2_work,
    Backend.XQA: xqa_work,
    Backend.XQA_FP8: xqa_work,
    Backend.TRTLLM_XQA: xqa_work,
}


def backend_work(plan: LaunchPlan, shape: WorkShape, kernel: str) -> LaunchWork:
    """The work of a compiled backend's plan (``kernel``: one of BACKEND_KERNELS)."""
    fn = WORK.get(Backend(kernel)) if kernel in BACKEND_KERNELS else None
    if fn is None:
        raise ConfigError(f"no backend time model for {kernel!r}; known: {', '.join(BACKEND_KERNELS)}")
    return fn(plan, shape)
