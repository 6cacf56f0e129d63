"""Pure sweep engine: every policy over batch x sequence length (x models, TP, GPUs), uniform decode batches.

Speed: a sweep is a product of per-batch constants and per-length closed forms, never a full
LaunchPlan per point.
- ``vllm``: the 2D/3D choice, grid and tile of vLLM's Triton path depend on the batch only
  (``seq_threshold_3D`` is a sequence-count threshold, upstream-launchers.md 3.1 c/e), so
  :func:`decodecalc.launchers.vllm_unified.plan_vllm` runs once per batch size (with CUDA-graph
  padding, the launch that actually replays), and the active segments
  ``cdiv(L, cdiv(L, S * TILE) * TILE)`` once per length.
- ``sglang``: for a uniform batch ``Lmin == Lmax`` so ``cdiv(L, kv_chunk_size_1) == 1`` and
  ``num_kv_splits = cdiv(L, cdiv(L, m2))`` with ``m2 = min(cdiv(ext(L), token_grid(B)), max_kv_splits)``
  (sglang 0.5.23 metadata.py L21-60): ``ext(L)`` once per length, ``token_grid(B)`` once per
  batch, the non-empty split count cached per ``(L, m2)``.
- ``flashdecoding``: S* = ceil(N_SM / G_2D) per batch, equal slices per length.
- ``fa2``, ``flashinfer``, ``flashinfer-tc``, ``vllm-paged``, ``vllm-rocm``, ``aiter``, ``flashmla``: their
  uniform-batch launch depends on the length only through a block / page / partition count (and
  the thresholds named in :func:`_l_keys`), so one full plan per (batch, count) is reused for
  every length with that count; the split length is recomputed per length;
- ``fa3`` (float32 rules, L2 size rule) and sliding-window layers: one full plan per point.

Results are column-major lists per (model, TP, GPU, policy): ``values[metric][i_batch][i_len]``.
Nothing here imports rich, typer or matplotlib; progress is reported through a callback.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from decodecalc.derived import Explain, cdiv, next_power_of_2
from decodecalc.errors import ConfigError, DecodecalcError, UnsupportedError
from decodecalc.launchers.base import LaunchPlan
from decodecalc.specs.gpus import GPUSpec
from decodecalc.specs.models import ModelConfig
from decodecalc.workload import make_workload

#: metrics every sweep grid carries, in CSV column order
METRICS = ("region", "splits", "nonempty_splits", "tokens_per_split", "programs", "working_programs",
           "sm_coverage", "waves")
FAST_POLICIES = ("vllm", "sglang", "flashdecoding")

MAX_BATCH = 65536
MAX_SEQ_LEN = 16 * 1024 * 1024
MAX_POINTS = 50_000_000

ProgressFn = Callable[[int, int, str], None]  # (done, total, label)


# ------------------------------------------------------------------------------------------
# ranges


def parse_range(text: str, option: str, *, upper: int) -> tuple[int, ...]:
    """Comma-separated items: ``N``, ``A:B`` (step 1), ``A:B:S`` (step S) or ``A:B:xF`` (times F).

    Validated before any work: positive, ascending bounds, at most ``upper``, not empty.
    """
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
                a = b = int(parts[0])
                step, geometric = 1, False
            elif len(parts) in (2, 3):
                a, b = int(parts[0]), int(parts[1])
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
            raise ConfigError(f"{option}: {b} is absurd (more than {upper:,})")
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
        header = "model,tp,gpu,policy,batch,seq_len," + ",".join(METRICS)
        out = [header]
        for g in self.grids:
            if not g.applicable:
                continue
            lens_s = [str(L) for L in g.seq_lens]
            memo: dict[int, list[str]] = {}
            cov_memo: dict[float, str] = {}

            def col(values: list[Any], is_float: bool = False) -> list[str]:
                key = id(values)
                hit = memo.get(key)
                if hit is None:
                    if is_float:
                        hit = [cov_memo.get(x) or cov_memo.setdefault(x, f"{x:.6g}") for x in values]
                    else:
                        hit = [str(x) for x in values]
                    memo[key] = hit
                return hit

            v = g.values
            for i, b in enumerate(g.batches):
                prefix = f"{g.model},{g.tp},{g.gpu},{g.policy},{b}"
                cols = [col(v[m][i], m == "sm_coverage") for m in METRICS]
                out.extend(map(",".join, zip(itertools.repeat(prefix), lens_s, *cols)))
        return "\n".join(out) + "\n"


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


# ------------------------------------------------------------------------------------------
# per-policy evaluators


def _coverage_rows(working: list[list[int]], num_sms: int) -> tuple[list[list[float]], list[list[int]]]:
    cov = [[(w if w < num_sms else num_sms) / num_sms for w in row] for row in working]
    waves = [[-(-w // num_sms) for w in row] for row in working]
    return cov, waves


def _active_segments(L: int, S: int, tile: int) -> int:
    return cdiv(L, cdiv(L, S * tile) * tile)


def _sweep_vllm(model: ModelConfig, tp: int, gpu: GPUSpec, batches, lens, opts, common, tick) -> SweepGrid:
    from decodecalc.launchers import vllm_unified

    g = SweepGrid(model.name, tp, gpu.name, gpu.num_sms, "vllm", batches, lens)
    L0 = lens[0]
    seg_cache: dict[tuple[int, int], list[int]] = {}
    V: dict[str, list[list[Any]]] = {m: [] for m in METRICS}
    for b in batches:
        w = make_workload(model, tp=tp, batch=b, seq_len=L0, **common)
        vp = vllm_unified.plan_vllm(w, gpu, opts.vllm, layer=opts.layer)
        la = vp.replay.launch if vp.replay is not None else vp.launch
        programs = math.prod(la.grid)
        h_kv = w.num_kv_heads
        n = len(lens)
        if la.use_3d:
            key = (la.num_segments, la.tile_size)
            act = seg_cache.get(key)
            if act is None:
                S, tile = key
                act = seg_cache[key] = [cdiv(L, cdiv(L, S * tile) * tile) for L in lens]
                seg_cache[(S, -tile)] = [cdiv(L, S * tile) * tile for L in lens]
            S, tile = key
            V["region"].append(["3D"] * n)
            V["splits"].append([S] * n)
            V["nonempty_splits"].append(act)
            V["tokens_per_split"].append(seg_cache[(S, -tile)])
            c = b * h_kv
            V["working_programs"].append([c * a for a in act])
        else:
            V["region"].append(["2D"] * n)
            V["splits"].append([1] * n)
            V["nonempty_splits"].append([1] * n)
            V["tokens_per_split"].append(list(lens))
            V["working_programs"].append([b * h_kv] * n)
        V["programs"].append([programs] * n)
        tick()
    V["sm_coverage"], V["waves"] = _coverage_rows(V["working_programs"], gpu.num_sms)
    g.values = V
    return g


def _sweep_sglang(model: ModelConfig, tp: int, gpu: GPUSpec, batches, lens, opts, common, tick) -> SweepGrid:
    from decodecalc.launchers import sglang_triton as sg

    g = SweepGrid(model.name, tp, gpu.name, gpu.num_sms, "sglang", batches, lens)
    settings = opts.sglang
    w1 = make_workload(model, tp=tp, batch=1, seq_len=lens[0], **common)
    h, h_kv = w1.num_heads, w1.num_kv_heads
    ht = sg.head_tiles(h, h_kv)
    depends_on_len = model.is_mla or settings.deterministic or settings.split_tile_size is not None
    if depends_on_len and settings.context_len is None:
        maxs_l = [sg.resolve_max_kv_splits(make_workload(model, tp=tp, batch=1, seq_len=L, **common), gpu, settings,
                                           Explain()) for L in lens]
    else:
        m = sg.resolve_max_kv_splits(w1, gpu, settings, Explain())
        maxs_l = [m] * len(lens)
    ext_l = [sg.ext_device_core_count(L, gpu.num_sms) for L in lens]
    kvps = sg.kv_len_per_split
    cache: dict[tuple[int, int], tuple[int, int, int]] = {}

    def split_info(L: int, n: int) -> tuple[int, int, int]:
        k = kvps(L, n)
        return n, cdiv(L, k), k

    if settings.deterministic:
        tile = settings.split_tile_size or sg.DETERMINISTIC_SPLIT_TILE_SIZE
        fixed = [split_info(L, cdiv(L, tile)) for L in lens]
    elif settings.static_kv_splits or gpu.num_sms <= 0:
        fixed = [split_info(L, m) for L, m in zip(lens, maxs_l)]
    else:
        fixed = None
    V: dict[str, list[list[Any]]] = {m: [] for m in METRICS}
    for b in batches:
        if fixed is not None:
            info = fixed
        else:
            tg = sg.token_grid(b, h, h_kv)
            info = []
            for L, ext, maxs in zip(lens, ext_l, maxs_l):
                m2 = -(-ext // tg)
                if m2 > maxs:
                    m2 = maxs
                key = (L, m2)
                r = cache.get(key)
                if r is None:
                    r = cache[key] = split_info(L, cdiv(L, cdiv(L, m2)))
                info.append(r)
        splits = [r[0] for r in info]
        ne = [r[1] for r in info]
        V["splits"].append(splits)
        V["nonempty_splits"].append(ne)
        V["tokens_per_split"].append([r[2] for r in info])
        V["region"].append(["split" if n > 1 else "no split" for n in ne])
        c = b * ht
        V["programs"].append([c * m for m in maxs_l])
        V["working_programs"].append([c * x for x in ne])
        tick()
    V["sm_coverage"], V["waves"] = _coverage_rows(V["working_programs"], gpu.num_sms)
    g.values = V
    return g


def _sweep_flashdecoding(model: ModelConfig, tp: int, gpu: GPUSpec, batches, lens, opts, common, tick) -> SweepGrid:
    from decodecalc.launchers.flashdecoding import first_wave_splits

    g = SweepGrid(model.name, tp, gpu.name, gpu.num_sms, "flashdecoding", batches, lens)
    w1 = make_workload(model, tp=tp, batch=1, seq_len=lens[0], **common)
    if model.is_mla:
        raise UnsupportedError("FlashDecoding (S*) does not serve MLA models")
    from decodecalc.launchers.vllm_unified import block_shape

    _, block_q = block_shape(w1.group_size)
    h_kv = w1.num_kv_heads
    V: dict[str, list[list[Any]]] = {m: [] for m in METRICS}
    n = len(lens)
    for b in batches:
        q_blocks = b // block_q + b
        S = first_wave_splits(gpu.num_sms, q_blocks * h_kv)
        sl = [cdiv(L, S) for L in lens]
        ne = [cdiv(L, x) for L, x in zip(lens, sl)]
        V["region"].append(["split" if S > 1 else "no split"] * n)
        V["splits"].append([S] * n)
        V["nonempty_splits"].append(ne)
        V["tokens_per_split"].append(sl)
        V["programs"].append([q_blocks * h_kv * S] * n)
        V["working_programs"].append([b * h_kv * x for x in ne])
        tick()
    V["sm_coverage"], V["waves"] = _coverage_rows(V["working_programs"], gpu.num_sms)
    g.values = V
    return g


def _l_keys(name: str, w1: Any) -> tuple[Callable[[int], Any], Callable[[Any, int], int]] | None:
    """(key(L), tokens_per_split(plan, L)) for launchers whose uniform-batch launch depends on the length
    only through a block count (plus the thresholds in the key). None: plan every point."""
    from decodecalc.launchers import flash_attn2, flashmla

    page = w1.block_size
    if name == "fa2":
        bN = flash_attn2.block_n(w1.head_size)
        return (lambda L: cdiv(L, bN),
                lambda p, L: min(p.details["n_blocks_per_split"] * bN, L) if p.splits[0] > 1 else L)
    if name in ("flashinfer", "flashinfer-tc"):
        def fi_tps(p: Any, L: int) -> int:
            chunk = p.details.get("kv_chunk_size_in_pages")
            return min(chunk * page, L) if (p.details.get("split_kv") and chunk) else L
        return (lambda L: cdiv(L, page), fi_tps)
    if name == "vllm-paged":
        return (lambda L: (cdiv(L, 512), L <= 8192),
                lambda p, L: L if p.details.get("version") == "v1" else min(512, L))
    if name == "vllm-rocm":
        return (lambda L: (cdiv(L, 256), L > 256, L > 128 * 1024), lambda p, L: min(256, L))
    if name == "aiter":
        tile = min(64, next_power_of_2(page))

        def aiter_tps(p: Any, L: int) -> int:
            if p.details.get("path") != "3D":
                return L
            S, t = p.details["NUM_SEGMENTS"], p.details["TILE_SIZE"]
            return min(cdiv(L, S * t) * t, L)
        return (lambda L: (cdiv(L, tile), L <= 512), aiter_tps)
    if name == "flashmla":
        n = flashmla.block_size_n
        return (lambda L: cdiv(L, n), lambda p, L: min(max(p.details["blocks_per_split"][0]) * n, L))
    return None


def _sweep_generic(name: str, model: ModelConfig, tp: int, gpu: GPUSpec, batches, lens, opts, common, tick) -> SweepGrid:
    from decodecalc.reports import compare as pol

    g = SweepGrid(model.name, tp, gpu.name, gpu.num_sms, name, batches, lens, fast=False)
    V: dict[str, list[list[Any]]] = {m: [] for m in METRICS}
    policy = pol.POLICIES[name]
    reason = pol._platform_reason(policy, gpu)  # noqa: SLF001 (same package)
    if reason:
        raise UnsupportedError(reason)
    w1 = make_workload(model, tp=tp, batch=1, seq_len=lens[0], **common)
    keyed = _l_keys(name, w1) if getattr(opts, "layer", "global") == "global" else None
    g.fast = keyed is not None
    first_reason: str | None = None
    served = 0
    for b in batches:
        rows: dict[str, list[Any]] = {m: [] for m in METRICS}
        memo: dict[Any, Any] = {}
        for L in lens:
            key = keyed[0](L) if keyed else None
            p: LaunchPlan | Literal[False] | None = memo.get(key) if keyed else None
            if p is None:
                try:
                    w = make_workload(model, tp=tp, batch=b, seq_len=L, **common)
                    if policy.build is not None:  # the bare planner: no figures needed here
                        p = policy.build(w, gpu, opts)
                    else:
                        r = pol.evaluate(name, w, gpu, opts)
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
            rows["tokens_per_split"].append(keyed[1](p, L) if keyed else p.tokens_per_split[0])
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


_FAST = {"vllm": _sweep_vllm, "sglang": _sweep_sglang, "flashdecoding": _sweep_flashdecoding}


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
            raise ConfigError(f"the sweep has {n:,} points (more than {MAX_POINTS:,}); narrow the ranges")

    @property
    def num_points(self) -> int:
        return (len(self.batches) * len(self.seq_lens) * len(self.policies) * len(self.models) * len(self.tps)
                * len(self.gpus))

    def to_json(self) -> dict[str, Any]:
        return {"models": [m.name for m in self.models], "tps": list(self.tps), "gpus": [g.name for g in self.gpus],
                "policies": list(self.policies), "batches": [min(self.batches), max(self.batches), len(self.batches)],
                "seq_lens": [min(self.seq_lens), max(self.seq_lens), len(self.seq_lens)],
                "dtype": self.dtype, "kv_cache_dtype": self.kv_cache_dtype, "block_size": self.block_size}


def run_sweep(spec: SweepSpec, opts: Any = None, progress: ProgressFn | None = None) -> SweepResult:
    """Evaluate every (model, TP, GPU, policy) grid. Inapplicable combinations carry their reason."""
    from decodecalc.reports import compare as pol

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
        fn = _FAST.get(name)
        if getattr(opts, "layer", "global") != "global":
            fn = None  # sliding-window layers change the active segments per length: use full plans
        try:
            if fn is not None:
                g = fn(m, tp, gpu, spec.batches, spec.seq_lens, opts, common, tick)
            else:
                g = _sweep_generic(name, m, tp, gpu, spec.batches, spec.seq_lens, opts, common, tick)
        except DecodecalcError as exc:  # the policy cannot serve this (model, TP, GPU): keep the reason
            g = SweepGrid(m.name, tp, gpu.name, gpu.num_sms, name, spec.batches, spec.seq_lens, applicable=False,
                          reason=str(exc), fast=name in _FAST)
            done = before + len(spec.batches)
            if progress is not None:
                progress(done, total, label)
        grids.append(g)
    return SweepResult(grids, spec.to_json())


def replace_gpu_sms(gpu: GPUSpec, sms: int | None) -> GPUSpec:
    return dataclasses.replace(gpu, num_sms=sms) if sms else gpu
