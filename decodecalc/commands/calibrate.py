"""`decodecalc calibrate`: fit the time model on the local GPU and save a profile."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from pathlib import Path
from typing import Annotated, Any, Optional

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
from decodecalc.errors import ConfigError
from decodecalc.timemodel.calibration_fit import DEFAULT_MAP_STEPS, MAX_FOLDS, MAX_MAP_STEPS, MIN_FOLDS

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
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from decodecalc.verify.calibration import cuda_or_error, run_calibration
        from decodecalc.commands.output import to_json, write_atomic
        from decodecalc.specs.gpus import resolve_gpu
        from decodecalc.timemodel import user_profile_dir
        from decodecalc.timemodel.profile_sources import prior_profile
        from decodecalc.timemodel.calibration_fit import neutral_start
        from decodecalc.timemodel.calibration_saved import calibration_from_measurements
        from decodecalc.yamlio import load_json_file

        if sum((quick, thorough, grid)) > 1:
            raise ConfigError("--quick, --thorough and --grid are three plans: choose one (three shapes, fifty, or "
                              "the 75 of the grid)")
        if keep_physics and (from_scratch or quick or thorough or grid):
            raise ConfigError("--keep-physics with --from-scratch, --quick, --thorough or --grid: --keep-physics fits "
                              "nothing")
        from decodecalc.timemodel.backend_fit import parse_backends

        parse_backends(backends)  # a bad name fails before anything is timed
        if keep_physics and backends not in (None, "none"):
            raise ConfigError(f"--backends {backends} with --keep-physics: --keep-physics fits nothing")
        if from_measurements and backends is not None:
            raise ConfigError(f"--backends {backends} with --from-measurements: the saved timings say which backends "
                              "were timed")
        if map_steps is not None and not 0 <= map_steps <= MAX_MAP_STEPS:
            raise ConfigError(f"--map-steps {map_steps}: expected an integer in [0, {MAX_MAP_STEPS}]")
        if map_steps and (keep_physics or quick or from_measurements):
            what = "--keep-physics" if keep_physics else "--quick" if quick else "--from-measurements"
            raise ConfigError(f"--map-steps {map_steps} with {what}: "
                              + ("the saved timings say which steps were timed" if from_measurements else
                                 f"{what} fits no map of its own"))
        if left_out_folds and not MIN_FOLDS <= left_out_folds <= MAX_FOLDS:
            raise ConfigError(f"--left-out-folds {left_out_folds}: expected 0 or an integer in [{MIN_FOLDS}, {MAX_FOLDS}]")
        if left_out_folds and keep_physics:
            raise ConfigError(f"--left-out-folds {left_out_folds} with --keep-physics: --keep-physics fits nothing")
        k_map = (map_steps if map_steps is not None else DEFAULT_MAP_STEPS if grid else 0)
        if keep_physics and not model and not from_measurements:
            raise ConfigError("--keep-physics needs --model: it times only the models' own head layouts")
        given = [n for n, v in (("--workload", workload), ("--requests", requests), ("--steps", steps),
                                ("--metrics", metrics)) if v is not None]
        if given and from_measurements:
            raise ConfigError(f"{given[0]} with --from-measurements: the saved timings say which workload was sampled")
        if given and len(model or ()) != 1:
            raise ConfigError(f"{given[0]} needs exactly one --model (the model serving that traffic), got "
                              f"{len(model or ())}")
        if sample_steps is not None and not given:
            raise ConfigError("--sample-steps applies to a workload (--requests, --steps, --workload or --metrics)")
        if sample_steps is not None and not 1 <= sample_steps <= 64:
            raise ConfigError(f"--sample-steps {sample_steps}: expected an integer in [1, 64]")
        layouts = [_layout(m, tp) for m in model or ()]
        spec = resolve_gpu(gpu)
        dest = output or (user_profile_dir() / f"{spec.name}.yaml")
        from decodecalc.commands.output import check_writable

        for path, option in ((output, "--output"), (save_measurements, "--save-measurements")):
            if path is not None:  # before minutes of timing
                check_writable(path, option)
        # start from the packaged profile of this GPU (or the H200's figures), never from an old user file
        base = prior_profile(spec)
        note = "the starting profile's"
        if from_scratch:  # (a packaged profile is calibrated; the datasheet fallback is not)
            note = "the packaged profile's" if base.calibrated else "the datasheet fallback's"
            base = neutral_start(base)
        if from_measurements:
            if save_measurements is not None:
                raise ConfigError("--save-measurements with --from-measurements: the timings are already saved")
            if layouts:
                raise ConfigError("--model with --from-measurements: the saved timings say which layouts were timed")
            from decodecalc.timemodel.calibration_saved import merge_measurements

            from decodecalc.limits import MAX_MEASUREMENTS_BYTES, MAX_MEASUREMENTS_VALUES

            from decodecalc.timemodel.calibration_saved import saved_timings

            with _refit_progress() as report:  # the fit of 4,000 timings is silent for 20 s: a line from the start
                report("reading the measurements", fit=False)
                data, source = merge_measurements([(load_json_file(p, "calibration measurements",
                                                                   max_bytes=MAX_MEASUREMENTS_BYTES,
                                                                   max_values=MAX_MEASUREMENTS_VALUES), str(p))
                                                   for p in from_measurements])
                if data.get("pending"):  # saved before the backends ran, and the run ended there
                    typer.echo(f"note: {source} was saved before the compiled backends ran (the run stopped there): "
                               "fitting its Triton timings alone", err=True)
                from decodecalc.verify.backend_calibration import record_measurements

                report(f"fitting {saved_timings(data):,} timings", fit=False)
                prof = calibration_from_measurements(data, gpu=spec, base=base, source=source, start_note=note,
                                                     keep_physics=keep_physics, cold=from_scratch,
                                                     progress=report,
                                                     measure_backends=lambda recs: record_measurements(recs, spec),
                                                     left_out_folds=left_out_folds)
            _written(dest, prof, folds=bool(left_out_folds))
            return
        sample = None
        if given and model:  # the traffic first: a bad file fails before the GPU is looked at (one --model: above)
            from decodecalc.commands.options import progress_on_stderr
            from decodecalc.reports.step_launches import DEFAULT_SAMPLE_STEPS

            with progress_on_stderr() as report:
                sample = _workload_sample(model[0], tp, spec.name, sample_steps or DEFAULT_SAMPLE_STEPS,
                                          workload=workload, steps=steps,
                                          requests=requests, metrics=metrics, metrics_model=metrics_model,
                                          trace_format=trace_format, columns=columns, tokenizer=tokenizer,
                                          max_requests=max_requests, concurrency=concurrency, progress=report)
            layouts = []  # the workload's steps replace the layout's calibrate shapes
        map_samples = []
        if k_map and not from_measurements:  # the reference workloads' steps (CPU, seconds): before the GPU
            from decodecalc.commands.options import progress_on_stderr
            from decodecalc.reports.step_launches import reference_samples

            with progress_on_stderr() as report:
                map_samples = reference_samples(spec, base, k_map, progress=report)
        cuda_or_error()  # a clear error before any progress bar
        from decodecalc.verify.backend_calibration import resolve_backends

        timed_backends: list[str] = []
        skipped: dict[str, str] = {}
        if times_backends(backends, quick=quick, keep_physics=keep_physics):
            timed_backends, skipped = resolve_backends(backends)
        if skipped:
            typer.echo("backends not timed (their families keep the starting profile's values, uncalibrated): "
                       + "; ".join(f"{b}: {why}" for b, why in skipped.items()), err=True)
        console = Console(stderr=True)
        phases: dict[str, float] = {}
        started = time.monotonic()
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=False) as bar:
            task = bar.add_task("loading kernels", total=None)

            def progress(done: int, total: int, what: str) -> None:
                bar.update(task, completed=done, total=total, description=what)

            def measured(data: dict[str, Any]) -> None:
                # saved before the fit starts: everything --from-measurements needs to fit them again without the GPU
                phases.update(data.get("elapsed") or {})
                if save_measurements is not None:
                    text = to_json({"gpu": spec.name, **data}) + "\n"
                    if save_measurements.name.endswith(".gz"):  # the backends' runs take 2 MB of JSON, 110 kB gzipped
                        import gzip

                        packed = gzip.compress(text.encode(), mtime=0)
                        def write_packed(tmp: Path) -> None:
                            tmp.write_bytes(packed)

                        write_atomic(save_measurements, write_packed)
                    else:
                        write_atomic(save_measurements, text)
                if not data.get("pending"):
                    bar.update(task, description="fitting")

            prof, _ = run_calibration(spec, base=base, quick=quick, vllm_src=vllm_src, sglang_src=sglang_src,
                                      progress=progress, start_note=note, thorough=thorough, grid=grid,
                                      measured=measured,
                                      layouts=layouts, keep_physics=keep_physics, cold=from_scratch, workload=sample,
                                      backends=timed_backends, map_samples=map_samples, left_out_folds=left_out_folds,
                                      fit_progress=lambda line: bar.update(task, description=f"fitting: {line}"))
        _written(dest, prof, folds=bool(left_out_folds))
        took = time.monotonic() - started
        typer.echo(f"  took {took:.0f} s: the Triton kernels {phases.get('triton_s', 0):.0f} s"
                   + (f", the map steps {phases['map_s']:.0f} s" if "map_s" in phases else "")
                   + (f", the backends {phases['backends_s']:.0f} s (their JIT compile included)" if "backends_s" in phases
                      else "")
                   + f", the fit {took - sum(phases.values()):.0f} s")


def times_backends(backends: str | None, *, quick: bool, keep_physics: bool) -> bool:
    """Whether this run times the compiled backends: by default yes; --quick times the Triton kernels' three shapes
    only unless --backends is given (`auto` included: a user who types it asks for them); --keep-physics never."""
    if keep_physics or backends == "none":
        return False
    return not quick or backends is not None


def _layout(model_id: str, tp: int) -> tuple[int, int, int]:
    """(query heads, KV heads, head dim) per rank of ``--model`` at ``--tp`` (the engines' Triton GQA kernels)."""
    from decodecalc.specs.models import resolve_model
    from decodecalc.workload import shard_heads

    m = resolve_model(model_id)
    if m.is_mla:
        raise ConfigError(f"--model {model_id}: {m.name} uses MLA, whose decode kernels calibrate does not time; "
                          "valid: a model with grouped-query or multi-head attention")
    h, h_kv = shard_heads(m, tp)
    return h, h_kv, m.head_dim


def _workload_sample(model_id: str, tp: int, gpu: str, k: int, *, workload: str | None, steps: Path | None,
                     requests: Path | None, metrics: str | None, metrics_model: str | None, trace_format: str | None,
                     columns: str | None, tokenizer: Path | None, max_requests: int | None,
                     concurrency: int | None, progress: Any = None) -> Any:
    """``k`` sampled steps of the user's traffic under the launches of the settings tune compares (from the engine
    defaults: :func:`decodecalc.reports.step_launches.workload_sample`)."""
    from decodecalc.api import load_workload, tune_for, tune_inputs
    from decodecalc.reports.step_launches import workload_sample

    _layout(model_id, tp)  # MLA is refused here too
    if progress:
        progress("reading the workload")
    inputs = tune_inputs(model_id, tp=tp, gpu=gpu)
    trace = load_workload(steps=steps, requests=requests, workload=workload, metrics=metrics,
                          metrics_model=metrics_model, concurrency=concurrency,
                          trace_format=trace_format, columns=columns, tokenizer=str(tokenizer) if tokenizer else None,
                          model_hint=inputs.work.model.hf_id, max_requests=max_requests,
                          context_len=inputs.work.model.context_length)
    result = tune_for(inputs, trace, heuristics="none", progress=progress)
    if not result.engines:
        raise ConfigError(f"this workload runs on neither engine's Triton decode kernel ({'; '.join(result.skipped.values())})")
    source = workload or str(requests or steps or metrics)
    return workload_sample(result, k, model=model_id, tp=tp, source=source)


@contextlib.contextmanager
def _refit_progress() -> Iterator[Callable[..., None]]:
    """What --from-measurements is doing, on stderr: on a terminal, a transient line (the phase and the elapsed time)
    from the start, with the fit's own lines printed above it; elsewhere (a pipe, a log) the fit's lines alone.
    ``report(what, fit=True)``: ``fit=False`` names a phase without printing a line of its own."""
    import sys

    lines = _fit_lines()
    if not sys.stderr.isatty():
        yield lambda what, fit=True: lines(what) if fit else None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.text import Text

    with Progress(TextColumn("[dim]calibrate[/]"), BarColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("starting", total=None)

        def report(what: str, fit: bool = True) -> None:
            if fit:
                bar.console.print(Text(f"fitting: {what}"))  # kept, above the line
            bar.update(task, description=f"fitting: {what}" if fit else what)

        yield report


def _fit_lines() -> Any:
    """A fit's progress lines on stderr (the backends' families take a minute or two to fit)."""
    import sys

    return lambda line: print(f"fitting: {line}", file=sys.stderr, flush=True)


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


def _written(dest: Path, prof: Any, *, folds: bool = False) -> None:
    from decodecalc.commands.output import write_atomic
    from decodecalc.timemodel import dump_profile

    text = dump_profile(prof)
    _check_loadable(text, dest, prof.gpu)
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(dest, text)
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
