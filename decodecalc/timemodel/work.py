"""The work a launch does: :class:`KernelWork` (a histogram of loop trip counts per kernel) and
:class:`LaunchWork`, built from a launcher's :class:`~decodecalc.launchers.base.LaunchPlan`.

Every upstream rule used here (vLLM's BLOCK_M/BLOCK_Q, TILE_SIZE and segment early exit, SGLang's
split count, split length and stage-1 blocking) is called from the launcher module that mirrors it
(:mod:`decodecalc.launchers.vllm_unified`, :mod:`decodecalc.launchers.sglang_triton`); this module
only turns those launches into loop trip counts and bytes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from decodecalc.derived import cdiv, next_power_of_2
from decodecalc.launchers import sglang_triton as sg
from decodecalc.launchers import vllm_unified as vu
from decodecalc.timemodel.profile import occupancy


#: one x-line of a grid: runs (loop iterations, programs) in grid order
Row = tuple[tuple[int, int], ...]
#: a grid's working programs in dispatch order: rows, each repeated (see :class:`KernelWork`)
Order = tuple[tuple[Row, int], ...]


def row_runs(entries: Iterable[tuple[int, int]]) -> Row:
    """Compress (iterations, programs) entries given in grid order into runs (equal neighbours merged)."""
    out: list[list[int]] = []
    for i, k in entries:
        if k <= 0:
            continue
        if out and out[-1][0] == i:
            out[-1][1] += k
        else:
            out.append([i, k])
    return tuple((i, k) for i, k in out)


def add_block(blocks: list[tuple[Row, int]], row: Row, repeats: int) -> None:
    """Append ``row`` repeated ``repeats`` times; a one-run row merges into a one-run block of the same
    iterations before it, an equal row adds repeats."""
    if not row or repeats <= 0:
        return
    if len(row) == 1 and repeats > 1:
        row, repeats = ((row[0][0], row[0][1] * repeats),), 1
    if blocks:
        prow, prep = blocks[-1]
        if prow == row:
            blocks[-1] = (row, prep + repeats)
            return
        if len(row) == 1 and len(prow) == 1 and prep == 1 and prow[0][0] == row[0][0]:
            blocks[-1] = (((row[0][0], prow[0][1] + row[0][1]),), 1)
            return
    blocks.append((row, repeats))


def planes_order(per_seq: Sequence[tuple[int, int, int, int]], planes: int, repeats: int) -> Order:
    """Grid order of the working programs of a (x, ``repeats``, ``planes``) grid whose x line holds each
    sequence's ``q`` programs in batch order: sequence i's programs run ``full`` loop iterations in the
    planes z < a - 1, ``last`` in plane a - 1, and exit at once past it (left out). ``per_seq``: (a, full,
    last, q) per sequence. Planes with the same rows are built once (rows change only where some
    sequence's a - 1 or a falls); programs that exit at once between the working ones (vLLM's spare q
    blocks) are left out too."""
    # neighbours with equal cells merged (their programs summed); cells without programs dropped
    cells: list[tuple[int, int, int]] = []  # (a, full, last)
    progs: list[int] = []
    prev = None
    for c in per_seq:
        if c == prev:
            progs[-1] += c[3]
            continue
        prev = c
        cells.append(c[:3])
        progs.append(c[3])
    live = [(a, full, last, k) for (a, full, last), k in zip(cells, progs) if k > 0]
    actives = {a for a, _, _ in cells}
    cuts = sorted({0, planes} | {z for a in actives for z in (a - 1, a) if 0 < z < planes})
    blocks: list[tuple[Row, int]] = []
    for z0, z1 in zip(cuts, cuts[1:]):
        # the row of plane z0 (row_runs inlined: this loop is the scalar model's hottest on long batches)
        its: list[int] = []
        ks: list[int] = []
        for a, full, last, k in live:
            if z0 >= a:
                continue
            i = full if z0 < a - 1 else last
            if its and its[-1] == i:
                ks[-1] += k
            else:
                its.append(i)
                ks.append(k)
        add_block(blocks, tuple(zip(its, ks)), repeats * (z1 - z0))  # plane z's rows then z + 1's: one row repeated
    return tuple(blocks)


def order_runs(order: Order) -> int:
    """Runs of equal programs in a grid order once its rows are written out (what MAX_EXACT_RUNS counts)."""
    return sum(len(row) * rep for row, rep in order)


class WorkShape(Protocol):
    """The per-rank shape the work functions read: a :class:`~decodecalc.workload.Workload`, or the
    calibration :class:`~decodecalc.timemodel.fit.Shape`."""

    @property
    def num_heads(self) -> int: ...
    @property
    def num_kv_heads(self) -> int: ...
    @property
    def seq_lens(self) -> tuple[int, ...]: ...
    @property
    def query_lens(self) -> tuple[int, ...]: ...
    @property
    def head_size(self) -> int: ...
    @property
    def head_size_v(self) -> int: ...
    @property
    def kv_bytes_per_element(self) -> int: ...
    @property
    def q_bytes(self) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelWork:
    """What one kernel's programs do: a histogram of loop trip counts of the working programs and, for the
    kernels whose launcher fixes the grid, the same programs in grid order (``order``).

    ``order`` is the order the GPU's block scheduler dispatches the working programs in (blockIdx.x
    fastest, then y, then z), compressed: blocks ``(row, repeats)``, each a row of runs ``(iterations,
    programs)`` in grid order, repeated ``repeats`` times (a row is one x-line of the grid: the batch's
    sequences; the repeats are the y dimension, and equal z planes). Programs that exit at once are left
    out (``idle_programs`` counts them). Empty: the order was not recorded, and the scheduler takes the
    programs longest first (the backends of :mod:`decodecalc.timemodel.backends`)."""

    family: str
    iters: tuple[tuple[int, int], ...]  # (iterations per program, number of such programs)
    bytes_per_iter: int
    idle_programs: int = 0
    head_dim: int = 128  # padded head dim: selects the family's occupancy
    #: resident programs per SM known from the launch itself (a measured occupancy the plan used, a persistent
    #: grid of one CTA per SM); None: the family's occupancy for ``head_dim``
    occupancy: int | None = None
    order: Order = ()
    #: bytes per iteration that reach HBM, where several programs read the same bytes at about the same time
    #: and all but the first hit L2 (FlashMLA's query m-blocks of one SM part read the same latent block);
    #: None: every program's bytes come from HBM (``bytes_per_iter``). The SM term still counts bytes_per_iter.
    hbm_bytes_per_iter: int | None = None
    #: how an iteration's SM-side and HBM-side times combine: 0, the larger of the two; p > 0, their L^p norm
    #: (a program's loads wait longer as the GPU's HBM traffic nears its bandwidth, well before the corner)
    blend_power: float = 0.0
    #: separate contiguous runs of memory one iteration's K and V loads of one program gather
    #: (:func:`kv_runs_per_iter`); 0: not modelled (the backends)
    runs_per_iter: int = 0
    #: the programs are tiles that persistent CTAs (``occupancy`` per SM) take one after another (FA3's varlen tile
    #: scheduler): a CTA's prologue once, each further tile its family's ``tile_overhead_s``
    persistent: bool = False

    @property
    def runs(self) -> int:
        """Runs of equal programs in ``order`` once its rows are written out."""
        return order_runs(self.order)

    @property
    def programs(self) -> int:
        return sum(n for _, n in self.iters)

    @property
    def bytes(self) -> int:
        return sum(i * n for i, n in self.iters) * self.bytes_per_iter

    @property
    def hbm_bytes(self) -> int:
        """Bytes the working programs bring in from HBM (``bytes`` where every program reads its own)."""
        b = self.bytes_per_iter if self.hbm_bytes_per_iter is None else self.hbm_bytes_per_iter
        return sum(i * n for i, n in self.iters) * b


#: SGLang 0.5.23's ``get_num_kv_splits_triton`` (sglang/kernels/ops/attention/metadata.py), launched on a (1,) grid
#: by ``TritonAttnBackend.get_num_kv_splits`` before each adaptive decode: one program over the batch
SPLIT_COUNT_KERNEL = "split-count"
#: per-sequence split counts written by a tensor copy, as benchmarks/validate_tune_h200.py runs the proposed rules
COPY_KERNEL = "copy"


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchWork:
    kernel: str  # "vllm" | "sglang" | "reference"
    splits: int  # 1 = unsplit
    kernels: tuple[KernelWork, ...]
    extra_launches: int = 0  # tiny kernels counted for their launch only (SGLang's split-count kernel)
    #: kernels whose launch overlaps the kernel before them (programmatic dependent launch): no launch gap counted
    overlapped_launches: int = 0
    label: str = ""
    #: query heads per KV head (heads one program serves together in the grouped kernels)
    group_size: int = 1
    #: what the ``extra_launches`` are (SPLIT_COUNT_KERNEL or COPY_KERNEL; "" for none): they cost a launch gap
    #: each in the physics and differ in the measured residuals
    aux_kernel: str = ""
    #: KV heads per rank (0: not told; the residual map's layout cells are keyed by it)
    kv_heads: int = 0


def _hist_weighted(pairs: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """``_hist`` of values given with their multiplicities (zero weights dropped): equal sequences are
    counted once, so a uniform batch costs O(distinct lengths), not O(batch x splits)."""
    out: dict[int, int] = {}
    for v, w in pairs:
        if w:
            out[v] = out.get(v, 0) + w
    return tuple(sorted(out.items()))


def _scaled(h: tuple[tuple[int, int], ...], k: int) -> tuple[tuple[int, int], ...]:
    return tuple((i, n * k) for i, n in h)


def vllm_3d_cells(seq_len: int, segments: int, tile: int) -> tuple[int, int, int]:
    """(active segments, loop iterations of each full segment, of the last active one) of a sequence of
    ``seq_len`` keys on vLLM's 3D kernel with ``segments`` segments of ``tile``-key tiles (the launcher's
    tiles_per_segment and active_segments); elementwise on arrays of lengths >= 1 (tune's batch evaluator)."""
    tps = vu.tiles_per_segment(seq_len, segments, tile)
    active = vu.active_segments(seq_len, segments, tile)
    return active, tps, cdiv(seq_len - (active - 1) * tps * tile, tile)


def sglang_cells(seq_len: int, splits: int, block_n: int) -> tuple[int, int, int]:
    """(non-empty splits, loop iterations of each full split, of the last non-empty one) of a sequence of
    ``seq_len`` keys in ``splits`` splits on SGLang's stage 1 (``block_n`` keys per iteration): every non-empty
    split but the last reads kv_len_per_split keys, the last the rest; elementwise on arrays of lengths >= 1."""
    kvps = sg.kv_len_per_split(seq_len, splits)
    ne = cdiv(seq_len, kvps)
    return ne, cdiv(kvps, block_n), cdiv(seq_len - (ne - 1) * kvps, block_n)


def vllm_work(shape: WorkShape, *, splits: int, use_3d: bool | None = None, tile: int | None = None,
              prefix: str = "vllm") -> LaunchWork:
    """vLLM 0.33 ``unified_attention``: 2D (splits=1) or 3D with ``splits`` segments.

    The launch as :mod:`decodecalc.launchers.vllm_unified` models it: BLOCK_M / BLOCK_Q
    (:func:`~decodecalc.launchers.vllm_unified.block_shape`), total_num_q_blocks = T // BLOCK_Q + B,
    TILE_SIZE (:func:`~decodecalc.launchers.vllm_unified.get_tile_size`, no sliding window, unless
    ``tile`` is given), the 3D segment early exit
    (:func:`~decodecalc.launchers.vllm_unified.tiles_per_segment`, ``active_segments``) and
    reduce_segments over (T, h).
    """
    if use_3d is None:
        use_3d = splits > 1
    h, h_kv = shape.num_heads, shape.num_kv_heads
    _, block_q = vu.block_shape(h // h_kv)
    seq_lens, q_lens = tuple(shape.seq_lens), tuple(shape.query_lens)
    b = len(seq_lens)
    total_q_blocks = sum(q_lens) // block_q + b
    working_q_blocks = [cdiv(q, block_q) for q in q_lens]
    idle_q = max(0, total_q_blocks - sum(working_q_blocks))
    d, dv = shape.head_size, shape.head_size_v
    kvb = shape.kv_bytes_per_element
    kernel = "vllm" if prefix == "vllm" else "reference-vllm"
    # an fp8 KV cache makes the layer quantize the query to fp8 (vllm_unified._query_element_size)
    element_size = min(shape.q_bytes, kvb)
    if not use_3d:
        tile = tile or vu.get_tile_size(d, 0, element_size, is_prefill=True)
        groups = Counter(zip(seq_lens, working_q_blocks))
        iters = _hist_weighted((cdiv(L, tile), nq * c) for (L, nq), c in groups.items())
        # grid (total_num_q_blocks, num_kv_heads): each sequence's q blocks along x, the KV heads along y
        its = {L: cdiv(L, tile) for L in set(seq_lens)}
        order = planes_order([(1, 0, its[L], nq) for L, nq in zip(seq_lens, working_q_blocks)], 1, h_kv)
        main = KernelWork(family=f"{prefix}_2d", iters=_scaled(iters, h_kv), bytes_per_iter=tile * (d + dv) * kvb,
                          idle_programs=idle_q * h_kv, head_dim=next_power_of_2(d), order=order,
                          runs_per_iter=kv_runs_per_iter(h_kv, tile, KV_PAGE_TOKENS))
        return LaunchWork(kernel=kernel, splits=1, kernels=(main,), label="2D",
                          group_size=h // h_kv, kv_heads=h_kv)
    tile = tile or vu.get_tile_size(d, 0, element_size, is_prefill=False)
    s = splits
    per: list[tuple[int, int]] = []  # (trip count, programs)
    idle = idle_q * s
    seg: dict[int, tuple[int, int, int]] = {}  # L -> (active segments, tiles per segment, tiles of the last)
    for (L, nq), c in Counter(zip(seq_lens, working_q_blocks)).items():
        active, tps, last = vllm_3d_cells(L, s, tile)
        seg[L] = (active, tps, last)
        per += [(tps, (active - 1) * nq * c), (last, nq * c)]
        idle += (s - active) * nq * c
    # grid (total_num_q_blocks, num_kv_heads, segments): x the sequences' q blocks, y the KV heads, z the segment
    order = planes_order([(*seg[L], nq) for L, nq in zip(seq_lens, working_q_blocks)], s, h_kv)
    main = KernelWork(family=f"{prefix}_3d", iters=_scaled(_hist_weighted(per), h_kv), bytes_per_iter=tile * (d + dv) * kvb,
                      idle_programs=idle * h_kv, head_dim=next_power_of_2(d), order=order,
                      runs_per_iter=kv_runs_per_iter(h_kv, tile, KV_PAGE_TOKENS))
    d_pad = next_power_of_2(dv)
    family, bytes_per_iter, occ = reduce_segments_kernel(s, d_pad, prefix)
    reduce = KernelWork(family=family, iters=((1, sum(q_lens) * h),), bytes_per_iter=bytes_per_iter,
                        head_dim=d_pad, order=((((1, sum(q_lens) * h),), 1),), occupancy=occ)
    return LaunchWork(kernel=kernel, splits=s, kernels=(main, reduce), label=f"3D S={s}",
                      group_size=h // h_kv, kv_heads=h_kv)


#: fp32 tile elements of ``reduce_segments`` its 128 threads hold in registers before the compiled kernel spills
#: (255 registers a thread: Triton 3.6 on the H200 compiles S x d_pad = 32,768 to 255 registers and 22 spills, 65,536
#: and more to 32 registers and 1,100+ spills: benchmarks/results/probe_vllm_B4_L32k.json)
REDUCE_REGISTER_TILE = 32768


def reduce_segments_spills(segments: int, head_size_padded: int) -> bool:
    """Whether vLLM's ``reduce_segments`` keeps its (NUM_SEGMENTS_PER_SEQ, HEAD_SIZE_PADDED) tile in local memory."""
    return segments * head_size_padded > REDUCE_REGISTER_TILE


#: the family of vLLM's reduce_segments past its register tile (reduce_segments_spills)
REDUCE_SPILL_FAMILY = "vllm_reduce_spill"


def reduce_segments_kernel(segments: int, head_size_padded: int, prefix: str = "vllm") -> tuple[str, int, int | None]:
    """(family, bytes per program, resident programs per SM) of vLLM's ``reduce_segments``: it reads each segment's
    max, sum and output row (``segments x (4 d_pad + 8)`` bytes); past REDUCE_REGISTER_TILE its tile spills, and the
    ``vllm_reduce_spill`` family times the tile's ``segments x d_pad`` fp32 through local memory instead (measured
    on the H200: 90 us for 128 programs at 512 segments, d 128, where the registers' model says 11;
    benchmarks/fit_reduce_spill_h200.py). decodecalc's reference kernel keeps its own family."""
    if prefix != "vllm":
        return f"{prefix}_reduce", segments * (4 * head_size_padded + 8), None
    if reduce_segments_spills(segments, head_size_padded):
        return REDUCE_SPILL_FAMILY, segments * head_size_padded * 4, occupancy(32, 2048, 4)
    return "vllm_reduce", segments * (4 * head_size_padded + 8), reduce_segments_occupancy(segments, head_size_padded)


#: tokens per run of adjacent KV-cache slots the time model assumes: vLLM's default block size, and the measured SGLang
#: caches' (decodecalc.verify.kv_cache gives each sequence 16-token blocks in a random order; a live SGLang token pool,
#: page size 1, holds a prompt's slots adjacent and a decoded token's wherever the free list had one)
KV_PAGE_TOKENS = 16


def kv_runs_per_iter(num_kv_heads: int, tokens_per_iter: int, page_tokens: int) -> int:
    """Contiguous runs of memory one iteration of an attention program reads for its K and V tiles. Both engines
    lay a KV cache out as [slots, num_kv_heads, head_dim] in pages of ``page_tokens`` adjacent slots: with one KV head
    per rank a page of the program's tile is one run, else each token's row of the program's head is its own run of
    head_dim elements, the other heads' rows between them. The count is kept for profiles that fit a cost to it
    (``FamilyParams.run_s``); the shipped H200 profile does not (benchmarks/fit_timemodel.py RUN_KERNELS), because the
    interleaving does not explain SGLang's stage 1 by layout on the H200: 16:1 and 4:1 heads, one KV head and no
    interleaving, are as slow as 32:8; only 8:1 is fast (benchmarks/results/layouts-h200-unseen.json,
    calibrate-h200-thorough-measurements.json)."""
    if num_kv_heads == 1:
        return 2 * cdiv(tokens_per_iter, page_tokens)
    return 2 * tokens_per_iter


def reduce_segments_occupancy(segments: int, head_size_padded: int) -> int:
    """Resident programs per SM of vLLM's ``reduce_segments`` (triton_unified_attention.py 0.33.0 L700-797): its
    (NUM_SEGMENTS_PER_SEQ, HEAD_SIZE_PADDED) fp32 tile lives in the registers of its 128 threads (4 warps: Triton's
    default, the launch at L1211 sets none), so registers per thread grow with segments x head dim. Measured on the
    H200 (Triton 3.6, benchmarks/results/timemodel-h200-extra.json and -probe-waves.json): about 16 +
    S * d_pad / 128 registers, at least 24 (d128: 32 / 45 / 80 / 150 at 16 / 32 / 64 / 128 segments; d256 at 128
    segments: 255 and spills); 4 warps, 2 KB of shared memory."""
    regs = min(255, max(24, 16 + segments * head_size_padded // 128))
    return occupancy(regs, 2048, 4)


def sglang_stage1_family(mha: bool, kv_bytes_per_element: int, prefix: str = "sglang") -> str:
    """The time-model family of SGLang's stage 1: ``_fwd_kernel_stage1`` (MHA) or ``_fwd_grouped_kernel_stage1``, the
    grouped kernel with a 1-byte (fp8) KV cache its own family (``sglang_stage1_fp8``): Triton compiles it for fp8
    loads, and on the H200 it runs at 0.65-1.0x its bf16 time where halving the bytes predicts 0.6-0.76x
    (benchmarks/measure_kv_formats_h200.py, benchmarks/results/kv-formats-h200.json). decodecalc's reference
    kernels (``prefix`` ref_sglang) keep one stage-1 family."""
    if prefix != "sglang":
        return f"{prefix}_stage1"
    if mha:
        return "sglang_mha_stage1"
    return "sglang_stage1_fp8" if kv_bytes_per_element == 1 else "sglang_stage1"


def sglang_work(shape: WorkShape, *, splits: int | Sequence[int], max_kv_splits: int | None = None,
                adaptive: bool = False, prefix: str = "sglang", mha: bool | None = None,
                aux_kernel: str = SPLIT_COUNT_KERNEL) -> LaunchWork:
    """SGLang 0.5.23 ``decode_attention_fwd``: stage 1 (B, head_tiles, max_kv_splits) with per-sequence
    split counts, split length rounded up to 32 (empty splits exit), stage 2 (B, h); the rules are
    :mod:`decodecalc.launchers.sglang_triton`'s (``kv_len_per_split``, ``head_tiles``, ``stage1_block_n``).

    Stage 1 is one of two kernels: ``_fwd_grouped_kernel_stage1`` (GQA / MQA: up to 16 query heads
    of one KV head per program, BLOCK_N 32 keys per iteration, ``tl.dot``; family ``sglang_stage1``)
    or, when num_heads == num_kv_heads (``mha``; from the shape when None), ``_fwd_kernel_stage1``
    (one query head per program, grid (B, h, max_kv_splits), BLOCK_N 64 keys of that head's K and V
    per iteration, an elementwise product and sum; family ``sglang_mha_stage1``); the family:
    :func:`sglang_stage1_family`. ``adaptive``: a small kernel writes the
    per-sequence split counts before stage 1 (``aux_kernel``: the engine's split-count kernel, or a copy)."""
    seq_lens = tuple(shape.seq_lens)
    n_i = tuple(splits) if not isinstance(splits, int) else (splits,) * len(seq_lens)
    max_s = max_kv_splits if max_kv_splits is not None else max(n_i)
    h, h_kv = shape.num_heads, shape.num_kv_heads
    d, dv = shape.head_size, shape.head_size_v
    kvb = shape.kv_bytes_per_element
    if mha is None:
        mha = sg.is_mha(h, h_kv)
    block_n, head_progs = sg.stage1_block_n(h, h_kv), sg.head_tiles(h, h_kv)
    stage1_family = sglang_stage1_family(mha, kvb, prefix)
    per: list[tuple[int, int]] = []  # (trip count, programs)
    idle = 0
    nonempty_per_seq: list[tuple[int, int]] = []
    cell: dict[tuple[int, int], tuple[int, int, int, int]] = {}  # (L, n) -> (nonempty splits, full, last, 1)
    for (L, n), c in Counter(zip(seq_lens, n_i)).items():
        ne, full, last = sglang_cells(L, n, block_n)
        nonempty_per_seq.append((ne, c))
        cell[(L, n)] = (ne, full, last, 1)
        per += [(full, (ne - 1) * c), (last, c)]
        idle += (max_s - ne) * c
    cells = [cell[k] for k in zip(seq_lens, n_i)]
    # stage 1 grid (B, head tiles, max_kv_splits); stage 2 grid (B, h), each program merging its sequence's splits
    stage1 = KernelWork(family=stage1_family, iters=_scaled(_hist_weighted(per), head_progs),
                        bytes_per_iter=block_n * (d + dv) * kvb, idle_programs=idle * head_progs,
                        head_dim=next_power_of_2(d), order=planes_order(cells, max_s, head_progs),
                        runs_per_iter=kv_runs_per_iter(h_kv, block_n, KV_PAGE_TOKENS))
    stage2 = KernelWork(family=f"{prefix}_stage2", iters=_scaled(_hist_weighted(nonempty_per_seq), h),
                        bytes_per_iter=4 * dv + 4, head_dim=next_power_of_2(dv),
                        order=planes_order([(1, 0, ne, 1) for ne, *_ in cells], 1, h))
    label = f"adaptive (max {max_s})" if adaptive else f"static S={max_s}"
    return LaunchWork(kernel="sglang" if prefix == "sglang" else "reference-sglang", splits=max(n_i),
                      kernels=(stage1, stage2), extra_launches=1 if adaptive else 0, label=label,
                      group_size=h // h_kv, aux_kernel=aux_kernel if adaptive else "", kv_heads=h_kv)
