"""Decode workloads for ``decodecalc tune``: step traces, request traces and named mixes.

:class:`DecodeStep` (one step's decode batch), :class:`StepTrace` (the workload), the file readers
(:func:`load_steps`, :func:`load_requests`), the continuous-batching model that turns requests into
steps (:func:`batch_requests`), and the presets (:data:`PRESETS`, :func:`workload`).
Pure Python; no engine code.
"""

from __future__ import annotations

from decodecalc.traffic.presets import PRESETS, Preset, generate, parse_mix, workload
from decodecalc.traffic.requests import (
    DEFAULT_ACCEPTANCE_RATE,
    BatchingLimits,
    BatchingResult,
    Request,
    batch_requests,
    load_requests,
    requests_from_items,
    steps_from_requests,
)
from decodecalc.traffic.steps import (
    DecodeStep,
    StepTrace,
    dump_steps_jsonl,
    load_steps,
    percentiles,
    steps_from_items,
    weighted_percentile,
)

__all__ = [
    "DEFAULT_ACCEPTANCE_RATE", "PRESETS", "BatchingLimits", "BatchingResult", "DecodeStep", "Preset", "Request", "StepTrace",
    "batch_requests", "dump_steps_jsonl", "generate", "load_requests", "load_steps", "parse_mix", "percentiles",
    "requests_from_items", "steps_from_items", "steps_from_requests", "weighted_percentile", "workload",
]
