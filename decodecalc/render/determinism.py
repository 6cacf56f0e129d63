"""`determinism`: one request's splits as the batch grows, per policy, readable at 80 columns.

Each policy is one row: the batch sizes grouped into runs that keep the same summation order
(same path and split ranges), so a change is a new run, visible without colour.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from decodecalc.reports.determinism import PolicyDeterminism, RequestView


def _span(batches: Sequence[int]) -> str:
    return f"B={batches[0]}" if len(batches) == 1 else f"B={batches[0]}-{batches[-1]}"


def runs(views: Sequence[RequestView], batches: Sequence[int]) -> str:
    """``B=1-16: 16x160 3D | B=17-256: 1x2560 2D``; batches where the policy does not apply read n/a."""
    by_b = {v.batch: v for v in views}
    groups: list[tuple[Any, str, list[int]]] = []
    for b in batches:
        v = by_b.get(b)
        sig, short = (None, "n/a") if v is None else (v.signature, v.short)
        if groups and groups[-1][0] == sig and groups[-1][1] == short:
            groups[-1][2].append(b)
        else:
            groups.append((sig, short, [b]))
    return " | ".join(f"{_span(bs)}: {short}" for _, short, bs in groups)


def _table(title: str, items: Sequence[PolicyDeterminism], batches: Sequence[int]) -> Table:
    t = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("policy", no_wrap=True)
    t.add_column("invariant", justify="center", no_wrap=True)
    t.add_column("orders", justify="right", no_wrap=True)
    t.add_column("splits x split length (path), by batch size; | = the order changes", overflow="fold")
    for r in items:
        inv = r.batch_invariant
        mark = "-" if inv is None else ("yes" if inv else "NO")
        t.add_row(r.name, Text(mark, style="green" if inv else ("red" if inv is False else "")),
                  str(r.distinct_orders) if r.views else "-", runs(r.views, batches) if r.views else "n/a")
    return t


def print_determinism(console: Console, data: dict[str, Any], rows: Sequence[PolicyDeterminism],
                      switches: Sequence[PolicyDeterminism]) -> None:
    batches = data["batches"]
    console.print(Text(f"{data['model']} TP={data['tp']} on {data['gpu']}: one request of {data['seq_len']} keys, "
                       f"the others {data['others']} keys; batch sizes {', '.join(map(str, batches))}."))
    console.print(_table("Batch invariance: the tracked request's splits as the batch grows", rows, batches))
    console.print("By design:")
    for r in rows:
        if r.views:
            console.print(Text(f"  {r.name}: {r.by_design}"))
        else:
            reason = next(iter(r.reasons.values()), "not applicable")
            console.print(Text(f"  {r.name}: not applicable: {reason}"))
    console.print(_table("Deterministic switches on", switches, batches))
    for r in switches:
        console.print(Text(f"  {r.name}: {r.by_design}"))
    console.print(Text("A run (B=a-b) keeps one summation order; each | starts a new one. orders: distinct orders "
                       "over the batch sizes; invariant: one order for every batch size."))
