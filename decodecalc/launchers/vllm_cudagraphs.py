"""vLLM's CUDA-graph capture sizes and decode-batch padding (model runner V2 by default).

Mirrors vLLM v0.33.0 (wheel source):
- ``VllmConfig._set_cudagraph_sizes``        vllm/config/vllm.py L2398-2656 (capture-size list)
- ``adjust_cudagraph_sizes_for_spec_decode``  vllm/config/compilation.py L1537-1565 (model runner V1 rounding)
- ``_init_candidates`` / dispatch             vllm/v1/worker/gpu/cudagraph_utils.py L319-394 (FULL decode set, padding)
- ``TritonAttentionMetadataBuilder.__init__``  vllm/v1/attention/backends/triton_attn.py L121-149 (threshold snapping)
"""

from __future__ import annotations

from dataclasses import dataclass

from decodecalc.derived import cdiv

SOURCE_SIZES = "vllm 0.33.0 vllm/config/vllm.py::_set_cudagraph_sizes L2398-2656"
SOURCE_DISPATCH = "vllm 0.33.0 vllm/v1/worker/gpu/cudagraph_utils.py L319-394"
SOURCE_SNAP = "vllm 0.33.0 vllm/v1/attention/backends/triton_attn.py L121-149"

CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
FULL_DECODE_MODES = ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


def roundup(x: int, q: int) -> int:
    return cdiv(x, q) * q


def _request_counts(max_reqs: int, ceiling: int) -> list[int]:
    """Request counts whose n*q uniform-decode sizes are appended when q > 1 (L2487-2494)."""
    max_reqs = min(max_reqs, ceiling)
    counts = [n for n in (1, 2, 4) if n <= max_reqs]
    counts += list(range(8, min(max_reqs + 1, 256), 8))
    counts += list(range(256, max_reqs + 1, 16))
    return sorted(set(counts + [max_reqs]))


def capture_sizes(
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_speculative_tokens: int = 0,
    compute_capability_major: int = 9,
    performance_mode: str = "balanced",
    user_sizes: tuple[int, ...] | None = None,
) -> tuple[int, ...]:
    """The engine's ``cudagraph_capture_sizes`` (before any model-runner-V1 rounding)."""
    m = max_num_batched_tokens
    if user_sizes is not None:
        return tuple(sorted({s for s in user_sizes if s <= m}))
    q = 1 + num_speculative_tokens
    ceiling = 1024 if compute_capability_major == 10 else 512  # is_device_capability_family(100)
    cap = min(max_num_seqs * q * 2, ceiling)
    uniform: list[int] = []
    if q > 1:
        uniform = sorted({n * q for n in _request_counts(max_num_seqs, ceiling) if n * q <= cap})
    elif max_num_seqs <= cap:
        uniform = [max_num_seqs]
    cap = min(m, cap)
    if performance_mode == "interactivity":
        sizes = list(range(1, min(cap, 32) + 1))
    else:
        sizes = [i for i in (1, 2, 4) if i <= cap]
    if cap >= 8:
        sizes += list(range(8, min(cap + 1, 256), 8))
    if cap >= 256:
        sizes += list(range(256, cap + 1, 16))
    if m <= cap and m not in sizes:
        sizes.append(m)
    sizes += [u for u in uniform if u <= m]
    return tuple(sorted(set(sizes)))


def round_sizes_for_spec_decode(sizes: tuple[int, ...], q: int) -> tuple[int, ...]:
    """Model runner V1 with FULL decode graphs and q > 1: sizes rounded up to multiples of q
    (vllm 0.33.0 vllm/config/compilation.py::adjust_cudagraph_sizes_for_spec_decode L1537-1565)."""
    if q <= 1 or not sizes:
        return sizes
    top = max(sizes)
    rounded = sorted({roundup(s, q) for s in sizes if roundup(s, q) <= top})
    if not rounded:
        return (q,) if q <= top else ()
    return tuple(rounded)


def snap_threshold(threshold: int, sizes: tuple[int, ...]) -> int:
    """The capture size closest to ``threshold``; ties go to the smaller (``min`` over an ascending list)."""
    return min(sizes, key=lambda x: abs(x - threshold))


@dataclass(frozen=True, slots=True)
class Replay:
    """How one decode step runs under CUDA graphs."""

    mode: str  # "FULL" (padded replay), "PIECEWISE" (attention unpadded) or "eager"
    num_reqs_padded: int
    num_tokens_padded: int


def full_decode_sizes(sizes: tuple[int, ...], *, q: int, max_num_seqs: int) -> tuple[int, ...]:
    """Token counts that have a FULL decode graph: roundup(s, q) <= min(N*q, max(CS))."""
    if not sizes:
        return ()
    limit = min(max_num_seqs * q, max(sizes))
    return tuple(sorted({roundup(s, q) for s in sizes if roundup(s, q) <= limit}))


def dispatch(
    *,
    query_lens: tuple[int, ...],
    sizes: tuple[int, ...],
    mode: str,
    q: int,
    max_num_seqs: int,
) -> Replay:
    """Which graph a step with these query lengths replays, and the padded counts."""
    b, t = len(query_lens), sum(query_lens)
    if mode == "NONE" or not sizes:
        return Replay("eager", b, t)
    uniform = all(x == q for x in query_lens)
    if mode in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY") and uniform:
        full = full_decode_sizes(sizes, q=q, max_num_seqs=max_num_seqs)
        fitting = [d for d in full if d >= t]
        if fitting:
            t_pad = fitting[0]
            return Replay("FULL", t_pad // q, t_pad)
    if mode == "FULL":
        fitting = [s for s in sizes if s >= t]
        if fitting:
            t_pad = fitting[0]
            return Replay("FULL", min(t_pad, max_num_seqs), t_pad)
        return Replay("eager", b, t)
    if mode in ("FULL_AND_PIECEWISE", "PIECEWISE") and t <= max(sizes):
        return Replay("PIECEWISE", b, t)
    return Replay("eager", b, t)
