"""Heatmaps of a sweep: SM coverage, split count and the split / no-split (2D/3D) regions.

PNG output needs the optional ``plot`` extra (``pip install '.[plot]'`` from the clone); matplotlib is
imported inside the functions only. :func:`render_terminal` is the dependency-free fallback
(plain strings; the CLI prints them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from decodecalc.errors import DecodecalcError
from decodecalc.extras import install_hint
from decodecalc.formatting import fmt_tokens
from decodecalc.reports.sweep import SweepGrid, SweepResult

PANELS = (("sm_coverage", "SM coverage (first wave)"), ("nonempty_splits", "splits that read keys"),
          ("region", "split (3D) vs no split (2D)"))


def plot_available() -> bool:
    """Whether matplotlib can be imported to write PNG files. They are drawn with Agg whatever $MPLBACKEND names
    (matplotlib.use("Agg") below): an unknown name there (MPLBACKEND=nonexistent) made the import itself raise."""
    import os

    os.environ["MPLBACKEND"] = "Agg"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _region_value(v: Any) -> float:
    if v == "n/a":  # a point the policy cannot serve
        return math.nan
    return 1.0 if v in ("3D", "split") else 0.0


def _ticks(values: tuple[int, ...], n: int = 6) -> tuple[list[int], list[str]]:
    if len(values) <= n:
        idx = list(range(len(values)))
    else:
        idx = sorted({round(i * (len(values) - 1) / (n - 1)) for i in range(n)})
    return idx, [fmt_tokens(values[i]) for i in idx]


def sweep_png_writer(result: SweepResult, *, max_rows: int = 8, dpi: int = 110) -> Callable[[Path], None]:
    """Draw the heatmaps now (so every problem is raised before any file is touched) and return the
    function that saves them as PNG to the path it is given (and frees the figure)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import LogNorm
    except ImportError:
        raise DecodecalcError(f"--plot needs the 'plot' extra: {install_hint('plot')} (matplotlib); "
                              "without it the sweep prints a terminal heatmap") from None
    grids = [g for g in result.grids if g.applicable][:max_rows]
    if not grids:
        raise DecodecalcError("nothing to plot: no policy can serve the swept configurations")
    fig, axes = plt.subplots(len(grids), 3, figsize=(15, 3.4 * len(grids)), squeeze=False)
    for row, g in enumerate(grids):
        for col, (metric, title) in enumerate(PANELS):
            ax = axes[row][col]
            data = g.values[metric]
            if metric == "region":
                data = [[_region_value(v) for v in r] for r in data]
                im = ax.imshow(data, aspect="auto", origin="lower", cmap="coolwarm", vmin=0, vmax=1,
                               interpolation="nearest")
            elif metric == "sm_coverage":
                im = ax.imshow(data, aspect="auto", origin="lower", cmap="viridis", vmin=0, vmax=1,
                               interpolation="nearest")
            else:
                hi = max(max(r) for r in data)
                im = ax.imshow(data, aspect="auto", origin="lower", cmap="magma",
                               norm=LogNorm(vmin=1, vmax=max(hi, 2)), interpolation="nearest")
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
            xi, xl = _ticks(g.seq_lens)
            yi, yl = _ticks(g.batches)
            ax.set_xticks(xi, xl)
            ax.set_yticks(yi, yl)
            ax.set_xlabel("sequence length")
            ax.set_ylabel("batch")
            ax.set_title(f"{g.policy}: {title}\n{g.model} TP{g.tp} {g.gpu} ({g.num_sms} SMs)", fontsize=9)
    fig.tight_layout()

    def save(target: Path) -> None:
        try:
            fig.savefig(target, dpi=dpi, format="png")
        finally:
            plt.close(fig)

    return save


# ------------------------------------------------------------------------------------------
# terminal fallback

RAMP = " ░▒▓█"


def _pick(values: tuple[int, ...], k: int) -> list[int]:
    """Up to k indices, log-spaced in value when the range spans more than a factor 8 (else even)."""
    n = len(values)
    if n <= k:
        return list(range(n))
    lo, hi = values[0], values[-1]
    if hi <= 8 * lo:
        return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})
    import bisect

    picked = set()
    for i in range(k):
        target = lo * (hi / lo) ** (i / (k - 1))
        j = min(n - 1, bisect.bisect_left(values, target))
        if j > 0 and abs(values[j - 1] - target) <= abs(values[j] - target):
            j -= 1
        picked.add(j)
    return sorted(picked)


def render_terminal(g: SweepGrid, metric: str = "sm_coverage", *, rows: int = 16, cols: int = 64) -> list[str]:
    """A compact character heatmap (batch up, sequence length right) with a legend."""
    if not g.applicable:
        return [f"{g.policy} ({g.model} TP{g.tp} {g.gpu}): not applicable: {g.reason}"]
    data = g.values[metric]
    ri = _pick(g.batches, rows)
    ci = _pick(g.seq_lens, cols)
    if metric == "region":
        def cell(v: Any) -> str:
            if v == "n/a":
                return "x"
            return "█" if _region_value(v) else "·"
        legend = "█ split (3D)   · no split (2D)   x not served"
    elif metric == "sm_coverage":
        def cell(v: Any) -> str:
            return RAMP[min(len(RAMP) - 1, int(v * (len(RAMP) - 1) + 0.5))]
        legend = "SM coverage: ' ' 0%  ░ 25%  ▒ 50%  ▓ 75%  █ 100%"
    else:
        hi = max(max(r) for r in data) or 1

        def cell(v: Any) -> str:
            if v <= 1:
                return "·"
            level = math.log2(v) / math.log2(max(hi, 2))
            return RAMP[max(1, min(len(RAMP) - 1, int(level * (len(RAMP) - 1) + 0.5)))]
        legend = f"{metric}: · 1, ░ to █ log scale up to {hi}"
    width = max(len(str(g.batches[i])) for i in ri)
    lines = [f"{g.policy}: {metric}  ({g.model} TP{g.tp} {g.gpu}, {g.num_sms} SMs)"]
    for i in reversed(ri):
        lines.append(f"B={g.batches[i]:>{width}} |" + "".join(cell(data[i][j]) for j in ci))
    first, last = fmt_tokens(g.seq_lens[ci[0]]), fmt_tokens(g.seq_lens[ci[-1]])
    pad = " " * (width + 3)
    lines.append(pad + "+" + "-" * len(ci))
    lines.append(pad + f"seq {first}" + " " * max(1, len(ci) - len(first) - len(last) - 4) + last)
    lines.append(pad + legend)
    if g.reason:
        lines.append(pad + f"note: {g.reason}")
    return lines
