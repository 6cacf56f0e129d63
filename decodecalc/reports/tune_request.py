"""What ``decodecalc tune`` is asked to do, and the plan it makes of that.

A :class:`TuneRequest` holds every tune option, typed and grouped (the traffic, the engines' serving options, the
search, the GPU measurement, the outputs), and refuses a conflicting or malformed option when it is built: a
:class:`~decodecalc.errors.ConfigError` (an unknown heuristic: ``UnknownNameError``) of one line naming the options, so
a request that exists is one the runner (``decodecalc/commands/tune_run.py``) can carry out. :func:`plan_for` resolves
the model, the GPU and the engine options into the :class:`TunePlan` the runner reads the workload under. Checks the
Python API makes too (:func:`check_traffic`, :func:`parse_objective`, :func:`parse_engines`, :func:`check_max_shapes`,
:func:`check_measure_conflicts`) live here, so ``decodecalc.tune`` and the command refuse the same things in the same
words. Nothing here reads a file, the network or the GPU; :func:`plan_for` reads the model library.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from decodecalc.errors import ChoiceError, ConfigError
from decodecalc.reports.calibrate_request import TrafficOptions
from decodecalc.reports.tune_types import ENGINES, OBJECTIVES, parse_regression

if TYPE_CHECKING:
    from decodecalc.inputs import Inputs

#: the engines --engine may name: tune searches vLLM and SGLang by default, TensorRT-LLM only when named
ENGINE_CHOICES = (*ENGINES, "trtllm")


@dataclass(frozen=True, kw_only=True)
class TuneTraffic(TrafficOptions):
    """calibrate's traffic options plus the two only tune takes: ``rate`` (--rate: Poisson arrivals for a --requests
    file) and ``draft_acceptance_rate`` (--draft-acceptance-rate, with --num-speculative-tokens)."""

    rate: float | None = None
    draft_acceptance_rate: float | None = None


@dataclass(frozen=True, kw_only=True)
class ServingOptions:
    """The model, the GPU and the engine settings the workload is served under (:class:`decodecalc.api.TuneParams`
    plus the model); strings are the option values (``kv_cache_dtype="auto"``, ``vllm_version="0.34.0"``)."""

    model: str = "llama3-8b"
    tp: int = 1
    gpu: str = "h200"
    sms: int | None = None
    bandwidth: float | None = None  # GB/s
    dtype: str | None = None
    kv_cache_dtype: str = "auto"
    block_size: int = 16
    batch_invariant: bool = False
    cuda_graph: bool = True
    cudagraph_mode: str | None = None
    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    num_speculative_tokens: int = 0
    model_runner: str = "v2"
    max_kv_splits: int | None = None
    static_kv_splits: bool = False
    vllm_version: str = "0.34.0"
    cubins: str | bool = "yes"
    max_model_len: int | None = None

    def params(self) -> dict[str, Any]:
        """Every option but the model, as :func:`base_inputs` takes them."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "model"}


@dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """What tune searches for, and how: --objective, --max-regression, --engine, --heuristics, --rule, --profile,
    --regime, --max-shapes, --exact."""

    objective: str = "mean"
    max_regression: str | float | None = "5%"
    engine: str | None = None
    heuristics: str | None = None
    rule: Path | None = None
    profile: Path | None = None
    regime: str = "back-to-back"
    max_shapes: int | None = None
    exact: bool = False


@dataclass(frozen=True, kw_only=True)
class MeasureOptions:
    """--measure (time on this GPU) or --measured (read a run's saved timings), and what qualifies them."""

    measure: bool = False
    steps: int = 16
    leading: int = 3
    save: Path | None = None
    measured: Path | None = None

    @property
    def wanted(self) -> bool:
        return self.measure or self.measured is not None


@dataclass(frozen=True, kw_only=True)
class TuneRequest:
    """Every option of ``decodecalc tune``. Building one checks them, in the order the command always has: the
    measurement's conflicts, the traffic's, then the search's values (the first problem found is the error)."""

    traffic: TuneTraffic = field(default_factory=TuneTraffic)
    serving: ServingOptions = field(default_factory=ServingOptions)
    search: SearchOptions = field(default_factory=SearchOptions)
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    json_out: bool = False
    output: Path | None = None
    plot: Path | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError (or UnknownNameError) on the first bad option; none reads a file or the GPU."""
        m, t, s = self.measure, self.traffic, self.search
        check_measure_conflicts(measure=m.measure, measured=m.measured, save=m.save)
        check_traffic(steps=t.steps, requests=t.requests, workload=t.workload, metrics=t.metrics,
                      concurrency=t.concurrency, draft_acceptance_rate=t.draft_acceptance_rate,
                      num_speculative_tokens=self.serving.num_speculative_tokens, trace_format=t.trace_format,
                      columns=t.columns, tokenizer=t.tokenizer, max_requests=t.max_requests, arrival_rate=t.rate,
                      metrics_model=t.metrics_model)
        parse_objective(s.objective)
        parse_engines(s.engine)
        from decodecalc.reports.heuristics import select_heuristics

        parse_regression(s.max_regression)
        select_heuristics(s.heuristics, None)  # the names only: --rule's file is read by the runner
        check_max_shapes(s.max_shapes)


def check_measure_conflicts(*, measure: bool, measured: Path | None, save: Path | None) -> None:
    """--measure, --measured and --save-measurements against each other."""
    if measure and measured is not None:
        raise ConfigError("--measure with --measured: either time on this GPU or read saved timings")
    if save is not None and not measure:
        raise ConfigError("--save-measurements applies to --measure")


def check_traffic(*, steps: object = None, requests: object = None, workload: str | None = None,
                  metrics: str | None = None, concurrency: int | None = None,
                  draft_acceptance_rate: float | None = None, num_speculative_tokens: int = 0,
                  trace_format: str | None = None, columns: str | None = None, tokenizer: object = None,
                  max_requests: int | None = None, arrival_rate: float | None = None,
                  metrics_model: str | None = None) -> None:
    """Exactly one workload, and each option that qualifies one given with the kind it qualifies. ``steps`` and
    ``requests`` are a file (str or Path) or, from the Python API, the items themselves."""
    given = [n for n, v in (("--steps", steps), ("--requests", requests), ("--workload", workload),
                            ("--metrics", metrics)) if v is not None]
    if len(given) != 1:
        raise ConfigError("give exactly one workload: --steps FILE, --requests FILE, --workload NAME or --metrics "
                          "FILE|URL" + (f" (got {', '.join(given)})" if given else ""))
    if concurrency is not None and workload is None and metrics is None:
        raise ConfigError("--concurrency applies to --workload and --metrics only (a trace has its own batches)")
    if draft_acceptance_rate is not None and steps is not None:
        raise ConfigError("--draft-acceptance-rate applies to --requests, --workload and --metrics (a step trace has "
                          "its own query_lens)")
    if draft_acceptance_rate is not None and not num_speculative_tokens:
        raise ConfigError("--draft-acceptance-rate needs --num-speculative-tokens k > 0")
    reading = [n for n, v in (("--format", trace_format), ("--columns", columns), ("--tokenizer", tokenizer),
                              ("--max-requests", max_requests), ("--rate", arrival_rate)) if v is not None]
    if reading and not isinstance(requests, (str, Path)):
        raise ConfigError(f"{reading[0]} applies to a --requests file only")
    if metrics_model is not None and metrics is None:
        raise ConfigError("--metrics-model applies to --metrics only")


def parse_objective(objective: object) -> str:
    """--objective as the core's name (an enum member's value, any case)."""
    name = str(getattr(objective, "value", objective)).lower()
    if name not in OBJECTIVES:
        raise ChoiceError(f"--objective {name!r}; valid: {', '.join(OBJECTIVES)}")
    return name


def parse_engines(engine: object) -> tuple[str, ...]:
    """The engines --engine names: both by default, else the one given (trtllm included)."""
    engine = getattr(engine, "value", engine)
    engines = ENGINES if engine is None else (str(engine).lower(),)
    if engines[0] not in ENGINE_CHOICES:
        raise ChoiceError(f"--engine {engine!r}; valid: {', '.join(ENGINE_CHOICES)}")
    return engines


def check_max_shapes(max_shapes: object) -> None:
    if max_shapes is not None and (isinstance(max_shapes, bool) or not isinstance(max_shapes, int) or max_shapes < 1):
        raise ConfigError(f"--max-shapes must be a positive integer, got {max_shapes!r}")


def base_inputs(model: str, **options: Any) -> Inputs:
    """The model, GPU and engine settings tune runs under: one decode token per sequence (1 + k with speculative
    decoding) as the base shape, since the workload's steps replace it."""
    from decodecalc.inputs import build_inputs

    k = int(options.get("num_speculative_tokens", 0) or 0)
    return build_inputs(model=model, batch=1, seq_len=1 + max(k, 0), **options)


@dataclass(frozen=True, kw_only=True)
class TunePlan:
    """A request with its model, GPU and engine options resolved."""

    request: TuneRequest
    inputs: Inputs

    @property
    def context_len(self) -> int | None:
        """The engine's max_model_len (default: the model's context): a request file's longer requests are skipped."""
        return self.inputs.max_model_len or self.inputs.work.model.context_length


def plan_for(request: TuneRequest) -> TunePlan:
    """The plan of ``request``: the model (library, HF config or YAML), the GPU and each engine option checked and
    resolved (a bad one fails here, in the words every command uses)."""
    serving = request.serving
    return TunePlan(request=request, inputs=base_inputs(serving.model, **serving.params()))
