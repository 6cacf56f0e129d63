"""Pure text formatters shared by every command, the renderers and the explain traces.

No rich, no typer: plain strings only, so the core (explain traces, launch explanations) and the
rich layer (decodecalc/render/) print numbers the same way. One convention everywhere: SI units,
KB = 1e3 B, MB = 1e6 B, GB = 1e9 B, GB/s = 1e9 B/s; 1K on a sequence-length axis = 1024 tokens
(as the sweep labels and parses it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def fmt_bytes(n: float) -> str:
    """``1.5 MB``, ``268 MB``, ``1,234 GB``, ``512 B`` (SI)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            v = n / scale
            return f"{v:.3g} {unit}" if v < 100 else f"{v:,.0f} {unit}"
    return f"{n:,.0f} B"


def fmt_bytes_short(n: float) -> str:
    """``fmt_bytes`` without the space and the B (``1.5M``, ``512``): for narrow table cells."""
    return fmt_bytes(n).replace(" ", "").replace("B", "") or "0"


def fmt_time(s: float, micro: str = "µs") -> str:
    """``1.23 ms``, ``45.6 µs``, ``789 ns``; ``micro`` is the micro-second unit (``us`` where ASCII is needed)."""
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.3g} {micro}"
    return f"{s * 1e9:.3g} ns"


def fmt_us(t: float, whole_from_us: float = 1000.0) -> str:
    """A time in seconds as micro-seconds without the unit: ``116.9``, ``1,234`` (whole micro-seconds from
    ``whole_from_us`` up; tune prints them from 100)."""
    us = t * 1e6
    return f"{us:,.0f}" if us >= whole_from_us else f"{us:.1f}"


def fmt_saving(fraction: float) -> str:
    """A saving as a comparison: ``12.3% less than`` (``fraction`` >= 0), ``4.0% more than`` (below 0)."""
    return f"{fraction:.1%} less than" if fraction >= 0 else f"{-fraction:.1%} more than"


def fmt_grid(grid: Iterable[int] | None) -> str:
    """``(1, 8, 16) = 128``; ``-`` for no grid."""
    if grid is None:
        return "-"
    g = tuple(grid)
    total = 1
    for x in g:
        total *= x
    return f"({', '.join(map(str, g))}) = {total:,}"


def fmt_grid_x(grid: Iterable[int] | None) -> str:
    """``1x8x16``; ``-`` for no grid."""
    return "-" if grid is None else "x".join(map(str, grid))


def fmt_per_seq(values: Iterable[Any], limit: int = 6) -> str:
    """One value per sequence: ``16 (x64)`` when uniform, the list when short, else its head and range."""
    v = list(values)
    if not v:
        return "-"
    if len(set(v)) == 1:
        return f"{v[0]}" + (f" (x{len(v)})" if len(v) > 1 else "")
    if len(v) <= limit:
        return ", ".join(map(str, v))
    return f"{', '.join(map(str, v[:limit]))}, ... ({len(v)} seqs, min {min(v)}, max {max(v)})"


def fmt_range(values: Iterable[int]) -> str:
    """``16`` when uniform, else ``min-max``; ``-`` when empty."""
    vals = tuple(values)
    if not vals:
        return "-"
    return str(vals[0]) if len(set(vals)) == 1 else f"{min(vals)}-{max(vals)}"


def fmt_count_list(xs: Sequence[int], width: int = 24) -> str:
    """``8*64`` when uniform (value*count), else the comma list cut at ``width`` characters."""
    if not xs:
        return "-"
    if len(set(xs)) == 1:
        return f"{xs[0]}*{len(xs)}" if len(xs) > 1 else str(xs[0])
    s = ",".join(map(str, xs))
    return s if len(s) <= width else s[:width - 3] + "..."


def fmt_sizes(sizes: Sequence[int], limit: int = 14, head: int = 8, tail: int = 3, brackets: bool = False) -> str:
    """A long list of sizes as its head, ``...``, its tail and the count (``[...]`` around the list if asked)."""
    o, c = ("[", "]") if brackets else ("", "")
    if len(sizes) <= limit:
        return o + ", ".join(map(str, sizes)) + c
    return (f"{o}{', '.join(map(str, sizes[:head]))}, ..., {', '.join(map(str, sizes[-tail:]))}{c} "
            f"({len(sizes)} sizes)")


def fmt_value(v: Any) -> str:
    """A number or tuple in an explanation: floats to 6 significant digits, long tuples cut."""
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, tuple) and len(v) > 8:
        return f"({', '.join(map(str, v[:6]))}, ... {len(v)} values)"
    return str(v)


def fmt_tokens(x: int) -> str:
    """A token count as the sweep labels it: ``128K`` for multiples of 1024 from 1024 up, else the number."""
    if x >= 1024 and x % 1024 == 0:
        return f"{x // 1024}K"
    return str(x)


def parse_tokens(text: str) -> int:
    """The inverse of :func:`fmt_tokens`, case-insensitive: ``128K`` / ``8k`` -> 131072 / 8192, ``1M`` -> 2**20.

    Raises ValueError (with the text) when it is not an integer with an optional K or M suffix.
    """
    t = text.strip()
    scale = 1
    if t[-1:].lower() == "k":
        scale, t = 1024, t[:-1]
    elif t[-1:].lower() == "m":
        scale, t = 1024 * 1024, t[:-1]
    if not t or not t.strip().lstrip("+-").isdigit():
        raise ValueError(f"{text!r} is not an integer (a K or M suffix means x1024 or x1048576)")
    return int(t) * scale


def wrap_words(text: str, width: int = 80, indent: str = "") -> list[str]:
    """Greedy word wrap to ``width`` columns (continuation lines get ``indent``); long words stay whole."""
    lines: list[str] = []
    lead = text[:len(text) - len(text.lstrip())]
    cur = ""
    for word in text.split():
        word = (lead + word) if not cur and not lines else word
        cand = f"{cur} {word}" if cur else word
        if len(cand) > width and cur:
            lines.append(cur)
            cur = indent + word
        else:
            cur = cand
    if cur:
        lines.append(cur)
    return lines
