"""What ``decodecalc calibrate`` is asked to do, and the plan it makes of that.

A :class:`CalibrationRequest` holds every calibrate option, typed, and refuses any conflict between them when it is
built (:class:`~decodecalc.errors.ConfigError`, one line naming the options), so a request that exists is one the
runner can carry out. :func:`plan_for` resolves what the options name (the GPU, each ``--model``'s head layout per
rank, the profile's destination) into a :class:`CalibrationPlan`: which phases run, on what. The runner
(``decodecalc/commands/calibrate_run.py``) executes a plan; the GPU half of it lives in ``decodecalc/verify``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from decodecalc.errors import ConfigError
from decodecalc.specs.gpus import GPUSpec
from decodecalc.timemodel.backend_fit import parse_backends
from decodecalc.timemodel.calibration_fit import DEFAULT_MAP_STEPS, MAX_FOLDS, MAX_MAP_STEPS, MIN_FOLDS

#: the shapes calibrate times with the Triton kernels: --quick (three), the default (ten), --thorough, --grid
Shapes = Literal["quick", "default", "thorough", "grid"]
#: what a calibration does, in the order it does it
Phase = Literal["read measurements", "workload sample", "map steps", "Triton plan", "backends", "fit", "write"]
#: (query heads, KV heads, head dim) per rank: one head layout the Triton GQA kernels are timed on
Layout = tuple[int, int, int]
#: how many steps of a workload --sample-steps may ask for
MAX_SAMPLE_STEPS = 64


@dataclass(frozen=True, kw_only=True)
class TrafficOptions:
    """The traffic a model serves (calibrate --workload / --requests / --steps / --metrics and what qualifies them),
    as :func:`decodecalc.api.load_workload` reads it."""

    workload: str | None = None
    steps: Path | None = None
    requests: Path | None = None
    metrics: str | None = None
    metrics_model: str | None = None
    trace_format: str | None = None
    columns: str | None = None
    tokenizer: Path | None = None
    max_requests: int | None = None
    concurrency: int | None = None

    def given(self) -> tuple[str, ...]:
        """The traffic options given, by flag, in the order the errors name the first of them."""
        return tuple(flag for flag, value in (("--workload", self.workload), ("--requests", self.requests),
                                              ("--steps", self.steps), ("--metrics", self.metrics))
                     if value is not None)

    @property
    def source(self) -> str:
        """The traffic's name in the saved timings and the profile: the preset, or the file or URL."""
        return self.workload or str(self.requests or self.steps or self.metrics)


@dataclass(frozen=True, kw_only=True)
class CalibrationRequest:
    """Every option of ``decodecalc calibrate``. Building one checks the options against each other, in the order
    the command always has (the first conflict found is the error)."""

    gpu: str = "h200"
    quick: bool = False
    thorough: bool = False
    grid: bool = False
    output: Path | None = None
    vllm_src: Path | None = None
    sglang_src: Path | None = None
    save_measurements: Path | None = None
    from_scratch: bool = False
    from_measurements: tuple[Path, ...] = ()
    models: tuple[str, ...] = ()
    tp: int = 1
    keep_physics: bool = False
    traffic: TrafficOptions = field(default_factory=TrafficOptions)
    sample_steps: int | None = None
    backends: str | None = None
    map_steps: int | None = None
    left_out_folds: int = 0

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError on the first conflict between options (none reads a file or the GPU)."""
        quick, keep, backends, map_steps, folds = (self.quick, self.keep_physics, self.backends, self.map_steps,
                                                   self.left_out_folds)
        if sum((quick, self.thorough, self.grid)) > 1:
            raise ConfigError("--quick, --thorough and --grid are three plans: choose one (three shapes, fifty, or "
                              "the 75 of the grid)")
        if keep and (self.from_scratch or quick or self.thorough or self.grid):
            raise ConfigError("--keep-physics with --from-scratch, --quick, --thorough or --grid: --keep-physics fits "
                              "nothing")
        parse_backends(backends)  # a bad name fails before anything is timed
        if keep and backends not in (None, "none"):
            raise ConfigError(f"--backends {backends} with --keep-physics: --keep-physics fits nothing")
        if self.from_measurements and backends is not None:
            raise ConfigError(f"--backends {backends} with --from-measurements: the saved timings say which backends "
                              "were timed")
        if map_steps is not None and not 0 <= map_steps <= MAX_MAP_STEPS:
            raise ConfigError(f"--map-steps {map_steps}: expected an integer in [0, {MAX_MAP_STEPS}]")
        if map_steps and (keep or quick or self.from_measurements):
            what = "--keep-physics" if keep else "--quick" if quick else "--from-measurements"
            raise ConfigError(f"--map-steps {map_steps} with {what}: "
                              + ("the saved timings say which steps were timed" if self.from_measurements else
                                 f"{what} fits no map of its own"))
        if folds and not MIN_FOLDS <= folds <= MAX_FOLDS:
            raise ConfigError(f"--left-out-folds {folds}: expected 0 or an integer in [{MIN_FOLDS}, {MAX_FOLDS}]")
        if folds and keep:
            raise ConfigError(f"--left-out-folds {folds} with --keep-physics: --keep-physics fits nothing")
        if keep and not self.models and not self.from_measurements:
            raise ConfigError("--keep-physics needs --model: it times only the models' own head layouts")
        given = self.traffic.given()
        if given and self.from_measurements:
            raise ConfigError(f"{given[0]} with --from-measurements: the saved timings say which workload was sampled")
        if given and len(self.models) != 1:
            raise ConfigError(f"{given[0]} needs exactly one --model (the model serving that traffic), got "
                              f"{len(self.models)}")
        if self.sample_steps is not None and not given:
            raise ConfigError("--sample-steps applies to a workload (--requests, --steps, --workload or --metrics)")
        if self.sample_steps is not None and not 1 <= self.sample_steps <= MAX_SAMPLE_STEPS:
            raise ConfigError(f"--sample-steps {self.sample_steps}: expected an integer in [1, {MAX_SAMPLE_STEPS}]")
        if self.from_measurements and self.save_measurements is not None:
            raise ConfigError("--save-measurements with --from-measurements: the timings are already saved")
        if self.from_measurements and self.models:
            raise ConfigError("--model with --from-measurements: the saved timings say which layouts were timed")

    @property
    def shapes(self) -> Shapes:
        return "quick" if self.quick else "thorough" if self.thorough else "grid" if self.grid else "default"

    @property
    def map_steps_per_workload(self) -> int:
        """Steps sampled from each reference workload: --map-steps, else DEFAULT_MAP_STEPS with --grid, else none."""
        if self.map_steps is not None:
            return self.map_steps
        return DEFAULT_MAP_STEPS if self.grid else 0

    @property
    def times_backends(self) -> bool:
        """Whether this run times the compiled backends: by default yes; --quick times the Triton kernels' three
        shapes only unless --backends is given (`auto` included: a user who types it asks for them); --keep-physics
        and --from-measurements (the saved timings say) never."""
        if self.from_measurements:
            return False
        return times_backends(self.backends, quick=self.quick, keep_physics=self.keep_physics)


def times_backends(backends: str | None, *, quick: bool, keep_physics: bool) -> bool:
    """:attr:`CalibrationRequest.times_backends` on the three options it reads."""
    if keep_physics or backends == "none":
        return False
    return not quick or backends is not None


@dataclass(frozen=True, kw_only=True)
class WorkloadSampling:
    """``calibrate --model M --workload W``: ``steps`` evenly spaced steps of the traffic, each timed under the
    launches of the settings tune compares for ``model`` at ``tp``; their timings replace the layout's shapes."""

    model: str
    tp: int
    steps: int
    traffic: TrafficOptions


@dataclass(frozen=True, kw_only=True)
class CalibrationPlan:
    """What a calibration will do: the request with what its options name resolved."""

    request: CalibrationRequest
    gpu: GPUSpec
    dest: Path  # the profile written: --output, else <gpu>.yaml in the user's profile folder
    layouts: tuple[Layout, ...]  # --model's head layouts timed with the plan's shapes (none when a workload is sampled)
    workload: WorkloadSampling | None
    map_steps: int  # steps of each reference workload timed for the residual map

    @property
    def phases(self) -> tuple[Phase, ...]:
        req = self.request
        if req.from_measurements:
            return ("read measurements", "fit", "write")
        phases: list[Phase] = ["workload sample"] if self.workload else []
        phases += ["map steps"] if self.map_steps else []
        phases += ["Triton plan", "backends"] if req.times_backends else ["Triton plan"]
        return (*phases, "fit", "write")


def model_layout(model_id: str, tp: int) -> Layout:
    """(query heads, KV heads, head dim) per rank of ``--model`` at ``--tp`` (the engines' Triton GQA kernels)."""
    from decodecalc.specs.models import resolve_model
    from decodecalc.workload import shard_heads

    m = resolve_model(model_id)
    if m.is_mla:
        raise ConfigError(f"--model {model_id}: {m.name} uses MLA, whose decode kernels calibrate does not time; "
                          "valid: a model with grouped-query or multi-head attention")
    h, h_kv = shard_heads(m, tp)
    return h, h_kv, m.head_dim


def plan_for(request: CalibrationRequest) -> CalibrationPlan:
    """The plan of ``request``: each --model's layout (an unknown or MLA model fails here), the GPU, the destination.
    Reads the model library and the user's config folder, nothing else."""
    from decodecalc.reports.step_launches import DEFAULT_SAMPLE_STEPS
    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.timemodel import user_profile_dir

    layouts = tuple(model_layout(m, request.tp) for m in request.models)
    spec = resolve_gpu(request.gpu)
    workload = None
    if request.traffic.given() and request.models:  # exactly one model (validated)
        workload = WorkloadSampling(model=request.models[0], tp=request.tp,
                                    steps=request.sample_steps or DEFAULT_SAMPLE_STEPS, traffic=request.traffic)
        layouts = ()  # the workload's steps replace the layout's calibrate shapes
    return CalibrationPlan(request=request, gpu=spec, dest=request.output or (user_profile_dir() / f"{spec.name}.yaml"),
                           layouts=layouts, workload=workload,
                           map_steps=0 if request.from_measurements else request.map_steps_per_workload)

