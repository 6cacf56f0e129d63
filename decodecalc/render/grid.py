"""`grid` and `explain`: the launch table, its notes, and the formula panels, from typed results."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from decodecalc.formatting import fmt_bytes, fmt_grid, fmt_per_seq, fmt_time, fmt_value

if TYPE_CHECKING:
    from decodecalc.derived import Derived
    from decodecalc.launchers.sglang_triton import SglangPlan
    from decodecalc.launchers.vllm_unified import VllmPlan
    from decodecalc.reports.explain import Step
    from decodecalc.reports.grid import GridReport, SystemResult


def workload_caption(r: GridReport) -> str:
    w = r.work
    lens = fmt_per_seq(w.seq_lens, 4)
    q = "" if set(w.query_lens) == {1} else f", query lens {fmt_per_seq(w.query_lens, 4)}"
    return (f"{w.model.name}, TP={w.tp} -> per rank h={w.num_heads}, h_kv={w.num_kv_heads}, d={w.head_size}"
            f" (g={w.group_size}); batch {w.batch}, seq len {lens}{q}; {w.dtype}, KV {w.kv_cache_dtype}, "
            f"block {w.block_size}; {r.gpu.name} ({r.gpu.num_sms} SMs, "
            f"{r.gpu.hbm_bandwidth_bytes_per_s / 1e9:,.0f} GB/s)")


def _cov(s: SystemResult) -> str:
    assert s.figures is not None
    c = s.figures.coverage
    waves = f"{c.waves} wave" + ("s" if c.waves != 1 else "")
    return (f"{min(c.programs_working, c.num_sms)}/{c.num_sms} SMs ({c.fraction:.0%}), {waves}; "
            f"{c.programs_working:,} of {c.programs_launched:,} programs work")


def _vllm_cells(p: VllmPlan) -> dict[str, str]:
    la = p.launch
    return {
        "path": "3D split-KV" if la.use_3d else "2D (no split)",
        "grid (stage 1)": fmt_grid(la.grid),
        "merge grid": fmt_grid(la.reduce_grid or None),
        "packing": f"BLOCK_M {la.block_m}, BLOCK_Q {la.block_q}, TILE {la.tile_size}",
        "splits / seq": f"{la.num_segments} segments (threshold {p.backend.seq_threshold_3D})",
        "working splits / seq": fmt_per_seq(p.active_segments, 4),
    }


def _sglang_cells(p: SglangPlan) -> dict[str, str]:
    return {
        "path": f"two-stage, {p.mode} splits",
        "grid (stage 1)": fmt_grid(p.stage1_grid),
        "merge grid": fmt_grid(p.stage2_grid),
        "packing": f"head tiles {p.stage1_grid[1]}, split len {fmt_per_seq(p.kv_len_per_split, 3)}",
        "splits / seq": f"num_kv_splits {fmt_per_seq(p.num_kv_splits, 4)} of {p.max_kv_splits}",
        "working splits / seq": fmt_per_seq(p.nonempty_splits, 4),
    }


def _predicted(s: SystemResult) -> str:
    """The time model's figure as the report attached it (absent when the profile could not be used)."""
    p = s.prediction
    if p is None or p.time_s is None:
        return "-"
    return (fmt_time(p.time_s) + ("" if p.calibrated else " (uncalibrated)")
            + (" (in a layer's graph)" if p.regime == "in-graph" else "")
            + (f" ±{100 * p.expected_error.median_abs_err:.1f}%" if p.expected_error is not None else ""))


def _common_cells(s: SystemResult) -> dict[str, str]:
    f = s.figures
    assert f is not None and s.model is not None  # only systems without an error are rendered here
    plan = s.model.plan
    return {
        "G_2D -> S*": f"{f.g_2d:,} -> S* = {f.s_star}",
        "SM coverage": _cov(s),
        "KV bytes / layer": fmt_bytes(f.kv_bytes_per_layer),
        "KV bytes, all layers": fmt_bytes(f.kv_bytes_all_layers),
        "partial state / layer": f"{fmt_bytes(f.partial_state_bytes_per_layer)} may be written, "
                                 f"{fmt_bytes(f.partial_state_bytes_used_per_layer)} used",
        "merge traffic / KV": f"{fmt_bytes(f.merge_traffic_bytes_per_layer)} ({f.merge_to_kv_ratio:.1%} of KV)",
        "scratch allocated": fmt_bytes(plan.scratch_bytes),
        "intensity": f"tile {f.tile_arithmetic_intensity:.3g}, kernel {f.arithmetic_intensity:.3g} FLOP/B "
                     f"({f.times_below_ridge:.0f}x below ridge)",
        "roofline time": f"{fmt_time(f.roofline_time_s)} / layer, {fmt_time(f.roofline_time_all_layers_s)} all layers",
        "predicted time / layer": _predicted(s),
    }


def _version(s: SystemResult) -> str:
    if s.error or s.model is None:
        return ""
    if s.name == "vllm":
        return str(s.model.settings.version)
    from decodecalc.launchers.sglang_triton import VERSION

    return VERSION


ROWS = ("path", "grid (stage 1)", "merge grid", "packing", "splits / seq", "working splits / seq", "G_2D -> S*",
        "SM coverage", "KV bytes / layer", "KV bytes, all layers", "partial state / layer", "merge traffic / KV",
        "scratch allocated", "intensity", "roofline time", "predicted time / layer")

_CELLS: dict[str, Callable[[Any], dict[str, str]]] = {"vllm": _vllm_cells, "sglang": _sglang_cells}
_HEADS = {"vllm": "vLLM {} Triton unified", "sglang": "SGLang {} Triton decode"}


def grid_table(r: GridReport) -> Table:
    t = Table(title="Decode attention launch, one layer, one rank", caption=Text(workload_caption(r)),
              show_lines=False, expand=False)
    t.add_column("", style="bold", overflow="fold")
    cells: list[dict[str, str] | None] = []
    for s in r.systems:
        t.add_column(_HEADS.get(s.name, s.name).format(_version(s)).replace("  ", " "), overflow="fold")
        cells.append(None if s.error else {**_CELLS[s.name](s.model), **_common_cells(s)})
    show_predicted = any(c is not None and c["predicted time / layer"] != "-" for c in cells)
    for label in ROWS:
        if label == "predicted time / layer" and not show_predicted:
            continue
        t.add_row(label, *[Text("n/a", style="dim") if c is None else c[label] for c in cells])
    return t


def grid_notes(r: GridReport) -> list[Text]:
    notes: list[Text] = []
    for s in r.systems:
        if s.error:
            notes.append(Text(f"{s.name}: not applicable: {s.error}", style="yellow"))
            continue
        if s.name == "vllm" and s.model is not None:
            vp: VllmPlan = s.model
            if vp.launch.reasons_2d:
                notes.append(Text("vllm runs 2D because: " + "; ".join(vp.launch.reasons_2d), style="cyan"))
            cg = vp.replay
            if cg is not None:
                changed = cg.launch.grid != vp.launch.grid
                notes.append(Text(
                    f"vllm CUDA graph: a FULL graph replays for {cg.num_reqs_padded} request(s) / "
                    f"{cg.num_tokens_padded} tokens: {'3D' if cg.launch.use_3d else '2D'} grid "
                    f"{fmt_grid(cg.launch.grid)}, merge {fmt_grid(cg.launch.reduce_grid or None)}"
                    + (" (differs from the unpadded launch)" if changed else ""),
                    style="magenta" if changed else "dim"))
            else:
                how = vp.replay_mode if vp.replay_mode != "eager" else "eagerly"
                notes.append(Text(f"vllm CUDA graph: attention runs {how} with the real batch", style="dim"))
        if s.name == "sglang" and s.model is not None and s.model.window_kv_lens:
            notes.append(Text(f"sglang sliding-window layer: each sequence reads its window, min(L, W - 1) = "
                              f"{fmt_per_seq(s.model.window_kv_lens, 3)} keys, cut into the num_kv_splits of its "
                              "full length (triton_backend.py forward_decode, window_kv_indptr)", style="cyan"))
        pred = s.prediction
        if pred is not None and pred.error is not None:
            notes.append(Text(f"{s.name}: no predicted time: {pred.error}", style="yellow"))
        for w in pred.warnings if pred is not None else ():
            notes.append(Text(f"{s.name}: predicted time uncalibrated: {w}", style="yellow"))
        if pred is not None and pred.expected_error is not None:
            notes.append(Text(f"{s.name}: expected {pred.expected_error.text()}", style="dim"))
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
        lines.append(Text.assemble((d.name, "bold"), " = ", (fmt_value(d.value), "green")))
        inputs = ", ".join(f"{k}={fmt_value(v)}" for k, v in d.inputs.items())
        lines.append(Text(f"    {d.formula}" + (f"   with {inputs}" if inputs else "")))
        if d.source:
            lines.append(Text(f"    [{d.source}]", style="dim"))
    return Panel(Group(*lines), title=title, title_align="left")


def print_steps(console: Console, report: GridReport, steps: Iterable[Step]) -> None:
    """`explain`: the chapter's seven steps, each titled with its upstream source."""
    console.print(Text.assemble(("One layer, one decode step:", "bold"), " ", workload_caption(report)))
    for s in steps:
        console.print()
        console.print(Text.assemble((s.title, "bold"), *((("  ", ""), (s.source, "dim")) if s.source else ())))
        for line in s.lines:
            console.print(Text(f"   {line}"))
