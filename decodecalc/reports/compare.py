"""Registry of every modeled split policy: name -> planner, applicability, and the figures of its launch.

A policy that cannot serve a configuration (MLA where unsupported, head size not compiled,
block size not allowed, wrong GPU vendor) is reported with ``applicable=False`` and the
planner's reason instead of failing the whole comparison.

``vllm`` and ``sglang`` reuse :mod:`decodecalc.reports.grid` (the lead's launch models and figures);
the others call their launcher module and :func:`decodecalc.figures.figures`. The "best"
policy is the one with the smallest ``sm_limited_time_s``: the roofline time divided by the
first-wave SM coverage of the main kernel (a launch that keeps 8 of 132 SMs busy cannot pull
the full HBM bandwidth). That is a ranking proxy, documented as such, not a measured time.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from decodecalc import figures as analysis
from decodecalc.errors import ConfigError, DecodecalcError, UnknownNameError, UnsupportedError
from decodecalc.formatting import fmt_range
from decodecalc.launchers import (
    aiter,
    flash_attn2,
    flash_attn3,
    flashdecoding,
    flashinfer,
    flashmla,
    sglang_triton,
    vllm_paged_attention,
    vllm_rocm,
    vllm_unified,
)
from decodecalc.launchers.base import LaunchPlan, LengthKey, SweepRow
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyOptions:
    """Engine settings and the run-time inputs some planners need."""

    vllm: vllm_unified.VllmSettings = field(default_factory=vllm_unified.VllmSettings)
    sglang: sglang_triton.SglangSettings = field(default_factory=sglang_triton.SglangSettings)
    layer: str = "global"
    #: FlashInfer CUDA-core CTAs/SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor); None = documented bound
    flashinfer_occupancy: int | None = None

    @property
    def cuda_graph(self) -> bool:
        return self.vllm.cudagraph_mode != "NONE"

    @property
    def batch_invariant(self) -> bool:
        return self.vllm.batch_invariant


#: (workload(batch, seq_len), gpu, options, batches, lengths) -> one SweepRow per batch size
SweepRowsFn = Callable[[Callable[[int, int], Workload], GPUSpec, "PolicyOptions", Sequence[int], Sequence[int]],
                       Iterator[SweepRow]]


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    title: str
    upstream: str  # repository, file and pinned version
    platform: str  # "cuda", "rocm" or "any"
    #: True if a request's split count and boundaries depend only on its own length (by construction)
    batch_invariant: str
    run: Callable[[Workload, GPUSpec, PolicyOptions], "PolicyResult"]
    #: the bare planner (no figures), for the sweep engine; None for vllm / sglang
    build: Callable[[Workload, GPUSpec, PolicyOptions], LaunchPlan] | None = None
    #: the launcher's fast path for uniform decode batches (global layers), one SweepRow per batch size
    sweep_rows: SweepRowsFn | None = None
    #: else, for launchers whose uniform-batch launch depends on the length only through a block count
    length_key: Callable[[Workload], LengthKey] | None = None


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


def _simple(name: str, title: str, build: Callable[[Workload, GPUSpec, PolicyOptions], LaunchPlan],
            live_rows: Callable[[Workload, LaunchPlan], int], tile_keys: Callable[[Workload, LaunchPlan], int],
            notes: Callable[[Workload, LaunchPlan, PolicyOptions], list[str]] | None = None,
            ) -> Callable[[Workload, GPUSpec, PolicyOptions], PolicyResult]:
    def run(w: Workload, gpu: GPUSpec, opts: PolicyOptions) -> PolicyResult:
        try:
            plan = build(w, gpu, opts)
        except UnsupportedError as exc:
            return PolicyResult(name, title, False, reason=str(exc))
        fig = _figures(w, gpu, plan, live_rows=live_rows(w, plan), tile_keys=tile_keys(w, plan))
        return PolicyResult(name, title, True, plan=plan, figures=fig,
                            notes=notes(w, plan, opts) if notes else [], extra=_backend_predicted(name, w, gpu, plan, opts))
    run.build = build  # type: ignore[attr-defined]
    return run


def _backend_predicted(name: str, w: Workload, gpu: GPUSpec, plan: LaunchPlan, opts: PolicyOptions) -> dict[str, Any]:
    """The time model's prediction for the backends it has families for (FlashInfer, FA3, FlashMLA:
    decodecalc.timemodel.backends); nothing for the others."""
    from decodecalc.timemodel.backends import BACKEND_KERNELS

    if name not in BACKEND_KERNELS:
        return {}
    from decodecalc.reports.grid import predicted

    return predicted(plan, w, gpu, name, opts.layer)


def _const(key: str, default: int) -> Callable[[Workload, LaunchPlan], int]:
    return lambda w, p: int(p.main.constexprs.get(key) or default)


def _group(w: Workload, p: LaunchPlan) -> int:
    return w.group_size


def _one(w: Workload, p: LaunchPlan) -> int:
    return 1


# ------------------------------------------------------------------------------------------
# vLLM and SGLang: the lead's launch models, with the figures of decodecalc.reports.grid


_PREDICTION_KEYS = ("predicted_time_s", "predicted_calibrated", "predicted_warnings", "predicted_time_error")


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

    res = _grid_system("vllm", lambda: report.vllm_result(w, gpu, opts.vllm, opts.layer))
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

    res = _grid_system("sglang", lambda: report.sglang_result(w, gpu, opts.sglang, opts.layer))
    if isinstance(res, PolicyResult):
        return res
    title, sp = POLICIES["sglang"].title, res.model
    error = res.data.get("predicted_time_error")
    return PolicyResult("sglang", title, True, plan=sp.plan, figures=res.figures,
                        notes=[f"mode {sp.mode}, max_kv_splits {sp.max_kv_splits}"]
                        + ([f"no predicted time: {error}"] if error else []),
                        extra={"mode": sp.mode, "max_kv_splits": sp.max_kv_splits,
                               **_predicted(res.data)})


# ------------------------------------------------------------------------------------------
# the other launchers


def _fa3(w: Workload, gpu: GPUSpec, opts: PolicyOptions) -> LaunchPlan:
    """FA3 as vLLM drives it (V33 flash_attn.py L767-772, L855-868): 0 = heuristic; under full CUDA
    graphs (token count within the capture range) the upper bound is 32; VLLM_BATCH_INVARIANT -> 1."""
    num_splits = 0
    if opts.batch_invariant:
        num_splits = 1
    elif opts.vllm.cudagraph_mode in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE") and \
            w.num_tokens <= max(_capture_sizes(w, gpu, opts) or (0,)):
        num_splits = 32  # flash_attn_max_num_splits_for_cuda_graph (vllm/config/attention.py L61)
    return flash_attn3.plan_flash_attn3(w, gpu, num_splits=num_splits, layer=opts.layer)


def _capture_sizes(w: Workload, gpu: GPUSpec, opts: PolicyOptions) -> tuple[int, ...]:
    return _capture_sizes_cached(opts.vllm, gpu.compute_capability[0] if gpu.compute_capability else 0)


@functools.lru_cache(maxsize=64)
def _capture_sizes_cached(s: vllm_unified.VllmSettings, cc_major: int) -> tuple[int, ...]:
    from decodecalc.launchers import vllm_cudagraphs as cg

    if s.cudagraph_mode == "NONE":
        return ()
    return cg.capture_sizes(max_num_seqs=s.max_num_seqs, max_num_batched_tokens=s.max_num_batched_tokens,
                            num_speculative_tokens=s.num_speculative_tokens, compute_capability_major=cc_major,
                            performance_mode=s.performance_mode, user_sizes=s.capture_sizes)


def _fa3_notes(w: Workload, p: LaunchPlan, opts: PolicyOptions) -> list[str]:
    d = p.details
    return [f"static bound {d['num_splits_static']} (scratch), dynamic {fmt_range(p.splits)}, kBlockN {d['kBlockN']}"]


def _fi_notes(w: Workload, p: LaunchPlan, opts: PolicyOptions) -> list[str]:
    d = p.details
    occ = f", occupancy {d['occupancy']} CTA/SM" if "occupancy" in d else ""
    return [f"{'CUDA graph' if d['cuda_graph'] else 'eager'}{occ}, padded batch {d['padded_batch_size']}"]




POLICIES: dict[str, Policy] = {}


def _register(p: Policy, *, sweep_rows: SweepRowsFn | None = None,
              length_key: Callable[[Workload], LengthKey] | None = None) -> None:
    POLICIES[p.name] = dataclasses.replace(p, build=getattr(p.run, "build", None), sweep_rows=sweep_rows,
                                           length_key=length_key)


_register(Policy("vllm", "vLLM Triton unified attention", "vllm 0.33.0 triton_unified_attention.py", "any",
                 "no (2D/3D switch depends on the batch); yes with VLLM_BATCH_INVARIANT", _run_vllm),
          sweep_rows=lambda wl, g, o, b, ls: vllm_unified.sweep_rows(wl, g, o.vllm, b, ls))
_register(Policy("sglang", "SGLang Triton decode", "sglang 0.5.23 decode_attention.py / metadata.py", "any",
                 "no (splits depend on Lmax, Lmin and the batch); yes in deterministic mode (tile 256)", _run_sglang),
          sweep_rows=lambda wl, g, o, b, ls: sglang_triton.sweep_rows(wl, g, o.sglang, b, ls))
_register(Policy(
    "vllm-paged", "vLLM legacy PagedAttention v1/v2", "vllm 0.11.0 paged_attn.py + csrc/attention", "cuda",
    "no (v1/v2 choice depends on B*h and max length; v2 partitions are per sequence)",
    _simple("vllm-paged", "vLLM legacy PagedAttention v1/v2",
            lambda w, g, o: vllm_paged_attention.plan_vllm_paged_attention(w, g), _one, _const("BLOCK_SIZE", 16),
            lambda w, p, o: [f"{p.details['version']}"])),
          length_key=vllm_paged_attention.length_key)
_register(Policy(
    "vllm-rocm", "vLLM ROCm custom paged attention", "vllm csrc/rocm/attention.cu @4388f06c", "rocm",
    "yes (256-token partitions per sequence)",
    _simple("vllm-rocm", "vLLM ROCm custom paged attention", lambda w, g, o: vllm_rocm.plan_vllm_rocm(w, g, layer=o.layer),
            _group, lambda w, p: vllm_rocm.PARTITION_SIZE, lambda w, p, o: [p.details["kernel"]])),
          length_key=vllm_rocm.length_key)
_register(Policy(
    "fa2", "FlashAttention-2 (flash_attn_with_kvcache)", "flash-attention@0251105a csrc/flash_attn", "cuda",
    "no (num_splits from B, heads and the batch-max length)",
    _simple("fa2", "FlashAttention-2 (flash_attn_with_kvcache)", lambda w, g, o: flash_attn2.plan_flash_attn2(w, g, layer=o.layer),
            lambda w, p: w.group_size if p.details["seqlenq_ngroups_swapped"] else 1, _const("kBlockN", 128),
            lambda w, p, o: [] if p.details["paged_kv"] else [
                f"contiguous KV cache: upstream FA2 pages must be multiples of 256 (block size {w.block_size})"])),
          length_key=flash_attn2.length_key)
_register(Policy(
    "fa3", "FlashAttention-3 (as vLLM drives it)", "flash-attention@0251105a hopper/", "cuda",
    "no (static bound from max length, dynamic splits from the batch's total blocks); yes with VLLM_BATCH_INVARIANT",
    _simple("fa3", "FlashAttention-3 (as vLLM drives it)", _fa3, _group, _const("kBlockN", 128), _fa3_notes)))
_register(Policy(
    "flashinfer", "FlashInfer decode (CUDA cores)", "flashinfer@fb28d724 scheduler.cuh", "cuda",
    "no (one chunk size binary-searched over the batch)",
    _simple("flashinfer", "FlashInfer decode (CUDA cores)",
            lambda w, g, o: flashinfer.plan_flashinfer(w, g, occupancy=o.flashinfer_occupancy, cuda_graph=o.cuda_graph),
            _group, lambda w, p: w.block_size, _fi_notes)),
          length_key=flashinfer.length_key)
_register(Policy(
    "flashinfer-tc", "FlashInfer decode (tensor cores)", "flashinfer@fb28d724 scheduler.cuh (prefill plan)", "cuda",
    "no; yes with fixed_split_size",
    _simple("flashinfer-tc", "FlashInfer decode (tensor cores)",
            lambda w, g, o: flashinfer.plan_flashinfer_tc(w, g, cuda_graph=o.cuda_graph, layer=o.layer),
            _group, lambda w, p: w.block_size, _fi_notes)),
          length_key=flashinfer.length_key)
_register(Policy(
    "aiter", "AMD aiter unified attention", "aiter@e4048607 unified_attention.py", "rocm",
    "no (segment count from the batch's 2D program count)",
    _simple("aiter", "AMD aiter unified attention", lambda w, g, o: aiter.plan_aiter(w, g, layer=o.layer), _group,
            _const("TILE_SIZE", 64), lambda w, p, o: [f"{p.details['path']} ({p.details['arch']})"])),
          length_key=aiter.length_key)
_register(Policy(
    "flashmla", "FlashMLA (MLA only)", "FlashMLA@9241ae3e get_decoding_sched_meta.cu", "cuda",
    "no (greedy packing of the whole batch into SM parts)",
    _simple("flashmla", "FlashMLA (MLA only)", lambda w, g, o: flashmla.plan_flashmla(w, g),
            lambda w, p: min(64, w.group_size * w.max_seqlen_q), lambda w, p: flashmla.block_size_n,
            lambda w, p, o: [f"{p.details['num_sm_parts']} SM parts"])),
          length_key=flashmla.length_key)
_register(Policy(
    "flashdecoding", "FlashDecoding at S* (chapter baseline)", "decode-attention chapter 'The grid'", "any",
    "no (S* = ceil(N_SM / G_2D) depends on B)",
    _simple("flashdecoding", "FlashDecoding at S* (chapter baseline)",
            lambda w, g, o: flashdecoding.plan_flashdecoding(w, g), _group, lambda w, p: 16)),
          sweep_rows=lambda wl, g, o, b, ls: flashdecoding.sweep_rows(wl, g, b, ls))

POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)


def resolve_policies(text: str | None) -> tuple[str, ...]:
    """Comma list of policy names ("all" or None = every policy), validated."""
    if text is None or text.strip().lower() == "all":
        return POLICY_NAMES
    if not text.strip(" ,"):
        raise ConfigError(f"--policies {text!r} is empty; give a comma list of policies, or 'all' "
                          f"(known: {', '.join(POLICY_NAMES)})")
    names = []
    for raw in text.split(","):
        n = raw.strip().lower()
        if not n:
            continue
        if n not in POLICIES:
            raise UnknownNameError("policy", n, POLICY_NAMES)
        if n not in names:
            names.append(n)
    if not names:
        raise UnknownNameError("policy", text, POLICY_NAMES)
    return tuple(names)


def platform_reason(policy: Policy, gpu: GPUSpec) -> str | None:
    if policy.platform == "cuda" and gpu.vendor != "nvidia":
        return f"{policy.title} runs on CUDA (NVIDIA) GPUs only; {gpu.name} is {gpu.vendor}"
    if policy.platform == "rocm" and gpu.vendor != "amd":
        return f"{policy.title} runs on ROCm (AMD) GPUs only; {gpu.name} is {gpu.vendor}"
    return None


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
        return policy.run(w, gpu, opts)
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


__all__ = ["POLICIES", "POLICY_NAMES", "Policy", "PolicyOptions", "PolicyResult", "best_by_prediction", "best_policy",
           "choose_best", "chapter_g2d",
           "evaluate", "evaluate_all", "platform_reason", "resolve_policies"]
