"""The JSON's ``workload`` block of a workload given as arrays (what :meth:`StepTrace.summary` gives for objects)."""

from __future__ import annotations

from typing import Any

import numpy as np

from decodecalc.batch.stats import as_number, percentiles, step_hashes
from decodecalc.batch.steps import StepArrays


def summary_block(*, source: str, batch: np.ndarray, weights: np.ndarray, lengths: np.ndarray,
                  length_weights: np.ndarray, hashes: np.ndarray, generated_tokens: int, query_tokens: int,
                  speculative: bool, notes: tuple[str, ...]) -> dict[str, Any]:
    """The workload block from its parts: per step batch and weight, every KV length with its weight, each step's
    hash (for the distinct shapes). Steps given as arrays and steps kept as runs (decodecalc.batch.runs) both
    build it here."""
    b = {k: as_number(v) for k, v in percentiles(batch.astype(float), weights).items()}
    L = {k: as_number(v) for k, v in percentiles(lengths.astype(float), length_weights).items()}
    return {
        "source": source,
        "steps": int(weights.sum()),
        "distinct_shapes": int(len(np.unique(hashes))),
        "generated_tokens": generated_tokens,
        "query_tokens": query_tokens,
        "batch": b,
        "seq_len": L,
        "speculative": speculative,
        "notes": list(notes),
    }


def workload_summary(steps: StepArrays) -> dict[str, Any]:
    w = steps.weights
    return summary_block(source=steps.source, batch=steps.batch, weights=w, lengths=steps.seq_lens,
                         length_weights=np.repeat(w, steps.batch),
                         hashes=step_hashes(steps.offsets, steps.seq_lens, steps.query_lens),
                         generated_tokens=int((steps.tokens * w).sum()),
                         query_tokens=int((steps.per_step_sum(steps.query_lens) * w).sum()),
                         speculative=bool((steps.query_lens > 1).any()), notes=steps.notes)
