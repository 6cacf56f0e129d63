"""Reading the committed H200 captures (benchmarks/capture_*_h200.py writes them) back into decodecalc's
types: one record's workload and its launches, shared by tests/test_profiler*.py."""

from __future__ import annotations

import dataclasses

from decodecalc.specs.models import resolve_model
from decodecalc.verify import profiler as P
from decodecalc.workload import Workload, make_workload


def workload_of(record: dict) -> Workload:
    """The per-rank step a capture record ran: a library model, optionally with its heads replaced, on the KV
    cache dtype it ran with."""
    s = record["shape"]
    model = resolve_model(s["model"])
    if s.get("heads"):
        h, h_kv = s["heads"]
        model = dataclasses.replace(model, name=f"{model.name}-{h}x{h_kv}", num_attention_heads=h,
                                    num_key_value_heads=h_kv, attention="mha" if h == h_kv else "gqa")
    return make_workload(model, tp=s["tp"], seq_lens=tuple(s["seq_lens"]), block_size=record["block_size"],
                         kv_cache_dtype=s.get("kv_cache_dtype", "auto"))


def launches_of(record: dict) -> list[P.ProfiledLaunch]:
    """The kernels CUPTI recorded for the record (occupancy fields left out)."""
    return [P.ProfiledLaunch(**{k: (tuple(v) if k in ("grid", "block") else v) for k, v in x.items()
                                if not k.startswith("ctas_per_sm")}) for x in record["launches"]]
