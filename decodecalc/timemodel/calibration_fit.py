"""The fitting half of ``decodecalc calibrate`` (no GPU needed): what it times (the shape plans), the neutral start
of ``--from-scratch``, and the profile fitted from the rows it measured (saved rows come back through
:mod:`decodecalc.timemodel.calibration_saved`, ``--from-measurements``).
The GPU half, which times the plans with the real kernels, is :mod:`decodecalc.verify.calibration`; the fit and the
residual map are the shipped profile's road (:mod:`decodecalc.timemodel.recipe`, :data:`~decodecalc.timemodel.recipe.CALIBRATE`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from decodecalc.errors import ConfigError, DecodecalcError
from decodecalc.timemodel.backend_fit import backend_failures
from decodecalc.timemodel.fit import DEFAULT_FAMILY, error_summary, measurements_from_rows
from decodecalc.timemodel.profile import FamilyParams, TimeProfile
from decodecalc.timemodel.recipe import (CALIBRATE, CALIBRATE_COLD, RESIDUAL_KERNELS, fit_physics,
                                         fit_spill_family, with_residuals)
from decodecalc.timemodel.work import REDUCE_SPILL_FAMILY

#: the calibration microbenchmark: (h, h_kv, d, seq_lens) covering the latency-bound corner (one
#: sequence, long context), the occupancy / tail regime (a few sequences) and the bandwidth-bound
#: corner (many sequences), MHA and a large head dim, and a ragged batch.
CALIBRATION_SHAPES: tuple[tuple[int, int, int, tuple[int, ...]], ...] = (
    (8, 1, 128, (32768,)),
    (8, 1, 128, (8192,) * 4),
    (8, 1, 128, (4096,) * 64),
    (32, 8, 128, (65536,)),
    (32, 8, 128, (8192,) * 16),
    (32, 8, 128, (2048,) * 64),
    (32, 8, 128, (512,) * 4),
    (32, 32, 128, (4096,) * 8),
    (16, 2, 256, (16384,) * 4),
    (32, 8, 128, (30000, 4000, 4000, 500, 500, 500, 500, 500)),
)
CALIBRATION_VARIANTS = ("vllm-2d", "vllm-3d-S4", "vllm-3d-S16", "vllm-3d-S64",
                        "sglang-static-S1", "sglang-static-S4", "sglang-static-S16", "sglang-static-S64")
QUICK_SHAPES = (0, 4, 5)
#: ``calibrate --thorough`` (a fit that does not lean on a starting profile): head layouts per rank across group
#: sizes 1-12, 1-32 KV heads and head dims 64-256 (the shipped fit's layouts), each at five batches -- one long
#: sequence, a few, many short, two short (the small launches of chat traffic), a ragged mix -- and the split
#: counts up to 256 segments (vLLM's reduce_segments changes register regime at 128 and 256) and 128 splits
THOROUGH_LAYOUTS: tuple[tuple[int, int, int], ...] = (
    (8, 1, 128), (32, 8, 128), (20, 4, 64), (16, 2, 256), (32, 32, 128),
    (12, 2, 128), (40, 8, 128), (8, 4, 256), (96, 8, 128), (8, 1, 64),
)
THOROUGH_BATCHES: tuple[tuple[int, ...], ...] = (
    (32768,), (8192,) * 4, (2048,) * 64, (1024,) * 2, (30000, 4000, 4000, 500, 500, 500, 500, 500),
)
THOROUGH_VARIANTS = ("vllm-2d", "vllm-3d-S4", "vllm-3d-S16", "vllm-3d-S64", "vllm-3d-S128", "vllm-3d-S256",
                     "sglang-static-S1", "sglang-static-S4", "sglang-static-S16", "sglang-static-S64",
                     "sglang-static-S128")


#: a user's own head layout (``calibrate --model``): the thorough batches at calibrate's split counts, 40 timings
LAYOUT_BATCHES = THOROUGH_BATCHES
LAYOUT_VARIANTS = CALIBRATION_VARIANTS


def calibration_grid() -> list[tuple[tuple[int, int, int, tuple[int, ...]], tuple[str, ...]]]:
    """``calibrate --grid``'s plan (decodecalc/data/calibration_grid.json, written by benchmarks/make_calibration_grid.py):
    a quarter of the shapes behind the shipped H200 profile, drawn by a stable hash, each at the static launches it
    was timed under there (vLLM 2D and 3D at 2-128 segments, SGLang at 1-64 splits): 75 shapes, 509 timings. Chosen
    because calibrate's cold recipe fitted on these shapes' shipped timings holds within 1.5x of the shipped profile
    on six workload validations, where ten shapes or the 550 timings of ``--thorough`` do not
    (benchmarks/calibrate_map_experiment.py, benchmarks/results/calibrate-map-experiment-h200.json)."""
    return list(_calibration_grid())


@functools.lru_cache(maxsize=1)
def _calibration_grid() -> tuple[tuple[tuple[int, int, int, tuple[int, ...]], tuple[str, ...]], ...]:
    import json
    from importlib.resources import files

    doc = json.loads(files("decodecalc.data").joinpath("calibration_grid.json").read_text(encoding="utf-8"))
    # (the starred map is the 3 head numbers, which mypy cannot count)
    return tuple(((*map(int, e["heads"]), tuple(int(x) for x in e["seq_lens"])), tuple(e["variants"]))  # type: ignore[misc]
                 for e in doc["shapes"])


#: calibrate's map steps (``--map-steps``; with ``--grid`` by default): sampled steps of the workloads whose per-step
#: H200 timings built the shipped map (benchmarks/validate_tune_h200.py --per-step: these models and presets, 200 steps
#: each), each under the launches of tune's leading candidates (:func:`decodecalc.reports.step_launches.
#: reference_samples`). Their timings are map data only (group cells of g4 and g8 at d128), not physics; what 50, 100
#: and 300 such steps add to the grid's physics: benchmarks/results/calibrate-map-experiment-h200.json
MAP_MODELS: tuple[tuple[str, int], ...] = (("llama3.1-8b", 1), ("llama3.1-70b", 8))
MAP_WORKLOADS: tuple[str, ...] = ("chat", "long-doc-qa", "agentic")
MAP_WORKLOAD_STEPS = 200
#: steps sampled from each reference workload with --grid (16 x 6 = 96 steps, about 1,500 timings)
DEFAULT_MAP_STEPS = 16
MAX_MAP_STEPS = 64
#: ``--left-out-folds``: the fewest folds that leave every layout out once, and the most (a fit each)
MIN_FOLDS, MAX_FOLDS = 2, 12


def calibration_plan(quick: bool = False, thorough: bool = False, layouts: Sequence[tuple[int, int, int]] = (),
                     layouts_only: bool = False,
                     grid: bool = False) -> list[tuple[tuple[int, int, int, tuple[int, ...]], tuple[str, ...]]]:
    """(shape, variants) calibrate times: ten shapes x 8 variants, three of them (``quick``), the layouts x
    batches x 11 variants of ``thorough``, or :func:`calibration_grid` (``grid``); then each of ``layouts`` ((query
    heads, KV heads, head dim) per rank) at :data:`LAYOUT_BATCHES` x :data:`LAYOUT_VARIANTS`. ``layouts_only``: those
    alone (``--keep-physics``)."""
    if layouts_only:
        plan = []
    elif grid:
        plan = calibration_grid()
    elif thorough:
        plan = [((h, kv, d, lens), THOROUGH_VARIANTS) for h, kv, d in THOROUGH_LAYOUTS for lens in THOROUGH_BATCHES]
    else:
        shapes = [CALIBRATION_SHAPES[i] for i in QUICK_SHAPES] if quick else list(CALIBRATION_SHAPES)
        plan = [(s, CALIBRATION_VARIANTS) for s in shapes]
    for h, kv, d in dict.fromkeys(layouts):
        plan += [((h, kv, d, lens), LAYOUT_VARIANTS) for lens in LAYOUT_BATCHES]
    return plan


#: the families of decodecalc's Triton kernels and the engines' (what calibrate times); the other backends' families
#: (FlashInfer, FA3, ...) are fitted by their own captures
TRITON_PREFIXES = ("vllm_", "sglang_", "ref_")
#: a cold start's GPU-wide values (calibrate --from-scratch): TimeProfile's default HBM bandwidth, a 10 ns empty program
NEUTRAL_HBM_BYTES_PER_S = 4.0e12
NEUTRAL_IDLE_PROGRAM_S = 10e-9


def neutral_start(base: TimeProfile) -> TimeProfile:
    """``base`` with nothing left in it that was fitted to a timing of the kernels calibrate measures: every Triton
    family at the fit's starting values for a family it has never seen (``DEFAULT_FAMILY``: 1 us latency, 20 GB/s
    per program, 60 GB/s per SM, 1 us overhead, 4 programs per SM), the GPU-wide idle-program cost and HBM bandwidth
    at neutral values, no residual map. The other backends' families are kept as they are (calibrate does not time
    them, so its profile lists them as uncalibrated)."""
    fams = {f: (FamilyParams(**DEFAULT_FAMILY) if f.startswith(TRITON_PREFIXES) else p) for f, p in base.families.items()}
    # the kept families' record (their source and measured domain) stays with them
    kept = {k: base.fit[k] for k in ("backend_families",) if isinstance(base.fit, Mapping) and k in base.fit}
    return dataclasses.replace(base, families=fams, idle_program_s=NEUTRAL_IDLE_PROGRAM_S,
                               hbm_bandwidth_bytes_per_s=NEUTRAL_HBM_BYTES_PER_S, residuals=None, fit=kept,
                               calibrated=False, source="a cold start (no parameter fitted to a timing)")


def unfitted_from_start(profile: TimeProfile, gpu: Any, fitted: set[str], prior: TimeProfile | None = None) -> TimeProfile:
    """``profile`` (a from-scratch calibration) with every family it did not fit and that still holds
    :func:`neutral_start`'s values (SGLang's fp8 kernel and decodecalc's reference kernels under `--grid`; the spilling
    reduce below its launch threshold) taken from :func:`~decodecalc.timemodel.profile_sources.prior_profile`:
    the packaged profile's values, or the datasheet fallback's (the H200's, scaled), which predict such a launch where
    the fit's starting guesses do not. ``prior``: another source of those values instead (the left-out folds take the
    datasheet fallback's: the packaged profile may have been fitted on the very timings a fold leaves out)."""
    from decodecalc.timemodel.profile_sources import prior_profile

    neutral = FamilyParams(**DEFAULT_FAMILY)
    ref = (prior or prior_profile(gpu)).families
    swap = {f: ref[f] for f, p in profile.families.items() if f not in fitted and p == neutral and f in ref}
    return dataclasses.replace(profile, families={**profile.families, **swap}) if swap else profile


#: what a profile's ``fit`` record says of its physics, kept by ``--keep-physics`` (the statistics are this run's)
_KEPT_FIT = ("domain", "backend_families", "expected_error")


def fit_calibration_rows(rows: Sequence[Mapping[str, Any]], *, gpu: Any, base: TimeProfile, num_sms: int,
                         launch_overhead_s: float | None, device_name: str = "", versions: str = "",
                         search_occupancy: bool = True, start_note: str = "the starting profile's",
                         keep_physics: bool = False, layouts: Sequence[Sequence[int]] = (),
                         cold: bool = False, workload: Mapping[str, Any] | None = None,
                         backend_records: Sequence[Mapping[str, Any]] = (),
                         measure_backends: Callable[[Sequence[Mapping[str, Any]]], list[Any]] | None = None,
                         progress: Any = None, map_steps: Sequence[Mapping[str, Any]] = (),
                         left_out_folds: int = 0) -> TimeProfile:
    """The fitting half of ``calibrate`` (no GPU needed): measured rows -> a calibrated profile for ``gpu``.
    ``start_note``: whose values the families it did not measure keep (the source line says it). The map has a
    cell per (family, group size, head dim) and one per head layout timed (:mod:`decodecalc.timemodel.residuals`).
    ``cold``: ``base`` is a neutral start (``--from-scratch``): fitted with :data:`~decodecalc.timemodel.recipe.
    CALIBRATE_COLD`, else :data:`~decodecalc.timemodel.recipe.CALIBRATE`.
    ``layouts``: the (query heads, KV heads, head dim) per rank of ``--model``, whose timings also give layout
    cells. ``keep_physics``: no fit; ``base``'s physics and map are kept, and the map gains the layout cells of
    these timings (every one of them: a layout's own offset, where ``base`` pools it with its group size).
    ``workload``: the ``workload`` record of ``calibrate --workload`` (:meth:`decodecalc.timemodel.step_rows.
    WorkloadSample.saved`): its sampled steps under the engines' own launches give the layout cells instead of the
    layouts' calibrate shapes (the measured better source: decodecalc.reports.step_launches).
    ``backend_records``: the compiled backends' timed runs (``calibrate --backends``,
    :mod:`decodecalc.verify.backend_calibration`): FlashInfer's and FA3's families fitted on them over the new
    physics (:func:`decodecalc.timemodel.backend_fit.calibrate_backends`, from neutral values when ``cold``), each
    judged on head layouts that fit left out; ``measure_backends``: records -> the measurements of the runs whose launch
    is decodecalc's plan (the verify layer's :func:`decodecalc.verify.backend_calibration.record_measurements`, given
    by the caller: the plan check needs the profiler's launch comparison); ``progress``: called with a line per fitted
    group. ``map_steps``: ``workload`` records of the reference workloads' sampled steps (``--map-steps``): their
    timings join the plan's in the residual map's group cells (the shipped map's recipe: shape timings and workload
    steps), and fit no physics. ``left_out_folds``: that many more fits of the Triton timings leaving whole head
    layouts out, and one leaving a quarter of each layout's shapes out; their left-out errors are vLLM's and SGLang's
    ``fit.expected_error`` (:mod:`decodecalc.timemodel.calibration_folds`); 0: none."""
    ms = measurements_from_rows(rows, num_sms=num_sms)
    _enough(rows, len(ms), "measurements")
    steps = workload_measurements(workload) if workload else []
    if workload:
        _enough(workload["rows"], len(steps), "workload step timings")
    map_ms = [m for rec in map_steps for m in workload_measurements(rec)]
    if map_steps:
        _enough([r for rec in map_steps for r in rec["rows"]], len(map_ms), "map step timings")
        if keep_physics:
            raise ConfigError("map steps with --keep-physics: --keep-physics fits nothing")
    start = dataclasses.replace(base, gpu=gpu.name, num_sms=num_sms)
    where = f"{sum(m.kernel in RESIDUAL_KERNELS for m in ms)} calibrate timings on {device_name or gpu.name}"
    step_where = (f"{len(steps)} timings of {len(workload['sampled_steps'])} sampled steps of {workload['source']} "
                  f"({workload['model']} TP{workload['tp']}) on {device_name or gpu.name}" if workload else "")
    backends = None
    if backend_records:
        if keep_physics:
            raise ConfigError("backend timings with --keep-physics: --keep-physics fits nothing")
        if measure_backends is None:
            raise DecodecalcError("backend timings need measure_backends (the verify layer's plan check)")
        backends = measure_backends(backend_records)
        if not backends:
            why = "; ".join(f"{b}: {r['runs']} runs failed, the first with {r['first_error']}"
                            for b, r in backend_failures(backend_records).items())
            raise DecodecalcError(f"calibration failed: none of the {len(backend_records)} backend runs could be fitted"
                                  + (f" ({why})" if why else " (no launch matched its plan)"))
    backend_fit = None
    if not ms and not steps and not backends:
        raise DecodecalcError("calibration failed: nothing was timed")
    spill_launches = 0
    folds: dict[str, Any] | None = None  # the left-out folds' errors (left_out_folds)
    # the families these timings fit (the spilling reduce joins them below when its launches were enough)
    fams_seen = {k.family for m in [*ms, *(backends or ())] for k in m.work.kernels}
    if keep_physics:
        physics, before_cells = dataclasses.replace(start, residuals=None), start
        # the starting map's cells stay (its group cells were measured against this very physics)
        fitted = add_layout_cells(start, physics, steps or ms, step_where or where, local=bool(steps))
    else:
        recipe = dataclasses.replace(CALIBRATE_COLD if cold else CALIBRATE, search_occupancy=search_occupancy)
        other_fams = fams_seen - {k.family for m in ms for k in m.work.kernels}  # the backends' (fitted below)

        def triton_physics(train: Sequence[Any], train_map: Sequence[Any],
                           prior: TimeProfile | None = None) -> tuple[TimeProfile, int]:
            """The Triton families fitted on ``train`` (and the spilling reduce on the map steps too, from scratch):
            the physics of this calibration, or of one of its left-out folds (``prior``: where the families it
            cannot fit come from)."""
            phys = fit_physics(train, start, recipe, launch_overhead_s=launch_overhead_s) if train else start
            spilled = 0
            if cold:  # from scratch its spilling reduce has no numbers but what the map steps time (a warm start
                # keeps the start's, which did as well on the H100: benchmarks/results/spill-fit-h100.json)
                phys, spilled = fit_spill_family(phys, [*train, *train_map])
                seen = {k.family for m in train for k in m.work.kernels} | ({REDUCE_SPILL_FAMILY} if spilled else set())
                # a family it did not fit holds the fit's starting guesses, not a prediction (listed uncalibrated)
                phys = unfitted_from_start(phys, gpu, seen | other_fams, prior)
            return phys, spilled

        physics, spill_launches = triton_physics(ms, map_ms)
        if spill_launches:
            fams_seen.add(REDUCE_SPILL_FAMILY)
        if left_out_folds and ms:
            from decodecalc.timemodel.calibration_folds import fold_errors
            from decodecalc.timemodel.profile_sources import datasheet_profile

            # from scratch, a family a fold cannot fit (SGLang's MHA kernel, its layout left out) takes the datasheet's
            # values, as on a GPU without this calibration (the packaged profile may have seen the fold's timings);
            # a warm fold keeps the start's, as the whole calibration does
            ds = datasheet_profile(gpu)
            folds = fold_errors(ms, map_ms, lambda tr, tm: with_residuals(triton_physics(tr, tm, ds)[0], [*tr, *tm],
                                                                          source="a left-out fold"),
                                folds=left_out_folds, progress=progress)
        if backends is not None:  # the compiled backends' families over the new GPU-wide values
            from decodecalc.timemodel.backend_fit import CALIBRATE_MAX_EVALS, calibrate_backends

            backend_fit = calibrate_backends(backends, physics, cold=cold, max_evals=CALIBRATE_MAX_EVALS,
                                             restarts=1, progress=progress)
            physics = dataclasses.replace(backend_fit.profile, residuals=None)
        # the shipped profile's second half too: the map of the physics' errors on the same timings (in sample here,
        # as it is for the shipped map; on workloads no fit saw: benchmarks/results/score-gpu-workloads-h100-sxm.json)
        map_where = (f" and {len(map_ms)} timings of {sum(len(r['sampled_steps']) for r in map_steps)} sampled steps "
                     f"of {len(map_steps)} reference workloads" if map_ms else "")
        fitted = before_cells = (with_residuals(physics, [*ms, *map_ms], source=where + map_where)
                                 if ms or map_ms else physics)
        wanted = {tuple(int(x) for x in lay) for lay in layouts}
        own = steps or [m for m in ms if (m.shape.num_heads, m.shape.num_kv_heads, m.shape.head_size) in wanted]
        if own:  # --model's layouts (or --workload's steps): their offsets over the group cells just built
            fitted = add_layout_cells(fitted, physics, own, step_where, local=bool(steps))
    every = [*ms, *steps, *map_ms]
    stats, bare = error_summary(fitted, every), error_summary(physics, every)
    uncal = sorted((set(fitted.families) - fams_seen) | set(backend_fit.uncalibrated if backend_fit else ()))
    if keep_physics:  # nothing was refitted: the start's record of what it calibrated (and its domain) stays
        uncal = sorted(start.fit.get("uncalibrated_families") or ())
    timed = sorted({(m.shape.num_heads, m.shape.num_kv_heads, m.shape.head_size) for m in every})
    what = (f"{len(every)} timings of {versions or 'the upstream'} kernels"
            + (f" ({', '.join(f'{h}:{kv} d{d}' for h, kv, d in timed)})" if len(timed) <= 12 else "")
            + (f", {len(steps)} of them {len(workload['sampled_steps'])} sampled steps of {workload['source']} under "
               "the engines' own launches" if workload else "")
            + (f", {len(map_ms)} of them map steps ({sum(len(r['sampled_steps']) for r in map_steps)} sampled steps of "
               f"{', '.join(map_name(r) for r in map_steps)})" if map_ms else ""))
    return dataclasses.replace(
        fitted, calibrated=True,
        source=(f"decodecalc calibrate on {device_name or gpu.name} ({num_sms} SMs): {what}; "
                + (f"layout cells of these timings added to the physics and map of the starting profile ({base.source})"
                   if keep_physics else
                   f"families not measured keep {start_note} values")),
        fit={**({k: start.fit[k] for k in _KEPT_FIT if k in start.fit} if keep_physics else {}),
             # the backends' families kept from the start keep their record (source, domain) with them
             **({"backend_families": start.fit["backend_families"]}
                if not keep_physics and backend_fit is None and "backend_families" in (start.fit or {}) else {}),
             "rows": len(every), "median_abs_err": round(stats["median_abs_err"], 4),
             "p90_abs_err": round(stats["p90_abs_err"], 4),
             "physics_median_abs_err": round(bare["median_abs_err"], 4),
             "physics_p90_abs_err": round(bare["p90_abs_err"], 4), "device_name": device_name, "versions": versions,
             "uncalibrated_families": uncal,
             **(_backend_record(backend_fit, start, len(backend_records), device_name or gpu.name,
                                backend_failures(backend_records)) if backend_fit else {}),
             **_expected_error_block(backend_fit, folds, timed, where),
             **({"workload": _workload_fit(workload, steps, before_cells, fitted)} if workload and steps else {}),
             **({"map_steps": _map_fit(map_steps, map_ms, physics, fitted)} if map_ms else {}),
             **({"spill_family": {"family": REDUCE_SPILL_FAMILY, "launches": spill_launches,
                                  "source": "fitted on the spilling reduce's launches of the map steps "
                                            "(recipe.fit_spill_family)"}} if spill_launches else {})})


def _expected_error_block(backend_fit: Any, folds: Mapping[str, Any] | None, timed: Sequence[tuple[int, int, int]],
                          where: str) -> dict[str, Any]:
    """``{"expected_error": ...}``, the profile's ``fit.expected_error`` of a calibration (timemodel.accuracy), or
    ``{}``: the backends' out-of-fold figures, and vLLM's and SGLang's from ``--left-out-folds`` (without it they get
    none: calibrate fits them on every layout it times and holds none out)."""
    from decodecalc.timemodel.accuracy import GOAL_MEDIAN, GOAL_P90, check_block, layout_key
    from decodecalc.timemodel.calibration_folds import expected_error_records

    kernels = dict(backend_fit.expected_error) if backend_fit and backend_fit.expected_error else {}
    if folds:
        kernels.update(expected_error_records(folds, [layout_key(*t) for t in timed], where))
    if not kernels:
        return {}
    what = [w for w, on in (("--backends", backend_fit and backend_fit.expected_error), ("--left-out-folds", folds)) if on]
    block = {"source": f"decodecalc calibrate {' and '.join(what)} (head layouts left out in folds)",
             "goals": {"median": GOAL_MEDIAN, "p90": GOAL_P90}, "kernels": kernels}
    check_block(block)
    return {"expected_error": block}


def map_name(rec: Mapping[str, Any]) -> str:
    """A sampled workload's name in the profile's record: model, TP and trace source."""
    return f"{rec['model']} TP{rec['tp']} {rec['source']}"


def _map_fit(records: Sequence[Mapping[str, Any]], ms: Sequence[Any], physics: TimeProfile,
             fitted: TimeProfile) -> dict[str, Any]:
    """What the profile records of its map steps: the workloads sampled, and the error on their timings of the physics
    alone and with the map (in sample: the map is made from them)."""
    b, a = error_summary(physics, ms), error_summary(fitted, ms)
    return {"workloads": [map_name(r) for r in records], "steps_per_workload": max(len(r["sampled_steps"]) for r in records),
            "timings": len(ms),
            "physics_median_abs_err": round(b["median_abs_err"], 4), "physics_p90_abs_err": round(b["p90_abs_err"], 4),
            "median_abs_err": round(a["median_abs_err"], 4), "p90_abs_err": round(a["p90_abs_err"], 4)}


def _backend_record(fit: Any, start: TimeProfile, runs: int, where: str,
                    failed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The profile's ``fit.backend_calibration`` (per family: rows, training and left-out errors, calibrated or not)
    and ``fit.backend_families.domain``: for each backend calibrated, the layouts and KV formats timed; the starting
    profile's entries for the backends calibrate does not time (FlashMLA, FA2)."""
    rec = fit.record()
    rec["source"] = (f"decodecalc calibrate on {where}: {runs} runs of the compiled backends, "
                     f"{sum(r['rows'] for r in rec['families'].values())} of them fitted (launch as planned)")
    rec["left_out"] = {f: r["left_out"] for f, r in rec["families"].items()}
    if failed:
        rec["failed"] = failed
    old = ((start.fit.get("backend_families") or {}).get("domain") or {}) if isinstance(start.fit, Mapping) else {}
    domain = {k: v for k, v in old.items() if k not in fit.domains}
    domain.update(fit.domains)
    return {"backend_calibration": rec, "backend_families": {"source": rec["source"], "domain": domain}}


def _enough(rows: Sequence[Any], ok: int, what: str) -> None:
    """At least half of the timings (and one) succeeded, else the calibration failed."""
    if rows and ok < max(1, len(rows) // 2):
        errs = [r.get("error", "") for r in rows if isinstance(r, Mapping) and r.get("status") != "ok"]
        raise DecodecalcError(f"calibration failed: only {ok} of {len(rows)} {what} succeeded "
                              f"(first error: {errs[0] if errs else '?'})")


def workload_measurements(workload: Mapping[str, Any]) -> list[Any]:
    """The sampled steps' timings of a ``workload`` record as measurements of its head layout."""
    from decodecalc.timemodel.step_rows import step_measurement

    return [step_measurement(r, num_heads=int(workload["num_heads"]), num_kv_heads=int(workload["num_kv_heads"]),
                             head_size=int(workload["head_size"]), head_size_v=int(workload["head_size_v"]),
                             model=f"{workload['model']} {workload['source']}")
            for r in workload["rows"] if r.get("status", "ok") == "ok"]


def _workload_fit(workload: Mapping[str, Any], steps: Sequence[Any], before: TimeProfile,
                  after: TimeProfile) -> dict[str, Any]:
    """What the profile records of ``--workload``: the traffic sampled, and the error on its step timings before the
    layout cells and after (in sample: the cells are made from them)."""
    b, a = error_summary(before, steps), error_summary(after, steps)
    return {"model": workload["model"], "tp": workload["tp"], "source": workload["source"],
            "steps": workload["num_steps"], "sampled_steps": list(workload["sampled_steps"]), "timings": len(steps),
            "median_abs_err_before": round(b["median_abs_err"], 4), "p90_abs_err_before": round(b["p90_abs_err"], 4),
            "median_abs_err_after": round(a["median_abs_err"], 4), "p90_abs_err_after": round(a["p90_abs_err"], 4)}


def add_layout_cells(profile: TimeProfile, physics: TimeProfile, ms: Sequence[Any], where: str, *,
                     local: bool = False) -> TimeProfile:
    """``profile`` whose map (kept, or a new one) gains the layout cells of ``ms`` against ``physics``;
    ``where``: added to the map's source ("" keeps it). ``local``: ``ms`` are sampled steps of one traffic
    (``calibrate --workload``), dense enough for the layout cells' local term
    (:data:`~decodecalc.timemodel.residuals.WORKLOAD_LOCAL_BANDWIDTH_OCTAVES`)."""
    from decodecalc.timemodel.residuals import WORKLOAD_LOCAL_BANDWIDTH_OCTAVES, WORKLOAD_LOCAL_PRIOR_LAUNCHES

    own = with_residuals(physics, ms, source=where, group_cells=False, layout_cells=True).residuals
    assert own is not None  # with_residuals always builds a map
    rmap = profile.residuals
    if rmap is None:
        base, new = physics, own
    else:
        base = profile
        new = dataclasses.replace(rmap, cells={**rmap.cells, **own.cells},
                                  source=f"{rmap.source}; layout cells: {where}" if where else rmap.source, _memo={})
    if local:
        new = dataclasses.replace(new, layout_local_bandwidth_octaves=WORKLOAD_LOCAL_BANDWIDTH_OCTAVES,
                                  layout_local_prior_launches=WORKLOAD_LOCAL_PRIOR_LAUNCHES, _memo={})
    return dataclasses.replace(base, residuals=new)
