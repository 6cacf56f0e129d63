"""What-if KV-split heuristics scored over a whole decode workload.

Each heuristic gives every step of the workload a launch; the time model times it
(:class:`decodecalc.batch.evaluator.WorkloadTimer`) and the table compares mean and p99 step time with
the engine's default and with the per-step optimum (the bound). The engines' own rules are the
launcher modules' (never restated here); the proposals are modeled from their pull requests, each
with its source; a user rule is a Python file.

User rule (``--rule FILE``): the file defines ``splits(step)`` returning one split count per sequence
of the step (run on SGLang's kernel, which takes the counts as a tensor; the grid's split dimension is
the largest count the rule returns over the workload), and optionally ``segments(step)`` returning one
segment count for the whole launch (run on vLLM's kernel; 1 = the 2D kernel). ``step`` has
``batch``, ``seq_lens`` and ``query_lens`` (in batch order), ``num_sms``, ``num_heads``,
``num_kv_heads``, ``head_size``, ``gpu`` and ``origin`` (where the step came from).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from decodecalc.derived import cdiv, maximum, minimum, next_power_of_2, select
from decodecalc.errors import ConfigError, UnknownNameError
from decodecalc.launchers import sglang_triton as sg
from decodecalc.launchers import vllm_unified as vu
from decodecalc.limits import MAX_FILE_BYTES
from decodecalc.reports.tune_stats import Stats, stats

if TYPE_CHECKING:
    from collections.abc import Mapping

    from decodecalc.batch.arrays import FloatArray
    from decodecalc.batch.steps import Block
    from decodecalc.reports.tune_types import EngineTune, TuneContext


class TuneOutcome(Protocol):
    """What a heuristic reads of tune's result (reports.tune.TuneResult): the workload's context and each engine's
    default and best setting (a protocol, so this module does not import the tune report that imports it)."""

    @property
    def ctx(self) -> TuneContext: ...

    @property
    def engines(self) -> Mapping[str, EngineTune]: ...


#: (context, tune's result) -> per-step seconds
TimesFn = Callable[["TuneContext", TuneOutcome], "FloatArray"]

# PR #27786 (sgl-project/sglang): gate and raised cap, from its description
PR27786_GATE_TOKENS = 24576
PR27786_CAP = 64
# PR #35801 (sgl-project/sglang): one split per 256-token chunk
PR35801_CHUNK_TOKENS = 256
# PR #47520 (vllm-project/vllm): long-context multiplier, threshold cap and long-context cut-off
PR47520_LONGCTX_MULT = 4
PR47520_CAP = 64
PR47520_LONGCTX_TOKENS = 8192


@dataclass(frozen=True, slots=True)
class RuleStep:
    """What a split rule sees of one step."""

    batch: int
    seq_lens: tuple[int, ...]
    query_lens: tuple[int, ...]
    num_sms: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    gpu: str
    origin: str


@dataclass(frozen=True, slots=True)
class HeuristicScore:
    name: str
    engine: str
    kind: str  # engine | tuned | bound | proposal | user
    stats: Stats
    vs_default: float
    vs_bound: float
    source: str
    times: FloatArray | None = None  # per step, seconds (the whole workload's; None for a sample's)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "engine": self.engine, "mean_step_s": self.stats.mean_step_s,
                "p99_step_s": self.stats.p99_step_s, "vs_default": self.vs_default, "vs_bound": self.vs_bound,
                "total_s": self.stats.total_s, "kind": self.kind, "source": self.source}


@dataclass(frozen=True, slots=True)
class Heuristic:
    name: str
    engine: str
    kind: str
    source: str
    times: TimesFn


# ----------------------------------------------------------------------------------------------
# vLLM


def _setting_times(ctx: TuneContext, result: TuneOutcome, engine: str, which: str) -> FloatArray:
    """Per-step times of the engine's default or tuned setting over ``ctx``'s steps (the workload, or its sample)."""
    from decodecalc.reports.tune_space import option_like

    e = result.engines[engine]
    cand = e.default if which == "default" else e.best
    if ctx is result.ctx:
        return cand.times
    return option_like(ctx, engine, cand.setting).times


def _vllm_default(ctx: TuneContext, result: TuneOutcome) -> FloatArray:
    return _setting_times(ctx, result, "vllm", "default")


def bound_vllm_segments(ctx: TuneContext) -> list[int]:
    """The per-step bound's vLLM search space: the 2D kernel and every segment count tune searches."""
    from decodecalc.reports.tune_space import vllm_segment_range

    return [1] + vllm_segment_range(ctx)[0]


def _vllm_bound(ctx: TuneContext, result: TuneOutcome) -> FloatArray:
    from decodecalc.batch.stats import elementwise_min

    return elementwise_min([ctx.timer.vllm_forced(s).time for s in bound_vllm_segments(ctx)])


def pr47520_threshold(num_sms: int, num_kv_heads: int, max_model_len: int) -> int:
    """seq_threshold_3D as vLLM PR #47520 describes it: sized from the SM count instead of a 128-program
    grid, times 4 for long-context deployments (max_model_len >= 8192), capped at 64 and never below the
    stock 128 // num_kv_heads."""
    stock = vu.MIN_LAUNCH_GRID_SIZE_2D // num_kv_heads
    mult = PR47520_LONGCTX_MULT if max_model_len >= PR47520_LONGCTX_TOKENS else 1
    return max(stock, min(PR47520_CAP, num_sms // num_kv_heads * mult))


def _vllm_pr47520(ctx: TuneContext, result: TuneOutcome) -> FloatArray:
    from decodecalc.reports.tune_space import vllm_option

    ctx_len = ctx.work.model.context_length or ctx.max_seq_len
    t = pr47520_threshold(ctx.gpu.num_sms, ctx.work.num_kv_heads, ctx_len)
    segments = ctx.vllm.num_par_softmax_segments or vu.NUM_PAR_SOFTMAX_SEGMENTS
    return vllm_option(ctx, segments, t * ctx.work.num_kv_heads).times


# ----------------------------------------------------------------------------------------------
# SGLang


def _sglang_default(ctx: TuneContext, result: TuneOutcome) -> FloatArray:
    return _setting_times(ctx, result, "sglang", "default")


def bound_sglang_splits(ctx: TuneContext) -> list[int]:
    """The per-step bound's SGLang search space: static split counts over tune's range."""
    from decodecalc.reports.tune_space import sglang_split_range

    return sglang_split_range(ctx)[0]


def _sglang_bound(ctx: TuneContext, result: TuneOutcome) -> FloatArray:
    from decodecalc.batch.stats import elementwise_min

    rows = [ctx.timer.sglang(dataclasses.replace(ctx.sglang, max_kv_splits=s, static_kv_splits=True)).time
            for s in bound_sglang_splits(ctx)]
    return elementwise_min([_setting_times(ctx, result, "sglang", "default")] + rows)


def _base_max(ctx: TuneContext) -> int:
    return ctx.sglang.max_kv_splits or sg.DEFAULT_MAX_KV_SPLITS


def _sglang_pr21775(ctx: TuneContext, result: TuneOutcome) -> FloatArray:
    cap = max(_base_max(ctx), next_power_of_2(ctx.gpu.num_sms // 4))
    return ctx.timer.sglang(dataclasses.replace(ctx.sglang, max_kv_splits=cap, static_kv_splits=False)).time


def pr27786_splits(seq_lens: Sequence[int], *, num_heads: int, num_kv_heads: int, num_sms: int,
                   max_kv_splits: int) -> tuple[int, ...]:
    """Split counts as SGLang PR #27786 describes them: a sequence of >= 24,576 tokens gets the adaptive
    rule with the cap raised to 64; a shorter one keeps its split count under the server's cap."""
    cap = max(max_kv_splits, PR27786_CAP)
    seq = tuple(seq_lens)
    low = sg.get_num_kv_splits(seq, num_head=num_heads, num_kv_head=num_kv_heads, device_core_count=num_sms,
                               max_kv_splits=max_kv_splits)
    high = sg.get_num_kv_splits(seq, num_head=num_heads, num_kv_head=num_kv_heads, device_core_count=num_sms,
                                max_kv_splits=cap)
    return tuple(pr27786_pick(L, lo, h) for L, lo, h in zip(seq, low, high))


def pr27786_pick(seq_len: Any, low: Any, high: Any) -> Any:
    """PR #27786's gate: the raised cap's count from PR27786_GATE_TOKENS on; elementwise on arrays."""
    return select(seq_len >= PR27786_GATE_TOKENS, high, low)


def _sglang_pr27786(ctx: TuneContext, result: TuneOutcome) -> FloatArray:
    from decodecalc.batch.launches import SglangRecipe

    base = _base_max(ctx)
    adaptive = dataclasses.replace(ctx.sglang, static_kv_splits=False)
    low = SglangRecipe(ctx.work, ctx.gpu, dataclasses.replace(adaptive, max_kv_splits=base))
    high = SglangRecipe(ctx.work, ctx.gpu, dataclasses.replace(adaptive, max_kv_splits=max(base, PR27786_CAP)))

    def rule(block: Block) -> Any:
        return pr27786_pick(block.lens, low.splits(block), high.splits(block))
    # buffers sized by the cap
    return ctx.timer.sglang_splits("pr27786", rule, max(base, PR27786_CAP)).time


def pr35801_splits(seq_lens: Sequence[int], *, num_heads: int, num_kv_heads: int, num_sms: int,
                   max_kv_splits: int) -> tuple[int, ...]:
    """Split counts as SGLang PR #35801 describes them: one split per 256-token chunk, bounded by the
    server maximum and by one wave of the SMs over the stage-1 programs of one split."""
    return tuple(pr35801_count(L, len(seq_lens), num_heads=num_heads, num_kv_heads=num_kv_heads, num_sms=num_sms,
                               max_kv_splits=max_kv_splits) for L in seq_lens)


def pr35801_count(seq_len: Any, batch: Any, *, num_heads: int, num_kv_heads: int, num_sms: int,
                  max_kv_splits: int) -> Any:
    """PR #35801's count of one sequence in a batch of ``batch``; elementwise on arrays (one batch per row)."""
    wave_cap = maximum(1, num_sms // sg.token_grid(batch, num_heads, num_kv_heads))
    return maximum(1, minimum(minimum(cdiv(seq_len, PR35801_CHUNK_TOKENS), max_kv_splits), wave_cap))


def _sglang_pr35801(ctx: TuneContext, result: TuneOutcome) -> FloatArray:
    w = ctx.work

    def rule(block: Block) -> Any:
        return pr35801_count(block.lens, block.batch[:, None], num_heads=w.num_heads, num_kv_heads=w.num_kv_heads,
                             num_sms=ctx.gpu.num_sms, max_kv_splits=_base_max(ctx))
    return ctx.timer.sglang_splits("pr35801", rule, _base_max(ctx)).time


def _tuned(engine: str) -> TimesFn:
    return lambda ctx, result: _setting_times(ctx, result, engine, "best")


HEURISTICS: dict[str, Heuristic] = {h.name: h for h in (
    Heuristic("vllm-default", "vllm", "engine", "vLLM 0.33.0 triton_attn.py L58-59, L136-149: 16 segments, "
              "3D up to 128 // h_kv sequences snapped to a capture size (launchers/vllm_unified.py)", _vllm_default),
    Heuristic("vllm-tuned", "vllm", "tuned", "the best global setting tune found for this workload", _tuned("vllm")),
    Heuristic("vllm-pr47520", "vllm", "proposal",
              "vllm-project/vllm PR #47520 (open; fixes issue #48076): seq_threshold_3D from the SM count, x4 when "
              "max_model_len >= 8192, capped at 64, never below the stock value; modeled from the PR description "
              "(the diff was not available), CUDA-graph snapping kept", _vllm_pr47520),
    Heuristic("vllm-bound", "vllm", "bound", "per-step optimum under the time model: per step the fastest of 2D, "
              "3D with every segment count tune searches, the default, the tuned setting and every heuristic above", _vllm_bound),
    Heuristic("sglang-default", "sglang", "engine", "SGLang 0.5.23 get_num_kv_splits_triton, max 8 "
              "(launchers/sglang_triton.py)", _sglang_default),
    Heuristic("sglang-tuned", "sglang", "tuned", "the best global setting tune found for this workload",
              _tuned("sglang")),
    Heuristic("sglang-pr21775", "sglang", "proposal",
              "sgl-project/sglang PR #21775 (closed): max_kv_splits = max(max_kv_splits, next_power_of_2(SM // 4)) "
              "with the adaptive rule, as quoted in the PR description; its stage-2 rewrite is not modeled",
              _sglang_pr21775),
    Heuristic("sglang-pr27786", "sglang", "proposal",
              "sgl-project/sglang PR #27786 (closed): sequences of >= 24,576 tokens get the adaptive rule with a cap "
              "of 64, shorter ones keep the default; modeled from the PR description", _sglang_pr27786),
    Heuristic("sglang-pr35801", "sglang", "proposal",
              "sgl-project/sglang PR #35801 (open; for issue #2271): one split per 256-token chunk, capped by "
              "max_kv_splits and by one wave of SMs over the stage-1 programs; modeled from the PR description "
              "(the exact formula was not available)", _sglang_pr35801),
    Heuristic("sglang-bound", "sglang", "bound", "per-step optimum under the time model: per step the fastest of "
              "every static split count tune searches, the default, the tuned setting and every heuristic above", _sglang_bound),
)}


# ----------------------------------------------------------------------------------------------
# user rule


#: the largest --rule file read (a rule is a few lines; the whole file is compiled in memory)
MAX_RULE_BYTES = MAX_FILE_BYTES


def _described(exc: BaseException) -> str:
    """``Name: message`` of an exception the user's code raised, whatever its ``__str__`` does."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a __str__ that raises (or an integer too long to print)
        text = "(its message cannot be printed)"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _shown(value: Any) -> str:
    """``repr(value)`` of a value the user's code returned, cut to 80 characters; never raises."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a __repr__ that raises, an integer over Python's 4,300 printed digits
        text = "an integer of over 4,300 digits" if isinstance(value, int) else f"a {type(value).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."


def load_rule(path: Path) -> tuple[Callable[..., Any] | None, Callable[..., Any] | None]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--rule {path}: no such file")
    size = path.stat().st_size
    if size > MAX_RULE_BYTES:
        raise ConfigError(f"--rule {path}: {size:,} bytes, over the supported {MAX_RULE_BYTES:,} for a rule file")
    spec = importlib.util.spec_from_file_location(f"decodecalc_user_rule_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"--rule {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:  # Ctrl-C while the rule loads: the CLI's interrupted exit (130)
        raise
    except BaseException as exc:  # noqa: BLE001 - the user's code: any failure (sys.exit, GeneratorExit too) is a bad input
        line = getattr(exc, "lineno", None)
        raise ConfigError(f"--rule {path}{f', line {line}' if isinstance(line, int) else ''}: cannot load it: "
                          f"{_described(exc)}") from None
    splits, segments = getattr(module, "splits", None), getattr(module, "segments", None)
    if not callable(splits) and not callable(segments):
        raise ConfigError(f"--rule {path}: define splits(step) (per-sequence split counts) and/or segments(step)")
    return (splits if callable(splits) else None), (segments if callable(segments) else None)


def _rule_step(ctx: TuneContext, i: int) -> RuleStep:
    seq, q = ctx.steps.step_lens(i)
    w = ctx.work
    return RuleStep(batch=len(seq), seq_lens=seq, query_lens=q, num_sms=ctx.gpu.num_sms, num_heads=w.num_heads,
                    num_kv_heads=w.num_kv_heads, head_size=w.head_size, gpu=ctx.gpu.name, origin=ctx.steps.origin(i))


def _call(fn: Callable[..., Any], step: RuleStep, path: Path, what: str) -> Any:
    try:
        return fn(step)
    except KeyboardInterrupt:  # Ctrl-C during the rule: the CLI's interrupted exit (130)
        raise
    except BaseException as exc:  # noqa: BLE001 - the user's code (a sys.exit there must not end decodecalc quietly)
        raise ConfigError(f"--rule {path}: {what}(step) raised {_described(exc)} on the step at "
                          f"{step.origin} (batch {step.batch}, KV lengths {step.seq_lens[-1]}..{step.seq_lens[0]})") \
            from None


#: the most splits or segments a rule may ask for: stage 1's grid z, CUDA's gridDim.z limit (its one home is
#: launchers/sglang_triton.py; vLLM's 3D grid puts the segments on z as well)
MAX_RULE_COUNT = sg.MAX_KV_SPLITS_GRID_Z


def _check_count(v: Any, step: RuleStep, path: Path, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_RULE_COUNT:
        raise ConfigError(f"--rule {path}: {what}(step) returned {_shown(v)} for the step at {step.origin}; expected "
                          f"integers from 1 to {MAX_RULE_COUNT:,} (a kernel's grid z)")
    return v


def user_heuristics(path: Path) -> list[Heuristic]:
    """The ``--rule`` file's rules: ``splits(step)`` on SGLang's kernel, ``segments(step)`` on vLLM's, each called
    once per step (the user's Python), the launches then timed over the workload like every other rule."""
    splits_fn, segments_fn = load_rule(path)
    out = []
    if splits_fn is not None:
        def sglang_times(ctx: TuneContext, result: TuneOutcome) -> FloatArray:
            from array import array

            flat = array("q")
            for i in range(ctx.steps.num_steps):
                step = _rule_step(ctx, i)
                got = _call(splits_fn, step, path, "splits")
                if not isinstance(got, (list, tuple)) or len(got) != step.batch:
                    n = len(got) if isinstance(got, (list, tuple)) else "not a list:"
                    raise ConfigError(f"--rule {path}: splits(step) returned {n} {'' if n == 'not a list:' else 'values '}"
                                      f"{'' if isinstance(got, (list, tuple)) else _shown(got) + ' '}for the step at "
                                      f"{step.origin}, which has {step.batch} sequences; return one split count per "
                                      "sequence")
                flat.extend(_check_count(v, step, path, "splits") for v in got)
            from decodecalc.batch.launches import as_int_array

            splits = as_int_array(flat)
            return ctx.timer.sglang_splits(f"user {path}", splits, int(splits.max())).time
        out.append(Heuristic("user-splits", "sglang", "user", f"user rule {path}: splits(step) on SGLang's kernel",
                             sglang_times))
    if segments_fn is not None:
        def vllm_times(ctx: TuneContext, result: TuneOutcome) -> FloatArray:
            per = [_check_count(_call(segments_fn, step, path, "segments"), step, path, "segments")
                   for step in (_rule_step(ctx, i) for i in range(ctx.steps.num_steps))]
            from decodecalc.batch.stats import pick_per_step

            return pick_per_step(per, {s: ctx.timer.vllm_forced(s).time for s in set(per)})
        out.append(Heuristic("user-segments", "vllm", "user", f"user rule {path}: segments(step) on vLLM's kernel",
                             vllm_times))
    return out


# ----------------------------------------------------------------------------------------------


def select_heuristics(names: str | None, rule: Path | None) -> list[Heuristic]:
    """``--heuristics a,b`` (default all built-in ones, 'none' for none) plus the ``--rule`` file's."""
    if names is None:
        chosen = list(HEURISTICS.values())
    elif names.strip().lower() == "none":
        chosen = []
    else:
        chosen = []
        from decodecalc.limits import split_items

        for n in (x.lower() for x in split_items(names, "--heuristics", f"{next(iter(HEURISTICS))} or none")):
            if n not in HEURISTICS:
                raise UnknownNameError("heuristic", n, HEURISTICS)
            chosen.append(HEURISTICS[n])
    if rule is not None:
        chosen += user_heuristics(rule)
    return chosen


def score_heuristics(ctx: TuneContext, result: TuneOutcome, chosen: Sequence[Heuristic]) -> tuple[HeuristicScore, ...]:
    """Score ``chosen`` over the workload (a large one's sample: ``ctx.sample``). The bound of an engine is the
    per-step minimum over its search space (bound_*), its default, its tuned setting and every heuristic scored
    here, so no heuristic in the table beats it."""
    from decodecalc.batch.stats import elementwise_min

    pop = ctx.sample or ctx
    chosen = [h for h in chosen if h.engine in result.engines]
    times = {h.name: h.times(pop, result) for h in chosen if h.kind != "bound"}
    defaults = {e: _setting_times(pop, result, e, "default") for e in {h.engine for h in chosen}}
    bounds: dict[str, FloatArray] = {}
    for engine in {h.engine for h in chosen}:
        rows = [HEURISTICS[f"{engine}-bound"].times(pop, result), defaults[engine],
                _setting_times(pop, result, engine, "best")] + [times[h.name] for h in chosen
                                                                if h.engine == engine and h.name in times]
        bounds[engine] = elementwise_min(rows)
    out = []
    w = pop.weights
    for h in chosen:
        t = bounds[h.engine] if h.kind == "bound" else times[h.name]
        st = stats(t, w)
        default = stats(defaults[h.engine], w)
        bound = stats(bounds[h.engine], w)
        out.append(HeuristicScore(name=h.name, engine=h.engine, kind=h.kind, stats=st,
                                  vs_default=st.mean_step_s / default.mean_step_s - 1.0,
                                  vs_bound=st.mean_step_s / bound.mean_step_s - 1.0, source=h.source,
                                  times=t if pop is ctx else None))
    return tuple(out)
