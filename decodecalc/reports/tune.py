"""``decodecalc tune``: the best global engine setting for a whole decode workload, from the time model.

For each engine, every candidate setting of its whole legal range (:mod:`decodecalc.reports.tune_space`) is applied
to every step of the workload: the launcher module decides what the step launches under that setting (vLLM:
launchers/vllm_unified.py with the segment count and MIN_LAUNCH_GRID_SIZE_2D as settings, threshold snapping and
CUDA-graph padding as the engine does them; SGLang: launchers/sglang_triton.py with max_kv_splits and the static
switch) and the time model times it, on arrays of steps (:mod:`decodecalc.batch`: exact where the model has a closed
form, else estimated from exactly timed steps to a stated error). The best setting minimises the mean (or p99) step
time among those whose per-step time ratio to the engine's default, at its 99th percentile over the steps, stays
within ``max_regression`` plus the time model's median launch error (:class:`~decodecalc.reports.tune_types.Guard`;
the steps that decide it are timed exactly), ranked as ``recommend`` ranks: by the predicted time averaged over the
profile's occupancy and one program per SM either side (``timemodel.robust_time_s``); scores within 0.2% are a tie,
which goes to the default, then to less split-K scratch, then to fewer programs. Step times are one attention layer's
decode-attention time on one rank; the per-1,000-token figure covers every layer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from decodecalc.errors import ChoiceError, ConfigError, UnsupportedError
from decodecalc.limits import MAX_SEQ_LEN
from decodecalc.launchers.sglang_triton import SglangSettings
from decodecalc.launchers.vllm_unified import VllmSettings
from decodecalc.reports.tune_backends import (BackendNote, EngineDefaultTotal, TrtllmTune, backend_levers,
                                              engine_default_totals, trtllm_tune)
from decodecalc.reports.tune_stats import Stats
from decodecalc.reports.tune_search import evaluate_candidates, leading_candidates, measure_all
from decodecalc.reports.tune_space import (
    SPACES,
    EngineCandidate,
    Option,
    candidate_of,
    option_like,
    sglang_setting,
    too_big,
    vllm_setting,
)
from decodecalc.reports.tune_types import (
    ENGINES,
    OBJECTIVES,
    Candidate,
    EngineTune,
    Guard,
    TuneContext,
    objective_value,
    parse_regression,
)
from decodecalc.specs.gpus import GPUSpec
from decodecalc.timemodel import TimeProfile
from decodecalc.timemodel.accuracy import expected_error_for, missing_evidence
from decodecalc.timemodel.domain import domain_warnings
from decodecalc.traffic import StepTrace
from decodecalc.workload import Workload

if TYPE_CHECKING:
    from decodecalc.batch.source import StepSource
    from decodecalc.reports.heuristics import HeuristicScore

CHANGE_FRACTION = 0.01  # a step "gains" or "loses" when its time moves by more than this
BATCH_BUCKETS = ((1, 1), (2, 4), (5, 8), (9, 16), (17, 32), (33, 64), (65, 128), (129, 256), (257, 1 << 30))
#: a workload of more steps than this ranks every candidate on a sample of SAMPLE_STEPS steps first (quick estimates,
#: and the ranking score's neighbouring occupancy points), then measures every candidate on MEASURE_STEPS steps: every
#: step of a workload up to that size, else a stratified sample whose totals are regression estimates over every step
#: (decodecalc.batch.population)
SAMPLE_ABOVE = 6_000
SAMPLE_STEPS = 1_024
MEASURE_STEPS = 16_384
__all__ = ["ENGINES", "OBJECTIVES", "Candidate", "EngineTune", "Stats", "TuneContext", "TuneResult", "leading_candidates",
           "make_context", "objective_value", "parse_regression", "per_1k_tokens", "sglang_setting", "tune",
           "tune_engine", "vllm_setting"]


#: the systems whose times tune reports: both engines' Triton kernels and the backends it compares them with
#: (decodecalc.reports.tune_backends.LEVERS)
TIMED_SYSTEMS = ("vllm", "sglang", "flashinfer", "flashinfer-tc", "fa3")


def profile_workload(profile: TimeProfile) -> dict[str, Any] | None:
    """The traffic a profile's layout cells were sampled from (``calibrate --workload``): source, model, TP degree and
    steps sampled; None for other profiles. Those cells predict that traffic best and another of the same layout can
    be worse (benchmarks/results/calibrate-workload-h200.json), so tune says whose they are."""
    wl = profile.fit.get("workload") if isinstance(profile.fit, Mapping) else None
    if not isinstance(wl, Mapping):
        return None
    return {"source": str(wl.get("source", "")), "model": str(wl.get("model", "")), "tp": wl.get("tp"),
            "sampled_steps": len(wl.get("sampled_steps") or ())}


def make_context(trace: StepTrace | StepSource, work: Workload, gpu: GPUSpec, profile: TimeProfile, *,
                 vllm: VllmSettings | None = None, sglang: SglangSettings | None = None,
                 max_anchors: int | None = None, target_rel_se: float | None = None,
                 progress: Callable[[str], None] | None = None, cubins: bool = True,
                 max_model_len: int | None = None) -> TuneContext:
    """The context of a workload (a StepTrace, or StepArrays as the file readers make them). ``max_anchors``: steps
    a recipe may time exactly (None: the default; 0: every step, exact); ``target_rel_se``: the error the estimate
    stops at."""
    from decodecalc.batch.estimate import TARGET_REL_SE
    from decodecalc.batch.evaluator import DEFAULT_MAX_ANCHORS, WorkloadTimer
    from decodecalc.batch.population import Population
    from decodecalc.batch.stats import query_keys
    from decodecalc.batch.steps import StepArrays, from_trace
    from decodecalc.batch.summary import workload_summary

    vllm = vllm or VllmSettings()
    sglang = sglang or SglangSettings()
    anchors = DEFAULT_MAX_ANCHORS if max_anchors is None else (None if max_anchors == 0 else max_anchors)
    target = TARGET_REL_SE if target_rel_se is None else target_rel_se
    steps: StepSource
    if isinstance(trace, StepTrace):
        steps = from_trace(trace)
    elif isinstance(trace, StepArrays) or anchors is not None and trace.num_steps > MEASURE_STEPS:
        steps = trace
    else:  # a request trace's runs are expanded only where every step is timed (a large one is sampled from them)
        steps = trace.expand()
    batch = steps.batch
    over = batch > vllm.max_num_seqs
    if over.any():
        i = int(over.argmax())
        where = steps.origin(i) if isinstance(steps, StepArrays) else f"{steps.source}, step {i + 1}"
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
                           max_seq_len=max_seq_len, sample=sample, population=population, cubins=cubins,
                           max_model_len=max_model_len)

    summary = workload_summary(steps) if isinstance(steps, StepArrays) else steps.summary()
    arrivals = getattr(trace, "arrivals", None)  # Poisson arrivals given to a request trace (--rate)
    if arrivals is not None:
        summary = summary | {"arrivals": arrivals}
    max_seq_len = int(steps.seq_lens.max()) if isinstance(steps, StepArrays) else steps.max_seq_len
    if max_seq_len > MAX_SEQ_LEN:  # the same bound as --seq-len: no model or kernel is modeled past it
        raise ConfigError(f"{steps.source}: a KV length of {max_seq_len:,} tokens is over the supported "
                          f"{MAX_SEQ_LEN:,} (decodecalc.limits.MAX_SEQ_LEN)")
    if isinstance(steps, StepArrays) and (anchors is None or steps.num_steps <= SAMPLE_ABOVE):
        return context(steps, summary)
    population = None
    if steps.num_steps > MEASURE_STEPS:
        measured, m_index = steps.sample(MEASURE_STEPS)
        population = Population.of(steps, m_index, measured)
    else:  # steps kept as runs or intervals are more than MEASURE_STEPS (above): these are arrays
        assert isinstance(steps, StepArrays)
        measured = steps
    ranking, r_index = measured.sample(SAMPLE_STEPS)
    return context(measured, summary, context(ranking, summary), index=r_index, population=population)


def _apply(engine: str, best: Candidate, default: Candidate, ctx: TuneContext) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(how to apply the best setting, in words; the shell lines or flags to copy, each under 80 columns)."""
    from decodecalc.reports.tune_apply import APPLY

    if best is default:
        return ("keep the default: no candidate beats it on this workload within the guard",), ()
    return APPLY[engine](best.setting, default.setting, ctx)


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
    SPACES[engine].refuses(ctx)
    return SPACES[engine].options(ctx)


def _default_option(ctx: TuneContext, engine: str) -> Option:
    space = SPACES[engine]
    space.refuses(ctx)
    return space.option_of(ctx, space.default_setting(ctx))


def _edge_note(engine: str, best: Candidate, options: Sequence[Option], why: str) -> str:
    knob = SPACES[engine].knob
    top = max(o.setting.knob for o in options)
    if best.setting.knob < top:
        return ""
    return f"the best {knob} ({top}) is the largest searched: {why}"


def tune_engine(ctx: TuneContext, engine: str, objective: str = "mean", max_regression: float | None = 0.05,
                only: Sequence[EngineCandidate | Mapping[str, Any]] | None = None) -> EngineTune:
    """The engine's best setting over its whole range (``only``: among these settings, the default always included).
    On a large workload every candidate is first timed on a small sample of its steps (``ctx.sample``), then every
    one again on the measuring steps (every step, or a large stratified sample whose totals are estimated over every
    step)."""
    if objective not in OBJECTIVES:
        raise ChoiceError(f"--objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    if engine not in ENGINES:
        raise ChoiceError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    small = ctx.sample or ctx
    if only is None:
        options, why = _options(small, engine)
    else:
        first = _default_option(small, engine)
        given = [candidate_of(engine, x) for x in only]
        options = [first] + [option_like(small, engine, x) for x in given if x != first.setting]
        why = "the settings given"
    dropped = too_big(options[1:], ctx.gpu.memory_bytes)
    options = [o for o in options if o not in dropped]
    guard = make_guard(ctx, engine, max_regression)
    default, best, cands, options = evaluate_candidates(small, engine, options, objective, guard,
                                              tighten=ctx.sample is None)
    if ctx.sample is not None:
        ratios = ctx.memo.setdefault("score_ratio", {})
        for c in cands:  # the ranking score over the value, as the sample has it (the second pass times no neighbours)
            sc = c.score if c.score is not None else c.stats
            ratios[c.label] = (sc.mean_step_s / c.stats.mean_step_s, sc.p99_step_s / c.stats.p99_step_s)
        default, best, cands = measure_all(ctx, engine, options, cands, objective, guard)
    words, cmds = _apply(engine, best, default, ctx)
    outside = domain_warnings(ctx.work, ctx.gpu, ctx.profile, kernel=engine)
    return EngineTune(
        engine=engine, default=default, best=best, candidates=cands, apply=words, apply_commands=cmds,
        calibrated=ctx.timer.calibrated(engine) and not outside, domain_warnings=outside,
        attention_s_per_1k_tokens={"default": per_1k_tokens(ctx, default.stats), "best": per_1k_tokens(ctx, best.stats)},
        changes=step_changes(ctx, best.times, default.times), range_note=why,
        edge_note=_edge_note(engine, best, options, why),
        left_out=tuple(f"{o.label} ({o.scratch_bytes / 1e9:,.1f} GB)" for o in dropped),
        expected_error=expected_error_for(ctx.profile, engine, ctx.work, of="workload total"), guard=guard,
    )


def make_guard(ctx: TuneContext, engine: str, max_regression: float | None) -> Guard | None:
    """The guard of ``engine``'s candidates: ``max_regression`` widened by the profile's median error of one launch of
    the engine's kernel at this layout (None: no guard)."""
    if max_regression is None:
        return None
    err = expected_error_for(ctx.profile, engine, ctx.work, of="launch")
    if err is None:
        return Guard(max_regression=max_regression, model_error=0.0)
    return Guard(max_regression=max_regression, model_error=err.median_abs_err, model_error_p90=err.p90_abs_err,
                 model_error_source=f"{err.kernel}, {err.basis}, {err.rows:,} launches")


@dataclass(frozen=True, slots=True)
class TuneResult:
    ctx: TuneContext
    objective: str
    max_regression: float | None
    engines: Mapping[str, EngineTune]
    skipped: Mapping[str, str]
    backends: tuple[BackendNote, ...] = ()
    #: per engine, its default backend and that backend's total: the baseline of every saving
    defaults: tuple[EngineDefaultTotal, ...] = ()
    #: TensorRT-LLM's multi-block count as a lever (tune --engine trtllm)
    trtllm: TrtllmTune | None = None
    heuristics: tuple[HeuristicScore, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def engine_default_total(self, engine: str) -> float | None:
        """The total of ``engine``'s default backend over the workload (its Triton default setting's where that is
        its default), or None where it is not timed."""
        d = next((x for x in self.defaults if x.engine == engine), None)
        if d is None:
            return None
        if d.triton and engine in self.engines:
            return self.engines[engine].default.stats.total_s
        return d.stats.total_s if d.stats is not None else None

    def vs_engine_default(self, engine: str, total: float | None, key: str = "saving_vs_engine_default") -> dict[str, Any]:
        """``{key: 1 - total / the engine default's total}`` where both are known, else {}."""
        base = self.engine_default_total(engine)
        return {key: 1.0 - total / base} if base and total else {}

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
            "profile": {"gpu": prof.gpu, "path": prof.path or "built-in", "calibrated": prof.calibrated,
                        **({"workload": sampled} if (sampled := profile_workload(prof)) else {})},
            "regime": prof.regime_record(TIMED_SYSTEMS),
            "estimate": ctx.timer.report(),
            "engines": {k: v.to_dict() for k, v in self.engines.items()},
            "skipped": dict(self.skipped),
            "backends": [(b.to_dict(self.engines[b.engine].default.stats.total_s,
                                    self.engines[b.engine].best.stats.total_s)
                          if b.engine in self.engines else b.to_dict(None))
                         | self.vs_engine_default(b.engine, b.stats.total_s if b.stats else None) for b in self.backends],
            "default_backends": {d.engine: d.to_dict() | self.vs_engine_default(
                d.engine, self.engines[d.engine].best.stats.total_s if d.engine in self.engines else None,
                key="best_triton_saving_vs_engine_default") for d in self.defaults},
            "heuristics": [h.to_dict() for h in self.heuristics],
            **({"trtllm": self.trtllm.to_dict()} if self.trtllm is not None else {}),
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
        if e not in ENGINES:  # TensorRT-LLM: no Triton kernel; its lever is the multi-block count (trtllm_tune)
            continue
        try:
            out[e] = tune_engine(ctx, e, objective, max_regression, None if only is None else only.get(e, ()))
        except UnsupportedError as exc:
            skipped[e] = str(exc)
    if not out and not ctx.work.model.is_mla and "trtllm" not in engines:  # an MLA model has no Triton engine to tune: its backends are compared
        raise UnsupportedError("; ".join(f"{k}: {v}" for k, v in skipped.items()))

    notes = []
    context = ctx.work.model.context_length
    if context is not None and ctx.max_seq_len > context:
        notes.append(f"KV lengths up to {ctx.max_seq_len:,} tokens are past {ctx.work.model.name}'s context of "
                     f"{context:,}; an engine serving it refuses such requests (max_model_len)")
    for e, et in out.items():  # a layout class no left-out data backs: no ± is printed, and the reason is
        why = missing_evidence(ctx.profile, e, ctx.work, of="workload total") if et.expected_error is None else None
        if why:
            notes.append(why)
    if ctx.work.model.sliding_window:
        notes.append(f"{ctx.work.model.name} has sliding-window layers; every layer is timed as a global layer, so "
                     "the per-1,000-token figures are an upper bound")
    defaults = engine_default_totals(ctx, engines) if backends else ()
    est = ctx.timer.report()
    if est["estimated_steps"]:
        worst = max(c.rel_se for e in out.values() for c in e.candidates)
        notes.append(f"{est['exact_evaluations']:,} launches timed exactly, the rest of the steps estimated from them "
                     f"(one standard error; --exact times every step): every setting's total "
                     f"{'exact' if worst == 0 else f'within about {worst * 100:.2g}%'}")
    if ctx.sample is not None:
        total_steps = ctx.population.steps if ctx.population is not None else ctx.steps.num_steps
        measured = (f"timed on a stratified sample of {ctx.steps.num_steps:,} steps whose totals are estimated over "
                    "every step" if ctx.population is not None else "timed on every step")
        notes.append(f"{total_steps:,} steps: every setting ranked on a sample of {ctx.sample.steps.num_steps:,} of "
                     f"them, then every setting and the other backends {measured}; the heuristics keep the first "
                     "sample's figures")
    return TuneResult(ctx=ctx, objective=objective, max_regression=max_regression, engines=out, skipped=skipped,
                      backends=backend_levers(ctx, engines, defaults) if backends else (),
                      defaults=defaults, notes=tuple(notes),
                      trtllm=trtllm_tune(ctx) if "trtllm" in engines and not ctx.work.model.is_mla else None)
