"""The scalar model's grid-order dispatch for many launches at once: the busy time of ragged kernels of more than one
wave, exactly as :func:`decodecalc.timemodel.kernel_time_s` times them.

A launch is given by its per-sequence *cells* (``a``, ``full``, ``last``, ``q``: the input of
:func:`decodecalc.timemodel.work.planes_order`) and its grid's planes and repeats. The reference is the time model's
own Python (``planes_order``, then :func:`decodecalc.timemodel.predict.grid_order_busy_s`, which
``kernel_time_s`` calls too), launch by launch. Where the
package's C twin of it was built (``decodecalc/batch/_dispatch.c``, the optional extension ``pip install`` compiles
when a C compiler is there), it is used instead: the same statements in the same order, so the same result to the last
bit (tests/test_dispatch.py), 11-14 times faster on chat launches. Nothing else depends on which one runs: tune's answers are the same
either way, only its time differs (``accelerated()`` says which; ``tune --json`` reports it).
"""

from __future__ import annotations

import os

import numpy as np

from decodecalc.timemodel.predict import (
    FAST_ROUNDS,
    MAX_EXACT_RUNS,
    ROW_PARTS,
    TAIL_WAVES,
    IterationCost,
    grid_order_busy_s,
)
from decodecalc.timemodel.work import order_runs, planes_order

try:  # the compiled twin (optional: a build without a C compiler has only the reference)
    from decodecalc.batch import _dispatch as _compiled  # type: ignore[attr-defined]  # a C extension: no stub
except ImportError:  # pragma: no cover - depends on the build
    _compiled = None

#: set to 1 to use the Python reference even where the compiled twin was built (tests, benchmarks)
REFERENCE_ENV = "DECODECALC_PURE_PYTHON"


def accelerated() -> bool:
    """Whether :func:`busy_s` runs the compiled twin."""
    return _compiled is not None and os.environ.get(REFERENCE_ENV, "") != "1"


def busy_s(a: np.ndarray, full: np.ndarray, last: np.ndarray, q: np.ndarray, offsets: np.ndarray, planes: int,
           repeats: int, cost: IterationCost, reference: bool = False) -> np.ndarray:
    """Per launch ``r`` (cells ``offsets[r]:offsets[r + 1]`` of the int64 arrays), the scalar model's time of its
    working programs: ``t_start + t0 + shared tail`` of :func:`~decodecalc.timemodel.kernel_time_s`'s ordered branch
    (more than one wave of ragged programs; the programs that exit at once are the caller's). ``reference``: the
    Python reference even where the compiled twin exists."""
    n = len(offsets) - 1
    out = np.empty(n, dtype=np.float64)
    if n <= 0:
        return out
    if accelerated() and not reference:
        ti, t0 = cost.t_it(cost.occupancy, cost.slots), cost.program_overhead_s
        params = (float(cost.latency_s), float(cost.saturated), float(cost.bytes_per_iter), float(cost.sm_bandwidth),
                  float(cost.hbm_bytes_per_iter), float(cost.hbm_bandwidth), float(cost.blend_power),
                  int(cost.occupancy), int(cost.num_sms))
        _compiled.busy_s(_i64(a), _i64(full), _i64(last), _i64(q), _i64(offsets), int(planes), int(repeats), params,
                         float(t0), float(ti), int(cost.slots), (MAX_EXACT_RUNS, TAIL_WAVES, FAST_ROUNDS, ROW_PARTS),
                         out)
        return out
    cells = list(zip(a.tolist(), full.tolist(), last.tolist(), q.tolist()))
    bounds = offsets.tolist()
    for r in range(n):
        order = planes_order(cells[bounds[r]:bounds[r + 1]], planes, repeats)
        out[r] = grid_order_busy_s(order, order_runs(order), cost)
    return out


def _i64(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.int64)
