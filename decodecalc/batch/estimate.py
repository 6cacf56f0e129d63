"""Where the array model has no closed form, the scalar model on a sample of steps corrects the proxy.

For a recipe, the steps whose launch has a ragged kernel of more than one wave (``Proxies.exact`` False) get the
proxy of :func:`decodecalc.batch.kernels.ragged_proxy_s`. A sample of them, the *anchors*, is timed exactly by
the scalar model (:class:`~decodecalc.batch.evaluate.ExactTimer`); every other such step gets its proxy times the
ratio exact / proxy interpolated between the anchors around it in workload order (consecutive steps of a
continuous-batching workload differ by a token per sequence and a few joins and leaves, so the ratio moves
slowly). Anchors start stratified by each step's share of the total (a seeded position in each stratum) and are
added where the error is largest until the estimated standard error of the recipe's total (and of its ranking
score's total) is under the target, or every such step is an anchor (then the result is exact), or the anchor
budget is spent.

The error estimate: an anchor's ratio deviates from its neighbours' by noise of variance ``sigma^2`` (estimated
from consecutive anchors: half the mean squared difference, which also counts the drift, so it errs high), and
every step interpolated from an anchor carries that anchor's deviation, so the total's variance is about
``sum_a C_a^2 sigma_a^2`` with ``C_a`` the share of the total interpolated from anchor ``a``.
tests/test_batch.py and benchmarks/bench_tune.py measure the real error against exact evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from decodecalc.batch.evaluate import ExactTimer, robust_score
from decodecalc.batch.kernels import DELTAS, Proxies
from decodecalc.batch.launches import Recipe

#: anchors a recipe starts with (at most the steps that need them)
INITIAL_ANCHORS = 24
#: the standard error of a total, relative, below which no anchor is added: 0.03% (so 0.1% is over 3 sigma)
TARGET_REL_SE = 3e-4
#: every this-many-th anchor also times the ranking score's two neighbouring points
SCORE_EVERY = 3
#: the ranking score's total needs this many times less precision than the totals shown (it only ranks)
SCORE_TARGET_FACTOR = 3.0
SEED = 20261201


@dataclass(frozen=True, eq=False)
class Estimate:
    """A recipe's per-step times: ``times[k]`` at occupancy delta DELTAS[k], ``score`` the ranking score."""

    times: np.ndarray  # float64 [3, n]
    score: np.ndarray  # float64 [n]
    exact: np.ndarray  # bool [n]: the scalar model's value (a closed form or an anchor)
    splits: np.ndarray  # int64 [n]
    anchors: np.ndarray  # int64: steps timed by the scalar model
    rel_se: float  # estimated standard error of the weighted total of times[0], relative
    rel_se_score: float  # the same for the ranking score
    anchor_times: dict = field(default_factory=dict)  # step -> its exact times (to continue the estimate)

    @property
    def time(self) -> np.ndarray:
        return self.times[0]


def estimate(recipe: Recipe, px: Proxies, timer: ExactTimer, weights: np.ndarray, *,
             target_rel_se: float = TARGET_REL_SE, max_anchors: int | None = 2000, only: np.ndarray | None = None,
             start: Estimate | None = None, points: int = len(DELTAS)) -> Estimate:
    """``recipe``'s per-step times: exact where the array model is, else proxy x interpolated ratio (module doc).
    ``max_anchors`` None: every step without a closed form is timed exactly. ``only``: estimate these steps (a
    boolean mask; the others keep the proxy, for the caller to fill). ``start``: continue from an earlier estimate of
    the same recipe (its anchors kept) towards a tighter target.

    Anchors time the prediction itself (occupancy delta 0); every SCORE_EVERY-th also its two neighbours (the
    ranking score's points), whose ratio to the proxy is interpolated as the main point's ratio times a slowly moving
    correction (the score's total needs only SCORE_TARGET_FACTOR times the precision: it ranks)."""
    need = ~px.exact.all(axis=0)  # steps with a ragged kernel at some occupancy point
    if only is not None:
        need &= only
    J = np.flatnonzero(need)
    times = px.times.copy()
    if len(J) == 0:
        return Estimate(times, robust_score(times), np.ones(len(weights), dtype=bool), px.splits,
                        np.zeros(0, dtype=np.int64), 0.0, 0.0)
    exhaustive = max_anchors is None or len(J) <= 2 * INITIAL_ANCHORS
    # a handful of steps is timed exactly outright (an estimate needs a few dozen anchors to know its own error)
    cap = len(J) if exhaustive else min(len(J), max(max_anchors, 1))
    mass = weights[J] * px.times[0, J]
    exact_t: dict[int, np.ndarray] = dict(start.anchor_times) if start is not None else {}
    new = _stratified(J, mass, min(cap, INITIAL_ANCHORS if cap < len(J) else cap))
    full = set(new.tolist()[::SCORE_EVERY]) if not exhaustive else set(new.tolist())
    if points == 1:  # the prediction only (its neighbours copy it)
        full, score_target = set(), float("inf")
    score_target = target_rel_se * SCORE_TARGET_FACTOR if points > 1 else float("inf")
    while True:
        for a in new.tolist():
            if a not in exact_t:
                exact_t[a] = timer.times(recipe, a, all_points=a in full)
            elif a in full and np.isnan(exact_t[a][1]):
                exact_t[a] = timer.times(recipe, a, all_points=True)
        A = np.array(sorted(exact_t), dtype=np.int64)
        times, (rel_se, rel_se_score) = _interpolate(px, A, exact_t, weights, only)
        if len(A) >= cap and (exhaustive or len(A) >= len(J)):
            break
        if rel_se > target_rel_se and len(A) < cap:
            new = _refine(J, mass, A, times, px, cap - len(A))
            full = set(new.tolist()[::SCORE_EVERY]) if points > 1 else set()
        elif rel_se_score > score_target:
            lacking = [a for a in A.tolist() if np.isnan(exact_t[a][1])]
            if not lacking:
                if len(A) >= cap:
                    break
                new = _refine(J, mass, A, times, px, cap - len(A))
                full = set(new.tolist())
            else:
                new = np.array(lacking[::2][:max(8, len(A) // 4)], dtype=np.int64)
                full = set(new.tolist())
        else:
            break
        if len(new) == 0:
            break
    if points == 1:
        times[1:] = times[0]
        rel_se_score = rel_se
    exact = np.ones(len(weights), dtype=bool)
    exact[J] = False
    exact[A[[points == 1 or not np.isnan(exact_t[a][1]) for a in A.tolist()]]] = True
    if len(A) == len(J) and exact[J].all():
        rel_se = rel_se_score = 0.0
    return Estimate(times, robust_score(times), exact, px.splits, A, float(rel_se), float(rel_se_score),
                    anchor_times=exact_t)


def _stratified(J: np.ndarray, mass: np.ndarray, k: int) -> np.ndarray:
    """``k`` steps of ``J``, one in each of ``k`` strata of equal mass, at a seeded position within it."""
    if k >= len(J):
        return J.copy()
    cum = np.cumsum(mass)
    rng = np.random.default_rng(SEED + len(J))
    targets = (np.arange(k) + rng.random(k)) * (cum[-1] / k)
    pos = np.minimum(np.searchsorted(cum, targets), len(J) - 1)
    return np.unique(J[pos])


def _interpolate(px: Proxies, A: np.ndarray, exact_t: dict, weights: np.ndarray, only: np.ndarray | None
                 ) -> tuple[np.ndarray, tuple[float, float]]:
    """Times with every inexact step's proxy scaled by the ratio interpolated from the anchors, and the estimated
    relative standard errors of the totals of times[0] and of the score."""
    times = px.times.copy()
    ex = np.array([exact_t[a] for a in A.tolist()]).T  # [3, len(A)], NaN where a point was not timed
    keep = True if only is None else only
    n = px.times.shape[1]
    # the main point: its ratio at every step (1 where the array model is exact)
    r0 = np.ones(n)
    J0 = np.flatnonzero(~px.exact[0] & keep)
    var0 = 0.0
    if len(J0):
        use = ~px.exact[0, A]
        A0, rk = A[use], ex[0, use] / px.times[0, A[use]]
        r0[J0] = np.interp(J0, A0, rk)
        r0[A0] = rk
        var0 = _variance(J0, A0, rk, weights[J0] * px.times[0, J0])
    times[0, J0] = px.times[0, J0] * r0[J0]
    var = [var0]
    for k in range(1, len(DELTAS)):
        J = np.flatnonzero(~px.exact[k] & keep)
        if len(J) == 0:
            var.append(0.0)
            continue
        have = ~np.isnan(ex[k]) & ~px.exact[k, A]
        Ak = A[have]
        if len(Ak):  # the neighbour's ratio = the main point's x a correction interpolated between full anchors
            c = (ex[k, have] / px.times[k, Ak]) / r0[Ak]
            corr = np.interp(J, Ak, c)
            var_c = _variance(J, Ak, c, weights[J] * px.times[k, J])
        else:
            corr, var_c = np.ones(len(J)), float((weights[J] * px.times[k, J]).sum() * 0.01) ** 2
        times[k, J] = px.times[k, J] * r0[J] * corr
        times[k, Ak] = ex[k, have]
        var.append(var0 + var_c)
    tot = (weights * times).sum(axis=1)
    rel = np.sqrt(np.array(var)) / tot
    # the score is the geometric mean of the three points: its relative error about the mean of theirs
    return times, (float(rel[0]), float(rel.mean()))


def _variance(J: np.ndarray, A: np.ndarray, r: np.ndarray, mass: np.ndarray) -> float:
    """Estimated variance of sum(mass * interpolated ratio) around the truth (module doc)."""
    if len(A) == len(J):
        return 0.0
    is_anchor = np.isin(J, A)
    m = np.where(is_anchor, 0.0, mass)
    right = np.clip(np.searchsorted(A, J), 0, len(A) - 1)
    left = np.clip(right - 1, 0, len(A) - 1)
    span = (A[right] - A[left]).astype(float)
    alpha = np.where(span > 0, (J - A[left]) / np.where(span > 0, span, 1.0), 0.0)
    alpha = np.where(J >= A[-1], 1.0, np.where(J <= A[0], 0.0, alpha))
    C = np.bincount(left, weights=m * (1 - alpha), minlength=len(A)) + np.bincount(right, weights=m * alpha,
                                                                                  minlength=len(A))
    if len(A) < 2:
        return float((C[0] * 0.05) ** 2)  # one anchor: assume the proxy's spread on the H200 (5%)
    d2 = np.diff(r) ** 2 / 2
    local = np.concatenate([[d2[0]], (d2[:-1] + d2[1:]) / 2, [d2[-1]]]) if len(d2) > 1 else np.repeat(d2, 2)
    sigma2 = np.maximum(local, d2.mean() / 4)  # a quiet stretch keeps a floor of the workload's noise
    return float((C ** 2 * sigma2).sum() + (m ** 2).sum() * d2.mean())


def _refine(J: np.ndarray, mass: np.ndarray, A: np.ndarray, times: np.ndarray, px: Proxies, room: int) -> np.ndarray:
    """New anchors: the segments between anchors with the largest mass x ratio change are split at their middle
    (by mass); the stretch before the first and after the last anchor count as segments too."""
    r = times[0, A] / px.times[0, A]
    pos = np.searchsorted(J, A)  # anchors' positions in J
    bounds = np.concatenate([[-1], pos, [len(J)]])
    dr = np.abs(np.diff(np.concatenate([[r[0]], r, [r[-1]]])))
    floor = max(float(np.mean(dr)), 1e-12)
    cum = np.concatenate([[0.0], np.cumsum(mass)])
    seg_mass = cum[bounds[1:]] - cum[np.minimum(bounds[:-1] + 1, len(J))]
    score = seg_mass * np.maximum(dr, floor / 2)
    open_ = bounds[1:] - bounds[:-1] > 1  # a step lies strictly between
    order = np.argsort(-np.where(open_, score, -1.0))
    take = min(room, max(8, len(A) // 4), int(open_.sum()))
    out = []
    for s in order[:take]:
        lo, hi = bounds[s] + 1, bounds[s + 1]  # J indices strictly inside
        mid = cum[lo] + (cum[hi] - cum[lo]) / 2
        p = int(np.clip(np.searchsorted(cum, mid) - 1, lo, hi - 1))
        out.append(J[p])
    return np.unique(np.array(out, dtype=np.int64))
