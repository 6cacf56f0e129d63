#!/usr/bin/env python3
"""Speed of ``decodecalc tune``: 100,000 decode steps x 40 candidate settings (vLLM's grid of segment
counts x MIN_LAUNCH_GRID_SIZE_2D), against a plain per-step loop measured in the same run.

The workload: 100,000 steps drawn (seeded) from the steady-state steps of the four presets, as a step
log of a mixed deployment would repeat them; tune evaluates each distinct shape once. The plain loop
plans and times every step under every candidate from scratch (launcher + time model, no reuse); it
runs on the first ``--loop-steps`` steps and is scaled to 100,000 (it is linear in the steps), and its
totals on those steps are checked against tune's. Run on one core:

    taskset -c 0 python benchmarks/bench_tune.py [--out benchmarks/results/bench_tune.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time

from decodecalc.launchers.vllm_unified import VllmSettings, plan_vllm
from decodecalc.reports.tune import VLLM_MIN_GRID, VLLM_SEGMENTS, make_context, tune_engine
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.timemodel import launch_time_s, resolve_profile, work_for_plan
from decodecalc.traffic import PRESETS, StepTrace, generate
from decodecalc.workload import make_workload


def distinct_workload(n: int) -> StepTrace:
    """n steps of the chat preset's continuous batching: nearly every step a distinct shape."""
    return generate(PRESETS["chat"], steps=n)


def workload(n: int, seed: int = 1) -> StepTrace:
    library = [s for name in sorted(PRESETS) for s in generate(PRESETS[name]).steps]
    rng = random.Random(seed)
    steps = tuple(dataclasses.replace(rng.choice(library), origin=f"bench step {k}") for k in range(n))
    return StepTrace(steps=steps, source=f"{n:,} steps drawn from the presets' steady-state steps")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--loop-steps", type=int, default=200)
    ap.add_argument("--out")
    ap.add_argument("--distinct", action="store_true", help="a continuous-batching trace (every step distinct): tune "
                    "samples --max-shapes of them")
    args = ap.parse_args()
    model = resolve_model("llama3.1-8b")
    gpu = resolve_gpu("h200")
    profile = resolve_profile(gpu)
    work = make_workload(model)
    t0 = time.perf_counter()
    trace = distinct_workload(args.steps) if args.distinct else workload(args.steps)
    t_build = time.perf_counter() - t0

    t0 = time.perf_counter()
    ctx = make_context(trace, work, gpu, profile)
    res = tune_engine(ctx, "vllm", "mean", 0.05)
    t_tune = time.perf_counter() - t0
    ncand = len(res.candidates)

    sub = StepTrace(steps=trace.steps[:args.loop_steps], source="subset")
    settings = [dataclasses.replace(VllmSettings(), num_par_softmax_segments=s, min_launch_grid_size_2d=m)
                for s in VLLM_SEGMENTS for m in VLLM_MIN_GRID]
    t0 = time.perf_counter()
    loop_totals = []
    for st in settings:
        total = 0.0
        for s in sub.steps:
            w = dataclasses.replace(work, seq_lens=s.seq_lens, query_lens=s.query_lens)
            vp = plan_vllm(w, gpu, st)
            run = vp.replay.plan if vp.replay is not None else vp.plan
            total += launch_time_s(work_for_plan(run, w, "vllm"), profile) * s.weight
        loop_totals.append(total)
    t_loop_sub = time.perf_counter() - t0
    t_loop = t_loop_sub * args.steps / len(sub.steps)
    # the same subset through tune's path must give the same totals
    sctx = make_context(sub, work, gpu, profile)
    sres = tune_engine(sctx, "vllm", "mean", None)
    by = {tuple(c.setting.values()): c.stats.total_s for c in sres.candidates}
    worst = max(abs(by[(st.num_par_softmax_segments, st.min_launch_grid_size_2d)] / t - 1)
                for st, t in zip(settings, loop_totals))
    out = {"steps": args.steps, "distinct_shapes": ctx.shapes.distinct, "evaluated_shapes": len(ctx.shapes.shapes),
           "sampled": ctx.shapes.sampled, "workload": trace.source, "candidates": ncand,
           "build_workload_s": t_build, "tune_s": t_tune,
           "plain_loop_s_measured": t_loop_sub, "plain_loop_steps": len(sub.steps),
           "plain_loop_s_for_all_steps": t_loop, "speedup": t_loop / t_tune,
           "max_relative_difference_on_subset": worst, "python": sys.version.split()[0]}
    print(f"{args.steps:,} steps ({ctx.shapes.distinct:,} distinct shapes) x {ncand} candidate settings: "
          f"tune {t_tune:.2f} s; plain per-step loop {t_loop_sub:.2f} s for {len(sub.steps)} steps -> "
          f"{t_loop:,.0f} s for all ({t_loop / t_tune:,.0f}x); totals on the subset agree to {worst:.1e}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
