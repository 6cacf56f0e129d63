"""`decodecalc calibrate`: fit the time model on the local GPU and save a profile."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from decodecalc.commands.options import SglangSrcOpt, VllmSrcOpt, handle_errors
from decodecalc.errors import ConfigError

GpuOpt = Annotated[str, typer.Option("--gpu", "-g", help="Which GPU of `decodecalc gpus` this is (the profile's name).")]
QuickOpt = Annotated[bool, typer.Option("--quick", help="Three shapes instead of ten (about a third of the time).")]
ThoroughOpt = Annotated[bool, typer.Option("--thorough", help="Ten head layouts x five batches x 11 split counts "
                                           "(550 timings, several minutes): a fit that needs no starting profile.")]
OutOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Profile file to write (default: <gpu>.yaml "
                                                "in $XDG_CONFIG_HOME/decodecalc/profiles).")]
RowsOpt = Annotated[Optional[Path], typer.Option("--save-measurements", help="Also write the raw timings (JSON).")]
ScratchOpt = Annotated[bool, typer.Option("--from-scratch", help="Start the fit from neutral values instead of the "
                                          "packaged profile's (nothing fitted to another timing).")]
FromOpt = Annotated[Optional[Path], typer.Option("--from-measurements", help="No GPU: fit the timings a calibration "
                                                 "saved with --save-measurements.")]
ModelsOpt = Annotated[Optional[list[str]], typer.Option(
    "--model", "-m", metavar="<str>",
    help="Also time this model's head layout per rank (40 timings; repeat for several models): the map gets cells of "
         "its own.")]
TpOpt = Annotated[int, typer.Option("--tp", help="Tensor-parallel degree of --model (its heads per rank).")]
KeepOpt = Annotated[bool, typer.Option("--keep-physics", help="Time --model's layouts only and fit nothing: keep the "
                                       "starting profile and add their map cells (about 20 s).")]


def register(app: typer.Typer) -> None:
    @app.command()
    @handle_errors
    def calibrate(
        gpu: GpuOpt = "h200",
        quick: QuickOpt = False,
        thorough: ThoroughOpt = False,
        output: OutOpt = None,
        vllm_src: VllmSrcOpt = None,
        sglang_src: SglangSrcOpt = None,
        save_measurements: RowsOpt = None,
        from_scratch: ScratchOpt = False,
        from_measurements: FromOpt = None,
        model: ModelsOpt = None,
        tp: TpOpt = 1,
        keep_physics: KeepOpt = False,
    ) -> None:
        """Time the real vLLM and SGLang decode kernels on this GPU (a few minutes), fit the time model and save
        the profile that `recommend`, `grid` and `compare` then use."""
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from decodecalc.verify.calibration import cuda_or_error, run_calibration
        from decodecalc.commands.output import to_json, write_atomic
        from decodecalc.specs.gpus import resolve_gpu
        from decodecalc.timemodel import datasheet_profile, packaged_profile, user_profile_dir
        from decodecalc.timemodel.calibration_fit import calibration_from_measurements, neutral_start
        from decodecalc.yamlio import load_json_file

        if quick and thorough:
            raise ConfigError("--quick with --thorough: choose one (three shapes, or fifty)")
        if keep_physics and (from_scratch or quick or thorough):
            raise ConfigError("--keep-physics with --from-scratch, --quick or --thorough: --keep-physics fits nothing")
        if keep_physics and not model and from_measurements is None:
            raise ConfigError("--keep-physics needs --model: it times only the models' own head layouts")
        layouts = [_layout(m, tp) for m in model or ()]
        spec = resolve_gpu(gpu)
        dest = output or (user_profile_dir() / f"{spec.name}.yaml")
        from decodecalc.commands.output import check_writable

        for path, option in ((output, "--output"), (save_measurements, "--save-measurements")):
            if path is not None:  # before minutes of timing
                check_writable(path, option)
        # start from the packaged profile of this GPU (or the H200's figures), never from an old user file
        base = packaged_profile(spec.name) or datasheet_profile(spec)
        note = "the starting profile's"
        if from_scratch:
            base, note = neutral_start(base), "the packaged profile's"
        if from_measurements is not None:
            if save_measurements is not None:
                raise ConfigError("--save-measurements with --from-measurements: the timings are already saved")
            if layouts:
                raise ConfigError("--model with --from-measurements: the saved timings say which layouts were timed")
            data = load_json_file(from_measurements, "calibration measurements")
            prof = calibration_from_measurements(data, gpu=spec, base=base, source=str(from_measurements),
                                                 start_note=note, keep_physics=keep_physics, cold=from_scratch)
            _written(dest, prof)
            return
        cuda_or_error()  # a clear error before any progress bar
        console = Console(stderr=True)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=False) as bar:
            task = bar.add_task("loading kernels", total=None)

            def progress(done: int, total: int, what: str) -> None:
                bar.update(task, completed=done, total=total, description=what)

            def measured(data: dict[str, Any]) -> None:
                # saved before the fit starts: everything --from-measurements needs to fit them again without the GPU
                if save_measurements is not None:
                    write_atomic(save_measurements, to_json({"gpu": spec.name, **data}) + "\n")
                bar.update(task, description="fitting")

            prof, _ = run_calibration(spec, base=base, quick=quick, vllm_src=vllm_src, sglang_src=sglang_src,
                                      progress=progress, start_note=note, thorough=thorough, measured=measured,
                                      layouts=layouts, keep_physics=keep_physics, cold=from_scratch)
        _written(dest, prof)


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


def _written(dest: Path, prof: Any) -> None:
    from decodecalc.commands.output import write_atomic
    from decodecalc.timemodel import dump_profile

    dest.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(dest, dump_profile(prof))
    fit = prof.fit
    typer.echo(f"wrote {dest}: {fit.get('rows')} timings, fit median error {fit.get('median_abs_err', 0):.1%}, "
               f"90th percentile {fit.get('p90_abs_err', 0):.1%} (the physics alone: "
               f"{fit.get('physics_median_abs_err', 0):.1%}, {fit.get('physics_p90_abs_err', 0):.1%}; the rest is the "
               f"residual map of these timings, in sample)")
