"""One road from timings to a profile: the fitting recipe and the residual map.

The shipped H200 profile (``benchmarks/fit_timemodel.py``, on 4,824 timings) and ``decodecalc calibrate``
(:mod:`decodecalc.timemodel.calibration_fit`, on the timings it takes on the user's GPU) both come through here:
options of :func:`decodecalc.timemodel.fit.fit_profile` named as a :class:`FitRecipe`, then the same residual map
of the fitted physics' errors on the same timings (:func:`with_residuals`). The recipes differ in how long the
optimiser may search and in what a few dozen timings can pin (:data:`SHIPPED`, :data:`CALIBRATE_COLD`,
:data:`CALIBRATE`), and the shipped fit has what a user's GPU cannot give it (the compiled kernels' occupancy
records and per-step workload timings, passed in by the caller).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from decodecalc.timemodel.fit import DEFAULT_FAMILY, Measurement, fit_profile, log_loss, nelder_mead
from decodecalc.timemodel.predict import model_launch_time_s
from decodecalc.timemodel.profile import FamilyParams, TimeProfile
from decodecalc.timemodel.residuals import build_residual_map
from decodecalc.timemodel.work import REDUCE_SPILL_FAMILY

__all__ = ["CALIBRATE", "CALIBRATE_COLD", "RESIDUAL_KERNELS", "SHIPPED", "FitRecipe", "fit_physics",
           "fit_spill_family", "with_residuals"]

#: the kernels whose launches the residual map covers: the engines' Triton kernels, which tune searches (the other
#: backends meet their goals on the physics alone: benchmarks/fit_backends_h200.py)
RESIDUAL_KERNELS = ("vllm", "sglang")


@dataclass(frozen=True, slots=True)
class FitRecipe:
    """The options of a fit (:func:`decodecalc.timemodel.fit.fit_profile` says what each one frees)."""

    #: the kernel fitted first, with the GPU-wide values (HBM bandwidth, the empty-program cost)
    first_kernel: str = "vllm"
    #: kernels whose families with idle programs get their own idle-program cost
    own_idle_kernels: tuple[str, ...] = ("vllm", "sglang")
    #: kernels whose main families get their own ``sm_saturation_gap``
    saturating_kernels: tuple[str, ...] = ("vllm", "sglang")
    #: kernels fitted with a cost per contiguous KV run (none: benchmarks/results/layouts-h200-unseen.json rules out
    #: its cause; :func:`decodecalc.timemodel.work.kv_runs_per_iter`)
    run_kernels: tuple[str, ...] = ()
    restarts: int = 2
    max_evals: int = 2500
    search_occupancy: bool = True


#: the shipped H200 profile's recipe (benchmarks/fit_timemodel.py's defaults)
SHIPPED = FitRecipe()
#: calibrate from scratch (``--from-scratch``): the shipped options with a shorter search, so that the fit takes
#: seconds, not minutes
CALIBRATE_COLD = dataclasses.replace(SHIPPED, restarts=1, max_evals=1500)
#: calibrate from a calibrated profile (the default): the families' own idle-program costs and saturation gaps keep
#: the starting profile's values, because ten shapes do not pin them (benchmarks/results/calibrate-recipe-choice.json:
#: 80 H200 timings, both recipes from both starts, six workload validations; tests/test_calibrate_refit.py)
CALIBRATE = dataclasses.replace(CALIBRATE_COLD, own_idle_kernels=(), saturating_kernels=())


def fit_physics(ms: Sequence[Measurement], base: TimeProfile, recipe: FitRecipe, *,
                launch_overhead_s: float | None = None, occupancy: Mapping[str, int] | None = None,
                fixed_occupancy: Mapping[str, Mapping[int, int]] | None = None, fit_globals: bool = True,
                progress: Callable[[str], None] | None = None) -> TimeProfile:
    """The physics fitted to ``ms`` from ``base`` with ``recipe`` (no residual map: :func:`with_residuals`)."""
    return fit_profile(ms, base, occupancy=occupancy, search_occupancy=recipe.search_occupancy,
                       restarts=recipe.restarts, max_evals=recipe.max_evals, launch_overhead_s=launch_overhead_s,
                       fit_globals=fit_globals, progress=progress, first_kernel=recipe.first_kernel,
                       own_idle_kernels=recipe.own_idle_kernels, saturating_kernels=recipe.saturating_kernels,
                       run_kernels=recipe.run_kernels, fixed_occupancy=fixed_occupancy)


#: the numbers of its family fitted: the shipped family's form (benchmarks/fit_reduce_spill_h200.py), a tile's time
#: through local memory as the L^p blend of its SM and memory times
SPILL_KEYS = ("latency_s", "program_bandwidth_bytes_per_s", "sm_bandwidth_bytes_per_s", "program_overhead_s",
              "hbm_bandwidth_bytes_per_s", "blend_power")
#: where that fit starts (and benchmarks/fit_reduce_spill_h200.py's): round values of no GPU, not the shipped family's
SPILL_START = (1e-6, 1.5e10, 1.5e10, 2e-6, 9e11, 2.0)
#: a term the data do not need runs to these bounds (no cost); the rest are unbounded above or below
SPILL_LO = {"latency_s": 1e-9, "program_overhead_s": 1e-9}
SPILL_HI = {"sm_bandwidth_bytes_per_s": 1e15, "program_bandwidth_bytes_per_s": 1e15, "hbm_bandwidth_bytes_per_s": 1e15}
#: launches of the spilling reduce a fit needs (six numbers; calibrate's map steps time about 200 on the H100)
SPILL_MIN_LAUNCHES = 24


def _with_spill(x: Sequence[float], base: TimeProfile) -> TimeProfile:
    vals: dict[str, Any] = {k: min(SPILL_HI.get(k, math.inf), max(SPILL_LO.get(k, 0.0), math.exp(v))) for k, v in zip(SPILL_KEYS, x)}
    fam = base.families.get(REDUCE_SPILL_FAMILY) or FamilyParams(**DEFAULT_FAMILY)
    return dataclasses.replace(base, families={**base.families, REDUCE_SPILL_FAMILY: dataclasses.replace(fam, **vals)})


def fit_spill_family(physics: TimeProfile, ms: Sequence[Measurement], *,
                     max_evals: int = 3000) -> tuple[TimeProfile, int]:
    """``physics`` with its :data:`REDUCE_SPILL_FAMILY` fitted on the launches of ``ms`` that run it (the 3D kernel and every
    other number of ``physics`` fixed), and how many launches that was; unchanged (and 0) below
    :data:`SPILL_MIN_LAUNCHES`. calibrate's plan shapes stop at 128 segments, so its spilling launches are the map
    steps' (the reference workloads' long contexts under tune's leading settings, 512-4,096 segments). Left out whole
    on the H100 (each reference workload's spilling launches predicted by a fit on the other workloads'), the fit
    takes a from-scratch profile's error on them from 36% to 9% median (benchmarks/spill_fit_h100.py,
    benchmarks/results/spill-fit-h100.json)."""
    rows = [m for m in ms if any(k.family == REDUCE_SPILL_FAMILY for k in m.work.kernels)]
    if len(rows) < SPILL_MIN_LAUNCHES:
        return physics, 0
    base = dataclasses.replace(physics, residuals=None)
    x, _ = nelder_mead(lambda v: log_loss(_with_spill(v, base), rows), [math.log(v) for v in SPILL_START], step=0.5,
                       max_evals=max_evals)
    return dataclasses.replace(_with_spill(x, base), residuals=physics.residuals), len(rows)


def with_residuals(profile: TimeProfile, ms: Sequence[Measurement], source: str = "",
                   kernels: Sequence[str] = RESIDUAL_KERNELS, *, group_cells: bool = True,
                   layout_cells: bool = False) -> TimeProfile:
    """``profile`` with a residual map (:mod:`decodecalc.timemodel.residuals`) of its physics' errors on the
    launches of ``ms`` by ``kernels``, pooled by group size (``group_cells``) and by head layout (``layout_cells``);
    any map it had is replaced, not added to."""
    bare = dataclasses.replace(profile, residuals=None)
    samples = [(m.work, m.time_s, model_launch_time_s(m.work, bare)) for m in ms if m.kernel in kernels]
    return dataclasses.replace(bare, residuals=build_residual_map(samples, bare, source=source,
                                                                  group_cells=group_cells, layout_cells=layout_cells))
