"""The compare report: one row per split policy of the launcher registry, and the starred row.

The registry (:mod:`decodecalc.launchers.registry`) names every policy with its planner; a row here is that
launch with its figures (:func:`decodecalc.figures.figures`) and the time model's prediction. A policy that
cannot serve a configuration (MLA where unsupported, head size not compiled, block size not allowed, wrong GPU
vendor) is reported with ``applicable=False`` and the planner's reason instead of failing the whole comparison.

``vllm`` and ``sglang`` reuse :mod:`decodecalc.reports.grid` (the lead's launch models and figures);
the others call their registry entry's planner and :func:`decodecalc.figures.figures`. The "best"
policy is the one with the smallest ``sm_limited_time_s``: the roofline time divided by the
first-wave SM coverage of the main kernel (a launch that keeps 8 of 132 SMs busy cannot pull
the full HBM bandwidth). That is a ranking proxy, documented as such, not a measured time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from decodecalc import figures as analysis
from decodecalc.errors import DecodecalcError, UnknownNameError, UnsupportedError
from decodecalc.launchers import vllm_unified
from decodecalc.launchers.base import LaunchPlan
from decodecalc.launchers.registry import POLICIES, POLICY_NAMES, BackendSpec, PolicyOptions, platform_reason
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload


@dataclass(slots=True)
class PolicyResult:
    name: str
    title: str
    applicable: bool
    reason: str | None = None
    plan: LaunchPlan | None = None
    figures: analysis.SystemFigures | None = None
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    # ---- derived figures of the row (None when not applicable)
    @property
    def sm_limited_time_s(self) -> float | None:
        if self.figures is None:
            return None
        frac = self.figures.coverage.fraction
        return self.figures.roofline_time_s / frac if frac > 0 else float("inf")

    def to_json(self) -> dict[str, Any]:
        if not self.applicable or self.plan is None or self.figures is None:
            return {"name": self.name, "title": self.title, "applicable": False, "reason": self.reason,
                    "grid": None, "splits": None, "programs": None, "partial_state_bytes_per_layer": None,
                    "roofline_time_s": None}
        p, f = self.plan, self.figures
        kv = f.kv_bytes_per_layer
        return {
            "name": self.name,
            "title": self.title,
            "applicable": True,
            "grid": list(p.grid),
            "kernels": [{"name": k.name, "grid": list(k.grid), "programs": k.programs,
                         "working_programs": k.working_programs} for k in p.kernels],
            "programs": p.main.programs,
            "working_programs": p.main.working_programs,
            "splits": list(p.splits),
            "nonempty_splits": list(p.nonempty_splits),
            "tokens_per_split": list(p.tokens_per_split),
            "sm_coverage": f.coverage.fraction,
            "waves": f.coverage.waves,
            "partial_state_bytes_per_layer": p.partial_state_bytes,
            "partial_state_bytes_used_per_layer": p.partial_state_bytes_used,
            "partial_state_to_kv_ratio": p.partial_state_bytes / kv if kv else 0.0,
            "partial_state_used_to_kv_ratio": p.partial_state_bytes_used / kv if kv else 0.0,
            "scratch_bytes": p.scratch_bytes,
            "kv_bytes_per_layer": kv,
            "roofline_time_s": f.roofline_time_s,
            "sm_limited_time_s": self.sm_limited_time_s,
            "notes": list(self.notes),
            **self.extra,
        }


# ------------------------------------------------------------------------------------------
# shared helpers


def chapter_g2d(w: Workload) -> tuple[int, str]:
    """G_2D of the reference chapter: vLLM's unsplit grid (T // BLOCK_Q + B) * h_kv."""
    _, block_q = vllm_unified.block_shape(w.group_size)
    return (w.num_tokens // block_q + w.batch) * w.num_kv_heads, "(T // BLOCK_Q + B) * h_kv (chapter 'The grid')"


def _figures(w: Workload, gpu: GPUSpec, plan: LaunchPlan, *, live_rows: int, tile_keys: int) -> analysis.SystemFigures:
    g2d, formula = chapter_g2d(w)
    return analysis.figures(w, gpu, plan, g_2d=g2d, g_2d_formula=formula, tile_live_rows=max(1, live_rows),
                            tile_keys=max(1, tile_keys))


def _run_planner(policy: BackendSpec, w: Workload, gpu: GPUSpec, opts: PolicyOptions) -> PolicyResult:
    """The row of a policy with a bare planner: its launch, the figures of its tile, its notes and prediction."""
    assert policy.build is not None and policy.live_rows is not None and policy.tile_keys is not None
    name, title = policy.name, policy.title
    try:
        plan = policy.build(w, gpu, opts)
    except UnsupportedError as exc:
        return PolicyResult(name, title, False, reason=str(exc))
    fig = _figures(w, gpu, plan, live_rows=policy.live_rows(w, plan), tile_keys=policy.tile_keys(w, plan))
    return PolicyResult(name, title, True, plan=plan, figures=fig,
                        notes=policy.notes(w, plan, opts) if policy.notes else [],
                        extra=_backend_predicted(name, w, gpu, plan, opts))


def _backend_predicted(name: str, w: Workload, gpu: GPUSpec, plan: LaunchPlan, opts: PolicyOptions) -> dict[str, Any]:
    """The time model's prediction for the backends it has families for (FlashInfer, FA3, FlashMLA:
    decodecalc.timemodel.backends); nothing for the others."""
    from decodecalc.timemodel.backends import BACKEND_KERNELS

    if name not in BACKEND_KERNELS:
        return {}
    from decodecalc.reports.grid import predicted

    return predicted(plan, w, gpu, name, opts.layer, opts.regime)


# ------------------------------------------------------------------------------------------
# vLLM and SGLang: the lead's launch models, with the figures of decodecalc.reports.grid


_PREDICTION_KEYS = ("predicted_time_s", "predicted_calibrated", "predicted_warnings", "predicted_time_error",
                    "predicted_regime", "predicted_error")


def _predicted(data: dict[str, Any]) -> dict[str, Any]:
    """The time model's prediction that decodecalc.reports.grid already attached to a system's data."""
    return {k: data[k] for k in _PREDICTION_KEYS if k in data}


def _grid_system(name: str, run: Callable[[], Any]) -> Any:
    """The grid report's SystemResult for vLLM or SGLang, or the PolicyResult that says why it has none."""
    title = POLICIES[name].title
    try:
        res = run()
    except UnsupportedError as exc:
        return PolicyResult(name, title, False, reason=str(exc))
    if res.error is not None or res.model is None:
        return PolicyResult(name, title, False, reason=res.error or "not modeled")
    return res


def _run_vllm(w: Workload, gpu: GPUSpec, opts: PolicyOptions) -> PolicyResult:
    from decodecalc.reports import grid as report

    res = _grid_system("vllm", lambda: report.vllm_result(w, gpu, opts.vllm, opts.layer, opts.regime))
    if isinstance(res, PolicyResult):
        return res
    title, vp = POLICIES["vllm"].title, res.model
    notes = []
    if vp.replay is not None:
        r = vp.replay
        notes.append(f"CUDA graph FULL replay: B_pad {r.num_reqs_padded}, grid {r.launch.grid} "
                     f"({'3D' if r.launch.use_3d else '2D'})")
    if not vp.launch.use_3d and vp.launch.reasons_2d:
        notes.append("2D: " + "; ".join(vp.launch.reasons_2d))
    if "predicted_time_error" in res.data:  # a broken time profile is said, never a silent "-"
        notes.append(f"no predicted time: {res.data['predicted_time_error']}")
    return PolicyResult("vllm", title, True, plan=vp.plan, figures=res.figures, notes=notes,
                        extra={"path": "3D" if vp.launch.use_3d else "2D",
                               "seq_threshold_3d": vp.backend.seq_threshold_3D, "replay": vp.replay_mode,
                               **_predicted(res.data)})


def _run_sglang(w: Workload, gpu: GPUSpec, opts: PolicyOptions) -> PolicyResult:
    from decodecalc.reports import grid as report

    res = _grid_system("sglang", lambda: report.sglang_result(w, gpu, opts.sglang, opts.layer, opts.regime))
    if isinstance(res, PolicyResult):
        return res
    title, sp = POLICIES["sglang"].title, res.model
    error = res.data.get("predicted_time_error")
    return PolicyResult("sglang", title, True, plan=sp.plan, figures=res.figures,
                        notes=[f"mode {sp.mode}, max_kv_splits {sp.max_kv_splits}"]
                        + ([f"no predicted time: {error}"] if error else []),
                        extra={"mode": sp.mode, "max_kv_splits": sp.max_kv_splits,
                               **_predicted(res.data)})


#: the policies whose rows come from the grid report's launch models (no bare planner in the registry)
_GRID_ROWS: dict[str, Callable[[Workload, GPUSpec, PolicyOptions], PolicyResult]] = {
    "vllm": _run_vllm, "sglang": _run_sglang}


def evaluate(name: str, w: Workload, gpu: GPUSpec, opts: PolicyOptions | None = None) -> PolicyResult:
    """One policy's launch and figures; never raises for a config the policy cannot serve."""
    policy = POLICIES.get(name)
    if policy is None:
        raise UnknownNameError("policy", name, POLICY_NAMES)
    opts = opts or PolicyOptions()
    reason = platform_reason(policy, gpu)
    if reason:
        return PolicyResult(name, policy.title, False, reason=reason)
    try:
        run = _GRID_ROWS.get(name)
        return run(w, gpu, opts) if run is not None else _run_planner(policy, w, gpu, opts)
    except UnsupportedError as exc:
        return PolicyResult(name, policy.title, False, reason=str(exc))
    except DecodecalcError as exc:  # e.g. vLLM's block-size rule is a ConfigError at engine start
        return PolicyResult(name, policy.title, False, reason=str(exc))


def evaluate_all(w: Workload, gpu: GPUSpec, opts: PolicyOptions | None = None,
                 names: tuple[str, ...] | None = None) -> list[PolicyResult]:
    return [evaluate(n, w, gpu, opts) for n in (names or POLICY_NAMES)]


def best_policy(results: list[PolicyResult]) -> str | None:
    """Smallest sm_limited_time_s among applicable rows; ties -> fewer partial-state bytes, then order."""
    ok = [r for r in results if r.applicable and r.figures is not None and r.plan is not None]
    if not ok:
        return None
    return min(ok, key=lambda r: (r.sm_limited_time_s, r.plan.partial_state_bytes_used)).name  # type: ignore[union-attr]  # ok keeps plan is not None


ROOFLINE_RULE = ("smallest roofline_time_s / sm_coverage (first-wave SM coverage of the main kernel): a ranking "
                 "proxy, not a measured time")
PREDICTED_RULE = ("smallest predicted_time_s among the policies whose time-model prediction is calibrated for this "
                  "workload ({names}); the others have no calibrated time model and are ranked by the roofline "
                  "proxy only (best_roofline_proxy)")


def best_by_prediction(results: list[PolicyResult]) -> str | None:
    """Smallest calibrated ``predicted_time_s`` among applicable rows (None when no row has one)."""
    ok = [r for r in results if r.applicable and r.extra.get("predicted_calibrated") is True
          and r.extra.get("predicted_time_s") is not None]
    if not ok:
        return None
    return min(ok, key=lambda r: r.extra["predicted_time_s"]).name


UNCALIBRATED_RULE = ("smallest predicted_time_s, every one uncalibrated (~: no time profile of this GPU; the "
                     "datasheet fallback scales the H200's): a rough ranking, with the rows that have no prediction "
                     "left out")


def best_by_uncalibrated_prediction(results: list[PolicyResult]) -> str | None:
    """Smallest ``predicted_time_s`` of any kind among applicable rows (None when no row has one)."""
    ok = [r for r in results if r.applicable and r.extra.get("predicted_time_s") is not None]
    return min(ok, key=lambda r: r.extra["predicted_time_s"]).name if ok else None


def choose_best(results: list[PolicyResult]) -> tuple[str | None, str, str]:
    """The starred row, the figure it is ranked by, and the rule in words: the calibrated predicted time where
    any row has one, else an uncalibrated predicted time where any row has one (a roofline proxy whose values
    differ by under 1% between rows would star almost any of them), else the roofline proxy."""
    best = best_by_prediction(results)
    if best is not None:
        names = ", ".join(r.name for r in results if r.applicable and r.extra.get("predicted_calibrated") is True)
        return best, "predicted_time_s", PREDICTED_RULE.format(names=names)
    best = best_by_uncalibrated_prediction(results)
    if best is not None:
        return best, "predicted_time_s_uncalibrated", UNCALIBRATED_RULE
    return best_policy(results), "sm_limited_time_s", ROOFLINE_RULE


__all__ = ["PolicyResult", "best_by_prediction", "best_policy", "choose_best", "chapter_g2d", "evaluate",
           "evaluate_all"]
