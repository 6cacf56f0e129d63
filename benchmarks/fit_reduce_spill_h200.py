#!/usr/bin/env python3
"""Fit the ``vllm_reduce_spill`` family: vLLM's ``reduce_segments`` past its register tile, on the H200.

Above 256 segments at head size 128 (REDUCE_REGISTER_TILE, decodecalc/timemodel/work.py) the compiled
``reduce_segments`` holds its (NUM_SEGMENTS_PER_SEQ, HEAD_SIZE_PADDED) fp32 tile in local memory (32 registers, 1,100
to 6,300 spills: Triton 3.6), and it costs 8-15x what the registers' family predicts. Its own family times one
program as ``program_overhead + latency + tile_bytes / program_bandwidth + c x tile_bytes / sm_bandwidth`` (``c``
programs resident on the SM): the same four numbers as every family, fitted here (Nelder-Mead on the log error,
decodecalc.timemodel.fit) to the reduce kernel's device time per call that ``probe_split_range_h200.py`` measured
(CUPTI, ``kernel_us``) at 512-4,096 segments, batch 4 (32K tokens) and 16 (2K tokens), Llama-3.1-8B's 32 heads.
Held out: the 3D launches at 512-4,096 segments of validate_tune_h200_range1.json (workload totals).

    python -m benchmarks.fit_reduce_spill_h200 [--write]   # --write: into decodecalc/profiles/h200.yaml
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

from decodecalc.derived import next_power_of_2
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import resolve_profile
from decodecalc.timemodel.fit import nelder_mead
from decodecalc.timemodel.predict import kernel_time_s
from decodecalc.timemodel.recipe import SPILL_HI, SPILL_KEYS, SPILL_LO, SPILL_START
from decodecalc.timemodel.work import REDUCE_SPILL_FAMILY, KernelWork, reduce_segments_kernel

ROOT = Path(__file__).resolve().parents[1]

RESULTS = Path(__file__).resolve().parent / "results"
#: the probe runs (probe_split_range_h200.py --only vllm at Llama-3.1-8B's 32:8 and Llama-3.1-70B TP8's 8:1 heads)
PROBES = ("probe_vllm_B4_L32k.json", "probe_vllm_B16_L2k.json", "probe_reduce_h*_B*.json")
HEAD_DIM = 128
FAMILY = REDUCE_SPILL_FAMILY


def points() -> list[tuple[int, int, float]]:
    """(programs, segments, measured reduce seconds) of every spilled probe case."""
    out = []
    for pattern in PROBES:
        for path in sorted(RESULTS.glob(pattern)):
            doc = json.loads(path.read_text())
            programs = doc["shape"]["batch"] * doc["shape"]["num_heads"]
            for r in doc["cases"]:
                if r.get("status") != "ok" or "kernel_us" not in r:
                    continue
                fam, _, _ = reduce_segments_kernel(r["segments"], next_power_of_2(HEAD_DIM))
                if fam != FAMILY:
                    continue
                t = sum(v for k, v in r["kernel_us"].items() if "reduce" in k) * 1e-6
                out.append((programs, r["segments"], t))
    return sorted(set(out))


def predict(params: dict, programs: int, segments: int, base) -> float:
    fam, b, occ = reduce_segments_kernel(segments, next_power_of_2(HEAD_DIM))
    kw = KernelWork(family=fam, iters=((1, programs),), bytes_per_iter=b, head_dim=next_power_of_2(HEAD_DIM),
                    occupancy=occ)
    fp = dataclasses.replace(base.family("vllm_reduce"), idle_program_s=0.0, **params)
    return kernel_time_s(kw, fp, base.num_sms, base.idle_program_s, base.hbm_bandwidth_bytes_per_s)


KEYS = SPILL_KEYS


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true", help="write the fitted family into decodecalc/profiles/h200.yaml")
    args = ap.parse_args()
    base = resolve_profile(resolve_gpu("h200"))
    pts = points()
    if len(pts) < len(KEYS):
        raise SystemExit(f"{len(pts)} spilled probe cases in {RESULTS}: run probe_split_range_h200.py first")

    def unpack(x: list[float]) -> dict:
        # within what a profile accepts (a term the data does not need runs to its bound: no cost)
        return {k: min(SPILL_HI.get(k, math.inf), max(SPILL_LO.get(k, 0.0), math.exp(v))) for k, v in zip(KEYS, x)}

    def loss(x: list[float]) -> float:
        p = unpack(x)
        return sum(math.log(predict(p, n, s, base) / t) ** 2 for n, s, t in pts) / len(pts)

    x0 = [math.log(v) for v in SPILL_START]
    best, val = nelder_mead(loss, x0, step=0.5, max_evals=6000)
    params = unpack(best)
    print(f"{FAMILY}: " + ", ".join(f"{k} {v:.4g}" for k, v in params.items()) + f"  (rms log error {val ** 0.5:.3f})")
    for n, s, t in pts:
        p = predict(params, n, s, base)
        print(f"  {n:4d} programs, {s:5d} segments: measured {t * 1e6:7.1f} us, fitted {p * 1e6:7.1f} us "
              f"({p / t - 1:+.1%})")
    if args.write:
        from decodecalc.timemodel import FamilyParams
        from tools.update_profile_cache import as_written, write

        prof = as_written(ROOT / "decodecalc" / "profiles" / "h200.yaml")
        # 11 significant digits: the precision this family has been written with, so that a re-run keeps the bytes
        fam = FamilyParams(**{k: float(f"{params[k]:.10e}") for k in KEYS}, max_programs_per_sm=16)
        print(f"wrote {write(Path(prof.path), dataclasses.replace(prof, families={**prof.families, FAMILY: fam}))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
