"""Time compiled backends on head layouts of your choice with ``calibrate --backends``' plan, and score the packaged
profile on them (layouts no fit saw are the out-of-sample test of a backend family).

    python -m benchmarks.measure_backend_layouts --out DIR --backends fa3,flashinfer-tc --layouts 12:1:128,24:2:96
    python -m benchmarks.measure_backend_layouts --score FILE.jsonl.gz --gpu h100-sxm     # no GPU needed

The plan is :func:`decodecalc.timemodel.backend_fit.backend_plan` for those layouts (12 batch shapes and the chat-like
steps, bf16 and fp8); each run's launch is captured through CUPTI and compared with decodecalc's plan, then timed back
to back under CUDA graphs. ``--score`` prints, per backend and KV format, the median and 90th-percentile error of the
packaged profile's prediction on the runs whose launch matched.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import time
from pathlib import Path
from typing import Any


def parse_layouts(text: str) -> list[tuple[int, int, int]]:
    out = []
    for item in text.split(","):
        h, hkv, d = (int(x) for x in item.split(":"))
        out.append((h, hkv, d))
    return out


def run_and_write(gpu: Any, backends: list[str], plan: list[Any], path: Path, *, budget_s: float | None) -> list[dict]:
    """``calibrate --backends``' GPU half over ``plan`` (a progress line every 50 runs), its records written to
    ``path`` as gzip'd JSON Lines (what ``calibrate --from-measurements`` and ``--score`` read)."""
    from decodecalc.verify.backend_calibration import run_backend_calibration

    records = run_backend_calibration(gpu, backends, plan=plan, budget_s=budget_s,
                                      progress=lambda k, n, what: print(f"{k}/{n} {what}", flush=True)
                                      if k % 50 == 0 else None)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    return records


def measure(args: argparse.Namespace) -> None:
    import torch

    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.timemodel.backend_fit import backend_plan
    gpu = resolve_gpu(torch.cuda.get_device_name(0))
    backends = [b for b in args.backends.split(",") if b]
    plan = backend_plan(backends, parse_layouts(args.layouts), tag="layouts")
    t0 = time.monotonic()
    path = args.out / f"layouts-{gpu.name}.jsonl.gz"
    records = run_and_write(gpu, backends, plan, path, budget_s=args.budget_s)
    ok = sum(1 for r in records if r.get("match"))
    print(f"{len(records)} runs in {time.monotonic() - t0:.0f} s, {ok} matched their plan; wrote {path}")


def score(args: argparse.Namespace) -> None:
    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.timemodel.predict import launch_time_s
    from decodecalc.timemodel.profile_sources import packaged_profile
    from decodecalc.verify.backend_calibration import record_measurements

    gpu = resolve_gpu(args.gpu)
    with gzip.open(args.score, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    prof = packaged_profile(gpu.name)
    assert prof is not None
    groups: dict[tuple[str, str, str], list[float]] = {}
    for m in record_measurements(records, gpu):
        layout = f"{m.shape.num_heads}:{m.shape.num_kv_heads} d{m.shape.head_size}"
        kv = "fp8" if m.shape.kv_bytes_per_element == 1 else "bf16"
        err = abs(launch_time_s(m.work, prof) / m.time_s - 1.0)
        for key in ((m.kernel, kv, layout), (m.kernel, kv, "all")):
            groups.setdefault(key, []).append(err)
    print(f"{len(records)} runs; the packaged {gpu.name} profile on them (none of these layouts fitted it):")
    print("| backend | KV | layout | runs | median | p90 |")
    print("|---|---|---|---|---|---|")
    for (kernel, kv, layout), errs in sorted(groups.items()):
        errs.sort()
        p90 = errs[min(len(errs) - 1, int(0.9 * len(errs)))]
        print(f"| {kernel} | {kv} | {layout} | {len(errs)} | {statistics.median(errs):.1%} | {p90:.1%} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--backends", default="fa3,flashinfer-tc")
    ap.add_argument("--layouts", default="12:1:128,24:2:96")
    ap.add_argument("--budget-s", type=float, default=None)
    ap.add_argument("--score", type=Path, help="score the packaged profile on a saved run file instead")
    ap.add_argument("--gpu", default="h100-sxm")
    args = ap.parse_args()
    if args.score is not None:
        score(args)
    else:
        if args.out is None:
            raise SystemExit("Error: --out DIR (where the runs are written) or --score FILE")
        measure(args)


if __name__ == "__main__":
    main()
