"""Time FlashInfer's XQA decode kernels (and TensorRT-LLM's multi-block count on them) over the XQA plan on this GPU.

    python -m benchmarks.measure_xqa --out DIR [--shard I/N] [--budget-s S]

Runs :func:`decodecalc.timemodel.backend_fit.xqa_plan` (13 head layouts x 14 shapes, bf16 and fp8 caches, a tight and
a 131,072-token block table, TensorRT-LLM's count on every third shape) through ``calibrate --backends``' GPU half
(:func:`decodecalc.verify.backend_calibration.run_backend_calibration`): each run's launch is captured through CUPTI
and compared with decodecalc's plan, then timed back to back under CUDA graphs. Writes ``xqa-<gpu>-<shard>.jsonl.gz``
(the records ``calibrate --from-measurements`` reads) and prints how many launches matched their plan.
Needs torch with CUDA and flashinfer-python 0.7.2.post1 (its XQA JIT-builds with nvcc).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shard", default="1/1", help="I/N: the I-th of N equal parts of the plan (1-based)")
    ap.add_argument("--budget-s", type=float, default=None, help="no run starts after this many seconds")
    args = ap.parse_args()

    import torch

    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.timemodel.backend_fit import xqa_plan
    from benchmarks.measure_backend_layouts import run_and_write
    from decodecalc.verify.backend_calibration import warm_xqa

    gpu = resolve_gpu(torch.cuda.get_device_name(0))
    i, n = (int(x) for x in args.shard.split("/"))
    plan = xqa_plan()[i - 1::n]
    t0 = time.monotonic()
    failed = warm_xqa(plan)
    print(f"{gpu.name}: {len(plan)} runs; XQA modules built in {time.monotonic() - t0:.0f} s"
          + (f"; {len(failed)} failed: {failed[:3]}" if failed else ""), flush=True)
    path = args.out / f"xqa-{gpu.name}-{i}of{n}.jsonl.gz"
    records = run_and_write(gpu, [], plan, path, budget_s=args.budget_s)
    ok = sum(1 for r in records if r.get("match"))
    errors = [r["error"] for r in records if r.get("error")]
    by = {}
    for r in records:
        by.setdefault(r["backend"], [0, 0])[0 if r.get("match") else 1] += 1
    print(f"{len(records)} runs in {time.monotonic() - t0:.0f} s: {ok} launches matched the plan; by backend "
          f"(matched, not): {by}; {len(errors)} errors {errors[:2]}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
