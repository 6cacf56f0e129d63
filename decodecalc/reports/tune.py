"""``decodecalc tune``: the best global engine setting for a whole decode workload, from the time model.

For each engine, every candidate setting of its whole legal range (:mod:`decodecalc.reports.tune_space`) is applied
to every step of the workload: the launcher module decides what the step launches under that setting (vLLM:
launchers/vllm_unified.py with the segment count and MIN_LAUNCH_GRID_SIZE_2D as settings, threshold snapping and
CUDA-graph padding as the engine does them; SGLang: launchers/sglang_triton.py with max_kv_splits and the static
switch) and the time model times it, on arrays of steps (:mod:`decodecalc.batch`: exact where the model has a closed
form, else estimated from exactly timed steps to a stated error). The best setting minimises the mean (or p99) step
time among those that slow no step by more than ``max_regression`` relative to the engine's default (the steps that
decide that are timed exactly), ranked as ``recommend`` ranks: by the predicted time averaged over the profile's
occupancy and one program per SM either side (``timemodel.robust_time_s``). Step times are one attention layer's
decode-attention time on one rank; the per-1,000-token figure covers every layer.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from decodecalc.errors import ChoiceError, ConfigError, UnsupportedError
from decodecalc.launchers.sglang_triton import SglangSettings
from decodecalc.launchers.vllm_unified import VllmSettings, check_supported
from decodecalc.reports.tune_backends import BackendNote, backend_levers
from decodecalc.reports.tune_stats import Stats, stats
from decodecalc.reports.tune_space import (
    Option,
    option_like,
    sglang_options,
    sglang_setting,
    too_big,
    vllm_options,
    vllm_setting,
)
from decodecalc.specs.gpus import GPUSpec
from decodecalc.timemodel import TimeProfile
from decodecalc.traffic import StepTrace
from decodecalc.workload import Workload

ENGINES = ("vllm", "sglang")
OBJECTIVES = ("mean", "p99")
CHANGE_FRACTION = 0.01  # a step "gains" or "loses" when its time moves by more than this
BATCH_BUCKETS = ((1, 1), (2, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 128), (129, 256), (257, 1 << 30))
#: a workload of more steps than this ranks every candidate on a sample of SAMPLE_STEPS steps first (quick estimates),
#: then measures the default and the best few (MAX_FULL_CONTENDERS - 1 at first, more while one the sample ranked
#: higher than the pick is left, up to MAX_MEASURED) on MEASURE_STEPS steps: every step of a workload up to that size,
#: else a stratified sample whose totals are regression estimates over every step (decodecalc.batch.population)
SAMPLE_ABOVE = 6_000
SAMPLE_STEPS = 1_024
MEASURE_STEPS = 16_384
MAX_FULL_CONTENDERS = 3
MAX_MEASURED = 8
#: steps whose ratio to the default is checked exactly for the guard (the largest estimated ratios)
GUARD_STEPS = 16
#: a candidate whose estimated worst step lies this close to the guard gets its worst steps checked exactly
GUARD_MARGIN = 0.05
#: rounds of exact checks of the worst steps of a candidate the guard rules out on estimates though it ranks above
#: the pick (each times its GUARD_STEPS worst steps)
GUARD_ROUNDS = 4
__all__ = ["ENGINES", "OBJECTIVES", "Candidate", "EngineTune", "Stats", "TuneContext", "TuneResult", "make_context",
           "parse_regression", "per_1k_tokens", "sglang_setting", "tune", "tune_engine", "vllm_setting"]


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
    times: Any  # per step, one layer, seconds (numpy array)
    stats: Stats
    worst_ratio: float = 1.0  # max over steps of time / default time
    allowed: bool = True
    score: Stats | None = None  # the same statistics of the ranking score
    steps_2d: int | None = None  # vLLM: steps (weighted) whose launch runs the 2D kernel (no KV split)
    scratch_bytes: int = 0  # split-K scratch the setting allocates
    rel_se: float = 0.0  # estimated standard error of total_s, relative (0: every step timed exactly)
    worst_exact: bool = True  # the worst step's ratio is the scalar model's, not an estimate
    sampled: bool = False  # timed on the workload's sample only (not a contender for the pick)

    def to_dict(self) -> dict[str, Any]:
        d = {"setting": dict(self.setting), "label": self.label, **self.stats.to_dict(),
             "worst_step_vs_default": self.worst_ratio, "within_guard": self.allowed,
             "scratch_bytes": self.scratch_bytes, "total_rel_se": self.rel_se, "sampled": self.sampled}
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
    range_note: str = ""  # why the searched range ends where it does
    edge_note: str = ""  # the best sits on the edge of the range (and why the range ends there)
    left_out: tuple[str, ...] = ()  # candidates whose scratch the GPU cannot hold

    def to_dict(self) -> dict[str, Any]:
        short = ("setting", "mean_step_s", "p99_step_s", "total_s", "scratch_bytes")

        def pick(c: Candidate) -> dict[str, Any]:
            return {k: v for k, v in c.to_dict().items() if k in short} | {"label": c.label}

        return {"default": pick(self.default), "best": pick(self.best),
                "candidates": [c.to_dict() for c in self.candidates], "apply": list(self.apply),
                "apply_commands": list(self.apply_commands),
                "calibrated": self.calibrated, "attention_s_per_1k_tokens": dict(self.attention_s_per_1k_tokens),
                "saving_vs_default": 1.0 - self.best.stats.total_s / self.default.stats.total_s,
                "steps": self.changes, "range": self.range_note, "edge_of_range": self.edge_note or None,
                "left_out": list(self.left_out)}


@dataclass(frozen=True, slots=True, kw_only=True)
class TuneContext:
    """Everything the search and the heuristics share: the workload's steps as arrays, the timer."""

    steps: Any  # decodecalc.batch.steps.StepArrays
    summary: dict[str, Any]  # the JSON's workload block
    work: Workload  # base per-rank shape (model, heads, dtypes); lengths come from the steps
    gpu: GPUSpec
    profile: TimeProfile
    vllm: VllmSettings
    sglang: SglangSettings
    timer: Any  # decodecalc.batch.evaluator.WorkloadTimer
    query_keys: Any  # decodecalc.batch.stats.QueryKeys
    max_seq_len: int
    memo: dict = field(default_factory=dict)  # per-workload results shared by candidates (vLLM's gate per threshold)
    sample: TuneContext | None = None  # a large workload's sample (every candidate is ranked on it first)
    population: Any = None  # decodecalc.batch.population.Population when ``steps`` sample a larger workload

    @property
    def num_layers(self) -> int:
        return self.work.model.num_layers

    def stats(self, times: Any) -> Stats:
        """The statistics of per-step ``times`` (memoized per array: the search asks again for the same times)."""
        memo = self.memo.setdefault("stats", {})
        got = memo.get(id(times))
        if got is None or got[0] is not times:
            got = memo[id(times)] = (times, stats(times, self.weights, self.population))
        return got[1]

    def sampling_rel_se(self, times: Any) -> float:
        """The relative standard error a sample of the workload adds to a total (0 when every step is here)."""
        return self.population.total(times)[1] if self.population is not None else 0.0

    @staticmethod
    def refreshed(opt: Option) -> Option:
        return opt.refreshed()

    @property
    def weights(self) -> Any:
        return self.steps.weights

    @property
    def generated_tokens(self) -> int:
        if self.population is not None:
            return self.population.tokens
        return int((self.steps.tokens * self.steps.weights).sum())


def make_context(trace: StepTrace | Any, work: Workload, gpu: GPUSpec, profile: TimeProfile, *,
                 vllm: VllmSettings | None = None, sglang: SglangSettings | None = None,
                 max_anchors: int | None = None, target_rel_se: float | None = None,
                 progress: Callable[[str], None] | None = None) -> TuneContext:
    """The context of a workload (a StepTrace, or StepArrays as the file readers make them). ``max_anchors``: steps
    a recipe may time exactly (None: the default; 0: every step, exact); ``target_rel_se``: the error the estimate
    stops at."""
    from decodecalc.batch.estimate import TARGET_REL_SE
    from decodecalc.batch.evaluator import DEFAULT_MAX_ANCHORS, WorkloadTimer
    from decodecalc.batch.population import Population
    from decodecalc.batch.runs import RunSteps
    from decodecalc.batch.stats import query_keys
    from decodecalc.batch.steps import StepArrays, from_trace
    from decodecalc.batch.summary import workload_summary

    vllm = vllm or VllmSettings()
    sglang = sglang or SglangSettings()
    anchors = DEFAULT_MAX_ANCHORS if max_anchors is None else (None if max_anchors == 0 else max_anchors)
    target = TARGET_REL_SE if target_rel_se is None else target_rel_se
    # a request trace's runs are expanded only where every step is timed (a large one is sampled from its runs)
    lazy = isinstance(trace, RunSteps) and anchors is not None and trace.num_steps > MEASURE_STEPS
    steps = trace if lazy or isinstance(trace, StepArrays) else (
        trace.expand() if isinstance(trace, RunSteps) else from_trace(trace))
    batch = steps.batch
    over = batch > vllm.max_num_seqs
    if over.any():
        i = int(over.argmax())
        where = f"{steps.source}, step {i + 1}" if lazy else steps.origin(i)
        raise ConfigError(f"{where}, field 'seq_lens': {int(batch[i])} sequences in one step, more than "
                          f"max_num_seqs {vllm.max_num_seqs} (raise --max-num-seqs or split the step)")

    def context(st: StepArrays, summary: dict[str, Any], sample: TuneContext | None = None, index: Any = None,
                population: Population | None = None) -> TuneContext:
        # the measuring pass of a sampled workload times the prediction only (the sample ranked by the score) and
        # starts from the steps the sample timed exactly
        timer = WorkloadTimer(st, work, gpu, profile, max_anchors=anchors, progress=progress, target_rel_se=target,
                              points=1 if sample is not None else 3,
                              sample_of=(sample.timer, index) if sample is not None else None)
        return TuneContext(steps=st, summary=summary, work=work, gpu=gpu, profile=profile, vllm=vllm, sglang=sglang,
                           timer=timer, query_keys=query_keys(st.offsets, st.query_lens),
                           max_seq_len=max_seq_len, sample=sample, population=population)

    summary = steps.summary() if lazy else workload_summary(steps)
    max_seq_len = steps.max_seq_len if lazy else int(steps.seq_lens.max())
    if anchors is None or steps.num_steps <= SAMPLE_ABOVE:
        return context(steps, summary)
    measured, population = steps, None
    if steps.num_steps > MEASURE_STEPS:
        measured, m_index = steps.sample(MEASURE_STEPS)
        population = Population.of(steps, m_index, measured)
    ranking, r_index = measured.sample(SAMPLE_STEPS)
    return context(measured, summary, context(ranking, summary), index=r_index, population=population)


def objective_value(st: Stats, objective: str) -> float:
    return st.p99_step_s if objective == "p99" else st.mean_step_s


def _candidate(ctx: TuneContext, engine: str, opt: Option, default: Option | None,
               max_regression: float | None) -> Candidate:
    from decodecalc.batch.stats import worst_ratio

    worst, exact_worst = 1.0, True
    if default is not None:
        worst, i = worst_ratio(opt.times, default.times)
        exact_worst = bool(opt.exact[i] and default.exact[i])
    allowed = max_regression is None or worst <= 1.0 + max_regression + 1e-12
    rel_se = float(math.hypot(ctx.timer.rel_se_of(opt.recipes, opt.uses, opt.times), ctx.sampling_rel_se(opt.times)))
    st = ctx.stats(opt.times)
    r = ctx.memo.get("score_ratio", {}).get(opt.label)  # a measuring pass without the score's points: the sample's
    score = ctx.stats(opt.score) if r is None else Stats(st.mean_step_s * r[0], st.p99_step_s * r[1],
                                                          st.total_s * r[0])
    return Candidate(engine=engine, setting=opt.setting, label=opt.label, times=opt.times, stats=st,
                     worst_ratio=worst, allowed=allowed, score=score, steps_2d=opt.steps_2d,
                     scratch_bytes=opt.scratch_bytes, rel_se=rel_se, worst_exact=exact_worst)


def _guard_checked(ctx: TuneContext, opt: Option, default: Option, max_regression: float | None,
                   force: bool = False) -> tuple[Option, Option]:
    """Where the guard may turn on an estimate (the worst estimated step ratio lies near it) or ``force``: the steps
    with the largest ratios are timed exactly (both settings) and the options rebuilt from the refined estimates."""
    from decodecalc.batch.stats import top_ratio_steps, worst_ratio

    if not opt.recipes or opt.recipes == ("own",):
        return opt, default
    worst, i = worst_ratio(opt.times, default.times)
    near = max_regression is not None and abs(worst - 1.0 - max_regression) <= GUARD_MARGIN
    if not (near or force) or (opt.exact[i] and default.exact[i]):
        return opt, default
    idx = top_ratio_steps(opt.times, default.times, GUARD_STEPS)
    ctx.timer.refine_many(opt.recipes + default.recipes, idx)
    return ctx.refreshed(opt), ctx.refreshed(default)


def _search(ctx: TuneContext, engine: str, options: Sequence[Option], objective: str,
            max_regression: float | None) -> tuple[Candidate, Candidate, tuple[Candidate, ...]]:
    d_opt = options[0]
    checked = []
    for o in options[1:]:
        o, d_opt = _guard_checked(ctx, o, d_opt, max_regression)
        checked.append(o)
    for _ in range(GUARD_ROUNDS):
        default, best, cands = _best(ctx, engine, d_opt, checked, objective, max_regression)
        # a candidate ruled out by an estimated step but better than the pick: its worst steps are timed exactly, so
        # that only the model (not the estimate) rules it out
        top = objective_value(best.score or best.stats, objective)
        doubtful = [j for j, c in enumerate(cands[1:]) if not c.allowed and not c.worst_exact
                    and objective_value(c.score or c.stats, objective) < top]
        if not doubtful:
            break
        for j in doubtful:
            checked[j], d_opt = _guard_checked(ctx, checked[j], d_opt, max_regression, force=True)
        checked = [o.refreshed() for o in checked]
    return default, best, cands


def _best(ctx: TuneContext, engine: str, d_opt: Option, others: Sequence[Option], objective: str,
          max_regression: float | None) -> tuple[Candidate, Candidate, tuple[Candidate, ...]]:
    default = _candidate(ctx, engine, d_opt, d_opt, max_regression)
    cands = [default] + [_candidate(ctx, engine, o, d_opt, max_regression) for o in others]
    # a setting is only worth changing to where the nominal prediction agrees that it saves time
    ok = [c for c in cands if c.allowed and (c is default or objective_value(c.stats, objective)
                                             < objective_value(default.stats, objective))]
    # ranked by the robust score, as recommend ranks (occupancy, the least certain input, +-1); exact ties (the
    # same launches, e.g. every threshold above the largest batch) go to the default, then to the smallest knob
    # values (less split-K scratch)
    best = min(ok, key=lambda c: (objective_value(c.score or c.stats, objective), c.stats.total_s, c is not default,
                                  tuple(int(v) for v in c.setting.values())))
    return default, best, tuple(cands)


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
    launch = _sglang_launch_line(ctx, m)
    if static:
        return ((f"launch the server (python -m sglang.launch_server) with --triton-attention-num-kv-splits {m} and "
                 f"the environment variable SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS=1 (every sequence then gets "
                 f"{m} split{'s' * (m > 1)})",),
                ("export SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS=1", *launch))
    return ((f"launch the server (python -m sglang.launch_server) with --triton-attention-num-kv-splits {m} (the "
             "maximum of the adaptive rule; leave SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS unset)",),
            ("unset SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS", *launch))


def _sglang_launch_line(ctx: TuneContext, max_kv_splits: int) -> tuple[str, str]:
    """SGLang's launch command with the tuned flag, as two shell lines (a continuation) under 80 columns: the
    model's Hugging Face id where the library knows it, else a placeholder to fill in."""
    model = ctx.work.model.hf_id or "MODEL_PATH"
    return (f"python -m sglang.launch_server --model-path {model} \\",
            f"  --tp {ctx.work.tp} --attention-backend triton --triton-attention-num-kv-splits {max_kv_splits}")


def step_changes(ctx: TuneContext, new: Any, old: Any) -> dict[str, Any]:
    """Which steps gain and which lose: weighted counts, the batch-size buckets, the extreme steps."""
    from decodecalc.batch.stats import changes

    steps = ctx.steps
    ch = changes(new, old, steps.weights, steps.batch, threshold=CHANGE_FRACTION, buckets=BATCH_BUCKETS)

    def describe(i: int, r: float) -> dict[str, Any]:
        seq, _ = steps.step_lens(i)
        return {"ratio": r, "batch": len(seq), "max_seq_len": max(seq), "min_seq_len": min(seq),
                "example": steps.origin(i)}

    return {"gain": ch["gain"], "lose": ch["lose"], "same": ch["same"], "threshold": CHANGE_FRACTION,
            "by_batch": ch["by_batch"], "biggest_gain": describe(ch["best_step"], ch["best_ratio"]),
            "biggest_loss": describe(ch["worst_step"], ch["worst_ratio"])}


def per_1k_tokens(ctx: TuneContext, st: Stats) -> float:
    """Decode-attention time over all layers per 1,000 generated tokens (a speculative step generates its
    accepted tokens plus one per sequence: DecodeStep.generated_tokens)."""
    return st.total_s * ctx.num_layers / ctx.generated_tokens * 1000.0


def _options(ctx: TuneContext, engine: str) -> tuple[list[Option], str]:
    _options_checked(ctx, engine)
    return vllm_options(ctx) if engine == "vllm" else sglang_options(ctx)


def _default_option(ctx: TuneContext, engine: str) -> Option:
    from decodecalc.reports.tune_space import default_setting

    _options_checked(ctx, engine)
    return option_like(ctx, engine, default_setting(ctx, engine))


def _options_checked(ctx: TuneContext, engine: str) -> None:
    """The engine's own refusals of the workload (vLLM's startup checks, SGLang's extend kernel for multi-token
    steps), raised before any option is built."""
    if engine == "vllm":
        check_supported(ctx.work, ctx.vllm)
    elif bool((ctx.steps.query_lens > 1).any()):
        raise UnsupportedError("query lengths > 1: SGLang runs prefill, mixed and speculative-verify batches through "
                               "extend_attention, which does not split the KV (triton_backend.py L1059, L1127)")


def _edge_note(engine: str, best: Candidate, options: Sequence[Option], why: str) -> str:
    knob = "NUM_PAR_SOFTMAX_SEGMENTS" if engine == "vllm" else "triton_attention_num_kv_splits"
    top = max(int(o.setting[knob]) for o in options)
    if int(best.setting[knob]) < top:
        return ""
    return f"the best {knob} ({top}) is the largest searched: {why}"


#: the best candidates by the objective whose estimated guard failures are checked exactly (the tables show five)
SHOWN_CHECKED = 8
#: a candidate is a contender (tightened to the target error) when its ranking score is within this fraction of
#: the best's, or within four of its own standard errors
CONTENDER_FRACTION = 0.02
#: a candidate whose first quick estimate lies within this fraction of the best's gets a closer one (the first has a
#: few exactly timed steps: a few per cent)
NEAR_FRACTION = 0.15
#: contenders are first estimated to this many times the target error (a sixteenth of the exactly timed steps)
FIRST_CUT = 4.0


def leading_candidates(cands: Sequence[Candidate], objective: str, n: int) -> list[Candidate]:
    """The ``n`` best candidates by the objective, settings that launch the same (equal statistics) once: the rows a
    table shows."""
    rows: list[Candidate] = []
    seen: set[tuple[float, float, float]] = set()
    for c in sorted(cands, key=lambda c: (objective_value(c.stats, objective), c.stats.total_s)):
        key = (c.stats.mean_step_s, c.stats.p99_step_s, c.stats.total_s)
        if key not in seen and len(rows) < n:
            seen.add(key)
            rows.append(c)
    return rows


def _contenders(cands: Sequence[Candidate], best: Candidate, objective: str) -> list[str]:
    """Labels of the candidates that could still be the pick once their totals are tight: the default, then every
    allowed one whose ranking score lies near the best's (their quick estimates' errors taken into account), best
    first."""
    top = objective_value(best.score or best.stats, objective)
    near = []
    for c in cands[1:]:
        margin = max(CONTENDER_FRACTION, 4 * c.rel_se)
        value = objective_value(c.score or c.stats, objective)
        if c.allowed and value <= top * (1 + margin):
            near.append((value, c.label))
    return [cands[0].label] + [label for _, label in sorted(near)]


def _evaluate(ctx: TuneContext, engine: str, options: list[Option], objective: str,
              max_regression: float | None, tighten: bool = True
              ) -> tuple[Candidate, Candidate, tuple[Candidate, ...], list[Option]]:
    """The candidates of ``options`` over ``ctx``'s steps: quick estimates first, then (``tighten``) the totals that
    decide the pick made tight (the default and every candidate that could be the best, again while the pick is one
    that was not), the pick's worst step timed exactly."""
    default, best, cands = _search(ctx, engine, options, objective, max_regression)
    if not ctx.timer.exact:  # the quick estimates near the best get more steps timed before anything is decided
        top = objective_value(best.score or best.stats, objective) * (1 + NEAR_FRACTION)
        near = {c.label for c in cands if objective_value(c.score or c.stats, objective) <= top} | {default.label}
        ctx.timer.improve([k for o in options if o.label in near for k in o.recipes if k != "own"])
        options = [o.refreshed() for o in options]
        default, best, cands = _search(ctx, engine, options, objective, max_regression)
    if tighten and not ctx.timer.exact:
        # the default first: every candidate's guard is a per-step ratio to it, so a loose default lets a candidate
        # that slows some steps pass the guard until it is tightened (for nothing)
        keep: set[str] = {default.label}
        ctx.timer.tighten([k for k in options[0].recipes if k != "own"])
        options = [o.refreshed() for o in options]
        default, best, cands = _search(ctx, engine, options, objective, max_regression)
        # a first cut at FIRST_CUT times the target error: the contenders it leaves far behind need no more
        ctx.timer.tighten([k for o in options if o.label in set(_contenders(cands, best, objective))
                           for k in o.recipes if k != "own"], looser=FIRST_CUT)
        options = [o.refreshed() for o in options]
        default, best, cands = _search(ctx, engine, options, objective, max_regression)
        for _ in range(4):
            more = set(_contenders(cands, best, objective)) - keep
            if not more and best.label in keep:
                break
            keep |= more | {best.label}
            ctx.timer.tighten([k for o in options if o.label in keep for k in o.recipes if k != "own"])
            options = [o.refreshed() for o in options]
            default, best, cands = _search(ctx, engine, options, objective, max_regression)
    if tighten and best is not default and not best.worst_exact:  # what the table shows of the pick is the model's
        opt = next(o for o in options if o.label == best.label)
        opt, d_opt = _guard_checked(ctx, opt, options[0], max_regression, force=True)
        best = _candidate(ctx, engine, opt, d_opt, max_regression)
        cands = tuple(best if c.label == best.label else c for c in cands)
    # the rows a table shows carry no estimated guard failure: an "over" there is the model's, not the estimate's
    doubtful = {c.label for c in leading_candidates(cands[1:], objective, SHOWN_CHECKED) if not c.allowed and not c.worst_exact}
    if doubtful:
        d_opt = options[0]
        checked = []
        for o in options[1:]:
            if o.label in doubtful:
                o, d_opt = _guard_checked(ctx, o, d_opt, max_regression, force=True)
            checked.append(o)
        options = [d_opt.refreshed()] + [o.refreshed() for o in checked]
        default, best, cands = _search(ctx, engine, options, objective, max_regression)
    return default, best, cands, options


def _measure(ctx: TuneContext, engine: str, options: list[Option], cands: Sequence[Candidate], objective: str,
             max_regression: float | None) -> tuple[Candidate, Candidate, tuple[Candidate, ...]]:
    """A sampled workload's second pass: the default and the candidates the sample ranks best (allowed there) measured
    on ``ctx``'s steps; while a candidate the sample ranked above the pick was left out (the guard, now checked on
    more steps, may have ruled out the ones measured), it is measured too. The rest keep the sample's figures."""
    ranked = [c for c in sorted(cands[1:], key=lambda c: objective_value(c.score or c.stats, objective)) if c.allowed]
    chosen = [cands[0].label] + [c.label for c in ranked[:MAX_FULL_CONTENDERS - 1]]
    while True:
        measured = [option_like(ctx, engine, o.setting) for o in options if o.label in chosen]
        default, best, got, _ = _evaluate(ctx, engine, measured, objective, max_regression)
        top = objective_value(best.score or best.stats, objective)
        left = [c.label for c in ranked if c.label not in chosen
                and objective_value(c.score or c.stats, objective) < top * (1 + CONTENDER_FRACTION)]
        if not left or len(chosen) >= MAX_MEASURED:
            break
        chosen += left[:2]
    by_label = {c.label: c for c in got}
    merged = tuple(by_label.get(c.label) or dataclasses.replace(c, sampled=True) for c in cands)
    return default, best, merged


def tune_engine(ctx: TuneContext, engine: str, objective: str = "mean", max_regression: float | None = 0.05,
                only: Sequence[Mapping[str, Any]] | None = None) -> EngineTune:
    """The engine's best setting over its whole range (``only``: among these settings, the default always included).
    On a large workload every candidate is first timed on a sample of its steps (``ctx.sample``); the default and
    the candidates that could be the best are then timed on every step, and the others keep their sample's figures
    (``sampled`` in the JSON)."""
    if objective not in OBJECTIVES:
        raise ChoiceError(f"--objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    if engine not in ENGINES:
        raise ChoiceError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    small = ctx.sample or ctx
    if only is None:
        options, why = _options(small, engine)
    else:
        default = _default_option(small, engine)
        options = [default] + [option_like(small, engine, x) for x in map(dict, only) if x != default.setting]
        why = "the settings given"
    dropped = too_big(options[1:], ctx.gpu.memory_bytes)
    options = [o for o in options if o not in dropped]
    default, best, cands, options = _evaluate(small, engine, options, objective, max_regression,
                                              tighten=ctx.sample is None)
    if ctx.sample is not None:
        ratios = ctx.memo.setdefault("score_ratio", {})
        for c in cands:  # the ranking score over the value, as the sample has it (the second pass times no neighbours)
            ratios[c.label] = (c.score.mean_step_s / c.stats.mean_step_s, c.score.p99_step_s / c.stats.p99_step_s)
        default, best, cands = _measure(ctx, engine, options, cands, objective, max_regression)
    words, cmds = _apply(engine, best, default, ctx)
    return EngineTune(
        engine=engine, default=default, best=best, candidates=cands, apply=words, apply_commands=cmds,
        calibrated=ctx.timer.calibrated(engine),
        attention_s_per_1k_tokens={"default": per_1k_tokens(ctx, default.stats), "best": per_1k_tokens(ctx, best.stats)},
        changes=step_changes(ctx, best.times, default.times), range_note=why,
        edge_note=_edge_note(engine, best, options, why),
        left_out=tuple(f"{o.label} ({o.scratch_bytes / 1e9:,.1f} GB)" for o in dropped),
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
        wl = dict(ctx.summary)
        wl["evaluated_shapes"] = wl["distinct_shapes"]
        wl["sampled"] = False
        prof = ctx.profile
        return {
            "workload": wl,
            "model": ctx.work.model.name, "tp": ctx.work.tp, "gpu": ctx.gpu.name,
            "num_heads": ctx.work.num_heads, "num_kv_heads": ctx.work.num_kv_heads, "head_size": ctx.work.head_size,
            "layers": ctx.num_layers, "step_time": "decode attention of one layer on one rank, seconds",
            "objective": self.objective, "max_regression": self.max_regression,
            "profile": {"gpu": prof.gpu, "path": prof.path or "built-in", "calibrated": prof.calibrated},
            "estimate": ctx.timer.report(),
            "engines": {k: v.to_dict() for k, v in self.engines.items()},
            "skipped": dict(self.skipped),
            "backends": [b.to_dict(self.engines[b.engine].default.stats.total_s, self.engines[b.engine].best.stats.total_s)
                         if b.engine in self.engines else b.to_dict(None) for b in self.backends],
            "heuristics": [h.to_dict() for h in self.heuristics],
            "notes": list(self.notes),
        }


def tune(ctx: TuneContext, *, objective: str = "mean", max_regression: float | None = 0.05,
         engines: Sequence[str] = ENGINES, only: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
         backends: bool = True) -> TuneResult:
    """Every engine's best setting (``only``: per engine, the settings to compare instead of the whole range), and
    the other attention backends' totals (``backends``)."""
    out: dict[str, EngineTune] = {}
    skipped: dict[str, str] = {}
    for e in engines:
        try:
            out[e] = tune_engine(ctx, e, objective, max_regression, None if only is None else only.get(e, ()))
        except UnsupportedError as exc:
            skipped[e] = str(exc)
    if not out:
        raise UnsupportedError("; ".join(f"{k}: {v}" for k, v in skipped.items()))

    notes = []
    if ctx.work.model.sliding_window:
        notes.append(f"{ctx.work.model.name} has sliding-window layers; every layer is timed as a global layer, so "
                     "the per-1,000-token figures are an upper bound")
    est = ctx.timer.report()
    if est["estimated_steps"]:
        decided = max(c.rel_se for e in out.values() for c in (e.default, e.best))
        rest = max(c.rel_se for e in out.values() for c in e.candidates)
        others = (f"; the other settings' totals, quick estimates that only rank them, within about {rest * 100:.2g}%"
                  if rest > decided else "")
        notes.append(f"{est['exact_evaluations']:,} launches timed exactly, the rest of the steps estimated from them "
                     f"(one standard error; --exact times every step): the defaults and the picks "
                     f"{'exact' if decided == 0 else f'within about {decided * 100:.2g}%'}{others}")
    if ctx.sample is not None:
        total_steps = ctx.population.steps if ctx.population is not None else ctx.steps.num_steps
        measured = (f"timed on a stratified sample of {ctx.steps.num_steps:,} steps whose totals are estimated over "
                    "every step" if ctx.population is not None else "timed on every step")
        notes.append(f"{total_steps:,} steps: every setting ranked on a sample of {ctx.sample.steps.num_steps:,} of "
                     f"them; the default, the best and the other backends {measured}; the other settings and the "
                     "heuristics keep the first sample's figures")
    return TuneResult(ctx=ctx, objective=objective, max_regression=max_regression, engines=out, skipped=skipped,
                      backends=backend_levers(ctx, out) if backends else (), notes=tuple(notes))
