"""The engines' default backends for a step (reports/defaults.py), as a few wrapped lines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console

from decodecalc.render import print_wrapped


def print_defaults(console: Console, defaults: Sequence[Any], gpu_name: str) -> None:
    """One line per engine: the backend it picks by default, what it runs, its launch and time, and why; then the
    backends it skipped and why (in dim)."""
    if not defaults:
        return
    print_wrapped(console, f"What the engines run by default on {gpu_name} (launchers/engine_defaults.py):",
                  style="bold")
    for d in defaults:
        print_wrapped(console, d.line(), indent="  ", hang="    ")
        for s in (d.selection.skipped if d.selection is not None else ()):
            print_wrapped(console, f"skipped {s.name}: {s.reason}", indent="    ", hang="    ", style="dim")
