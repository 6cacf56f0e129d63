"""``tune --measure``'s GPU half: every launch of a :class:`~decodecalc.reports.tune_measure.MeasurePlan` timed on
the local GPU as a CUDA graph.

The Triton launches go through ``calibrate --workload``'s timer (:func:`decodecalc.verify.calibration.
time_step_launches`: the engines' own kernels, loaded by :mod:`decodecalc.verify.upstream`, on a random paged KV cache
cycled over copies so that L2 carries nothing between calls); the backends through ``verify``'s runners
(:func:`decodecalc.verify.backend_steps.build_step`, the engines' wrappers under CUDA graphs, with the arguments the
engine passes). ``save`` is called with every row so far after each step and each backend run, so that an interrupted
run keeps what it measured.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from decodecalc.errors import DecodecalcError
from decodecalc.timemodel.measure_plan import MeasurePlan


def preflight(plan: MeasurePlan, gpu: Any, *, vllm_src: Any = None, sglang_src: Any = None) -> tuple[Any, Any, Any, int]:
    """torch with CUDA on the GPU the plan was made for, and the engines' Triton kernels the plan launches: (torch,
    vLLM kernels, SGLang kernels, SMs), or a one-line error naming what is missing. Fast: nothing is compiled."""
    from decodecalc.verify.calibration import cuda_or_error, local_gpu
    from decodecalc.verify.upstream import load_sglang, load_vllm

    torch = cuda_or_error("tune --measure")
    _, sms = local_gpu(torch, gpu, "tune --measure times the whole GPU")
    engines = {x.engine for x in plan.sample.launches}
    cap = tuple(torch.cuda.get_device_capability(0))
    vk = load_vllm(vllm_src, capability=cap, interpret=False) if "vllm" in engines else None
    sk = load_sglang(sglang_src, interpret=False) if "sglang" in engines else None
    return torch, vk, sk, sms


def _triton_row(row: Mapping[str, Any]) -> dict[str, Any]:
    engine = str(row["engine"])
    out = {"kind": "triton", "step": int(row["shape_index"]), "engine": engine,
           "items": [f"{engine}:{s}" for s in row.get("entries", ())], "launch": row.get("launch"),
           "t_us": row.get("t_us"), "status": row.get("status")}
    if row.get("error"):
        out["error"] = row["error"]
    return out


def run_measurement(plan: MeasurePlan, gpu: Any, *, progress: Callable[[int, int, str], None] | None = None,
                    save: Callable[[list[dict[str, Any]]], None] | None = None, vllm_src: Any = None,
                    sglang_src: Any = None) -> list[dict[str, Any]]:
    """Time every launch of ``plan``; the timing rows (``summarize_measurement``'s input)."""
    from decodecalc.verify.backend_steps import build_step
    from decodecalc.verify.calibration import time_step_launches
    from decodecalc.verify.profiler import missing_backend
    from decodecalc.verify.timing import time_calls

    torch, vk, sk, sms = preflight(plan, gpu, vllm_src=vllm_src, sglang_src=sglang_src)
    rows: list[dict[str, Any]] = []
    total, done = plan.launches, 0
    for step in plan.sample.steps:
        one = dataclasses.replace(plan.sample, launches=tuple(x for x in plan.sample.launches if x.step == step))
        got = time_step_launches(torch, vk, sk, one, sms, progress, done, total)
        done += len(got)
        rows.extend(_triton_row(r) for r in got)
        if save is not None:
            save(rows)
    missing: dict[str, str | None] = {}
    for run in plan.backend_runs:
        why = missing.setdefault(run.kernel, missing_backend(run.kernel))
        row: dict[str, Any] = {"kind": "backend", "step": run.step, "kernel": run.kernel, "items": list(run.items),
                               "knobs": dict(run.knobs)}
        if why:
            row.update({"status": "missing", "error": why})
        else:
            t0 = time.monotonic()
            st = None
            try:
                st = build_step(run.kernel, run.work, cuda_graph=True, knobs=dict(run.knobs) or None)
                timing = time_calls(st.run, st.copies, replays=5)
                if timing.t_us is None or timing.timer != "graph":
                    raise DecodecalcError(f"no CUDA graph could be captured: {timing.note}")
                row.update({"t_us": timing.t_us, "spread": timing.spread, "status": "ok"})
            except Exception as exc:  # noqa: BLE001 - one failing launch must not stop the measurement
                row.update({"status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]})
            row["wall_s"] = round(time.monotonic() - t0, 2)
            st = None  # its KV copies go before the next run's
            torch.cuda.empty_cache()
        rows.append(row)
        done += 1
        if progress:
            progress(done, total, run.describe())
        if save is not None:
            save(rows)
    return rows

