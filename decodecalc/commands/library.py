"""`decodecalc models`, `decodecalc gpus` and `decodecalc explain`."""

from __future__ import annotations

from typing import Annotated

import typer

from decodecalc.commands.options import OUTPUT, Inputs, handle_errors, with_workload_options

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.", rich_help_panel=OUTPUT)]


def models(json_out: JsonOpt = False) -> None:
    """List the model library (model_configs/*.yaml)."""
    from decodecalc.specs.models import model_library

    lib = model_library()
    if json_out:
        from decodecalc.commands.output import to_json

        typer.echo(to_json([{
            "name": m.name, "num_layers": m.num_layers, "num_attention_heads": m.num_attention_heads,
            "num_key_value_heads": m.num_key_value_heads, "head_dim": m.head_dim, "attention": m.attention,
            "sliding_window": m.sliding_window, "dtype": m.dtype, "source": m.source} for m in lib.values()]))
        return
    from decodecalc.render import stdout
    from decodecalc.render.library import print_models

    print_models(stdout(), lib.values())


def gpus(json_out: JsonOpt = False) -> None:
    """List the GPU table with the source of each row."""
    from decodecalc.specs.gpus import GPUS

    if json_out:
        from decodecalc.commands.output import to_json
        from decodecalc.timemodel.profile_sources import calibration_of

        typer.echo(to_json([{
            "name": g.name, "num_sms": g.num_sms, "hbm_bandwidth_bytes_per_s": g.hbm_bandwidth_bytes_per_s,
            "bf16_dense_flops_per_s": g.bf16_dense_flops_per_s, "l2_bytes": g.l2_bytes,
            "compute_capability": list(g.compute_capability) if g.compute_capability else None,
            "vendor": g.vendor, "time_profile": calibration_of(g), "source": g.source} for g in GPUS]))
        return
    from decodecalc.render import stdout
    from decodecalc.render.library import print_gpus

    print_gpus(stdout(), GPUS)


def explain(inputs: Inputs, json_out: JsonOpt = False) -> None:
    """The chapter's seven-step trace of one layer through vLLM's Triton backend, for this config."""
    from decodecalc.api import grid_for
    from decodecalc.reports.explain import seven_steps

    report = grid_for(inputs, "vllm").report
    steps = seven_steps(report)
    if json_out:
        from decodecalc.commands.output import to_json

        typer.echo(to_json([{"title": s.title, "source": s.source, "lines": list(s.lines)} for s in steps]))
        return
    from decodecalc.render import stdout
    from decodecalc.render.grid import print_steps

    print_steps(stdout(), report, steps)


def register(app: typer.Typer) -> None:
    app.command()(handle_errors(models))
    app.command()(handle_errors(gpus))
    app.command()(with_workload_options(explain))
