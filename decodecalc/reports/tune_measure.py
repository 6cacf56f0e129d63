"""``tune --measure``: what to time on the user's GPU to confirm tune's advice, and what the timings say.

The plan (:func:`plan_measurement`) samples ``k`` steps of the workload evenly over its order and lists, for each, the
launches of every setting that decides the advice: per engine its Triton default, tune's pick and the next best
candidates (the launches :func:`decodecalc.reports.step_launches.workload_sample` lists, what ``calibrate --workload``
times), the engine's default backend (FA3 on an H100 or H200) and each other backend tune compared, as the engine
drives it. The GPU half (:mod:`decodecalc.verify.tune_measure`) times each launch as a CUDA graph.

The summary (:func:`summarize_measurement`) turns the sampled steps into workload totals with a ratio estimator:
each setting's measured total is its predicted total times ``r = sum(w m) / sum(w p)`` over the sampled steps (``m``
measured, ``p`` the scalar model's prediction of that step, ``w`` the step's weight). Prediction and measurement move
together from step to step, so ``r`` is far steadier than the sample's mean; its 95% interval comes from the
residuals ``m - r p`` (the linearised variance of a ratio estimator, Student's t with ``n - 1`` degrees of freedom).

The pick by measurement: per engine, the measured best of the candidates the guard allows. Where it is not tune's
pick and the paired ratio of the two (pick over measured best, on the same steps) is above 1 with 95% confidence,
the measurement decides and the output says so; otherwise the prediction's pick stands (the two are within the
sample's error). A p99 objective is judged on totals too: a sample of ``k`` steps has no p99.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from decodecalc.errors import ConfigError, UnsupportedError
from decodecalc.launchers.names import Backend, Engine
from decodecalc.reports.step_launches import sample_steps, step_lens_of, timed_candidates
from decodecalc.reports.step_launches import candidate_step_launches
from decodecalc.timemodel.measure_plan import BackendRun, MeasureItem, MeasurePlan
from decodecalc.timemodel.step_rows import WorkloadSample

if TYPE_CHECKING:
    from decodecalc.reports.tune import TuneResult
    from decodecalc.reports.tune_space import EngineCandidate

#: sampled steps by default: 16 give a ratio's 95% interval of a few per cent on the presets (the spread of
#: measured / predicted over steps is 2-6%; t(15) = 2.13)
DEFAULT_MEASURE_STEPS = 16
#: leading candidates per engine besides the default and the pick (each distinct launch is a Triton compile)
DEFAULT_MEASURE_LEADING = 3
MAX_MEASURE_STEPS = 256

#: Student's t, two-sided 95%, by degrees of freedom (1-30); above 30 the normal's 1.96 is within 4%
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(dof: int) -> float:
    """Two-sided 95% quantile of Student's t with ``dof`` degrees of freedom (``dof`` >= 1)."""
    if dof < 1:
        raise ValueError("a t quantile needs one degree of freedom or more")
    return _T95[dof - 1] if dof <= len(_T95) else 1.96


class _Compared(NamedTuple):
    """A backend the plan times: the engine and its name for it, the kernels, the roles, tune's total (None where
    tune does not compare it), the engine options and the timer's name of that setting, and the stated error."""

    engine: str
    label: str
    backend: Backend
    roles: tuple[str, ...]
    stats: Any
    opts: Any
    variant: str
    expected_error: Any


def _item_steps(ctx: Any, times: Any, idx: Sequence[int]) -> tuple[float, ...]:
    return tuple(float(times[i]) for i in idx)


def _triton_predictions(ctx: Any, engine: str, setting: EngineCandidate, idx: Sequence[int]) -> tuple[float, ...]:
    """The scalar model's time of ``setting`` at steps ``idx`` (tune's own estimates made exact there)."""
    from decodecalc.reports.tune_space import option_like

    opt = option_like(ctx, engine, setting)
    ctx.timer.refine_many(opt.recipes, idx)
    return _item_steps(ctx, opt.refreshed().times, idx)


def _backend_predictions(ctx: Any, kernel: str, engine: str, planner: Any, idx: Sequence[int],
                         variant: str = "") -> tuple[float, ...]:
    ctx.timer.backend(kernel, engine, planner, variant=variant)  # the recipe, refined below at the sampled steps
    key = ("backend", kernel, engine) + ((variant,) if variant else ())
    return _item_steps(ctx, ctx.timer.refine(key, idx).time, idx)


def runner_knobs(kernel: str, plan: Any) -> dict[str, Any]:
    """The arguments the backend's runner needs to launch what ``plan`` (the launcher's plan as the engine drives the
    kernel) says: FA3's num_splits, XQA's block-table width; the other runners take the engine's defaults."""
    d = plan.details
    if kernel == Backend.FA3.value:
        return {"num_splits": int(d.num_splits_arg)}
    if kernel in (Backend.XQA.value, Backend.XQA_FP8.value):
        return {"max_seq_len": int(d.maxSeqLen)}
    return {}


def _stated(ee: Any) -> tuple[float, float] | None:
    return (float(ee.median_abs_err), float(ee.p90_abs_err)) if ee is not None else None


def plan_measurement(result: TuneResult, *, steps: int = DEFAULT_MEASURE_STEPS,
                     leading: int = DEFAULT_MEASURE_LEADING, source: str = "workload") -> MeasurePlan:
    """What to time for ``result`` (a TuneResult): ``steps`` evenly spaced steps under the launches of each engine's
    default, pick and ``leading`` best other candidates, and of the backends tune compared (the engines' defaults
    first)."""
    from decodecalc.reports.tune_backends import engine_planner, fa3_cap_options

    if not 2 <= steps <= MAX_MEASURE_STEPS:
        raise ConfigError(f"--measure-steps {steps}: give 2 to {MAX_MEASURE_STEPS} (a total's interval needs two "
                          "steps or more)")
    if leading < 0:
        raise ConfigError(f"--measure-leading {leading}: give 0 or more")
    ctx = result.ctx
    w = ctx.work
    if w.kv_bytes_per_element != 2:
        raise UnsupportedError(f"tune --measure times bf16 / fp16 KV caches; {w.kv_cache_dtype} is not measured yet")
    idx = sample_steps(int(ctx.steps.num_steps), steps)
    lens = step_lens_of(ctx.steps, idx)
    if any(q != 1 for _, qs in lens for q in qs):
        raise UnsupportedError("tune --measure times one-token decode steps; speculative decoding is not measured")
    weights = tuple(float(ctx.weights[i]) for i in idx)
    items: list[MeasureItem] = []
    skipped: list[str] = []
    # tune's Triton candidates: the launches calibrate --workload times, tagged with the settings that make them
    for engine, e in result.engines.items():
        for c in timed_candidates(e, result.objective, leading):
            roles = tuple(r for r, on in (("default", c is e.default), ("pick", c is e.best)) if on) or ("candidate",)
            items.append(MeasureItem(engine=engine, label=c.label, kind="triton", kernel=engine, roles=roles,
                                     allowed=bool(c.allowed), predicted_total_s=c.stats.total_s,
                                     predicted_mean_step_s=c.stats.mean_step_s,
                                     predicted_step_s=_triton_predictions(ctx, engine, c.setting, idx),
                                     stated_error=_stated(e.expected_error)))
    launches = tuple(x for x in candidate_step_launches(result, idx, leading) if
                     any(f"{x.engine}:{s}" in {i.key for i in items} for s in x.settings))
    sample = WorkloadSample(model=w.model.name, tp=w.tp, source=source, num_heads=w.num_heads,
                            num_kv_heads=w.num_kv_heads, head_size=w.head_size, head_size_v=w.head_size_v,
                            num_steps=int(ctx.steps.num_steps), launches=launches)
    # the backends: each engine's default (where it is not its Triton kernel), then the levers tune compared
    opts = ctx.policy_options()
    backends: list[_Compared] = []
    for d in result.defaults:
        if d.triton or d.selection is None or d.selection.backend is None:
            continue
        backends.append(_Compared(d.engine, d.selection.name, d.selection.backend, ("engine default",), d.stats,
                                  opts, "", d.expected_error))
        best = d.best_cap
        if best is not None and best[0] != ctx.vllm.flash_attn_max_num_splits_for_cuda_graph:
            o, variant = fa3_cap_options(ctx, best[0])
            backends.append(_Compared(d.engine, f"{d.selection.name} cap {best[0]}", d.selection.backend,
                                      ("backend",), best[1], o, variant, d.expected_error))
    for b in result.backends:
        if not b.kernel:  # the engine cannot run it for this model (the note says why)
            continue
        backends.append(_Compared(b.engine, b.backend, Backend(b.kernel), ("backend",), b.stats, opts, "",
                                  b.expected_error))
    runs: dict[tuple, BackendRun] = {}
    for engine, label, backend, roles, st, o, variant, ee in backends:
        planner = engine_planner(backend, Engine(engine), o)
        try:
            pred = _backend_predictions(ctx, backend.value, engine, planner, idx, variant)
            calibrated = st is not None
            if st is None:  # tune does not compare it (uncalibrated, or outside the profile's domain): measured all
                # the same, against the model's uncalibrated prediction
                st = ctx.stats(ctx.timer.backend(backend.value, engine, planner, variant=variant).time)
        except (UnsupportedError, ConfigError) as exc:
            skipped.append(f"{Engine(engine).display_name} {label}: {exc}")
            continue
        item = MeasureItem(engine=engine, label=label, kind="backend", kernel=backend.value, roles=roles,
                           allowed=True, predicted_total_s=st.total_s, predicted_mean_step_s=st.mean_step_s,
                           predicted_step_s=pred, stated_error=_stated(ee) if calibrated else None,
                           calibrated=calibrated)
        items.append(item)
        for i, (seq, q) in zip(idx, lens):
            wi = dataclasses.replace(w, seq_lens=tuple(int(x) for x in seq), query_lens=tuple(int(x) for x in q))
            knobs = runner_knobs(backend.value, planner(wi, ctx.gpu))
            key = (i, backend.value, tuple(sorted(knobs.items())))
            got = runs.get(key)
            runs[key] = BackendRun(step=i, kernel=backend.value, work=wi, knobs=knobs,
                                   items=(got.items if got else ()) + (item.key,))
    return MeasurePlan(model=w.model.name, tp=w.tp, gpu=ctx.gpu.name, source=source, steps=tuple(idx),
                       weights=weights, num_steps=int(ctx.steps.num_steps), sample=sample,
                       backend_runs=tuple(sorted(runs.values(), key=lambda r: r.step)), items=tuple(items),
                       skipped=tuple(skipped))


# ---------------------------------------------------------------------------------------------------------------------
# the timings -> totals


def step_times(plan: MeasurePlan, rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[int, float]]:
    """Per item key, its measured seconds at each sampled step that was timed (rows as the GPU half writes them:
    ``{"kind", "step", "engine", "items" (keys), "t_us", "status"}``)."""
    out: dict[str, dict[int, float]] = {i.key: {} for i in plan.items}
    for r in rows:
        if r.get("status") != "ok" or r.get("t_us") is None:
            continue
        t = float(r["t_us"]) * 1e-6
        if not (t > 0 and math.isfinite(t)):
            continue
        for k in r.get("items", ()):
            if k in out:
                out[k][int(r["step"])] = t
    return out


@dataclass(frozen=True, slots=True)
class Ratio:
    """``sum(w a) / sum(w b)`` over paired steps, with its 95% interval (relative half-width)."""

    value: float
    rel_ci95: float  # inf with fewer than two steps
    steps: int

    @property
    def low(self) -> float:
        return self.value * (1 - self.rel_ci95)

    @property
    def high(self) -> float:
        return self.value * (1 + self.rel_ci95)


def ratio_estimate(a: Sequence[float], b: Sequence[float], w: Sequence[float]) -> Ratio:
    """The ratio estimator of ``sum(a) / sum(b)`` over a population from paired sampled values (weights ``w``), with
    the linearised variance ``n / (n - 1) * sum((w (a - r b))^2) / sum(w b)^2`` and Student's t."""
    n = len(a)
    sb = sum(wi * bi for wi, bi in zip(w, b))
    if n == 0 or sb <= 0:
        return Ratio(float("nan"), float("inf"), n)
    r = sum(wi * ai for wi, ai in zip(w, a)) / sb
    if n < 2:
        return Ratio(r, float("inf"), n)
    var = n / (n - 1) * sum((wi * (ai - r * bi)) ** 2 for wi, ai, bi in zip(w, a, b)) / sb ** 2
    return Ratio(r, t95(n - 1) * math.sqrt(var) / r if r > 0 else float("inf"), n)


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredItem:
    item: MeasureItem
    steps: int  # sampled steps measured
    ratio: Ratio  # measured / predicted

    @property
    def measured_total_s(self) -> float:
        return self.item.predicted_total_s * self.ratio.value

    @property
    def measured_mean_step_s(self) -> float:
        return self.item.predicted_mean_step_s * self.ratio.value

    @property
    def outside_stated_error(self) -> bool | None:
        """The measured total lies outside the p90 error tune states for it (None: no error stated or no time)."""
        if self.item.stated_error is None or not math.isfinite(self.ratio.value):
            return None
        return abs(self.ratio.value - 1.0) > self.item.stated_error[1]

    def to_dict(self) -> dict[str, Any]:
        i = self.item
        ok = math.isfinite(self.ratio.value)
        return {"engine": i.engine, "label": i.label, "kind": i.kind, "kernel": i.kernel, "roles": list(i.roles),
                "within_guard": i.allowed, "predicted_calibrated": i.calibrated,
                "predicted_total_s": i.predicted_total_s,
                "measured_total_s": self.measured_total_s if ok else None,
                "predicted_mean_step_s": i.predicted_mean_step_s,
                "measured_mean_step_s": self.measured_mean_step_s if ok else None,
                "measured_vs_predicted": self.ratio.value if ok else None,
                "ci95_rel": self.ratio.rel_ci95 if math.isfinite(self.ratio.rel_ci95) else None,
                "steps_measured": self.steps,
                "stated_error": ({"median_abs_err": i.stated_error[0], "p90_abs_err": i.stated_error[1]}
                                 if i.stated_error else None),
                "outside_stated_error": self.outside_stated_error}


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineVerdict:
    """One engine's pick by prediction against the measured best of its allowed candidates."""

    engine: str
    predicted_pick: str
    measured_best: str | None
    pick: str
    by: str  # "prediction" or "measurement"
    gap: Ratio | None  # the predicted pick's measured total over the measured best's (paired)
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "predicted_pick": self.predicted_pick, "measured_best": self.measured_best,
                "pick": self.pick, "pick_by": self.by, "why": self.why,
                **({"pick_vs_measured_best": self.gap.value, "pick_vs_measured_best_ci95_rel": self.gap.rel_ci95}
                   if self.gap is not None and math.isfinite(self.gap.rel_ci95) else {})}


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredTune:
    gpu: str
    device: str
    steps: tuple[int, ...]
    num_steps: int
    items: tuple[MeasuredItem, ...]
    verdicts: tuple[EngineVerdict, ...]
    skipped: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    saved_to: str = ""
    elapsed_s: float | None = None
    rule: str = field(default="")

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "device": self.device, "sampled_steps": list(self.steps),
                "num_steps": self.num_steps, "estimator": "ratio: predicted total x sum(w m) / sum(w p) over the "
                "sampled steps; 95% interval from the residuals (Student's t)",
                "pick_rule": self.rule, "settings": [m.to_dict() for m in self.items],
                "engines": {v.engine: v.to_dict() for v in self.verdicts}, "skipped": list(self.skipped),
                "errors": list(self.errors), "timings_file": self.saved_to or None,
                **({"elapsed_s": self.elapsed_s} if self.elapsed_s is not None else {})}


PICK_RULE = ("per engine, the measured best of the candidates tune's guard allows replaces tune's pick only where the "
             "pick's measured total exceeds it with 95% confidence (paired over the same sampled steps); otherwise "
             "the prediction's pick stands")


def _paired(plan: MeasurePlan, times: Mapping[str, Mapping[int, float]], a: str, b: str) -> Ratio:
    both = [j for j, i in enumerate(plan.steps) if i in times[a] and i in times[b]]
    return ratio_estimate([times[a][plan.steps[j]] for j in both], [times[b][plan.steps[j]] for j in both],
                          [plan.weights[j] for j in both])


def summarize_measurement(plan: MeasurePlan, rows: Sequence[Mapping[str, Any]], *, device: str = "",
                          saved_to: str = "", elapsed_s: float | None = None) -> MeasuredTune:
    """Measured totals of every planned setting from the timing ``rows``, and per engine the pick by the rule of
    :data:`PICK_RULE`."""
    times = step_times(plan, rows)
    measured = []
    for it in plan.items:
        got = times[it.key]
        js = [j for j, i in enumerate(plan.steps) if i in got]
        r = ratio_estimate([got[plan.steps[j]] for j in js], [it.predicted_step_s[j] for j in js],
                           [plan.weights[j] for j in js])
        measured.append(MeasuredItem(item=it, steps=len(js), ratio=r))
    verdicts = []
    for engine in dict.fromkeys(i.engine for i in plan.items if i.kind == "triton"):
        mine = [m for m in measured if m.item.engine == engine and m.item.kind == "triton"]
        pick = next(m for m in mine if "pick" in m.item.roles)
        timed = [m for m in mine if m.item.allowed and math.isfinite(m.ratio.value)]
        if not timed or not math.isfinite(pick.ratio.value):
            verdicts.append(EngineVerdict(engine=engine, predicted_pick=pick.item.label, measured_best=None,
                                          pick=pick.item.label, by="prediction", gap=None,
                                          why="the pick was not measured; the prediction's pick stands"))
            continue
        best = min(timed, key=lambda m: m.measured_total_s)
        if best is pick:
            verdicts.append(EngineVerdict(engine=engine, predicted_pick=pick.item.label,
                                          measured_best=best.item.label, pick=pick.item.label, by="prediction",
                                          gap=None, why="the measurement agrees: the pick is the measured best"))
            continue
        gap = _paired(plan, times, pick.item.key, best.item.key)
        if gap.low > 1.0:
            verdicts.append(EngineVerdict(
                engine=engine, predicted_pick=pick.item.label, measured_best=best.item.label, pick=best.item.label,
                by="measurement", gap=gap,
                why=f"measured, the pick takes {gap.value:.3f}x the time of {best.item.label} (95% interval "
                    f"{gap.low:.3f}-{gap.high:.3f}x): the measurement decides"))
        else:
            verdicts.append(EngineVerdict(
                engine=engine, predicted_pick=pick.item.label, measured_best=best.item.label, pick=pick.item.label,
                by="prediction", gap=gap,
                why=f"{best.item.label} measured {1 - 1 / gap.value:+.1%} faster, within the sample's 95% interval "
                    f"({gap.low:.3f}-{gap.high:.3f}x): the prediction's pick stands"))
    errors = tuple(f"step {int(r.get('step', -1)) + 1} {r.get('kernel') or r.get('engine')}: {r.get('error')}"
                   for r in rows if r.get("status") not in ("ok", None))
    return MeasuredTune(gpu=plan.gpu, device=device, steps=plan.steps, num_steps=plan.num_steps,
                        items=tuple(measured), verdicts=tuple(verdicts), skipped=plan.skipped, errors=errors,
                        saved_to=saved_to, elapsed_s=elapsed_s, rule=PICK_RULE)


def timings_doc(plan: MeasurePlan, rows: Sequence[Mapping[str, Any]], *, device: str, complete: bool) -> dict[str, Any]:
    """The saved timings (``--save-measurements``; ``tune --measured`` reads them back)."""
    return {"what": "decodecalc tune --measure timings", "plan": plan.fingerprint(), "device": device,
            "complete": complete, "rows": [dict(r) for r in rows]}


def check_saved(plan: MeasurePlan, doc: Any, where: str) -> list[Mapping[str, Any]]:
    """The timing rows of a saved measurement (``tune --measured FILE``), checked against ``plan``."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("rows"), list) or not isinstance(doc.get("plan"), Mapping):
        raise ConfigError(f"{where}: not a tune --measure timings file (a JSON object with 'plan' and 'rows')")
    want = plan.fingerprint()
    got = doc["plan"]
    for k in ("model", "tp", "gpu", "num_steps", "steps"):
        if got.get(k) != want[k]:
            what = ("other sampled steps (--measure-steps)" if k == "steps" else
                    f"{k} {got.get(k)!r}, but this tune run has {want[k]!r}")
            raise ConfigError(f"{where}: measured for {what}; run tune with the workload and options the timings "
                              "were measured with")
    rows = [r for r in doc["rows"] if isinstance(r, Mapping)]
    for r in rows:
        t = r.get("t_us")
        if r.get("status") == "ok" and not (isinstance(t, (int, float)) and 0 < t < 1e9 and math.isfinite(t)):
            raise ConfigError(f"{where}: a timing of {t!r} us; each t_us must be a positive number below 1e9")
    return rows
