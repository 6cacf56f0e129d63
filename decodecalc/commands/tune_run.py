"""Carry out a tune plan (:mod:`decodecalc.reports.tune_request`): check the files it will read and write, read the
workload, search the settings, measure them on this GPU or read saved timings (``--measure`` / ``--measured``), and
write ``--output`` and ``--plot``. What the run is doing goes to a ``progress`` callable the caller draws (the command:
a transient line on stderr; a test: a list), so this module imports no typer or rich.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from decodecalc.reports.tune_request import TunePlan, TuneRequest, plan_for

if TYPE_CHECKING:
    from decodecalc.commands.output import Content
    from decodecalc.reports.tune import TuneResult
    from decodecalc.reports.tune_measure import MeasuredTune


def _nothing(_: str) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class TuneRun:
    """The search's result and, with --measure or --measured, the measured totals beside it."""

    result: TuneResult
    measured: MeasuredTune | None = None

    def to_dict(self) -> dict[str, Any]:
        """What --json prints and --output writes."""
        data = self.result.to_dict()
        if self.measured is not None:
            data["measured"] = self.measured.to_dict()
        return data


def prepare(request: TuneRequest) -> TunePlan:
    """The plan of ``request``, after the checks that look at this machine, before any work: --measured's file, each
    output's folder, the plot extra; then the model, the GPU and the engine options."""
    from decodecalc.commands.output import check_writable
    from decodecalc.commands.tune_measure import check_measured_file

    check_measured_file(request.measure.measured)
    for path, option in ((request.measure.save, "--save-measurements"), (request.output, "--output"),
                         (request.plot, "--plot")):
        if path is not None:
            check_writable(path, option)
    if request.plot is not None:
        from decodecalc.plot import plot_available

        if not plot_available():
            from decodecalc.errors import DecodecalcError
            from decodecalc.extras import install_hint

            raise DecodecalcError(f"--plot needs the 'plot' extra: {install_hint('plot')} (matplotlib)")
    return plan_for(request)


def run_tune(plan: TunePlan, *, progress: Callable[[str], None] = _nothing) -> TuneRun:
    """Read ``plan``'s workload, search it, and measure (or read the timings of) the leading settings if asked."""
    from decodecalc.api import load_workload, tune_for

    req, inputs = plan.request, plan.inputs
    t, s, serving = req.traffic, req.search, req.serving
    progress("reading the workload")
    trace = load_workload(steps=t.steps, requests=t.requests, workload=t.workload, metrics=t.metrics,
                          concurrency=t.concurrency, max_num_seqs=serving.max_num_seqs,
                          max_num_batched_tokens=serving.max_num_batched_tokens,
                          num_speculative_tokens=serving.num_speculative_tokens,
                          draft_acceptance_rate=t.draft_acceptance_rate, trace_format=t.trace_format,
                          columns=t.columns, tokenizer=str(t.tokenizer) if t.tokenizer else None,
                          model_hint=inputs.work.model.hf_id, max_requests=t.max_requests, arrival_rate=t.rate,
                          metrics_model=t.metrics_model, progress=progress, context_len=plan.context_len)
    result = tune_for(inputs, trace, objective=s.objective, max_regression=s.max_regression,
                      heuristics=s.heuristics, rule=s.rule, engine=s.engine, profile=s.profile,
                      max_shapes=s.max_shapes, exact=s.exact, progress=progress, regime=s.regime)
    m = req.measure
    if not m.wanted:
        return TuneRun(result=result)
    from decodecalc.commands.tune_measure import measure

    measured = measure(result, steps=m.steps, leading=m.leading, save=m.save, measured=m.measured,
                       source=t.source, report=progress)
    return TuneRun(result=result, measured=measured)


def write_outputs(request: TuneRequest, run: TuneRun, text: str) -> None:
    """--output (``text``, the JSON) and --plot, all or nothing: a failed plot leaves no JSON and no temp file."""
    from decodecalc.commands.output import write_files

    files: list[tuple[Path, Content]] = []
    if request.output is not None:
        files.append((request.output, text + "\n"))
    if request.plot is not None:
        from decodecalc.render.tune import tune_png_writer

        files.append((request.plot, tune_png_writer(run.result)))
    write_files(files)
