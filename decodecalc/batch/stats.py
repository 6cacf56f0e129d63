"""Statistics of per-step times over a workload (weighted by how often each step occurs), on arrays."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Nearest rank, as :func:`decodecalc.traffic.weighted_percentile`: the smallest value whose cumulative weight
    reaches ``q`` percent of the total. A high percentile sorts only the top of the values (a partition first)."""
    total = float(weights.sum())
    rank = max(1, math.ceil(q / 100.0 * int(total)))
    n = len(values)
    # the values above the rank: at most (total - rank) / min weight of them, plus one
    w_min = float(weights.min())
    top = int(min(n, (total - rank) / w_min + 2)) if w_min > 0 else n
    if top < n // 4:
        idx = np.argpartition(values, n - top)[n - top:]
        below = total - float(weights[idx].sum())  # the weight of every value outside the top
        if below < rank:
            order = idx[np.argsort(values[idx], kind="stable")]
            cum = below + np.cumsum(weights[order])
            return float(values[order[min(int(np.searchsorted(cum, rank)), len(order) - 1)]])
    return _sorted_percentiles(values, weights, (q,))[0]


#: integral values up to this are counted per value (a histogram) instead of sorted: the KV lengths of a million steps
#: are tens of millions of values, and a sort of them takes seconds
COUNT_BELOW = 1 << 25


def _sorted_percentiles(values: np.ndarray, weights: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """The value at which the weight, in increasing order of value, first reaches each ``q`` per cent of the total:
    over the values in order (a sort), or over every integer value up to the largest (a histogram, when the values
    are integral and small enough: the same picks, since equal values tie)."""
    iv = values.astype(np.int64) if len(values) > 4096 and 0 <= values.min() and values.max() < COUNT_BELOW else None
    if iv is not None and bool((iv == values).all()):
        cum = np.cumsum(np.bincount(iv, weights=weights))
        value_at: Callable[[int], float] = float  # the histogram's k-th entry holds the value k
    else:
        order = np.argsort(values, kind="stable")
        cum = np.cumsum(weights[order])
        value_at = lambda k: float(values[order[k]])  # noqa: E731 - the sorted side's counterpart of float
    total = int(cum[-1])
    last = len(cum) - 1
    return [value_at(min(int(np.searchsorted(cum, max(1, math.ceil(q / 100.0 * total)))), last)) for q in qs]


def summary(times: np.ndarray, weights: np.ndarray) -> tuple[float, float, float]:
    """(weighted mean, p99, total) of per-step times."""
    total = float((times * weights).sum())
    return total / float(weights.sum()), weighted_percentile(times, weights, 99), total


def worst_ratio(new: np.ndarray, old: np.ndarray) -> tuple[float, int]:
    """(max over steps of new / old, the step where it is reached)."""
    r = new / old
    i = int(np.argmax(r))
    return float(r[i]), i


def ratio_quantile(new: np.ndarray, old: np.ndarray, weights: np.ndarray, q: float) -> tuple[float, int]:
    """(the weighted nearest-rank ``q`` quantile of new / old over the steps, a step where it is reached)."""
    r = new / old
    value = weighted_percentile(r, weights, q * 100.0)
    return value, int(np.argmax(r == value))


def share_above(new: np.ndarray, old: np.ndarray, weights: np.ndarray, limit: float) -> float:
    """The weighted share of steps whose new / old exceeds ``limit``."""
    return float(weights[new > old * limit].sum()) / float(weights.sum())


def top_ratio_steps(new: np.ndarray, old: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` steps with the largest new / old, largest first."""
    r = new / old
    k = min(k, len(r))
    idx = np.argpartition(-r, k - 1)[:k]
    return idx[np.argsort(-r[idx])]


def percentiles(values: np.ndarray, weights: np.ndarray) -> dict[str, float]:
    """The JSON's mean / p50 / p90 / p99 / max / min of weighted values."""
    total = float(weights.sum())
    p50, p90, p99 = _sorted_percentiles(values, weights, (50, 90, 99))
    return {"mean": float((values * weights).sum()) / total, "p50": p50, "p90": p90, "p99": p99,
            "max": float(values.max()), "min": float(values.min())}


def as_number(x: float) -> Any:
    """An integral float as an int (the JSON's lengths and batch sizes)."""
    return int(x) if float(x).is_integer() else x


def changes(new: np.ndarray, old: np.ndarray, weights: np.ndarray, batch: np.ndarray, *, threshold: float,
            buckets: tuple[tuple[int, int], ...]) -> dict[str, Any]:
    """Which steps gain and which lose under ``new`` against ``old``: weighted counts beyond ``threshold``, the
    mean step time per batch-size bucket, and the steps of the biggest gain and loss (indices)."""
    r = new / old
    gain = int(weights[r < 1 - threshold].sum())
    lose = int(weights[r > 1 + threshold].sum())
    same = int(weights.sum()) - gain - lose
    rows = []
    for lo, hi in buckets:
        sel = (batch >= lo) & (batch <= hi)
        if not sel.any():
            continue
        w = weights[sel]
        count = int(w.sum())
        old_s, new_s = float((old[sel] * w).sum()), float((new[sel] * w).sum())
        rows.append({"batch": f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi < 1 << 30 else f">={lo}"),
                     "steps": count, "default_mean_step_s": old_s / count, "best_mean_step_s": new_s / count,
                     "change": new_s / old_s - 1.0})
    return {"gain": gain, "lose": lose, "same": same, "by_batch": rows, "best_step": int(np.argmin(r)),
            "worst_step": int(np.argmax(r)), "best_ratio": float(r.min()), "worst_ratio": float(r.max())}


#: the hash's mix of a KV length (the golden ratio in 64 bits)
HASH_LENGTH_MIX = np.uint64(0x9E3779B97F4A7C15)


def hash_multipliers(width: int) -> np.ndarray:
    """The odd 64-bit multiplier of each position of a step (a seeded draw: the same in every run)."""
    rng = np.random.default_rng(0x5EED)
    return rng.integers(1, 2**63, size=max(width, 1), dtype=np.uint64) | np.uint64(1)


def step_hashes(offsets: np.ndarray, seq_lens: np.ndarray, query_lens: np.ndarray) -> np.ndarray:
    """A 64-bit hash of every step's (KV length, query length) pairs in order: equal steps, equal hashes (distinct
    steps collide with probability ~2^-64 per pair). Linear in the lengths (decodecalc.batch.runs relies on it)."""
    n = len(offsets) - 1
    pos = np.arange(len(seq_lens)) - np.repeat(offsets[:-1], np.diff(offsets))
    mult = hash_multipliers(int(pos.max()) + 1 if len(pos) else 1)
    with np.errstate(over="ignore"):
        mixed = (seq_lens.astype(np.uint64) * HASH_LENGTH_MIX + query_lens.astype(np.uint64)) * mult[pos]
        h = np.add.reduceat(mixed, offsets[:-1]) if n else np.zeros(0, dtype=np.uint64)
        h = h * np.uint64(31) + np.diff(offsets).astype(np.uint64)
    return h


def gate_mask(per_pattern: list[bool], index: np.ndarray) -> np.ndarray:
    """Per step: the value of its pattern (e.g. whether vLLM's gate runs the 3D kernel for its batch)."""
    return np.asarray(per_pattern, dtype=bool)[index]


def compose(mask: np.ndarray, on: Any, off: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times, scores, exact) per step from the estimate ``on`` where ``mask`` holds, else ``off``."""
    return (np.where(mask, on.time, off.time), np.where(mask, on.score, off.score),
            np.where(mask, on.exact, off.exact))


def elementwise_min(arrays: list[np.ndarray]) -> np.ndarray:
    return np.minimum.reduce(arrays)


@dataclass(frozen=True, eq=False)
class QueryKeys:
    """The distinct query-length patterns of a workload's steps and each step's pattern (vLLM's gate, graph padding
    and tiles depend on a batch's query lengths only)."""

    patterns: list[tuple[int, ...]]
    index: np.ndarray  # int64 [n]


def query_keys(offsets: np.ndarray, query_lens: np.ndarray) -> QueryKeys:
    batch = np.diff(offsets)
    if bool((query_lens == 1).all()):
        sizes, index = np.unique(batch, return_inverse=True)
        return QueryKeys([(1,) * int(b) for b in sizes], index.reshape(-1))
    seen: dict[tuple[int, ...], int] = {}
    index = np.empty(len(batch), dtype=np.int64)
    for i in range(len(batch)):
        key = tuple(int(x) for x in query_lens[offsets[i]:offsets[i + 1]])
        index[i] = seen.setdefault(key, len(seen))
    return QueryKeys(list(seen), index)


def pick_per_step(choice: list[int], by_choice: dict[int, np.ndarray]) -> np.ndarray:
    """Per step ``i``, ``by_choice[choice[i]][i]`` (a per-step rule's pick among per-choice time arrays)."""
    c = np.asarray(choice)
    out = np.empty(len(c))
    for key, times in by_choice.items():
        sel = c == key
        out[sel] = times[sel]
    return out
