"""Rich rendering of typed results, one module per command: formatting and units only.

Every rich table, panel and coloured line the CLI prints is built here (``decodecalc/commands``
parse and call; the pure number formatting is :mod:`decodecalc.formatting`). Output must read at
80 columns and in a pipe: tables fold instead of cutting cells, and no meaning rides on colour
alone (a changed cell is also marked with a character).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def stdout() -> "Console":
    """The console every renderer prints to (soft-wrapped plain lines, no highlighting of numbers)."""
    from rich.console import Console

    return Console(highlight=False)


def stderr() -> "Console":
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def print_wrapped(console: "Console", text: str, indent: str = "", hang: str = "  ", style: str = "",
                  min_width: int = 20) -> None:
    """Print ``text`` word-wrapped to the console's width (at least ``min_width``), continuation lines
    indented by ``hang``; plain text: rich markup in it is not interpreted."""
    from rich.text import Text

    from decodecalc.formatting import wrap_words

    for line in wrap_words(indent + text, max(min_width, console.width), indent + hang):
        console.print(Text(line, style=style), soft_wrap=True)
