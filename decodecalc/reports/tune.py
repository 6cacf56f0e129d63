"""``decodecalc tune``: the best global engine setting for a whole decode workload, from the time model.

For each engine, every candidate setting is applied to every step of the workload: the launcher
module decides what the step launches under that setting (vLLM: launchers/vllm_unified.py with the
segment count and MIN_LAUNCH_GRID_SIZE_2D as settings, threshold snapping and CUDA-graph padding as
the engine does them; SGLang: launchers/sglang_triton.py with max_kv_splits and the static switch)
and the time model times it (:mod:`decodecalc.reports.tune_eval`). The best setting minimises the
mean (or p99) step time among those that slow no step by more than ``max_regression`` relative to
the engine's default, ranked as ``recommend`` ranks: by the predicted time averaged over the
profile's occupancy and one program per SM either side (``timemodel.robust_time_s``). Step times are one attention layer's decode-attention time on one rank; the
per-1,000-token figure covers every layer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from decodecalc.errors import ConfigError, UnsupportedError
from decodecalc.launchers import vllm_unified as vu
from decodecalc.launchers.sglang_triton import DEFAULT_MAX_KV_SPLITS, SglangSettings
from decodecalc.launchers.vllm_unified import VllmSettings
from decodecalc.reports.tune_backends import BackendNote, backend_levers
from decodecalc.reports.tune_eval import DEFAULT_MAX_SHAPES, ShapeSet, Stats, StepTimer, shape_set, stats
from decodecalc.specs.gpus import GPUSpec
from decodecalc.timemodel import TimeProfile
from decodecalc.traffic import StepTrace
from decodecalc.workload import Workload

ENGINES = ("vllm", "sglang")
OBJECTIVES = ("mean", "p99")
#: vLLM candidates: NUM_PAR_SOFTMAX_SEGMENTS x MIN_LAUNCH_GRID_SIZE_2D (default 16 x 128)
VLLM_SEGMENTS = (4, 8, 16, 32, 64)
VLLM_MIN_GRID = (0, 64, 128, 256, 512, 1024, 2048, 4096)
#: SGLang candidates: --triton-attention-num-kv-splits x SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS
SGLANG_MAX_SPLITS = (1, 2, 4, 8, 16, 32, 64)
CHANGE_FRACTION = 0.01  # a step "gains" or "loses" when its time moves by more than this
BATCH_BUCKETS = ((1, 1), (2, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 128), (129, 256), (257, 1 << 30))


def parse_regression(text: str | float | None) -> float | None:
    """``5%`` or ``0.05`` -> 0.05; ``none`` / ``off`` -> None (no guard)."""
    if text is None:
        return None
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        t = text.strip().lower()
        if t in ("none", "off"):
            return None
        try:
            value = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
        except ValueError:
            raise ConfigError(f"--max-regression {text!r}: give a percentage such as 5% (or none)") from None
        if not t.endswith("%") and value > 1:
            raise ConfigError(f"--max-regression {text!r}: as a fraction it must be <= 1; did you mean {t}%?")
    if not value >= 0 or value == float("inf"):  # also NaN
        raise ConfigError(f"--max-regression must be a finite number >= 0, got {text!r}")
    return value


@dataclass(frozen=True, slots=True)
class Candidate:
    engine: str
    setting: Mapping[str, Any]  # the knobs, as the JSON shows them
    label: str
    times: tuple[float, ...]  # per shape, one layer, seconds
    stats: Stats
    worst_ratio: float = 1.0  # max over steps of time / default time
    allowed: bool = True
    score: Stats | None = None  # the same statistics of the ranking score (tune_eval.StepTimer.scores)
    steps_2d: int | None = None  # vLLM: steps (weighted) whose launch runs the 2D kernel (no KV split)

    def to_dict(self) -> dict[str, Any]:
        d = {"setting": dict(self.setting), "label": self.label, **self.stats.to_dict(),
             "worst_step_vs_default": self.worst_ratio, "within_guard": self.allowed}
        if self.steps_2d is not None:
            d["steps_2d"] = self.steps_2d
        if self.score is not None:
            d["ranking_score"] = {"mean_step_s": self.score.mean_step_s, "p99_step_s": self.score.p99_step_s}
        return d


@dataclass(frozen=True, slots=True)
class EngineTune:
    engine: str
    default: Candidate
    best: Candidate
    candidates: tuple[Candidate, ...]
    apply: tuple[str, ...]
    calibrated: bool
    attention_s_per_1k_tokens: dict[str, float]
    changes: dict[str, Any]
    apply_commands: tuple[str, ...] = ()  # shell lines / flags to copy (empty: keep the default)

    def to_dict(self) -> dict[str, Any]:
        short = ("setting", "mean_step_s", "p99_step_s", "total_s")
        pick = (lambda c: {k: v for k, v in c.to_dict().items() if k in short} | {"label": c.label})
        return {"default": pick(self.default), "best": pick(self.best),
                "candidates": [c.to_dict() for c in self.candidates], "apply": list(self.apply),
                "apply_commands": list(self.apply_commands),
                "calibrated": self.calibrated, "attention_s_per_1k_tokens": dict(self.attention_s_per_1k_tokens),
                "saving_vs_default": 1.0 - self.best.stats.total_s / self.default.stats.total_s,
                "steps": self.changes}


@dataclass(frozen=True, slots=True, kw_only=True)
class TuneContext:
    """Everything the search and the heuristics share: the workload, its shapes, the timer."""

    trace: StepTrace
    work: Workload  # base per-rank shape (model, heads, dtypes); lengths come from the steps
    gpu: GPUSpec
    profile: TimeProfile
    vllm: VllmSettings
    sglang: SglangSettings
    shapes: ShapeSet
    timer: StepTimer

    @property
    def num_layers(self) -> int:
        return self.work.model.num_layers


def make_context(trace: StepTrace, work: Workload, gpu: GPUSpec, profile: TimeProfile, *,
                 vllm: VllmSettings | None = None, sglang: SglangSettings | None = None,
                 max_shapes: int = DEFAULT_MAX_SHAPES) -> TuneContext:
    vllm = vllm or VllmSettings()
    sglang = sglang or SglangSettings()
    for s in trace.steps:
        if s.batch > vllm.max_num_seqs:
            raise ConfigError(f"{s.origin or trace.source}, field 'seq_lens': {s.batch} sequences in one step, more "
                              f"than max_num_seqs {vllm.max_num_seqs} (raise --max-num-seqs or split the step)")
    shapes = shape_set(trace, max_shapes)
    return TuneContext(trace=trace, work=work, gpu=gpu, profile=profile, vllm=vllm, sglang=sglang, shapes=shapes,
                       timer=StepTimer(work, gpu, profile, shapes))


def objective_value(st: Stats, objective: str) -> float:
    return st.p99_step_s if objective == "p99" else st.mean_step_s


def _candidate(ctx: TuneContext, engine: str, setting: Mapping[str, Any], label: str, works: Sequence[Any],
               default_times: Sequence[float] | None, max_regression: float | None) -> Candidate:
    times = [ctx.timer.time_of(lw, engine) for lw in works]
    st = stats(times, ctx.shapes)
    worst = 1.0
    if default_times is not None:
        worst = max(t / d for t, d in zip(times, default_times))
    allowed = max_regression is None or worst <= 1.0 + max_regression + 1e-12
    steps_2d = sum(w for lw, w in zip(works, ctx.shapes.weights) if lw.splits == 1) if engine == "vllm" else None
    return Candidate(engine=engine, setting=setting, label=label, times=tuple(times), stats=st, worst_ratio=worst,
                     allowed=allowed, score=stats(ctx.timer.scores(works), ctx.shapes), steps_2d=steps_2d)


def vllm_setting(segments: int, min_grid: int) -> dict[str, int]:
    return {"NUM_PAR_SOFTMAX_SEGMENTS": segments, "MIN_LAUNCH_GRID_SIZE_2D": min_grid}


def _search(ctx: TuneContext, engine: str, grid: Sequence[tuple[dict[str, Any], str, Callable[[], tuple[Any, ...]]]],
            objective: str, max_regression: float | None) -> tuple[Candidate, Candidate, tuple[Candidate, ...]]:
    default_setting, default_label, default_fn = grid[0]
    dworks = default_fn()
    dtimes = [ctx.timer.time_of(lw, engine) for lw in dworks]
    default = _candidate(ctx, engine, default_setting, default_label, dworks, dtimes, max_regression)
    cands = [default]
    for setting, label, fn in grid[1:]:
        cands.append(_candidate(ctx, engine, setting, label, fn(), dtimes, max_regression))
    # a setting is only worth changing to where the nominal prediction agrees that it saves time
    ok = [c for c in cands if c.allowed and (c is default or objective_value(c.stats, objective)
                                             < objective_value(default.stats, objective))]
    # ranked by the robust score, as recommend ranks (occupancy, the least certain input, +-1); exact ties (the
    # same launches, e.g. every threshold above the largest batch) go to the default, then to the smallest knob
    # values (less split-K scratch)
    best = min(ok, key=lambda c: (objective_value(c.score or c.stats, objective), c.stats.total_s, c is not default,
                                  tuple(int(v) for v in c.setting.values())))
    return default, best, tuple(cands)


def _vllm_grid(ctx: TuneContext):
    base = ctx.vllm
    d_seg = base.num_par_softmax_segments or vu.NUM_PAR_SOFTMAX_SEGMENTS
    d_grid = vu.MIN_LAUNCH_GRID_SIZE_2D if base.min_launch_grid_size_2d is None else base.min_launch_grid_size_2d
    out = []
    combos = [(d_seg, d_grid)] + [(s, m) for s in VLLM_SEGMENTS for m in VLLM_MIN_GRID if (s, m) != (d_seg, d_grid)]
    for s, m in combos:
        st = dataclasses.replace(base, num_par_softmax_segments=s, min_launch_grid_size_2d=m)
        label = f"S={s} grid={m}" + (" (default)" if (s, m) == (d_seg, d_grid) else "")
        out.append((vllm_setting(s, m), label, (lambda st=st: ctx.timer.vllm_works(st))))
    return out


def sglang_setting(max_kv_splits: int, static: bool) -> dict[str, Any]:
    return {"triton_attention_num_kv_splits": max_kv_splits, "static_kv_splits": static}


def _sglang_grid(ctx: TuneContext):
    base = ctx.sglang
    d_max = base.max_kv_splits or DEFAULT_MAX_KV_SPLITS
    d_static = base.static_kv_splits
    combos = [(d_max, d_static)] + [(m, st) for st in (False, True) for m in SGLANG_MAX_SPLITS
                                    if (m, st) != (d_max, d_static) and not (m == 1 and st)]
    out = []
    for m, st in combos:
        s = dataclasses.replace(base, max_kv_splits=m, static_kv_splits=st)
        label = f"{'static' if st else 'adaptive'} {m}" + (" (default)" if (m, st) == (d_max, d_static) else "")
        out.append((sglang_setting(m, st), label, (lambda s=s: ctx.timer.sglang_works(s))))
    return out


TRITON_ATTN_MODULE = "vllm.v1.attention.backends.triton_attn"  # vLLM 0.33.0: the two constants at L58-59


def _apply(engine: str, best: Candidate, default: Candidate, ctx: TuneContext) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(how to apply the best setting, in words; the shell lines or flags to copy, each under 80 columns)."""
    if best is default:
        return ("keep the default: no candidate beats it on this workload within the guard",), ()
    if engine == "vllm":
        s, m = best.setting["NUM_PAR_SOFTMAX_SEGMENTS"], best.setting["MIN_LAUNCH_GRID_SIZE_2D"]
        d_s, d_m = default.setting["NUM_PAR_SOFTMAX_SEGMENTS"], default.setting["MIN_LAUNCH_GRID_SIZE_2D"]
        t = max(0, m // ctx.work.num_kv_heads)
        words = (f"edit the two constants of vllm/v1/attention/backends/triton_attn.py (vLLM 0.33.0, L58-59) in the "
                 f"installed package: NUM_PAR_SOFTMAX_SEGMENTS {d_s} -> {s}, MIN_LAUNCH_GRID_SIZE_2D {d_m} -> {m}",
                 f"the 3D (split) path then runs the steps with num_seqs x cdiv(query length, BLOCK_Q) up to "
                 f"seq_threshold_3D = {m} // {ctx.work.num_kv_heads} KV heads = {t} ({t} sequences of one query "
                 "token), snapped to the nearest CUDA-graph capture size; both constants apply to every batch and "
                 "the split-K scratch grows with the threshold and the segment count")
        cmds = (f"M={TRITON_ATTN_MODULE}",
                'F=$(python -c "import $M as m; print(m.__file__)")',
                f"sed -i 's/^\\(NUM_PAR_SOFTMAX_SEGMENTS =\\) [0-9]*/\\1 {s}/' \"$F\"",
                f"sed -i 's/^\\(MIN_LAUNCH_GRID_SIZE_2D =\\) [0-9]*/\\1 {m}/' \"$F\"")
        return words, cmds
    m, static = best.setting["triton_attention_num_kv_splits"], best.setting["static_kv_splits"]
    if static:
        return ((f"launch the server (python -m sglang.launch_server) with --triton-attention-num-kv-splits {m} and "
                 f"the environment variable SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS=1 (every sequence then gets "
                 f"{m} split{'s' * (m > 1)})",),
                ("export SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS=1", f"--triton-attention-num-kv-splits {m}"))
    return ((f"launch the server (python -m sglang.launch_server) with --triton-attention-num-kv-splits {m} (the "
             "maximum of the adaptive rule; leave SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS unset)",),
            ("unset SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS", f"--triton-attention-num-kv-splits {m}"))


def step_changes(ctx: TuneContext, new: Sequence[float], old: Sequence[float]) -> dict[str, Any]:
    """Which steps gain and which lose: weighted counts, the batch-size buckets, the extreme steps."""
    sh = ctx.shapes
    gain = lose = same = 0
    buckets: dict[tuple[int, int], list[float]] = {}
    worst = best = None
    for i, (n, o) in enumerate(zip(new, old)):
        w = sh.weights[i]
        r = n / o
        if r < 1 - CHANGE_FRACTION:
            gain += w
        elif r > 1 + CHANGE_FRACTION:
            lose += w
        else:
            same += w
        b = len(sh.shapes[i])
        key = next(k for k in BATCH_BUCKETS if k[0] <= b <= k[1])
        acc = buckets.setdefault(key, [0.0, 0.0, 0.0])
        acc[0] += w
        acc[1] += o * w
        acc[2] += n * w
        if worst is None or r > worst[0]:
            worst = (r, i)
        if best is None or r < best[0]:
            best = (r, i)

    def describe(pair: tuple[float, int] | None) -> dict[str, Any] | None:
        if pair is None:
            return None
        r, i = pair
        shape = sh.shapes[i]
        origin = sh.step_origin[sh.step_shape.index(i)] if i in sh.step_shape else ""
        return {"ratio": r, "batch": len(shape), "max_seq_len": shape[0][0], "min_seq_len": shape[-1][0],
                "example": origin}

    rows = []
    for (lo, hi), (count, old_s, new_s) in sorted(buckets.items()):
        rows.append({"batch": f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi < 1 << 30 else f">={lo}"),
                     "steps": int(count), "default_mean_step_s": old_s / count, "best_mean_step_s": new_s / count,
                     "change": new_s / old_s - 1.0})
    return {"gain": gain, "lose": lose, "same": same, "threshold": CHANGE_FRACTION, "by_batch": rows,
            "biggest_gain": describe(best), "biggest_loss": describe(worst)}


def per_1k_tokens(ctx: TuneContext, st: Stats) -> float:
    """Decode-attention time over all layers per 1,000 generated tokens (a speculative step generates its
    accepted tokens plus one per sequence: DecodeStep.generated_tokens)."""
    tokens = sum(s.generated_tokens * s.weight for s in ctx.trace.steps)
    return st.total_s * ctx.num_layers / tokens * 1000.0


def tune_engine(ctx: TuneContext, engine: str, objective: str = "mean", max_regression: float | None = 0.05) -> EngineTune:
    if objective not in OBJECTIVES:
        raise ConfigError(f"--objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    grid = _vllm_grid(ctx) if engine == "vllm" else _sglang_grid(ctx)
    default, best, cands = _search(ctx, engine, grid, objective, max_regression)
    words, cmds = _apply(engine, best, default, ctx)
    return EngineTune(
        engine=engine, default=default, best=best, candidates=cands, apply=words, apply_commands=cmds,
        calibrated=ctx.timer.calibrated(engine),
        attention_s_per_1k_tokens={"default": per_1k_tokens(ctx, default.stats), "best": per_1k_tokens(ctx, best.stats)},
        changes=step_changes(ctx, best.times, default.times),
    )


@dataclass(frozen=True, slots=True)
class TuneResult:
    ctx: TuneContext
    objective: str
    max_regression: float | None
    engines: Mapping[str, EngineTune]
    skipped: Mapping[str, str]
    backends: tuple[BackendNote, ...] = ()
    heuristics: tuple[Any, ...] = ()  # decodecalc.reports.heuristics.HeuristicScore
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        ctx = self.ctx
        wl = ctx.trace.summary()
        wl["evaluated_shapes"] = len(ctx.shapes.shapes)
        wl["sampled"] = ctx.shapes.sampled
        prof = ctx.profile
        return {
            "workload": wl,
            "model": ctx.work.model.name, "tp": ctx.work.tp, "gpu": ctx.gpu.name,
            "num_heads": ctx.work.num_heads, "num_kv_heads": ctx.work.num_kv_heads, "head_size": ctx.work.head_size,
            "layers": ctx.num_layers, "step_time": "decode attention of one layer on one rank, seconds",
            "objective": self.objective, "max_regression": self.max_regression,
            "profile": {"gpu": prof.gpu, "path": prof.path or "built-in", "calibrated": prof.calibrated},
            "engines": {k: v.to_dict() for k, v in self.engines.items()},
            "skipped": dict(self.skipped),
            "backends": [b.to_dict(self.engines[b.engine].default.stats.total_s, self.engines[b.engine].best.stats.total_s)
                         if b.engine in self.engines else b.to_dict(None) for b in self.backends],
            "heuristics": [h.to_dict() for h in self.heuristics],
            "notes": list(self.notes),
        }


def tune(ctx: TuneContext, *, objective: str = "mean", max_regression: float | None = 0.05,
         engines: Sequence[str] = ENGINES) -> TuneResult:
    out: dict[str, EngineTune] = {}
    skipped: dict[str, str] = {}
    for e in engines:
        try:
            out[e] = tune_engine(ctx, e, objective, max_regression)
        except UnsupportedError as exc:
            skipped[e] = str(exc)
    if not out:
        raise UnsupportedError("; ".join(f"{k}: {v}" for k, v in skipped.items()))

    notes = []
    if ctx.work.model.sliding_window:
        notes.append(f"{ctx.work.model.name} has sliding-window layers; every layer is timed as a global layer, so "
                     "the per-1,000-token figures are an upper bound")
    if ctx.shapes.sampled:
        notes.append(f"{ctx.shapes.distinct:,} distinct step shapes: {len(ctx.shapes.shapes):,} evaluated, each "
                     "standing for its neighbours in (batch, KV tokens) order (raise --max-shapes for all)")
    return TuneResult(ctx=ctx, objective=objective, max_regression=max_regression, engines=out, skipped=skipped,
                      backends=backend_levers(ctx, out), notes=tuple(notes))
