"""Batch invariance: how one request's KV splits (and so its floating-point summation order) move
as the batch around it changes, per policy, and what each engine's deterministic switch does.

A request of length L is placed first in batches of size B whose other requests have length
``others``. For every policy and B we record the path (2D/3D, split or not), the allocated and
non-empty splits, and the key ranges of the non-empty splits. Two launches sum the request's
attention in the same order iff those key ranges (and the path) are equal, since each split is
an online-softmax loop over its range and the merge combines the splits in index order
(upstream-launchers.md section 10). A policy is *observed* batch-invariant for L when the
signature is the same for every tested B.

Switches (upstream-launchers.md 3.1 e, 4 e, 7.3):
- ``VLLM_BATCH_INVARIANT=1``: vLLM's Triton path never takes the 3D (split) path (V33
  triton_unified_attention.py L34, L1070-1091) and the FA backend passes ``num_splits = 1``
  (flash_attn.py L867-868);
- SGLang ``--enable-deterministic-inference``: ``num_kv_splits = cdiv(L, split_tile_size)``
  with ``SGLANG_TRITON_DECODE_SPLIT_TILE_SIZE = 256`` (triton_backend.py L356-367, L453-462);
- FlashInfer tensor-core decode ``fixed_split_size`` (pages) fixes the chunk (decode.py L1354-1360).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.launchers.base import LaunchPlan
from decodecalc.launchers.details import (
    FlashMlaDetails,
    PagedAttentionDetails,
    SglangDetails,
    TrtllmXqaDetails,
    VllmUnifiedDetails,
    XqaDetails,
)
from decodecalc.launchers.registry import POLICIES, POLICY_NAMES, PolicyOptions
from decodecalc.reports.compare import evaluate
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload, make_workload

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 17, 32, 64, 128, 256)


@dataclass(frozen=True, slots=True)
class RequestView:
    """What the launch does with the tracked request (the first one) at one batch size."""

    batch: int
    path: str
    splits: int
    nonempty: int
    tokens_per_split: int
    ranges: tuple[tuple[int, int], ...]

    @property
    def signature(self) -> tuple[Any, ...]:
        return (self.path, self.ranges)

    @property
    def short(self) -> str:
        tag = f" {self.path}" if self.path in ("2D", "3D", "v1", "v2") else ""
        if self.nonempty <= 1:
            return f"1x{self.ranges[0][1] if self.ranges else 0}{tag}"
        return f"{self.nonempty}x{self.tokens_per_split}{tag}"

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.batch, "path": self.path, "splits": self.splits, "nonempty_splits": self.nonempty,
                "tokens_per_split": self.tokens_per_split, "ranges": [list(r) for r in self.ranges]}


@dataclass(slots=True)
class PolicyDeterminism:
    name: str
    title: str
    by_design: str
    views: list[RequestView] = field(default_factory=list)
    reasons: dict[int, str] = field(default_factory=dict)  # batch -> why not applicable

    @property
    def applicable(self) -> bool:
        return bool(self.views)

    @property
    def batch_invariant(self) -> bool | None:
        if not self.views:
            return None
        return len({v.signature for v in self.views}) == 1

    @property
    def distinct_orders(self) -> int:
        return len({v.signature for v in self.views})

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "applicable": self.applicable,
                "batch_invariant": self.batch_invariant, "distinct_summation_orders": self.distinct_orders,
                "by_design": self.by_design, "views": [v.to_json() for v in self.views],
                "not_applicable": {str(k): v for k, v in self.reasons.items()} or None}


def _path(name: str, plan: LaunchPlan) -> str:
    d = plan.details
    if isinstance(d, VllmUnifiedDetails):
        return "3D" if d.use_3d else "2D"
    if name == "sglang":
        return d.mode if isinstance(d, SglangDetails) else "adaptive"
    if name == "vllm-paged":
        return d.version if isinstance(d, PagedAttentionDetails) else "v2"
    if isinstance(d, XqaDetails | TrtllmXqaDetails) and plan.splits[0] > 1:
        # XQA: the tiles' order follows the sub-sequence count
        return f"{plan.splits[0]} strided sub-sequences"
    return "split" if plan.nonempty_splits[0] > 1 else "no split"


def request_ranges(plan: LaunchPlan, L: int) -> tuple[tuple[int, int], ...]:
    """Key ranges of the tracked request's non-empty splits (FlashMLA: its scheduled pieces)."""
    d = plan.details
    if isinstance(d, FlashMlaDetails) and d.blocks_per_split:
        out, start = [], 0
        for blocks in d.blocks_per_split[0]:
            end = min(L, start + blocks * 64)
            out.append((start, end))
            start = end
        return tuple(out)
    if isinstance(d, XqaDetails | TrtllmXqaDetails):
        # XQA: sub-sequence i reads tiles i, i + n, ...: the tiles in key order (the path names n)
        tile = d.strided_tile_tokens
        return tuple((t * tile, min((t + 1) * tile, L)) for t in range(-(-L // tile)))
    tps = plan.tokens_per_split[0]
    n = plan.nonempty_splits[0]
    return tuple((s * tps, min((s + 1) * tps, L)) for s in range(n))


def track(name: str, work: Workload, gpu: GPUSpec, opts: PolicyOptions) -> RequestView | str:
    r = evaluate(name, work, gpu, opts)
    if not r.applicable or r.plan is None:
        return r.reason or "not applicable"
    p = r.plan
    # vLLM: the launch that runs is the padded replay when a FULL CUDA graph replays
    if name == "vllm" and r.extra.get("replay") == "FULL":
        from decodecalc.launchers import vllm_unified

        vp = vllm_unified.plan_vllm(work, gpu, opts.vllm, layer=opts.layer)
        if vp.replay is not None:
            p = vp.replay.plan
    L = work.seq_lens[0]
    return RequestView(work.batch, _path(name, p), p.splits[0], p.nonempty_splits[0], p.tokens_per_split[0],
                       request_ranges(p, L))


def analyze(
    base: Workload,
    gpu: GPUSpec,
    *,
    seq_len: int,
    others: int | None = None,
    batches: tuple[int, ...] = DEFAULT_BATCHES,
    names: tuple[str, ...] | None = None,
    opts: PolicyOptions | None = None,
) -> list[PolicyDeterminism]:
    """Track a request of ``seq_len`` keys in batches of every size in ``batches``."""
    from decodecalc.limits import MAX_BATCH, MAX_BATCHES_TOTAL, MAX_SEQ_LEN, check_int, check_list

    check_int(seq_len, "--seq-len", MAX_SEQ_LEN)
    check_int(others, "--others", MAX_SEQ_LEN)
    if not batches:
        raise ConfigError("--batches needs positive batch sizes")
    # every size is one workload per policy: the sizes together are bounded like one batch
    check_list(tuple(batches), "--batches", MAX_BATCH, max_total=MAX_BATCHES_TOTAL)
    others = others or seq_len
    opts = opts or PolicyOptions()
    out = []
    for name in names or POLICY_NAMES:
        p = POLICIES[name]
        res = PolicyDeterminism(name, p.title, p.batch_invariant)
        for b in batches:
            w = make_workload(base.model, tp=base.tp, seq_lens=(seq_len,) + (others,) * (b - 1), dtype=base.dtype,
                              kv_cache_dtype=base.kv_cache_dtype, block_size=base.block_size)
            v = track(name, w, gpu, opts)
            if isinstance(v, str):
                res.reasons[b] = v
            else:
                res.views.append(v)
        out.append(res)
    return out


def switches(base: Workload, gpu: GPUSpec, *, seq_len: int, others: int | None = None,
             batches: tuple[int, ...] = DEFAULT_BATCHES, opts: PolicyOptions | None = None) -> list[PolicyDeterminism]:
    """The same tracking with each engine's deterministic switch on (vllm, fa3, sglang)."""
    opts = opts or PolicyOptions()
    on = dataclasses.replace(
        opts, vllm=dataclasses.replace(opts.vllm, batch_invariant=True),
        sglang=dataclasses.replace(opts.sglang, deterministic=True),
    )
    rows = analyze(base, gpu, seq_len=seq_len, others=others, batches=batches, names=("vllm", "fa3", "sglang"), opts=on)
    labels = {"vllm": "VLLM_BATCH_INVARIANT=1: 2D path only, no split",
              "fa3": "VLLM_BATCH_INVARIANT=1: num_splits = 1",
              "sglang": "--enable-deterministic-inference: num_kv_splits = cdiv(L, 256)"}
    for r in rows:
        r.by_design = labels[r.name]
    return rows
