"""Rich rendering of reports: formatting and units only, no arithmetic beyond unit conversion.

One convention everywhere: SI units, KB = 1e3 B, MB = 1e6 B, GB = 1e9 B, GB/s = 1e9 B/s.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from decodecalc.derived import Derived
from decodecalc.reports.grid import GridReport, SystemResult


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            v = n / scale
            return f"{v:.3g} {unit}" if v < 100 else f"{v:,.0f} {unit}"
    return f"{n:,.0f} B"


def fmt_time(s: float) -> str:
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.3g} µs"
    return f"{s * 1e9:.3g} ns"


def fmt_grid(grid: Iterable[int] | None) -> str:
    if grid is None:
        return "-"
    g = tuple(grid)
    total = 1
    for x in g:
        total *= x
    return f"({', '.join(map(str, g))}) = {total:,}"


def fmt_per_seq(values: Iterable[Any], limit: int = 6) -> str:
    v = list(values)
    if not v:
        return "-"
    if len(set(v)) == 1:
        return f"{v[0]}" + (f" (x{len(v)})" if len(v) > 1 else "")
    if len(v) <= limit:
        return ", ".join(map(str, v))
    return f"{', '.join(map(str, v[:limit]))}, ... ({len(v)} seqs, min {min(v)}, max {max(v)})"


def workload_caption(r: GridReport) -> str:
    w = r.work
    lens = fmt_per_seq(w.seq_lens, 4)
    q = "" if set(w.query_lens) == {1} else f", query lens {fmt_per_seq(w.query_lens, 4)}"
    return (f"{w.model.name}, TP={w.tp} -> per rank h={w.num_heads}, h_kv={w.num_kv_heads}, d={w.head_size}"
            f" (g={w.group_size}); batch {w.batch}, seq len {lens}{q}; {w.dtype}, KV {w.kv_cache_dtype}, "
            f"block {w.block_size}; {r.gpu.name} ({r.gpu.num_sms} SMs, {r.gpu.hbm_bandwidth_bytes_per_s / 1e9:,.0f} GB/s)")


def _cov(s: SystemResult) -> str:
    c = s.data["sm_coverage"]
    waves = f"{c['waves']} wave" + ("s" if c["waves"] != 1 else "")
    return (f"{min(c['programs_working'], c['num_sms'])}/{c['num_sms']} SMs ({c['fraction']:.0%}), {waves}; "
            f"{c['programs_working']:,} of {c['programs_launched']:,} programs work")


def grid_table(r: GridReport) -> Table:
    cols = [s for s in r.systems]
    t = Table(title="Decode attention launch, one layer, one rank", caption=workload_caption(r),
              show_lines=False, expand=False)
    t.add_column("", style="bold")
    for s in cols:
        head = {"vllm": f"vLLM {s.data.get('version', '')} Triton unified",
                "sglang": f"SGLang {s.data.get('version', '')} Triton decode"}.get(s.name, s.name)
        t.add_column(head, overflow="fold")

    def row(label: str, fn: Any) -> None:
        cells: list[Text | str] = []
        for s in cols:
            if s.error:
                cells.append(Text("n/a", style="dim"))
            else:
                try:
                    cells.append(fn(s))
                except KeyError:
                    cells.append("-")
        t.add_row(label, *cells)

    def v(s: SystemResult, k: str) -> Any:
        return s.data[k]

    row("path", lambda s: ("3D split-KV" if v(s, "use_3d") else "2D (no split)") if s.name == "vllm"
        else f"two-stage, {v(s, 'mode')} splits")
    row("grid (stage 1)", lambda s: fmt_grid(v(s, "grid")))
    row("merge grid", lambda s: fmt_grid(v(s, "reduce_grid") if s.name == "vllm" else v(s, "stage2_grid")))
    row("packing", lambda s: f"BLOCK_M {v(s, 'block_m')}, BLOCK_Q {v(s, 'block_q')}, TILE {v(s, 'tile_size')}"
        if s.name == "vllm" else f"head tiles {v(s, 'grid')[1]}, split len {fmt_per_seq(v(s, 'kv_len_per_split'), 3)}")
    row("splits / seq", lambda s: (f"{v(s, 'num_segments')} segments (threshold {v(s, 'seq_threshold_3d')})"
                                   if s.name == "vllm" else
                                   f"num_kv_splits {fmt_per_seq(v(s, 'num_kv_splits'), 4)} of {v(s, 'max_kv_splits')}"))
    row("working splits / seq", lambda s: fmt_per_seq(v(s, "active_segments") if s.name == "vllm"
                                                      else v(s, "nonempty_splits"), 4))
    row("G_2D -> S*", lambda s: f"{v(s, 'g_2d'):,} -> S* = {v(s, 's_star')}")
    row("SM coverage", _cov)
    row("KV bytes / layer", lambda s: fmt_bytes(v(s, "kv_bytes_per_layer")))
    row("KV bytes, all layers", lambda s: fmt_bytes(v(s, "kv_bytes_all_layers")))
    row("partial state / layer", lambda s: f"{fmt_bytes(v(s, 'partial_state_bytes_per_layer'))} may be written, "
        f"{fmt_bytes(v(s, 'partial_state_bytes_used_per_layer'))} used")
    row("merge traffic / KV", lambda s: f"{fmt_bytes(v(s, 'merge_traffic_bytes_per_layer'))} "
        f"({v(s, 'merge_to_kv_ratio'):.1%} of KV)")
    row("scratch allocated", lambda s: fmt_bytes(v(s, "scratch_bytes")))
    row("intensity", lambda s: f"tile {v(s, 'tile_arithmetic_intensity'):.3g}, kernel "
        f"{v(s, 'arithmetic_intensity'):.3g} FLOP/B ({v(s, 'times_below_ridge'):.0f}x below ridge)")
    row("roofline time", lambda s: f"{fmt_time(v(s, 'roofline_time_s'))} / layer, "
        f"{fmt_time(v(s, 'roofline_time_all_layers_s'))} all layers")
    if any("predicted_time_s" in s.data for s in cols if not s.error):
        row("predicted time / layer", lambda s: fmt_time(v(s, "predicted_time_s")) +
            ("" if v(s, "predicted_calibrated") else " (uncalibrated)"))
    return t


def grid_notes(r: GridReport) -> list[Text]:
    notes: list[Text] = []
    for s in r.systems:
        if s.error:
            notes.append(Text(f"{s.name}: not applicable: {s.error}", style="yellow"))
            continue
        if s.name == "vllm":
            d = s.data
            if d["reasons_2d"]:
                notes.append(Text("vllm runs 2D because: " + "; ".join(d["reasons_2d"]), style="cyan"))
            cg = d["cuda_graph"]
            if cg is not None:
                changed = cg["grid"] != d["grid"]
                style = "magenta" if changed else "dim"
                notes.append(Text(
                    f"vllm CUDA graph: a FULL graph replays for {cg['num_reqs_padded']} request(s) / "
                    f"{cg['num_tokens_padded']} tokens: {'3D' if cg['use_3d'] else '2D'} grid {fmt_grid(cg['grid'])}"
                    f", merge {fmt_grid(cg['reduce_grid'])}" + (" (differs from the unpadded launch)" if changed else ""),
                    style=style))
            else:
                notes.append(Text(f"vllm CUDA graph: attention runs {d['replay'] if d['replay'] != 'eager' else 'eagerly'}"
                                  " with the real batch", style="dim"))
    return notes


def print_grid(console: Console, r: GridReport, explain: bool = False) -> None:
    console.print(grid_table(r))
    for n in grid_notes(r):
        console.print(n)
    p = r.paging
    if p.get("blocks_per_kv_block", 1) != 1:
        console.print(Text(f"paging: allocator block {p['block_size']} cut into kernel blocks of "
                           f"{p['kernel_block_size']}: block table {p['blocks_per_kv_block']}x wider "
                           f"({fmt_per_seq(p['block_table_bytes'], 3)} B per sequence)", style="dim"))
    if explain:
        for s in r.systems:
            if not s.error:
                console.print(explain_panel(f"{s.name}: formula, inputs and source of every number", s.explain))


def explain_panel(title: str, items: Iterable[Derived]) -> Panel:
    """``name = value`` then the formula with its inputs, then the source, one block per number."""
    lines: list[Text] = []
    for d in items:
        head = Text.assemble((d.name, "bold"), " = ", (_short(d.value), "green"))
        lines.append(head)
        inputs = ", ".join(f"{k}={_short(v)}" for k, v in d.inputs.items())
        lines.append(Text(f"    {d.formula}" + (f"   with {inputs}" if inputs else "")))
        if d.source:
            lines.append(Text(f"    [{d.source}]", style="dim"))
    return Panel(Group(*lines), title=title, title_align="left")


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, tuple) and len(v) > 8:
        return f"({', '.join(map(str, v[:6]))}, ... {len(v)} values)"
    return str(v)


def group(*items: Any) -> Group:
    return Group(*items)
