"""FlashInfer's CUDA-core decode on head layouts that separate its CTA size from its group size and head dim (issue
18; the question of benchmarks/flashinfer_wide_ctas.py: why 16:1 d128 runs as fast per byte as the 128-thread CTAs
and 16:2 d256 does not).

    PYTHONPATH=.:<flashinfer> python3 -m benchmarks.measure_flashinfer_ctas_h200 --out $OUT

The CTA is (head_dim / 8, group size, the rest of 128 threads) (launchers.flashinfer.decode_kernel_tiling): LAYOUTS
holds group 16 at 128 threads (16:1 d64), at 256 (16:1, 32:2, 64:4 d128) and at 512 (16:1 d256); group 8 at 256
(8:1, 16:2, 32:4 d256); group 32 at 256 and 512 (32:1 d64, d128); and 8:1 d128 (128 threads) as the reference.
Each at calibrate's batches (backend_fit.BACKEND_SHAPES, eager and every other one under a CUDA-graph plan), bf16
and fp8 KV back to back, through calibrate's own runner (verify.backend_calibration.run_backend_calibration): the
records are calibrate's saved runs. Writes ``flashinfer-ctas.jsonl``; committed gzip-compressed as
``results/flashinfer-ctas-h200.jsonl.gz``.

``--set small-groups`` times SMALL_GROUP_LAYOUTS instead, on both FlashInfer paths and with calibrate's chat-like
steps too (the groups of 1 and 2 that SGLang runs on the CUDA cores, at d128 with 4-32 KV heads per rank, which no
FlashInfer fit had: Gemma-3-27B's 32:16 among them), into ``flashinfer-small-groups.jsonl``
(``results/flashinfer-small-groups-h200.jsonl.gz``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel.backend_fit import backend_plan
from decodecalc.verify.backend_calibration import run_backend_calibration

ROOT = Path(__file__).resolve().parents[1]

LAYOUTS = [(16, 1, 64), (16, 1, 128), (32, 2, 128), (64, 4, 128), (16, 1, 256), (8, 1, 256), (16, 2, 256),
           (32, 4, 256), (32, 1, 64), (32, 1, 128), (8, 1, 128)]
#: groups of 1 and 2 (MHA and Gemma-style GQA) at d128 and one at d64: (query heads, KV heads, head dim) per rank
SMALL_GROUP_LAYOUTS = [(32, 32, 128), (16, 16, 128), (32, 16, 128), (16, 8, 128), (8, 4, 128), (16, 16, 64)]
#: --set: (layouts, backends, with the chat-like steps, the file written)
SETS = {"ctas": (LAYOUTS, ["flashinfer"], False, "flashinfer-ctas.jsonl"),
        "small-groups": (SMALL_GROUP_LAYOUTS, ["flashinfer", "flashinfer-tc"], True, "flashinfer-small-groups.jsonl")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--set", choices=sorted(SETS), default="ctas")
    args = ap.parse_args()
    t0 = time.time()
    layouts, backends, short, name = SETS[args.set]
    plan = backend_plan(backends, layouts, short=short, tag=args.set)
    recs = run_backend_calibration(resolve_gpu("h200"), backends, plan=plan,
                                   progress=lambda i, n, what: print(f"{time.time() - t0:5.0f}s {i}/{n} {what}",
                                                                     flush=True) if i % 50 == 0 else None)
    path = Path(args.out) / name
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    print(f"{len(recs)} runs, {sum('error' in r for r in recs)} failed, {time.time() - t0:.0f} s -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
