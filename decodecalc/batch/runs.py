"""A request trace's decode steps kept as runs, expanded only where they are timed.

:func:`decodecalc.traffic.requests.batching_runs` emits runs: ``steps`` consecutive decode steps of the same
sequences, step ``j`` of a run having the lengths ``base + j``. A day of one server at 256 sequences is a million
steps and 256 million lengths (2 GB as int64) once expanded, yet tune times at most a sample of 16,384 steps of a
workload that large; everything it needs of the rest is a per-step function of the run (batch, KV tokens, longest
sequence, a hash) or a distribution with a closed form (the lengths of ``base + j`` over ``j`` cover an interval).
:class:`RunSteps` gives those from the runs' arrays, and :meth:`RunSteps.take` expands only the steps asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from decodecalc.batch.stats import HASH_LENGTH_MIX, hash_multipliers
from decodecalc.batch.steps import NumberedOrigins, StepArrays, stratified_picks


@dataclass(frozen=True, eq=False)
class RunSteps:
    """Every decode step of a trace as runs: run ``r`` has ``steps[r]`` steps over the sequences
    ``bases[base_start[r]:base_start[r] + batch[r]]``, each one token longer per step."""

    steps: np.ndarray  # int64 [R]
    batch_of_run: np.ndarray  # int64 [R]
    bases: np.ndarray  # int64 [sum batch_of_run]: the KV lengths at the run's first step
    query: np.ndarray  # int64 [R]: query tokens of every sequence of the run
    tokens_of_run: np.ndarray  # int64 [R]: output tokens per step (-1: one per sequence)
    first_engine_step: np.ndarray  # int64 [R]
    source: str
    notes: tuple[str, ...] = ()
    arrivals: dict[str, Any] | None = None  # the JSON's workload.arrivals: Poisson arrivals given to the trace

    @classmethod
    def of(cls, runs: Sequence[Any], source: str, notes: tuple[str, ...] = (), *,
           arrivals: dict[str, Any] | None = None) -> RunSteps:
        """From :class:`decodecalc.traffic.requests.StepRun` s."""
        R = len(runs)

        def col(values: Any, n: int = R) -> np.ndarray:
            return np.fromiter(values, dtype=np.int64, count=n)

        B = col(len(r.base) for r in runs)
        return cls(steps=col(r.steps for r in runs), batch_of_run=B,
                   bases=col((L for r in runs for L in r.base), int(B.sum())), query=col(r.query_len for r in runs),
                   tokens_of_run=col(r.tokens if r.tokens is not None else -1 for r in runs),
                   first_engine_step=col(r.first_engine_step for r in runs), source=source, notes=notes,
                   arrivals=arrivals)

    # per run ------------------------------------------------------------------------------------------------------

    @cached_property
    def base_start(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.batch_of_run)[:-1]]).astype(np.int64)

    def _per_run(self, ufunc: np.ufunc) -> np.ndarray:
        return ufunc.reduceat(self.bases, self.base_start)

    # per step -----------------------------------------------------------------------------------------------------

    @property
    def num_steps(self) -> int:
        return int(self.steps.sum())

    @cached_property
    def step_run(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.steps)), self.steps)

    @cached_property
    def step_j(self) -> np.ndarray:
        first = np.concatenate([[0], np.cumsum(self.steps)[:-1]])
        return np.arange(self.num_steps) - first[self.step_run]

    @cached_property
    def batch(self) -> np.ndarray:
        return self.batch_of_run[self.step_run]

    @cached_property
    def weights(self) -> np.ndarray:
        return np.ones(self.num_steps, dtype=np.int64)

    @cached_property
    def tokens(self) -> np.ndarray:
        t = self.tokens_of_run[self.step_run]
        return np.where(t >= 0, t, self.batch)

    def kv_tokens(self) -> np.ndarray:
        """Per step: the sum of its KV lengths."""
        return self._per_run(np.add)[self.step_run] + self.batch * self.step_j

    def longest(self) -> np.ndarray:
        return self._per_run(np.maximum)[self.step_run] + self.step_j

    @property
    def max_seq_len(self) -> int:
        return int((self._per_run(np.maximum) + self.steps - 1).max())

    def query_tokens(self) -> int:
        return int((self.query * self.batch_of_run * self.steps).sum())

    def hashes(self) -> np.ndarray:
        """:func:`decodecalc.batch.stats.step_hashes` of every step, from the runs: the hash is linear in the lengths,
        so step ``j`` of a run hashes to its first step's plus ``j`` times the mix of its positions."""
        B = self.batch_of_run
        pos = np.arange(len(self.bases)) - np.repeat(self.base_start, B)
        mult = hash_multipliers(int(B.max()))
        q = np.repeat(self.query, B).astype(np.uint64)
        with np.errstate(over="ignore"):
            first = np.add.reduceat((self.bases.astype(np.uint64) * HASH_LENGTH_MIX + q) * mult[pos], self.base_start)
            slope = np.add.reduceat(mult[pos], self.base_start) * HASH_LENGTH_MIX
            j = self.step_j.astype(np.uint64)
            h = first[self.step_run] + j * slope[self.step_run]
            return h * np.uint64(31) + self.batch.astype(np.uint64)

    # what tune needs of every step ----------------------------------------------------------------------------------

    def length_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(every KV length that occurs, how many sequence-steps have it): each base length ``b`` of a run of ``m``
        steps covers ``b .. b + m - 1`` once (a difference array over the lengths)."""
        m = np.repeat(self.steps, self.batch_of_run)
        lo = int(self.bases.min())
        hi = int((self.bases + m - 1).max())
        diff = np.zeros(hi - lo + 2, dtype=np.int64)
        np.add.at(diff, self.bases - lo, 1)
        np.add.at(diff, self.bases + m - lo, -1)
        counts = np.cumsum(diff[:-1])
        keep = np.flatnonzero(counts)
        return keep + lo, counts[keep]

    def summary(self) -> dict[str, Any]:
        """The JSON's ``workload`` block, as :func:`decodecalc.batch.summary.workload_summary` gives it for the
        expanded steps."""
        from decodecalc.batch.summary import summary_block

        values, counts = self.length_counts()
        block = summary_block(source=self.source, batch=self.batch, weights=self.weights, lengths=values,
                              length_weights=counts, hashes=self.hashes(), generated_tokens=int(self.tokens.sum()),
                              query_tokens=self.query_tokens(), speculative=bool((self.query > 1).any()),
                              notes=self.notes)
        return block | ({"arrivals": self.arrivals} if self.arrivals is not None else {})

    def covariates(self) -> np.ndarray:
        """:func:`decodecalc.batch.population.covariates` of every step."""
        return np.stack([np.ones(self.num_steps), self.batch.astype(np.float64), self.kv_tokens().astype(np.float64),
                         self.longest().astype(np.float64)], axis=1)

    # expanded steps -------------------------------------------------------------------------------------------------

    def take(self, idx: np.ndarray, weights: np.ndarray | None = None) -> StepArrays:
        """The steps ``idx`` (sorted) as arrays, weighing ``weights`` (default 1 each)."""
        idx = np.asarray(idx, dtype=np.int64)
        run, j = self.step_run[idx], self.step_j[idx]
        B = self.batch_of_run[run]
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(B, out=offsets[1:])
        elem = np.repeat(np.arange(len(idx)), B)
        pos = np.arange(int(offsets[-1])) - offsets[:-1][elem]
        seq = self.bases[self.base_start[run][elem] + pos] + j[elem]
        engine = self.first_engine_step[run] + j
        return StepArrays(offsets=offsets, seq_lens=seq, query_lens=self.query[run][elem],
                          weights=np.ones(len(idx), dtype=np.int64) if weights is None else weights,
                          tokens=self.tokens[idx], source=self.source, notes=self.notes,
                          origins=NumberedOrigins(self.source, "engine step", engine))

    def expand(self) -> StepArrays:
        return self.take(np.arange(self.num_steps))

    def sample(self, k: int, seed: int = 20261201) -> tuple[StepArrays, np.ndarray]:
        """:meth:`StepArrays.sample` without expanding the other steps."""
        idx, w = stratified_picks(self.weights, k, seed)
        return self.take(idx, w), idx


def from_runs(runs: Sequence[Any], source: str, notes: tuple[str, ...] = ()) -> StepArrays:
    """Every step of :func:`decodecalc.traffic.requests.batching_runs`' runs, expanded: run ``r``'s step ``j`` has the
    lengths ``base + j``."""
    return RunSteps.of(runs, source, notes).expand()
