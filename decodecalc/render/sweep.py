"""`sweep`: the progress bar (stderr) and the terminal heatmaps (stdout)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from decodecalc.reports.sweep import SweepResult


@contextmanager
def progress_bar(err: Console, total: int) -> Iterator[Callable[[int, int, str], None]]:
    """A transient bar on stderr; yields the ``progress(done, total, label)`` callback run_sweep takes."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("sweep", total=total)

        def progress(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label)

        yield progress


def print_heatmaps(console: Console, result: SweepResult, metric: str) -> None:
    from decodecalc.plot import render_terminal

    for g in result.grids:
        for line in render_terminal(g, metric):
            console.print(line, markup=False, highlight=False, emoji=False)
        console.print("")
