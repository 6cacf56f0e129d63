"""`decodecalc tune`: the best engine settings for a whole decode workload, and what-if split heuristics."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from decodecalc.commands.options import (
    BandwidthOpt,
    BatchInvOpt,
    BlockSizeOpt,
    CgModeOpt,
    CudaGraphOpt,
    DtypeOpt,
    GpuOpt,
    JsonOpt,
    KvDtype,
    KvDtypeOpt,
    MaxSeqsOpt,
    MaxSplitsOpt,
    MaxTokensOpt,
    ModelOpt,
    ModelRunner,
    ModelRunnerOpt,
    OutputOpt,
    SmsOpt,
    SpecOpt,
    StaticSplitsOpt,
    TpOpt,
    handle_errors,
    plain,
)

TRAFFIC = "Workload (one of --steps, --requests, --workload)"
StepsOpt = Annotated[Optional[Path], typer.Option("--steps", help="Step trace: JSON Lines (or .csv), one decode step "
                                                  "per line: {\"seq_lens\": [...], \"query_lens\": [...], \"weight\": n}.",
                                                  rich_help_panel=TRAFFIC)]
RequestsOpt = Annotated[Optional[Path], typer.Option("--requests", help="Request trace: JSON Lines (or .csv) with "
                                                     "prompt_tokens, output_tokens and optionally arrival_s; turned "
                                                     "into decode steps by a continuous-batching model "
                                                     "(--max-num-seqs, --max-num-batched-tokens).",
                                                     rich_help_panel=TRAFFIC)]
WorkloadOpt = Annotated[Optional[str], typer.Option("--workload", "-w", help="A named mix: chat, long-doc-qa, agentic, "
                                                    "code-completion, or mix:prompt=N,output=N[,sigma=X][,steps=N].",
                                                    rich_help_panel=TRAFFIC)]
ConcurrencyOpt = Annotated[Optional[int], typer.Option("--concurrency", "-c", help="Sequences decoding at once for "
                                                       "--workload (default: the preset's).", rich_help_panel=TRAFFIC)]
ObjectiveOpt = Annotated[str, typer.Option("--objective", help="What to minimise: mean or p99 step time.")]
RegressionOpt = Annotated[str, typer.Option("--max-regression", help="Guard: no step may be slower than under the "
                                            "default by more than this (e.g. 5%; 'none' turns it off).")]
HeuristicsOpt = Annotated[Optional[str], typer.Option("--heuristics", help="Comma list of what-if split heuristics "
                                                      "(default: all; 'none' for none). See docs/tune.md.")]
RuleOpt = Annotated[Optional[Path], typer.Option("--rule", help="Python file defining splits(step) -> split count per "
                                                 "sequence (SGLang's kernel) and optionally segments(step) -> one "
                                                 "segment count (vLLM's).")]
EngineOpt = Annotated[Optional[str], typer.Option("--engine", help="Only one engine: vllm or sglang (default both).")]
PlotOpt = Annotated[Optional[Path], typer.Option("--plot", help="Write a PNG of per-step time and its distribution "
                                                 "(needs the 'plot' extra: matplotlib).")]
ProfileOpt = Annotated[Optional[Path], typer.Option("--profile", help="Time-model profile YAML (default: the user's "
                                                    "calibrated one, then the packaged one).")]
MaxShapesOpt = Annotated[int, typer.Option("--max-shapes", help="Evaluate at most this many distinct step shapes "
                                           "(more: a sample in (batch, KV tokens) order, said in the output).")]


def _us(t: float) -> str:
    us = t * 1e6
    return f"{us:,.0f}" if us >= 100 else f"{us:.1f}"


def print_result(result: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    d = result.to_dict()
    console = Console()
    wl = d["workload"]
    b, s = wl["batch"], wl["seq_len"]
    console.print(f"[bold]{d['model']}[/] TP={d['tp']} on {d['gpu']}  (h={d['num_heads']} h_kv={d['num_kv_heads']} "
                  f"d={d['head_size']}, {d['layers']} layers)")
    console.print(f"workload {wl['source']}: {wl['steps']:,} steps ({wl['distinct_shapes']:,} distinct), "
                  f"{wl['generated_tokens']:,} generated tokens; batch p50 {b['p50']:.0f} p99 {b['p99']:.0f} "
                  f"max {b['max']:.0f}; KV length p50 {s['p50']:,.0f} p99 {s['p99']:,.0f} max {s['max']:,.0f}")
    for note in wl["notes"]:
        console.print(f"[dim]{note}[/]")
    guard = "off" if d["max_regression"] is None else f"{d['max_regression']:.0%}"
    for name, e in d["engines"].items():
        t = Table(title=f"{name}: step time of one layer (objective {d['objective']}, guard {guard})")
        for col in ("setting", "mean us", "p99 us", "total ms", "ms/1k tok", "vs dflt", "worst"):
            t.add_column(col, justify="left" if col == "setting" else "right")
        dtot = e["default"]["total_s"]
        layers_per_tok = d["layers"] / wl["generated_tokens"] * 1000.0
        obj = "p99_step_s" if d["objective"] == "p99" else "mean_step_s"
        rows: list[dict[str, Any]] = []
        seen: set[tuple[float, float, float]] = set()
        for c in sorted(e["candidates"], key=lambda c: (c[obj], c["total_s"])):
            key = (c["mean_step_s"], c["p99_step_s"], c["total_s"])  # settings that launch the same: show one
            if key not in seen and len(rows) < 5:
                seen.add(key)
                rows.append(c)
        shown = {c["label"] for c in rows}
        for extra in (e["candidates"][0],):
            if extra["label"] not in shown:
                rows.append(extra)
        for c in rows:
            mark = "[bold green]*[/] " if c["label"] == e["best"]["label"] else ""
            guard_txt = f"{c['worst_step_vs_default']:.2f}x" + ("" if c["within_guard"] else " [red](guard)[/]")
            t.add_row(mark + c["label"], _us(c["mean_step_s"]), _us(c["p99_step_s"]), f"{c['total_s'] * 1e3:,.2f}",
                      f"{c['total_s'] * layers_per_tok * 1e3:,.3f}", f"{c['total_s'] / dtot - 1:+.1%}", guard_txt)
        console.print(t)
        st = e["steps"]
        console.print(f"  best vs default: {st['gain']:,} steps faster, {st['lose']:,} slower, {st['same']:,} within "
                      f"{st['threshold']:.0%}; saving {e['saving_vs_default']:.1%} of decode-attention time "
                      f"({e['attention_s_per_1k_tokens']['default'] * 1e3:.3f} -> "
                      f"{e['attention_s_per_1k_tokens']['best'] * 1e3:.3f} ms per 1,000 generated tokens, all layers)")
        for row in st["by_batch"]:
            if abs(row["change"]) >= st["threshold"]:
                console.print(f"    batch {row['batch']}: {row['steps']:,} steps, {_us(row['default_mean_step_s'])} -> "
                              f"{_us(row['best_mean_step_s'])} us ({row['change']:+.1%})")
        loss = st["biggest_loss"]
        if loss and loss["ratio"] > 1 + st["threshold"]:
            console.print(f"    most slowed step: batch {loss['batch']}, KV {loss['min_seq_len']:,}..{loss['max_seq_len']:,}"
                          f" ({loss['ratio']:.2f}x; {loss['example']})")
        console.print(f"  [bold]apply[/]: " + "\n         ".join(e["apply"]))
        if not e["calibrated"]:
            console.print(f"  [yellow]the time profile does not calibrate every kernel family {name} uses[/]")
    for name, why in d["skipped"].items():
        console.print(f"[dim]{name}: not tuned: {why}[/]")
    for bk in d["backends"]:
        if "total_s" in bk:
            console.print(f"backend {bk['engine']} -> {bk['backend']} ({bk['apply']}): total {bk['total_s'] * 1e3:,.2f} ms,"
                          f" saving {bk.get('saving_vs_default', 0):.1%} vs the default Triton setting, "
                          f"{bk.get('saving_vs_tuned', 0):.1%} vs the tuned one")
        else:
            console.print(f"[dim]backend {bk['engine']} -> {bk['backend']} ({bk['apply']}): {bk['note']}[/]")
    if d["heuristics"]:
        h = Table(title="What-if split heuristics (one layer; vs the engine default and the per-step bound)")
        for col in ("heuristic", "engine", "mean us", "p99 us", "vs dflt", "vs bound"):
            h.add_column(col, justify="left" if col in ("heuristic", "engine") else "right")
        for row in d["heuristics"]:
            h.add_row(row["name"], row["engine"], _us(row["mean_step_s"]), _us(row["p99_step_s"]),
                      f"{row['vs_default']:+.1%}", f"{row['vs_bound']:+.1%}")
        console.print(h)
        for row in d["heuristics"]:
            if row.get("source"):
                console.print(f"[dim]  {row['name']}: {row['source']}[/]")
    for note in d["notes"]:
        console.print(f"[dim]note: {note}[/]")
    state = "calibrated" if d["profile"]["calibrated"] else "UNCALIBRATED"
    console.print(f"[dim]time model: {state} profile {d['profile']['path']}; step time = decode attention of one "
                  "layer on one rank[/]")


def plot_tune(result: Any, path: Path) -> Path:
    """Per-step time over the workload (default and best of each engine) and its distribution, written to ``path``."""
    tune_png_writer(result)(Path(path))
    return Path(path)


def tune_png_writer(result: Any) -> Any:
    """Draw the figure now (every problem raised before any file is touched); return the function that
    saves it as PNG to the path it is given (the CLI passes it to output.write_files)."""
    from decodecalc.errors import DecodecalcError

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DecodecalcError("--plot needs the 'plot' extra: pip install 'decodecalc[plot]' (matplotlib)") from None
    sh = result.ctx.shapes
    heur = [h for h in result.heuristics if h.times]
    fig, axes = plt.subplots(1, 3 if heur else 2, figsize=(19 if heur else 13, 4.2))
    ax1, ax2 = axes[0], axes[1]
    for name, e in result.engines.items():
        for cand, style in ((e.default, "-"), (e.best, "--")):
            if cand is e.best and e.best is e.default:
                continue
            series = [cand.times[i] * 1e6 for i in sh.step_shape]
            label = f"{name}: {cand.label}"
            ax1.plot(range(len(series)), series, style, lw=0.8, label=label)
            ordered = sorted(series)
            ax2.plot(ordered, [(k + 1) / len(ordered) for k in range(len(ordered))], style, lw=1.0, label=label)
    ax1.set_xlabel("step")
    ax1.set_ylabel("decode attention, one layer (us)")
    ax1.set_title(f"{result.ctx.work.model.name} TP{result.ctx.work.tp} {result.ctx.gpu.name}: {result.ctx.trace.source}",
                  fontsize=9)
    ax2.set_xlabel("step time (us)")
    ax2.set_ylabel("fraction of steps")
    ax2.set_title("distribution", fontsize=9)
    ax2.legend(fontsize=7)
    if heur:
        ax3 = axes[2]
        for h in heur:
            ordered = sorted(h.times[i] * 1e6 for i in sh.step_shape)
            style = ":" if h.kind == "bound" else "--" if h.kind == "proposal" else "-"
            ax3.plot(ordered, [(k + 1) / len(ordered) for k in range(len(ordered))], style, lw=1.0, label=h.name)
        ax3.set_xlabel("step time (us)")
        ax3.set_title("what-if split heuristics", fontsize=9)
        ax3.legend(fontsize=7)
    fig.tight_layout()

    def save(target: Path) -> None:
        try:
            fig.savefig(target, dpi=110, format="png")
        finally:
            plt.close(fig)

    return save


def register(app: typer.Typer) -> None:
    @app.command()
    @handle_errors
    def tune(
        steps: StepsOpt = None,
        requests: RequestsOpt = None,
        workload: WorkloadOpt = None,
        concurrency: ConcurrencyOpt = None,
        objective: ObjectiveOpt = "mean",
        max_regression: RegressionOpt = "5%",
        heuristics: HeuristicsOpt = None,
        rule: RuleOpt = None,
        engine: EngineOpt = None,
        json_out: JsonOpt = False,
        output: OutputOpt = None,
        plot: PlotOpt = None,
        profile: ProfileOpt = None,
        max_shapes: MaxShapesOpt = 4000,
        model: ModelOpt = "llama3-8b",
        tp: TpOpt = 1,
        gpu: GpuOpt = "h200",
        sms: SmsOpt = None,
        bandwidth: BandwidthOpt = None,
        dtype: DtypeOpt = None,
        kv_cache_dtype: KvDtypeOpt = KvDtype.auto,
        block_size: BlockSizeOpt = 16,
        batch_invariant: BatchInvOpt = False,
        cuda_graph: CudaGraphOpt = True,
        cudagraph_mode: CgModeOpt = None,
        max_num_seqs: MaxSeqsOpt = 1024,
        max_num_batched_tokens: MaxTokensOpt = 8192,
        num_speculative_tokens: SpecOpt = 0,
        model_runner: ModelRunnerOpt = ModelRunner.v2,
        max_kv_splits: MaxSplitsOpt = None,
        static_kv_splits: StaticSplitsOpt = False,
    ) -> None:
        """Best engine settings for a whole decode workload (vLLM segments x 2D/3D threshold, SGLang max KV
        splits x static switch), which steps gain and lose, how to apply it, and what-if split heuristics."""
        from decodecalc.api import load_workload, tune_for, tune_inputs
        from decodecalc.commands.output import check_writable, to_json, write_files

        if output is not None:  # checked before the work, like every other argument
            check_writable(output, "--output")
        if plot is not None:
            check_writable(plot, "--plot")
            from decodecalc.plot import plot_available

            if not plot_available():
                from decodecalc.errors import DecodecalcError

                raise DecodecalcError("--plot needs the 'plot' extra: pip install 'decodecalc[plot]' (matplotlib)")
        inputs = tune_inputs(
            model, tp=tp, gpu=gpu, sms=sms, bandwidth=bandwidth, dtype=plain(dtype),
            kv_cache_dtype=plain(kv_cache_dtype), block_size=block_size, batch_invariant=batch_invariant,
            cuda_graph=cuda_graph, cudagraph_mode=plain(cudagraph_mode), max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens, num_speculative_tokens=num_speculative_tokens,
            model_runner=plain(model_runner), max_kv_splits=max_kv_splits, static_kv_splits=static_kv_splits,
        )
        trace = load_workload(steps=steps, requests=requests, workload=workload, concurrency=concurrency,
                              max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens)
        result = tune_for(inputs, trace, objective=objective, max_regression=max_regression, heuristics=heuristics,
                          rule=rule, engine=engine, profile=profile, max_shapes=max_shapes)
        data = result.to_dict()
        text = to_json(data)
        files: list = []  # all or nothing: a failed plot leaves no JSON and no temp file
        if output is not None:
            files.append((output, text + "\n"))
        if plot is not None:
            files.append((plot, tune_png_writer(result)))
        write_files(files)
        if json_out:
            typer.echo(text)
        else:
            print_result(result)
