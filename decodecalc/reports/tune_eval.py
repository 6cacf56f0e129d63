"""Time every step of a decode workload under an engine setting, evaluating each distinct shape once.

A step's launch and time depend on its batch only through its (KV length, query length) pairs in batch
order, so steps are grouped by that shape (:attr:`decodecalc.traffic.DecodeStep.shape`) and each
shape is planned by the launcher module and timed by the time model once per setting. The launch
plan itself is asked once per (batch size, query lengths, setting): vLLM's 2D/3D gate, its CUDA-graph
padding and its tile and segment counts depend on those only (launchers/vllm_unified.py), and
tests/test_tune.py checks that reuse against a fresh plan for every shape. Identical launch works
(for example every segment count of a batch that runs 2D) are timed once.

With more distinct shapes than ``max_shapes`` the shapes are sorted by (batch, KV tokens) and every
k-th one stands for its neighbours (their weights added to it); the result says so (``sampled``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.launchers.sglang_triton import SglangSettings, plan_sglang
from decodecalc.launchers.vllm_unified import VllmSettings, plan_vllm
from decodecalc.specs.gpus import GPUSpec
from decodecalc.timemodel import (
    LaunchWork,
    TimeProfile,
    launch_time_s,
    robust_time_s,
    sglang_work,
    vllm_work,
    work_for_plan,
)
from decodecalc.timemodel.work import SPLIT_COUNT_KERNEL
from decodecalc.traffic import StepTrace
from decodecalc.workload import Workload

Shape = tuple[tuple[int, int], ...]
DEFAULT_MAX_SHAPES = 4000


@dataclass(frozen=True, slots=True)
class ShapeSet:
    """The distinct shapes of a trace (or the representatives of a sample of them) and their weights."""

    shapes: tuple[Shape, ...]
    weights: tuple[int, ...]  # steps each (representative) shape stands for
    step_shape: tuple[int, ...]  # shape index of every step of the trace, in order
    step_weight: tuple[int, ...]
    step_origin: tuple[str, ...]
    distinct: int  # distinct shapes in the trace
    sampled: bool

    @property
    def total_weight(self) -> int:
        return sum(self.weights)


def shape_set(trace: StepTrace, max_shapes: int = DEFAULT_MAX_SHAPES) -> ShapeSet:
    if max_shapes < 1:
        raise ConfigError(f"--max-shapes must be >= 1, got {max_shapes}")
    index: dict[Shape, int] = {}
    weights: list[int] = []
    step_shape = []
    for s in trace.steps:
        key = s.shape
        i = index.get(key)
        if i is None:
            i = index[key] = len(weights)
            weights.append(0)
        weights[i] += s.weight
        step_shape.append(i)
    shapes = list(index)
    distinct = len(shapes)
    sampled = distinct > max_shapes
    if sampled:
        shapes, weights, step_shape = _sample(shapes, weights, step_shape, max_shapes)
    return ShapeSet(shapes=tuple(shapes), weights=tuple(weights), step_shape=tuple(step_shape),
                    step_weight=tuple(s.weight for s in trace.steps), step_origin=tuple(s.origin for s in trace.steps),
                    distinct=distinct, sampled=sampled)


def _sample(shapes: list[Shape], weights: list[int], step_shape: list[int],
            k: int) -> tuple[list[Shape], list[int], list[int]]:
    """``k`` representatives, every (n/k)-th shape in (batch, KV tokens) order; each shape's weight goes
    to the nearest representative in that order."""
    n = len(shapes)
    order = sorted(range(n), key=lambda i: (len(shapes[i]), sum(L for L, _ in shapes[i]), shapes[i]))
    stride = n / k
    rep_pos = sorted({min(n - 1, int(j * stride + stride / 2)) for j in range(k)})  # positions in `order`
    owner = [0] * n  # shape index -> representative number
    j = 0
    for pos, shape_index in enumerate(order):
        while j + 1 < len(rep_pos) and abs(rep_pos[j + 1] - pos) <= abs(rep_pos[j] - pos):
            j += 1
        owner[shape_index] = j
    rep_weights = [0] * len(rep_pos)
    for shape_index, w in enumerate(weights):
        rep_weights[owner[shape_index]] += w
    return [shapes[order[p]] for p in rep_pos], rep_weights, [owner[i] for i in step_shape]


class StepTimer:
    """Per-shape decode-attention time of one layer under engine settings (seconds)."""

    def __init__(self, base: Workload, gpu: GPUSpec, profile: TimeProfile, shapes: ShapeSet) -> None:
        self.base, self.gpu, self.profile, self.shapes = base, gpu, profile, shapes
        self._works: list[Workload | None] = [None] * len(shapes.shapes)
        self._time_cache: dict[LaunchWork, float] = {}
        self._score_cache: dict[LaunchWork, float] = {}
        self._plan_cache: dict[tuple, tuple] = {}  # (batch, query lens, settings) -> (plan signature, plan)
        self._work_cache: dict[tuple, LaunchWork] = {}  # (shape, plan signature) -> work
        self.families: dict[str, set[str]] = {}  # engine -> kernel families its launches used

    def work(self, i: int) -> Workload:
        w = self._works[i]
        if w is None:
            shape = self.shapes.shapes[i]
            w = dataclasses.replace(self.base, seq_lens=tuple(L for L, _ in shape), query_lens=tuple(q for _, q in shape))
            self._works[i] = w
        return w

    def time_of(self, lw: LaunchWork, engine: str) -> float:
        t = self._time_cache.get(lw)
        if t is None:
            t = self._time_cache[lw] = launch_time_s(lw, self.profile)
            self.families.setdefault(engine, set()).update(k.family for k in lw.kernels)
        return t

    # vLLM ------------------------------------------------------------------------------------

    def vllm_running_plan(self, i: int, settings: VllmSettings) -> tuple[tuple, Any]:
        """(signature, plan) of the launch that runs for shape i (the padded FULL-graph replay when one runs)."""
        shape = self.shapes.shapes[i]
        key = ("vllm", len(shape), tuple(q for _, q in shape), settings)
        got = self._plan_cache.get(key)
        if got is None:
            vp = plan_vllm(self.work(i), self.gpu, settings)
            plan = vp.replay.plan if vp.replay is not None else vp.plan
            got = self._plan_cache[key] = (plan_signature(plan), plan)
        return got

    def _work(self, i: int, sig: tuple, plan: Any, engine: str) -> LaunchWork:
        lw = self._work_cache.get((i, sig))
        if lw is None:
            lw = self._work_cache[(i, sig)] = work_for_plan(plan, self.work(i), engine)
        return lw

    def vllm_works(self, settings: VllmSettings) -> tuple[LaunchWork, ...]:
        out = []
        for i in range(len(self.shapes.shapes)):
            sig, plan = self.vllm_running_plan(i, settings)
            out.append(self._work(i, sig, plan, "vllm"))
        return tuple(out)

    def vllm(self, settings: VllmSettings) -> tuple[float, ...]:
        return tuple(self.time_of(lw, "vllm") for lw in self.vllm_works(settings))

    def scores(self, works: Sequence[LaunchWork]) -> tuple[float, ...]:
        """What candidates are ranked by, as ``recommend`` ranks them: the predicted time averaged over the
        profile's occupancy and one program per SM either side (:func:`decodecalc.timemodel.robust_time_s`)."""
        out = []
        for lw in works:
            t = self._score_cache.get(lw)
            if t is None:
                t = self._score_cache[lw] = robust_time_s(lw, self.profile)
            out.append(t)
        return tuple(out)

    def vllm_forced(self, i: int, segments: int) -> float:
        """Shape i on the 2D kernel (segments 1) or the 3D kernel with ``segments``, whatever the gate says."""
        return self.time_of(vllm_work(self.work(i), splits=segments, use_3d=segments > 1), "vllm")

    # SGLang ----------------------------------------------------------------------------------

    def sglang_works(self, settings: SglangSettings) -> tuple[LaunchWork, ...]:
        out = []
        for i in range(len(self.shapes.shapes)):
            plan = plan_sglang(self.work(i), self.gpu, settings).plan
            out.append(self._work(i, plan_signature(plan), plan, "sglang"))
        return tuple(out)

    def sglang(self, settings: SglangSettings) -> tuple[float, ...]:
        return tuple(self.time_of(lw, "sglang") for lw in self.sglang_works(settings))

    def sglang_splits(self, i: int, splits: Sequence[int], max_kv_splits: int, *, adaptive: bool = True,
                      aux_kernel: str = SPLIT_COUNT_KERNEL) -> float:
        """Shape i with these per-sequence split counts (SGLang's kernel takes them as a tensor); the grid's
        split dimension is ``max_kv_splits``; ``adaptive``: a small kernel writes them first (``aux_kernel``: the
        engine's split-count kernel, as an engine computing the rule would run it, or a copy)."""
        return self.time_of(sglang_work(self.work(i), splits=tuple(splits), max_kv_splits=max_kv_splits,
                                      adaptive=adaptive, aux_kernel=aux_kernel), "sglang")

    def per_shape(self, fn: Callable[[int], float]) -> tuple[float, ...]:
        return tuple(fn(i) for i in range(len(self.shapes.shapes)))

    def calibrated(self, engine: str) -> bool:
        uncal = set(self.profile.fit.get("uncalibrated_families", ()) or ())
        return self.profile.calibrated and not (uncal & self.families.get(engine, set()))


def plan_signature(plan: Any) -> tuple:
    """What distinguishes two launch plans of the same step: every kernel's kind, grid and compile-time
    constants, the per-sequence splits and the auxiliary launches. Equal signatures, equal work."""
    return (tuple((k.kind, k.name, tuple(k.grid), k.working_programs, tuple(sorted(k.constexprs.items())))
                  for k in plan.kernels), tuple(plan.splits), getattr(plan, "aux_launches", 0))


@dataclass(frozen=True, slots=True)
class Stats:
    mean_step_s: float
    p99_step_s: float
    total_s: float

    def to_dict(self) -> dict[str, float]:
        return {"mean_step_s": self.mean_step_s, "p99_step_s": self.p99_step_s, "total_s": self.total_s}


def stats(times: Sequence[float], shapes: ShapeSet) -> Stats:
    """Weighted mean, p99 (nearest rank) and total over the steps the shapes stand for."""
    from decodecalc.traffic import weighted_percentile

    pairs = list(zip(times, shapes.weights))
    total = sum(t * w for t, w in pairs)
    return Stats(mean_step_s=total / shapes.total_weight, p99_step_s=weighted_percentile(pairs, 99), total_s=total)
