"""The GPU half of calibrating the compiled backends (``decodecalc calibrate --backends``): each run of
:func:`decodecalc.timemodel.backend_fit.backend_plan` built, profiled (its launch compared with decodecalc's plan) and
timed back to back under CUDA graphs by :func:`decodecalc.verify.backend_steps.run_case`, one JSON record per run (the
records the H200 captures in benchmarks/results are). The fit of those records needs no GPU
(:func:`decodecalc.timemodel.backend_fit.calibrate_backends`). torch and the libraries are imported inside functions."""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.timemodel.backend_fit import (CALIBRATED_BACKENDS, KV_DTYPES, LAYOUT_BASE_MODEL, backend_plan,
                                              error_text, parse_backends, plan_shape, shape_workload, xqa_plan)
from decodecalc.timemodel.fit import Measurement, Shape

#: errors in a row after which a backend's remaining runs are not started (a library that does not build or load)
MAX_ERROR_STREAK = 6


def resolve_backends(spec: str | None) -> tuple[list[str], dict[str, str]]:
    """(backends to time, {backend: why it is skipped}) for ``--backends`` ``spec``
    (:func:`~decodecalc.timemodel.backend_fit.parse_backends`): ``auto`` skips the ones not installed; a backend named
    that is not installed is an error."""
    from decodecalc.verify.profiler import missing_backend

    named = parse_backends(spec)
    names = list(CALIBRATED_BACKENDS) if named is None else named
    missing = {b: why for b in names if (why := missing_backend(b))}
    if named and missing:
        b = next(iter(missing))
        raise ConfigError(f"--backends {b}: not installed here ({missing[b].removeprefix(f'--system {b} ')}); valid: "
                          "--backends none, or auto (every installed one)")
    return [b for b in names if b not in missing], missing


def warm_flashinfer(backends: Sequence[str]) -> list[str]:
    """Compile every FlashInfer decode module the plan needs (3 head dims x 2 KV dtypes x the paths timed) in parallel
    processes: FlashInfer JIT-compiles each one with nvcc on first use (about 15 s each on the H200's host). Returns the
    failures' last output lines (the run itself then records the error)."""
    code = "from decodecalc.verify.backend_calibration import _warm_one; _warm_one(%d, %r, %r)"
    procs = [subprocess.Popen([sys.executable, "-c", code % (d, kv, b == "flashinfer-tc")], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for d in LAYOUT_BASE_MODEL for kv in KV_DTYPES for b in backends if b.startswith("flashinfer")]
    failed = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode:
            failed.append(out.strip().splitlines()[-1] if out.strip() else f"exit {p.returncode}")
    return failed


def warm_xqa(plan: Sequence[tuple[str, dict[str, Any], bool]], workers: int = 16) -> list[str]:
    """Compile every XQA module ``plan`` runs (one per KV dtype, head dim and group size: flashinfer/xqa.py L67-78) in
    up to ``workers`` parallel processes; the failures' last output lines."""
    keys = sorted({(tuple(s["heads"]), s["model"], s["kv_cache_dtype"]) for b, s, _ in plan if b.startswith(("xqa", "trtllm-xqa"))})
    code = "from decodecalc.verify.backend_calibration import _warm_xqa_one; _warm_xqa_one(%d, %d, %r, %r)"
    failed: list[str] = []
    for start in range(0, len(keys), workers):
        procs = [subprocess.Popen([sys.executable, "-c", code % (h, hkv, model, kv)], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for (h, hkv), model, kv in keys[start:start + workers]]
        for p in procs:
            out, _ = p.communicate()
            if p.returncode:
                failed.append(out.strip().splitlines()[-1] if out.strip() else f"exit {p.returncode}")
    return failed


def _warm_xqa_one(h: int, h_kv: int, model: str, kv: str) -> None:
    import torch

    from decodecalc.verify.backend_steps import xqa_step

    shape = {"model": model, "tp": 1, "heads": [h, h_kv], "seq_lens": [512], "kv_cache_dtype": kv}
    xqa_step(shape_workload(shape, 16), max_seq_len=512, copies=1).run(0)
    torch.cuda.synchronize()


def _warm_one(d: int, kv: str, tensor_cores: bool) -> None:
    import torch

    from decodecalc.verify.backend_steps import flashinfer_step

    h, h_kv = {64: (32, 8), 128: (32, 8), 256: (16, 8)}[d]
    flashinfer_step(shape_workload(plan_shape((h, h_kv, d), (1, 2560), kv, "warm"), 16), tensor_cores=tensor_cores,
                    copies=1).run(0)
    torch.cuda.synchronize()


def _measured_occupancy(rec: dict[str, Any], w: Any, gpu: Any) -> None:
    """A FlashInfer CUDA-core run whose launch decodecalc's occupancy table got wrong (a GPU of another architecture):
    its plan with the CTAs/SM the captured registers and shared memory allow, recorded as ``with_measured_occupancy``
    (the fit then uses that plan)."""
    from decodecalc.verify import profiler as P

    if rec.get("backend") != "flashinfer" or rec.get("match") is not False:
        return
    for x in rec.get("launches", []):
        if x.get("role") == "main" and x.get("registers_per_thread") and x.get("block"):
            threads = 1
            for v in x["block"]:
                threads *= int(v)
            occ = P.ctas_per_sm(threads, int(x["registers_per_thread"]), int(x.get("shared_memory_bytes") or 0))
            saved: list[dict[str, Any]] = [{k: (tuple(v) if k in ("grid", "block") else v) for k, v in y.items()}
                                           for y in rec["launches"]]
            launches = [P.ProfiledLaunch(**y) for y in saved]
            alt = P.predict_and_compare("flashinfer", w, gpu, launches, cuda_graph=bool(rec["cuda_graph"]), occupancy=occ)
            rec["with_measured_occupancy"] = {"occupancy": occ, "match": alt.get("match")}
            return


def record_measurement(r: Mapping[str, Any], gpu: Any) -> Measurement | None:
    """One capture record (:func:`decodecalc.verify.backend_steps.run_case`'s JSON) as a measurement, with the work of
    the launcher's plan for that run; None when it failed, was not timed, or its launch is not the plan's (only runs
    whose launch decodecalc reproduces are fitted). A FlashInfer CUDA-core run whose plan took another occupancy than
    decodecalc's table gives (``with_measured_occupancy``: the registers' CTAs/SM) is planned with that one."""
    from decodecalc.timemodel.backends import BACKEND_KERNELS, backend_work
    from decodecalc.verify import profiler as P

    t = (r.get("timing") or {}).get("t_us")
    if "error" in r or not t or r.get("backend") not in BACKEND_KERNELS:
        return None
    w = shape_workload(r["shape"], int(r["block_size"]))
    knobs = r.get("knobs")
    fields = {f.name for f in dataclasses.fields(P.ProfiledLaunch)}
    launches = [P.ProfiledLaunch(**{k: x.get(k) for k in fields - {"grid", "block", "role"}},
                                 grid=tuple(x["grid"]), block=tuple(x["block"]), role=str(x.get("role", "other")))
                for x in r["launches"]]
    if knobs:
        plan = P.knob_plan(r["backend"], w, gpu, knobs)
        variant = ",".join(f"{k}={v}" for k, v in sorted(knobs.items()))
    else:
        cg = bool(r["cuda_graph"])
        plan = P.default_result(r["backend"], w, gpu, cuda_graph=cg).plan
        alt = (r.get("with_measured_occupancy") or {}).get("occupancy")
        if plan is not None and alt and not P.compare_launches(plan, launches)["match"]:
            plan = P.default_result(r["backend"], w, gpu, cuda_graph=cg, occupancy=int(alt)).plan
        variant = "default-cuda-graph" if r["cuda_graph"] else "default"
    if plan is None or not P.compare_launches(plan, launches)["match"]:
        return None
    shape = Shape(num_heads=w.num_heads, num_kv_heads=w.num_kv_heads, seq_lens=w.seq_lens, head_size=w.head_size,
                  head_size_v=w.head_size_v, block_size=w.block_size, query_lens=w.query_lens,
                  kv_bytes_per_element=w.kv_bytes_per_element)
    return Measurement(shape=shape, kernel=r["backend"], variant=variant, splits=max(plan.splits or (1,)),
                       time_s=float(t) * 1e-6, work=backend_work(plan, w, r["backend"]), is_default=not knobs,
                       model=str(r["shape"]["model"]))


def record_measurements(records: Iterable[Mapping[str, Any]], gpu: Any) -> list[Measurement]:
    return [m for m in (record_measurement(r, gpu) for r in records) if m is not None]


#: what a saved run keeps of a launch (the fit re-plans every run and compares grids by role; the names are cut short:
#: a CUTLASS kernel's template name runs to 3 kB)
_LAUNCH_KEYS = ("role", "grid", "block", "registers_per_thread", "shared_memory_bytes", "duration_us")


def saved_record(rec: dict[str, Any]) -> dict[str, Any]:
    """A run's record as ``--save-measurements`` keeps it: the shape, the plan options, the main and merge launches,
    the time and whether the launch matched (the profiler's other kernels, FA3's metadata read-back and the prediction
    are left out: the fit recomputes what it needs)."""
    out: dict[str, Any] = {k: copy.deepcopy(rec[k]) for k in ("shape", "backend", "cuda_graph", "block_size", "error", "match", "splits_check",
                                "with_measured_occupancy", "knobs") if k in rec}
    out["launches"] = [{"name": str(x.get("name", ""))[:100], **{k: x.get(k) for k in _LAUNCH_KEYS}}
                       for x in rec.get("launches", []) if x.get("role") in ("main", "merge")]
    t = (rec.get("timing") or {}).get("t_us")
    out["timing"] = {"t_us": round(float(t), 4)} if t else {}
    return out


def run_backend_calibration(gpu: Any, backends: Sequence[str], *,
                            progress: Callable[[int, int, str], None] | None = None,
                            budget_s: float | None = None,
                            plan: Sequence[tuple[str, dict[str, Any], bool]] | None = None) -> list[dict[str, Any]]:
    """Time :func:`~decodecalc.timemodel.backend_fit.backend_plan` for ``backends`` (or the runs of ``plan``) on the
    local GPU; one record per run (a run that fails records its ``error`` and the next one starts; after
    MAX_ERROR_STREAK failures in a row a backend's remaining runs are skipped). ``budget_s``: no run starts after that
    many seconds."""
    import torch

    from decodecalc.verify.backend_steps import run_case
    from decodecalc.verify.profiler import default_result

    t0 = time.monotonic()
    if any(b.startswith("flashinfer") for b in backends):
        if progress:
            progress(0, 0, "compiling FlashInfer's decode modules")
        warm_flashinfer(backends)
    if "xqa" in backends:
        if progress:
            progress(0, 0, "compiling FlashInfer's XQA modules")
        warm_xqa(xqa_plan())
    if plan is None:
        plan = backend_plan([b for b in backends if b != "xqa"]) + (xqa_plan() if "xqa" in backends else [])
    plan = list(plan)
    records: list[dict[str, Any]] = []
    streak: dict[str, int] = {}
    for i, (backend, shape, cg) in enumerate(plan):
        if budget_s is not None and time.monotonic() - t0 > budget_s:
            break
        if streak.get(backend, 0) >= MAX_ERROR_STREAK:
            continue
        w = shape_workload(shape, 16)
        knobs = shape.get("knobs")
        if default_result(backend, w, gpu, cuda_graph=cg).plan is None:
            continue  # no kernel is compiled for it (FlashInfer's CUDA cores at group sizes 7 and 12): not a failure
        rec: dict[str, Any] = {"shape": shape, "backend": backend, "cuda_graph": cg, "block_size": 16}
        try:
            rec.update(run_case(backend, w, gpu, cuda_graph=cg, replays=5, knobs=knobs))
            _measured_occupancy(rec, w, gpu)
            streak[backend] = 0
        except Exception as exc:  # noqa: BLE001 - one failing run must not end the calibration
            rec["error"] = error_text(exc)
            streak[backend] = streak.get(backend, 0) + 1
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        records.append(saved_record(rec))
        if progress:
            progress(i + 1, len(plan), f"{backend} {shape['layout']} {shape['kv_cache_dtype']} B{len(shape['seq_lens'])} "
                                       f"L{max(shape['seq_lens'])}{' graph' if cg else ''}")
    return records
