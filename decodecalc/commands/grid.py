"""`decodecalc grid`: what vLLM and SGLang launch for one decode step."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from decodecalc.commands.options import Inputs, SystemOpt, with_workload_options
from decodecalc.commands.output import to_json, write_atomic
from decodecalc.errors import UnsupportedError
from decodecalc.reports.grid import SYSTEMS, grid_report

JsonOpt = Annotated[bool, typer.Option("--json", help="Print the JSON contract instead of tables.")]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the JSON to this file (atomic).")]
ExplainOpt = Annotated[bool, typer.Option("--explain", help="Show formula, inputs and upstream source of every number.")]
VerifyOpt = Annotated[bool, typer.Option("--verify", help="Also run the kernels on the local GPU (or the Triton "
                                         "interpreter) and compare; needs the 'verify' extra.")]


def run_grid(inputs: Inputs, system: str | None, json_out: bool, output: Path | None, explain: bool) -> dict:
    from decodecalc.errors import ConfigError

    systems = SYSTEMS if system is None else (system.lower(),)
    if system is not None and systems[0] not in SYSTEMS:
        raise ConfigError(f"--system {system!r}; valid: {', '.join(SYSTEMS)}")
    report = grid_report(inputs.work, inputs.gpu, systems=systems, vllm=inputs.vllm, sglang=inputs.sglang,
                         kernel_block_size=inputs.kernel_block_size, layer=inputs.layer)
    if system is not None and report.systems[0].error:
        raise UnsupportedError(report.systems[0].error)
    data = report.to_json()
    if output is not None:
        write_atomic(output, to_json(data) + "\n")
    if json_out:
        typer.echo(to_json(data))
    else:
        from rich.console import Console

        from decodecalc.render import print_grid

        print_grid(Console(), report, explain=explain)
    return data


def register(app: typer.Typer) -> None:
    @app.command()
    @with_workload_options
    def grid(
        inputs: Inputs,
        system: SystemOpt = None,
        json_out: JsonOpt = False,
        output: OutputOpt = None,
        explain: ExplainOpt = False,
        verify: VerifyOpt = False,
    ) -> None:
        """Grid, splits, SM coverage, bytes and roofline of one decode step, as vLLM and SGLang launch it."""
        run_grid(inputs, system, json_out and not verify, output, explain)
        if verify:
            from decodecalc.commands import verify as verify_cmd

            hook = getattr(verify_cmd, "run_verify_from_grid", None)
            if hook is None:
                from decodecalc.errors import DecodecalcError

                raise DecodecalcError("--verify is not available in this build")
            hook(inputs, system=system, json_out=json_out)
