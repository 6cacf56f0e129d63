"""What each engine runs by default for a decode step: its default attention backend (launchers/engine_defaults.py),
that backend's launch as the engine drives it, and the time model's time for it. ``grid``, ``compare`` and
``recommend`` print it; ``tune`` measures its savings against it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from decodecalc.errors import DecodecalcError
from decodecalc.formatting import fmt_range
from decodecalc.launchers.base import LaunchPlan
from decodecalc.launchers.engine_defaults import DefaultBackend, default_backend
from decodecalc.launchers.names import Engine
from decodecalc.launchers.registry import PolicyOptions
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload


@dataclass(frozen=True, slots=True)
class EngineDefault:
    """One engine's default for the step: the selection, and the launch and predicted time of its kernels where
    decodecalc models them (``error``: why there is none)."""

    engine: Engine
    selection: DefaultBackend | None
    plan: LaunchPlan | None = None
    predicted: dict[str, Any] | None = None
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"engine": self.engine.value}
        if self.selection is not None:
            d |= self.selection.to_json()
        if self.plan is not None:
            d["grid"] = list(self.plan.grid)
            d["splits"] = list(self.plan.splits)
        if self.predicted:
            d |= self.predicted
        if self.error:
            d["error"] = self.error
        return d

    def line(self) -> str:
        """One line for a terminal."""
        if self.selection is None:
            return f"{self.engine.display_name}: {self.error}"
        s = self.selection
        text = f"{s.engine.display_name} {s.version}: {s.name} ({s.kernel_note})"
        if self.plan is not None:
            text += f", grid {'x'.join(map(str, self.plan.grid))}, splits {fmt_range(self.plan.splits)}"
        t = (self.predicted or {}).get("predicted_time_s")
        if t:
            cal = (self.predicted or {}).get("predicted_calibrated")
            text += f", predicted {t * 1e6:.1f} µs{'' if cal else ' (uncalibrated)'}"
        elif self.error:
            text += f"; {self.error}"
        return f"{text}: {s.why}"


def engine_defaults(work: Workload, gpu: GPUSpec, opts: PolicyOptions, *,
                    engines: Sequence[Engine] = tuple(Engine), versions: dict[Engine, str] | None = None,
                    regime: str = "back-to-back", timed: bool = True) -> tuple[EngineDefault, ...]:
    """Every engine's default for ``work`` on ``gpu`` (``versions``: per engine, the release; default the newest
    modeled). ``timed``: plan and time the default's kernels too."""
    from decodecalc.reports.grid import predicted
    from decodecalc.reports.tune_backends import engine_planner

    from decodecalc.launchers.engine_defaults import VLLM_VERSIONS

    versions = dict(versions or {})
    if opts.vllm.version in VLLM_VERSIONS:  # the release the Triton rows model (--vllm-version)
        versions.setdefault(Engine.VLLM, opts.vllm.version)
    out = []
    for e in engines:
        try:
            sel = default_backend(e, work, gpu, opts, versions.get(e))
        except DecodecalcError as exc:
            out.append(EngineDefault(engine=e, selection=None, error=str(exc)))
            continue
        if sel.backend is None or not timed:
            out.append(EngineDefault(engine=e, selection=sel, error="" if sel.backend else "no launch model"))
            continue
        try:
            plan = engine_planner(sel.backend, e, opts)(work, gpu)
        except DecodecalcError as exc:
            out.append(EngineDefault(engine=e, selection=sel, error=str(exc)))
            continue
        out.append(EngineDefault(engine=e, selection=sel, plan=plan,
                                 predicted=predicted(plan, work, gpu, sel.backend.value, opts.layer, regime)))
    return tuple(out)


__all__ = ["EngineDefault", "engine_defaults"]
