"""`decodecalc grid`: what vLLM and SGLang launch for one decode step."""

from __future__ import annotations

from typing import Annotated

import typer

from decodecalc.commands.options import OUTPUT, Inputs, JsonOpt, OutputOpt, RegimeOpt, SystemOpt, with_workload_options

ExplainOpt = Annotated[bool, typer.Option("--explain", help="Show formula, inputs and upstream source of every "
                                          "number.", rich_help_panel=OUTPUT)]
VerifyOpt = Annotated[bool, typer.Option("--verify", help="Also run the kernels on the local GPU (or the Triton "
                                         "interpreter) and compare; needs the 'verify' extra.")]


def grid(
    inputs: Inputs,
    system: SystemOpt = None,
    regime: RegimeOpt = "back-to-back",
    json_out: JsonOpt = False,
    output: OutputOpt = None,
    explain: ExplainOpt = False,
    verify: VerifyOpt = False,
) -> None:
    """Grid, splits, SM coverage, bytes and roofline of one decode step, as vLLM and SGLang launch it."""
    from decodecalc.api import grid_for
    from decodecalc.commands.output import to_json, write_atomic

    if verify:  # before anything is printed: a missing torch must not follow a finished table
        from decodecalc.verify.locate import require_torch_triton

        require_torch_triton()
    result = grid_for(inputs, system, regime)
    if output is not None:
        write_atomic(output, to_json(result.to_dict()) + "\n")
    if json_out and not verify:
        typer.echo(to_json(result.to_dict()))
    else:
        from decodecalc.render import stdout
        from decodecalc.render.grid import print_grid

        from decodecalc.render.defaults import print_defaults

        print_grid(stdout(), result.report, explain=explain)
        print_defaults(stdout(), result.defaults, inputs.gpu.name)
    if verify:
        from decodecalc.commands.verify import run_verify_from_grid

        run_verify_from_grid(inputs, system=system.value if system is not None else None, json_out=json_out)


def register(app: typer.Typer) -> None:
    app.command()(with_workload_options(grid))
