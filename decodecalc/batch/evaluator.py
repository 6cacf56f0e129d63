"""The one object tune asks for per-step times: a workload's steps under any recipe, estimated once, cached, and
tightened where a decision needs it.

Every recipe first gets a quick estimate (a handful of exactly timed steps, :data:`FIRST_ANCHORS`); tune then
improves the ones near the best (:meth:`WorkloadTimer.improve`, :data:`NEAR_ANCHORS`) and tightens the recipes that
decide its answer (the default and the candidates that could be the best) to the target error, with up to
``max_anchors`` exactly timed steps each (:meth:`WorkloadTimer.tighten`). A recipe whose launches
do the same work as an earlier one's wherever their signatures agree (SGLang's adaptive split counts under caps the
rule never reaches) takes that recipe's times there, plus the exact difference of the programs that exit at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from dataclasses import dataclass

import numpy as np

from decodecalc.batch.arrays import Indices
from decodecalc.launchers.sglang_triton import SglangSettings
from decodecalc.launchers.vllm_unified import VllmSettings
from decodecalc.specs.gpus import GPUSpec
from decodecalc.timemodel import KERNEL_FAMILIES, TimeProfile
from decodecalc.workload import Workload

from decodecalc.batch.dispatch import accelerated
from decodecalc.batch.estimate import TARGET_REL_SE, Estimate, estimate
from decodecalc.batch.evaluate import ExactTimer, proxies, robust_score
from decodecalc.batch.kernels import DELTAS, Proxies
from decodecalc.batch.launches import (
    BackendRecipe,
    Recipe,
    SglangRecipe,
    SglangSplitsRecipe,
    VllmForcedRecipe,
    VllmRecipe,
)
from decodecalc.batch.steps import Block, StepArrays

#: exactly timed steps a recipe may take when tightened (None: every step that needs one: exact); the anchors of the
#: engines' own recipes come from their array launches (decodecalc/batch/dispatch.py: 20-100 us a step). Chosen on
#: 20,000 chat steps (768: a setting's total up to 0.1% off, stated; 3,072: 0.03%), checked on the other bench_tune
#: cases and a day-like trace against --exact (benchmarks/bench_tune.py, benchmarks/results/bench_tune.json)
DEFAULT_MAX_ANCHORS = 3072
#: ... of a recipe without array launches (the other backends, a few ms a step through the scalar work)
STEPWISE_MAX_ANCHORS = 768
#: how far the proxy strays from the scalar model on the H200 profile (exact / proxy between 0.83 and 1.07 on a
#: 100,000-step trace): the error of a part of the steps no anchor lies in
PROXY_SPREAD = 0.05
#: no estimated total is stated closer than this (relative): the strata variance covers the anchors' sampling, not
#: the few 1e-5 of bias a composed option (vLLM's 2D and 3D parts) can carry against --exact (tests/test_batch.py)
MIN_REL_SE = 1e-4
#: a part of a composed total with at most this many estimated steps is timed exactly (WorkloadTimer.settle_parts;
#: on requests-500 the 3D part below vLLM grid=128 carried a stated 0.46% before, 0.03% after)
SETTLE_STEPS = 2048
#: exactly timed steps of a recipe's first, quick estimate (a few per cent: enough to tell the far ones)
FIRST_ANCHORS = 6
#: ... and of a recipe near the best (:meth:`WorkloadTimer.improve`)
NEAR_ANCHORS = 24

Progress = Callable[[str], None]


@dataclass
class _Entry:
    recipe: Recipe
    px: Proxies
    est: Estimate
    own: Estimate | None  # the recipe's own estimate of the steps no donor covers
    donor: tuple | None  # the key of the recipe whose times it takes where ``same``
    same: np.ndarray | None
    tight: bool = False


class WorkloadTimer:
    """Per-step decode-attention time of one layer (seconds) of every step of ``steps`` under any recipe: exact where
    the array model is, else estimated (:mod:`decodecalc.batch.estimate`)."""

    def __init__(self, steps: StepArrays, base: Workload, gpu: GPUSpec, profile: TimeProfile, *,
                 target_rel_se: float = TARGET_REL_SE, max_anchors: int | None = DEFAULT_MAX_ANCHORS,
                 progress: Progress | None = None, points: int = len(DELTAS),
                 sample_of: tuple[WorkloadTimer, np.ndarray] | None = None) -> None:
        """``points``: occupancy points timed (1: the prediction only; its ranking score is then the prediction and
        the caller scales it, as tune does for a large workload's full pass). ``sample_of``: (the timer of a sample of
        these steps, the index here of each of its steps): what it timed exactly is reused here."""
        self.steps, self.base, self.gpu, self.profile = steps, base, gpu, profile
        self.points = points
        self.target_rel_se, self.max_anchors = target_rel_se, max_anchors
        self.exact_timer: ExactTimer = ExactTimer(base, steps, profile,
                                                  memo=sample_of[0].exact_timer.memo if sample_of is not None else None)
        self.sample_of = sample_of
        self.progress = progress
        self._entries: dict[tuple, _Entry] = {}
        self.families: dict[str, set[str]] = {}  # engine -> kernel families its launches used

    @property
    def weights(self) -> np.ndarray:
        return self.steps.weights

    @property
    def exact(self) -> bool:
        return self.max_anchors is None

    def run(self, recipe: Recipe) -> Estimate:
        entry = self._entries.get(recipe.key)
        if entry is None:
            if self.progress is not None:
                self.progress(_describe(recipe.key))
            px = proxies(recipe, self.steps, self.profile, self.points)
            entry = self._entries[recipe.key] = self._build(recipe, px, tight=self.exact)
            fams = px.families or frozenset(KERNEL_FAMILIES.get(getattr(recipe, "kernel", ""), ()))
            self.families.setdefault(recipe.engine, set()).update(fams)
        return entry.est

    def improve(self, recipe_keys: Sequence[tuple], anchors: int = NEAR_ANCHORS) -> None:
        """Quick estimates of the recipes (and their donors) continued to ``anchors`` exactly timed steps."""
        for key in dict.fromkeys(recipe_keys):
            entry = self._entries.get(key)
            if entry is None or entry.tight or entry.est.strata >= anchors:
                continue
            if entry.donor is not None:
                self.improve([entry.donor], anchors)
            self._entries[key] = self._build(entry.recipe, entry.px, tight=False, start=entry, cap=anchors)

    def tighten(self, recipe_keys: Sequence[tuple], looser: float = 1.0) -> None:
        """Estimate the recipes (and the recipes they take times from) to the target error (``looser`` times it:
        a first cut), with up to ``max_anchors`` exactly timed steps each."""
        for key in dict.fromkeys(recipe_keys):
            entry = self._entries.get(key)
            if entry is None or entry.tight or (looser > 1 and entry.est.rel_se <= self.target_rel_se * looser):
                continue
            if entry.donor is not None:
                self.tighten([entry.donor], looser)
            if self.progress is not None:
                self.progress("tightening " + _describe(key))
            self._entries[key] = self._build(entry.recipe, entry.px, tight=True, start=entry, looser=looser)

    def _build(self, recipe: Recipe, px: Proxies, *, tight: bool, start: _Entry | None = None,
               cap: int = FIRST_ANCHORS, looser: float = 1.0) -> _Entry:
        limit = self.max_anchors if tight else min(cap, self.max_anchors or cap)
        if limit is not None and not recipe.has_arrays:  # timed step by step (the other backends): the older budget
            limit = min(limit, STEPWISE_MAX_ANCHORS)
        # the first estimate always takes its few anchors (no target)
        target = self.target_rel_se * looser if tight else 0.0
        tight = tight and looser == 1.0
        donor = self._donor(recipe, px) if start is None else (
            (start.donor, self._entries[start.donor].est, self._entries[start.donor].px, start.same)
            if start.donor is not None else None)
        kw: dict[str, Any] = dict(target_rel_se=target, max_anchors=limit, points=self.points,
                                  known=self._known(recipe.key))
        if donor is None:
            est = estimate(recipe, px, self.exact_timer, self.weights, start=start.own if start else None, **kw)
            return _Entry(recipe, px, est, est, None, None, tight)
        d_key, d_est, d_px, same = donor
        own = estimate(recipe, px, self.exact_timer, self.weights, only=~same,
                       start=start.own if start else None, **kw) if not same.all() else None
        times = own.times.copy() if own is not None else px.times.copy()
        times[:, same] = d_est.times[:, same] + (px.times[:, same] - d_px.times[:, same])
        exact = own.exact.copy() if own is not None else np.ones(len(self.weights), dtype=bool)
        exact[same] = d_est.exact[same]
        anchors = np.union1d(own.anchors if own is not None else np.zeros(0, np.int64), d_est.anchors[same[d_est.anchors]])
        est = Estimate(times=times, score=robust_score(times), exact=exact, splits=px.splits,
                       anchors=anchors.astype(np.int64),
                       rel_se=_combined(d_est.rel_se, own.rel_se if own else 0.0, same, px, self.weights),
                       rel_se_score=_combined(d_est.rel_se_score, own.rel_se_score if own else 0.0, same, px,
                                              self.weights))
        return _Entry(recipe, px, est, own, d_key, same, tight)

    def _known(self, key: tuple) -> dict[int, np.ndarray] | None:
        """The exact times the sample's timer has of this recipe, indexed by these steps."""
        if self.sample_of is None:
            return None
        timer, index = self.sample_of
        entry = timer._entries.get(key)
        if entry is None:
            return None
        return {int(index[a]): t for a, t in entry.est.anchor_times.items()}

    def _donor(self, recipe: Recipe, px: Proxies) -> tuple | None:
        if recipe.working_key is None or px.signature is None:
            return None
        best = None
        for key, other in self._entries.items():
            if other.recipe.working_key != recipe.working_key or key == recipe.key or other.px.signature is None:
                continue
            same = other.px.signature == px.signature
            if best is None or same.sum() > best[3].sum():
                best = (key, other.est, other.px, same)
        return best if best is not None and best[3].any() else None

    # the recipes tune uses --------------------------------------------------------------------------------------

    def vllm(self, settings: VllmSettings) -> Estimate:
        return self.run(VllmRecipe(self.base, self.gpu, settings))

    def vllm_forced(self, segments: int) -> Estimate:
        return self.run(VllmForcedRecipe(self.base, segments))

    def sglang(self, settings: SglangSettings) -> Estimate:
        return self.run(SglangRecipe(self.base, self.gpu, settings))

    def sglang_splits(self, name: str, splits: Callable[[Block], np.ndarray] | np.ndarray, max_kv_splits: int, *,
                      adaptive: bool = True, aux_kernel: str = "split-count") -> Estimate:
        """SGLang's kernel with per-sequence split counts: a function of a block (an array rule) or a flat array
        aligned with the workload's sequences; ``name`` keys the cache."""
        return self.run(SglangSplitsRecipe(self.base, splits, self.steps.offsets, max_kv_splits, adaptive,
                                           aux_kernel, name, self.steps))

    def backend(self, kernel: str, engine: str, planner: Callable, looser: float | None = None,
                variant: str = "") -> Estimate:
        """Another backend's kernel over the workload (``looser``: its total estimated to that many times the target
        error; None: the quick estimate; ``variant``: names a setting of it, so that each setting is its own recipe)."""
        recipe = BackendRecipe(self.base, self.gpu, kernel, engine, planner, variant=variant)
        est = self.run(recipe)
        if looser is None or self.exact:
            return est
        self.tighten([recipe.key], looser=looser)
        return self.estimate_of(recipe.key)

    # exact values where an estimate must not decide ---------------------------------------------------------------

    def estimate_of(self, recipe_key: tuple) -> Estimate:
        return self._entries[recipe_key].est

    def refine(self, recipe_key: tuple, idx: Indices) -> Estimate:
        """The recipe's estimate with the prediction at the steps ``idx`` replaced by the scalar model's (the cached one
        is updated)."""
        entry = self._entries[recipe_key]
        est = entry.est
        todo = np.asarray([i for i in idx if not est.exact[i]], dtype=np.int64)
        if len(todo) == 0:
            return est
        times = est.times.copy()
        # the prediction only: the guard reads it (the neighbours keep their estimates)
        times[0, todo] = self.exact_timer.times_many(entry.recipe, todo, all_points=False)[0]
        if self.points == 1:
            times[1:, todo] = times[0, todo]
        exact = est.exact.copy()
        exact[todo] = True
        entry.est = Estimate(times=times, score=robust_score(times), exact=exact, splits=est.splits,
                             anchors=np.union1d(est.anchors, todo), rel_se=est.rel_se, rel_se_score=est.rel_se_score,
                             anchor_times=est.anchor_times, points_u=est.points_u, strata_var=est.strata_var,
                             ratio_sd=est.ratio_sd)
        return entry.est

    def settle_parts(self, recipe_keys: Sequence[tuple], uses: Sequence[np.ndarray]) -> None:
        """A composed total's small parts made exact: where a recipe gives only some steps of the total (vLLM's 3D
        launch below the gate's threshold) and few of those are estimated (at most SETTLE_STEPS), they are timed
        exactly, so that a part no stratum was drawn for does not carry the proxy's error (rel_se_of's bound)."""
        for key, m in zip(recipe_keys, uses):
            entry = self._entries.get(key)
            if entry is None:
                continue
            part = np.flatnonzero(m & ~entry.est.exact)
            if 0 < len(part) <= SETTLE_STEPS:
                self.refine(key, part)

    def refine_many(self, recipe_keys: Sequence[tuple], idx: Indices) -> None:
        for key in dict.fromkeys(recipe_keys):
            if key in self._entries:
                self.refine(key, idx)

    def rel_se_of(self, recipe_keys: Sequence[tuple], uses: Sequence[np.ndarray] = (),
                  times: np.ndarray | None = None) -> float:
        """The estimated relative standard error of a total made of the recipes' times (0: exact): the largest of
        theirs, or with ``uses`` (the steps each recipe gives) and the composed ``times``, their parts combined (a
        part of a recipe's strata carries that share of its variance)."""
        keys = [k for k in recipe_keys if k in self._entries]
        if not uses or times is None:
            return max((self._entries[k].est.rel_se for k in keys), default=0.0)
        w = self.weights
        total = float((w * times).sum())
        var = 0.0
        for k, m in zip(recipe_keys, uses):
            if k not in self._entries:
                continue
            est = self._entries[k].est
            if est.strata_var is not None:
                # the strata whose anchors lie in the part; a part with few of them errs as one stratum (its steps'
                # ratios interpolated from the same few anchors): at least its estimated mass x the ratios' spread
                part = m & ~est.exact
                # the anchors among the part's steps (an anchor is exact itself, so it is counted by ``m``)
                n_in = int(np.count_nonzero(m[est.anchors])) if len(est.anchors) else 0
                if not (~est.exact & ~m).any():  # the part holds every estimated step: the strata's own variance
                    var += float(est.strata_var.sum())
                    continue
                part_mass = float((w * est.time)[part].sum())
                spread = est.ratio_sd if n_in else max(est.ratio_sd, PROXY_SPREAD)  # no anchor: the proxy's own
                var += max(float(est.strata_var[m].sum()), (part_mass * spread) ** 2 / max(1, n_in))
            else:  # a donor's composition or an exact estimate: its whole variance, as a bound
                var += (est.rel_se * float((w * est.time).sum())) ** 2
        if total <= 0:
            return 0.0
        return max(float(np.sqrt(var)) / total, MIN_REL_SE) if var > 0 else 0.0

    def calibrated(self, engine: str) -> bool:
        uncal = set(self.profile.fit.get("uncalibrated_families", ()) or ())
        return self.profile.calibrated and not (uncal & self.families.get(engine, set()))

    @property
    def exact_evaluations(self) -> int:
        return self.exact_timer.evaluations

    def report(self) -> dict:
        """The JSON's ``estimate`` block: how many kernels the scalar model timed and how close the totals are."""
        ests = [e.est for e in self._entries.values()]
        estimated = int(sum((~e.exact).sum() for e in ests))
        tight = [e.est.rel_se for e in self._entries.values() if e.tight]
        return {"method": "estimated" if estimated else "exact",
                "exact_evaluations": self.exact_evaluations, "estimated_steps": estimated,
                "max_rel_se": max((e.rel_se for e in ests), default=0.0),
                "max_rel_se_tightened": max(tight, default=0.0),
                "target_rel_se": self.target_rel_se, "max_anchors": self.max_anchors,
                "accelerated": accelerated()}


def _describe(key: tuple) -> str:
    """A recipe key in a few words, for the progress line (an engine setting by its knobs, not its repr)."""
    words = []
    for x in key[:2]:
        if isinstance(x, SglangSettings):
            words.append(f"{'static' if x.static_kv_splits else 'adaptive'} {x.max_kv_splits or 'default'}")
        elif isinstance(x, VllmSettings):
            words.append(f"S={x.num_par_softmax_segments or 'default'}")
        else:
            words.append(str(x))
    return " ".join(words)


def _combined(se_donor: float, se_own: float, same: np.ndarray, px: Proxies, weights: np.ndarray) -> float:
    """Relative standard error of a total made of a donor's part and an own part, each weighted by its share."""
    t = weights * px.times[0]
    total = t.sum()
    a, b = t[same].sum() / total, t[~same].sum() / total
    return float(np.hypot(a * se_donor, b * se_own))
