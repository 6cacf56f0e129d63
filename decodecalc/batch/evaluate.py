"""Every step of a workload timed under one recipe: the launch time at the profile's occupancy and one program
per SM either side (the ranking score's three points), from the array kernels of :mod:`decodecalc.batch.kernels`
and the profile's residual map."""

from __future__ import annotations

import dataclasses
import math
import operator

import numpy as np

from decodecalc.batch.arrays import Indices
from decodecalc.timemodel import LaunchWork, TimeProfile
from decodecalc.timemodel.predict import iteration_cost, kernel_time_s
from decodecalc.timemodel.residuals import QUERY_STEP
from decodecalc.timemodel.work import KernelWork
from decodecalc.workload import Workload

from decodecalc.batch.kernels import DELTAS, Proxies, kernel_times
from decodecalc.batch.launches import LaunchArrays, Recipe
from decodecalc.batch.steps import StepArrays

#: every field of a kernel's work but its programs that exit at once: the memo key of its busy time (a tuple of
#: them is cheaper to build than a replaced dataclass)
_busy_fields = operator.attrgetter(*(f.name for f in dataclasses.fields(KernelWork) if f.name != "idle_programs"))


def residual_factor(la: LaunchArrays, profile: TimeProfile) -> np.ndarray | float:
    """The residual map's factor of each row's launch (:meth:`ResidualMap.correction`, looked up once per distinct
    memo point)."""
    rmap = profile.residuals
    if rmap is None:
        return 1.0
    main = la.kernels[0]
    occ = main.occupancy or profile.family(main.family).occupancy_for(main.head_dim)
    n = main.programs
    u = np.log2(np.maximum(main.mean_iters(), 1.0))
    v = np.log2(np.maximum(n, 1) / (occ * profile.num_sms))
    a = np.round(u / QUERY_STEP).astype(np.int64)
    b = np.round(v / QUERY_STEP).astype(np.int64)
    # one int64 per (a, b) memo point (|a|, |b| < 2^20: 2^65,536 iterations or programs), unique in one dimension
    uniq, inverse = np.unique((a << 21) + (b + (1 << 20)), return_inverse=True)
    cell = rmap.cell_for(la.cell, la.layout_cell)
    lf = np.array([rmap.log_factor_at(cell, k >> 21, (k & ((1 << 21) - 1)) - (1 << 20))[0]
                   for k in uniq.tolist()])
    return np.exp(lf)[inverse.reshape(-1)]


def proxies(recipe: Recipe, steps: StepArrays, profile: TimeProfile, points: int = len(DELTAS)) -> Proxies:
    """The recipe's per-step proxies at the first ``points`` occupancy points (the others, when fewer, copy the
    prediction's: the ranking score is then the prediction)."""
    px = _proxies(recipe, steps, profile, points)
    regime_s = profile.regime_launch_s(recipe.system)
    return px if not regime_s else dataclasses.replace(px, times=px.times + regime_s)


def _proxies(recipe: Recipe, steps: StepArrays, profile: TimeProfile, points: int) -> Proxies:
    own = recipe.proxies(steps, profile)
    if own is not None:
        return own
    n = steps.num_steps
    times = np.empty((len(DELTAS), n))
    exact = np.ones((len(DELTAS), n), dtype=bool)
    splits = np.ones(n, dtype=np.int64)
    signature: np.ndarray | None = None
    families: set[str] = set()
    for block in steps.blocks():
        for la in recipe.block_launches(block):
            families.update(k.family for k in la.kernels)
            idx = block.rows[la.rows]
            times[:points, idx], exact[:points, idx] = launch_times(la, profile, points)
            if points < len(DELTAS):
                times[points:, idx] = times[0, idx]
                exact[points:, idx] = exact[0, idx]
            splits[idx] = la.splits
            if la.signature is not None:
                if signature is None:
                    signature = np.zeros(n, dtype=np.uint64)
                signature[idx] = la.signature
    return Proxies(times=times, exact=exact, splits=splits, families=frozenset(families), signature=signature)


def exact_block_times(recipe: Recipe, steps: StepArrays, idx: np.ndarray, profile: TimeProfile,
                      points: int = len(DELTAS)) -> tuple[np.ndarray, np.ndarray]:
    """The scalar model's launch times of the steps ``idx`` at the first ``points`` occupancy points (NaN at the
    others), from the recipe's array launches: the closed forms where the model has one, the rest through the scalar
    model's own dispatch (:func:`decodecalc.batch.dispatch.busy_s`). Returns (times [3, len(idx)], whether each step
    got there: False where a kernel keeps no cells, for the caller to time step by step)."""
    times = np.full((len(DELTAS), len(idx)), np.nan)
    done = np.zeros(len(idx), dtype=bool)
    if not len(idx):
        return times, done
    block = steps.block_of(idx)
    regime_s = profile.regime_launch_s(recipe.system)
    for la in recipe.block_launches(block):
        t, ok = launch_times(la, profile, points, exact_rows=np.ones(len(la.rows), dtype=bool))
        times[:points, la.rows] = t + regime_s if regime_s else t
        done[la.rows] = ok.all(axis=0)
    return times, done


def launch_times(la: LaunchArrays, profile: TimeProfile, points: int,
                 exact_rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The launches' times at the first ``points`` occupancy points, before the regime's cost, and whether each is
    the scalar model's ([points, rows] each): launch gaps plus every kernel's :func:`kernel_times`, times the
    residual map's factor (:func:`decodecalc.timemodel.launch_time_s`'s composition, on arrays). ``exact_rows``:
    the rows whose ragged kernels go through the scalar model's dispatch."""
    t = np.full((points, len(la.rows)), la.launch_gaps * profile.launch_overhead_s)
    ok = np.ones((points, len(la.rows)), dtype=bool)
    for ka in la.kernels:
        kt, ke = kernel_times(ka, profile, DELTAS[:points], exact_rows=exact_rows)
        t = t + kt
        ok &= ke
    return t * residual_factor(la, profile), ok


class ExactTimer:
    """The scalar model (:func:`decodecalc.timemodel.launch_time_s`) on single steps at the three occupancy
    points. Kernel times are memoized by the kernel's work less its programs that exit at once (their cost is
    added in closed form), so recipes whose launches differ only in empty grid slots (SGLang's adaptive split counts
    under different caps) share them; the result equals ``launch_time_s`` (tests/test_batch.py).

    :meth:`times_many` times many steps of a recipe at once from its array launches (:func:`exact_block_times`: the
    same model, without building each step's scalar work; tests/test_dispatch.py checks it against
    ``launch_time_s``); what has no array launch (the other backends) is timed step by step."""

    def __init__(self, base: Workload, steps: StepArrays, profile: TimeProfile, memo: dict | None = None) -> None:
        """``memo``: another timer's kernel memo to share (the same base workload and profile)."""
        self.base, self.steps, self.profile = base, steps, profile
        self._kernels: dict = {} if memo is None else memo
        self.evaluations = 0  # distinct kernel works timed

    @property
    def memo(self) -> dict:
        return self._kernels

    def work(self, i: int) -> Workload:
        seq, q = self.steps.step_lens(i)
        return dataclasses.replace(self.base, seq_lens=seq, query_lens=q)

    def times(self, recipe: Recipe, i: int, all_points: bool = True) -> np.ndarray:
        """Step ``i``'s launch time at the DELTAS points (NaN at the neighbours unless ``all_points``)."""
        lw = recipe.launch_work(self.work(i), i)
        return np.array([self.launch_time_s(lw, d) if all_points or d == 0 else np.nan for d in DELTAS])

    def times_many(self, recipe: Recipe, idx: Indices, all_points: bool = True) -> np.ndarray:
        """:meth:`times` of the steps ``idx`` ([3, len(idx)]), from the recipe's array launches where it has them."""
        ids = np.asarray(idx, dtype=np.int64)
        if not recipe.has_arrays:  # step by step
            return np.array([self.times(recipe, int(i), all_points) for i in ids.tolist()]).reshape(-1, 3).T
        points = len(DELTAS) if all_points else 1
        out, done = exact_block_times(recipe, self.steps, ids, self.profile, points)
        self.evaluations += int(done.sum()) * points
        for j in np.flatnonzero(~done).tolist():
            out[:, j] = self.times(recipe, int(ids[j]), all_points)
        return out

    def launch_time_s(self, lw: LaunchWork, delta: int) -> float:
        prof = self.profile
        t = (len(lw.kernels) + lw.extra_launches - lw.overlapped_launches) * prof.launch_overhead_s
        for kw in lw.kernels:
            fam = prof.family(kw.family)
            key = (_busy_fields(kw), delta)
            busy = self._kernels.get(key)
            if busy is None:
                self.evaluations += 1
                busy = self._kernels[key] = kernel_time_s(dataclasses.replace(kw, idle_programs=0), fam, prof.num_sms,
                                                          prof.idle_program_s, prof.hbm_bandwidth_bytes_per_s, delta)
            t += busy + iteration_cost(kw, fam, prof.num_sms, prof.idle_program_s, prof.hbm_bandwidth_bytes_per_s,
                                       delta).idle_s(kw.idle_programs)
        if prof.residuals is not None:
            t *= prof.residuals.factor(lw, prof)
        return t + prof.regime_launch_s(lw.kernel)


def robust_score(times: np.ndarray) -> np.ndarray:
    """The ranking score (:func:`decodecalc.timemodel.robust_time_s`): the geometric mean of the three points."""
    return np.exp(np.log(times).mean(axis=0))


def robust_score_scalar(t: tuple[float, ...]) -> float:
    return math.exp(sum(math.log(x) for x in t) / len(t))
