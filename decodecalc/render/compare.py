"""`compare`: every split policy side by side, from the typed CompareResult."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from decodecalc.formatting import fmt_bytes, fmt_bytes_short, fmt_grid_x, fmt_per_seq, fmt_range, fmt_time
from decodecalc.render import print_wrapped

if TYPE_CHECKING:
    from decodecalc.api import CompareResult
    from decodecalc.reports.compare import PolicyResult

#: below this many columns the byte and ratio columns move out of the table (JSON/CSV always carry them)
WIDE = 130


def predicted_cell(r: PolicyResult) -> str:
    """The time model's figure for the row, ``~`` marking an uncalibrated one; ``-`` where there is none."""
    t = r.extra.get("predicted_time_s")
    if t is None:
        return "-"
    return fmt_time(t) + ("" if r.extra.get("predicted_calibrated") else " ~")


def error_cell(r: PolicyResult) -> str:
    """The predicted time's expected median error (``predicted_error``), ``±3%``; empty where there is none."""
    err = r.extra.get("predicted_error")
    return f"±{100 * err['median_abs_err']:.0f}%" if err else ""


def caption(res: CompareResult) -> str:
    w, gpu = res.inputs.work, res.inputs.gpu
    return (f"{w.model.name} TP={w.tp} on {gpu.name} ({gpu.num_sms} SMs): B={w.batch}, seq "
            f"{fmt_per_seq(w.seq_lens, 4)}, h={w.num_heads}, h_kv={w.num_kv_heads}, d={w.head_size}, "
            f"{w.kv_cache_dtype} KV, block {w.block_size}")


def compare_table(res: CompareResult, width: int) -> tuple[Table, bool]:
    wide = width >= WIDE
    t = Table(title="Decode attention: every split policy", caption=Text(caption(res)), box=box.SIMPLE_HEAD,
              pad_edge=False)
    cols = ["policy", "grid", "busy/all", "splits", "tok/split", "SM (waves)"] if wide else \
        ["policy", "grid", "splits", "tok/split", "SM (waves)"]
    cols += ["partial a/u", "/KV", "roofline", "/cov", "predicted", "±"] if wide else ["roofline", "predicted"]
    for col in cols:
        t.add_column(col, justify="left" if col == "policy" else "right", overflow="fold",
                     no_wrap=col in ("policy", "tok/split", "busy/all", "partial a/u", "roofline", "predicted", "±"))
    for r in res.policies:
        if not r.applicable or r.plan is None or r.figures is None:
            t.add_row(Text(r.name, style="dim"), Text("n/a", style="dim"), *[""] * (len(cols) - 2))
            continue
        p, f = r.plan, r.figures
        splits = fmt_range(p.splits)
        if tuple(p.nonempty_splits) != tuple(p.splits):
            splits += f" ({fmt_range(p.nonempty_splits)})"
        star = r.name == res.best
        cells = [("* " if star else "") + r.name, fmt_grid_x(p.grid)]
        if wide:
            cells.append(f"{p.main.working_programs:,}/{p.main.programs:,}")
        cells += [splits, fmt_range(p.tokens_per_split), f"{f.coverage.fraction:.0%} ({f.coverage.waves})"]
        if wide:
            kv = f.kv_bytes_per_layer
            cells += [f"{fmt_bytes_short(p.partial_state_bytes)}/{fmt_bytes_short(p.partial_state_bytes_used)}",
                      f"{p.partial_state_bytes / kv if kv else 0.0:.2f}", fmt_time(f.roofline_time_s),
                      fmt_time(r.sm_limited_time_s or 0.0)]
        else:
            cells.append(fmt_time(f.roofline_time_s))
        cells += [predicted_cell(r), error_cell(r)] if wide else [predicted_cell(r)]
        t.add_row(*cells, style="bold green" if star else None)
    return t, wide


def print_compare(console: Console, res: CompareResult, explain: bool = False) -> None:
    t, wide = compare_table(res, console.width)
    console.print(t)
    skipped = [r for r in res.policies if not r.applicable]
    if skipped:
        console.print("Not applicable:")
        for r in skipped:
            print_wrapped(console, f"{r.name}: {r.reason}", indent="  ")
    notes = [r for r in res.policies if r.applicable and r.notes]
    if notes:
        console.print("Notes:")
        for r in notes:
            print_wrapped(console, f"{r.name}: {'; '.join(r.notes)}", indent="  ")
    legend = ("busy/all: main-kernel programs that read keys / launched; " if wide else "") + (
        "splits: per sequence (a range when they differ), allocated (non-empty); tok/split: keys per split; "
        "SM (waves): first-wave SM coverage (waves); roofline: HBM roofline time of one layer; predicted: the time model's time of one "
        "layer (~ = uncalibrated for this GPU or workload; - = no time model for this kernel)")
    regime = next((r.extra["predicted_regime"] for r in res.policies if r.extra.get("predicted_regime")), None)
    if regime:
        legend += (" in a decode layer's graph (--regime in-graph: back to back plus a measured cost per launch)"
                   if regime == "in-graph" else " back to back (--regime in-graph: inside a decode layer's graph)")
    legend += ("; ±: a predicted time's expected error, its kernel's median error on launches no fit saw, on head "
               "layouts its fit measured or not as this one (predicted_error in --json)")
    if wide:
        legend += ("; partial a/u: stage-1 partial state per layer, allocated/used (K = kB, M = MB); /KV: allocated "
                   "partial state over the layer's KV bytes; /cov: roofline time / SM coverage")
    print_wrapped(console, legend)
    errs = [f"{r.name} {error_cell(r)}" for r in res.policies if r.applicable and error_cell(r)]
    if errs and not wide:
        print_wrapped(console, "Expected error of the predicted times (±, as above): " + ", ".join(errs))
    if not wide:
        print_wrapped(console, f"Per policy (busy/all programs, partial state; widen to >= {WIDE} columns for a "
                      "table, or use --json/--csv):")
        for r in res.policies:
            if r.applicable and r.plan is not None and r.figures is not None:
                p, kv = r.plan, r.figures.kv_bytes_per_layer
                print_wrapped(console, f"{r.name}: {p.main.working_programs:,}/{p.main.programs:,} programs busy; "
                              f"partial state {fmt_bytes(p.partial_state_bytes)} allocated, "
                              f"{fmt_bytes(p.partial_state_bytes_used)} used "
                              f"({p.partial_state_bytes / kv if kv else 0.0:.2f} x KV)", indent="  ")
    if explain:
        from decodecalc.render.grid import explain_panel

        for r in res.policies:
            if r.applicable and r.plan is not None:
                items = tuple(r.plan.explain) + (tuple(r.figures.explain) if r.figures is not None else ())
                console.print(explain_panel(f"{r.name}: formula, inputs and source of every number", items))
    if res.best:
        figure = {"predicted_time_s": "predicted time",
                  "predicted_time_s_uncalibrated": "uncalibrated predicted time"}.get(res.best_by,
                                                                                      "roofline / SM coverage")
        print_wrapped(console, f"* best by {figure}: {res.best} ({res.best_rule})")
        if res.best_roofline_proxy and res.best_roofline_proxy != res.best:
            print_wrapped(console, f"  best by the roofline proxy (roofline time / SM coverage, every policy): "
                          f"{res.best_roofline_proxy}")
