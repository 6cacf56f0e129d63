"""Leave one head layout out of calibrate --thorough's 550 H200 timings: does the interleaved-row cost and stream exponent
(decodecalc.timemodel.work.kv_runs_per_iter, FamilyParams.run_s / stream_exponent) predict a layout no fit saw better
than the physics without them?

    python -m benchmarks.leaveout_thorough [--kernels sglang,vllm] [--out benchmarks/results/leaveout-thorough-h200.json]

For each engine's kernel and each of the ten layouts, the engine's families are fitted from the same start (the
shipped occupancy, every continuous parameter at the fit's default: nothing fitted to a timing) on the other nine
layouts, once without the terms ("base") and once with them ("runs"), and scored on the left-out layout (median and
p90 of |log error|: the physics alone, no residual map). About 3 minutes per kernel on one core.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path


from decodecalc.timemodel import packaged_profile
from decodecalc.timemodel.fit import DEFAULT_FAMILY, fit_profile, log_errors, measurements_from_rows

ROOT = Path(__file__).resolve().parents[1]

DATA = ROOT / "benchmarks" / "results" / "calibrate-h200-thorough-measurements.json"


def layout(m) -> str:  # type: ignore[no-untyped-def]
    return f"{m.shape.num_heads}:{m.shape.num_kv_heads} d{m.shape.head_size}"


def p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.9 * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernels", default="sglang,vllm")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "leaveout-thorough-h200.json")
    args = ap.parse_args()
    shipped = packaged_profile("h200")
    assert shipped is not None
    rows = json.loads(DATA.read_text())["cases"]
    out: dict = {"data": DATA.name, "folds": []}
    for kernel in args.kernels.split(","):
        ms = [m for m in measurements_from_rows(rows, num_sms=132) if m.kernel == kernel]
        fams = {k.family for m in ms for k in m.work.kernels}
        neutral = {k: v for k, v in DEFAULT_FAMILY.items() if k != "max_programs_per_sm"}
        start = dataclasses.replace(shipped, residuals=None, families={
            f: dataclasses.replace(p, run_s=0.0, stream_exponent=1.0, **neutral) if f in fams else p
            for f, p in shipped.families.items()})
        for left in sorted({layout(m) for m in ms}):
            train = [m for m in ms if layout(m) != left]
            test = [m for m in ms if layout(m) == left]
            fold = {"kernel": kernel, "left_out": left, "rows": len(test)}
            for arm, run_kernels in (("base", ()), ("runs", (kernel,))):
                prof = fit_profile(train, start, restarts=1, max_evals=1500, search_occupancy=False, fit_globals=False,
                                   run_kernels=run_kernels)
                e = [abs(x) for x in log_errors(prof, test)]
                fold[arm] = {"median": round(statistics.median(e), 4), "p90": round(p90(e), 4),
                             "train_median": round(statistics.median(abs(x) for x in log_errors(prof, train)), 4)}
            out["folds"].append(fold)
            print(f"{kernel:7s} {left:12s} base {fold['base']['median']:.1%} / {fold['base']['p90']:.1%}   "
                  f"runs {fold['runs']['median']:.1%} / {fold['runs']['p90']:.1%}", flush=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
