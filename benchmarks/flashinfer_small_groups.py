"""FlashInfer on the small GQA groups SGLang runs on its CUDA cores, scored on head layouts no fit saw (issue 18).

    python -m benchmarks.flashinfer_small_groups [--write]

Data: ``results/flashinfer-small-groups-h200.jsonl.gz`` (``measure_flashinfer_ctas_h200.py --set small-groups``,
H200, 2026-12-04, 144 s): FlashInfer 0.7.2.post1's CUDA-core and tensor-core decode on six per-rank layouts of group 1
and 2 (32:32, 16:16, 32:16, 16:8, 8:4 at d128; 16:16 at d64), none in any FlashInfer fit (the bf16 fit's layouts are
32:8, 8:1, 64:8, 16:2, 32:8 d64, 16:8 d256 and 28:4; calibrate's and the fp8 fit's have group 2 only at d256);
calibrate's twelve batches and twelve chat-like steps, bf16 and e4m3 KV. The shipped profile predicts each run
(physics only: the backends have no residual map; back to back), and the record keeps the same scores under the
profile and code of commit 423b818 (``before``: the CUDA-core step cost before 2026-12-04). ``--write`` records the
scores in ``results/flashinfer-small-groups-h200.json``; ``tests/test_backends_workload.py`` recomputes them and checks
BENCHMARKS.md's table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path
from typing import Any

from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import packaged_profile
from decodecalc.timemodel.backend_fit import layout_label, layout_of, main_family
from decodecalc.timemodel.fit import percentile
from decodecalc.timemodel.predict import launch_time_s
from decodecalc.verify.backend_calibration import record_measurements

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
DATA = RESULTS / "flashinfer-small-groups-h200.jsonl.gz"
OUT = RESULTS / "flashinfer-small-groups-h200.json"


def score(profile: Any = None) -> dict[str, Any]:
    """Per family (the path and KV dtype), median / p90 of |predicted / measured - 1| and each layout's signed median;
    and how many runs the plan reproduced."""
    with gzip.open(DATA, "rt") as f:
        recs = [json.loads(x) for x in f]
    ms = record_measurements(recs, resolve_gpu("h200"))
    profile = profile or packaged_profile("h200")
    by: dict[str, dict[str, list[float]]] = {}
    for m in ms:
        by.setdefault(main_family(m), {}).setdefault(layout_label(layout_of(m)), []).append(
            launch_time_s(m.work, profile) / m.time_s - 1)
    fams = {}
    for fam, lays in sorted(by.items()):
        a = sorted(abs(e) for v in lays.values() for e in v)
        fams[fam] = {"runs": len(a), "median_abs_err": round(percentile(a, 0.5), 4),
                     "p90_abs_err": round(percentile(a, 0.9), 4),
                     "signed_median": {k: round(statistics.median(v), 4) for k, v in sorted(lays.items())}}
    return {"runs": len(recs), "as_planned": len(ms), "families": fams}


def markdown(doc: dict[str, Any]) -> str:
    layouts = sorted({lay for f in doc["families"].values() for lay in f["signed_median"]})
    lines = ["| family | runs | before (423b818): median / p90 | median / p90 | " + " | ".join(layouts) + " |",
             "|---" * (4 + len(layouts)) + "|"]
    for fam, f in doc["families"].items():
        b = doc["before"]["families"][fam]
        lines.append(f"| `{fam}` | {f['runs']} | {b['median_abs_err']:.1%} / {b['p90_abs_err']:.1%} | "
                     f"{f['median_abs_err']:.1%} / {f['p90_abs_err']:.1%} | "
                     + " | ".join(f"{f['signed_median'][lay]:+.1%}" for lay in layouts) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true")
    doc = {**score(), "before": json.loads(OUT.read_text())["before"]}
    print(markdown(doc))
    if ap.parse_args().write:
        OUT.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
