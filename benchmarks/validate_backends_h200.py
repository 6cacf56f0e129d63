"""The shipped H200 profile's backend families against timings no fit saw: a validation run of
benchmarks/capture_backends_h200.py (--validate: batches, lengths and one head configuration of no earlier run),
predicted with decodecalc/profiles/h200.yaml as it ships (no refit).

    python -m benchmarks.validate_backends_h200 [JSONL]   # default: results/validate-backends-h200.jsonl

Prints, per kernel, the runs, the median and 90th percentile of |predicted / measured - 1| and the worst run,
and writes results/validate-backends-h200-summary.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.fit_backends_h200 import measurements_from
from decodecalc.timemodel import launch_time_s, packaged_profile
from decodecalc.timemodel.fit import percentile

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else RESULTS / "validate-backends-h200.jsonl"
    prof = packaged_profile("h200")
    assert prof is not None
    by: dict[str, list[tuple[float, str]]] = {}
    for m in measurements_from([path]):
        err = launch_time_s(m.work, prof) / m.time_s - 1
        s = m.shape
        by.setdefault(m.kernel, []).append((err, f"{s.num_heads}:{s.num_kv_heads} d{s.head_size} B{len(s.seq_lens)} "
                                                 f"L{max(s.seq_lens)}"))
    out = {}
    for k, rows in by.items():
        e = [abs(x) for x, _ in rows]
        worst = max(rows, key=lambda r: abs(r[0]))
        out[k] = {"runs": len(rows), "median_abs_err": round(percentile(e, 0.5), 4),
                  "p90_abs_err": round(percentile(e, 0.9), 4), "worst": round(worst[0], 4), "worst_shape": worst[1]}
        print(f"{k:14s} {len(rows):4d} runs  median {out[k]['median_abs_err']:.1%}  p90 {out[k]['p90_abs_err']:.1%}  "
              f"worst {worst[0]:+.1%} ({worst[1]})")
    (RESULTS / "validate-backends-h200-summary.json").write_text(
        json.dumps({"data": path.name, "profile": "decodecalc/profiles/h200.yaml", "kernels": out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
