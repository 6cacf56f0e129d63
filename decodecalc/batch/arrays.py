"""The array types tune's batch layer hands to the reports above it: named here, where numpy may be imported, so a
report can annotate with them under ``TYPE_CHECKING`` without importing numpy (tests/test_layers.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

#: per step (or per sequence) float64 values: seconds, scores
FloatArray = NDArray[np.float64]
#: per step booleans: which steps a recipe or the scalar model gives exactly
BoolArray = NDArray[np.bool_]
#: int64 arrays: lengths, counts, step indices
IntArray = NDArray[np.int64]
#: step indices as a caller gives them: a list, or an integer array
Indices = Sequence[int] | NDArray[np.integer[Any]]


def elementwise(rule: Callable[..., Any]) -> Callable[..., Any]:
    """``rule`` as this layer calls it: a launcher or time-model rule typed for the scalars of its upstream line,
    applied elementwise to arrays of them (tune's batch evaluator; the rules are written with cdiv / minimum /
    select so one function serves both). The same function, its signature opened for arrays."""
    return rule
