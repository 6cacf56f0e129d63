"""How well a calibration predicts what it did not time (``calibrate --left-out-folds``): the Triton kernels' timings
refitted in folds, each fold's left-out timings predicted by that fold's physics and map, the errors pooled per
kernel into the profile's ``fit.expected_error`` (:mod:`decodecalc.timemodel.accuracy`), the ``±`` that ``grid``,
``compare`` and ``recommend`` print.

Two kinds of fold, as the shipped H200 profile's figures are built (``benchmarks/expected_error.py``):

* *new layout*: the timed head layouts dealt into ``n`` folds (:func:`~decodecalc.timemodel.backend_fit.layout_folds`,
  the backends' deal), each fold's layouts left out whole: their plan timings and their map steps;
* *fitted layout*: one more fold leaving out a quarter of the shapes of every layout (by a stable hash of the
  shape), what a new batch or length of a layout the calibration timed gets.

Only vLLM's and SGLang's kernels get figures here (decodecalc's reference kernels are not what a user runs; the
compiled backends' figures come from their own folds, :mod:`decodecalc.timemodel.backend_fit`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from decodecalc.timemodel.accuracy import layout_key
from decodecalc.timemodel.backend_fit import layout_folds, layout_of
from decodecalc.timemodel.fit import Measurement, percentile
from decodecalc.timemodel.predict import launch_time_s
from decodecalc.timemodel.profile import TimeProfile

#: the kernels whose figures a calibration's folds give (a launch's ``kernel``, the ``kernels`` key of the block)
FOLD_KERNELS = ("vllm", "sglang")
#: the share of each layout's shapes the *fitted layout* fold leaves out
SHAPE_FOLD_FRACTION = 0.25
#: a fit of a fold's training timings: (plan timings, map-step timings) -> its profile, physics and map
FitFold = Callable[[Sequence[Measurement], Sequence[Measurement]], TimeProfile]


#: salts the shape fold's hash: calibrate's --grid plan is itself the shapes whose unsalted hash is below a quarter
#: (benchmarks/make_calibration_grid.py), so the unsalted rule would leave every one of them out
SHAPE_FOLD_SALT = "left-out fold:"


def shape_left_out(m: Measurement, fraction: float = SHAPE_FOLD_FRACTION) -> bool:
    """Whether the *fitted layout* fold leaves ``m``'s shape out: a stable hash of its key below ``fraction``."""
    digest = hashlib.sha256((SHAPE_FOLD_SALT + m.shape.key).encode()).hexdigest()
    return int(digest[:8], 16) / 0xFFFFFFFF < fraction


def fold_errors(ms: Sequence[Measurement], map_ms: Sequence[Measurement], fit: FitFold, *, folds: int,
                progress: Any = None) -> dict[str, Any]:
    """Every left-out timing's ``predicted / measured - 1`` under the fit of the fold that left it out: ``{"folds":
    [layout labels per fold], "new_layout": [(kernel, layout, error)], "fitted_layout": [...]}``. ``fit`` refits a
    fold's training timings the way the calibration fitted all of them."""
    if folds < 2:
        raise ValueError(f"folds={folds}: at least 2 (one fold leaves every layout out)")
    layouts = sorted({layout_of(m) for m in ms})
    groups = layout_folds(layouts, folds) if len(layouts) > 1 else []
    out: dict[str, Any] = {"folds": [[layout_key(*x) for x in g] for g in groups], "new_layout": [], "fitted_layout": []}
    runs = [("new_layout", (lambda m, g=set(g): layout_of(m) in g), f"layouts {', '.join(layout_key(*x) for x in g)}")
            for g in groups]
    runs.append(("fitted_layout", shape_left_out, f"{SHAPE_FOLD_FRACTION:.0%} of every layout's shapes"))
    for i, (kind, left, what) in enumerate(runs):
        train = [m for m in ms if not left(m)]
        train_map = [m for m in map_ms if not left(m)]
        test = [m for m in [*ms, *map_ms] if left(m) and m.kernel in FOLD_KERNELS]
        if not train or not test:
            continue
        if progress:
            progress(f"left-out fold {i + 1} of {len(runs)} ({what}): {len(train)} timings")
        prof = fit(train, train_map)
        out[kind] += [(m.kernel, layout_key(*layout_of(m)), launch_time_s(m.work, prof) / m.time_s - 1) for m in test]
    return out


def expected_error_records(errors: Mapping[str, Any], fitted_layouts: Sequence[str], where: str) -> dict[str, Any]:
    """The ``kernels`` entries of ``fit.expected_error`` for :data:`FOLD_KERNELS` from :func:`fold_errors`'s output:
    each kernel's timed layouts and its *new layout* / *fitted layout* figures (absent where no fold left its rows
    out)."""
    evidence = {"new_layout": f"decodecalc calibrate --left-out-folds: {where}, each head layout predicted by the fit "
                              f"of the fold that left it out ({len(errors['folds'])} folds)",
                "fitted_layout": f"decodecalc calibrate --left-out-folds: {where}, a quarter of each layout's shapes "
                                 "predicted by a fit that left them out"}
    out: dict[str, Any] = {}
    for kernel in FOLD_KERNELS:
        rec: dict[str, Any] = {"fitted_layouts": sorted(fitted_layouts)}
        for kind in ("new_layout", "fitted_layout"):
            rows = [(lay, abs(e)) for k, lay, e in errors[kind] if k == kernel]
            if rows:
                errs = [e for _, e in rows]
                rec[kind] = {"rows": len(rows), "layouts": len({lay for lay, _ in rows}),
                             "median_abs_err": round(percentile(errs, 0.5), 4),
                             "p90_abs_err": round(percentile(errs, 0.9), 4), "evidence": evidence[kind]}
        if len(rec) > 1:
            out[kernel] = rec
    return out
