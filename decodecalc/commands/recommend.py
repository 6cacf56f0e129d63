"""`decodecalc recommend`: the fastest KV split count per kernel, from the time model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from decodecalc.commands.options import Inputs, with_workload_options

KernelOpt = Annotated[Optional[str], typer.Option("--kernel", "-k", help="Only one kernel: vllm or sglang (default both).")]
CandidatesOpt = Annotated[Optional[list[str]], typer.Option(
    "--candidates", help="Split counts to choose from (1 = unsplit, vLLM's 2D kernel): '1,4,16' for every kernel, "
    "or 'vllm=1,16,64' / 'sglang=4,8' per kernel (repeatable). Default: vLLM 1..128, SGLang 1..64 (powers of two).")]
ProfileOpt = Annotated[Optional[Path], typer.Option("--profile", help="Time-model profile YAML (default: "
                                                    "$XDG_CONFIG_HOME/decodecalc/profiles/<gpu>.yaml, then the packaged one).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the JSON contract instead of tables.")]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the JSON to this file (atomic).")]


def run_recommend(inputs: Inputs, kernel: str | None, candidates: list[str] | None, profile: Path | None) -> Any:
    from decodecalc.errors import ConfigError
    from decodecalc.reports.recommend import KERNELS, parse_candidates, recommend
    from decodecalc.timemodel import resolve_profile

    kernels = KERNELS if kernel is None else (kernel.lower(),)
    if kernels[0] not in KERNELS:
        raise ConfigError(f"--kernel {kernel!r}; valid: {', '.join(KERNELS)}")
    prof = resolve_profile(inputs.gpu, profile_path=profile)
    return recommend(inputs.work, inputs.gpu, kernels=kernels, candidates=parse_candidates(candidates), profile=prof,
                     vllm_settings=inputs.vllm, sglang_settings=inputs.sglang)


def _us(t: float) -> str:
    us = t * 1e6
    return f"{us:,.0f}" if us >= 1000 else f"{us:.1f}"


def print_recommendation(rec: Any, inputs: Inputs) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    err = Console(stderr=True)
    w = inputs.work
    lens = w.seq_lens
    shape = f"L={lens[0]}" if len(set(lens)) == 1 else f"ragged L={min(lens)}..{max(lens)}"
    console.print(f"[bold]{w.model.name}[/] TP={w.tp}  B={w.batch} {shape}  h={w.num_heads} h_kv={w.num_kv_heads} "
                  f"d={w.head_size}  on {inputs.gpu.name}")
    if rec.warning:
        err.print(f"[bold yellow]Warning:[/] {rec.warning}")
    t = Table(title="Recommended KV split count per kernel (predicted time of one layer's decode attention)")
    for col in ("kernel", "engine default", "default us", "recommended", "predicted us", "speedup"):
        t.add_column(col, justify="right" if "us" in col or col == "speedup" else "left")
    for k, kr in rec.kernels.items():
        t.add_row(k, kr.default.label.split(": ", 1)[-1], _us(kr.default.predicted_time_s), kr.recommended.label,
                  _us(kr.recommended.predicted_time_s), f"{kr.speedup:.2f}x")
    console.print(t)
    c = Table(title="Every candidate (predicted us)")
    c.add_column("kernel")
    allsplits = sorted({ch.splits for kr in rec.kernels.values() for ch in kr.candidates})
    for s in allsplits:
        c.add_column("S=1" if s == 1 else f"S={s}", justify="right")
    for k, kr in rec.kernels.items():
        by = {ch.splits: ch for ch in kr.candidates}
        cells = []
        for s in allsplits:
            ch = by.get(s)
            if ch is None:
                cells.append("-")
            else:
                txt = _us(ch.predicted_time_s)
                cells.append(f"[bold green]{txt}*[/]" if ch is kr.recommended else txt)
        c.add_row(k, *cells)
    console.print(c)
    console.print("S=1 is unsplit (vLLM: the 2D kernel); * marks the recommendation.")
    for k, kr in rec.kernels.items():
        console.print(f"[bold]{k}[/]: how to apply")
        for line in kr.apply:
            console.print(f"  - {line}")
        if kr.note:
            console.print(f"  [dim]note: {kr.note}[/]")
    for k, why in rec.skipped.items():
        console.print(f"[dim]{k}: not modelled for this step: {why}[/]")
    src = rec.profile.path or "built-in"
    state = "calibrated" if rec.calibrated else "UNCALIBRATED"
    console.print(f"[dim]time model: {state} profile {src}[/]")


def register(app: typer.Typer) -> None:
    @app.command()
    @with_workload_options
    def recommend(
        inputs: Inputs,
        kernel: KernelOpt = None,
        candidates: CandidatesOpt = None,
        profile: ProfileOpt = None,
        json_out: JsonOpt = False,
        output: OutputOpt = None,
    ) -> None:
        """Best KV split count (and vLLM 2D vs 3D) per kernel, its predicted time, the speedup over the engine's
        own choice, and how to set it."""
        from decodecalc.commands.output import to_json, write_atomic

        rec = run_recommend(inputs, kernel, candidates, profile)
        data = rec.to_json()
        if output is not None:
            write_atomic(output, to_json(data) + "\n")
        if json_out:
            if rec.warning:
                typer.echo(f"Warning: {rec.warning}", err=True)
            typer.echo(to_json(data))
        else:
            print_recommendation(rec, inputs)
