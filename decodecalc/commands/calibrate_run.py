"""Carry out a calibration plan (:mod:`decodecalc.reports.calibrate_request`): sample the traffic and the reference
workloads on the CPU, time the kernels on the GPU (``decodecalc.verify``, imported when reached), or refit saved
timings without one, then write the profile. What the run is doing goes to a :class:`CalibrateUI` the caller draws
(the command: rich on stderr; a test: a list), so this module imports no typer or rich.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from decodecalc.errors import ConfigError
from decodecalc.reports.calibrate_request import CalibrationPlan

if TYPE_CHECKING:
    from decodecalc.timemodel.profile import TimeProfile
    from decodecalc.timemodel.step_rows import WorkloadSample

#: the stretches of a run with a progress display of their own: the CPU's sampling of the traffic and of the reference
#: workloads, the refit of saved timings, and the GPU's timing (with the fit that follows it)
Stage = Literal["workload sample", "map steps", "refit", "timing"]


def _nothing(*_: object) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class StageProgress:
    """What one stage reports: ``phase`` names what it does now, ``step`` counts done of total (the timing),
    ``fit`` passes on a line of the fit's own."""

    phase: Callable[[str], None] = _nothing
    step: Callable[[int, int, str], None] = _nothing
    fit: Callable[[str], None] = _nothing


class CalibrateUI(Protocol):
    def note(self, line: str) -> None:
        """A line for the user beside the progress (stderr)."""

    def stage(self, stage: Stage) -> AbstractContextManager[StageProgress]:
        """The progress display of one stage, open while it runs."""


@dataclass(frozen=True, kw_only=True)
class CalibrationOutcome:
    """The profile written and how the run went."""

    profile: TimeProfile
    dest: Path
    left_out_folds: int
    took_s: float | None = None  # from the GPU's first timing to the profile written (None: a refit)
    elapsed: Mapping[str, float] = field(default_factory=dict)  # the device's phases: triton_s, map_s, backends_s


def run_calibration_plan(plan: CalibrationPlan, ui: CalibrateUI) -> CalibrationOutcome:
    """Carry out ``plan``: every file it writes is checked writable first, the traffic is read and sampled before the
    GPU is looked at, and the profile is written only if its own loader takes it."""
    from decodecalc.commands.output import check_writable
    from decodecalc.timemodel.calibration_fit import neutral_start
    from decodecalc.timemodel.profile_sources import prior_profile

    req = plan.request
    for path, option in ((req.output, "--output"), (req.save_measurements, "--save-measurements")):
        if path is not None:  # before minutes of timing
            check_writable(path, option)
    # start from the packaged profile of this GPU (or the H200's figures), never from an old user file
    base = prior_profile(plan.gpu)
    note = "the starting profile's"
    if req.from_scratch:  # (a packaged profile is calibrated; the datasheet fallback is not)
        note = "the packaged profile's" if base.calibrated else "the datasheet fallback's"
        base = neutral_start(base)
    if req.from_measurements:
        prof = _refit(plan, base, note, ui)
        write_profile(plan.dest, prof)
        return CalibrationOutcome(profile=prof, dest=plan.dest, left_out_folds=req.left_out_folds)
    return _measure(plan, base, note, ui)


def _refit(plan: CalibrationPlan, base: TimeProfile, note: str, ui: CalibrateUI) -> TimeProfile:
    """--from-measurements: the saved timings merged, checked and fitted (no GPU)."""
    from decodecalc.limits import MAX_MEASUREMENTS_BYTES, MAX_MEASUREMENTS_VALUES
    from decodecalc.timemodel.calibration_saved import calibration_from_measurements, merge_measurements, saved_timings
    from decodecalc.yamlio import load_json_file

    req, spec = plan.request, plan.gpu
    with ui.stage("refit") as report:  # the fit of 4,000 timings is silent for 20 s: a line from the start
        report.phase("reading the measurements")
        data, source = merge_measurements([(load_json_file(p, "calibration measurements",
                                                           max_bytes=MAX_MEASUREMENTS_BYTES,
                                                           max_values=MAX_MEASUREMENTS_VALUES), str(p))
                                           for p in req.from_measurements])
        if data.get("pending"):  # saved before the backends ran, and the run ended there
            ui.note(f"note: {source} was saved before the compiled backends ran (the run stopped there): "
                    "fitting its Triton timings alone")
        from decodecalc.verify.backend_calibration import record_measurements

        report.phase(f"fitting {saved_timings(data):,} timings")
        return calibration_from_measurements(data, gpu=spec, base=base, source=source, start_note=note,
                                             keep_physics=req.keep_physics, cold=req.from_scratch,
                                             progress=report.fit,
                                             measure_backends=lambda recs: record_measurements(recs, spec),
                                             left_out_folds=req.left_out_folds)


def _measure(plan: CalibrationPlan, base: TimeProfile, note: str, ui: CalibrateUI) -> CalibrationOutcome:
    """The GPU run: the CPU's samples first (a bad trace fails before the GPU is looked at), then the timing and the
    fit, the timings saved (``--save-measurements``) before the fit starts."""
    from decodecalc.verify import backend_calibration, calibration

    req, spec = plan.request, plan.gpu
    sample = None
    if plan.workload is not None:
        with ui.stage("workload sample") as report:
            sample = _workload_sample(plan, report.phase)
    map_samples: list[WorkloadSample] = []
    if plan.map_steps:  # the reference workloads' steps (CPU, seconds): before the GPU
        from decodecalc.reports.step_launches import reference_samples

        with ui.stage("map steps") as report:
            map_samples = reference_samples(spec, base, plan.map_steps, progress=report.phase)
    calibration.cuda_or_error()  # a clear error before any progress bar
    timed_backends: list[str] = []
    skipped: dict[str, str] = {}
    if req.times_backends:
        timed_backends, skipped = backend_calibration.resolve_backends(req.backends)
    if skipped:
        ui.note("backends not timed (their families keep the starting profile's values, uncalibrated): "
                + "; ".join(f"{b}: {why}" for b, why in skipped.items()))
    elapsed: dict[str, float] = {}
    started = time.monotonic()
    with ui.stage("timing") as report:

        def measured(data: dict[str, Any]) -> None:
            # saved before the fit starts: everything --from-measurements needs to fit them again without the GPU
            elapsed.update(data.get("elapsed") or {})
            if req.save_measurements is not None:
                save_measurements(req.save_measurements, {"gpu": spec.name, **data})
            if not data.get("pending"):
                report.phase("fitting")

        prof, _ = calibration.run_calibration(
            spec, base=base, quick=req.quick, vllm_src=req.vllm_src, sglang_src=req.sglang_src, progress=report.step,
            start_note=note, thorough=req.thorough, grid=req.grid, measured=measured, layouts=list(plan.layouts),
            keep_physics=req.keep_physics, cold=req.from_scratch, workload=sample, backends=timed_backends,
            map_samples=map_samples, left_out_folds=req.left_out_folds, fit_progress=report.fit)
    write_profile(plan.dest, prof)
    return CalibrationOutcome(profile=prof, dest=plan.dest, left_out_folds=req.left_out_folds,
                              took_s=time.monotonic() - started, elapsed=elapsed)


def _workload_sample(plan: CalibrationPlan, progress: Callable[[str], None]) -> WorkloadSample:
    """The plan's sampled steps of the user's traffic under the launches of the settings tune compares (from the
    engine defaults: :func:`decodecalc.reports.step_launches.workload_sample`)."""
    from decodecalc.api import load_workload, tune_for, tune_inputs
    from decodecalc.reports.step_launches import workload_sample

    w = plan.workload
    assert w is not None
    t = w.traffic
    progress("reading the workload")
    inputs = tune_inputs(w.model, tp=w.tp, gpu=plan.gpu.name)
    trace = load_workload(steps=t.steps, requests=t.requests, workload=t.workload, metrics=t.metrics,
                          metrics_model=t.metrics_model, concurrency=t.concurrency, trace_format=t.trace_format,
                          columns=t.columns, tokenizer=str(t.tokenizer) if t.tokenizer else None,
                          model_hint=inputs.work.model.hf_id, max_requests=t.max_requests,
                          context_len=inputs.work.model.context_length)
    result = tune_for(inputs, trace, heuristics="none", progress=progress)
    if not result.engines:
        raise ConfigError(f"this workload runs on neither engine's Triton decode kernel ({'; '.join(result.skipped.values())})")
    return workload_sample(result, w.steps, model=w.model, tp=w.tp, source=t.source)


def save_measurements(path: Path, data: Mapping[str, Any]) -> None:
    """``--save-measurements``: the raw timings as JSON, gzip-compressed when the name ends in .gz, written
    atomically (the backends' runs take 2 MB of JSON, 110 kB gzipped)."""
    from decodecalc.commands.output import to_json, write_atomic

    text = to_json(data) + "\n"
    if not path.name.endswith(".gz"):
        write_atomic(path, text)
        return
    import gzip

    packed = gzip.compress(text.encode(), mtime=0)  # mtime 0: the same timings make the same bytes

    def write_packed(tmp: Path) -> None:
        tmp.write_bytes(packed)

    write_atomic(path, write_packed)


def write_profile(dest: Path, prof: TimeProfile) -> None:
    """Write ``prof`` to ``dest`` atomically, if decodecalc would load it back (see :func:`_check_loadable`)."""
    from decodecalc.commands.output import write_atomic
    from decodecalc.timemodel import dump_profile

    text = dump_profile(prof)
    _check_loadable(text, dest, prof.gpu)
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(dest, text)


def _check_loadable(text: str, dest: Path, gpu: str) -> None:
    """Refuse to write a profile that its own loader rejects (timings of 1e-300 us fit numbers past its ranges): that
    file would then break recommend and tune, and cost grid its times, until removed. The loader reads it from a
    scratch copy, exactly as it would read ``dest``."""
    import tempfile

    from decodecalc.timemodel.profile_sources import load_profile_file

    with tempfile.TemporaryDirectory(prefix="decodecalc-") as folder:
        probe = Path(folder) / "profile.yaml"
        probe.write_text(text)
        try:
            load_profile_file(probe, expect_gpu=gpu)
        except ConfigError as exc:
            why = str(exc).replace(f"time profile {probe}: ", "").replace(str(probe), str(dest))
            raise ConfigError(f"{dest} not written: the profile fitted to these timings is one decodecalc would refuse "
                              f"to load ({why}); are the timings microseconds of real launches?") from None
