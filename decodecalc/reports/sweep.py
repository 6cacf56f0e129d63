"""Pure sweep engine: every policy over batch x sequence length (x models, TP, GPUs), uniform decode batches.

Speed: a sweep is a product of per-batch constants and per-length closed forms, never a full
LaunchPlan per point. What a launcher's uniform-batch launch depends on is the launcher's own
knowledge, registered with its policy in :mod:`decodecalc.launchers.registry`:
- ``BackendSpec.sweep_rows`` (vLLM, SGLang, FlashDecoding): the launcher's fast path yields one
  :class:`~decodecalc.launchers.base.SweepRow` per batch size (e.g.
  :func:`decodecalc.launchers.vllm_unified.sweep_rows`, :func:`decodecalc.launchers.sglang_triton.sweep_rows`);
- ``BackendSpec.length_key`` (FA2, FlashInfer, vLLM paged / ROCm, aiter, FlashMLA): the launch depends on the
  length only through a block / page / partition count (and the thresholds in the key), so one full plan
  per (batch, key) is reused for every length with that key; the split length is recomputed per length;
- otherwise (FA3: float32 rules, L2 size rule) and on sliding-window layers: one full plan per point.

Results are column-major lists per (model, TP, GPU, policy): ``values[metric][i_batch][i_len]``.
Nothing here imports rich, typer or matplotlib; progress is reported through a callback.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from decodecalc import limits as _limits
from decodecalc.errors import ConfigError, DecodecalcError, UnsupportedError
from decodecalc.launchers.base import LaunchPlan
from decodecalc.specs.gpus import GPUSpec
from decodecalc.specs.models import ModelConfig
from decodecalc.workload import Workload, make_workload

if TYPE_CHECKING:
    from decodecalc.launchers.registry import BackendSpec, PolicyOptions

#: metrics every sweep grid carries, in CSV column order
METRICS = ("region", "splits", "nonempty_splits", "tokens_per_split", "programs", "working_programs",
           "sm_coverage", "waves")

#: the sweep's stated limits (decodecalc.limits; measured costs: docs/limits.md)
MAX_BATCH = _limits.MAX_BATCH
MAX_SEQ_LEN = _limits.MAX_SEQ_LEN
#: points over every grid (closed forms: about 150,000 points/s and 800 B per point with the CSV)
MAX_POINTS = 1 << 20
#: batch sizes summed over every grid (each batch size is planned once per grid, at O(batch))
MAX_SWEEP_SEQUENCES = 1 << 21
#: policies without a closed form (no ``sweep_rows``) run full launch plans: at most this many points ...
MAX_PLAN_POINTS = 16_384
#: ... over at most this many sequences (a plan costs O(batch))
MAX_PLAN_SEQUENCES = 1 << 21

ProgressFn = Callable[[int, int, str], None]  # (done, total, label)


# ------------------------------------------------------------------------------------------
# ranges


def parse_range(text: str, option: str, *, upper: int) -> tuple[int, ...]:
    """Comma-separated items: ``N``, ``A:B`` (step 1), ``A:B:S`` (step S) or ``A:B:xF`` (times F); N, A
    and B may carry a K (x1024) or M suffix, as the axes are labelled ("8K", "128k").

    Validated before any work: positive, ascending bounds, at most ``upper``, not empty.
    """
    from decodecalc.formatting import parse_tokens

    if text is None or not text.strip():
        raise ConfigError(f"{option} is empty; give e.g. 1:256 or 512:131072:x2 or 1,2,4")
    values: set[int] = set()
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        parts = item.replace("-", ":", 1).split(":") if ":" in item or item.count("-") == 1 else [item]
        try:
            if len(parts) == 1:
                a = b = parse_tokens(parts[0])  # "8K" / "128k" as the sweep labels its axes
                step, geometric = 1, False
            elif len(parts) in (2, 3):
                a, b = parse_tokens(parts[0]), parse_tokens(parts[1])
                step, geometric = 1, False
                if len(parts) == 3:
                    s = parts[2].strip().lower()
                    geometric = s.startswith("x")
                    step = int(s[1:]) if geometric else int(s)
            else:
                raise ValueError
        except ValueError:
            raise ConfigError(f"{option}: {item!r} is not N, A:B, A:B:STEP or A:B:xFACTOR") from None
        if a <= 0 or b <= 0:
            raise ConfigError(f"{option}: {item!r} must be positive integers")
        if b < a:
            raise ConfigError(f"{option}: {item!r} is empty (end {b} < start {a})")
        if b > upper:
            raise ConfigError(f"{option}: {b} is over the supported {upper:,}")
        if geometric:
            if step < 2:
                raise ConfigError(f"{option}: geometric factor in {item!r} must be >= 2")
            v = a
            while v <= b:
                values.add(v)
                v *= step
        else:
            if step < 1:
                raise ConfigError(f"{option}: step in {item!r} must be >= 1")
            if (b - a) // step + 1 + len(values) > MAX_POINTS:  # before building the set
                raise ConfigError(f"{option}: {item!r} alone makes more than the supported {MAX_POINTS:,} points")
            values.update(range(a, b + 1, step))
    if not values:
        raise ConfigError(f"{option} is empty")
    return tuple(sorted(values))


# ------------------------------------------------------------------------------------------
# results


@dataclass(slots=True)
class SweepGrid:
    """One (model, TP, GPU, policy): metric matrices indexed [batch][seq_len]."""

    model: str
    tp: int
    gpu: str
    num_sms: int
    policy: str
    batches: tuple[int, ...]
    seq_lens: tuple[int, ...]
    applicable: bool = True
    reason: str | None = None
    values: dict[str, list[list[Any]]] = field(default_factory=dict)
    fast: bool = True

    def rows(self) -> Iterable[tuple[Any, ...]]:
        """(batch, seq_len, *METRICS) per point, batch-major."""
        v = self.values
        for i, b in enumerate(self.batches):
            cols = [v[m][i] for m in METRICS]
            for j, L in enumerate(self.seq_lens):
                yield (b, L, *[c[j] for c in cols])

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "tp": self.tp, "gpu": self.gpu, "num_sms": self.num_sms, "policy": self.policy,
                "applicable": self.applicable, "reason": self.reason, "batches": list(self.batches),
                "seq_lens": list(self.seq_lens), "fast_path": self.fast,
                "values": {m: self.values.get(m) for m in METRICS} if self.applicable else None}


@dataclass(slots=True)
class SweepResult:
    grids: list[SweepGrid]
    spec: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"spec": self.spec, "metrics": list(METRICS), "grids": [g.to_json() for g in self.grids]}

    def to_csv(self) -> str:
        """One row per point. Column strings are built once per (shared) list, so ~0.5 M rows take well under 1 s."""
        return "".join(self.iter_csv())

    def iter_csv(self) -> Iterator[str]:
        """The CSV of :meth:`to_csv` in chunks (the header, then one chunk per batch size), so a file is written
        without holding the whole text (and the column strings of at most two batch sizes) in memory."""
        yield "model,tp,gpu,policy,batch,seq_len," + ",".join(METRICS) + "\n"
        for g in self.grids:
            if not g.applicable:
                continue
            lens_s = [str(L) for L in g.seq_lens]
            memo: dict[int, list[str]] = {}
            previous: dict[int, list[str]] = {}  # consecutive batch sizes share lists in the fast paths
            cov_memo: dict[float, str] = {}

            def col(values: list[Any], is_float: bool = False) -> list[str]:
                key = id(values)
                hit = memo.get(key) or previous.get(key)
                if hit is None:
                    if is_float:
                        hit = [cov_memo.get(x) or cov_memo.setdefault(x, f"{x:.6g}") for x in values]
                    else:
                        hit = [str(x) for x in values]
                memo[key] = hit
                return hit

            v = g.values
            for i, b in enumerate(g.batches):
                previous, memo = memo, {}
                prefix = f"{g.model},{g.tp},{g.gpu},{g.policy},{b}"
                cols = [col(v[m][i], m == "sm_coverage") for m in METRICS]
                yield "\n".join(map(",".join, zip(itertools.repeat(prefix), lens_s, *cols))) + "\n"


# ------------------------------------------------------------------------------------------
# per-policy evaluators


def _coverage_rows(working: list[list[int]], num_sms: int) -> tuple[list[list[float]], list[list[int]]]:
    cov = [[(w if w < num_sms else num_sms) / num_sms for w in row] for row in working]
    waves = [[-(-w // num_sms) for w in row] for row in working]
    return cov, waves


def _sweep_fast(policy: BackendSpec, model: ModelConfig, tp: int, gpu: GPUSpec, batches: tuple[int, ...],
                lens: tuple[int, ...], opts: PolicyOptions, common: dict[str, Any], tick: Callable[[], None]) -> SweepGrid:
    """A launcher's own fast path (``BackendSpec.sweep_rows``): one SweepRow per batch size."""
    assert policy.sweep_rows is not None
    g = SweepGrid(model.name, tp, gpu.name, gpu.num_sms, policy.name, batches, lens)
    V: dict[str, list[list[Any]]] = {m: [] for m in METRICS}

    def workload(b: int, L: int) -> Workload:
        return make_workload(model, tp=tp, batch=b, seq_len=L, **common)

    for row in policy.sweep_rows(workload, gpu, opts, batches, lens):
        for m in METRICS[:6]:
            V[m].append(getattr(row, m))
        tick()
    V["sm_coverage"], V["waves"] = _coverage_rows(V["working_programs"], gpu.num_sms)
    g.values = V
    return g


def _sweep_generic(policy: BackendSpec, model: ModelConfig, tp: int, gpu: GPUSpec, batches: tuple[int, ...],
                   lens: tuple[int, ...], opts: PolicyOptions, common: dict[str, Any],
                   tick: Callable[[], None]) -> SweepGrid:
    """Full plans, reused per (batch, ``BackendSpec.length_key``) where the launcher declares one."""
    from decodecalc.launchers.registry import platform_reason
    from decodecalc.reports.compare import evaluate

    name = policy.name
    g = SweepGrid(model.name, tp, gpu.name, gpu.num_sms, name, batches, lens, fast=False)
    V: dict[str, list[list[Any]]] = {m: [] for m in METRICS}
    reason = platform_reason(policy, gpu)
    if reason:
        raise UnsupportedError(reason)
    w1 = make_workload(model, tp=tp, batch=1, seq_len=lens[0], **common)
    keyed = policy.length_key(w1) if policy.length_key is not None and opts.layer == "global" else None
    g.fast = keyed is not None
    first_reason: str | None = None
    served = 0
    for b in batches:
        rows: dict[str, list[Any]] = {m: [] for m in METRICS}
        memo: dict[Any, Any] = {}
        for L in lens:
            key = keyed.key(L) if keyed else None
            p: LaunchPlan | Literal[False] | None = memo.get(key) if keyed else None
            if p is None:
                try:
                    w = make_workload(model, tp=tp, batch=b, seq_len=L, **common)
                    if policy.build is not None:  # the bare planner: no figures needed here
                        p = policy.build(w, gpu, opts)
                    else:
                        r = evaluate(name, w, gpu, opts)
                        if not r.applicable or r.plan is None:
                            raise UnsupportedError(r.reason or "not applicable")
                        p = r.plan
                except DecodecalcError as exc:  # this point only (e.g. ROCm custom beyond 128 K keys)
                    first_reason = first_reason or f"at batch {b}, length {L}: {exc}"
                    p = False
                if keyed:
                    memo[key] = p
            if p is False:
                for m, v in (("region", "n/a"), ("splits", 0), ("nonempty_splits", 0), ("tokens_per_split", 0),
                             ("programs", 0), ("working_programs", 0)):
                    rows[m].append(v)
                continue
            served += 1
            s, ne = p.splits[0], p.nonempty_splits[0]
            rows["region"].append("split" if ne > 1 else "no split")
            rows["splits"].append(s)
            rows["nonempty_splits"].append(ne)
            rows["tokens_per_split"].append(keyed.tokens_per_split(p, L) if keyed else p.tokens_per_split[0])
            rows["programs"].append(p.main.programs)
            rows["working_programs"].append(p.main.working_programs)
        for m in METRICS[:6]:
            V[m].append(rows[m])
        tick()
    if not served:
        raise UnsupportedError(first_reason or "not applicable")
    if first_reason:
        g.reason = f"some points not served (region n/a), first {first_reason}"
    V["sm_coverage"], V["waves"] = _coverage_rows(V["working_programs"], gpu.num_sms)
    g.values = V
    return g


# ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepSpec:
    models: tuple[ModelConfig, ...]
    tps: tuple[int, ...]
    gpus: tuple[GPUSpec, ...]
    policies: tuple[str, ...]
    batches: tuple[int, ...]
    seq_lens: tuple[int, ...]
    dtype: str | None = None
    kv_cache_dtype: str = "auto"
    block_size: int = 16

    def validate(self) -> None:
        if not self.batches or not self.seq_lens:
            raise ConfigError("the sweep has no batch sizes or no sequence lengths")
        if min(self.batches) <= 0 or max(self.batches) > MAX_BATCH:
            raise ConfigError(f"batch sizes must be in 1..{MAX_BATCH:,}")
        if min(self.seq_lens) <= 0 or max(self.seq_lens) > MAX_SEQ_LEN:
            raise ConfigError(f"sequence lengths must be in 1..{MAX_SEQ_LEN:,}")
        if not self.policies or not self.models or not self.tps or not self.gpus:
            raise ConfigError("the sweep needs at least one policy, model, TP degree and GPU")
        n = self.num_points
        if n > MAX_POINTS:
            raise ConfigError(f"the sweep has {n:,} points, over the supported {MAX_POINTS:,}; narrow the ranges")
        # every policy plans each batch size once, at O(batch): the swept sizes are bounded together
        batch_seqs = len(self.policies) * len(self.models) * len(self.tps) * len(self.gpus) * sum(self.batches)
        if batch_seqs > MAX_SWEEP_SEQUENCES:
            raise ConfigError(f"the sweep plans {batch_seqs:,} sequences (the batch sizes summed, per policy, model, "
                              f"TP and GPU), over the supported {MAX_SWEEP_SEQUENCES:,}; narrow --batch")
        from decodecalc.launchers.registry import POLICIES

        slow = [p for p in self.policies if POLICIES[p].sweep_rows is None]
        if slow:
            grids = len(slow) * len(self.models) * len(self.tps) * len(self.gpus)
            plans = grids * len(self.batches) * len(self.seq_lens)
            seqs = grids * sum(self.batches) * len(self.seq_lens)
            if plans > MAX_PLAN_POINTS or seqs > MAX_PLAN_SEQUENCES:
                raise ConfigError(
                    f"{', '.join(slow)}: no closed form, up to one launch plan per point; this sweep has {plans:,} "
                    f"such points over {seqs:,} sequences, over the supported {MAX_PLAN_POINTS:,} points and "
                    f"{MAX_PLAN_SEQUENCES:,} sequences; narrow the ranges")

    @property
    def num_points(self) -> int:
        return (len(self.batches) * len(self.seq_lens) * len(self.policies) * len(self.models) * len(self.tps)
                * len(self.gpus))

    def to_json(self) -> dict[str, Any]:
        return {"models": [m.name for m in self.models], "tps": list(self.tps), "gpus": [g.name for g in self.gpus],
                "policies": list(self.policies), "batches": [min(self.batches), max(self.batches), len(self.batches)],
                "seq_lens": [min(self.seq_lens), max(self.seq_lens), len(self.seq_lens)],
                "dtype": self.dtype, "kv_cache_dtype": self.kv_cache_dtype, "block_size": self.block_size}


def run_sweep(spec: SweepSpec, opts: PolicyOptions | None = None, progress: ProgressFn | None = None) -> SweepResult:
    """Evaluate every (model, TP, GPU, policy) grid. Inapplicable combinations carry their reason."""
    from decodecalc.launchers import registry as pol

    spec.validate()
    opts = opts or pol.PolicyOptions()
    for name in spec.policies:
        if name not in pol.POLICIES:
            from decodecalc.errors import UnknownNameError

            raise UnknownNameError("policy", name, pol.POLICY_NAMES)
    common: dict[str, Any] = {"dtype": spec.dtype, "kv_cache_dtype": spec.kv_cache_dtype, "block_size": spec.block_size}
    # validate every (model, tp) before any work starts
    for m in spec.models:
        for tp in spec.tps:
            make_workload(m, tp=tp, batch=1, seq_len=spec.seq_lens[0], **common)
    combos = [(m, tp, gpu, name) for m in spec.models for tp in spec.tps for gpu in spec.gpus
              for name in spec.policies]
    total = len(combos) * len(spec.batches)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, label)

    grids: list[SweepGrid] = []
    for m, tp, gpu, name in combos:
        label = f"{name} {m.name} TP{tp} {gpu.name}"
        before = done
        policy = pol.POLICIES[name]
        # sliding-window layers change the active segments per length: full plans there
        fast = policy.sweep_rows is not None and opts.layer == "global"
        try:
            if fast:
                g = _sweep_fast(policy, m, tp, gpu, spec.batches, spec.seq_lens, opts, common, tick)
            else:
                g = _sweep_generic(policy, m, tp, gpu, spec.batches, spec.seq_lens, opts, common, tick)
        except DecodecalcError as exc:  # the policy cannot serve this (model, TP, GPU): keep the reason
            g = SweepGrid(m.name, tp, gpu.name, gpu.num_sms, name, spec.batches, spec.seq_lens, applicable=False,
                          reason=str(exc), fast=policy.sweep_rows is not None)
            done = before + len(spec.batches)
            if progress is not None:
                progress(done, total, label)
        grids.append(g)
    return SweepResult(grids, spec.to_json())
