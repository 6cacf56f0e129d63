"""``calibrate --from-measurements``: a calibration's saved timings read back (checked field by field: a file is data,
and a bad one is one ``Error:`` line naming the field, never a traceback from deep in the fit), merged across files,
and handed to :func:`decodecalc.timemodel.calibration_fit.fit_calibration_rows`, the fit ``calibrate`` runs on the
GPU's own timings."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.limits import MAX_MEASUREMENT_TIMINGS
from decodecalc.timemodel.calibration_fit import (CALIBRATION_VARIANTS, THOROUGH_VARIANTS, calibration_grid,
                                                  fit_calibration_rows)
from decodecalc.timemodel.profile import TimeProfile


#: what a saved calibration row may hold (a file is data: nothing in it may cost more than the calibration did)
_ROW_INTS = {"num_q_heads": 1024, "num_kv_heads": 1024, "head_dim": 1024, "batch": 4096, "seq_len": 1 << 24}


def _check_measured_row(r: Any, where: str) -> None:
    if not isinstance(r, Mapping):
        raise ConfigError(f"{where}: expected an object")
    if r.get("status", "ok") != "ok":
        return  # a failed timing: skipped, as calibrate skips it
    known = dict.fromkeys(CALIBRATION_VARIANTS + THOROUGH_VARIANTS + tuple(v for _, vs in calibration_grid() for v in vs))
    if r.get("variant") not in known:
        raise ConfigError(f"{where}: field 'variant': {r.get('variant')!r}; valid: {', '.join(known)}")
    for key, top in _ROW_INTS.items():
        v = r.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top:
            raise ConfigError(f"{where}: field {key!r}: {v!r}; expected an integer in [1, {top:,}]")
    lens = r.get("seq_lens")
    if lens is not None and (not isinstance(lens, list) or len(lens) != r["batch"] or not all(
            isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= _ROW_INTS["seq_len"] for x in lens)):
        raise ConfigError(f"{where}: field 'seq_lens': expected {r['batch']} integers in [1, {_ROW_INTS['seq_len']:,}]")
    t = r.get("t_us")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < 1e8:
        raise ConfigError(f"{where}: field 't_us': {t!r}; expected microseconds in (0, 1e8)")
    if r["num_q_heads"] % r["num_kv_heads"]:
        raise ConfigError(f"{where}: num_q_heads {r['num_q_heads']} is not a multiple of num_kv_heads "
                          f"{r['num_kv_heads']}")


def merge_measurements(files: Sequence[tuple[Any, str]]) -> tuple[dict[str, Any], str]:
    """Several calibrations' saved timings (``(data, source)`` pairs, as ``--from-measurements`` reads them) as one:
    their cases, backend runs and layouts together; the first file's launch overhead, device and versions; at most one
    may hold a workload sample. Returns (merged data, the sources joined)."""
    if len(files) == 1:
        _check_saved(*files[0])  # a list, null or a string at the top level: one Error line, not an AttributeError
        return files[0][0], files[0][1]
    merged: dict[str, Any] = {"cases": [], "backend_cases": [], "layouts": [], "map_steps": []}
    for data, source in files:
        _check_saved(data, source)
        for key in ("gpu", "num_sms", "launch_overhead_s", "device_name", "versions"):
            if merged.get(key) is None and data.get(key) is not None:
                merged[key] = data[key]
        if data.get("gpu") not in (None, merged.get("gpu")):
            raise ConfigError(f"{source}: field 'gpu': {data['gpu']!r}, but {files[0][1]} was measured on "
                              f"{merged['gpu']!r}; valid: timings of one GPU")
        merged["cases"] += list(data["cases"])
        merged["backend_cases"] += list(data.get("backend_cases") or [])
        merged["map_steps"] += _saved_map_steps(data, source)
        merged["layouts"] += [x for x in (data.get("layouts") or []) if x not in merged["layouts"]]
        if data.get("workload") is not None:
            if "workload" in merged:
                raise ConfigError(f"{source}: a second workload sample; valid: at most one --from-measurements file "
                                  "with a workload")
            merged["workload"] = data["workload"]
    return merged, " + ".join(src for _, src in files)


def _check_saved(data: Any, source: str) -> None:
    if not isinstance(data, Mapping) or not isinstance(data.get("cases"), list) or not (
            data["cases"] or data.get("workload") or data.get("backend_cases")):
        got = f"; got {_json_kind(data)}" if not isinstance(data, Mapping) else ""
        raise ConfigError(f"{source}: expected a calibration's measurements (a JSON object with a non-empty 'cases' "
                          f"list, 'backend_cases' or a 'workload' record, as calibrate --save-measurements writes){got}")
    n = saved_timings(data)
    if n > MAX_MEASUREMENT_TIMINGS:  # about 20 ms of fit a timing: 80,000 ran 40 minutes with no output
        raise ConfigError(f"{source}: {n:,} timings, over the supported {MAX_MEASUREMENT_TIMINGS:,} for one fit (the "
                          "largest calibration, --grid --map-steps with the backends, saves about 4,300); fit a part "
                          "of them, or the files of one calibration")


def _json_kind(data: Any) -> str:
    """What a JSON value is, in the words of JSON (a list is an array, None is null)."""
    if data is None:
        return "null"
    return {list: "an array", str: "a string", bool: "true or false", int: "a number", float: "a number"}.get(
        type(data), type(data).__name__)


def saved_timings(data: Mapping[str, Any]) -> int:
    """How many timings a saved calibration holds (what the fit goes through): its cases, backend runs, and the rows
    of its workload sample and map steps."""
    def rows(r: Any) -> int:
        return len(r.get("rows") or []) if isinstance(r, Mapping) and isinstance(r.get("rows"), list) else 0

    def count(v: Any) -> int:
        return len(v) if isinstance(v, list) else 0

    map_steps = data.get("map_steps")
    return (count(data.get("cases")) + count(data.get("backend_cases")) + rows(data.get("workload"))
            + (sum(rows(m) for m in map_steps) if isinstance(map_steps, list) else 0))


def calibration_from_measurements(data: Any, *, gpu: Any, base: TimeProfile, source: str,
                                  start_note: str = "the starting profile's", keep_physics: bool = False,
                                  cold: bool = False, progress: Any = None,
                                  measure_backends: Callable[[Sequence[Mapping[str, Any]]], list[Any]] | None = None,
                                  left_out_folds: int = 0) -> TimeProfile:
    """``calibrate --from-measurements``: the profile fitted to timings a calibration saved
    (``--save-measurements``: ``{"gpu", "num_sms", "launch_overhead_s", "device_name", "cases": [...],
    "backend_cases": [...]}``), no GPU needed. A file from before ``launch_overhead_s`` was saved keeps the starting
    profile's launch overhead. The ``layouts`` --model named are saved with the timings, so their layout cells come
    back too; so do the compiled backends' runs (``backend_cases``), whose families are fitted again.
    ``left_out_folds``: :func:`~decodecalc.timemodel.calibration_fit.fit_calibration_rows`'s."""
    _check_saved(data, source)
    if data.get("gpu") not in (None, gpu.name):
        raise ConfigError(f"{source}: field 'gpu': measured on {data['gpu']!r}, not --gpu {gpu.name}")
    for i, r in enumerate(data["cases"]):
        _check_measured_row(r, f"{source}: cases[{i}]")
    backend_cases = data.get("backend_cases") or []
    if not isinstance(backend_cases, list):
        raise ConfigError(f"{source}: field 'backend_cases': expected a list of runs, as calibrate --save-measurements "
                          "writes it")
    for i, r in enumerate(backend_cases):
        check_backend_record(r, f"{source}: backend_cases[{i}]")
    launch = data.get("launch_overhead_s")
    if launch is not None and (isinstance(launch, bool) or not isinstance(launch, (int, float))
                               or not 0 < launch < 1e-3):
        raise ConfigError(f"{source}: field 'launch_overhead_s': {launch!r}; expected seconds in (0, 1e-3)")
    sms = data.get("num_sms", gpu.num_sms)
    if sms != gpu.num_sms:
        raise ConfigError(f"{source}: field 'num_sms': {sms!r}, but --gpu {gpu.name} has {gpu.num_sms} SMs")
    return fit_calibration_rows(data["cases"], gpu=gpu, base=base, num_sms=gpu.num_sms, launch_overhead_s=launch,
                                device_name=str(data.get("device_name") or ""), versions=str(data.get("versions") or ""),
                                start_note=start_note, keep_physics=keep_physics, layouts=_saved_layouts(data, source),
                                cold=cold, workload=_saved_workload(data, source), backend_records=backend_cases,
                                measure_backends=measure_backends, progress=progress,
                                map_steps=_saved_map_steps(data, source), left_out_folds=left_out_folds)


#: what a saved backend run's shape may hold (a file is data: nothing in it may cost more than the calibration did)
_BACKEND_MAX_BATCH, _BACKEND_MAX_LEN = 4096, 1 << 20


def check_backend_record(r: Any, where: str) -> None:
    """One saved backend run (:func:`decodecalc.verify.backend_steps.run_case`'s record), field by field: a clear
    ``ConfigError`` naming the field, never a traceback from deep in the fit. A failed run (``error``) is skipped."""
    from decodecalc.timemodel.backend_fit import CALIBRATED_BACKENDS, LAYOUT_BASE_MODEL

    if not isinstance(r, Mapping):
        raise ConfigError(f"{where}: expected an object")
    if "error" in r:
        return
    if r.get("backend") not in CALIBRATED_BACKENDS:
        raise ConfigError(f"{where}: field 'backend': {r.get('backend')!r}; valid: {', '.join(CALIBRATED_BACKENDS)}")
    sh = r.get("shape")
    if not isinstance(sh, Mapping) or sh.get("model") not in LAYOUT_BASE_MODEL.values():
        raise ConfigError(f"{where}: field 'shape.model': {sh.get('model') if isinstance(sh, Mapping) else sh!r}; "
                          f"valid: {', '.join(LAYOUT_BASE_MODEL.values())}")
    heads = sh.get("heads")
    if not (isinstance(heads, list) and len(heads) == 2 and all(_int_in(x, 1, 1024) for x in heads)
            and heads[0] % heads[1] == 0):
        raise ConfigError(f"{where}: field 'shape.heads': {heads!r}; expected [query heads, KV heads], integers in "
                          "[1, 1024], the first a multiple of the second")
    lens = sh.get("seq_lens")
    if not (isinstance(lens, list) and 1 <= len(lens) <= _BACKEND_MAX_BATCH
            and all(_int_in(x, 1, _BACKEND_MAX_LEN) for x in lens)):
        raise ConfigError(f"{where}: field 'shape.seq_lens': expected 1-{_BACKEND_MAX_BATCH:,} integers in "
                          f"[1, {_BACKEND_MAX_LEN:,}]")
    if sh.get("kv_cache_dtype", "auto") not in ("auto", "bfloat16", "fp8"):
        raise ConfigError(f"{where}: field 'shape.kv_cache_dtype': {sh.get('kv_cache_dtype')!r}; valid: bfloat16, fp8")
    if sh.get("tp", 1) != 1:
        raise ConfigError(f"{where}: field 'shape.tp': {sh.get('tp')!r}; valid: 1 (the heads are per rank)")
    if r.get("block_size") != 16:
        raise ConfigError(f"{where}: field 'block_size': {r.get('block_size')!r}; valid: 16 (calibrate's page size)")
    if not isinstance(r.get("cuda_graph"), bool):
        raise ConfigError(f"{where}: field 'cuda_graph': {r.get('cuda_graph')!r}; valid: true or false")
    t = (r.get("timing") or {}).get("t_us") if isinstance(r.get("timing"), Mapping) else None
    if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < 1e8):
        raise ConfigError(f"{where}: field 'timing.t_us': {t!r}; expected microseconds in (0, 1e8)")
    launches = r.get("launches")
    if not isinstance(launches, list) or not all(
            isinstance(x, Mapping) and isinstance(x.get("name"), str) and isinstance(x.get("role"), str)
            and all(isinstance(x.get(k), list) and all(_int_in(v, 0, 1 << 31) for v in x[k]) for k in ("grid", "block"))
            for x in launches):
        raise ConfigError(f"{where}: field 'launches': expected the profiled kernels (name, role, grid, block), as "
                          "calibrate --save-measurements writes them")
    knobs = r.get("knobs")
    if knobs is not None:
        raise ConfigError(f"{where}: field 'knobs': calibrate times the default plans only")


def _int_in(v: Any, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


#: the head layout fields of a saved ``workload`` record (per rank)
_WORKLOAD_INTS = ("tp", "num_heads", "num_kv_heads", "head_size", "head_size_v", "num_steps")


def _saved_workload(data: Mapping[str, Any], source: str) -> Mapping[str, Any] | None:
    """The ``workload`` record of ``calibrate --workload``'s saved timings, checked field by field (or None)."""
    wl = data.get("workload")
    if wl is None:
        return None
    return _checked_workload(wl, f"{source}: workload")


def _saved_map_steps(data: Mapping[str, Any], source: str) -> list[Mapping[str, Any]]:
    """The ``map_steps`` records of calibrate's saved timings (``--map-steps``), each checked as a workload record."""
    raw = data.get("map_steps", [])
    if not isinstance(raw, list):
        raise ConfigError(f"{source}: field 'map_steps': expected a list of workload records, as calibrate "
                          "--save-measurements writes it")
    return [_checked_workload(r, f"{source}: map_steps[{i}]") for i, r in enumerate(raw)]


def _checked_workload(wl: Any, where: str) -> Mapping[str, Any]:
    """A saved workload record (:meth:`decodecalc.timemodel.step_rows.WorkloadSample.saved`), field by field."""
    from decodecalc.timemodel.step_rows import check_step_row

    if not isinstance(wl, Mapping):
        raise ConfigError(f"{where}: expected an object, as calibrate --workload --save-measurements writes it")
    for key in _WORKLOAD_INTS:
        v = wl.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= (1 << 40 if key == "num_steps" else 1024):
            raise ConfigError(f"{where}: field {key!r}: {v!r}; expected a positive integer")
    if wl["num_heads"] % wl["num_kv_heads"]:
        raise ConfigError(f"{where}: num_heads {wl['num_heads']} is not a multiple of num_kv_heads {wl['num_kv_heads']}")
    for key in ("model", "source"):
        if not isinstance(wl.get(key), str) or not wl[key]:
            raise ConfigError(f"{where}: field {key!r}: expected a non-empty string")
    steps, rows = wl.get("sampled_steps"), wl.get("rows")
    if not isinstance(steps, list) or not steps or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                                             for x in steps):
        raise ConfigError(f"{where}: field 'sampled_steps': expected a non-empty list of step indices")
    if not isinstance(rows, list) or not rows:
        raise ConfigError(f"{where}: field 'rows': expected a non-empty list of step timings")
    for i, r in enumerate(rows):
        if isinstance(r, Mapping) and r.get("status", "ok") != "ok":
            continue  # a failed timing: skipped, as calibrate skips it
        check_step_row(r, f"{where}: rows[{i}]")
    return wl


def _saved_layouts(data: Mapping[str, Any], source: str) -> list[tuple[int, int, int]]:
    raw = data.get("layouts", [])
    ok = isinstance(raw, list) and all(
        isinstance(x, list) and len(x) == 3 and all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1024
                                                    for v in x) for x in raw)
    if not ok:
        raise ConfigError(f"{source}: field 'layouts': expected [query heads, KV heads, head dim] triples of integers "
                          "in [1, 1024], as calibrate --model saves them")
    return [tuple(x) for x in raw]
