"""The checks every launcher module shares: decode-only, MLA, platform, and the modeled layer's window.

Each raises :class:`~decodecalc.errors.UnsupportedError` (the compare report shows it as the policy's reason)
or answers a question about the workload; none knows about any one launcher.
"""

from __future__ import annotations

from decodecalc.errors import UnsupportedError
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload


def require_decode(w: Workload, system: str, max_q: int = 1) -> None:
    """Raise unless every sequence has at most ``max_q`` query tokens (a pure decode step)."""
    if w.max_seqlen_q > max_q:
        raise UnsupportedError(
            f"{system} is a decode kernel: at most {max_q} query token(s) per sequence, "
            f"this batch has {w.max_seqlen_q}")


def require_not_mla(w: Workload, system: str) -> None:
    if w.model.is_mla:
        raise UnsupportedError(f"{system} does not serve MLA models ({w.model.name}); use FlashMLA")


def require_no_sinks(w: Workload, system: str, source: str) -> None:
    """Raise for a model whose softmax adds learned attention sinks (gpt-oss) on a kernel that has none."""
    if getattr(w.model, "attention_sinks", False):
        raise UnsupportedError(f"{system} has no attention sinks, which {w.model.name} uses ({source})")


def require_vendor(gpu: GPUSpec, vendor: str, system: str, check: bool) -> None:
    if check and gpu.vendor != vendor:
        where = "ROCm (AMD)" if vendor == "amd" else "CUDA (NVIDIA)"
        raise UnsupportedError(f"{system} runs on {where} GPUs only; {gpu.name} is {gpu.vendor}")


def all_windowed(w: Workload) -> bool:
    """True when every layer of the model uses a sliding window (no global layers)."""
    m = w.model
    return bool(m.sliding_window) and (m.sliding_window_pattern in (None, 1))


def layer_window(w: Workload, layer: str = "auto") -> int | None:
    """Sliding window of the modeled layer: "sliding" -> the model's window, "global" -> none,
    "auto" -> the model's window only when every layer uses it (Mistral-7B v0.1)."""
    if layer == "sliding":
        return w.model.sliding_window or None
    if layer == "global":
        return None
    return w.model.sliding_window if all_windowed(w) else None
