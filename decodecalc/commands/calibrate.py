"""`decodecalc calibrate`: fit the time model on the local GPU and save a profile.

The command parses its options into a :class:`~decodecalc.reports.calibrate_request.CalibrationRequest` (which
refuses conflicting options), has :mod:`decodecalc.commands.calibrate_run` carry out its plan while this module draws
the progress on stderr, and prints what was written."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from decodecalc.commands.options import SglangSrcOpt, VllmSrcOpt, handle_errors
from decodecalc.commands.tune import (
    ColumnsOpt,
    ConcurrencyOpt,
    FormatOpt,
    MaxRequestsOpt,
    MetricsModelOpt,
    MetricsOpt,
    RequestsOpt,
    StepsOpt,
    TokenizerOpt,
    WorkloadOpt,
)
from decodecalc.reports.calibrate_request import CalibrationRequest, TrafficOptions

if TYPE_CHECKING:
    from decodecalc.commands.calibrate_run import CalibrationOutcome, Stage, StageProgress
    from decodecalc.timemodel.profile import TimeProfile

GpuOpt = Annotated[str, typer.Option("--gpu", "-g", help="Which GPU of `decodecalc gpus` this is (the profile's name).")]
QuickOpt = Annotated[bool, typer.Option("--quick", help="Three shapes instead of ten (about a third of the time).")]
ThoroughOpt = Annotated[bool, typer.Option("--thorough", help="Ten head layouts x five batches x 11 split counts "
                                           "(550 timings, several minutes): a fit that needs no starting profile.")]
GridOpt = Annotated[bool, typer.Option("--grid", help="A quarter of the shapes behind the shipped H200 profile at "
                                      "their static launches (75 shapes, 509 timings, about 3 minutes on an H200), "
                                      "and the map steps of --map-steps: the plan with which a from-scratch fit holds "
                                      "on models it never saw.")]
OutOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Profile file to write (default: <gpu>.yaml "
                                                "in $XDG_CONFIG_HOME/decodecalc/profiles).")]
RowsOpt = Annotated[Optional[Path], typer.Option("--save-measurements", help="Also write the raw timings (JSON; "
                                                  "gzip-compressed when the name ends in .gz).")]
ScratchOpt = Annotated[bool, typer.Option("--from-scratch", help="Start the fit from neutral values instead of the "
                                          "packaged profile's (nothing fitted to another timing).")]
FromOpt = Annotated[Optional[list[Path]], typer.Option(
    "--from-measurements", metavar="<path>",
    help="No GPU: fit the timings a calibration saved with --save-measurements (repeat to fit several runs' timings "
         "together, e.g. one with FlashInfer installed and one with vLLM's FA3).")]
BackendsOpt = Annotated[Optional[str], typer.Option(
    "--backends", metavar="<list>",
    help="Also time the compiled backends and fit their families (bf16 and fp8 KV): auto (default: each of "
         "flashinfer, flashinfer-tc, fa3 that is installed), none, or a comma-separated list. On the H200 the three "
         "took 204 s (FlashInfer's JIT builds included), each family judged on head layouts the fit left out. With "
         "--quick: only when given.")]
MapStepsOpt = Annotated[Optional[int], typer.Option(
    "--map-steps", metavar="<n>",
    help="Steps sampled from each of six reference workloads (Llama-3.1-8B TP1 and 70B TP8 on the chat, long-doc-qa "
         "and agentic presets), each timed under the launches of tune's leading candidates: the residual map's data "
         "besides the plan's timings, as the shipped map's was. Default 16 with --grid (about 1,500 timings), else 0; "
         "0 to 64.")]
ModelsOpt = Annotated[Optional[list[str]], typer.Option(
    "--model", "-m", metavar="<str>",
    help="Also time this model's head layout per rank (40 timings; repeat for several models): the map gets cells of "
         "its own.")]
TpOpt = Annotated[int, typer.Option("--tp", help="Tensor-parallel degree of --model (its heads per rank).")]
KeepOpt = Annotated[bool, typer.Option("--keep-physics", help="Time --model's layouts only and fit nothing: keep the "
                                       "starting profile and add their map cells (about 20 s).")]
FoldsOpt = Annotated[int, typer.Option(
    "--left-out-folds", metavar="<n>",
    help="Also judge the vLLM and SGLang fit on what it did not time: refit it n times, each leaving out a share of "
         "the timed head layouts whole, and once leaving out a quarter of every layout's shapes; their errors are the "
         "± that grid, compare and recommend print (fit.expected_error). n + 1 more fits: about 100 s each on 2 CPUs for "
         "--grid's timings, so best run after the GPU with --from-measurements. 0 (default): none; else 2 to 12.")]
SampleOpt = Annotated[Optional[int], typer.Option("--sample-steps", help="With a workload: how many evenly spaced steps of it to "
                                        "time, each under every launch the engines make for it with their default, "
                                        "tune's pick and the six next best settings (default 6: 66-96 timings, under a "
                                        "minute on the H200).")]


def register(app: typer.Typer) -> None:
    @app.command()
    @handle_errors
    def calibrate(
        gpu: GpuOpt = "h200",
        quick: QuickOpt = False,
        thorough: ThoroughOpt = False,
        grid: GridOpt = False,
        output: OutOpt = None,
        vllm_src: VllmSrcOpt = None,
        sglang_src: SglangSrcOpt = None,
        save_measurements: RowsOpt = None,
        from_scratch: ScratchOpt = False,
        from_measurements: FromOpt = None,
        model: ModelsOpt = None,
        tp: TpOpt = 1,
        keep_physics: KeepOpt = False,
        workload: WorkloadOpt = None,
        steps: StepsOpt = None,
        requests: RequestsOpt = None,
        metrics: MetricsOpt = None,
        metrics_model: MetricsModelOpt = None,
        trace_format: FormatOpt = None,
        columns: ColumnsOpt = None,
        tokenizer: TokenizerOpt = None,
        max_requests: MaxRequestsOpt = None,
        concurrency: ConcurrencyOpt = None,
        sample_steps: SampleOpt = None,
        backends: BackendsOpt = None,
        map_steps: MapStepsOpt = None,
        left_out_folds: FoldsOpt = 0,
    ) -> None:
        """Time the real vLLM and SGLang decode kernels on this GPU (a few minutes), fit the time model and save
        the profile that `recommend`, `grid`, `compare` and `tune` then use. With one --model and its traffic
        (--requests, --steps, --workload or --metrics): time a few sampled steps of it under the launches of the
        settings tune compares, and give the model's head layout map cells of its own from them."""
        from decodecalc.commands.calibrate_run import run_calibration_plan
        from decodecalc.reports.calibrate_request import plan_for

        request = CalibrationRequest(
            gpu=gpu, quick=quick, thorough=thorough, grid=grid, output=output, vllm_src=vllm_src,
            sglang_src=sglang_src, save_measurements=save_measurements, from_scratch=from_scratch,
            from_measurements=tuple(from_measurements or ()), models=tuple(model or ()), tp=tp,
            keep_physics=keep_physics, sample_steps=sample_steps, backends=backends, map_steps=map_steps,
            left_out_folds=left_out_folds,
            traffic=TrafficOptions(workload=workload, steps=steps, requests=requests, metrics=metrics,
                                   metrics_model=metrics_model, trace_format=trace_format, columns=columns,
                                   tokenizer=tokenizer, max_requests=max_requests, concurrency=concurrency))
        outcome = run_calibration_plan(plan_for(request), _StderrUI())
        _print_outcome(outcome)


class _StderrUI:
    """calibrate's progress on stderr: notes as plain lines, each stage's display while it runs."""

    def note(self, line: str) -> None:
        typer.echo(line, err=True)

    def stage(self, stage: Stage) -> contextlib.AbstractContextManager[StageProgress]:
        if stage == "timing":
            return _timing_bar()
        if stage == "refit":
            return _refit_progress()
        return _sampling_line()


@contextlib.contextmanager
def _timing_bar() -> Iterator[StageProgress]:
    """The GPU's timing: a bar of timings done (kept on screen), then the fit's lines as its description."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from decodecalc.commands.calibrate_run import StageProgress

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task("loading kernels", total=None)
        yield StageProgress(phase=lambda what: bar.update(task, description=what),
                            step=lambda done, total, what: bar.update(task, completed=done, total=total,
                                                                      description=what),
                            fit=lambda line: bar.update(task, description=f"fitting: {line}"))


@contextlib.contextmanager
def _sampling_line() -> Iterator[StageProgress]:
    """The CPU's sampling of a workload's steps: tune's transient line on a terminal, nothing elsewhere."""
    from decodecalc.commands.calibrate_run import StageProgress
    from decodecalc.commands.options import progress_on_stderr

    with progress_on_stderr() as report:
        yield StageProgress(phase=report)


@contextlib.contextmanager
def _refit_progress() -> Iterator[StageProgress]:
    """What --from-measurements is doing, on stderr: on a terminal, a transient line (the phase and the elapsed time)
    from the start, with the fit's own lines printed above it; elsewhere (a pipe, a log) the fit's lines alone."""
    import sys

    from decodecalc.commands.calibrate_run import StageProgress

    if not sys.stderr.isatty():
        yield StageProgress(fit=lambda line: print(f"fitting: {line}", file=sys.stderr, flush=True))
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.text import Text

    with Progress(TextColumn("[dim]calibrate[/]"), BarColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("starting", total=None)

        def fit(line: str) -> None:
            bar.console.print(Text(f"fitting: {line}"))  # kept, above the line
            bar.update(task, description=f"fitting: {line}")

        yield StageProgress(phase=lambda what: bar.update(task, description=what), fit=fit)


def _print_outcome(outcome: CalibrationOutcome) -> None:
    _print_profile(outcome.dest, outcome.profile, folds=bool(outcome.left_out_folds))
    if outcome.took_s is None:  # a refit: no device phases
        return
    took, phases = outcome.took_s, outcome.elapsed
    typer.echo(f"  took {took:.0f} s: the Triton kernels {phases.get('triton_s', 0):.0f} s"
               + (f", the map steps {phases['map_s']:.0f} s" if "map_s" in phases else "")
               + (f", the backends {phases['backends_s']:.0f} s (their JIT compile included)" if "backends_s" in phases
                  else "")
               + f", the fit {took - sum(phases.values()):.0f} s")


def _print_profile(dest: Path, prof: TimeProfile, *, folds: bool) -> None:
    """The profile written: its in-sample fit, this run's left-out figures, the backends' and the workload's."""
    fit = prof.fit
    typer.echo(f"wrote {dest}: {fit.get('rows')} timings, fit median error {fit.get('median_abs_err', 0):.1%}, "
               f"90th percentile {fit.get('p90_abs_err', 0):.1%} (the physics alone: "
               f"{fit.get('physics_median_abs_err', 0):.1%}, {fit.get('physics_p90_abs_err', 0):.1%}; the rest is the "
               f"residual map of these timings, in sample)")
    # this run's left-out figures (a --keep-physics profile keeps its start's, which this run did not measure)
    kernels = ((fit.get("expected_error") or {}).get("kernels") or {}) if folds else {}
    for kernel in ("vllm", "sglang"):
        for kind, what in (("new_layout", "head layouts left out"), ("fitted_layout", "shapes left out")):
            f = (kernels.get(kernel) or {}).get(kind)
            if f:
                typer.echo(f"  {kernel}, {what}: {f['median_abs_err']:.1%} median, {f['p90_abs_err']:.1%} p90 on "
                           f"{f['rows']} timings of {f['layouts']} layouts (out of sample: the ± of its predictions)")
    cal = fit.get("backend_calibration")
    if cal:
        fams = cal["families"]
        typer.echo(f"  backends: {cal['source'].split(': ', 1)[-1]}; each judged out of sample, by a fit that left its head "
                   f"layout out ({len(cal['left_out_folds'])} folds: {'; '.join(cal['left_out_folds'])}):")
        for fam, r in fams.items():
            lo = r["left_out"]
            where = (f"{lo['median_abs_err']:.1%} median, {lo['p90_abs_err']:.1%} p90 on {lo['rows']} runs of {r['layouts']} layouts"
                     if lo.get("rows") else "no left-out run")
            typer.echo(f"    {fam} ({r['kernel']}, {r['rows']} runs): {where} -> "
                       f"{'calibrated' if r['calibrated'] else 'uncalibrated'}")
        for b, r in (cal.get("failed") or {}).items():
            fitted = any(f["kernel"] == b for f in fams.values())
            typer.echo(f"    {b}: {r['runs']} runs failed" + ("" if fitted else ", none fitted: its families keep the "
                                                                "starting profile's values, uncalibrated")
                       + f"; the first: {r['first_error']}")
    wl = fit.get("workload")
    if wl:
        typer.echo(f"  {wl['source']} ({wl['model']} TP{wl['tp']}): {wl['timings']} timings of {len(wl['sampled_steps'])} "
                   f"sampled steps of {wl['steps']:,}; median error on them {wl['median_abs_err_before']:.1%} before "
                   f"the layout cells, {wl['median_abs_err_after']:.1%} after (in sample)")
