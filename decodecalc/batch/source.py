"""What tune reads of a workload's decode steps (:data:`StepSource`): every step as arrays
(:class:`~decodecalc.batch.steps.StepArrays`), or a request trace's steps kept as runs or intervals
(:class:`~decodecalc.batch.runs.RunSteps`, :class:`~decodecalc.batch.intervals.IntervalSteps`), which tune samples
instead of expanding them when they are many."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from decodecalc.batch.steps import StepArrays


class LazySteps(Protocol):
    """A request trace's decode steps described without a row per step: what tune reads of them."""

    @property
    def source(self) -> str: ...

    @property
    def num_steps(self) -> int: ...

    @property
    def batch(self) -> np.ndarray: ...

    @property
    def weights(self) -> np.ndarray: ...

    @property
    def max_seq_len(self) -> int: ...

    def summary(self) -> dict[str, Any]: ...

    def covariates(self) -> np.ndarray: ...

    def sample(self, k: int, seed: int = ...) -> tuple[StepArrays, np.ndarray]: ...

    def expand(self) -> StepArrays: ...


#: what tune reads: every step as arrays, or a trace's steps it samples
StepSource = StepArrays | LazySteps
