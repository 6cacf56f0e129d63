"""The explained number, and the tiny integer helpers every launcher uses (upstream names)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def cdiv(a: int, b: int) -> int:
    """Ceiling division, as Triton's ``cdiv`` / vLLM's ``cdiv_fn`` / CUDA's DIVIDE_ROUND_UP."""
    return -(-a // b)


def _is_array(x: Any) -> bool:
    return hasattr(x, "shape")


def maximum(a: Any, b: Any) -> Any:
    """``max(a, b)``; elementwise when either is an array. The upstream rules use it so that one function serves
    one value and a whole workload's arrays (tune's batch evaluator) alike: arrays go through their own arithmetic,
    so this module never imports numpy."""
    if not (_is_array(a) or _is_array(b)):
        return a if a >= b else b
    return a + (b > a) * (b - a)


def minimum(a: Any, b: Any) -> Any:
    """``min(a, b)``; elementwise when either is an array (see :func:`maximum`)."""
    if not (_is_array(a) or _is_array(b)):
        return a if a <= b else b
    return b + (a < b) * (a - b)


def select(cond: Any, a: Any, b: Any) -> Any:
    """``a if cond else b``; elementwise when ``cond`` is an array of booleans (see :func:`maximum`)."""
    if not _is_array(cond):
        return a if cond else b
    return cond * a + (1 - cond) * b


def next_power_of_2(n: int) -> int:
    """``triton.next_power_of_2``: the smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def prod(xs: tuple[int, ...]) -> int:
    return math.prod(xs)


@dataclass(frozen=True, slots=True)
class Derived:
    """One derived quantity with the formula, inputs and upstream source that produced it.

    ``value`` may be a scalar, a tuple (a grid) or a tuple per sequence.
    """

    name: str
    value: Any
    formula: str
    inputs: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""
    unit: str = ""

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.inputs.items())
        src = f"  [{self.source}]" if self.source else ""
        return f"{self.name} = {self.formula} with {args} = {self.value}{src}" if args else (
            f"{self.name} = {self.formula} = {self.value}{src}"
        )


class Explain:
    """Ordered collection of Derived records built up by a launcher or an analysis."""

    def __init__(self) -> None:
        self._items: dict[str, Derived] = {}

    def add(
        self,
        name: str,
        value: Any,
        formula: str,
        source: str = "",
        unit: str = "",
        **inputs: Any,
    ) -> Any:
        self._items[name] = Derived(name, value, formula, dict(inputs), source, unit)
        return value

    def items(self) -> tuple[Derived, ...]:
        return tuple(self._items.values())
