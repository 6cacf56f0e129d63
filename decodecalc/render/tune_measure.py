"""`tune --measure`: measured totals beside the predicted ones, and each engine's pick by measurement."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from decodecalc.formatting import fmt_us
from decodecalc.render import print_wrapped

if TYPE_CHECKING:
    from decodecalc.reports.tune_measure import MeasuredItem, MeasuredTune

_ENGINE = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


def _row(m: MeasuredItem) -> list[str]:
    i = m.item
    ok = math.isfinite(m.ratio.value)
    ci = f" ±{m.ratio.rel_ci95:.1%}" if ok and math.isfinite(m.ratio.rel_ci95) else ""
    stated = f"±{i.stated_error[1]:.0%}" if i.stated_error else "none"
    flag = " !" if m.outside_stated_error else ""
    role = ", ".join(r for r in i.roles if r in ("pick", "engine default"))
    return [escape(f"{_ENGINE.get(i.engine, i.engine)} {i.label}") + (f" [dim]({role})[/]" if role else ""),
            ("" if i.calibrated else "~") + fmt_us(i.predicted_mean_step_s, 100.0),
            (fmt_us(m.measured_mean_step_s, 100.0) + ci) if ok else "not timed",
            f"{m.ratio.value:.3f}{flag}" if ok else "-", stated, str(m.steps)]


def print_measured(mt: MeasuredTune, console: Console | None = None) -> None:
    c = console or Console()
    where = mt.device or mt.gpu
    t = Table(title=f"Measured on {where}: {len(mt.steps)} sampled steps of {mt.num_steps:,} (CUDA graphs; mean "
                    "step of one layer, µs; ± the sample's 95% interval)",
              box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0, 0, 1), title_justify="left")
    for col in ("setting", "predicted", "measured", "meas/pred", "stated p90", "steps"):
        t.add_column(col, justify="left" if col == "setting" else "right", overflow="fold")
    for m in mt.items:
        t.add_row(*_row(m))
    c.print(t)
    if not all(m.item.calibrated for m in mt.items):
        print_wrapped(c, "~ an uncalibrated prediction (tune does not compare that backend): measured all the same",
                      indent="  ", style="dim")
    if any(m.outside_stated_error for m in mt.items):
        print_wrapped(c, "! measured total outside the p90 error tune states for it", indent="  ", style="dim")
    for v in mt.verdicts:
        name = _ENGINE.get(v.engine, v.engine)
        head = f"{name}: pick by {v.by}: {v.pick}"
        print_wrapped(c, f"{head} ({v.why})", indent="  ")
    for s in mt.skipped:
        print_wrapped(c, f"not measured: {s}", indent="  ", style="dim")
    for e in mt.errors[:5]:
        print_wrapped(c, f"failed: {e}", indent="  ", style="dim")
    if len(mt.errors) > 5:
        print_wrapped(c, f"... and {len(mt.errors) - 5} more failures (the timings file has each)", indent="  ",
                      style="dim")
    if mt.saved_to:
        took = f" in {mt.elapsed_s:.0f} s" if mt.elapsed_s is not None else ""
        print_wrapped(c, f"timings{took}: {mt.saved_to}", indent="  ", style="dim")
