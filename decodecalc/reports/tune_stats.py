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


def stats(times: Any, weights: Any, population: Any = None) -> Stats:
    """Weighted mean, p99 (nearest rank) and total of per-step times (arrays over the workload's steps). With
    ``population`` (:class:`decodecalc.batch.population.Population`: the steps are its sample) the total and the mean
    are the regression estimates over every step of the workload; the p99 is the sample's."""
    from decodecalc.batch.stats import summary

    mean, p99, total = summary(times, weights)
    if population is not None:
        total, _ = population.total(times)
        mean = total / population.steps
    return Stats(mean, p99, total)
