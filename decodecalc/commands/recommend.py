"""`decodecalc recommend`: the fastest KV split count per kernel, from the time model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from decodecalc.commands.options import Inputs, JsonOpt, OutputOpt, RegimeOpt, System, with_workload_options

KernelOpt = Annotated[Optional[System], typer.Option("--kernel", "-k", help="Only one kernel (default both).",
                                                     case_sensitive=False)]
CandidatesOpt = Annotated[Optional[list[str]], typer.Option(
    "--candidates", help="Split counts to choose from (1 = unsplit, vLLM's 2D kernel): '1,4,16' for every kernel, "
    "or 'vllm=1,16,64' / 'sglang=4,8' per kernel (repeatable). Default: vLLM 1..128, SGLang 1..64 (powers of two).")]
ProfileOpt = Annotated[Optional[Path], typer.Option("--profile", help="Time-model profile YAML (default: <gpu>.yaml in "
                                                    "$XDG_CONFIG_HOME/decodecalc/profiles, then the packaged one).")]


def recommend(
    inputs: Inputs,
    kernel: KernelOpt = None,
    candidates: CandidatesOpt = None,
    profile: ProfileOpt = None,
    regime: RegimeOpt = "back-to-back",
    json_out: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Best KV split count (and vLLM 2D vs 3D) per kernel, its predicted time, the fastest prediction, the
    speedup over the engine's own choice, and how to set it."""
    from decodecalc.api import recommend_for
    from decodecalc.commands.output import to_json, write_atomic

    result = recommend_for(inputs, kernel.value if kernel is not None else None, candidates, profile, regime)
    data = result.to_dict()
    if output is not None:
        write_atomic(output, to_json(data) + "\n")
    if json_out:
        if result.warning:
            typer.echo(f"Warning: {result.warning}", err=True)
        typer.echo(to_json(data))
    else:
        from decodecalc.render import stderr, stdout
        from decodecalc.render.recommend import print_recommendation
        from decodecalc.timemodel import TIE_FRACTION

        from decodecalc.render.defaults import print_defaults

        print_recommendation(stdout(), stderr(), result, TIE_FRACTION)
        print_defaults(stdout(), result.defaults, inputs.gpu.name)


def register(app: typer.Typer) -> None:
    app.command()(with_workload_options(recommend))
