"""The JSON's ``workload`` block of a workload given as arrays (what :meth:`StepTrace.summary` gives for objects)."""

from __future__ import annotations

from typing import Any

import numpy as np

from decodecalc.batch.stats import as_number, percentiles, step_hashes
from decodecalc.batch.steps import StepArrays


def workload_summary(steps: StepArrays) -> dict[str, Any]:
    w = steps.weights
    batch = steps.batch
    per_seq_w = np.repeat(w, batch)
    b = {k: as_number(v) for k, v in percentiles(batch.astype(float), w).items()}
    L = {k: as_number(v) for k, v in percentiles(steps.seq_lens.astype(float), per_seq_w).items()}
    b["mean"], L["mean"] = float((batch * w).sum() / w.sum()), float((steps.seq_lens * per_seq_w).sum() / per_seq_w.sum())
    return {
        "source": steps.source,
        "steps": int(w.sum()),
        "distinct_shapes": int(len(np.unique(step_hashes(steps.offsets, steps.seq_lens, steps.query_lens)))),
        "generated_tokens": int((steps.tokens * w).sum()),
        "query_tokens": int((steps.per_step_sum(steps.query_lens) * w).sum()),
        "batch": b,
        "seq_len": L,
        "speculative": bool((steps.query_lens > 1).any()),
        "notes": list(steps.notes),
    }
