"""Timing as the device library's METHOD.md asks (imports torch: load lazily).

One "call" is one decode step of one layer (every kernel of the launch sequence) on one copy
of the KV cache. A CUDA graph holds ``calls`` back-to-back calls that cycle over ``copies``
disjoint copies of the cache (so L2 cannot hold the data between calls), is replayed
``replays`` times, and the time per call is the median replay time over ``calls``. Bytes are
counted once per call (every K and V element of every sequence once). Without a graph (capture
failed), CUDA events around eager calls are used and the result says so.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

#: rotate over at least this many bytes of KV cache (several times the H200's 60 MB L2)
ROTATE_BYTES = 256 << 20
MAX_COPIES = 512


@dataclass
class Timing:
    t_us: float | None
    spread: float | None  # (max - min) / median over replays
    timer: str  # "graph", "events" or "none"
    calls: int = 0
    copies: int = 1
    replays: int = 0
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def copies_for(kv_bytes: int, *, rotate_bytes: int = ROTATE_BYTES, max_copies: int = MAX_COPIES) -> int:
    """How many KV-cache copies to cycle over so that together they are >= rotate_bytes."""
    if kv_bytes <= 0:
        return 1
    return max(1, min(max_copies, math.ceil(rotate_bytes / kv_bytes)))


def time_calls(
    step: Callable[[int], None],
    copies: int,
    *,
    target_ms: float = 3.0,
    max_calls: int = 2048,
    replays: int = 5,
    use_graph: bool = True,
) -> Timing:
    """Median time of ``step(copy)`` in microseconds, cycling copies, on the current CUDA device."""
    import torch

    torch.cuda.synchronize()
    for c in range(copies):  # warm-up: compile, first-touch
        step(c)
    torch.cuda.synchronize()
    # rough per-call estimate from a short eager burst, to size the graph
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n_est = min(copies, 64)
    start.record()
    for c in range(n_est):
        step(c)
    end.record()
    end.synchronize()
    est_ms = max(start.elapsed_time(end) / n_est, 1e-3)
    calls = max(copies, min(max_calls, math.ceil(target_ms / est_ms)))
    calls = max(1, min(calls, max(max_calls, copies)))
    if use_graph:
        try:
            seconds = graph_replay_seconds([functools.partial(step, i % copies) for i in range(calls)], replays)
            return _summary([t * 1e6 / calls for t in seconds], "graph", calls, copies, replays)
        except Exception as exc:  # capture not possible: fall back to events, and say so
            torch.cuda.synchronize()
            note = f"graph capture failed ({type(exc).__name__}: {exc}); eager events"
    else:
        note = "eager events"
    times = []
    for _ in range(replays):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for i in range(calls):
            step(i % copies)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1000.0 / calls)
    t = _summary(times, "events", calls, copies, replays)
    t.note = note
    return t


def graph_replay_seconds(calls: Sequence[Callable[[], None]], replays: int) -> list[float]:
    """Capture ``calls`` back to back in one CUDA graph (after one launch on the capture stream) and
    return the seconds of each of ``replays`` replays, timed with CUDA events (METHOD.md)."""
    graph = capture_graph(calls)
    times = [replay_seconds(graph) for _ in range(replays)]
    del graph
    return times


def capture_graph(calls: Sequence[Callable[[], None]]) -> Any:
    """``calls`` back to back in one CUDA graph (after one launch on the capture stream), replayed once."""
    import torch

    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        calls[0]()  # a launch on the capture stream before capture
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def replay_seconds(graph: Any) -> float:
    """One replay of a captured graph, timed with CUDA events (METHOD.md)."""
    import torch

    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    graph.replay()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / 1000.0


def _summary(times: list[float], timer: str, calls: int, copies: int, replays: int) -> Timing:
    med = statistics.median(times)
    spread = (max(times) - min(times)) / med if med > 0 else 0.0
    return Timing(t_us=med, spread=spread, timer=timer, calls=calls, copies=copies, replays=replays)


def not_timed(note: str) -> Timing:
    return Timing(t_us=None, spread=None, timer="none", note=note)


def graph_seconds(step: Callable[[int], None], copies: int, *, what: str = "calibrate", target_ms: float = 2.0,
                  replays: int = 5) -> float:
    """Median seconds per call under a CUDA graph (:func:`time_calls`), or a DecodecalcError naming
    ``what`` when no graph could be captured (eager timing would be a different quantity)."""
    from decodecalc.errors import DecodecalcError

    timing = time_calls(step, copies, target_ms=target_ms, replays=replays)
    if timing.t_us is None or timing.timer != "graph":
        raise DecodecalcError(f"{what} could not time with a CUDA graph: {timing.note}")
    return timing.t_us * 1e-6
