"""A decode workload as arrays, and its blocks of steps padded to a common batch width.

:class:`StepArrays` holds every step's KV lengths (and query lengths) in one flat array with the offsets of each
step (a CSR layout): a million steps of 32 sequences take 256 MB as int64, where :class:`DecodeStep` objects
would take gigabytes. :meth:`StepArrays.blocks` cuts the steps into :class:`Block` s of equal padded width
(the next power of two of the batch) so that per-sequence rules run as 2D array operations; padding rows have
length 0 and carry no programs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decodecalc.batch.arrays import Indices
from decodecalc.traffic import StepTrace

#: steps per block at most (bounds the temporaries of one block: rows x width x a few int64 arrays)
BLOCK_ELEMENTS = 1 << 21


def stratified_picks(weights: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(sorted step indices, their weights): one step from each of ``k`` consecutive strata of equal weight, at a
    seeded position in each (a step heavier than a stratum may be drawn twice and weighs both)."""
    cum = np.cumsum(weights.astype(float))
    total = cum[-1]
    rng = np.random.default_rng(seed)
    picks = np.minimum(np.searchsorted(cum, (np.arange(k) + rng.random(k)) * (total / k), side="right"),
                       len(weights) - 1)
    idx, inv = np.unique(picks, return_inverse=True)
    return idx, np.bincount(inv.reshape(-1), minlength=len(idx)) * (total / k)


@dataclass(frozen=True, eq=False)
class StepArrays:
    """Every step of a workload: KV lengths ``seq_lens[offsets[i]:offsets[i + 1]]`` of step ``i`` in batch order,
    its query lengths likewise, how many times it occurs (``weights``) and the output tokens it generates."""

    offsets: np.ndarray  # int64 [n + 1]
    seq_lens: np.ndarray  # int64 [offsets[-1]]
    query_lens: np.ndarray  # int64 [offsets[-1]]
    weights: np.ndarray  # int64 [n]
    tokens: np.ndarray  # int64 [n]: output tokens generated (a speculative step generates its accepted drafts too)
    source: str
    notes: tuple[str, ...] = ()
    origins: Sequence[str] = field(default=())  # per step "file, line n" where known (else derived from the index)

    def __post_init__(self) -> None:
        n = len(self.offsets) - 1
        if n < 1 or len(self.weights) != n or len(self.tokens) != n or len(self.seq_lens) != self.offsets[-1]:
            raise ValueError("inconsistent step arrays")

    @property
    def num_steps(self) -> int:
        return len(self.offsets) - 1

    @property
    def batch(self) -> np.ndarray:
        return np.diff(self.offsets)

    def origin(self, i: int) -> str:
        return self.origins[i] if i < len(self.origins) and self.origins[i] else f"{self.source}, step {i + 1}"

    def step_lens(self, i: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return tuple(self.seq_lens[a:b].tolist()), tuple(self.query_lens[a:b].tolist())

    def per_step_max(self, values: np.ndarray) -> np.ndarray:
        return np.maximum.reduceat(values, self.offsets[:-1])

    def per_step_min(self, values: np.ndarray) -> np.ndarray:
        return np.minimum.reduceat(values, self.offsets[:-1])

    def per_step_sum(self, values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values, self.offsets[:-1])

    def blocks(self) -> Iterator[Block]:
        """The steps grouped by padded batch width (powers of two), each group cut to at most BLOCK_ELEMENTS."""
        b = self.batch
        width = np.where(b <= 1, 1, 1 << np.ceil(np.log2(np.maximum(b, 1))).astype(np.int64))
        for w in np.unique(width):
            rows_all = np.flatnonzero(width == w)
            per = max(1, BLOCK_ELEMENTS // int(w))
            for k in range(0, len(rows_all), per):
                yield self._block(rows_all[k:k + per], int(w))

    def sample(self, k: int, seed: int = 20261201) -> tuple[StepArrays, np.ndarray]:
        """``k`` steps, one from each of ``k`` consecutive strata of equal weight (workload order, a seeded position
        in each), each weighing its stratum: a sample whose weighted totals estimate the workload's without bias.
        Returns the sample and the indices of its steps."""
        idx, w = stratified_picks(self.weights, k, seed)
        counts = self.batch[idx]
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        take = np.concatenate([np.arange(self.offsets[i], self.offsets[i + 1]) for i in idx.tolist()])
        sub = StepArrays(offsets=offsets, seq_lens=self.seq_lens[take], query_lens=self.query_lens[take],
                         weights=w, tokens=self.tokens[idx], source=self.source, notes=self.notes,
                         origins=[self.origin(int(i)) for i in idx])
        return sub, idx

    def block_of(self, rows: Indices) -> Block:
        """The steps ``rows`` as one block (padded to their widest batch)."""
        r = np.asarray(rows, dtype=np.int64)
        return self._block(r, int(self.batch[r].max()))

    def _block(self, rows: np.ndarray, w: int) -> Block:
        starts = self.offsets[rows]
        counts = self.offsets[rows + 1] - starts
        col = np.arange(w)
        mask = col[None, :] < counts[:, None]
        idx = np.where(mask, starts[:, None] + col[None, :], 0)
        lens = np.where(mask, self.seq_lens[idx], 0)
        q = np.where(mask, self.query_lens[idx], 0)
        return Block(rows=rows, lens=lens, query_lens=q, mask=mask, batch=counts)


@dataclass(frozen=True, eq=False)
class Block:
    """Steps of one padded width: ``lens[r, :batch[r]]`` are step ``rows[r]``'s KV lengths, the rest 0."""

    rows: np.ndarray  # int64 [R]: step indices
    lens: np.ndarray  # int64 [R, W]
    query_lens: np.ndarray  # int64 [R, W]
    mask: np.ndarray  # bool [R, W]: a real sequence
    batch: np.ndarray  # int64 [R]

    @property
    def width(self) -> int:
        return self.lens.shape[1]

    def safe_lens(self) -> np.ndarray:
        """Lengths with the padding at 1, for rules that divide by a length (their results are masked out)."""
        return np.maximum(self.lens, 1)

    def max_len(self) -> np.ndarray:
        return self.lens.max(axis=1)

    def min_len(self) -> np.ndarray:
        return np.where(self.mask, self.lens, np.iinfo(np.int64).max).min(axis=1)


def from_trace(trace: StepTrace) -> StepArrays:
    """The arrays of a :class:`StepTrace` (a workload of DecodeStep objects: presets, small files, the API)."""
    steps = trace.steps
    counts = np.fromiter((s.batch for s in steps), dtype=np.int64, count=len(steps))
    offsets = np.zeros(len(steps) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    seq = np.fromiter((L for s in steps for L in s.seq_lens), dtype=np.int64, count=int(offsets[-1]))
    q = np.fromiter((x for s in steps for x in s.query_lens), dtype=np.int64, count=int(offsets[-1]))
    weights = np.fromiter((s.weight for s in steps), dtype=np.int64, count=len(steps))
    tokens = np.fromiter((s.generated_tokens for s in steps), dtype=np.int64, count=len(steps))
    return StepArrays(offsets=offsets, seq_lens=seq, query_lens=q, weights=weights, tokens=tokens,
                      source=trace.source, notes=trace.notes, origins=tuple(s.origin for s in steps))


class NumberedOrigins(Sequence[str]):
    """Where each step came from, ``source, <what> n`` (``engine step`` of a request trace, ``line`` of a step
    file), made on demand: a million steps need no million strings."""

    def __init__(self, source: str, what: str, numbers: np.ndarray) -> None:
        self.source, self.what, self.numbers = source, what, numbers

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, i: int) -> str:  # type: ignore[override]  # by index only: no slices
        return f"{self.source}, {self.what} {int(self.numbers[i])}"


def from_columns(cols: Any) -> StepArrays:
    """The arrays of a step file read by :func:`decodecalc.traffic.steps.load_step_columns` (no copy of its lengths)."""
    offsets = np.frombuffer(cols.offsets, dtype=np.int64)
    seq = np.frombuffer(cols.seq_lens, dtype=np.int64)
    q = np.frombuffer(cols.query_lens, dtype=np.int64)
    weights = np.frombuffer(cols.weights, dtype=np.int64)
    tokens = np.diff(offsets)
    return StepArrays(offsets=offsets, seq_lens=seq, query_lens=q, weights=weights, tokens=tokens, source=cols.source,
                      origins=NumberedOrigins(cols.source, "line", np.frombuffer(cols.lines, dtype=np.int64)))
