"""`recommend`: the recommended split count per kernel, the fastest prediction, the tie rule."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from decodecalc.formatting import fmt_us
from decodecalc.render import print_wrapped

if TYPE_CHECKING:
    from decodecalc.api import RecommendResult
    from decodecalc.reports.recommend import KernelRecommendation


def tie_rule(tie_fraction: float) -> str:
    return (f"Tie rule: candidates whose ranking score (the predicted time averaged over occupancy +-1) is within "
            f"{tie_fraction:.0%} of the best score are equal to the model (its error), and the one with the most "
            "splits is recommended: measured times kept falling with more programs near the optimum "
            "(docs/recommend.md).")


def _speedup(kr: KernelRecommendation) -> str:
    s = f"{kr.speedup:.2f}x"
    return s + " (tie)" if kr.speedup < 1.0 else s


def print_recommendation(console: Console, err: Console, res: RecommendResult, tie_fraction: float) -> None:
    rec, w, gpu = res.recommendation, res.inputs.work, res.inputs.gpu
    lens = w.seq_lens
    shape = f"L={lens[0]}" if len(set(lens)) == 1 else f"ragged L={min(lens)}..{max(lens)}"
    console.print(Text.assemble((w.model.name, "bold"), f" TP={w.tp}  B={w.batch} {shape}  h={w.num_heads} "
                                f"h_kv={w.num_kv_heads} d={w.head_size}  on {gpu.name}"))
    for warning in [rec.warning] if rec.warning else []:
        err.print(Text.assemble(("Warning:", "bold yellow"), f" {warning}"))
    t = Table(title="Recommended KV split count per kernel (predicted time of one layer)", box=box.SIMPLE_HEAD,
              pad_edge=False)
    for col in ("kernel", "engine default", "recommended", "fastest predicted", "speedup"):
        t.add_column(col, justify="right" if col == "speedup" else "left", overflow="fold")
    for k, kr in rec.kernels.items():
        fast = kr.fastest
        t.add_row(k, f"{kr.default.label.split(': ', 1)[-1]}\n{fmt_us(kr.default.predicted_time_s)} µs",
                  f"{kr.recommended.label}\n{fmt_us(kr.recommended.predicted_time_s)} µs",
                  f"{fast.label}\n{fmt_us(fast.predicted_time_s)} µs", _speedup(kr))
    console.print(t)
    c = Table(title="Every candidate (predicted µs)", box=box.SIMPLE_HEAD, pad_edge=False)
    c.add_column("kernel")
    allsplits = sorted({ch.splits for kr in rec.kernels.values() for ch in kr.candidates})
    for s in allsplits:
        c.add_column(f"S={s}", justify="right")
    for k, kr in rec.kernels.items():
        by = {ch.splits: ch for ch in kr.candidates}
        cells: list[Text | str] = []
        for s in allsplits:
            ch = by.get(s)
            if ch is None:
                cells.append("-")
                continue
            mark = ("*" if ch is kr.recommended else "") + ("<" if ch is kr.fastest else "")
            cells.append(Text(fmt_us(ch.predicted_time_s) + mark, style="bold green" if ch is kr.recommended else ""))
        c.add_row(k, *cells)
    console.print(c)
    print_wrapped(console, "S=1 is unsplit (vLLM: the 2D kernel); * marks the recommendation, < the fastest "
                  "prediction; speedup = engine default / recommended.")
    print_wrapped(console, tie_rule(tie_fraction))
    for k, kr in rec.kernels.items():
        fast = kr.fastest
        if fast is not kr.recommended:
            print_wrapped(console, f"{k}: the fastest prediction is {fast.label} at {fmt_us(fast.predicted_time_s)} "
                          f"us; the recommendation ({kr.recommended.label}) is predicted {kr.margin_vs_fastest:.1%} "
                          f"slower, and its ranking score is within {kr.score_margin:.1%} of the best (tie rule).")
        if kr.speedup < 1.0:
            print_wrapped(console, f"{k}: the engine default is predicted {1 / kr.speedup - 1:.1%} faster than the "
                          "recommendation: a tie within the model's error, where the rule prefers more splits; "
                          "keep the default if you trust the prediction over that trend.")
        if kr.expected_error is not None:
            print_wrapped(console, f"{k}: expected error of these times {kr.expected_error.text()}", style="dim")
    for k, kr in rec.kernels.items():
        console.print(Text(f"{k}: how to apply", style="bold"))
        for line in kr.apply:
            print_wrapped(console, f"- {line}", indent="  ")
        if kr.note:
            print_wrapped(console, f"note: {kr.note}", indent="  ", style="dim")
    for k, why in rec.skipped.items():
        print_wrapped(console, f"{k}: not modelled for this step: {why}", style="dim")
    src = rec.profile.path or "built-in"
    state = "calibrated" if rec.calibrated else "UNCALIBRATED"
    if rec.calibrated_kernels and not rec.calibrated:  # some kernels inside their measured domain, some outside
        state += f" (calibrated for {', '.join(rec.calibrated_kernels)} only)"
    console.print(Text(f"time model: {state} profile {src}", style="dim"))
    print_wrapped(console, rec.profile.regime_note(tuple(rec.kernels)), style="dim")
