"""FlashInfer's CUDA-core decode kernel with 256-thread CTAs: a hypothesis tested on the H200 calibrate run, not
adopted (issue 18: "find the physics that varies with layout").

    python benchmarks/flashinfer_wide_ctas.py [--write]

The kernel's CTA is (bdx, bdy, bdz) = (head_dim / 8, group size, the rest of 128 threads) (launchers.flashinfer
.decode_kernel_tiling), so two layouts of calibrate's plan run 256-thread CTAs: 16:1 d128 (16 x 16 x 1, 71 registers,
3 CTAs per SM) and 16:2 d256 (32 x 8 x 1, 56 registers and 18 KiB shared memory, 4 per SM); the other ten run 128
threads at 9 per SM. One family for all (what ships and what calibrate fits) predicts 16:1 d128 about 40% slow even
in sample (the 405B long-prompt workload's +53% FlashInfer total). Three fits of the bf16 CUDA-core runs of
``results/calibrate-backends-h200-measurements.json.gz``, each from scratch with calibrate's folds of head layouts
left out (backend_fit.calibrate_backends):

* ``one family``: as shipped;
* ``wide family``: the 256-thread CTAs' launches in a family of their own;
* ``per-warp bandwidth``: one family, a 256-thread CTA streaming at twice a 128-thread one's rate (its SM-side bytes
  per iteration halved, its HBM bytes kept).

``--write`` records the figures in ``results/flashinfer-wide-ctas-h200.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from decodecalc.specs.gpus import resolve_gpu  # noqa: E402
from decodecalc.timemodel import packaged_profile  # noqa: E402
from decodecalc.timemodel.backend_fit import (calibrate_backends, layout_label, layout_of,  # noqa: E402
                                              record_measurements)
from decodecalc.timemodel.predict import launch_time_s  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DATA = RESULTS / "calibrate-backends-h200-measurements.json.gz"
OUT = RESULTS / "flashinfer-wide-ctas-h200.json"
WIDE = ("16:1-d128", "16:2-d256")


def _with_main(m: Any, **changes: Any) -> Any:
    k0 = dataclasses.replace(m.work.kernels[0], **changes)
    return dataclasses.replace(m, work=dataclasses.replace(m.work, kernels=(k0, *m.work.kernels[1:])))


def variants(ms: list[Any], threads: dict[str, int]) -> dict[str, list[Any]]:
    def wide(m: Any) -> bool:
        return threads[layout_label(layout_of(m))] > 128

    return {"one family": ms,
            "wide family": [_with_main(m, family="flashinfer_decode_wide") if wide(m) else m for m in ms],
            "per-warp bandwidth": [_with_main(m, bytes_per_iter=m.work.kernels[0].bytes_per_iter // 2,
                                              hbm_bytes_per_iter=m.work.kernels[0].bytes_per_iter) if wide(m) else m
                                   for m in ms]}


def run() -> dict[str, Any]:
    data = json.loads(gzip.open(DATA, "rt").read())
    recs = [r for r in data["backend_cases"] if r["backend"] == "flashinfer" and r["shape"]["kv_cache_dtype"] == "bfloat16"]
    threads = {}
    for r in recs:
        for x in r["launches"]:
            if x["role"] == "main":
                threads[r["shape"]["layout"]] = x["block"][0] * x["block"][1] * x["block"][2]
    ms = record_measurements(recs, resolve_gpu("h200"))
    doc: dict[str, Any] = {"threads": threads, "runs": len(ms), "variants": {}}
    for name, rows in variants(ms, threads).items():
        fit = calibrate_backends(rows, packaged_profile("h200"), cold=True, max_evals=600, restarts=1, folds=3)
        signed = {}
        for lay in sorted({layout_label(layout_of(m)) for m in rows}):
            e = [launch_time_s(m.work, fit.profile) / m.time_s - 1 for m in rows if layout_label(layout_of(m)) == lay]
            signed[lay] = round(statistics.median(e), 4)
        doc["variants"][name] = {"families": {f: {"rows": r["rows"], "left_out": r["left_out"],
                                                  "training": r["training"]} for f, r in fit.families.items()},
                                 "in_sample_signed_median_by_layout": signed}
        print(name, {f: (r["left_out"]["median_abs_err"], r["left_out"]["p90_abs_err"]) for f, r in fit.families.items()},
              {k: f"{v:+.1%}" for k, v in signed.items() if k in WIDE}, flush=True)
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true")
    doc = run()
    if ap.parse_args().write:
        OUT.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
