"""Where the array model has no closed form, the scalar model on a stratified sample of steps corrects the proxy.

For a recipe, the steps whose launch has a ragged kernel of more than one wave (``Proxies.exact`` False) get the
proxy of :func:`decodecalc.batch.kernels.ragged_proxy_s`. The *anchors* correct it: the steps ``J`` that need it are
cut, in workload order, into ``k`` strata of equal mass (a step's mass: its weight x its proxy time), and in each
stratum one step is drawn with probability proportional to its mass (a seeded point of the stratum's mass) and timed
exactly by the scalar model (:class:`~decodecalc.batch.evaluate.ExactTimer`). With ``r_h`` the exact / proxy ratio of
stratum ``h``'s anchor, the total over ``J`` is estimated as ``sum_h (M / k) r_h`` (``M`` the mass of ``J``): the
stratified ratio estimator, without bias whatever the proxy's error (an anchor placed where the ratio moves most
would bias it: the ratio's noise is not independent of where it moves). Its variance is estimated from the successive
differences of the strata's ratios; more precision doubles ``k`` (each stratum split at its middle: its anchor stays
a draw of the half it lies in, the other half gets its own), until the estimated standard error of the total is under
the target, the anchor budget is spent, or every step of ``J`` is an anchor (then the result is exact).

Each step's own time is its proxy x the ratio interpolated between the anchors around it in workload order
(consecutive steps of a continuous-batching workload differ by a token per sequence and a few joins and leaves, so
the ratio moves slowly), scaled so that the steps' sum is the stratified total. tests/test_batch.py and
benchmarks/bench_tune.py measure the real error against exact evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from decodecalc.batch.evaluate import ExactTimer, robust_score
from decodecalc.batch.kernels import DELTAS, Proxies
from decodecalc.batch.launches import Recipe

#: strata a recipe's estimate starts with when its budget allows more (then doubled)
INITIAL_ANCHORS = 6
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
    exact: np.ndarray  # bool [n]: times[0] is the scalar model's value (a closed form or an anchor)
    splits: np.ndarray  # int64 [n]
    anchors: np.ndarray  # int64: steps timed by the scalar model
    rel_se: float  # estimated standard error of the weighted total of times[0], relative
    rel_se_score: float  # the same for the ranking score
    anchor_times: dict = field(default_factory=dict)  # step -> its exact times (to continue the estimate)
    points_u: np.ndarray | None = None  # the strata's anchor points (mass coordinates; to continue the estimate)
    strata_var: np.ndarray | None = None  # per step, the variance its strata add to the total (the estimate's own)
    ratio_sd: float = 0.0  # the spread of the strata's exact / proxy ratios

    @property
    def time(self) -> np.ndarray:
        return self.times[0]

    @property
    def strata(self) -> int:
        """Strata the estimate drew anchors in (every step needing one, when exact)."""
        return len(self.points_u) if self.points_u is not None else len(self.anchors)


def estimate(recipe: Recipe, px: Proxies, timer: ExactTimer, weights: np.ndarray, *,
             target_rel_se: float = TARGET_REL_SE, max_anchors: int | None = 2000, only: np.ndarray | None = None,
             start: Estimate | None = None, points: int = len(DELTAS), known: dict | None = None) -> Estimate:
    """``recipe``'s per-step times: exact where the array model is, else estimated (module doc). ``max_anchors``
    None: every step without a closed form is timed exactly; else the strata stop at the largest doubling of
    INITIAL_ANCHORS within it. ``only``: estimate these steps (a boolean mask; the others keep the proxy, for the
    caller to fill). ``start``: continue from an earlier estimate of the same recipe (its strata split further).
    ``known``: exact times already in hand (step -> times at the DELTAS points, NaN where not timed), used where a
    stratum draws that step.

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
    exact_t: dict[int, np.ndarray] = dict(start.anchor_times) if start is not None else {}
    cache = dict(known or {})

    def timed(wanted: list[tuple[int, bool]]) -> None:
        """The steps (step, with the neighbours' points) timed exactly where they are not yet, all at once."""
        todo: dict[bool, dict[int, None]] = {False: {}, True: {}}  # (ordered sets)
        for a, full in wanted:
            got = exact_t.get(a)
            if got is None:
                got = cache.get(a)
            if got is None or (full and np.isnan(got[1])):
                todo[full][a] = None
            else:
                exact_t[a] = got
        for full, steps in todo.items():
            if steps:
                order = list(steps)
                got_all = timer.times_many(recipe, order, all_points=full)
                for j, a in enumerate(order):
                    exact_t[a] = got_all[:, j]

    if max_anchors is None or len(J) <= 2 * INITIAL_ANCHORS or len(J) <= max_anchors // 2:
        # every step: the scalar model throughout (a handful, or a budget that covers them)
        timed([(a, points > 1) for a in J.tolist()])
        times = _exact_times(px, J, exact_t, points)
        exact = np.ones(len(weights), dtype=bool)
        return Estimate(times, robust_score(times), exact, px.splits, J.copy(), 0.0, 0.0, anchor_times=exact_t)

    mass = weights[J] * px.times[0, J]
    cum = np.cumsum(mass)
    cap = max(INITIAL_ANCHORS, max_anchors)
    u = start.points_u if start is not None and start.points_u is not None else _points(cum[-1], INITIAL_ANCHORS,
                                                                                        len(J))
    score_target = target_rel_se * SCORE_TARGET_FACTOR if points > 1 else float("inf")
    while True:
        pos = np.minimum(np.searchsorted(cum, u, side="right"), len(J) - 1)  # each stratum's anchor (index in J)
        timed([(int(J[p]), points > 1 and s % SCORE_EVERY == 0) for s, p in enumerate(pos.tolist())])
        times, rel_se, rel_se_score, var_at = _combine(px, J, pos, cum[-1], exact_t, weights, points)
        if 2 * len(u) > cap:
            break
        if target_rel_se == 0 or rel_se > target_rel_se:  # no target: the whole budget
            u = _split(u, cum[-1], len(J))
        elif rel_se_score > score_target:
            lacking = [a for a in np.unique(J[pos]).tolist() if np.isnan(exact_t[a][1])]
            if not lacking:
                u = _split(u, cum[-1], len(J))
                continue
            timed([(a, True) for a in lacking])
            times, rel_se, rel_se_score, var_at = _combine(px, J, pos, cum[-1], exact_t, weights, points)
            break
        else:
            break
    A = np.unique(J[pos])
    exact = np.ones(len(weights), dtype=bool)
    exact[J] = False
    exact[A] = True  # the prediction is the model's at every anchor (its neighbours may be estimates)
    return Estimate(times, robust_score(times), exact, px.splits, A, float(rel_se), float(rel_se_score),
                    anchor_times={a: exact_t[a] for a in A.tolist()}, points_u=u, strata_var=var_at,
                    ratio_sd=_ratio_sd(px, J, pos, exact_t))


def _ratio_sd(px: Proxies, J: np.ndarray, pos: np.ndarray, exact_t: dict) -> float:
    A = J[pos]
    r = np.array([exact_t[a][0] for a in A.tolist()]) / px.times[0, A]
    return float(np.std(r)) if len(r) > 1 else 0.05


def _points(total: float, k: int, salt: int) -> np.ndarray:
    """One seeded point in each of ``k`` equal parts of ``[0, total)``: where each stratum draws its anchor."""
    rng = np.random.default_rng(SEED + salt)
    return (np.arange(k) + rng.random(k)) * (total / k)


def _split(u: np.ndarray, total: float, salt: int) -> np.ndarray:
    """Every stratum split in two halves: the half that holds its point keeps it, the other draws a new one."""
    k = len(u)
    width = total / (2 * k)
    rng = np.random.default_rng(SEED + salt + 7919 * k)
    half = np.floor(u / width).astype(np.int64)  # the half (of 2k) each point lies in
    other = half ^ 1
    new = (other + rng.random(k)) * width
    return np.sort(np.concatenate([u, new]))


def _exact_times(px: Proxies, J: np.ndarray, exact_t: dict, points: int) -> np.ndarray:
    times = px.times.copy()
    ex = np.array([exact_t[a] for a in J.tolist()]).T
    times[:, J] = ex if points > 1 else ex[0]
    return times


def _combine(px: Proxies, J: np.ndarray, pos: np.ndarray, mass_total: float, exact_t: dict, weights: np.ndarray,
             points: int) -> tuple[np.ndarray, float, float, np.ndarray]:
    """Per-step times from the strata's anchors and the relative standard errors of the totals (module doc)."""
    k = len(pos)
    A = J[pos]  # stratum by stratum (an anchor may serve several)
    ex = np.array([exact_t[a] for a in A.tolist()]).T  # [3, k]
    r = ex[0] / px.times[0, A]
    stratum = mass_total / k
    total_J = stratum * r.sum()
    # each stratum's variance from its neighbours (half the mean squared difference to each): the total's is their
    # sum, and a part of the steps (a composed candidate's) sums its own strata's
    if k > 1:
        d2 = np.diff(r) ** 2 / 2
        local = np.concatenate([[d2[0]], (d2[:-1] + d2[1:]) / 2, [d2[-1]]]) * stratum ** 2
    else:
        local = np.array([(total_J * 0.05) ** 2])
    var = float(local.sum())
    var_at = np.zeros(len(weights))
    np.add.at(var_at, A, local)
    times = px.times.copy()
    uA, first = np.unique(A, return_index=True)
    r_at = np.interp(J, uA, r[first])
    mass = weights[J] * px.times[0, J]
    is_anchor = np.isin(J, uA)
    # the other steps' interpolated times scaled so that the total is the stratified estimate
    anchored = float((weights[uA] * ex[0, first]).sum())
    rest = float((mass * r_at)[~is_anchor].sum())
    scale = (total_J - anchored) / rest if rest > 0 and total_J > anchored else 1.0
    times[0, J] = px.times[0, J] * r_at * np.where(is_anchor, 1.0, scale)
    times[0, uA] = ex[0, first]
    tot0 = float((weights * times[0]).sum())
    rel0 = np.sqrt(var) / tot0
    if points == 1:
        times[1:] = times[0]
        return times, rel0, rel0, var_at
    # the neighbours: the main point's ratio x a correction interpolated between the anchors that timed them
    rels = []
    for d in range(1, len(DELTAS)):
        have = ~np.isnan(ex[d])
        if have.any():
            c = (ex[d, have] / px.times[d, A[have]]) / r[have]
            uc, fc = np.unique(A[have], return_index=True)
            corr = np.interp(J, uc, c[fc])
            var_c = (stratum * k / max(int(have.sum()), 1)) ** 2 * float((np.diff(c) ** 2).sum() / 2) \
                if have.sum() > 1 else (0.01 * total_J) ** 2
        else:
            corr, var_c = np.ones(len(J)), (0.01 * total_J) ** 2
        times[d, J] = px.times[d, J] * r_at * np.where(is_anchor, 1.0, scale) * corr
        full = uA[~np.isnan(ex[d, first])]
        times[d, full] = np.array([exact_t[a][d] for a in full.tolist()])
        rels.append(np.sqrt(var + var_c) / float((weights * times[d]).sum()))
    return times, rel0, float(np.mean([rel0] + rels)), var_at
