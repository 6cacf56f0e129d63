"""Time vLLM's and SGLang's decode kernels with an fp8 KV cache and with 32-token KV blocks, beside the bf16,
16-token launches of the same shapes (issue 18: no fit of decodecalc's H200 profile has seen either format).

    python -m benchmarks.measure_kv_formats_h200 [--out benchmarks/results/kv-formats-h200.json] [--dry]
        [--layouts 0,1,2] [--extra] [--unseen] [--short]

Each layout (per rank) is timed at calibrate --thorough's five batches
(decodecalc.timemodel.calibration_fit.THOROUGH_BATCHES) in four formats:

* ``bfloat16`` KV, block 16: the format every fit measured, timed in the same run as the pairs' baseline;
* ``fp8`` (e4m3) KV, block 16: vLLM gets the query quantized to fp8 with per-tensor descales, as its attention
  layer quantizes it on CUDA; SGLang's stage 1 casts the query to the buffer's dtype itself;
* ``bfloat16`` and ``fp8`` KV with 32-token blocks: vLLM only (SGLang's Triton backend reads token slots, page
  size 1, so its block size is not a launch parameter).

vLLM at 2D and 3D with 4-256 segments, SGLang at 1-128 static splits (calibration_fit.THOROUGH_VARIANTS), with
calibrate's own bench (decodecalc.verify.calibration.ShapeBench: CUDA-graph replay over rotating KV copies, blocks
in a random order). The rows have calibrate's --save-measurements form plus ``kv_cache_dtype`` and ``block_size``,
which decodecalc.timemodel.fit.measurements_from_rows reads.

``--unseen`` times six head layouts that none of the runs above timed in fp8 (and no fit saw: the validation of the
profile's fp8 families, benchmarks/validate_fp8.py), bf16 and fp8 at block 16, both engines, plus SGLang's default
launch: adaptive split counts (max_kv_splits 8, the engine's default, and 64) written by the engine's split-count kernel
before every step, rows ``sglang-adaptive`` with ``max_kv_splits`` and ``num_kv_splits``.

``--short`` times SGLang with an fp8 KV cache on the twelve fitted layouts at four short-context batches (many
sequences of a few hundred to a few thousand tokens, as in a chat workload's steps), static and adaptive: the regime
the thorough batches lack, where whole workloads found the first fp8 family wrong by 15-19% at 8-32 static splits
(benchmarks/results/validate-tune-fp8-h200.json). Training data for benchmarks/leaveout_fp8.py. The file is rewritten after every shape (a run cut off
by the device's time limit keeps what it measured). Run on the device with the upstream sources:
python3 -m benchmarks.measure_kv_formats_h200 (carry upstream/).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from decodecalc.launchers.sglang_triton import DEFAULT_MAX_KV_SPLITS
from decodecalc.timemodel.calibration_fit import THOROUGH_BATCHES, THOROUGH_VARIANTS

ROOT = Path(__file__).resolve().parents[1]

#: (h, h_kv, d) per rank: two layouts every fit saw (8:1 and 32:8 at d128), four none saw (16:2 d128 and 64:8 d128,
#: GQA groups of 8 at 2 and 8 KV heads; 16:8 d256, Gemma-2-9B TP1; 32:4 d64)
LAYOUTS = ((8, 1, 128), (32, 8, 128), (16, 2, 128), (64, 8, 128), (16, 8, 256), (32, 4, 64))
#: --extra: six more layouts, bf16 and fp8 at block 16 only (the fp8 families' leave-one-layout-out fit,
#: benchmarks/leaveout_fp8.py): groups of 16, 4, 8 and 7 at d128, 8 at d64 and d256
EXTRA_LAYOUTS = ((16, 1, 128), (4, 1, 128), (32, 4, 128), (14, 2, 128), (8, 1, 64), (16, 2, 256))
#: --unseen: layouts no fp8 run timed, groups 3, 5, 7, 12, 2 and 4 (Llama-3.2-3B, Qwen2.5-14B, Qwen2.5-7B TP1,
#: Mistral-Large-2 TP8, Gemma-2-9B TP2, Llama-3.2-1B TP1)
UNSEEN_LAYOUTS = ((24, 8, 128), (40, 8, 128), (28, 4, 128), (12, 1, 128), (8, 4, 256), (32, 8, 64))
#: --unseen: SGLang's adaptive launch at these max_kv_splits (the engine's default, launchers.sglang_triton; 64: a
#: tuned setting)
ADAPTIVE_MAX_SPLITS = (DEFAULT_MAX_KV_SPLITS, 64)
#: --short: short-context batches (uniform 8 x 256, 32 x 512, 128 x 1024; 48 ragged sequences of 100-4,000 tokens)
SHORT_BATCHES = ((256,) * 8, (512,) * 32, (1024,) * 128, tuple(100 + (k * 83) % 3900 for k in range(48)))
#: --short: SGLang's static split counts 1-128 (the workloads' candidates)
SHORT_VARIANTS = tuple(f"sglang-static-S{s}" for s in (1, 2, 4, 8, 16, 32, 64, 128))
#: (KV-cache dtype, block size, engines timed)
FORMATS = (("bfloat16", 16, ("vllm", "sglang")), ("fp8", 16, ("vllm", "sglang")), ("bfloat16", 32, ("vllm",)),
           ("fp8", 32, ("vllm",)))


def plan_of(layouts: tuple[tuple[int, int, int], ...], formats: tuple[tuple[str, int, tuple[str, ...]], ...] = FORMATS,
            batches: tuple[tuple[int, ...], ...] = THOROUGH_BATCHES
            ) -> list[tuple[tuple[int, int, int], tuple[int, ...], str, int, tuple[str, ...]]]:
    """(layout, sequence lengths, KV dtype, block size, variants) of every bench the run builds."""
    out = []
    for lay in layouts:
        for lens in batches:
            for kv_dtype, block, engines in formats:
                variants = tuple(v for v in THOROUGH_VARIANTS if v.split("-")[0] in engines)
                out.append((lay, lens, kv_dtype, block, variants))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "benchmarks" / "results"
    ap.add_argument("--out", type=Path, default=out_dir / "kv-formats-h200.json")
    ap.add_argument("--dry", action="store_true", help="list the plan, time nothing")
    ap.add_argument("--layouts", default="", help="comma-separated indices into LAYOUTS (default: all)")
    ap.add_argument("--extra", action="store_true", help="EXTRA_LAYOUTS, bf16 and fp8 at block 16")
    ap.add_argument("--unseen", action="store_true", help="UNSEEN_LAYOUTS, bf16 and fp8 at block 16, SGLang adaptive too")
    ap.add_argument("--short", action="store_true", help="LAYOUTS and EXTRA_LAYOUTS, SGLang fp8 at SHORT_BATCHES")
    args = ap.parse_args()
    if args.short:
        plan = [(lay, lens, kv, block, SHORT_VARIANTS) for lay, lens, kv, block, _ in
                plan_of(LAYOUTS + EXTRA_LAYOUTS, (("fp8", 16, ("sglang",)),), SHORT_BATCHES)]
        if args.out == out_dir / "kv-formats-h200.json":
            args.out = out_dir / "kv-formats-h200-short.json"
    elif args.extra or args.unseen:
        plan = plan_of(UNSEEN_LAYOUTS if args.unseen else EXTRA_LAYOUTS, FORMATS[:2])
        if args.out == out_dir / "kv-formats-h200.json":
            args.out = out_dir / ("kv-formats-h200-unseen.json" if args.unseen else "kv-formats-h200-extra.json")
    else:
        plan = plan_of(tuple(LAYOUTS[int(i)] for i in args.layouts.split(",")) if args.layouts else LAYOUTS)
    adaptive = ADAPTIVE_MAX_SPLITS if args.unseen or args.short else ()
    print(f"{sum(len(v) + len(adaptive) for *_, v in plan)} timings of {len(plan)} benches", flush=True)
    if args.dry:
        return 0
    import torch

    from decodecalc.launchers.sglang_triton import get_num_kv_splits
    from decodecalc.verify.calibration import ShapeBench, bench_device, timed_row

    props, sms, launch_s, vk, sk = bench_device(torch)
    dtypes = {"bfloat16": torch.bfloat16, "fp8": torch.float8_e4m3fn}
    rows: list[dict] = []
    t0 = time.time()

    def write() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps({"gpu": "h200", "num_sms": sms, "launch_overhead_s": launch_s,
                                   "device_name": str(props.name),
                                   "versions": f"vLLM {vk.source.version} and SGLang {sk.source.version}",
                                   "torch": torch.__version__, "cases": rows}, indent=1) + "\n")
        tmp.replace(args.out)

    for si, ((h, h_kv, d), lens, kv_dtype, block, variants) in enumerate(plan):
        bench = ShapeBench(torch, vk, sk, h, h_kv, d, lens, sms, seed=2000 + si, kv_dtype=dtypes[kv_dtype],
                           block_size=block)
        rows += [timed_row(bench, variant, kv_cache_dtype=kv_dtype, block_size=block) for variant in variants]
        for mx in adaptive:  # the engine's default launch; the counts the model assumes are recorded with the row
            n_i = get_num_kv_splits(lens, num_head=h, num_kv_head=h_kv, device_core_count=sms, max_kv_splits=mx)
            launch = {"engine": "sglang", "splits": list(n_i), "max_kv_splits": mx, "adaptive": True}
            rows.append(timed_row(bench, "sglang-adaptive", launch=launch, engine_split_kernel=True,
                                  kv_cache_dtype=kv_dtype, block_size=block, max_kv_splits=mx, num_kv_splits=list(n_i)))
        print(f"{si + 1}/{len(plan)} {h}:{h_kv} d{d} B{len(lens)} {kv_dtype} block {block} {time.time() - t0:.0f} s",
              flush=True)
        del bench
        torch.cuda.empty_cache()
        write()
    write()
    print(f"wrote {args.out} ({len(rows)} rows, {time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
