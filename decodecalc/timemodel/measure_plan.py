"""What ``tune --measure`` times (the records the plan hands from the report, :mod:`decodecalc.reports.tune_measure`, to
the GPU half, :mod:`decodecalc.verify.tune_measure`): the sampled steps, their launches, and the settings whose totals
the timings estimate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from decodecalc.timemodel.step_rows import WorkloadSample
from decodecalc.workload import Workload


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasureItem:
    """One setting whose total the measurement estimates."""

    engine: str  # vllm | sglang
    label: str  # the candidate's label, or the backend's name as the engine calls it
    kind: str  # "triton" (tune's candidates) or "backend"
    kernel: str  # the registered kernels (vllm, sglang, fa3, flashinfer-tc, xqa, ...)
    roles: tuple[str, ...]  # "default", "pick", "candidate", "engine default", "backend"
    allowed: bool  # within tune's guard (backends: True)
    predicted_total_s: float
    predicted_mean_step_s: float
    #: the scalar model's prediction at each sampled step (seconds, one layer)
    predicted_step_s: tuple[float, ...]
    #: the error tune states for this total (median, p90), None where it states none
    stated_error: tuple[float, float] | None = None
    #: the prediction is a calibrated one (False: a backend tune does not compare, measured against the model's
    #: uncalibrated prediction)
    calibrated: bool = True

    @property
    def key(self) -> str:
        return f"{self.engine}:{self.label}"


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendRun:
    """One backend launch at one sampled step, as the engine drives it (``knobs``: the runner's arguments)."""

    step: int
    kernel: str
    work: Workload
    knobs: Mapping[str, Any]
    items: tuple[str, ...]  # MeasureItem keys this launch times

    def describe(self) -> str:
        return f"step {self.step + 1}: {self.kernel}" + "".join(f" {k}={v}" for k, v in sorted(self.knobs.items()))


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasurePlan:
    """What ``tune --measure`` times: the sampled steps, their Triton launches and backend runs, and the settings."""

    model: str
    tp: int
    gpu: str
    source: str
    steps: tuple[int, ...]
    weights: tuple[float, ...]  # per sampled step, its weight in the workload
    num_steps: int
    sample: WorkloadSample  # the Triton launches (calibrate --workload's)
    backend_runs: tuple[BackendRun, ...]
    items: tuple[MeasureItem, ...]
    skipped: tuple[str, ...] = ()  # settings not measured, and why

    @property
    def launches(self) -> int:
        return len(self.sample.launches) + len(self.backend_runs)

    def fingerprint(self) -> dict[str, Any]:
        """What a saved measurement must match to be summarised against this plan."""
        return {"model": self.model, "tp": self.tp, "gpu": self.gpu, "steps": list(self.steps),
                "num_steps": self.num_steps, "items": sorted(i.key for i in self.items)}
