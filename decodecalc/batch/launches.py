"""What every step of a block launches under one engine setting, as arrays of program classes.

A :class:`Recipe` stands for one way of launching every step (an engine setting, a forced split count, per-step
split counts from a rule). For a :class:`~decodecalc.batch.steps.Block` it gives :class:`LaunchArrays`: the
kernels' program classes (:class:`~decodecalc.batch.kernels.KernelArrays`), in the layout of the scalar
:class:`~decodecalc.timemodel.work.LaunchWork` that :meth:`Recipe.launch_work` builds for one step (the exact
reference the estimate samples). The upstream rules are the launcher modules' functions, applied to arrays
(``decodecalc.launchers.vllm_unified``, ``sglang_triton``); the per-sequence cells are the time model's
(``decodecalc.timemodel.work.vllm_3d_cells``, ``sglang_cells``). What is built here mirrors ``vllm_work`` and
``sglang_work`` program class by program class; tests/test_batch.py checks every histogram against them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from decodecalc.derived import cdiv, next_power_of_2
from decodecalc.launchers import sglang_triton as sg
from decodecalc.launchers import vllm_unified as vu
from decodecalc.launchers.base import KernelKind
from decodecalc.launchers.sglang_triton import SglangSettings, plan_sglang
from decodecalc.launchers.vllm_unified import VllmSettings, plan_vllm
from decodecalc.specs.gpus import GPUSpec
from decodecalc.timemodel import LaunchWork, sglang_work, vllm_work, work_for_plan
from decodecalc.timemodel.residuals import cell_key
from decodecalc.timemodel.work import (
    KV_PAGE_TOKENS,
    SPLIT_COUNT_KERNEL,
    kv_runs_per_iter,
    reduce_segments_kernel,
    sglang_cells,
    sglang_stage1_family,
    vllm_3d_cells,
)
from decodecalc.workload import Workload

from decodecalc.batch.arrays import elementwise
from decodecalc.batch.kernels import DELTAS, KernelArrays, Proxies
from decodecalc.batch.steps import Block

#: the scalar rules this module applies to arrays of lengths and splits
_cdiv = elementwise(cdiv)
_vllm_3d_cells = elementwise(vllm_3d_cells)
_sglang_cells = elementwise(sglang_cells)


@dataclass(frozen=True, eq=False)
class LaunchArrays:
    """What the rows ``rows`` (indices into a block's rows) launch: the kernels in the scalar LaunchWork's order,
    the launch gaps they pay, the residual-map cell of the main kernel, and the segments or splits (1: no split)."""

    rows: np.ndarray
    kernels: tuple[KernelArrays, ...]
    launch_gaps: int
    cell: str
    splits: int  # the grid's split dimension (vLLM segments, SGLang max_kv_splits; 1 on vLLM's 2D kernel)
    #: per row, a hash of what the working programs do (equal hashes under two recipes of the same ``working_key``:
    #: the same working programs, the launches differ only in programs that exit at once); None: not tracked
    signature: np.ndarray | None = None
    #: the residual map's layout cell of the main kernel (read where the map has it: ResidualMap.cell_for)
    layout_cell: str = ""


class Recipe:
    """One way of launching every step (subclasses below)."""

    engine: str = ""
    key: tuple = ()
    #: whether :meth:`block_launches` gives the launches as arrays (else only :meth:`launch_work`, step by step)
    has_arrays: bool = True

    @property
    def system(self) -> str:
        """The system whose kernels it launches (a LaunchWork.kernel): the engine's own Triton kernels."""
        return self.engine
    #: recipes with equal working keys launch the same working programs wherever their row signatures agree
    working_key: tuple | None = None

    def block_launches(self, block: Block) -> list[LaunchArrays]:
        raise NotImplementedError

    def proxies(self, steps: Any, profile: Any) -> Any:
        """The recipe's own per-step proxies (:class:`~decodecalc.batch.evaluate.Proxies`), or None: built from
        :meth:`block_launches` by the array kernels."""
        return None

    def launch_work(self, work: Workload, i: int) -> LaunchWork:
        """The scalar model's work of step ``i`` (its lengths in ``work``): the exact reference."""
        raise NotImplementedError


def _masked(a: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.where(mask, a, 0)


# ----------------------------------------------------------------------------------------------
# vLLM (vllm_work)


@dataclass(frozen=True)
class _VllmShape:
    use_3d: bool
    segments: int
    tile: int


def _vllm_arrays(base: Workload, lens: np.ndarray, q: np.ndarray, mask: np.ndarray, shape: _VllmShape,
                 prefix: str = "vllm") -> tuple[tuple[KernelArrays, ...], int]:
    """``vllm_work`` for rows of one launch shape: (kernels, launch gaps)."""
    h, h_kv = base.num_heads, base.num_kv_heads
    _, block_q = vu.block_shape(h // h_kv)
    d, dv, kvb = base.head_size, base.head_size_v, base.kv_bytes_per_element
    nq = _cdiv(q, block_q)  # 0 on padding
    total_q_blocks = q.sum(axis=1) // block_q + mask.sum(axis=1)
    idle_q = np.maximum(0, total_q_blocks - nq.sum(axis=1))
    bytes_per_iter = shape.tile * (d + dv) * kvb
    runs = kv_runs_per_iter(h_kv, shape.tile, KV_PAGE_TOKENS)
    if not shape.use_3d:
        main = KernelArrays(family=f"{prefix}_2d", head_dim=next_power_of_2(d), bytes_per_iter=bytes_per_iter,
                            iters=_masked(_cdiv(lens, shape.tile), mask), counts=nq * h_kv, idle=idle_q * h_kv,
                            runs_per_iter=runs, cells_layout="line", repeats=h_kv)
        return (main,), 1
    s = shape.segments
    active, tps, last = _vllm_3d_cells(np.maximum(lens, 1), s, shape.tile)
    active = _masked(active, mask)
    iters = np.concatenate([tps, last], axis=1)
    counts = np.concatenate([(active - 1).clip(min=0) * nq, nq], axis=1) * h_kv
    idle = (idle_q * s + ((s - active) * nq).sum(axis=1)) * h_kv
    main = KernelArrays(family=f"{prefix}_3d", head_dim=next_power_of_2(d), bytes_per_iter=bytes_per_iter,
                        iters=_masked(iters, np.concatenate([mask, mask], axis=1)), counts=counts, idle=idle,
                        runs_per_iter=runs, cells_layout="split", planes=s, repeats=h_kv)
    d_pad = next_power_of_2(dv)
    tokens = q.sum(axis=1)
    family, bytes_per_iter, occ = reduce_segments_kernel(s, d_pad, prefix)
    reduce = KernelArrays(family=family, head_dim=d_pad, bytes_per_iter=bytes_per_iter,
                          iters=np.ones((len(lens), 1), dtype=np.int64), counts=(tokens * h)[:, None],
                          idle=np.zeros(len(lens), dtype=np.int64), occupancy=occ)
    return (main, reduce), 2


class VllmRecipe(Recipe):
    """vLLM's Triton backend under ``settings``: the launch the engine runs for each step (the padded FULL-graph
    replay where one runs), decided per batch by :func:`~decodecalc.launchers.vllm_unified.plan_vllm`."""

    engine = "vllm"

    def __init__(self, base: Workload, gpu: GPUSpec, settings: VllmSettings) -> None:
        self.base, self.gpu, self.settings = base, gpu, settings
        self.key = ("vllm", settings)
        self._plans: dict[tuple, Any] = {}
        self._decode_shapes: list[_VllmShape | None] = []

    def _running_plan(self, query_lens: tuple[int, ...]) -> Any:
        got = self._plans.get(query_lens)
        if got is None:
            # the 2D/3D gate, the graph padding and the tile depend on the batch's query lengths only
            w = dataclasses.replace(self.base, seq_lens=tuple(max(x, 1) for x in query_lens), query_lens=query_lens)
            vp = plan_vllm(w, self.gpu, self.settings)
            got = self._plans[query_lens] = vp.replay.plan if vp.replay is not None else vp.plan
        return got

    def shape_of(self, query_lens: tuple[int, ...]) -> _VllmShape:
        if query_lens and query_lens[0] == 1 and query_lens.count(1) == len(query_lens):
            return self._decode_shape(len(query_lens))
        return self._planned_shape(query_lens)

    def _decode_shape(self, batch: int) -> _VllmShape:
        """The shape of a batch of one-token decodes. It changes with the batch at a few points only (the 2D/3D gate's
        snapped threshold, SM 12.0's 64-segment view), and once each way, so the batches between two that plan alike
        plan alike too: a bisection plans a few dozen batches instead of every size up to max_num_seqs (a ShareGPT
        burst holds every size from 1 to 1,024, and a plan of a wide batch walks every sequence)."""
        table = self._decode_shapes
        if batch >= len(table):
            n = max(batch, self.settings.max_num_seqs, 1)
            table = self._decode_shapes = [None] * (n + 1)
            plan = lambda b: self._planned_shape((1,) * b)  # noqa: E731 - the bisection's one probe
            todo = [(1, n, plan(1), plan(n))]
            while todo:
                lo, hi, s_lo, s_hi = todo.pop()
                table[lo], table[hi] = s_lo, s_hi
                if s_lo == s_hi:
                    table[lo + 1:hi] = [s_lo] * (hi - lo - 1)
                elif hi - lo > 1:
                    mid = (lo + hi) // 2
                    s_mid = plan(mid)
                    todo += [(lo, mid, s_lo, s_mid), (mid, hi, s_mid, s_hi)]
        got = table[batch]
        assert got is not None
        return got

    def _planned_shape(self, query_lens: tuple[int, ...]) -> _VllmShape:
        plan = self._running_plan(query_lens)
        main = next(k for k in plan.kernels if k.kind in (KernelKind.VLLM_UNIFIED_2D, KernelKind.VLLM_UNIFIED_3D))
        is_3d = main.kind is KernelKind.VLLM_UNIFIED_3D
        return _VllmShape(is_3d, int(main.constexprs["NUM_SEGMENTS_PER_SEQ"]) if is_3d else 1,
                          int(main.constexprs["TILE_SIZE"]))

    def block_launches(self, block: Block) -> list[LaunchArrays]:
        shapes = [self.shape_of(k) for k in _query_keys(block)]
        return _group_launches(self.base, block, shapes)

    def launch_work(self, work: Workload, i: int) -> LaunchWork:
        return work_for_plan(self._running_plan(work.query_lens), work, "vllm")


class VllmForcedRecipe(Recipe):
    """vLLM's kernel forced to 2D (``segments`` 1) or 3D with ``segments`` segments, whatever the gate says (the
    per-step bound and ``segments(step)`` rules): ``vllm_work`` with its default tiles, no graph padding."""

    engine = "vllm"

    def __init__(self, base: Workload, segments: int) -> None:
        self.base, self.segments = base, segments
        self.key = ("vllm-forced", segments)
        el = min(base.q_bytes, base.kv_bytes_per_element)
        self.shape = _VllmShape(segments > 1, segments, vu.get_tile_size(base.head_size, 0, el,
                                                                         is_prefill=segments == 1))

    def block_launches(self, block: Block) -> list[LaunchArrays]:
        return _group_launches(self.base, block, [self.shape] * len(block.rows))

    def launch_work(self, work: Workload, i: int) -> LaunchWork:
        return vllm_work(work, splits=self.segments, use_3d=self.segments > 1)


def _query_keys(block: Block) -> list[tuple[int, ...]]:
    """Each row's query lengths as a tuple (one per distinct pattern is planned)."""
    if bool((block.query_lens[block.mask] == 1).all()):
        return [(1,) * int(b) for b in block.batch]
    return [tuple(int(x) for x in block.query_lens[r, :block.batch[r]]) for r in range(len(block.rows))]


def _group_launches(base: Workload, block: Block, shapes: Sequence[_VllmShape]) -> list[LaunchArrays]:
    out = []
    group = base.num_heads // base.num_kv_heads
    by_shape: dict[_VllmShape, list[int]] = {}
    for i, s in enumerate(shapes):
        by_shape.setdefault(s, []).append(i)
    for shape in sorted(by_shape, key=lambda s: (s.use_3d, s.segments, s.tile)):
        rows = np.array(by_shape[shape], dtype=np.int64)
        kernels, gaps = _vllm_arrays(base, block.lens[rows], block.query_lens[rows], block.mask[rows], shape)
        out.append(LaunchArrays(rows=rows, kernels=kernels, launch_gaps=gaps,
                                cell=cell_key(kernels[0].family, group, kernels[0].head_dim),
                                layout_cell=cell_key(kernels[0].family, group, kernels[0].head_dim,
                                                     kv_heads=base.num_kv_heads),
                                splits=shape.segments))
    return out


# ----------------------------------------------------------------------------------------------
# SGLang (sglang_work)


def _sglang_arrays(base: Workload, lens: np.ndarray, mask: np.ndarray, splits: np.ndarray, max_s: int,
                   adaptive: bool, aux_kernel: str) -> LaunchArrays:
    h, h_kv = base.num_heads, base.num_kv_heads
    d, dv, kvb = base.head_size, base.head_size_v, base.kv_bytes_per_element
    mha = sg.is_mha(h, h_kv)
    block_n, ht = sg.stage1_block_n(h, h_kv), sg.head_tiles(h, h_kv)
    ne, full, last = _sglang_cells(np.maximum(lens, 1), np.maximum(splits, 1), block_n)
    ne = _masked(ne, mask)
    mask2 = np.concatenate([mask, mask], axis=1)
    stage1 = KernelArrays(family=sglang_stage1_family(mha, kvb), head_dim=next_power_of_2(d),
                          bytes_per_iter=block_n * (d + dv) * kvb,
                          iters=_masked(np.concatenate([full, last], axis=1), mask2),
                          counts=np.concatenate([(ne - 1).clip(min=0), _masked(np.ones_like(ne), mask)], axis=1) * ht,
                          idle=((max_s - ne) * mask).sum(axis=1) * ht,
                          runs_per_iter=kv_runs_per_iter(h_kv, block_n, KV_PAGE_TOKENS),
                          cells_layout="split", planes=max_s, repeats=ht)
    stage2 = KernelArrays(family="sglang_stage2", head_dim=next_power_of_2(dv), bytes_per_iter=4 * dv + 4,
                          iters=ne, counts=mask * h, idle=np.zeros(len(lens), dtype=np.int64),
                          cells_layout="line", repeats=h)
    aux = (aux_kernel or "x1") if adaptive else ""
    return LaunchArrays(rows=np.arange(len(lens)), kernels=(stage1, stage2), launch_gaps=2 + int(adaptive),
                        cell=cell_key(stage1.family, h // h_kv, stage1.head_dim, aux), splits=max_s,
                        layout_cell=cell_key(stage1.family, h // h_kv, stage1.head_dim, aux, h_kv),
                        signature=_row_hash(_masked(splits, mask)))


def _row_hash(values: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row of non-negative integers (position-dependent; splitmix64 multipliers)."""
    k = np.arange(values.shape[1], dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        z = (k ^ (k >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        mult = (z ^ (z >> np.uint64(31))) | np.uint64(1)
        return (values.astype(np.uint64) * mult[None, :]).sum(axis=1, dtype=np.uint64)


class SglangRecipe(Recipe):
    """SGLang's Triton backend under ``settings`` (its max_kv_splits, static or adaptive split counts), as
    :func:`~decodecalc.launchers.sglang_triton.plan_sglang` decides it per step."""

    engine = "sglang"

    def __init__(self, base: Workload, gpu: GPUSpec, settings: SglangSettings) -> None:
        self.base, self.gpu, self.settings = base, gpu, settings
        self.key = ("sglang", settings)
        self.working_key = ("sglang", not (settings.static_kv_splits or gpu.num_sms <= 0), SPLIT_COUNT_KERNEL)
        if settings.padded_batch is not None or settings.deterministic or settings.split_tile_size is not None \
                or base.model.is_mla:
            raise NotImplementedError("the batch evaluator models the static and adaptive split counts only")
        from decodecalc.derived import Explain

        self.max_s = sg.resolve_max_kv_splits(base, gpu, settings, Explain())
        self.static = settings.static_kv_splits or gpu.num_sms <= 0
        self._ext: dict[int, int] = {}

    def splits(self, block: Block) -> np.ndarray:
        """Per-sequence split counts (0 on padding)."""
        if self.static:
            return np.where(block.mask, self.max_s, 0)
        lmax, lmin = block.max_len(), block.min_len()
        ext = self._ext_cores(lmax)
        grid = elementwise(sg.token_grid)(block.batch, self.base.num_heads, self.base.num_kv_heads)
        _, c1, c2 = elementwise(sg.kv_chunk_sizes)(lmax, lmin, ext, grid, self.max_s)
        return _masked(elementwise(sg.splits_from_chunks)(np.maximum(block.lens, 1), c1[:, None], c2[:, None]),
                       block.mask)

    def _ext_cores(self, lmax: np.ndarray) -> np.ndarray:
        """ext_device_core_count of each step's longest sequence (float32 arithmetic: the scalar rule, once per
        distinct length)."""
        values, inverse = np.unique(lmax, return_inverse=True)
        out = np.empty(len(values), dtype=np.int64)
        for i, L in enumerate(values.tolist()):
            got = self._ext.get(L)
            if got is None:
                got = self._ext[L] = sg.ext_device_core_count(L, self.gpu.num_sms)
            out[i] = got
        return out[inverse]

    def block_launches(self, block: Block) -> list[LaunchArrays]:
        return [_sglang_arrays(self.base, block.lens, block.mask, self.splits(block), self.max_s,
                               not self.static, SPLIT_COUNT_KERNEL)]

    def launch_work(self, work: Workload, i: int) -> LaunchWork:
        return work_for_plan(plan_sglang(work, self.gpu, self.settings).plan, work, "sglang")


class SglangSplitsRecipe(Recipe):
    """SGLang's kernel with given per-sequence split counts (a proposed rule, a user's ``splits(step)``): ``splits`` is
    a function of a block (an array rule, one count per sequence, padding ignored) or a flat array aligned with the
    workload's ``seq_lens``; the grid's split dimension is ``max_kv_splits``. ``name`` keys the cache."""

    engine = "sglang"

    def __init__(self, base: Workload, splits: Any, offsets: np.ndarray, max_kv_splits: int, adaptive: bool,
                 aux_kernel: str, name: str, steps: Any) -> None:
        self.base, self.rule, self.offsets, self.max_kv_splits = base, splits, offsets, max_kv_splits
        self.adaptive, self.aux_kernel, self.steps = adaptive, aux_kernel, steps
        self.key = ("sglang-splits", name, max_kv_splits, adaptive, aux_kernel)
        self.working_key = ("sglang", adaptive, aux_kernel)

    def block_splits(self, block: Block) -> np.ndarray:
        if callable(self.rule):
            return _masked(self.rule(block), block.mask)
        starts = self.offsets[block.rows]
        idx = np.where(block.mask, starts[:, None] + np.arange(block.width)[None, :], 0)
        return np.where(block.mask, self.rule[idx], 0)

    def block_launches(self, block: Block) -> list[LaunchArrays]:
        return [_sglang_arrays(self.base, block.lens, block.mask, self.block_splits(block), self.max_kv_splits,
                               self.adaptive, self.aux_kernel)]

    def step_splits(self, i: int) -> tuple[int, ...]:
        block = self.steps.block_of([i])
        return tuple(int(x) for x in self.block_splits(block)[0, :block.batch[0]])

    def launch_work(self, work: Workload, i: int) -> LaunchWork:
        return sglang_work(work, splits=self.step_splits(i), max_kv_splits=self.max_kv_splits,
                           adaptive=self.adaptive, aux_kernel=self.aux_kernel)


class BackendRecipe(Recipe):
    """Another attention backend (FlashInfer, FA3, ...), planned by its launcher module for each step. Its scheduler
    has no array model here: every step's proxy is the roofline of its KV bytes plus two launch gaps, and the
    sample of exactly timed steps corrects it (:mod:`decodecalc.batch.estimate`)."""

    has_arrays = False

    def __init__(self, base: Workload, gpu: GPUSpec, kernel: str, engine: str, planner: Any, variant: str = "") -> None:
        self.base, self.gpu, self.kernel, self.engine, self.planner = base, gpu, kernel, engine, planner
        self.key = ("backend", kernel, engine) + ((variant,) if variant else ())

    @property
    def system(self) -> str:
        return self.kernel  # the backend, whatever engine runs it

    def proxies(self, steps: Any, profile: Any) -> Any:
        b = self.base
        per_token = b.num_kv_heads * (b.head_size + b.head_size_v) * b.kv_bytes_per_element
        t = 2 * profile.launch_overhead_s + steps.per_step_sum(steps.seq_lens) * per_token / \
            profile.hbm_bandwidth_bytes_per_s
        n = steps.num_steps
        return Proxies(times=np.tile(t, (len(DELTAS), 1)), exact=np.zeros((len(DELTAS), n), dtype=bool),
                       splits=np.ones(n, dtype=np.int64))

    def launch_work(self, work: Workload, i: int) -> LaunchWork:
        return work_for_plan(self.planner(work, self.gpu), work, self.kernel)


def as_int_array(values: Any) -> np.ndarray:
    """int64 array of an ``array.array`` or a sequence of ints (a user rule's split counts, flat)."""
    return np.asarray(values, dtype=np.int64)
