"""The types ``decodecalc tune`` passes around: a candidate setting's figures, an engine's result, the workload's
context (steps, timer, population), and the small parsers of the options that name them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from decodecalc.errors import ConfigError
from decodecalc.launchers.sglang_triton import SglangSettings
from decodecalc.launchers.vllm_unified import VllmSettings
from decodecalc.reports.tune_space import Option
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


@dataclass(frozen=True, slots=True)
class Candidate:
    engine: str
    setting: Mapping[str, Any]  # the knobs, as the JSON shows them
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
    #: why the workload lies outside the profile's measured domain for this engine's kernel (timemodel.domain)
    domain_warnings: tuple[str, ...] = ()
    #: the error the totals are likely to have (timemodel.accuracy, of="workload total"); None without evidence
    expected_error: ExpectedError | None = None

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
