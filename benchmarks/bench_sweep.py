"""Benchmark: 256 batch sizes x 1,024 lengths x 2 policies (vllm, sglang) through decodecalc.reports.sweep.

Prints the sweep time (median of --repeat runs), the CSV serialisation time, and the ratio
against a baseline measured in the same run: one full launch plan per point
(``plan_vllm`` / ``plan_sglang``, what `decodecalc grid` does) on an evenly spread sample of
points, scaled to the full grid. Usage: ``python -m benchmarks.bench_sweep [--repeat 5] [--sample 256]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sample", type=int, default=256, help="baseline points per policy")
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--gpu", default="h200")
    args = ap.parse_args()

    from decodecalc.launchers.sglang_triton import plan_sglang
    from decodecalc.launchers.vllm_unified import plan_vllm
    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.specs.models import resolve_model
    from decodecalc.reports.sweep import SweepSpec, run_sweep
    from decodecalc.workload import make_workload

    model, gpu = resolve_model(args.model), resolve_gpu(args.gpu)
    batches = tuple(range(1, 257))
    lens = tuple(range(128, 128 * 1024 + 1, 128))
    spec = SweepSpec(models=(model,), tps=(1,), gpus=(gpu,), policies=("vllm", "sglang"), batches=batches,
                     seq_lens=lens)
    points = spec.num_points

    times = []
    result = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        result = run_sweep(spec)
        times.append(time.perf_counter() - t0)
    t_sweep = statistics.median(times)
    assert result is not None
    t0 = time.perf_counter()
    csv_text = result.to_csv()
    t_csv = time.perf_counter() - t0

    # baseline: a full plan per point on a spread sample
    k = max(1, int(args.sample ** 0.5))
    sb = batches[:: max(1, len(batches) // k)][:k]
    sl = lens[:: max(1, len(lens) // k)][:k]
    t0 = time.perf_counter()
    n = 0
    for b in sb:
        for L in sl:
            w = make_workload(model, batch=b, seq_len=L)
            plan_vllm(w, gpu)
            plan_sglang(w, gpu)
            n += 2
    t_base_point = (time.perf_counter() - t0) / n
    t_base = t_base_point * points

    print(f"sweep: {len(batches)} batches x {len(lens)} lengths x 2 policies = {points:,} points "
          f"({args.model}, {args.gpu})")
    print(f"  run_sweep           median {t_sweep:.3f} s over {args.repeat} runs "
          f"(min {min(times):.3f}, max {max(times):.3f}); {t_sweep / points * 1e9:.0f} ns/point")
    print(f"  to_csv              {t_csv:.3f} s ({len(csv_text) / 1e6:.1f} MB, {csv_text.count(chr(10)) - 1:,} rows)")
    print(f"  sweep + csv         {t_sweep + t_csv:.3f} s   target < 2 s: {'PASS' if t_sweep + t_csv < 2 else 'FAIL'}")
    print(f"  baseline            full plan per point: {t_base_point * 1e6:.0f} us/point on {n} sampled points "
          f"-> {t_base:.1f} s for the grid")
    print(f"  speed-up            {t_base / t_sweep:,.0f}x (sweep) / {t_base / (t_sweep + t_csv):,.0f}x (sweep + csv)")
    print(f"  machine             {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"{platform.platform()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
