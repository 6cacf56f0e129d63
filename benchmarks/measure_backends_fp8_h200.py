"""Time the compiled backends on an fp8 KV cache and on bf16, shape for shape, over head layouts chosen as an
experiment (issue 18, item 2): FlashInfer's two decode paths and vLLM's FA3, on an H200.

    PYTHONPATH=.:<flashinfer> DECODECALC_FA3_LIB=<so> python3 -m benchmarks.measure_backends_fp8_h200 \\
        --out $OUT [--layouts fit|unseen|all] [--budget-s 500]

Layouts: the twelve per-rank head layouts SGLang's fp8 family was fitted on (FIT_LAYOUTS, those of
measure_kv_formats_h200.py) and the six it was validated on (UNSEEN_LAYOUTS, its ``--unseen`` run), so the backends'
fp8 families can be fitted on the first and judged on the second. Per layout, calibrate's BACKEND_SHAPES (batch
1-256, 512-32,768 tokens, two ragged batches). Every (backend, layout, shape) runs with a bf16 and an fp8 (e4m3) cache back to back, so that a
session's drift cancels in their ratio: FlashInfer with an eager plan and, every other shape, a CUDA-graph plan; FA3
with its heuristic split count (eager) and with vLLM's 32 under full CUDA graphs. Each run is profiled (the launch is
compared with decodecalc's plan, decodecalc.verify.backend_steps.run_case) and timed back to back under CUDA graphs
over rotating KV copies. Writes ``fp8-backends.jsonl`` (capture_backends_h200's records, ``shape.kv_cache_dtype``
added; committed gzip-compressed as ``benchmarks/results/fp8-backends-{flashinfer,fa3}-h200.jsonl.gz``) and a
summary; a time guard stops starting new cases near ``--budget-s``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks.capture_backends_h200 import summarize_occupancy, workload
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel.backend_fit import BACKEND_LAYOUTS, backend_plan
from decodecalc.verify.backend_calibration import MAX_ERROR_STREAK, warm_flashinfer

ROOT = Path(__file__).resolve().parents[1]

#: the plan is calibrate's (decodecalc.timemodel.backend_fit): its layouts (FIT_LAYOUTS), batches and chat-like steps
FIT_LAYOUTS = list(BACKEND_LAYOUTS)
UNSEEN_LAYOUTS = [(24, 8, 128), (40, 8, 128), (28, 4, 128), (12, 1, 128), (8, 4, 256), (32, 8, 64)]


def layouts(which: str) -> list[tuple[int, int, int]]:
    return {"fit": FIT_LAYOUTS, "unseen": UNSEEN_LAYOUTS, "all": FIT_LAYOUTS + UNSEEN_LAYOUTS}[which]


def plan_cases(which: str, backends: list[str], short: bool = False) -> list[tuple[str, dict, bool]]:
    """(backend, shape, cuda_graph) of every run (backend_fit.backend_plan: the bf16 and fp8 runs of one case
    adjacent, a stable hash order); ``short``: the chat-like steps on FIT_LAYOUTS (tag ``fit-short``)."""
    if short:
        return backend_plan(backends, FIT_LAYOUTS, long=False, tag="fit")
    return [run for tag in ("fit", "unseen") if which in (tag, "all")
            for run in backend_plan(backends, layouts(tag), short=False, tag=tag)]


def not_compiled(backend: str, w, gpu) -> str | None:
    """decodecalc's reason the backend has no kernel for ``w`` (its launcher's rule), else None."""
    from decodecalc.launchers.registry import PolicyOptions
    from decodecalc.reports.compare import evaluate
    from decodecalc.verify import profiler as P

    res = evaluate(P.BACKENDS[backend][0], w, gpu, PolicyOptions())
    return None if res.plan is not None else str(res.reason)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--layouts", choices=("fit", "unseen", "all"), default="all")
    ap.add_argument("--backends", default="flashinfer,flashinfer-tc,fa3")
    ap.add_argument("--budget-s", type=float, default=500.0)
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--short", action="store_true", help="the chat-like steps (BACKEND_SHORT_SHAPES) on FIT_LAYOUTS (writes fp8-backends-short.jsonl)")
    args = ap.parse_args()
    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    from decodecalc.verify import backend_steps as S
    from decodecalc.verify import profiler as P

    gpu = resolve_gpu("h200")
    backends = [b for b in args.backends.split(",") if b]
    missing = {b: P.missing_backend(b) for b in backends}
    env = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
           "sms": torch.cuda.get_device_properties(0).multi_processor_count, "missing": missing}
    try:
        import flashinfer

        env["flashinfer"] = flashinfer.__version__
    except Exception as exc:  # recorded; the FlashInfer runs then fail one by one
        env["flashinfer"] = f"not importable: {exc}"
    print("environment", env, flush=True)
    backends = [b for b in backends if missing[b] is None]
    for line in warm_flashinfer(backends):
        print("warm-up failed:", line, flush=True)
    print(f"flashinfer JIT warm-up done at {time.time() - t0:.0f}s", flush=True)
    done, failed, skipped, streak = 0, {}, {}, {}
    stem = "fp8-backends-short" if args.short else "fp8-backends"
    path = out / f"{stem}.jsonl"
    with path.open("w") as lines:
        for backend, shape, cg in plan_cases(args.layouts, backends, args.short):
            if time.time() - t0 > args.budget_s:
                break
            if backend in failed:
                continue
            why = not_compiled(backend, workload(shape, 16), gpu)
            if why:  # the library has no kernel for it (FlashInfer's CUDA cores at group sizes 5, 7, 12): not run
                skipped[why] = skipped.get(why, 0) + 1
                continue
            rec = {"shape": shape, "backend": backend, "cuda_graph": cg, "block_size": 16}
            try:
                rec.update(S.run_case(backend, workload(shape, 16), gpu, cuda_graph=cg, replays=args.replays))
                summarize_occupancy(rec)
            except Exception as exc:  # one failing shape must not end the run
                rec["error"] = f"{type(exc).__name__}: {str(exc)[:600]}"
                streak[backend] = streak.get(backend, 0) + 1
                if (rec["error"].startswith(("OSError", "ImportError", "ModuleNotFoundError"))
                        or "undefined symbol" in rec["error"] or streak[backend] >= MAX_ERROR_STREAK):
                    failed[backend] = rec["error"]
            else:
                streak[backend] = 0
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            lines.write(json.dumps(rec) + "\n")
            lines.flush()
            done += 1
            t = (rec.get("timing") or {}).get("t_us")
            print(f"{time.time() - t0:5.0f}s {backend:13s} cg={int(cg)} {shape['layout']:10s} {shape['kv_cache_dtype']:8s} "
                  f"B={len(shape['seq_lens']):3d} L={max(shape['seq_lens']):6d} match={rec.get('match')} "
                  f"t={None if t is None else round(t, 2)} {rec.get('error', '')[:200]}", flush=True)
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    summary = {"environment": env, "elapsed_s": round(time.time() - t0, 1), "runs": done, "failed_load": failed,
               "not_compiled": skipped,
               "per_backend": {b: {"runs": sum(r["backend"] == b for r in recs),
                                   "matched": sum(r["backend"] == b and r.get("match") is True for r in recs),
                                   "errors": sum(r["backend"] == b and "error" in r for r in recs)} for b in backends}}
    (out / f"{stem}-summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary["per_backend"]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
