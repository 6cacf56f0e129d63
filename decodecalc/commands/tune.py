"""`decodecalc tune`: the best engine settings for a whole decode workload, and what-if split heuristics."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from decodecalc.commands.options import (
    OUTPUT,
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
                                                    "code-completion; or a parametric mix such as "
                                                    "mix:prompt=2048,output=256 (also sigma=X, steps=N).",
                                                    rich_help_panel=TRAFFIC)]
ConcurrencyOpt = Annotated[Optional[int], typer.Option("--concurrency", "-c", help="Sequences decoding at once for "
                                                       "--workload (default: the preset's).", rich_help_panel=TRAFFIC)]
AcceptanceOpt = Annotated[Optional[float], typer.Option("--draft-acceptance-rate",
                                                        help="With --num-speculative-tokens k and --requests or "
                                                        "--workload: the fraction of draft tokens accepted, 0 to 1; "
                                                        "each decode step advances a request by 1 + rate x k tokens "
                                                        "on average (deterministic; default 0.7).",
                                                        rich_help_panel=TRAFFIC)]
SEARCH = "Search"
ObjectiveOpt = Annotated[str, typer.Option("--objective", help="What to minimise. One of: mean, p99 (step time).",
                                           rich_help_panel=SEARCH)]
RegressionOpt = Annotated[str, typer.Option("--max-regression", help="Guard: no step may be slower than under the "
                                            "default by more than this (e.g. 5%; 'none' turns it off).",
                                            rich_help_panel=SEARCH)]
EngineOpt = Annotated[Optional[str], typer.Option("--engine", help="Only one engine. One of: vllm, sglang (default "
                                                  "both).", rich_help_panel=SEARCH)]
ProfileOpt = Annotated[Optional[Path], typer.Option("--profile", help="Time-model profile YAML (default: the user's "
                                                    "calibrated one, then the packaged one).", rich_help_panel=SEARCH)]
MaxShapesOpt = Annotated[int, typer.Option("--max-shapes", help="Evaluate at most this many distinct step shapes "
                                           "(more: a sample in (batch, KV tokens) order, said in the output).",
                                           rich_help_panel=SEARCH)]
WHATIF = "What-if split heuristics"
#: the built-in heuristics' names, for --help without importing the core (tests/test_tune.py checks the list)
HEURISTIC_NAMES = ("vllm-default", "vllm-tuned", "vllm-pr47520", "vllm-bound", "sglang-default", "sglang-tuned",
                   "sglang-pr21775", "sglang-pr27786", "sglang-pr35801", "sglang-bound")
HeuristicsOpt = Annotated[Optional[str], typer.Option("--heuristics", help="Comma list (default: all; 'none' for "
                                                      "none). Names: " + ", ".join(HEURISTIC_NAMES) + ".",
                                                      rich_help_panel=WHATIF)]
RuleOpt = Annotated[Optional[Path], typer.Option("--rule", help="Python file defining splits(step) -> split count per "
                                                 "sequence (SGLang's kernel) and/or segments(step) -> one segment "
                                                 "count (vLLM's); see docs/tune.md.", rich_help_panel=WHATIF)]
PlotOpt = Annotated[Optional[Path], typer.Option("--plot", help="Write a PNG of per-step time and its distribution "
                                                 "(needs the 'plot' extra: matplotlib).", rich_help_panel=OUTPUT)]


def _us(t: float) -> str:
    us = t * 1e6
    return f"{us:,.0f}" if us >= 100 else f"{us:.1f}"


def _say(console: Any, text: str, indent: str = "", style: str = "", more: str = "  ") -> None:
    """Print ``text`` word-wrapped to the console's width, continuation lines indented under it (plain text:
    rich markup in the input is not interpreted, so paths and flags print as they are)."""
    from rich.text import Text

    from decodecalc.formatting import wrap_words

    for line in wrap_words(indent + text, max(40, console.width), indent + more):
        console.print(Text(line, style=style), soft_wrap=True)


def _less(saving: float) -> str:
    return f"{saving:.1%} less than" if saving >= 0 else f"{-saving:.1%} more than"


def _candidate_table(name: str, e: dict[str, Any], d: dict[str, Any], guard: str) -> tuple[Any, bool]:
    from rich import box
    from rich.table import Table

    wl = d["workload"]
    t = Table(title=f"{name}: decode attention of one layer per step (objective {d['objective']}, guard {guard})",
              box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0, 0, 1), title_justify="left")
    for col in ("setting", "mean µs", "p99 µs", "total ms", "ms/1k tok", "vs default", "worst step"):
        t.add_column(col, justify="left" if col == "setting" else "right", no_wrap=col != "setting")
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
    default = e["candidates"][0]
    if default["label"] not in {c["label"] for c in rows}:
        rows.append(default)
    for c in rows:
        is_default = c["label"] == default["label"]
        mark = "* " if c["label"] == e["best"]["label"] else "  "
        label = c["label"].replace(" (default)", "")
        worst = f"{c['worst_step_vs_default']:.2f}x" + ("" if c["within_guard"] else " over")
        t.add_row(mark + label, _us(c["mean_step_s"]), _us(c["p99_step_s"]), f"{c['total_s'] * 1e3:,.2f}",
                  f"{c['total_s'] * layers_per_tok * 1e3:,.1f}",
                  "default" if is_default else f"{c['total_s'] / dtot - 1:+.1%}", worst)
    return t, any(not c["within_guard"] for c in rows)


def print_result(result: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    d = result.to_dict()
    console = Console()
    wl = d["workload"]
    b, s = wl["batch"], wl["seq_len"]
    console.print(f"[bold]{d['model']}[/] TP={d['tp']} on {d['gpu']}  (h={d['num_heads']} h_kv={d['num_kv_heads']} "
                  f"d={d['head_size']}, {d['layers']} layers)", highlight=False)
    _say(console, f"workload {wl['source']}: {wl['steps']:,} steps ({wl['distinct_shapes']:,} distinct shapes), "
         f"{wl['generated_tokens']:,} generated tokens; batch p50 {b['p50']:.0f}, p99 {b['p99']:.0f}, max "
         f"{b['max']:.0f} sequences; KV length p50 {s['p50']:,.0f}, p99 {s['p99']:,.0f}, max {s['max']:,.0f} tokens")
    for note in wl["notes"]:
        _say(console, note, style="dim")
    guard = "off" if d["max_regression"] is None else f"{d['max_regression']:.0%}"
    for name, e in d["engines"].items():
        console.print()
        table, over = _candidate_table(name, e, d, guard)
        console.print(table)
        if over:
            _say(console, f"worst step: the candidate's slowest step against the default; over: slows a step by more "
                 f"than the guard ({guard}), so not eligible", style="dim")
        st = e["steps"]
        per1k = e["attention_s_per_1k_tokens"]
        _say(console, f"best vs default: {st['gain']:,} steps faster, {st['lose']:,} slower, {st['same']:,} within "
             f"{st['threshold']:.0%}; {e['saving_vs_default']:.1%} less decode-attention time "
             f"({per1k['default'] * 1e3:,.1f} -> {per1k['best'] * 1e3:,.1f} ms per 1,000 generated tokens, all "
             "layers)", indent="  ")
        for row in st["by_batch"]:
            if abs(row["change"]) >= st["threshold"]:
                _say(console, f"batch {row['batch']}: {row['steps']:,} step{'s' * (row['steps'] != 1)}, {_us(row['default_mean_step_s'])} -> "
                     f"{_us(row['best_mean_step_s'])} µs ({row['change']:+.1%})", indent="    ")
        loss = st["biggest_loss"]
        if loss and loss["ratio"] > 1 + st["threshold"]:
            _say(console, f"most slowed step: batch {loss['batch']}, KV {loss['min_seq_len']:,}.."
                 f"{loss['max_seq_len']:,} tokens ({loss['ratio']:.2f}x; {loss['example']})", indent="    ")
        by_label = {c["label"]: c for c in e["candidates"]}
        d2, b2 = by_label[e["default"]["label"]].get("steps_2d"), by_label[e["best"]["label"]].get("steps_2d")
        if d2 or b2 or (d2 is not None and wl["speculative"]):
            _say(console, f"2D path (no KV split): {d2:,} of {wl['steps']:,} steps under the default, {b2:,} under "
                 "the best" + ("; multi-token (speculative) steps fall to 2D when num_seqs x cdiv(query length, "
                               "BLOCK_Q) passes the 3D threshold" if wl["speculative"] else ""), indent="  ")
        _say(console, "apply: " + e["apply"][0], indent="  ")
        for cmd in e["apply_commands"]:
            console.print("    " + cmd, highlight=False, markup=False, soft_wrap=True)
        for extra in e["apply"][1:]:
            _say(console, extra, indent="  ", style="dim")
        if not e["calibrated"]:
            _say(console, f"the time profile does not calibrate every kernel family {name} uses", indent="  ",
                 style="yellow")
    if d["skipped"] or d["backends"]:
        console.print()
    for name, why in d["skipped"].items():
        _say(console, f"{name}: not tuned: {why}", style="dim")
    for bk in d["backends"]:
        if "total_s" in bk:
            _say(console, f"backend {bk['engine']} -> {bk['backend']} ({bk['apply']}): total "
                 f"{bk['total_s'] * 1e3:,.2f} ms, {_less(bk.get('saving_vs_default', 0))} the default Triton "
                 f"setting, {_less(bk.get('saving_vs_tuned', 0))} the tuned one")
        else:
            _say(console, f"backend {bk['engine']} -> {bk['backend']} ({bk['apply']}): {bk['note']}", style="dim")
    if d["heuristics"]:
        from rich import box

        console.print()
        _say(console, "What-if split heuristics: decode attention of one layer per step, against the engine's "
             "default and the per-step bound")
        h = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0, 0, 1))
        for col in ("heuristic", "engine", "mean µs", "p99 µs", "vs default", "vs bound"):
            h.add_column(col, justify="left" if col in ("heuristic", "engine") else "right", no_wrap=True)
        for row in d["heuristics"]:
            h.add_row(row["name"], row["engine"], _us(row["mean_step_s"]), _us(row["p99_step_s"]),
                      f"{row['vs_default']:+.1%}", f"{row['vs_bound']:+.1%}")
        console.print(h)
        for row in d["heuristics"]:
            if row.get("source"):
                _say(console, f"{row['name']}: {row['source']}", indent="  ", style="dim")
    for note in d["notes"]:
        _say(console, f"note: {note}", style="dim")
    state = "calibrated" if d["profile"]["calibrated"] else "UNCALIBRATED"
    _say(console, f"time model: {state} profile {d['profile']['path']}; step time = decode attention of one layer on "
         "one rank", style="dim")


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
        draft_acceptance_rate: AcceptanceOpt = None,
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
                              max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                              num_speculative_tokens=num_speculative_tokens, draft_acceptance_rate=draft_acceptance_rate)
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
