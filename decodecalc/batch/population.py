"""A whole workload's totals from a sample of its steps: the regression estimator.

A workload too large to time every step of under every contender is measured on a stratified sample
(:meth:`~decodecalc.batch.steps.StepArrays.sample`: one step per stratum of equal weight, in workload order, each
weighing its stratum). A total over every step is then estimated as

    sum over all steps of x . beta  +  sum over the sample of w (t - x . beta)

with ``x`` covariates every step has at no cost (COVARIATES: a constant, its sequences, its KV tokens, its longest
sequence) and ``beta`` the weighted least-squares fit of the sampled steps' times on them. The fit takes out what the
step's size explains, so the sampling error is that of the residuals only (a few times less than the plain weighted
sum's for vLLM's kernels on a 100,000-step trace). Its standard error comes from the successive differences of the
weighted residuals in workload order (neighbouring strata paired); on that trace it errs high by 1.3-1.9x
(BENCHMARKS.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decodecalc.batch.steps import StepArrays

#: what every step is fitted on
COVARIATES = ("constant", "sequences", "kv_tokens", "longest_sequence")


def covariates(steps: StepArrays) -> np.ndarray:
    """[steps, len(COVARIATES)] float64."""
    lens = steps.seq_lens.astype(np.float64)
    return np.stack([np.ones(steps.num_steps), steps.batch.astype(np.float64), steps.per_step_sum(lens),
                     steps.per_step_max(lens)], axis=1)


@dataclass(frozen=True, eq=False)
class Population:
    """The covariate totals of every step, and the covariates and weights of the sample's steps."""

    sums: np.ndarray  # [len(COVARIATES)]: weighted over every step
    x: np.ndarray  # [sample steps, len(COVARIATES)]
    weights: np.ndarray  # the sample's weights (its strata)
    steps: int  # steps of the workload (weighted)
    tokens: int  # output tokens the workload generates
    #: the last few totals asked for, by the times array (tune asks again for the same candidate's times)
    _memo: dict = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, whole: Any, index: np.ndarray, sample: StepArrays) -> Population:
        """The population ``whole`` sampled at ``index`` as ``sample``."""
        x_all = whole.covariates() if hasattr(whole, "covariates") else covariates(whole)
        w = whole.weights.astype(np.float64)
        return cls(sums=(x_all * w[:, None]).sum(axis=0), x=x_all[index], weights=sample.weights.astype(np.float64),
                   steps=int(whole.weights.sum()), tokens=int((whole.tokens * whole.weights).sum()))

    def total(self, times: np.ndarray) -> tuple[float, float]:
        """(the estimated total of ``times`` (per sampled step) over every step, its relative standard error)."""
        got = self._memo.get(id(times))
        if got is not None and got[0] is times:
            return got[1]
        if len(self._memo) > 4096:
            self._memo.clear()
        out = self._total(times)
        self._memo[id(times)] = (times, out)  # the array is held, so its id is not reused while it is here
        return out

    def _total(self, times: np.ndarray) -> tuple[float, float]:
        w = self.weights
        scale = np.abs(self.x).max(axis=0)
        scale[scale == 0] = 1.0
        sw = np.sqrt(w)
        beta, *_ = np.linalg.lstsq(self.x / scale * sw[:, None], times * sw, rcond=None)
        beta = beta / scale
        resid = w * (times - self.x @ beta)
        total = float(self.sums @ beta + resid.sum())
        se = float(np.sqrt((np.diff(resid) ** 2).sum() / 2)) if len(resid) > 1 else abs(total)
        return total, se / total if total > 0 else 0.0
