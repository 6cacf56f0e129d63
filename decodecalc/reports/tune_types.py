"""The types ``decodecalc tune`` passes around: a candidate setting's figures, an engine's result, the workload's
context (steps, timer, population), and the small parsers of the options that name them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from decodecalc.errors import ConfigError
from decodecalc.launchers.sglang_triton import SglangSettings
from decodecalc.launchers.vllm_unified import VllmSettings
from decodecalc.reports.tune_space import EngineCandidate, Option
from decodecalc.reports.tune_stats import Stats, stats
from decodecalc.specs.gpus import GPUSpec
from decodecalc.timemodel import TimeProfile
from decodecalc.workload import Workload

if TYPE_CHECKING:
    from decodecalc.batch.arrays import FloatArray
    from decodecalc.batch.evaluator import WorkloadTimer
    from decodecalc.batch.population import Population
    from decodecalc.batch.stats import QueryKeys
    from decodecalc.batch.steps import StepArrays
    from decodecalc.timemodel.accuracy import ExpectedError

ENGINES = ("vllm", "sglang")
OBJECTIVES = ("mean", "p99")


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


#: the quantile of the per-step time ratio (candidate / default, weighted by steps) the guard holds to its tolerance
GUARD_QUANTILE = 0.99
#: predicted objectives within this fraction of the best are a tie (twice the sampled day's estimate error, far below
#: the model's own): the tie goes to the default, then to less split-K scratch, then to fewer programs
TIE_FRACTION = 0.002


@dataclass(frozen=True, slots=True, kw_only=True)
class Guard:
    """What a candidate may cost on the steps it slows, against the engine's default: the ``quantile`` of its per-step
    time ratio (weighted by steps) at most ``1 + tolerance``, where the tolerance is ``--max-regression`` plus the
    time model's median error of one launch of this kernel and layout (a predicted slowdown smaller than that is
    within the model's noise). A quantile, not the single worst step: on a sampled or million-step workload the
    worst step is a lottery."""

    max_regression: float
    model_error: float  # the profile's median launch error (0 without one)
    model_error_p90: float | None = None
    model_error_source: str = ""
    quantile: float = GUARD_QUANTILE

    @property
    def tolerance(self) -> float:
        return self.max_regression + self.model_error

    def allows(self, ratio_at_quantile: float) -> bool:
        return ratio_at_quantile <= 1.0 + self.tolerance + 1e-12

    def label(self) -> str:
        """The table title's: the tolerance (the rule line under the table says at which quantile)."""
        return f"{self.tolerance:.1%}"

    def rule(self) -> str:
        err = (f"the time model's median launch error {self.model_error:.1%} ({self.model_error_source})"
               if self.model_error_source else "no launch error in the profile (0)")
        return (f"a setting is eligible when {self.quantile:.0%} of the steps (weighted) are at most "
                f"{self.tolerance:.1%} slower than under the default: --max-regression {self.max_regression:.0%} plus "
                f"{err}")

    def to_dict(self) -> dict[str, Any]:
        return {"rule": f"p{self.quantile * 100:g} of the per-step time ratio to the default (weighted by steps) <= "
                        "1 + tolerance", "quantile": self.quantile, "max_regression": self.max_regression,
                "model_error": self.model_error, "model_error_p90": self.model_error_p90,
                "model_error_source": self.model_error_source or None, "tolerance": self.tolerance,
                "text": self.rule(),
                "ties": {"within": TIE_FRACTION, "order": ["the default", "less split-K scratch",
                                                          "fewer programs (smaller split settings)"]}}


@dataclass(frozen=True, slots=True)
class Candidate:
    engine: str
    setting: EngineCandidate  # the knobs (to_dict(): as the JSON shows them)
    label: str
    times: FloatArray  # per step, one layer, seconds
    stats: Stats
    worst_ratio: float = 1.0  # max over steps of time / default time
    allowed: bool = True
    score: Stats | None = None  # the same statistics of the ranking score
    steps_2d: int | None = None  # vLLM: steps (weighted) whose launch runs the 2D kernel (no KV split)
    scratch_bytes: int = 0  # split-K scratch the setting allocates
    rel_se: float = 0.0  # estimated standard error of total_s, relative (0: every step timed exactly)
    worst_exact: bool = True  # the worst step's ratio is the scalar model's, not an estimate
    #: timed on the first, small sample of a large workload only (kept in the JSON: every candidate is measured on the
    #: measuring steps since the anchors go through the compiled dispatch, so this is False)
    sampled: bool = False
    #: the guard's quantile of the per-step time ratio to the default (weighted by steps)
    ratio_quantile: float = 1.0
    #: the share of steps (weighted) slower than the default by more than the guard's tolerance
    share_over: float = 0.0
    #: picked over candidates within TIE_FRACTION of its predicted objective (less scratch, fewer programs)
    tie_break: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = {"setting": self.setting.to_dict(), "label": self.label, **self.stats.to_dict(),
             "worst_step_vs_default": self.worst_ratio, "within_guard": self.allowed,
             "scratch_bytes": self.scratch_bytes, "total_rel_se": self.rel_se, "sampled": self.sampled,
             "step_ratio_quantile": self.ratio_quantile, "share_steps_over_tolerance": self.share_over}
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
    #: why the workload lies outside the profile's measured domain for this engine's kernel (timemodel.domain)
    domain_warnings: tuple[str, ...] = ()
    #: the error the totals are likely to have (timemodel.accuracy, of="workload total"); None without evidence
    expected_error: ExpectedError | None = None
    guard: Guard | None = None  # None: --max-regression none

    @property
    def saving_vs_default(self) -> float:
        """The share of the default's total the best setting saves (negative: it costs more)."""
        return 1.0 - self.best.stats.total_s / self.default.stats.total_s

    def to_dict(self) -> dict[str, Any]:
        short = ("setting", "mean_step_s", "p99_step_s", "total_s", "scratch_bytes")

        def pick(c: Candidate) -> dict[str, Any]:
            return {k: v for k, v in c.to_dict().items() if k in short} | {"label": c.label}

        return {"default": pick(self.default), "best": pick(self.best),
                "candidates": [c.to_dict() for c in self.candidates], "apply": list(self.apply),
                "apply_commands": list(self.apply_commands),
                "calibrated": self.calibrated, "attention_s_per_1k_tokens": dict(self.attention_s_per_1k_tokens),
                "saving_vs_default": self.saving_vs_default,
                "steps": self.changes, "range": self.range_note, "edge_of_range": self.edge_note or None,
                "left_out": list(self.left_out), "domain_warnings": list(self.domain_warnings),
                "guard": self.guard.to_dict() if self.guard is not None else None,
                "tie_break": self.best.tie_break or None,
                **({"predicted_error": self.expected_error.to_json()} if self.expected_error is not None else {})}


@dataclass(frozen=True, slots=True, kw_only=True)
class TuneContext:
    """Everything the search and the heuristics share: the workload's steps as arrays, the timer."""

    steps: StepArrays
    summary: dict[str, Any]  # the JSON's workload block
    work: Workload  # base per-rank shape (model, heads, dtypes); lengths come from the steps
    gpu: GPUSpec
    profile: TimeProfile
    vllm: VllmSettings
    sglang: SglangSettings
    timer: WorkloadTimer
    query_keys: QueryKeys
    max_seq_len: int
    memo: dict = field(default_factory=dict)  # per-workload results shared by candidates (vLLM's gate per threshold)
    sample: TuneContext | None = None  # a large workload's sample (every candidate is ranked on it first)
    population: Population | None = None  # when ``steps`` sample a larger workload
    #: the server's XQA / trtllm-gen cubins and max_model_len (--cubins, --max-model-len): which kernels an engine's
    #: FlashInfer backend runs, and XQA's block-table width
    cubins: bool = True
    max_model_len: int | None = None

    def policy_options(self) -> Any:
        """The launchers' PolicyOptions of this workload's engine settings."""
        from decodecalc.launchers.registry import PolicyOptions

        return PolicyOptions(vllm=self.vllm, sglang=self.sglang, cubins=self.cubins, max_model_len=self.max_model_len)

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


def objective_value(st: Stats, objective: str) -> float:
    return st.p99_step_s if objective == "p99" else st.mean_step_s
