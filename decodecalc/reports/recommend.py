"""Which KV split count (and, for vLLM, 2D or 3D) makes one decode step fastest: pure Python.

For each kernel every candidate split count is turned into the launch its engine would make
(:func:`decodecalc.timemodel.vllm_work` / :func:`~decodecalc.timemodel.sglang_work`), timed by the
time model, and compared with the engine's own choice for the same step (the launch plan of
:mod:`decodecalc.launchers.vllm_unified` / :mod:`decodecalc.launchers.sglang_triton`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from decodecalc.errors import ConfigError, UnsupportedError
from decodecalc.launchers.sglang_triton import SglangSettings, plan_sglang
from decodecalc.launchers.vllm_unified import MIN_LAUNCH_GRID_SIZE_2D, VllmSettings, plan_vllm
from decodecalc.limits import MAX_KV_SPLITS, check_int
from decodecalc.specs.gpus import GPUSpec
from decodecalc.timemodel import (
    TIE_FRACTION,
    LaunchWork,
    TimeProfile,
    launch_time_s,
    resolve_profile,
    robust_time_s,
    sglang_work,
    vllm_work,
    work_for_plan,
)
from decodecalc.workload import Workload

if TYPE_CHECKING:
    from decodecalc.timemodel.accuracy import ExpectedError

KERNELS = ("vllm", "sglang")
#: candidate split counts when the user gives none (1 = unsplit: vLLM's 2D kernel, SGLang one split).
#: The measured range on the H200: vLLM 3D segments 2..128, SGLang static splits 1..64.
DEFAULT_CANDIDATES = {"vllm": (1, 2, 4, 8, 16, 32, 64, 128), "sglang": (1, 2, 4, 8, 16, 32, 64)}

VLLM_BACKEND_FILE = "vllm/v1/attention/backends/triton_attn.py"


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    splits: int  # 1 = unsplit
    mode: str  # vllm: "2d" | "3d"; sglang: "static" | "adaptive" | "deterministic"
    predicted_time_s: float
    label: str = ""
    per_sequence_splits: tuple[int, ...] = ()
    #: what candidates are ranked by: the predicted time averaged over occupancy +-1 (timemodel.robust_time_s)
    score_s: float = 0.0

    @property
    def rank(self) -> float:
        return self.score_s or self.predicted_time_s

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"splits": self.splits, "mode": self.mode, "predicted_time_s": self.predicted_time_s,
                             "label": self.label}
        if self.score_s:
            d["ranking_score_s"] = self.score_s
        if self.per_sequence_splits and len(set(self.per_sequence_splits)) > 1:
            d["per_sequence_splits"] = list(self.per_sequence_splits)
        return d


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelRecommendation:
    kernel: str
    candidates: tuple[Choice, ...]
    recommended: Choice
    default: Choice
    apply: tuple[str, ...]
    calibrated: bool
    note: str = ""
    #: the error its predicted times are likely to have (timemodel.accuracy); None without such evidence
    expected_error: ExpectedError | None = None

    @property
    def speedup(self) -> float:
        return self.default.predicted_time_s / self.recommended.predicted_time_s

    @property
    def fastest(self) -> Choice:
        """The candidate with the smallest predicted time; the tie rule (:func:`choose`) may pick another."""
        return min(self.candidates, key=lambda c: (c.predicted_time_s, -c.splits))

    @property
    def margin_vs_fastest(self) -> float:
        """How much slower the recommendation is predicted to be than the fastest candidate (0.04 = 4%)."""
        return self.recommended.predicted_time_s / self.fastest.predicted_time_s - 1.0

    @property
    def score_margin(self) -> float:
        """The recommendation's ranking score over the best score, minus 1 (at most TIE_FRACTION by construction)."""
        return self.recommended.rank / min(c.rank for c in self.candidates) - 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "candidates": [c.to_json() for c in self.candidates],
            "recommended": self.recommended.to_json(),
            "fastest_predicted": self.fastest.to_json(),
            "margin_vs_fastest": self.margin_vs_fastest,
            "ranking_score_margin": self.score_margin,
            "default": self.default.to_json(),
            "speedup_vs_default": self.speedup,
            "apply": list(self.apply),
            "calibrated": self.calibrated,
            "note": self.note,
            **({"predicted_error": self.expected_error.to_json()} if self.expected_error is not None else {}),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Recommendation:
    gpu: str
    profile: TimeProfile
    kernels: Mapping[str, KernelRecommendation]
    skipped: Mapping[str, str] = field(default_factory=dict)
    #: why the workload lies outside the profile's measured domain (timemodel.domain); empty: inside
    domain_warnings: tuple[str, ...] = ()

    @property
    def calibrated(self) -> bool:
        return (self.profile.calibrated and not self.domain_warnings
                and all(k.calibrated for k in self.kernels.values()))

    @property
    def calibrated_kernels(self) -> tuple[str, ...]:
        """The kernels whose predictions are calibrated (all, none, or some where each kernel's domain differs)."""
        return tuple(k for k, kr in self.kernels.items() if kr.calibrated) if self.profile.calibrated else ()

    @property
    def warning(self) -> str | None:
        parts = [] if self.profile.calibrated else [
            f"no calibrated time profile for {self.gpu}: predictions use datasheet figures and H200 latencies "
            f"and are uncalibrated; run 'decodecalc calibrate' on this GPU"]
        if self.domain_warnings:
            parts.append("predictions are uncalibrated outside the profile's measured domain: "
                         + "; ".join(self.domain_warnings))
        return "; ".join(parts) or None

    @property
    def best_kernel(self) -> str | None:
        if not self.kernels:
            return None
        return min(self.kernels.values(), key=lambda k: k.recommended.predicted_time_s).kernel

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "calibrated": self.calibrated,
            "warning": self.warning,
            "domain_warnings": list(self.domain_warnings),
            "profile": {"gpu": self.profile.gpu, "source": self.profile.source, "path": self.profile.path or "built-in",
                        "calibrated": self.profile.calibrated},
            "regime": self.profile.regime_record(KERNELS),
            "kernels": {k: v.to_json() for k, v in self.kernels.items()},
            "skipped": dict(self.skipped),
            "best_kernel": self.best_kernel,
        }


def choose(cands: Sequence[Choice], tie_fraction: float = TIE_FRACTION) -> Choice:
    """Among the candidates whose ranking score (robust predicted time) is within ``tie_fraction`` of the
    best, the one with the most splits."""
    if not cands:
        raise ConfigError("no candidate split counts to choose from")
    best = min(c.rank for c in cands)
    near = [c for c in cands if c.rank <= best * (1.0 + tie_fraction)]
    return max(near, key=lambda c: (c.splits, -c.rank))


#: split counts one --candidates list may hold (each is one full prediction per kernel)
MAX_CANDIDATES = 16


def parse_candidates(values: Sequence[str] | None) -> dict[str, tuple[int, ...]] | None:
    """``--candidates 1,4,16`` (every kernel) or ``--candidates vllm=1,16 --candidates sglang=4,8``."""
    if not values:
        return None
    out: dict[str, tuple[int, ...]] = {}
    for raw in values:
        for part in raw.split(";"):
            part = part.strip()
            if not part:
                continue
            kernel, _, nums = part.rpartition("=") if "=" in part else ("", "", part)
            kernel = kernel.strip().lower()
            if kernel and kernel not in KERNELS:
                raise ConfigError(f"--candidates {part!r}: unknown kernel {kernel!r}; valid: {', '.join(KERNELS)}")
            if not nums.strip(" ,"):
                raise ConfigError(f"--candidates {part!r}: give comma-separated split counts, e.g. 1,4,16")
            from decodecalc.limits import split_items

            items = split_items(nums, "--candidates", "1,4,16")  # 1,,4: an error, not 1,4
            vals = []
            for t in items:
                try:
                    v = int(t)
                except ValueError:
                    raise ConfigError(f"--candidates: {t!r} is not an integer split count") from None
                if v <= 0:
                    raise ConfigError(f"--candidates: split counts must be >= 1 (1 = unsplit), got {v}")
                check_int(v, "--candidates: split count", MAX_KV_SPLITS)
                vals.append(v)
            vals = sorted(set(vals))
            if len(vals) > MAX_CANDIDATES:
                raise ConfigError(f"--candidates {part!r}: {len(vals)} split counts, over the supported "
                                  f"{MAX_CANDIDATES}")
            for k in ([kernel] if kernel else list(KERNELS)):
                out[k] = tuple(vals)
    if not out:
        raise ConfigError(f"--candidates {' '.join(values)!r} is empty; give comma-separated split counts, "
                          "e.g. 1,4,16")
    return out


def _vllm(work: Workload, gpu: GPUSpec, profile: TimeProfile, cands: Sequence[int],
          settings: VllmSettings | None) -> KernelRecommendation:

    vp = plan_vllm(work, gpu, settings or VllmSettings())
    running = vp.replay.plan if vp.replay is not None else vp.plan  # a FULL-graph replay runs the padded launch
    dwork = work_for_plan(running, work, "vllm")
    default = Choice(splits=dwork.splits, mode="3d" if dwork.splits > 1 else "2d",
                     predicted_time_s=launch_time_s(dwork, profile),
                     label=("vLLM default: " + dwork.label + (" (CUDA-graph replay)" if vp.replay is not None else "")))
    choices = []
    works = [dwork]
    for s in cands:
        lw = vllm_work(work, splits=s, use_3d=s > 1)
        works.append(lw)
        choices.append(Choice(splits=s, mode="3d" if s > 1 else "2d", predicted_time_s=launch_time_s(lw, profile),
                              label=lw.label, score_s=robust_time_s(lw, profile)))
    rec = choose(choices)
    h_kv = work.num_kv_heads
    b = work.batch
    min_2d = MIN_LAUNCH_GRID_SIZE_2D
    threshold_ok = b * h_kv <= min_2d  # the default MIN_LAUNCH_GRID_SIZE_2D keeps batches this small on 3D
    if rec.splits == default.splits and rec.mode == default.mode:
        apply: tuple[str, ...] = (f"nothing to change: vLLM's own choice ({default.label.removeprefix('vLLM default: ')}) is the best "
                 "candidate",)
    elif rec.splits > 1:
        apply = (f"edit {VLLM_BACKEND_FILE}: NUM_PAR_SOFTMAX_SEGMENTS = {rec.splits} (default 16)",)
        if threshold_ok:
            apply += (f"this batch stays on the 3D path with the default MIN_LAUNCH_GRID_SIZE_2D = {min_2d} "
                      f"({b} sequences x {h_kv} KV heads <= {min_2d})",)
        else:
            apply += (f"and raise MIN_LAUNCH_GRID_SIZE_2D (default {min_2d}) to >= {b * h_kv} so this batch takes the 3D "
                      f"path (seq_threshold_3D = MIN_LAUNCH_GRID_SIZE_2D // {h_kv} KV heads, snapped to a CUDA-graph "
                      f"capture size, must be >= {b} sequences); the 3D scratch grows with it",)
        apply += ("both constants apply to every batch the engine runs",)
    elif default.mode == "2d":
        apply = ("nothing to change: vLLM already runs the 2D kernel for this batch",)
    else:
        apply = (
            f"edit {VLLM_BACKEND_FILE}: MIN_LAUNCH_GRID_SIZE_2D <= {max(0, (b - 1) * h_kv)} (default {min_2d}) so that "
            f"seq_threshold_3D < {b} sequences and this batch runs the 2D kernel; with CUDA graphs the "
            "threshold snaps to the nearest capture size, so batch 1 stays 3D; this applies to every batch",
        )
    return KernelRecommendation(kernel="vllm", candidates=tuple(choices), recommended=rec, default=default,
                                apply=apply, note=_tie_note(rec, default), calibrated=_families_calibrated(profile, works))


def _sglang(work: Workload, gpu: GPUSpec, profile: TimeProfile, cands: Sequence[int],
            settings: SglangSettings | None) -> KernelRecommendation:
    sp = plan_sglang(work, gpu, settings or SglangSettings())
    dwork: LaunchWork = sglang_work(work, splits=sp.num_kv_splits, max_kv_splits=sp.max_kv_splits,
                                    adaptive=sp.mode == "adaptive")
    label = {"adaptive": f"SGLang default: adaptive, max {sp.max_kv_splits}",
             "static": f"SGLang static {sp.max_kv_splits}",
             "deterministic": "SGLang deterministic (split tile)"}.get(sp.mode, sp.mode)
    default = Choice(splits=max(sp.num_kv_splits), mode=sp.mode, predicted_time_s=launch_time_s(dwork, profile),
                     label=label, per_sequence_splits=tuple(sp.num_kv_splits))
    choices = []
    works = [dwork]
    for s in cands:
        lw = sglang_work(work, splits=s, max_kv_splits=s)
        works.append(lw)
        choices.append(Choice(splits=s, mode="static", predicted_time_s=launch_time_s(lw, profile), label=lw.label,
                              score_s=robust_time_s(lw, profile)))
    rec = choose(choices)
    apply = ((
        f"launch the server with --triton-attention-num-kv-splits {rec.splits} and "
        f"SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS=1 (every sequence then gets exactly {rec.splits} "
        f"split{'s' if rec.splits > 1 else ''}; without the variable {rec.splits} is only the adaptive rule's maximum)",
    ),)[0]
    return KernelRecommendation(kernel="sglang", candidates=tuple(choices), recommended=rec, default=default,
                                apply=apply, note=_tie_note(rec, default), calibrated=_families_calibrated(profile, works))


def _tie_note(rec: Choice, default: Choice) -> str:
    if rec.predicted_time_s >= default.predicted_time_s * (1.0 - TIE_FRACTION):
        return (f"the recommendation and the default are within the model's error ({TIE_FRACTION:.0%}); the larger "
                "split count is preferred because measured times kept falling with more programs near the optimum")
    return ""


def _families_calibrated(profile: TimeProfile, works: Sequence[LaunchWork]) -> bool:
    """Calibrated only if no kernel family these launches use is marked uncalibrated in the profile."""
    uncal = set(profile.fit.get("uncalibrated_families", ()) or ())
    used = {k.family for w in works for k in w.kernels}
    return profile.calibrated and not (uncal & used)


def recommend(work: Workload, gpu: GPUSpec, *, kernels: Sequence[str] = KERNELS,
              candidates: Mapping[str, Sequence[int]] | None = None, profile: TimeProfile | None = None,
              vllm_settings: VllmSettings | None = None, sglang_settings: SglangSettings | None = None) -> Recommendation:
    """Best split count per kernel for one decode step of ``work`` (a Workload) on ``gpu`` (a GPUSpec)."""
    prof = profile if profile is not None else resolve_profile(gpu)
    out: dict[str, KernelRecommendation] = {}
    skipped: dict[str, str] = {}
    for k in kernels:
        if k not in KERNELS:
            raise ConfigError(f"unknown kernel {k!r}; valid: {', '.join(KERNELS)}")
        cands = tuple((candidates or {}).get(k) or DEFAULT_CANDIDATES[k])
        try:
            if k == "vllm":
                out[k] = _vllm(work, gpu, prof, cands, vllm_settings)
            else:
                out[k] = _sglang(work, gpu, prof, cands, sglang_settings)
        except UnsupportedError as e:
            skipped[k] = str(e)
    if not out:
        raise UnsupportedError("; ".join(f"{k}: {v}" for k, v in skipped.items()) or "no kernel to recommend for")
    import dataclasses

    from decodecalc.timemodel.accuracy import expected_error_for
    from decodecalc.timemodel.domain import domain_warnings

    # each kernel against its own measured domain (SGLang's covers an fp8 KV cache, vLLM's does not)
    per = {k: domain_warnings(work, gpu, prof, kernel=k) for k in out}
    out = {k: dataclasses.replace(v, calibrated=False) if per[k] else v for k, v in out.items()}
    out = {k: dataclasses.replace(v, expected_error=expected_error_for(prof, k, work)) for k, v in out.items()}
    shared = len({w for w in per.values()}) == 1
    outside = next(iter(per.values())) if shared else tuple(f"{k}: {w}" for k, ws in per.items() for w in ws)
    return Recommendation(gpu=gpu.name, profile=prof, kernels=out, skipped=skipped, domain_warnings=outside)
