"""Arrival times for a request trace that has none, or whose own the user replaces (``tune --rate``): a seeded
Poisson process, by default at the rate that keeps the engine's ``--max-num-seqs`` busy."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.traffic.requests import BatchingLimits


#: the seed of the Poisson arrivals given to a trace without arrival times (--rate): the same file, the same steps
RATE_SEED = 20261206


def busy_rate(output: Sequence[int], limits: BatchingLimits) -> float:
    """The arrival rate (requests/s) that holds ``max_num_seqs`` requests running, by Little's law: a request runs
    for about its output tokens in engine steps (one prefill step, then ``O - 1`` decode steps), so
    ``rate = max_num_seqs / (mean output tokens x step_interval_s)``."""
    mean_output = sum(output) / len(output)
    return limits.max_num_seqs / (mean_output * limits.step_interval_s)


def poisson_arrivals(n: int, rate: float, seed: int = RATE_SEED) -> array[float]:
    """``n`` arrival times (seconds, the first at 0) of a Poisson process of ``rate`` requests/s, seeded."""
    import random

    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
        raise ConfigError(f"--rate must be a positive number of requests per second, got {rate!r}")
    rng = random.Random(seed)
    out = array("d", [0.0]) * n
    t = 0.0
    for i in range(1, n):
        t += rng.expovariate(rate)
        out[i] = t
    return out


def arrivals_of(table: Any, limits: BatchingLimits, rate: float | None
                ) -> tuple[Sequence[float], dict[str, Any] | None, tuple[str, ...]]:
    """(the arrival times to batch a :class:`~decodecalc.traffic.traces.RequestTable` with, the JSON's ``arrivals``
    block or None, notes): the trace's own, or Poisson arrivals at ``rate`` (``--rate``), or, for a trace without
    arrival times (ShareGPT: every request would arrive at t=0 and the batch would drain to one sequence), at
    :func:`busy_rate`."""
    if rate is None and table.has_arrivals:
        return table.arrival_s, None, ()
    given = rate is not None
    r = float(rate) if given else busy_rate(table.output_tokens, limits)  # type: ignore[arg-type]
    n = len(table.output_tokens)
    arrival = poisson_arrivals(n, r)
    formula = (f"max_num_seqs {limits.max_num_seqs} / (mean output {sum(table.output_tokens) / n:,.1f} "
               f"tokens x {limits.step_interval_s:g} s a step)")
    block = {"kind": "poisson", "rate_per_s": r, "seed": RATE_SEED, "given": given,
             "replaced_file_arrivals": bool(table.has_arrivals),
             "formula": None if given else "max_num_seqs / (mean output tokens x step_interval_s)"}
    note = (f"arrivals: Poisson at {r:,.4g} requests/s (--rate, seed {RATE_SEED})" if given else
            f"no arrival times in the file: Poisson arrivals at {r:,.4g} requests/s, the rate that holds "
            f"--max-num-seqs busy: {formula} (seed {RATE_SEED}; --rate R sets another)")
    if given and table.has_arrivals:
        note += "; the file's own arrival times are not used"
    return arrival, block, (note,)
