"""Compose model x GPU x launcher into the `grid` report and its JSON contract (pure)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from decodecalc import figures as analysis
from decodecalc.derived import Derived, cdiv
from decodecalc.errors import ConfigError, DecodecalcError, UnsupportedError
from decodecalc.launchers import sglang_triton, vllm_unified
from decodecalc.launchers.base import LaunchPlan
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

if TYPE_CHECKING:
    from decodecalc.timemodel.accuracy import ExpectedError

SYSTEMS = ("vllm", "sglang")


#: the launch model a system's result carries
PlanT = TypeVar("PlanT", vllm_unified.VllmPlan, sglang_triton.SglangPlan)


@dataclass(frozen=True, slots=True)
class SystemResult(Generic[PlanT]):
    name: str
    data: dict[str, Any]  # the JSON object for systems.<name>
    explain: tuple[Derived, ...] = ()
    error: str | None = None  # set when the system cannot serve the config
    model: PlanT | None = None  # VllmPlan for vllm_result, SglangPlan for sglang_result (None with an error)
    figures: analysis.SystemFigures | None = None
    prediction: Prediction | None = None  # the time model's figure (typed; ``data`` carries it as JSON keys)


@dataclass(frozen=True, slots=True)
class Prediction:
    """The time model's prediction of one launch as ``grid`` reports it: a time (and whether the profile is
    calibrated for it, else why not), or the error that kept it from being made."""

    time_s: float | None = None
    calibrated: bool = False
    warnings: tuple[str, ...] = ()
    error: str | None = None
    model_time_s: float | None = None
    residual_factor: float = 1.0
    #: what the time is for (timemodel.profile.REGIMES; every command that predicts takes --regime)
    regime: str = "back-to-back"
    #: the error this time is likely to have (timemodel.accuracy); None without such evidence
    expected_error: ExpectedError | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON keys of ``systems.<name>`` (grid --json's contract)."""
        if self.error is not None:
            return {"predicted_time_error": self.error}
        out: dict[str, Any] = {"predicted_time_s": self.time_s, "predicted_calibrated": self.calibrated}
        if self.warnings:
            out["predicted_warnings"] = list(self.warnings)
        out["predicted_model_time_s"] = self.model_time_s
        out["predicted_residual_factor"] = self.residual_factor
        out["predicted_regime"] = self.regime
        if self.expected_error is not None:
            out["predicted_error"] = self.expected_error.to_json()
        return out


@dataclass(frozen=True, slots=True)
class GridReport:
    work: Workload
    gpu: GPUSpec
    systems: tuple[SystemResult[Any], ...]
    paging: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        w = self.work
        return {
            "model": {
                "name": w.model.name, "num_layers": w.model.num_layers,
                "num_attention_heads": w.model.num_attention_heads,
                "num_key_value_heads": w.model.num_key_value_heads, "head_dim": w.model.head_dim,
                "attention": w.model.attention, "source": w.model.source,
            },
            "gpu": {
                "name": self.gpu.name, "num_sms": self.gpu.num_sms,
                "hbm_bandwidth_bytes_per_s": self.gpu.hbm_bandwidth_bytes_per_s,
                "bf16_dense_flops_per_s": self.gpu.bf16_dense_flops_per_s,
                "compute_capability": list(self.gpu.compute_capability) if self.gpu.compute_capability else None,
            },
            "tp": w.tp,
            "workload": {
                "num_heads_per_rank": w.num_heads, "num_kv_heads_per_rank": w.num_kv_heads,
                "head_size": w.head_size, "head_size_v": w.head_size_v, "batch": w.batch,
                "seq_lens": list(w.seq_lens), "query_lens": list(w.query_lens), "dtype": w.dtype,
                "kv_cache_dtype": w.kv_cache_dtype, "block_size": w.block_size,
            },
            "paging": self.paging,
            "systems": {s.name: (s.data if s.error is None else {"error": s.error}) for s in self.systems},
        }


def _figures_json(fig: analysis.SystemFigures) -> dict[str, Any]:
    return {
        "g_2d": fig.g_2d,
        "s_star": fig.s_star,
        "sm_coverage": fig.coverage.as_dict(),
        "kv_bytes_per_layer": fig.kv_bytes_per_layer,
        "kv_bytes_all_layers": fig.kv_bytes_all_layers,
        "kv_bytes_per_token_all_layers": fig.kv_bytes_per_token_all_layers,
        "partial_state_bytes_per_layer": fig.partial_state_bytes_per_layer,
        "partial_state_bytes_used_per_layer": fig.partial_state_bytes_used_per_layer,
        "merge_traffic_bytes_per_layer": fig.merge_traffic_bytes_per_layer,
        "merge_to_kv_ratio": fig.merge_to_kv_ratio,
        "flops_per_layer": fig.flops_per_layer,
        "bytes_per_layer": fig.bytes_per_layer,
        "tile_arithmetic_intensity": fig.tile_arithmetic_intensity,
        "arithmetic_intensity": fig.arithmetic_intensity,
        "times_below_ridge": fig.times_below_ridge,
        "tile_times_below_ridge": fig.tile_times_below_ridge,
        "roofline_time_s": fig.roofline_time_s,
        "roofline_time_all_layers_s": fig.roofline_time_all_layers_s,
    }


def _launches_json(plan: LaunchPlan) -> list[dict[str, Any]]:
    return [{"name": k.name, "grid": list(k.grid), "programs": k.programs, "working_programs": k.working_programs,
             "constexprs": {n: v for n, v in k.constexprs.items() if v is not None}} for k in plan.kernels]


def predicted(plan: LaunchPlan, work: Workload, gpu: GPUSpec, kernel: str, layer: str = "global",
              regime: str = "back-to-back") -> dict[str, Any]:
    """The time model's prediction for a launch, as JSON keys; a profile problem becomes a note."""
    return _predicted(plan, work, gpu, kernel, layer, regime)[0].to_json()


def _predicted(plan: LaunchPlan, work: Workload, gpu: GPUSpec, kernel: str,
               layer: str = "global", regime: str = "back-to-back") -> tuple[Prediction, tuple[Derived, ...]]:
    """The time model's prediction for a launch and its --explain records.

    A malformed user profile is reported by `recommend`/`calibrate` as an error; here it must not
    hide the launch report, so it is carried as ``predicted_time_error``. Outside the profile's
    measured domain (timemodel.domain) the prediction is uncalibrated and ``predicted_warnings`` says why.
    """
    from decodecalc import timemodel
    from decodecalc.timemodel.accuracy import expected_error_for
    from decodecalc.timemodel.domain import domain_warnings

    try:
        prof = timemodel.resolve_profile(gpu).in_regime(regime)
        p = timemodel.predict_plan(plan, work, gpu, kernel, profile=prof)
    except DecodecalcError as exc:
        return Prediction(error=str(exc)), ()
    warnings = domain_warnings(work, gpu, prof, layer=layer, kernel=kernel)
    if not prof.calibrated:
        warnings = (f"no calibrated time profile for {gpu.name}: datasheet figures and H200 latencies; run "
                    "'decodecalc calibrate' on this GPU", *warnings)
    elif not p.calibrated:
        from decodecalc.timemodel.profile import uncalibrated_note

        fams = p.uncalibrated_families
        why = uncalibrated_note(prof, fams) if fams else "re-run 'decodecalc calibrate'"
        warnings = (f"a kernel family of this launch is not calibrated in the profile ({prof.path or 'built-in'}): "
                    f"{why}", *warnings)
    err = expected_error_for(prof, kernel, work)
    explain = _time_explain(p, prof) + ((_error_explain(err, prof),) if err is not None else ())
    return Prediction(time_s=p.time_s, calibrated=p.calibrated and not warnings, warnings=tuple(warnings),
                      model_time_s=p.model_time_s,
                      residual_factor=p.correction.factor if p.correction else 1.0,
                      regime=prof.regime, expected_error=err), explain


def _error_explain(err: ExpectedError, prof: Any) -> Derived:
    """The --explain record of a predicted time's expected error (timemodel.accuracy)."""
    side = "fitted_layout" if err.layout_fitted else "new_layout"
    where = f"fit.expected_error.kernels.{err.kernel}" + (".in_graph" if err.regime == "in-graph" else "")
    return Derived("predicted_error", round(err.median_abs_err, 4),
                   "median |predicted / measured - 1| over this kernel's launches that no fit saw (launches, timed in "
                   "regime), on layouts head layouts the fit measured if layout_fitted (layout among them) else on "
                   f"layouts no fit saw; p90 {err.p90_abs_err:.4f}",
                   {"layout": err.layout, "layout_fitted": err.layout_fitted, "launches": err.rows,
                    "layouts": err.layouts, "regime": err.regime},
                   source=f"profile {prof.path or 'built-in'}, {where}.{side}: {err.evidence}")


def _time_explain(p: Any, prof: Any) -> tuple[Derived, ...]:
    """The --explain records of a predicted time: the physics times the profile's residual correction."""
    src = f"decodecalc.timemodel, profile {prof.path or 'built-in'}"
    corr = p.correction
    if corr is None:
        return (Derived("predicted_time_s", p.time_s, "model_launch_time_s (no residual map in the profile)",
                        source=src),)
    return (
        Derived("residual_factor", round(corr.factor, 4),
                "exp(sum_i w_i n_i log(measured_i / modelled_i) / (support_launches + prior_launches)) over the "
                "measured bins i of cell, w_i = exp(-|(u, v) - (u_i, v_i)|^2 / 2 bandwidth_octaves^2), "
                "support_launches = sum_i w_i n_i",
                {"cell": corr.cell, "u": round(corr.u, 3), "v": round(corr.v, 3),
                 "support_launches": round(corr.support_launches, 1), "prior_launches": prof.residuals.prior_launches,
                 "bandwidth_octaves": prof.residuals.bandwidth_octaves},
                source=f"decodecalc.timemodel.residuals; {prof.residuals.source}"),
        Derived("predicted_time_s", p.time_s, "model_launch_time_s * residual_factor + regime_launch_s",
                {"model_launch_time_s": p.model_time_s, "residual_factor": round(corr.factor, 4),
                 "regime": prof.regime, "regime_launch_s": p.regime_s}, source=src),
    )


def vllm_result(work: Workload, gpu: GPUSpec, settings: vllm_unified.VllmSettings,
                layer: str = "global", regime: str = "back-to-back") -> SystemResult[vllm_unified.VllmPlan]:
    try:
        vp = vllm_unified.plan_vllm(work, gpu, settings, layer=layer)
    except UnsupportedError as exc:
        return SystemResult("vllm", {}, error=str(exc))
    la = vp.launch
    window = work.model.sliding_window if layer == "sliding" else None
    g2d = la.total_num_q_blocks * work.num_kv_heads
    fig = analysis.figures(
        work, gpu, vp.plan, g_2d=g2d, g_2d_formula="total_num_q_blocks * num_kv_heads = "
        "(q.shape[0] // BLOCK_Q + num_seqs) * h_kv", tile_live_rows=la.live_rows(work.group_size,
            work.max_seqlen_q), tile_keys=la.tile_size, window=window,
    )
    data: dict[str, Any] = {
        "version": settings.version,
        "use_3d": la.use_3d,
        "grid": list(la.grid),
        "reduce_grid": list(la.reduce_grid) if la.reduce_grid else None,
        "block_m": la.block_m,
        "block_q": la.block_q,
        "tile_size": la.tile_size,
        "num_queries_per_kv": work.group_size,
        "total_num_q_blocks": la.total_num_q_blocks,
        "seq_threshold_3d": vp.backend.seq_threshold_3D,
        "num_segments": la.num_segments,
        "tiles_per_segment": list(vp.tiles_per_segment) if la.use_3d else None,
        "active_segments": list(vp.active_segments),
        "window_segments": list(vp.window_segments),
        "reasons_2d": list(la.reasons_2d),
        "programs": vp.plan.main.programs,
        "working_programs": vp.plan.main.working_programs,
        "launches": _launches_json(vp.plan),
        "scratch_bytes": vp.plan.scratch_bytes,
        "scratch_rows": vp.backend.scratch_rows,
        "cudagraph_mode": settings.cudagraph_mode,
        "cudagraph_capture_sizes": list(vp.backend.capture_sizes),
        "replay": vp.replay_mode,
        "cuda_graph": None,
    }
    if vp.replay is not None:
        r = vp.replay
        data["cuda_graph"] = {
            "num_reqs_padded": r.num_reqs_padded, "num_tokens_padded": r.num_tokens_padded,
            "use_3d": r.launch.use_3d, "grid": list(r.launch.grid),
            "reduce_grid": list(r.launch.reduce_grid) if r.launch.reduce_grid else None,
            "reasons_2d": list(r.launch.reasons_2d), "programs": r.plan.main.programs,
            "working_programs": r.plan.main.working_programs,
            "partial_state_bytes_per_layer": r.plan.partial_state_bytes,
        }
    data.update(_figures_json(fig))
    pred, time_explain = _predicted(vp.plan, work, gpu, "vllm", layer, regime)
    data.update(pred.to_json())
    return SystemResult("vllm", data, vp.plan.explain + fig.explain + time_explain, model=vp, figures=fig,
                        prediction=pred)


def sglang_result(work: Workload, gpu: GPUSpec, settings: sglang_triton.SglangSettings,
                  layer: str = "global", regime: str = "back-to-back") -> SystemResult[sglang_triton.SglangPlan]:
    try:
        sp = sglang_triton.plan_sglang(work, gpu, settings, layer=layer)
    except UnsupportedError as exc:
        return SystemResult("sglang", {}, error=str(exc))
    tg = sp.stage1_grid[0] * sp.stage1_grid[1]
    h, h_kv = work.num_heads, work.num_kv_heads
    fig = analysis.figures(
        work, gpu, sp.plan, g_2d=tg, g_2d_formula="token_grid = B * (h if g == 1 else cdiv(h, min(16, g)))",
        tile_live_rows=sglang_triton.heads_per_program(h, h_kv), tile_keys=sglang_triton.stage1_block_n(h, h_kv),
        window=sglang_triton.sliding_window_size(work) if layer == "sliding" else None,
    )
    data: dict[str, Any] = {
        "version": sglang_triton.VERSION,
        "mode": sp.mode,
        "grid": list(sp.stage1_grid),
        "stage2_grid": list(sp.stage2_grid),
        "max_kv_splits": sp.max_kv_splits,
        "num_kv_splits": list(sp.num_kv_splits),
        "kv_len_per_split": list(sp.kv_len_per_split),
        "nonempty_splits": list(sp.nonempty_splits),
        "programs": sp.plan.main.programs,
        "working_programs": sp.plan.main.working_programs,
        "launches": _launches_json(sp.plan),
        "scratch_bytes": sp.plan.scratch_bytes,
        "padded_rows": sp.padded_rows,
        "window_kv_lens": list(sp.window_kv_lens) if sp.window_kv_lens is not None else None,
    }
    data.update(_figures_json(fig))
    pred, time_explain = _predicted(sp.plan, work, gpu, "sglang", layer, regime)
    data.update(pred.to_json())
    return SystemResult("sglang", data, sp.plan.explain + fig.explain + time_explain, model=sp, figures=fig,
                        prediction=pred)


def paging_figures(work: Workload, kernel_block_size: int | None) -> dict[str, Any]:
    """Kernel-block mapping: ``map_to_kernel_blocks`` widens the block table by block_size // kernel_block_size.

    vLLM 0.14.0 vllm/v1/worker/block_table.py L44-63, L202-230 (ValueError when the kernel
    block size does not divide the allocator's); in 0.33.0 the kernel block size equals the
    manager's whenever that is a multiple of 16 (vllm/v1/worker/utils.py L162, L515).
    """
    kbs = kernel_block_size or work.block_size
    if kbs <= 0:
        raise ConfigError(f"--kernel-block-size must be positive, got {kbs}")
    if work.block_size % kbs:
        raise ConfigError(f"kernel_block_size {kbs} must divide block_size {work.block_size} evenly "
                          "(vllm/v1/worker/block_table.py, map_to_kernel_blocks)")
    per = work.block_size // kbs
    return {
        "block_size": work.block_size,
        "kernel_block_size": kbs,
        "blocks_per_kv_block": per,
        "block_table_width": [cdiv(L, work.block_size) * per for L in work.seq_lens],
        "block_table_bytes": [cdiv(L, work.block_size) * per * 4 for L in work.seq_lens],
    }


def grid_report(
    work: Workload,
    gpu: GPUSpec,
    *,
    systems: tuple[str, ...] = SYSTEMS,
    vllm: vllm_unified.VllmSettings | None = None,
    sglang: sglang_triton.SglangSettings | None = None,
    kernel_block_size: int | None = None,
    layer: str = "global",
    regime: str = "back-to-back",
) -> GridReport:
    # each engine's result from its own settings (one table, not a branch per engine)
    results_of: dict[str, Callable[[], SystemResult[Any]]] = {
        "vllm": lambda: vllm_result(work, gpu, vllm or vllm_unified.VllmSettings(), layer, regime),
        "sglang": lambda: sglang_result(work, gpu, sglang or sglang_triton.SglangSettings(), layer, regime)}
    results: list[SystemResult[Any]] = []
    for name in systems:
        if name not in results_of:
            raise ConfigError(f"unknown system {name!r}; valid: {', '.join(SYSTEMS)}")
        results.append(results_of[name]())
    return GridReport(work, gpu, tuple(results), paging_figures(work, kernel_block_size))
