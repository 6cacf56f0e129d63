"""The public Python API: ``decodecalc.grid``, ``compare``, ``recommend`` and ``tune``.

Each takes the CLI's options as keyword arguments (``model``, ``tp``, ``batch``, ``seq_len``,
``seq_lens`` as a list or a comma string, ``gpu``, ...; see :class:`WorkloadParams`) and returns a
typed, frozen result whose ``to_dict()`` is exactly what the command prints with ``--json``. The
commands call these same functions, so the two cannot drift::

    import decodecalc
    r = decodecalc.grid(model="llama3-70b", tp=8, batch=64, seq_len=8192)
    r.vllm.figures.coverage.fraction, r.to_dict()["systems"]["sglang"]["num_kv_splits"]

Pure: no typer, no rich. Errors are :class:`decodecalc.errors.DecodecalcError` subclasses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Union

from decodecalc.errors import ChoiceError, ConfigError, UnsupportedError
from decodecalc.inputs import Inputs, build_inputs

if TYPE_CHECKING:
    from typing import Unpack

    from decodecalc.reports.compare import PolicyResult
    from decodecalc.reports.grid import GridReport, SystemResult
    from decodecalc.reports.recommend import Recommendation
    from decodecalc.reports.tune import TuneResult
    from decodecalc.traffic import StepTrace


class WorkloadParams(TypedDict, total=False):
    """The shared options of `grid`, `compare`, `recommend` (and `explain`, `determinism`, `cudagraphs`)."""

    tp: int
    batch: int | None
    seq_len: int | None
    seq_lens: str | Sequence[int] | None
    query_lens: str | Sequence[int] | None
    gpu: str
    sms: int | None
    bandwidth: float | None  # GB/s
    dtype: str | None
    kv_cache_dtype: str
    block_size: int
    kernel_block_size: int | None
    batch_invariant: bool
    cuda_graph: bool
    cudagraph_mode: str | None
    max_num_seqs: int
    max_num_batched_tokens: int
    max_kv_splits: int | None
    num_speculative_tokens: int
    vllm_version: str
    model_runner: str
    seq_threshold_3d: int | None
    static_kv_splits: bool
    context_len: int | None
    layer: str
    cubins: str | bool
    max_model_len: int | None


# --------------------------------------------------------------------------------------------
# grid


@dataclass(frozen=True, slots=True)
class GridResult:
    """What vLLM and SGLang launch for one decode step; ``report`` is the core's GridReport."""

    inputs: Inputs
    report: GridReport
    #: what each engine runs by default for this step (reports/defaults.py)
    defaults: tuple[Any, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return self.report.to_json() | {"default_backends": [d.to_json() for d in self.defaults]}

    def system(self, name: str) -> SystemResult | None:
        return next((s for s in self.report.systems if s.name == name), None)

    @property
    def vllm(self) -> SystemResult | None:
        return self.system("vllm")

    @property
    def sglang(self) -> SystemResult | None:
        return self.system("sglang")


def grid_for(inputs: Inputs, system: str | None = None, regime: str = "back-to-back") -> GridResult:
    """`grid` from already-built inputs (the CLI's path); ``regime``: what the predicted times are for."""
    from decodecalc.reports.grid import SYSTEMS, grid_report
    from decodecalc.timemodel.profile import regime_name

    system = getattr(system, "value", system)  # the CLI passes an enum member
    systems = SYSTEMS if system is None else (str(system).lower(),)
    if systems[0] not in SYSTEMS:
        raise ChoiceError(f"--system {system!r}; valid: {', '.join(SYSTEMS)}")
    report = grid_report(inputs.work, inputs.gpu, systems=systems, vllm=inputs.vllm, sglang=inputs.sglang,
                         kernel_block_size=inputs.kernel_block_size, layer=inputs.layer, regime=regime_name(regime))
    if system is not None and report.systems[0].error:
        raise UnsupportedError(report.systems[0].error)
    from decodecalc.launchers.names import Engine
    from decodecalc.reports.defaults import engine_defaults

    engines = tuple(Engine) if system is None else (Engine(systems[0]),)  # --system vllm: vLLM's default alone
    return GridResult(inputs, report, engine_defaults(inputs.work, inputs.gpu, inputs.policy_options(),
                                                      engines=engines, regime=regime_name(regime)))


def grid(model: str = "llama3-8b", *, system: str | None = None, regime: str = "back-to-back",
         **workload: Unpack[WorkloadParams]) -> GridResult:
    """`decodecalc grid`: grid, splits, SM coverage, bytes and roofline of one decode step (``regime``:
    ``"back-to-back"`` or ``"in-graph"``, what the predicted time is for)."""
    return grid_for(build_inputs(model=model, **workload), system, regime)


# --------------------------------------------------------------------------------------------
# compare

@dataclass(frozen=True, slots=True)
class CompareResult:
    """Every split policy for one decode step; ``best`` names the starred row, ``best_by`` the figure it is
    ranked by (``predicted_time_s`` where a calibrated prediction exists, else ``sm_limited_time_s``)."""

    inputs: Inputs
    policies: tuple[PolicyResult, ...]
    best: str | None
    best_rule: str
    best_by: str = "sm_limited_time_s"
    best_roofline_proxy: str | None = None
    #: what each engine runs by default for this step (reports/defaults.py): which rows are the engines' defaults
    defaults: tuple[Any, ...] = ()

    def policy(self, name: str) -> PolicyResult | None:
        return next((p for p in self.policies if p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        w, gpu = self.inputs.work, self.inputs.gpu
        return {
            "model": w.model.name, "tp": w.tp, "gpu": gpu.name, "num_sms": gpu.num_sms,
            "workload": {"batch": w.batch, "seq_lens": list(w.seq_lens), "query_lens": list(w.query_lens),
                         "num_heads_per_rank": w.num_heads, "num_kv_heads_per_rank": w.num_kv_heads,
                         "head_size": w.head_size, "dtype": w.dtype, "kv_cache_dtype": w.kv_cache_dtype,
                         "block_size": w.block_size},
            "best": self.best,
            "best_by": self.best_by,
            "best_rule": self.best_rule,
            "best_roofline_proxy": self.best_roofline_proxy,
            "default_backends": [d.to_json() for d in self.defaults],
            "policies": [dict(r.to_json(), best=(r.name == self.best)) for r in self.policies],
        }


def compare_for(inputs: Inputs, policies: str | Sequence[str] | None = None,
                occupancy: int | None = None, regime: str = "back-to-back") -> CompareResult:
    """`compare` from already-built inputs (the CLI's path); ``regime``: what the predicted times are for."""
    from decodecalc.launchers.registry import resolve_policies
    from decodecalc.reports import compare as pol

    from decodecalc.limits import MAX_OCCUPANCY, check_int

    check_int(occupancy, "--occupancy", MAX_OCCUPANCY)  # cudagraphs' bound and words: 1,000,000 drew a 16.5M x 8 grid
    text = policies if policies is None or isinstance(policies, str) else ",".join(policies)
    names = resolve_policies(text)
    from decodecalc.timemodel.profile import regime_name

    # a bad name is an error; a profile that cannot serve it (broken, or without in-graph data) is each row's note,
    # as every profile problem is in compare (its launch table stays)
    regime = regime_name(regime)
    opts = inputs.policy_options(flashinfer_occupancy=occupancy, regime=regime)
    results = tuple(pol.evaluate_all(inputs.work, inputs.gpu, opts, names))
    best, by, rule = pol.choose_best(list(results))
    from decodecalc.reports.defaults import engine_defaults

    defaults = engine_defaults(inputs.work, inputs.gpu, opts, regime=regime, timed=False)
    return CompareResult(inputs, results, best, rule, by, pol.best_policy(list(results)), defaults)


def compare(model: str = "llama3-8b", *, policies: str | Sequence[str] | None = None, occupancy: int | None = None,
            regime: str = "back-to-back", **workload: Unpack[WorkloadParams]) -> CompareResult:
    """`decodecalc compare`: every modeled split policy side by side (``policies``: names, default all;
    ``regime``: ``"back-to-back"`` or ``"in-graph"``)."""
    return compare_for(build_inputs(model=model, **workload), policies, occupancy, regime)


# --------------------------------------------------------------------------------------------
# recommend


@dataclass(frozen=True, slots=True)
class RecommendResult:
    """The best KV split count per kernel; ``recommendation`` is the core's Recommendation."""

    inputs: Inputs
    recommendation: Recommendation
    #: what each engine runs by default for this step (reports/defaults.py): the split counts above are for its
    #: Triton kernels, which only run where that default is Triton
    defaults: tuple[Any, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return self.recommendation.to_json() | {"default_backends": [d.to_json() for d in self.defaults]}

    @property
    def kernels(self) -> Any:
        return self.recommendation.kernels

    @property
    def warning(self) -> str | None:
        return self.recommendation.warning

    @property
    def calibrated(self) -> bool:
        return self.recommendation.calibrated


def recommend_for(inputs: Inputs, kernel: str | None = None,
                  candidates: str | Sequence[str] | Sequence[int] | None = None,
                  profile: str | Path | None = None, regime: str = "back-to-back") -> RecommendResult:
    """`recommend` from already-built inputs (the CLI's path)."""
    from decodecalc.reports.recommend import KERNELS, parse_candidates
    from decodecalc.reports.recommend import recommend as _recommend
    from decodecalc.timemodel import resolve_profile

    if inputs.layer != "global":
        raise UnsupportedError(f"recommend models full-attention (global) layers; --layer {inputs.layer} is not "
                               "modeled by the time model")
    kernel = getattr(kernel, "value", kernel)
    kernels = KERNELS if kernel is None else (str(kernel).lower(),)
    if kernels[0] not in KERNELS:
        raise ChoiceError(f"--kernel {kernel!r}; valid: {', '.join(KERNELS)}")
    cands: list[str] | None = None
    if isinstance(candidates, str):
        cands = [candidates]
    elif candidates is not None and all(isinstance(c, int) for c in candidates):
        cands = [",".join(map(str, candidates))]  # recommend(candidates=[1, 4, 16])
    elif candidates is not None:
        cands = [str(c) for c in candidates]
    prof = resolve_profile(inputs.gpu, profile_path=Path(profile) if profile is not None else None).in_regime(regime)
    rec = _recommend(inputs.work, inputs.gpu, kernels=kernels, candidates=parse_candidates(cands), profile=prof,
                     vllm_settings=inputs.vllm, sglang_settings=inputs.sglang)
    from decodecalc.launchers.names import Engine
    from decodecalc.reports.defaults import engine_defaults

    engines = tuple(Engine(k) for k in kernels if k in ("vllm", "sglang"))
    return RecommendResult(inputs, rec, engine_defaults(inputs.work, inputs.gpu, inputs.policy_options(),
                                                        engines=engines, regime=prof.regime))


def recommend(model: str = "llama3-8b", *, kernel: str | None = None,
              candidates: str | Sequence[str] | Sequence[int] | None = None,
              profile: str | Path | None = None, regime: str = "back-to-back",
              **workload: Unpack[WorkloadParams]) -> RecommendResult:
    """`decodecalc recommend`: the fastest KV split count per kernel from the time model.

    ``candidates``: ``[1, 4, 16]`` or ``"1,4,16"`` for every kernel, or ``["vllm=1,16", "sglang=4,8"]``; ``profile``: a
    time-model profile YAML (default: the user's, then the packaged one for the GPU); ``regime``: ``"back-to-back"``
    or ``"in-graph"``.
    """
    return recommend_for(build_inputs(model=model, **workload), kernel, candidates, profile, regime)


# --------------------------------------------------------------------------------------------
# tune


def __getattr__(name: str) -> Any:
    if name == "TuneResult":  # the core's result type, re-exported (loaded on first use)
        from decodecalc.reports.tune import TuneResult

        return TuneResult
    raise AttributeError(f"module 'decodecalc.api' has no attribute {name!r}")


class TuneParams(TypedDict, total=False):
    """The engine and GPU options of `tune` (its workload comes from ``steps``, ``requests`` or ``workload``)."""

    tp: int
    gpu: str
    sms: int | None
    bandwidth: float | None  # GB/s
    dtype: str | None
    kv_cache_dtype: str
    block_size: int
    batch_invariant: bool
    cuda_graph: bool
    cudagraph_mode: str | None
    max_num_seqs: int
    max_num_batched_tokens: int
    num_speculative_tokens: int
    model_runner: str
    max_kv_splits: int | None
    static_kv_splits: bool
    vllm_version: str
    cubins: str | bool
    max_model_len: int | None


StepsArg = Union[str, Path, Sequence[Any], None]


def tune_inputs(model: str = "llama3-8b", **options: Unpack[TuneParams]) -> Inputs:
    """The model, GPU and engine settings `tune` runs under (one decode token per sequence as the base shape)."""
    from decodecalc.reports.tune_request import base_inputs

    return base_inputs(model, **options)


#: decode steps a request trace may make (about a day of one busy server is a million; tune's memory grows with it)
MAX_WORKLOAD_STEPS = 5_000_000


def load_workload(*, steps: StepsArg = None, requests: StepsArg = None, workload: str | None = None,
                  metrics: str | None = None, concurrency: int | None = None, max_num_seqs: int = 1024,
                  max_num_batched_tokens: int = 8192, num_speculative_tokens: int = 0,
                  draft_acceptance_rate: float | None = None, trace_format: str | None = None,
                  columns: str | None = None, tokenizer: str | None = None, model_hint: str | None = None,
                  max_requests: int | None = None, metrics_model: str | None = None, context_len: int | None = None,
                  progress: Callable[[str], None] | None = None, arrival_rate: float | None = None) -> Any:
    """The decode steps of exactly one of ``steps`` (a step-trace file, or a list of steps: lists of KV lengths,
    ``{"seq_lens": ..., "query_lens": ..., "weight": ...}`` mappings or DecodeSteps), ``requests`` (a request trace
    in any format of docs/traces.md, detected unless ``trace_format`` names it or ``columns`` maps it; or a list
    of ``{"prompt_tokens", "output_tokens", "arrival_s"}`` mappings or Requests), ``workload`` (a preset name or
    ``mix:...``) and ``metrics`` (a vLLM server's Prometheus scrape: a file or a URL, docs/metrics.md). With
    ``num_speculative_tokens`` k > 0, requests and presets decode k draft tokens per step, accepted at
    ``draft_acceptance_rate`` (default 0.7; decodecalc/traffic/requests.py); a step trace carries its own
    ``query_lens``. Step files come back as arrays (decodecalc.batch.steps.StepArrays), request traces as runs of
    steps (decodecalc.batch.runs.RunSteps), the rest as a StepTrace. ``context_len``: the engine's max_model_len (the
    model's context); a request file's requests longer than it are skipped and counted, as the engine refuses them."""
    from decodecalc.traffic import (
        DEFAULT_ACCEPTANCE_RATE,
        BatchingLimits,
        requests_from_items,
        steps_from_items,
    )
    from decodecalc.traffic import workload as preset_workload

    from decodecalc.reports.tune_request import check_traffic

    check_traffic(steps=steps, requests=requests, workload=workload, metrics=metrics, concurrency=concurrency,
                  draft_acceptance_rate=draft_acceptance_rate, num_speculative_tokens=num_speculative_tokens,
                  trace_format=trace_format, columns=columns, tokenizer=tokenizer, max_requests=max_requests,
                  arrival_rate=arrival_rate, metrics_model=metrics_model)
    rate = DEFAULT_ACCEPTANCE_RATE if draft_acceptance_rate is None else draft_acceptance_rate
    limits = BatchingLimits(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                            num_speculative_tokens=num_speculative_tokens, acceptance_rate=rate)
    if steps is not None:
        if isinstance(steps, (str, Path)):
            from decodecalc.batch.steps import from_columns
            from decodecalc.traffic.steps import load_step_columns

            return from_columns(load_step_columns(Path(steps)))
        return steps_from_items(steps)
    if requests is not None:
        if isinstance(requests, (str, Path)):
            return _request_file(Path(requests), limits, trace_format, columns, tokenizer, model_hint, max_requests,
                                 progress, context_len, arrival_rate)
        return requests_from_items(requests, limits)
    if metrics is not None:
        from decodecalc.traffic.metrics import workload_from_metrics

        trace = workload_from_metrics(metrics, model_name=metrics_model, concurrency=concurrency,
                                      max_num_batched_tokens=max_num_batched_tokens,
                                      num_speculative_tokens=num_speculative_tokens, acceptance_rate=rate)
        _check_width(trace, max_num_seqs, f"--metrics {metrics}", concurrency)
        return trace
    assert workload is not None
    trace = preset_workload(workload, concurrency=concurrency, max_num_batched_tokens=max_num_batched_tokens,
                            num_speculative_tokens=num_speculative_tokens, acceptance_rate=rate)
    _check_width(trace, max_num_seqs, f"--workload {workload}", concurrency)
    return trace


def _check_width(trace: StepTrace, max_num_seqs: int, what: str, concurrency: int | None) -> None:
    widest = max(s.batch for s in trace.steps)
    if widest > max_num_seqs:
        raise ConfigError(f"{what} runs up to {widest} sequences at once "
                          f"({'--concurrency' if concurrency is not None else 'its concurrency'}), more than "
                          f"--max-num-seqs {max_num_seqs}: pass --concurrency {max_num_seqs} or raise --max-num-seqs")


def _request_file(path: Path, limits: Any, trace_format: str | None, columns: str | None, tokenizer: str | None,
                  model_hint: str | None, max_requests: int | None,
                  progress: Callable[[str], None] | None = None, context_len: int | None = None,
                  rate: float | None = None) -> Any:
    """A request trace file read (any format), less the requests past ``context_len``, given Poisson arrivals at
    ``rate`` (or, without arrival times, at the rate that keeps max_num_seqs busy), batched into decode steps."""
    from decodecalc.batch.intervals import request_steps
    from decodecalc.limits import check_int
    from decodecalc.traffic.arrivals import arrivals_of
    from decodecalc.traffic.requests import batching_notes
    from decodecalc.traffic.traces import read_requests

    check_int(max_requests, "--max-requests", 1 << 40)
    table = read_requests(path, fmt=trace_format, columns=columns, tokenizer=tokenizer, model_hint=model_hint,
                          limit=max_requests, progress=progress)
    if context_len is not None:
        from decodecalc.traffic.traces import within_context

        table = within_context(table, context_len)
    arrival, arrivals, said = arrivals_of(table, limits, rate)
    notes = (f"{table.format} trace: {len(table):,} requests" + (" (token counts estimated)"
                                                                  if table.tokens_estimated else ""),
             *(n for n in table.notes if not (arrivals and n.startswith("no arrival times"))), *said,
             *batching_notes(limits, len(table)))
    if progress is not None:
        progress(f"batching {len(table):,} requests")
    return request_steps(table.prompt_tokens, table.output_tokens, arrival, limits, max_steps=MAX_WORKLOAD_STEPS,
                         source=str(path), notes=notes, progress=progress, arrivals=arrivals)


def tune_for(inputs: Inputs, trace: Any, *, objective: str = "mean", max_regression: str | float | None = "5%",
             heuristics: str | Sequence[str] | None = None, rule: str | Path | None = None,
             engine: str | None = None, profile: str | Path | None = None, max_shapes: int | None = None,
             exact: bool = False, progress: Callable[[str], None] | None = None,
             regime: str = "back-to-back") -> TuneResult:
    """`tune` from already-built inputs and a loaded workload (the CLI's path). ``max_shapes``: steps each setting
    may time with the scalar model before the rest are estimated (default: automatic); ``exact``: time every step
    with it; ``progress``: called with what is being timed."""
    import dataclasses

    from decodecalc.reports.heuristics import score_heuristics, select_heuristics
    from decodecalc.reports.tune import make_context, parse_regression
    from decodecalc.reports.tune import tune as _tune
    from decodecalc.reports.tune_request import check_max_shapes, parse_engines, parse_objective
    from decodecalc.timemodel import resolve_profile

    objective = parse_objective(objective)
    engines = parse_engines(engine)
    guard = parse_regression(max_regression)
    names = heuristics if heuristics is None or isinstance(heuristics, str) else ",".join(heuristics)
    if names is not None and not isinstance(heuristics, str) and not names:
        names = "none"  # heuristics=[]
    chosen = select_heuristics(names, Path(rule) if rule is not None else None)
    prof = resolve_profile(inputs.gpu, profile_path=Path(profile) if profile is not None else None).in_regime(regime)
    check_max_shapes(max_shapes)
    ctx = make_context(trace, inputs.work, inputs.gpu, prof, vllm=inputs.vllm, sglang=inputs.sglang,
                       max_anchors=0 if exact else max_shapes, progress=progress, cubins=inputs.cubins,
                       max_model_len=inputs.max_model_len)
    result = _tune(ctx, objective=objective, max_regression=guard, engines=engines)
    return dataclasses.replace(result, heuristics=score_heuristics(ctx, result, chosen))


def tune(model: str = "llama3-8b", *, steps: StepsArg = None, requests: StepsArg = None, workload: str | None = None,
         concurrency: int | None = None, draft_acceptance_rate: float | None = None, objective: str = "mean",
         max_regression: str | float | None = "5%",
         heuristics: str | Sequence[str] | None = None, rule: str | Path | None = None, engine: str | None = None,
         profile: str | Path | None = None, max_shapes: int | None = None, exact: bool = False,
         regime: str = "back-to-back", rate: float | None = None, **options: Unpack[TuneParams]) -> TuneResult:
    """`decodecalc tune`: the best global engine setting for a whole decode workload, and what-if heuristics.

    Give exactly one workload: ``steps`` (a file, or a list of steps), ``requests`` (a file, or a list of requests)
    or ``workload`` (a preset name or ``mix:prompt=N,output=N``, with ``concurrency``). ``num_speculative_tokens``
    k > 0 with ``requests`` or ``workload``: k draft tokens per decode step, ``draft_acceptance_rate`` of them
    accepted (deterministic model, decodecalc/traffic/requests.py). ``heuristics``: names
    (a list or a comma string; default all, ``[]`` or ``"none"`` for none); ``rule``: a Python file defining
    ``splits(step)`` and/or ``segments(step)``; ``max_regression``: ``"5%"``, ``0.05`` or ``None`` (no guard);
    ``regime``: ``"back-to-back"`` or ``"in-graph"`` (what the times are for: docs/recommend.md, "Regimes");
    ``rate``: Poisson arrivals (requests/s) for a ``requests`` file (default: its own, or for a file without arrival
    times the rate that keeps ``max_num_seqs`` busy).
    """
    inputs = tune_inputs(model, **options)
    trace = load_workload(steps=steps, requests=requests, workload=workload, concurrency=concurrency,
                          max_num_seqs=options.get("max_num_seqs", 1024),
                          max_num_batched_tokens=options.get("max_num_batched_tokens", 8192),
                          num_speculative_tokens=options.get("num_speculative_tokens", 0),
                          draft_acceptance_rate=draft_acceptance_rate, arrival_rate=rate,
                          context_len=inputs.max_model_len or inputs.work.model.context_length)
    return tune_for(inputs, trace, objective=objective, max_regression=max_regression, heuristics=heuristics,
                    rule=rule, engine=engine, profile=profile, max_shapes=max_shapes, exact=exact, regime=regime)


__all__ = ["CompareResult", "GridResult", "RecommendResult", "WorkloadParams", "compare", "compare_for", "grid",
           "grid_for", "recommend", "recommend_for", "TuneParams",
           "TuneResult", "load_workload", "tune", "tune_for", "tune_inputs"]
