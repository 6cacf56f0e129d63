"""A request trace's decode steps as one interval per request: a day of one server in memory that grows with its
requests and steps, not with their product.

:func:`decodecalc.traffic.requests.batching_intervals` gives, per request in admission order, the engine step of its
first decode, its KV length there and how many steps it decodes (one token each, every step until it is done). A day
at 11.6 requests/s is a million requests, 3.4 million decode steps and 270 million (step, sequence) pairs: as runs of
steps (:mod:`decodecalc.batch.runs`) that is 160 million stored lengths, here three integers per request plus a few
per step. Everything tune needs of every step is a sum over the intervals that hold it, made with difference arrays
(batch, KV tokens, a hash of the step's lengths) or a range maximum (the longest sequence); only the steps tune times
are expanded (:meth:`IntervalSteps.take`), by a search over the sorted interval starts.

Decode steps are numbered without the engine steps no request decodes in (idle gaps): a run of overlapping
intervals is a stretch of consecutive decode steps, and each stretch keeps its engine-step offset for the origins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from decodecalc.batch.steps import NumberedOrigins, StepArrays, stratified_picks
from decodecalc.errors import ConfigError

#: odd 64-bit multipliers of a step's power sums (count, sum of lengths, of squares, of cubes) in its hash
_MOMENT_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93],
                       dtype=np.uint64)


@dataclass(frozen=True, eq=False)
class IntervalSteps:
    """Every decode step of a trace: request ``i`` is in the steps ``first[i] .. first[i] + count[i] - 1`` (decode
    step numbers) with the KV length ``base[i] + j`` at its ``j``-th; ``first`` is non-decreasing (admission order)."""

    first: np.ndarray  # int64 [requests]
    base: np.ndarray  # int64 [requests]
    count: np.ndarray  # int64 [requests], >= 1
    engine_offset: np.ndarray  # int64 [requests]: engine step = decode step + this (the idle engine steps before it)
    source: str
    notes: tuple[str, ...] = ()
    arrivals: dict[str, Any] | None = None  # the JSON's workload.arrivals: Poisson arrivals given to the trace

    @classmethod
    def of(cls, iv: Any, source: str, notes: tuple[str, ...] = (), *,
           arrivals: dict[str, Any] | None = None) -> IntervalSteps:
        """From :class:`decodecalc.traffic.requests.RequestIntervals` (at least one interval)."""
        start = np.frombuffer(iv.start, dtype=np.int64) if len(iv.start) else np.zeros(0, dtype=np.int64)
        base = np.frombuffer(iv.base, dtype=np.int64) if len(iv.base) else np.zeros(0, dtype=np.int64)
        count = np.frombuffer(iv.steps, dtype=np.int64) if len(iv.steps) else np.zeros(0, dtype=np.int64)
        end = start + count
        # engine steps nobody decodes in lie before an interval that starts after every earlier one has ended
        reach = np.maximum.accumulate(end)
        before = np.concatenate([start[:1], reach[:-1]])
        gap = np.maximum(start - before, 0)
        gap[:1] = start[:1]
        offset = np.cumsum(gap)
        return cls(first=start - offset, base=base, count=count, engine_offset=offset, source=source, notes=notes,
                   arrivals=arrivals)

    # per step ---------------------------------------------------------------------------------------------------------

    @cached_property
    def num_steps(self) -> int:
        return int((self.first + self.count).max())

    def _over_steps(self, values: np.ndarray | None) -> np.ndarray:
        """Per step, the sum over the intervals holding it of ``values`` (None: 1), exact integers."""
        n = self.num_steps
        if values is None:
            diff = np.bincount(self.first, minlength=n + 1) - np.bincount(self.first + self.count, minlength=n + 1)
            return np.cumsum(diff[:n]).astype(np.int64)
        diff = np.zeros(n + 1, dtype=values.dtype)
        np.add.at(diff, self.first, values)
        np.subtract.at(diff, self.first + self.count, values)
        return np.cumsum(diff[:n])

    @cached_property
    def batch(self) -> np.ndarray:
        return self._over_steps(None)

    @cached_property
    def weights(self) -> np.ndarray:
        return np.ones(self.num_steps, dtype=np.int64)

    @property
    def tokens(self) -> np.ndarray:
        return self.batch  # one query (and one generated) token per sequence

    def engine_steps(self, idx: np.ndarray) -> np.ndarray:
        """The engine step numbers of decode steps ``idx``."""
        i = np.searchsorted(self.first, idx, side="right") - 1
        return idx + self.engine_offset[i]

    def kv_tokens(self) -> np.ndarray:
        """Per step: the sum of its KV lengths (the length at step t is base - first + t)."""
        return self._over_steps(self.base - self.first) + np.arange(self.num_steps) * self.batch

    def longest(self) -> np.ndarray:
        """Per step: its longest sequence, max over the intervals holding it of (base - first) + t, by a sparse
        table filled from the top level down (each interval updates the two blocks of 2^k steps that cover it)."""
        n = self.num_steps
        c = self.base - self.first
        level = np.floor(np.log2(self.count)).astype(np.int64)
        low = np.iinfo(np.int64).min
        upper: np.ndarray | None = None
        for k in range(int(level.max()), -1, -1):
            cur = np.full(n, low, dtype=np.int64)
            if upper is not None:  # a block of 2^(k+1) steps is its two halves
                half = 1 << k
                np.maximum(cur, upper, out=cur)
                np.maximum(cur[half:], upper[:n - half], out=cur[half:])
            sel = level == k
            if sel.any():
                np.maximum.at(cur, self.first[sel], c[sel])
                np.maximum.at(cur, self.first[sel] + self.count[sel] - (1 << k), c[sel])
            upper = cur
        assert upper is not None
        return upper + np.arange(n)

    @property
    def max_seq_len(self) -> int:
        return int((self.base + self.count - 1).max())

    def query_tokens(self) -> int:
        return int(self.count.sum())

    def hashes(self) -> np.ndarray:
        """A 64-bit hash of every step's KV lengths as a multiset: its power sums (count, sum, squares, cubes) mixed,
        each a polynomial in the step number over the intervals holding it (exact modulo 2^64). Two steps that hold
        the same lengths in another order hash alike (the JSON's distinct_shapes counts them once); an ordered hash
        would need every (step, sequence) pair, 270 million on a day."""
        c = (self.base - self.first).astype(np.uint64)
        with np.errstate(over="ignore"):
            one = np.ones(len(c), dtype=np.uint64)
            s = [self._over_steps(v) for v in (one, c, c * c, c * c * c)]
            t = np.arange(self.num_steps, dtype=np.uint64)
            t2 = t * t
            p = [s[0], s[1] + t * s[0], s[2] + np.uint64(2) * t * s[1] + t2 * s[0],
                 s[3] + np.uint64(3) * t * s[2] + np.uint64(3) * t2 * s[1] + t2 * t * s[0]]
            h = np.zeros(self.num_steps, dtype=np.uint64)
            for k in range(4):
                h = (h ^ (p[k] * _MOMENT_MIX[k])) * np.uint64(0x100000001B3)
        return h

    def length_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(every KV length that occurs, how many sequence-steps have it): interval ``i`` covers ``base .. base +
        count - 1`` once."""
        lo = int(self.base.min())
        hi = int((self.base + self.count - 1).max())
        diff = np.bincount(self.base - lo, minlength=hi - lo + 2) - np.bincount(self.base + self.count - lo,
                                                                             minlength=hi - lo + 2)
        counts = np.cumsum(diff[:-1])
        keep = np.flatnonzero(counts)
        return keep + lo, counts[keep]

    def summary(self) -> dict[str, Any]:
        """The JSON's ``workload`` block."""
        from decodecalc.batch.summary import summary_block

        values, counts = self.length_counts()
        block = summary_block(source=self.source, batch=self.batch, weights=self.weights, lengths=values,
                              length_weights=counts, hashes=self.hashes(), generated_tokens=int(self.count.sum()),
                              query_tokens=self.query_tokens(), speculative=False, notes=self.notes)
        return block | ({"arrivals": self.arrivals} if self.arrivals is not None else {})

    def covariates(self) -> np.ndarray:
        """:func:`decodecalc.batch.population.covariates` of every step."""
        return np.stack([np.ones(self.num_steps), self.batch.astype(np.float64), self.kv_tokens().astype(np.float64),
                         self.longest().astype(np.float64)], axis=1)

    # expanded steps -------------------------------------------------------------------------------------------------

    def take(self, idx: Any, weights: np.ndarray | None = None) -> StepArrays:
        """The steps ``idx`` (sorted, distinct) as arrays, weighing ``weights`` (default 1 each): each interval holds
        the sampled steps between two searches, and a stable sort by step keeps admission order inside a step."""
        idx = np.asarray(idx, dtype=np.int64)
        lo = np.searchsorted(idx, self.first, side="left")
        hi = np.searchsorted(idx, self.first + self.count, side="left")
        held = np.flatnonzero(hi > lo)
        n_pairs = hi[held] - lo[held]
        req = np.repeat(held, n_pairs)
        starts = np.repeat(lo[held], n_pairs)
        within = np.arange(int(n_pairs.sum())) - np.repeat(np.cumsum(n_pairs) - n_pairs, n_pairs)
        pos = starts + within  # position in idx
        order = np.argsort(pos, kind="stable")
        pos, req = pos[order], req[order]
        batch = np.bincount(pos, minlength=len(idx))
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(batch, out=offsets[1:])
        seq = self.base[req] + idx[pos] - self.first[req]
        return StepArrays(offsets=offsets, seq_lens=seq, query_lens=np.ones(len(seq), dtype=np.int64),
                          weights=np.ones(len(idx), dtype=np.int64) if weights is None else weights,
                          tokens=batch.astype(np.int64), source=self.source, notes=self.notes,
                          origins=NumberedOrigins(self.source, "engine step", self.engine_steps(idx)))

    def expand(self) -> StepArrays:
        return self.take(np.arange(self.num_steps))

    def sample(self, k: int, seed: int = 20261201) -> tuple[StepArrays, np.ndarray]:
        """:meth:`StepArrays.sample` without expanding the other steps."""
        idx, w = stratified_picks(self.weights, k, seed)
        return self.take(idx, w), idx


def request_steps(prompt: Any, output: Any, arrival: Any, limits: Any, *, max_steps: int, source: str,
                  notes: tuple[str, ...] = (), progress: Callable[[str], None] | None = None,
                  arrivals: dict[str, Any] | None = None) -> Any:
    """The decode steps of requests (columns sorted by arrival) under the batching model: as intervals
    (:class:`IntervalSteps`) where the model allows (no speculation, ``max_num_seqs`` within the token budget), else
    as runs (:class:`decodecalc.batch.runs.RunSteps`). ConfigError: no decode step, or more than ``max_steps``."""
    from decodecalc.batch.runs import RunSteps
    from decodecalc.traffic.requests import batching_intervals, batching_runs

    iv = batching_intervals(prompt, output, arrival, limits, progress=progress)
    if iv is None:
        br = batching_runs(prompt, output, arrival, limits, max_steps=max_steps, source=source)
        if not br.runs:
            raise ConfigError(f"{source}: the workload is empty (no decode steps: every request has output_tokens 1)")
        return RunSteps.of(br.runs, source, notes, arrivals=arrivals)
    if not len(iv.start):
        raise ConfigError(f"{source}: the workload is empty (no decode steps: every request has output_tokens 1)")
    steps = IntervalSteps.of(iv, source, notes, arrivals=arrivals)
    if steps.num_steps > max_steps:
        raise ConfigError(f"{source}: more than {max_steps:,} decode steps ({steps.num_steps:,} from "
                          f"{iv.requests:,} requests); tune a part of the trace (--max-requests N)")
    return steps
