"""The array types tune's batch layer hands to the reports above it: named here, where numpy may be imported, so a
report can annotate with them under ``TYPE_CHECKING`` without importing numpy (tests/test_layers.py)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

#: per step (or per sequence) float64 values: seconds, scores
FloatArray = NDArray[np.float64]
#: per step booleans: which steps a recipe or the scalar model gives exactly
BoolArray = NDArray[np.bool_]
