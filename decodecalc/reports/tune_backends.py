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
from decodecalc.timemodel import KERNEL_FAMILIES, kernel_families
from decodecalc.timemodel.accuracy import ExpectedError, expected_error_for
from decodecalc.timemodel.domain import domain_warnings

Planner = Callable[[Any, Any], LaunchPlan]


@dataclass(frozen=True, slots=True)
class BackendNote:
    engine: str
    backend: str
    how: str
    stats: Stats | None
    note: str
    #: the error of the total (timemodel.accuracy, of="workload total"); None without such evidence
    expected_error: ExpectedError | None = None

    def to_dict(self, default_total: float | None, tuned_total: float | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"engine": self.engine, "backend": self.backend, "apply": self.how, "note": self.note}
        if self.stats is not None:
            d |= self.stats.to_dict()
            if self.expected_error is not None:
                d["predicted_error"] = self.expected_error.to_json()
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
    if key == "flashinfer-tc":
        return lambda w, g: flashinfer.plan_flashinfer_tc(w, g, cuda_graph=True)
    if key == "flashinfer":
        return lambda w, g: flashinfer.plan_flashinfer(w, g, cuda_graph=True)
    if key == "fa3":
        splits = _FA3_SPLITS[engine]
        return lambda w, g: flash_attn3.plan_flash_attn3(w, g, num_splits=splits)
    return None


def _flashinfer_key(engine: str, work: Any) -> str:
    """The FlashInfer path the engine's backend runs (launchers/flashinfer.py ``engine_uses_tensor_cores``)."""
    return "flashinfer-tc" if flashinfer.engine_uses_tensor_cores(engine, work) else "flashinfer"


#: (engine, backend name, the time-model kernel it runs for a workload, how to switch to it)
LEVERS: tuple[tuple[str, str, Callable[[str, Any], str], str], ...] = (
    ("vllm", "FlashInfer", _flashinfer_key, "VLLM_ATTENTION_BACKEND=FLASHINFER"),
    ("vllm", "FlashAttention-3", lambda engine, work: "fa3", "VLLM_ATTENTION_BACKEND=FLASH_ATTN"),
    ("sglang", "FlashInfer", _flashinfer_key, "--attention-backend flashinfer"),
    ("sglang", "FlashAttention-3", lambda engine, work: "fa3", "--attention-backend fa3"),
)
#: what the note says of the path a FlashInfer total was timed on
_PATH_NOTE = {"flashinfer-tc": "tensor-core decode, as the engine runs it (launchers/flashinfer.py "
                               "engine_uses_tensor_cores)",
              "flashinfer": "CUDA-core decode, as the engine runs it (launchers/flashinfer.py engine_uses_tensor_cores)"}


def _uncalibrated_why(key: str, profile: Any, kv_bytes_per_element: int | None = None) -> str:
    """Why ``key``'s kernels have no calibrated time in ``profile`` on a KV cache of ``kv_bytes_per_element``
    bytes ("" when they have one); names the families that miss."""
    if key not in KERNEL_FAMILIES:
        return "the time model has no kernel family for it yet"
    uncal = set(profile.fit.get("uncalibrated_families", ()) or ())
    fams = kernel_families(key, kv_bytes_per_element)
    missed = [f for f in fams if f not in profile.families or f in uncal]
    if profile.calibrated and not missed:
        return ""
    where = f"the {profile.gpu} profile ({profile.path or 'built-in'})"
    if not profile.calibrated or len(missed) == len(fams):
        return f"no calibrated time for it in {where}"
    from decodecalc.timemodel.profile import uncalibrated_note

    return f"no calibrated time for its {', '.join(missed)} kernels in {where} ({uncalibrated_note(profile, missed)})"


#: another backend's total is estimated to this many times the target error (0.3%: it is compared at the per-cent
#: level, and each backend is one more recipe to time)
BACKEND_LOOSER = 30.0


def backend_levers(ctx: Any, engines: Mapping[str, Any]) -> tuple[Any, ...]:
    """Per engine and backend: the backend's total over the workload where the profile calibrates its kernels."""
    out = []
    for engine, name, kernel_of, how in LEVERS:
        if engine not in engines:
            continue
        key = kernel_of(engine, ctx.work)
        why = _uncalibrated_why(key, ctx.profile, ctx.work.kv_bytes_per_element)
        if not why and key in KERNEL_FAMILIES:
            outside = domain_warnings(ctx.work, ctx.gpu, ctx.profile, kernel=key)
            why = "outside the profile's measured domain: " + "; ".join(outside) if outside else ""
        planner = _planner(key, engine)
        if why or planner is None:
            out.append(BackendNote(engine=engine, backend=name, how=how, stats=None,
                                   note=f"not compared: {why or f'no launcher for time-model kernel {key!r}'}"))
            continue
        try:
            times = ctx.timer.backend(key, engine, planner, looser=BACKEND_LOOSER).time
        except (UnsupportedError, ConfigError) as exc:
            out.append(BackendNote(engine=engine, backend=name, how=how, stats=None, note=f"not compared: {exc}"))
            continue
        path = _PATH_NOTE.get(key)
        out.append(BackendNote(engine=engine, backend=name, how=how, stats=ctx.stats(times),
                               note=f"time-model kernel {key}, calibrated" + (f"; {path}" if path else ""),
                               expected_error=expected_error_for(ctx.profile, key, ctx.work, of="workload total")))
    return tuple(out)
