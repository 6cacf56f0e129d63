"""A whole workload's totals from a sample of its steps: the regression estimator.

A workload too large to time every step of under every contender is measured on a stratified sample
(:meth:`~decodecalc.batch.steps.StepArrays.sample`: one step per stratum of equal weight, in workload order, each
weighing its stratum). A total over every step is then estimated as

    sum over all steps of x . beta  +  sum over the sample of w (t - x . beta)

with ``x`` covariates every step has at no cost (COVARIATES: a constant, its sequences, its KV tokens, its longest
sequence; and for every batch class but the smallest present, batch in (2^(k-1), 2^k], an indicator, its sequences
and its KV tokens:
vLLM's 2D/3D gate switches kernels at a power of two of the batch, so a candidate's times jump there and a fit on
the size alone would leave the jump in the residuals) and ``beta`` the weighted least-squares fit of the sampled
steps' times on them. The fit takes out what the
step's size explains, so the sampling error is that of the residuals only (a few times less than the plain weighted
sum's for vLLM's kernels on a 100,000-step trace). Its standard error comes from the successive differences of the
weighted residuals in workload order (neighbouring strata paired); on that trace it errs high by 1.3-1.9x (measured
with benchmarks/bench_tune.py's 100,000-step case when the estimator was written, commit 3ef5909).
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


def batch_class(batch: np.ndarray) -> np.ndarray:
    """ceil(log2(batch)) per step (batch >= 1): the classes (2^(k-1), 2^k] whose indicators the fit takes. vLLM
    runs the 3D kernel while num_seqs <= seq_threshold_3D (launchers/vllm_unified.py, the 0.33.0 gate), and
    seq_threshold_3D = MIN_LAUNCH_GRID_SIZE_2D // num_kv_heads is a power of two for every candidate tune searches
    (reports/tune_space.vllm_grid_range: h_kv x 2^k); a default whose threshold is not one (128 // 3 = 42, say)
    keeps its jump inside a class, in the residuals, as before these columns."""
    return np.ceil(np.log2(np.maximum(batch, 1))).astype(np.int64)


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
        sums, x = (x_all * w[:, None]).sum(axis=0), x_all[index]
        # the batch classes' columns, summed by class (no [steps, classes] array for a million steps)
        klass = batch_class(whole.batch)
        present = np.unique(klass)[1:]
        if len(present):
            n_cls = int(klass.max()) + 1
            by_class = [np.bincount(klass, weights=w * col, minlength=n_cls)[present]
                        for col in (1.0, x_all[:, 1], x_all[:, 2])]
            sums = np.concatenate([sums, np.ravel(np.column_stack(by_class))])
            ind = (klass[index][:, None] == present[None, :]).astype(np.float64)
            x = np.concatenate([x, np.stack([ind, ind * x[:, 1:2], ind * x[:, 2:3]], axis=2).reshape(len(index), -1)],
                               axis=1)
        return cls(sums=sums, x=x, weights=sample.weights.astype(np.float64),
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

    def _solver(self) -> np.ndarray:
        """The weighted least-squares fit as one matrix (beta = solver @ times): the design is the same for every
        candidate, so it is factored once (the pseudo-inverse of the column-scaled, sqrt-weighted covariates)."""
        got = self._memo.get("solver")
        if got is None:
            scale = np.abs(self.x).max(axis=0)
            scale[scale == 0] = 1.0
            sw = np.sqrt(self.weights)
            pinv = np.linalg.pinv(self.x / scale * sw[:, None], rcond=1e-12)
            got = self._memo["solver"] = (pinv / scale[:, None]) * sw[None, :]
        return got

    def _total(self, times: np.ndarray) -> tuple[float, float]:
        w = self.weights
        beta = self._solver() @ times
        resid = w * (times - self.x @ beta)
        total = float(self.sums @ beta + resid.sum())
        se = float(np.sqrt((np.diff(resid) ** 2).sum() / 2)) if len(resid) > 1 else abs(total)
        return total, se / total if total > 0 else 0.0
