"""`decodecalc models`, `decodecalc gpus` and `decodecalc explain`."""

from __future__ import annotations

from typing import Annotated

import typer

from decodecalc.commands.options import Inputs, handle_errors, with_workload_options
from decodecalc.commands.output import to_json

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def register(app: typer.Typer) -> None:
    @app.command()
    @handle_errors
    def models(json_out: JsonOpt = False) -> None:
        """List the model library (model_configs/*.yaml)."""
        from decodecalc.specs.models import model_library

        lib = model_library()
        if json_out:
            typer.echo(to_json([{
                "name": m.name, "num_layers": m.num_layers, "num_attention_heads": m.num_attention_heads,
                "num_key_value_heads": m.num_key_value_heads, "head_dim": m.head_dim, "attention": m.attention,
                "sliding_window": m.sliding_window, "dtype": m.dtype, "source": m.source} for m in lib.values()]))
            return
        from rich.console import Console
        from rich.table import Table

        t = Table(title=f"{len(lib)} models")
        for col in ("id", "layers", "q heads", "kv heads", "head dim", "attention", "window", "dtype"):
            t.add_column(col, no_wrap=True)
        for m in sorted(lib.values(), key=lambda m: m.name):
            head = f"{m.head_dim_k}/{m.head_dim_v}" if m.is_mla else str(m.head_dim)
            t.add_row(m.name, str(m.num_layers), str(m.num_attention_heads), str(m.num_key_value_heads), head,
                      m.attention, str(m.sliding_window or "-"), m.dtype)
        Console().print(t)

    @app.command()
    @handle_errors
    def gpus(json_out: JsonOpt = False) -> None:
        """List the GPU table with the source of each row."""
        from decodecalc.specs.gpus import GPUS

        if json_out:
            typer.echo(to_json([{
                "name": g.name, "num_sms": g.num_sms, "hbm_bandwidth_bytes_per_s": g.hbm_bandwidth_bytes_per_s,
                "bf16_dense_flops_per_s": g.bf16_dense_flops_per_s, "l2_bytes": g.l2_bytes,
                "compute_capability": list(g.compute_capability) if g.compute_capability else None,
                "vendor": g.vendor, "source": g.source} for g in GPUS]))
            return
        from rich.console import Console
        from rich.table import Table

        t = Table(title=f"{len(GPUS)} GPUs (GB = 1e9 B)")
        for col in ("name", "SMs/CUs", "HBM GB/s", "bf16 TFLOP/s", "L2 MB", "cc", "source"):
            t.add_column(col, overflow="fold")
        for g in GPUS:
            cc = ".".join(map(str, g.compute_capability)) if g.compute_capability else (g.gfx_arch or "-")
            t.add_row(g.name, str(g.num_sms), f"{g.hbm_bandwidth_bytes_per_s / 1e9:,.0f}",
                      f"{g.bf16_dense_flops_per_s / 1e12:,.0f}", f"{g.l2_bytes / 1e6:.0f}", cc, g.source)
        Console().print(t)

    @app.command()
    @with_workload_options
    def explain(inputs: Inputs, json_out: JsonOpt = False) -> None:
        """The chapter's seven-step trace of one layer through vLLM's Triton backend, for this config."""
        from decodecalc.errors import UnsupportedError
        from decodecalc.reports.grid import grid_report
        from decodecalc.reports.explain import seven_steps

        report = grid_report(inputs.work, inputs.gpu, systems=("vllm",), vllm=inputs.vllm,
                             kernel_block_size=inputs.kernel_block_size, layer=inputs.layer)
        if report.systems[0].error:
            raise UnsupportedError(report.systems[0].error)
        steps = seven_steps(report)
        if json_out:
            typer.echo(to_json([{"title": s.title, "source": s.source, "lines": list(s.lines)} for s in steps]))
            return
        from rich.console import Console

        from decodecalc.render import workload_caption

        con = Console()
        con.print(f"[bold]One layer, one decode step:[/] {workload_caption(report)}")
        for s in steps:
            con.print(f"\n[bold]{s.title}[/]" + (f"  [dim]{s.source}[/]" if s.source else ""))
            for line in s.lines:
                con.print(f"   {line}")
