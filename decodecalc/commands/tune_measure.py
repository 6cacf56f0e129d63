"""``tune --measure`` / ``--measured``: the command's half (options, the timings file, Ctrl-C); the plan and the totals
are :mod:`decodecalc.reports.tune_measure`'s, the GPU runs :mod:`decodecalc.verify.tune_measure`'s."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from decodecalc.errors import ConfigError, DecodecalcError

MEASURE = "Measure on this GPU"
MeasureOpt = Annotated[bool, typer.Option("--measure", help="Time the default, the pick, the next best candidates and "
                                          "each backend the engine could run on this GPU for sampled steps of the "
                                          "workload (CUDA graphs, the engines' own kernels) and print the measured "
                                          "totals beside the predicted ones; the pick follows the measurement where "
                                          "the two disagree beyond the sample's error. Needs torch with CUDA and the "
                                          "engines' kernels (README, 'verify on a GPU').", rich_help_panel=MEASURE)]
MeasureStepsOpt = Annotated[int, typer.Option("--measure-steps", help="With --measure: sampled steps (2-256; "
                                              "more narrows the interval).", rich_help_panel=MEASURE)]
MeasureLeadingOpt = Annotated[int, typer.Option("--measure-leading", help="With --measure: candidates per engine "
                                                "timed besides the default and the pick.", rich_help_panel=MEASURE)]
SaveTimingsOpt = Annotated[Optional[Path], typer.Option("--save-measurements", help="With --measure: the timings "
                                                        "file, rewritten after every step so that Ctrl-C keeps what "
                                                        "was measured (default: decodecalc-measure-<time>.json here).",
                                                        rich_help_panel=MEASURE)]
MeasuredOpt = Annotated[Optional[Path], typer.Option("--measured", help="No GPU: summarise the timings a --measure "
                                                     "run saved (the same workload and options).",
                                                     rich_help_panel=MEASURE)]


def check_measured_file(measured: Path | None) -> None:
    """--measured names a file, before any work (its conflicts with the other options are the request's:
    decodecalc/reports/tune_request.py)."""
    if measured is not None and not measured.is_file():
        raise ConfigError(f"--measured {measured}: no such file")


def default_timings_path() -> Path:
    return Path(f"decodecalc-measure-{time.strftime('%Y%m%d-%H%M%S')}.json")


def measure(result: Any, *, steps: int, leading: int, save: Path | None, measured: Path | None, source: str,
            report: Any) -> Any:
    """The MeasuredTune of ``result``: timed here (``save``: the timings file), or from ``measured``'s timings."""
    from decodecalc.commands.output import write_atomic
    from decodecalc.reports.tune_measure import check_saved, plan_measurement, summarize_measurement, timings_doc

    plan = plan_measurement(result, steps=steps, leading=leading, source=source)
    if measured is not None:
        try:
            doc = json.loads(measured.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"--measured {measured}: not JSON ({exc})") from None
        return summarize_measurement(plan, check_saved(plan, doc, f"--measured {measured}"),
                                     device=str(doc.get("device", "")), saved_to=str(measured))
    from decodecalc.verify.tune_measure import preflight, run_measurement

    path = save or default_timings_path()
    report("checking the GPU and the engines' kernels")
    preflight(plan, result.ctx.gpu)  # within seconds: torch, CUDA, the GPU, the kernels' sources
    device = _device_name()
    rows_so_far: list[dict[str, Any]] = []

    def keep(rows: list[dict[str, Any]]) -> None:
        rows_so_far[:] = rows
        write_atomic(path, json.dumps(timings_doc(plan, rows, device=device, complete=False)) + "\n")

    t0 = time.monotonic()
    try:
        rows = run_measurement(plan, result.ctx.gpu, save=keep,
                               progress=lambda k, n, what: report(f"measuring {k}/{n}: {what}"))
    except KeyboardInterrupt:
        if rows_so_far:
            print(f"interrupted: {len(rows_so_far)} timings so far kept in {path} (tune --measured {path} "
                  "summarises them)", file=sys.stderr)
        raise
    write_atomic(path, json.dumps(timings_doc(plan, rows, device=device, complete=True)) + "\n")
    if not any(r.get("status") == "ok" for r in rows):
        raise DecodecalcError(f"tune --measure: no launch could be timed (the first error: "
                              f"{next((r.get('error') for r in rows if r.get('error')), 'none')}); timings in {path}")
    return summarize_measurement(plan, rows, device=device, saved_to=str(path),
                                 elapsed_s=round(time.monotonic() - t0, 1))


def _device_name() -> str:
    import torch

    return str(torch.cuda.get_device_name(0))
