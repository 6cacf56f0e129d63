"""The attention backend as a lever: what switching each engine to another decode backend would save.

Data-driven: a backend is compared only when the time model has kernel families for it
(:data:`decodecalc.timemodel.KERNEL_FAMILIES`) and the profile in use calibrates them; otherwise the
result says that there is no calibrated time for it. The launch comes from the backend's launcher
module (launchers/flashinfer.py, launchers/flash_attn3.py), the time from the time model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from decodecalc.errors import ConfigError, UnsupportedError
from decodecalc.launchers import flash_attn3, flashinfer
from decodecalc.launchers.base import LaunchPlan
from decodecalc.reports.tune_stats import Stats
from decodecalc.timemodel import KERNEL_FAMILIES

Planner = Callable[[Any, Any], LaunchPlan]


@dataclass(frozen=True, slots=True)
class BackendNote:
    engine: str
    backend: str
    how: str
    stats: Stats | None
    note: str

    def to_dict(self, default_total: float | None, tuned_total: float | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"engine": self.engine, "backend": self.backend, "apply": self.how, "note": self.note}
        if self.stats is not None:
            d |= self.stats.to_dict()
            if default_total:
                d["saving_vs_default"] = 1.0 - self.stats.total_s / default_total
            if tuned_total:
                d["saving_vs_tuned"] = 1.0 - self.stats.total_s / tuned_total
        return d

#: FA3's num_splits as each engine passes it: vLLM flash_attn_max_num_splits_for_cuda_graph (default 32) under full
#: CUDA graphs (vllm/config/attention.py L61, backends/flash_attn.py L856-865, 0.33.0); SGLang 0, the FA runtime's own
#: split sizing, outside deterministic inference (sglang/srt/layers/attention/flashattention_backend.py L338-341,
#: 0.5.23)
_FA3_SPLITS = {"vllm": 32, "sglang": 0}


def _planner(key: str, engine: str) -> Planner | None:
    if key.startswith("flashinfer"):
        if "tc" in key or "tensor" in key:
            return lambda w, g: flashinfer.plan_flashinfer_tc(w, g, cuda_graph=True)
        return lambda w, g: flashinfer.plan_flashinfer(w, g, cuda_graph=True)
    if key.startswith(("fa3", "flash_attn3")):
        splits = _FA3_SPLITS[engine]
        return lambda w, g: flash_attn3.plan_flash_attn3(w, g, num_splits=splits)
    return None


#: (engine, backend name, time-model kernel prefix, how to switch to it)
LEVERS = (
    ("vllm", "FlashInfer", "flashinfer", "VLLM_ATTENTION_BACKEND=FLASHINFER"),
    ("vllm", "FlashAttention-3", ("fa3", "flash_attn3"), "VLLM_ATTENTION_BACKEND=FLASH_ATTN"),
    ("sglang", "FlashInfer", "flashinfer", "--attention-backend flashinfer"),
    ("sglang", "FlashAttention-3", ("fa3", "flash_attn3"), "--attention-backend fa3"),
)


def _calibrated_keys(prefix: str | tuple[str, ...], profile: Any) -> tuple[list[str], str]:
    keys = [k for k in KERNEL_FAMILIES if k.startswith(prefix)]
    if not keys:
        return [], "the time model has no kernel family for it yet"
    uncal = set(profile.fit.get("uncalibrated_families", ()) or ())
    ok = [k for k in keys if profile.calibrated and all(f in profile.families and f not in uncal
                                                          for f in KERNEL_FAMILIES[k])]
    if not ok:
        return [], f"no calibrated time for it in the {profile.gpu} profile ({profile.path or 'built-in'})"
    return ok, ""


#: another backend's total is estimated to this many times the target error (0.3%: it is compared at the per-cent
#: level, and each backend is one more recipe to time)
BACKEND_LOOSER = 30.0


def backend_levers(ctx: Any, engines: Mapping[str, Any]) -> tuple[Any, ...]:
    """Per engine and backend: the backend's total over the workload where the profile calibrates its kernels."""
    out = []
    for engine, name, prefix, how in LEVERS:
        if engine not in engines:
            continue
        if prefix == "flashinfer":  # the path the engine's FlashInfer backend runs, not the faster of the two
            prefix = "flashinfer-tc" if flashinfer.engine_uses_tensor_cores(engine, ctx.work) else "flashinfer"
        keys, why = _calibrated_keys(prefix, ctx.profile)
        keys = [k for k in keys if k == prefix] if isinstance(prefix, str) and prefix.startswith("flashinfer") else keys
        if not keys:
            out.append(BackendNote(engine=engine, backend=name, how=how, stats=None,
                                   note=f"not compared: {why or 'no calibrated time for it'}"))
            continue
        best = None
        note = ""
        for key in keys:
            planner = _planner(key, engine)
            if planner is None:
                note = f"no launcher for time-model kernel {key!r}"
                continue
            try:
                times = ctx.timer.backend(key, engine, planner, looser=BACKEND_LOOSER).time
            except (UnsupportedError, ConfigError) as exc:
                note = f"not compared: {exc}"
                continue
            st = ctx.stats(times)
            if best is None or st.total_s < best[0].total_s:
                best = (st, key)
        if best is None:
            out.append(BackendNote(engine=engine, backend=name, how=how, stats=None, note=note or "not compared"))
        else:
            path = {"flashinfer-tc": "tensor-core decode, as the engine runs it (launchers/flashinfer.py "
                                     "engine_uses_tensor_cores)",
                    "flashinfer": "CUDA-core decode, as the engine runs it (launchers/flashinfer.py "
                                  "engine_uses_tensor_cores)"}.get(best[1], "")
            out.append(BackendNote(engine=engine, backend=name, how=how, stats=best[0],
                                   note=f"time-model kernel {best[1]}, calibrated" + (f"; {path}" if path else "")))
    return tuple(out)
