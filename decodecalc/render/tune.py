"""`tune`: the candidate tables per engine, which steps gain and lose, how to apply the best setting,
the backend levers and the what-if split heuristics; and the --plot figure."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from decodecalc.extras import install_hint
from decodecalc.formatting import fmt_bytes_short, fmt_saving, fmt_us
from decodecalc.render import print_wrapped

if TYPE_CHECKING:
    from decodecalc.reports.tune import Candidate, EngineTune, TuneResult

#: tune prints whole micro-seconds from 100 us up (recommend and compare from 1,000 us)
WHOLE_FROM_US = 100.0


def _us(t: float) -> str:
    return fmt_us(t, whole_from_us=WHOLE_FROM_US)


def _say(console: Console, text: str, indent: str = "", style: str = "") -> None:
    print_wrapped(console, text, indent=indent, style=style, min_width=40)


def _shown(e: EngineTune, objective: str) -> list[Candidate]:
    """The five best candidates by the objective (settings that launch the same shown once), then the default."""
    from decodecalc.reports.tune import leading_candidates

    rows = leading_candidates(e.candidates, objective, 5)
    default = e.candidates[0]
    if default.label not in {c.label for c in rows}:
        rows.append(default)
    return rows


def _candidate_table(name: str, e: EngineTune, result: TuneResult, guard: str) -> tuple[Table, bool]:
    from decodecalc.reports.tune import per_1k_tokens

    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0, 0, 1))
    rows = _shown(e, result.objective)
    # a setting is what a user copies: never cut; figures of absurd workloads (KV lengths of 1e9) fold instead
    label_width = 2 + max(len(c.label.replace(" (default)", "")) for c in rows)
    for col in ("setting", "mean µs", "p99 µs", "ms/1k tok", "vs default", "p99 ratio", "scratch"):
        t.add_column(col, justify="left" if col == "setting" else "right", no_wrap=col == "setting",
                     min_width=label_width if col == "setting" else None,
                     overflow="ellipsis" if col == "setting" else "fold")
    dtot = e.default.stats.total_s
    default = e.candidates[0]
    for c in rows:
        mark = "* " if c.label == e.best.label else "  "
        worst = f"{c.ratio_quantile:.2f}x" + ("" if c.allowed else " over")
        st = c.stats
        t.add_row(mark + c.label.replace(" (default)", ""), _us(st.mean_step_s), _us(st.p99_step_s),
                  f"{per_1k_tokens(result.ctx, st) * 1e3:,.1f}",  # the JSON's attention_s_per_1k_tokens
                  "default" if c.label == default.label else f"{st.total_s / dtot - 1:+.1%}", worst,
                  fmt_bytes_short(c.scratch_bytes))
    return t, any(not c.allowed for c in rows)


def _engine(console: Console, name: str, e: EngineTune, result: TuneResult, wl: dict[str, Any], guard: str) -> None:
    from decodecalc.reports.tune_types import TIE_FRACTION

    console.print()
    table, over = _candidate_table(name, e, result, guard)
    # the title as a line of its own: a table's title wraps at the table's width, narrower than the terminal
    _say(console, f"{name}: decode attention of one layer per step (objective {result.objective}, guard {guard})",
         style="italic")
    console.print(table)
    guard_rule = e.guard.rule() if e.guard is not None else "none (--max-regression none)"
    _say(console, f"p99 ratio: the 99th percentile over the steps of the candidate's time against the default's"
         f"{'; over: not eligible' if over else ''}. Guard: {guard_rule}", style="dim")
    _say(console, f"*: the pick: the lowest ranking score (the predicted {result.objective} step time averaged over "
         "occupancy +-1, as recommend ranks; the table shows the plain prediction) among the settings within the "
         f"guard whose plain prediction also beats the default's; scores within {TIE_FRACTION:.1%} are a tie, which "
         "goes to the default, then to less split-K scratch, then to fewer programs", style="dim")
    if e.best.tie_break:
        _say(console, f"tie: {e.best.label} {e.best.tie_break}", style="dim")
    _say(console, f"searched {len(e.candidates)} settings; the range ends where {e.range_note}", style="dim")
    if e.edge_note:
        _say(console, e.edge_note, style="yellow")
    if e.left_out:
        _say(console, f"left out (the GPU cannot hold their split-K scratch): {'; '.join(e.left_out)}", style="dim")
    st = e.changes
    per1k = e.attention_s_per_1k_tokens
    saving = e.saving_vs_default
    _say(console, f"best vs default: {st['gain']:,} steps faster, {st['lose']:,} slower, {st['same']:,} within "
         f"{st['threshold']:.0%}; {saving:.1%} less decode-attention time "
         f"({per1k['default'] * 1e3:,.1f} -> {per1k['best'] * 1e3:,.1f} ms per 1,000 generated tokens, all "
         "layers)", indent="  ")
    for row in st["by_batch"]:
        if abs(row["change"]) >= st["threshold"]:
            _say(console, f"batch {row['batch']}: {row['steps']:,} step{'s' * (row['steps'] != 1)}, "
                 f"{_us(row['default_mean_step_s'])} -> {_us(row['best_mean_step_s'])} µs ({row['change']:+.1%})",
                 indent="    ")
    loss = st["biggest_loss"]
    if loss and loss["ratio"] > 1 + st["threshold"]:
        _say(console, f"most slowed step: batch {loss['batch']}, KV {loss['min_seq_len']:,}.."
             f"{loss['max_seq_len']:,} tokens ({loss['ratio']:.2f}x; {loss['example']})", indent="    ")
    by_label = {c.label: c for c in e.candidates}
    d2, b2 = by_label[e.default.label].steps_2d, by_label[e.best.label].steps_2d
    if d2 or b2 or (d2 is not None and wl["speculative"]):
        _say(console, f"2D path (no KV split): {d2:,} of {wl['steps']:,} steps under the default, {b2:,} under "
             "the best" + ("; multi-token (speculative) steps fall to 2D when num_seqs x cdiv(query length, "
                           "BLOCK_Q) passes the 3D threshold" if wl["speculative"] else ""), indent="  ")
    _say(console, "apply: " + e.apply[0], indent="  ")
    for cmd in e.apply_commands:
        console.print("    " + cmd, highlight=False, markup=False, soft_wrap=True)
    for extra in e.apply[1:]:
        _say(console, extra, indent="  ", style="dim")
    if e.expected_error is not None:
        _say(console, f"expected error of these totals: {e.expected_error.text()}", indent="  ", style="dim")
    if e.domain_warnings:
        _say(console, f"uncalibrated: outside the profile's measured domain: {'; '.join(e.domain_warnings)}",
             indent="  ", style="yellow")
    elif not e.calibrated:
        _say(console, f"the time profile does not calibrate every kernel family {name} uses", indent="  ",
             style="yellow")


def _default_name(result: TuneResult, engine: str) -> str:
    d = next((x for x in result.defaults if x.engine == engine), None)
    return d.selection.kernel_note if d is not None and d.selection is not None else "the default"


def _defaults(console: Console, result: TuneResult) -> None:
    """Each engine's default backend, its total and what the best Triton setting and FA3's split cap save on it."""
    for d in result.defaults:
        sel = d.selection
        if sel is None:
            _say(console, f"{d.engine} default: {d.note}", style="dim")
            continue
        head = f"{sel.engine.display_name} {sel.version} default on {result.ctx.gpu.name}: {sel.name} ({sel.kernel_note})"
        total = result.engine_default_total(d.engine)
        if total is None:
            rest = "savings below are against its Triton default" if d.engine in result.engines else \
                "no baseline for the backends below"
            _say(console, f"{head}: {d.note}; {rest}", style="dim")
            continue
        text = f"{head}: total {total * 1e3:,.2f} ms"
        if d.engine in result.engines and not d.triton:
            saving = 1.0 - result.engines[d.engine].best.stats.total_s / total
            text += f"; the best Triton setting is {fmt_saving(saving)} it"
        if d.expected_error is not None:
            text += f"; expected error {d.expected_error.text()}"
        _say(console, text)
        best = d.best_cap
        if best is not None:
            cells = ", ".join(f"{c}: {s.total_s * 1e3:,.2f}" for c, s in d.caps)
            _say(console, f"FA3's split cap under CUDA graphs (--attention-config.flash_attn_max_num_splits_for_cuda_"
                 f"graph, default 32), total ms: {cells}; best {best[0]} "
                 f"({fmt_saving(1.0 - best[1].total_s / total)} the default)", indent="  ")


def _trtllm(console: Console, result: TuneResult) -> None:
    """TensorRT-LLM's multi-block count: its own rule against fixed counts."""
    t = result.trtllm
    if t is None:
        return
    if t.default is None:
        _say(console, f"trtllm: multi-block count {t.note}", style="dim")
        return
    best = t.best
    assert best is not None
    cells = ", ".join(f"{n}: {s.total_s * 1e3:,.2f}" for n, s in t.choices)
    _say(console, f"trtllm: XQA multi-block over the workload, total {t.default.total_s * 1e3:,.2f} ms with its own "
         f"count (computeMultiBlockCount); TRTLLM_XQA_BLOCKS_PER_SEQUENCE, total ms: {cells}"
         + (f"; expected error {t.expected_error.text()}" if t.expected_error is not None else ""))
    if best[0] is None:
        _say(console, "apply: keep the default: no fixed count beats TensorRT-LLM's own rule", indent="  ")
    else:
        _say(console, f"apply: export TRTLLM_XQA_BLOCKS_PER_SEQUENCE={best[0]} "
             f"({fmt_saving(1.0 - best[1].total_s / t.default.total_s)} the default)", indent="  ")


def _backends(console: Console, result: TuneResult) -> None:
    for bk in result.backends:
        if bk.stats is None:
            _say(console, f"backend {bk.engine} -> {bk.backend} ({bk.how}): {bk.note}", style="dim")
            continue
        e = result.engines.get(bk.engine)
        d = bk.to_dict(e.default.stats.total_s, e.best.stats.total_s) if e else bk.to_dict(None)
        base = result.engine_default_total(bk.engine)
        vs = (f"{fmt_saving(1.0 - bk.stats.total_s / base)} the engine's default ({_default_name(result, bk.engine)})"
              if base else "")
        if e is not None:
            vs += (", " if vs else "") + f"{fmt_saving(d.get('saving_vs_tuned', 0))} the tuned Triton setting"
        _say(console, f"backend {bk.engine} -> {bk.backend} ({bk.how}): total "
             f"{bk.stats.total_s * 1e3:,.2f} ms" + (f", {vs}" if vs else "")
             + (f"; expected error {bk.expected_error.text()}" if bk.expected_error is not None else ""))


def _heuristics(console: Console, result: TuneResult) -> None:
    console.print()
    _say(console, "What-if split heuristics: decode attention of one layer per step, against the engine's "
         "default and the per-step bound")
    h = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0, 0, 1))
    for col in ("heuristic", "engine", "mean µs", "p99 µs", "vs default", "vs bound"):
        h.add_column(col, justify="left" if col in ("heuristic", "engine") else "right", no_wrap=True)
    for row in result.heuristics:
        h.add_row(row.name, row.engine, _us(row.stats.mean_step_s), _us(row.stats.p99_step_s),
                  f"{row.vs_default:+.1%}", f"{row.vs_bound:+.1%}")
    console.print(h)
    for row in result.heuristics:
        if row.source:
            _say(console, f"{row.name}: {row.source}", indent="  ", style="dim")


def print_tune(result: TuneResult, console: Console | None = None) -> None:
    """The whole report (on a default rich console unless one is given: numbers in tables highlighted)."""
    console = console or Console()
    ctx = result.ctx
    w = ctx.work
    wl = ctx.summary
    b, s = wl["batch"], wl["seq_len"]
    console.print(f"[bold]{escape(w.model.name)}[/] TP={w.tp} on {escape(ctx.gpu.name)}  (h={w.num_heads} "
                  f"h_kv={w.num_kv_heads} d={w.head_size}, {ctx.num_layers} layers)", highlight=False)
    _say(console, f"workload {wl['source']}: {wl['steps']:,} steps ({wl['distinct_shapes']:,} distinct shapes), "
         f"{wl['generated_tokens']:,} generated tokens; batch p50 {b['p50']:.0f}, p99 {b['p99']:.0f}, max "
         f"{b['max']:.0f} sequences; KV length p50 {s['p50']:,.0f}, p99 {s['p99']:,.0f}, max {s['max']:,.0f} tokens")
    for note in wl["notes"]:
        _say(console, note, style="dim")
    for name, e in result.engines.items():
        _engine(console, name, e, result, wl, "off" if e.guard is None else e.guard.label())
    if result.skipped or result.backends or result.defaults:
        console.print()
    for name, why in result.skipped.items():
        _say(console, f"{name}: not tuned: {why}", style="dim")
    _defaults(console, result)
    _trtllm(console, result)
    _backends(console, result)
    if result.heuristics:
        _heuristics(console, result)
    for note in result.notes:
        _say(console, f"note: {note}", style="dim")
    prof = ctx.profile
    state = "calibrated" if prof.calibrated else "UNCALIBRATED"
    _say(console, f"time model: {state} profile {prof.path or 'built-in'}; step time = decode attention of one layer "
         "on one rank", style="dim")
    from decodecalc.reports.tune import TIMED_SYSTEMS, profile_workload

    _say(console, prof.regime_note(TIMED_SYSTEMS), style="dim")
    sampled = profile_workload(prof)
    if sampled:
        _say(console, f"its layout cells come from {sampled['sampled_steps']} sampled steps of {sampled['source']} "
             f"({sampled['model']} TP{sampled['tp']}, calibrate --workload): traffic of another kind may be predicted "
             "worse", style="dim")


def tune_png_writer(result: TuneResult) -> Callable[[Path], None]:
    """Draw the figure now (every problem raised before any file is touched): per-step time over the workload
    (default and best of each engine), its distribution and the heuristics'; return the function that saves
    it as PNG to the path it is given (the CLI passes it to output.write_files)."""
    from decodecalc.errors import DecodecalcError

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DecodecalcError(f"--plot needs the 'plot' extra: {install_hint('plot')} (matplotlib)") from None
    heur = [(h, h.times) for h in result.heuristics if h.times is not None]
    fig, axes = plt.subplots(1, 3 if heur else 2, figsize=(19 if heur else 13, 4.2))
    ax1, ax2 = axes[0], axes[1]
    for name, e in result.engines.items():
        for cand, style in ((e.default, "-"), (e.best, "--")):
            if style == "--" and e.best is e.default:  # one line when the pick is the default (not none)
                continue
            series = [float(x) * 1e6 for x in cand.times]
            label = f"{name}: {cand.label}"
            ax1.plot(range(len(series)), series, style, lw=0.8, label=label)
            ordered = sorted(series)
            ax2.plot(ordered, [(k + 1) / len(ordered) for k in range(len(ordered))], style, lw=1.0, label=label)
    ax1.set_xlabel("step")
    ax1.set_ylabel("decode attention, one layer (us)")
    ax1.set_title(f"{result.ctx.work.model.name} TP{result.ctx.work.tp} {result.ctx.gpu.name}: "
                  f"{result.ctx.summary['source']}", fontsize=9)
    ax2.set_xlabel("step time (us)")
    ax2.set_ylabel("fraction of steps")
    ax2.set_title("distribution", fontsize=9)
    ax2.legend(fontsize=7)
    if heur:
        ax3 = axes[2]
        for h, times in heur:
            ordered = sorted(float(x) * 1e6 for x in times)
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
