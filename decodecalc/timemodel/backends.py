"""The work of the default backends' launches - FlashInfer (CUDA-core and tensor-core decode), FlashAttention-3
and FlashMLA - read from their launchers' :class:`~decodecalc.launchers.base.LaunchPlan` (the kernels' kinds,
grids, per-sequence splits and the constants the launchers recorded), never from kernel names.

Every loop unit here is what the launcher's upstream rule cuts the KV sequence into:

* FlashInfer: one KV page (``block_size`` tokens) of one KV head; a CTA reads its chunk
  (``kv_chunk_size_in_pages`` pages, the last chunk the rest); the tensor-core grid's work items are recorded in
  grid order (request-major x-line, once per KV head). The merge kernel is persistent: CTA j merges the
  (token, query head) rows j, j + grid, ... reading each row's partial states (``d_v`` outputs in the query
  dtype + one fp32 LSE per split). The decode kernel's
  resident CTAs/SM is the occupancy its plan used (measured, decodecalc/data/occupancy.yaml); the tensor-core
  (prefill) kernel's is the 2 CTAs/SM its plan assumes (the captured kernels' registers give 2 as well).
* FA3: one ``kBlockN`` block of one KV head per work tile (m-block x head x split), tiles list-scheduled over
  the persistent grid of one CTA per SM; empty splits exit at once; the combine kernel reads each row's splits.
* FlashMLA: one 64-token block of the 576-wide latent per iteration; each busy SM part takes its share of the
  blocks (plus the fixed per-request overhead the scheduler counts); the combine kernel reads the splits of the
  requests that were split.
"""

from __future__ import annotations

from collections import Counter

from decodecalc.derived import cdiv, next_power_of_2
from decodecalc.errors import ConfigError
from decodecalc.launchers import flashmla
from decodecalc.launchers.base import KernelKind, KernelLaunch, LaunchPlan
from decodecalc.timemodel.work import KernelWork, LaunchWork, Order, Row, WorkShape, add_block, row_runs

#: the --kernel / compare policy names whose launches this module describes
BACKEND_KERNELS = ("flashinfer", "flashinfer-tc", "fa3", "flashmla")
BACKEND_KINDS = frozenset({KernelKind.FLASHINFER_DECODE, KernelKind.FLASHINFER_PREFILL, KernelKind.FLASHINFER_MERGE,
                           KernelKind.FA3_FWD, KernelKind.FA3_COMBINE, KernelKind.FLASHMLA_DECODE,
                           KernelKind.FLASHMLA_COMBINE})
_MLA_BLOCK = flashmla.block_size_n
#: CUDA-core decode: heads per KV head below which a step is bound by its bytes (fitted on the H200 training
#: shapes, benchmarks/fit_backends_h200.py: 2.6 beat 2.0 there), and the resident threads it is relative to
CUDA_CORE_G0 = 2.6
CUDA_CORE_REF_THREADS = 9 * 128  # the resident threads per SM that CUDA_CORE_G0 was fitted relative to
#: bytes of K and V one tensor-core work step reads (the model's unit of a step, chosen here, not upstream's)
TC_STEP_BYTES = 64 * 1024


def _hist(pairs: list[tuple[int, int]], scale: int = 1) -> tuple[tuple[int, int], ...]:
    out: Counter[int] = Counter()
    for v, n in pairs:
        if n > 0:
            out[v] += n * scale
    return tuple(sorted(out.items()))


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
    per_cta = Counter(sum(costs[j::n]) for j in range(min(n, len(costs))))
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
    chunk = plan.details.get("kv_chunk_size_in_pages") or 0
    split = bool(plan.details.get("split_kv"))
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
        # per token for QK and again for PV, g / 4 per KV byte, done by the SM's resident threads (occupancy x
        # block): above CUDA_CORE_G0 heads per KV head a step costs like more bytes, in proportion to g over the
        # resident threads of the 4:1-group kernel (9 CTAs x 128 threads on the H200)
        bdx, bdy, bdz, tile, _ = main.constexprs["tiling"]
        step = tile * bdy * bdz
        resident = int(main.constexprs.get("occupancy") or 1) * bdx * bdy * bdz
        g = shape.num_heads // h_kv
        factor = max(1.0, g / CUDA_CORE_G0 * CUDA_CORE_REF_THREADS / resident)
        iters = tuple((cdiv(u * page, step), n) for u, n in iters)
        unit_bytes = int(step * (d + dv) * kvb * factor)
    if tensor_cores:
        # tensor cores (the prefill kernel at CTA_TILE_Q 16): one step of its KV loop takes CTA_TILE_KV tokens, 64 KiB
        # of bf16 K and V: 128 tokens at d 128, 64 at 256, 256 at 64 (the captured kernels' shared memory,
        # (16 + 2 * CTA_TILE_KV) * d * 2 bytes: 69,632 / 73,728 / 67,584)
        step = max(16, TC_STEP_BYTES // ((d + dv) * kvb))
        iters = tuple((cdiv(u * page, step), n) for u, n in iters)
        unit_bytes = step * (d + dv) * kvb
        # grid (padded_batch_size, 1, num_kv_heads): the x-line of work items (request-major) once per KV head,
        # the padding past new_batch_size exiting at once (prefill.cuh BatchPrefillWithPagedKVCacheKernel)
        blocks: list[tuple[Row, int]] = []
        add_block(blocks, row_runs((cdiv(u * page, step), 1) for u in line), h_kv)
        order = tuple(blocks)
    occ = 2 if tensor_cores else int(main.constexprs.get("occupancy") or 0) or None  # PrefillPlanImpl: 2 CTAs/SM
    kernels = [KernelWork(family="flashinfer_tc" if tensor_cores else "flashinfer_decode", iters=iters,
                          bytes_per_iter=unit_bytes, idle_programs=max(0, main.programs - working),
                          head_dim=next_power_of_2(d), occupancy=occ, order=order)]
    merge = _kernel(plan, KernelKind.FLASHINFER_MERGE)
    if merge is not None:
        kernels.append(_persistent_merge(shape, plan, merge, row_bytes=dv * shape.q_bytes + 4))
    return LaunchWork(kernel="flashinfer-tc" if tensor_cores else "flashinfer", splits=max(plan.splits or (1,)),
                      kernels=tuple(kernels), label=f"chunk {chunk} pages" if split else "unsplit")


def fa3_work(plan: LaunchPlan, shape: WorkShape) -> LaunchWork:
    main = _kernel(plan, KernelKind.FA3_FWD)
    if main is None:
        raise ConfigError(f"no FlashAttnFwdSm90 kernel in the {plan.system} plan")
    det = plan.details
    kbn, kbm, pack = int(det["kBlockN"]), int(det["kBlockM"]), bool(det["pack_gqa"])
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
    persistent = bool(det.get("varlen"))  # VarlenDynamicPersistentTileScheduler: one CTA per SM
    kernels = [KernelWork(family="fa3_fwd", iters=_hist(pairs), bytes_per_iter=kbn * (d + dv) * kvb,
                          idle_programs=empty, head_dim=next_power_of_2(d), occupancy=1 if persistent else None)]
    comb = _kernel(plan, KernelKind.FA3_COMBINE)
    if comb is not None:
        kbm_c = int(comb.constexprs.get("kBlockM") or 8)
        kernels.append(_rows_merge(shape, plan, "fa3_combine", comb, row_bytes=4 * dv + 4, rows_per_program=kbm_c))
    return LaunchWork(kernel="fa3", splits=max(plan.splits or (1,)), kernels=tuple(kernels),
                      label=f"num_splits {det.get('num_splits_static')}")


def flashmla_work(plan: LaunchPlan, shape: WorkShape) -> LaunchWork:
    main = _kernel(plan, KernelKind.FLASHMLA_DECODE)
    if main is None:
        raise ConfigError(f"no flash_fwd_splitkv_mla_kernel in the {plan.system} plan")
    det = plan.details
    parts, busy = int(det["num_sm_parts"]), max(1, int(det["busy_parts"]))
    pieces = [tuple(p) for p in det["blocks_per_split"]]
    overhead = flashmla.fixed_overhead_num_blocks
    load = sum(sum(p) for p in pieces) + overhead * sum(len(p) for p in pieces)
    per_part = main.programs // max(parts, 1)
    kernels = [KernelWork(family="flashmla_fwd", iters=((cdiv(load, busy), busy * per_part),),
                          bytes_per_iter=_MLA_BLOCK * shape.head_size * shape.kv_bytes_per_element,
                          idle_programs=(parts - busy) * per_part, head_dim=next_power_of_2(shape.head_size),
                          occupancy=1)]
    comb = _kernel(plan, KernelKind.FLASHMLA_COMBINE)
    if comb is not None and comb.working_programs:
        rows = comb.grid[2] if len(comb.grid) == 3 else 1
        pairs = [(s, q * rows) for s, q in zip(plan.splits, shape.query_lens) if s > 1]
        kernels.append(KernelWork(family="flashmla_combine", iters=_hist(pairs),
                                  bytes_per_iter=cdiv(shape.num_heads, rows) * (4 * shape.head_size_v + 4),
                                  idle_programs=max(0, comb.programs - comb.working_programs),
                                  head_dim=next_power_of_2(shape.head_size_v)))
    return LaunchWork(kernel="flashmla", splits=max(plan.splits or (1,)), kernels=tuple(kernels),
                      label=f"{parts} SM parts")


def backend_work(plan: LaunchPlan, shape: WorkShape, kernel: str) -> LaunchWork:
    """The work of a FlashInfer / FA3 / FlashMLA plan (``kernel``: one of BACKEND_KERNELS)."""
    if kernel in ("flashinfer", "flashinfer-tc"):
        return flashinfer_work(plan, shape, tensor_cores=kernel == "flashinfer-tc")
    if kernel == "fa3":
        return fa3_work(plan, shape)
    if kernel == "flashmla":
        return flashmla_work(plan, shape)
    raise ConfigError(f"no backend time model for {kernel!r}; known: {', '.join(BACKEND_KERNELS)}")
