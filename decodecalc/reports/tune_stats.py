"""The statistics tune reports for per-step times: weighted mean, p99 and total."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Stats:
    mean_step_s: float
    p99_step_s: float
    total_s: float

    def to_dict(self) -> dict[str, float]:
        return {"mean_step_s": self.mean_step_s, "p99_step_s": self.p99_step_s, "total_s": self.total_s}


def stats(times: Any, weights: Any) -> Stats:
    """Weighted mean, p99 (nearest rank) and total of per-step times (arrays over the workload's steps)."""
    from decodecalc.batch.stats import summary

    return Stats(*summary(times, weights))
