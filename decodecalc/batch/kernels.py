"""The time model on arrays: one kernel of a launch for a block of steps.

A kernel's programs in one step come in *classes* (loop iterations, programs): for vLLM's 3D kernel a
sequence's full segments and its last one, for SGLang's stage 1 its full splits and its last one, and so on
(:mod:`decodecalc.batch.launches`). From them the scalar model (:func:`decodecalc.timemodel.kernel_time_s`)
is computed with the same :class:`~decodecalc.timemodel.predict.IterationCost` wherever it has a closed form:

* no working program: the idle programs' cost;
* every program runs the same loop: waves at full occupancy and the last partial wave
  (:meth:`IterationCost.uniform_s`);
* all programs fit in one wave: they start at once and speed up as their SMs empty (the shared tail, here over
  the classes sorted by iterations).

The rest, ragged launches of more than one wave, depend on the order the block scheduler dispatches the
programs in, which the scalar model follows program run by program run. Here they get a proxy (the
programs' total time over the slots plus a tail, :func:`ragged_proxy_s`) and ``exact`` False:
:mod:`decodecalc.batch.estimate` corrects the proxy with exact timings of a sample of steps. Those timings come from
here too (``exact_rows``): a kernel that keeps its grid's cells (``cells_layout``) hands the rows asked for to the
scalar model's own dispatch (:func:`decodecalc.batch.dispatch.busy_s`), so an anchor's time is the scalar model's
without building its scalar work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from decodecalc.batch.arrays import elementwise
from decodecalc.batch.dispatch import busy_s
from decodecalc.derived import cdiv
from decodecalc.timemodel import TimeProfile
from decodecalc.timemodel.predict import IterationCost, iteration_cost


#: occupancy deltas of the three points: the prediction itself, then the ranking score's two neighbours
DELTAS = (0, -1, 1)


@dataclass(frozen=True, eq=False)
class Proxies:
    """Per step and occupancy delta (rows in DELTAS order): the launch time, exact where ``exact`` says so (else
    the proxy of :func:`decodecalc.batch.kernels.ragged_proxy_s` for its ragged kernels), and the grid's splits."""

    times: np.ndarray  # float64 [3, n]
    exact: np.ndarray  # bool [3, n]
    splits: np.ndarray  # int64 [n]
    families: frozenset[str] = frozenset()  # kernel families the launches use
    signature: np.ndarray | None = None  # uint64 [n]: LaunchArrays.signature per step (None: not tracked)


@dataclass(frozen=True, eq=False)
class KernelArrays:
    """One kernel of a launch for the rows (steps) of a block: per row, ``counts[r, k]`` programs run
    ``iters[r, k]`` loop iterations; ``idle[r]`` programs exit at once. The constants are the scalar
    :class:`~decodecalc.timemodel.work.KernelWork`'s."""

    family: str
    head_dim: int
    bytes_per_iter: int
    iters: np.ndarray  # int64 [R, K]
    counts: np.ndarray  # int64 [R, K]
    idle: np.ndarray  # int64 [R]
    occupancy: int | None = None
    hbm_bytes_per_iter: int | None = None
    blend_power: float = 0.0
    runs_per_iter: int = 0  # kv_runs_per_iter, as the scalar work's
    ordered: bool = True  # the scalar work records the grid order (vLLM's and SGLang's Triton kernels)
    #: how the columns hold the grid's per-sequence cells (the input of timemodel.work.planes_order, which builds the
    #: scalar work's order): "split", sequence j's full programs in column j and its last one in column B + j (counts
    #: (a - 1) q repeats and q repeats); "line", one plane, column j sequence j's programs (counts q repeats); "": not
    #: kept (the kernel never needs the dispatch: uniform, or no recorded order)
    cells_layout: str = ""
    planes: int = 1  # the grid's z extent (vLLM's segments, SGLang's max_kv_splits)
    repeats: int = 1  # each row repeated along y (KV heads, SGLang's head tiles, query heads)

    @property
    def programs(self) -> np.ndarray:
        return self.counts.sum(axis=1)

    def cells(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The cells (a, full, last, q) of the launches ``rows``, flat over their sequences in batch order, and the
        offsets of each launch's (``cells_layout``): what :func:`decodecalc.batch.dispatch.busy_s` takes."""
        it, c = self.iters[rows], self.counts[rows]
        if self.cells_layout == "split":
            b = it.shape[1] // 2
            c_full, c_last = c[:, :b], c[:, b:]
            live = c_last > 0
            a = c_full // np.maximum(c_last, 1) + 1
            full, last, q = it[:, :b], it[:, b:], c_last // self.repeats
        elif self.cells_layout == "line":
            live = c > 0
            a, full, last, q = np.ones_like(it), np.zeros_like(it), it, c // self.repeats
        else:
            raise ValueError(f"{self.family}: the grid's cells were not kept")
        offsets = np.concatenate([[0], np.cumsum(live.sum(axis=1))]).astype(np.int64)
        return a[live], full[live], last[live], q[live], offsets

    def mean_iters(self) -> np.ndarray:
        n = self.programs
        return np.where(n > 0, (self.iters * self.counts).sum(axis=1) / np.maximum(n, 1), 1.0)


def cost_of(ka: KernelArrays, profile: TimeProfile, occupancy_delta: int = 0) -> IterationCost:
    # a KernelArrays has the fields of the KernelWork iteration_cost reads (as arrays)
    return iteration_cost(ka, profile.family(ka.family), profile.num_sms, profile.idle_program_s,  # type: ignore[arg-type]
                          profile.hbm_bandwidth_bytes_per_s, occupancy_delta)


def kernel_times(ka: KernelArrays, profile: TimeProfile, deltas: tuple[int, ...] = (0,),
                 exact_rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(seconds per row, whether the value is the scalar model's exactly), one row of each per occupancy delta
    (the profile's occupancy plus each of ``deltas``). ``exact_rows`` (bool per row): rows whose ragged launches of
    more than one wave are timed by the scalar model's dispatch instead of the proxy (a kernel with its cells)."""
    counts = ka.counts
    it = np.where(counts > 0, ka.iters, 0)
    n = counts.sum(axis=1)
    imax = it.max(axis=1)
    imin = np.where(counts > 0, ka.iters, np.iinfo(np.int64).max).min(axis=1)
    uniform = (imax == imin) & (n > 0)
    costs = [cost_of(ka, profile, d) for d in deltas]
    # the programs sorted by iterations, once for every occupancy point: iterations and counts packed in one int64
    # key (a value sort is several times faster than an argsort and a gather)
    ragged = ~uniform & (n > 0) & (n <= 2 * max(c.slots for c in costs))
    rows = np.flatnonzero(ragged)
    if len(rows):
        key = np.sort((it[rows] << 32) | counts[rows], axis=1)
        si, sc = key >> 32, key & 0xFFFFFFFF
        cum = np.cumsum(sc, axis=1)
    t_out = np.empty((len(deltas), len(n)))
    ok_out = np.empty((len(deltas), len(n)), dtype=bool)
    for k, cost in enumerate(costs):
        one_wave = n <= cost.slots
        t = np.where(uniform, cost.uniform_s(n, imax), 0.0)
        rag1 = one_wave & ragged
        if rag1.any():
            sub = rag1[rows]
            if ka.ordered:
                t[rag1] = shared_tail_s(si[sub], sc[sub], cum[sub], cost) + cost.program_overhead_s
            else:  # the backends' programs without a recorded order: the longest one sets a single wave
                c = np.minimum(cost.occupancy, cdiv(n[rag1], cost.num_sms))
                t[rag1] = cost.program_overhead_s + imax[rag1] * cost.t_it(c, np.minimum(n[rag1], cost.slots))
        many = ~one_wave & ~uniform
        timed = many & exact_rows if exact_rows is not None and ka.cells_layout else np.zeros_like(many)
        if timed.any():
            t[timed] = busy_s(*ka.cells(np.flatnonzero(timed)), ka.planes, ka.repeats, cost)
        estimated = many & ~timed
        if estimated.any():
            few = estimated & ragged  # at most two waves: the sorted programs give the first slots to free
            t[estimated] = ragged_proxy_s(it[estimated], counts[estimated], n[estimated], cost)
            if few.any():
                sub = few[rows]
                first = _rank_value(si[sub], cum[sub], n[few] - cost.slots)
                dur_first = cost.program_overhead_s + first * cost.t_it(cost.occupancy, cost.slots)
                longest = cost.program_overhead_s + imax[few] * cost.t_it(cost.occupancy, cost.slots)
                t[few] = np.maximum(np.minimum(t[few], dur_first + longest), longest)
        t_out[k] = t + elementwise(cost.idle_s)(ka.idle)
        ok_out[k] = ~estimated
    return t_out, ok_out


def _rank_value(sorted_iters: np.ndarray, cum: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Per row, the iterations of the ``rank``-th program in sorted order (1-based)."""
    pos = (cum < rank[:, None]).sum(axis=1)
    return sorted_iters[np.arange(len(pos)), np.minimum(pos, sorted_iters.shape[1] - 1)]


def shared_tail_s(iters: np.ndarray, counts: np.ndarray, cum: np.ndarray, cost: IterationCost) -> np.ndarray:
    """:func:`decodecalc.timemodel.predict._shared_tail_s` per row, from programs sorted by iterations (``cum``: the
    running count): programs that all start at once finish in order of their iterations, each stretch of iterations
    at the concurrency of the programs still running."""
    running = cum[:, -1:] - cum + counts  # programs with at least this many iterations
    step = np.diff(iters, axis=1, prepend=0)
    return (step * cost.busy_t_it(running)).sum(axis=1)


def ragged_proxy_s(iters: np.ndarray, counts: np.ndarray, n: np.ndarray, cost: IterationCost) -> np.ndarray:
    """A proxy for a ragged launch of more than one wave (the scalar model follows its dispatch order): the
    programs' total time over the slots at full occupancy plus half the longest program (the tail: the longest
    programs are among the last to start), at least the longest program. With at most two waves
    :func:`kernel_times` caps it at the time the first slots free plus the longest program.
    :mod:`decodecalc.batch.estimate` corrects it with exact timings of sampled steps; on the H200 profile it lies
    within a few per cent of the scalar model."""
    ti = cost.t_it(cost.occupancy, cost.slots)
    dur = cost.program_overhead_s + iters * ti
    # the longest program's time from its iterations (the same value: t0 + i x ti grows with i)
    longest = cost.program_overhead_s + np.where(counts > 0, iters, 0).max(axis=1) * ti
    return np.maximum((dur * counts).sum(axis=1) / cost.slots + 0.5 * longest, longest)
