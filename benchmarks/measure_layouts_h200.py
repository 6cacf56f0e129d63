"""Time vLLM's and SGLang's decode kernels on head layouts no time-model fit has seen, and SGLang with its KV slots
scattered one token at a time (the test of the run cost, decodecalc.timemodel.work.kv_runs_per_iter).

    python -m benchmarks.measure_layouts_h200 [--out benchmarks/results/layouts-h200-unseen.json] [--dry]

Each layout (per rank) is timed at calibrate --thorough's five batches and eleven split counts
(decodecalc.timemodel.calibration_fit.THOROUGH_BATCHES / THOROUGH_VARIANTS) with calibrate's own bench
(decodecalc.verify.calibration.ShapeBench: CUDA-graph replay over rotating KV copies, 16-token blocks in a random
order). The rows have calibrate's --save-measurements form, so `decodecalc calibrate --from-measurements` and
decodecalc.timemodel.fit.measurements_from_rows read them. The scattered rows (``"slots": "scattered"``) permute
every copy's token slots at random: no two tokens of a tile adjacent, as in a long-running SGLang token pool.
Run on the device with the upstream sources: python3 -m benchmarks.measure_layouts_h200
(carry upstream/; the sources are found as `decodecalc verify` finds them).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from decodecalc.timemodel.calibration_fit import THOROUGH_BATCHES, THOROUGH_VARIANTS

ROOT = Path(__file__).resolve().parents[1]

#: (h, h_kv, d) per rank that no fit of decodecalc's H200 profile has seen (the fitted ones: 8:1, 32:8, 12:2, 28:4, 40:8,
#: 96:8, 32:32 at d128; 32:8 d96; 20:4 and 8:1 at d64; 16:2 and 8:4 at d256): Llama-3.1-70B TP1, Llama-3-405B TP8,
#: a 32:8 model at TP8, Qwen2.5-7B TP2, Gemma-2-9B TP1, Qwen3-30B-A3B TP1, Llama-3.2-1B TP1, a 40:8 model at TP2
UNSEEN_LAYOUTS = ((64, 8, 128), (16, 1, 128), (4, 1, 128), (14, 2, 128), (16, 8, 256), (32, 4, 128), (32, 8, 64),
                  (20, 4, 128))
#: SGLang with scattered slots: layouts with one and several KV heads, at a latency-bound and a many-program batch
SCATTERED = ((8, 1, 128), (8, 1, 64), (32, 8, 128))
SCATTERED_BATCHES = ((32768,), (8192,) * 4, (2048,) * 64)
SCATTERED_VARIANTS = ("sglang-static-S1", "sglang-static-S16")
#: --group-sweep: group sizes 2-16 at one and two KV heads, one 32K sequence (one program per KV head): which group
#: sizes make SGLang's stage 1 fast (8:1 ran 15% faster an iteration than 16:1 and 4:1)
GROUP_SWEEP = tuple((g * kv, kv, 128) for kv in (1, 2) for g in range(2, 17))
GROUP_SWEEP_VARIANTS = ("sglang-static-S1", "vllm-2d")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "layouts-h200-unseen.json")
    ap.add_argument("--dry", action="store_true", help="list the plan, time nothing")
    ap.add_argument("--group-sweep", action="store_true", help="time GROUP_SWEEP instead")
    args = ap.parse_args()
    if args.group_sweep:
        plan = [((h, kv, d), (32768,), GROUP_SWEEP_VARIANTS, "") for h, kv, d in GROUP_SWEEP]
    else:
        plan = [((h, kv, d), lens, THOROUGH_VARIANTS, "") for h, kv, d in UNSEEN_LAYOUTS for lens in THOROUGH_BATCHES]
        plan += [((h, kv, d), lens, SCATTERED_VARIANTS, "scattered") for h, kv, d in SCATTERED for lens in SCATTERED_BATCHES]
        plan += [((h, kv, d), lens, SCATTERED_VARIANTS, "blocks") for h, kv, d in SCATTERED for lens in SCATTERED_BATCHES]
    print(f"{sum(len(v) for *_, v, _ in plan)} timings of {len(plan)} shapes", flush=True)
    if args.dry:
        return 0
    import torch

    from decodecalc.verify.calibration import ShapeBench, bench_device, timed_row

    props, sms, launch_s, vk, sk = bench_device(torch)
    rows = []
    t0 = time.time()
    for si, ((h, h_kv, d), lens, variants, slots) in enumerate(plan):
        bench = ShapeBench(torch, vk, sk, h, h_kv, d, lens, sms, seed=1000 + si)
        if slots == "scattered":
            gen = torch.Generator(device="cuda")
            gen.manual_seed(si)
            idx = bench.kv.kv_indices
            for c in range(idx.shape[0]):  # every token of the copy on a random slot of the copy's own
                idx[c] = idx[c][torch.randperm(idx.shape[1], generator=gen, device="cuda")]
        for variant in variants:
            rows.append(timed_row(bench, variant, **({"slots": slots} if slots else {})))
        print(f"{si + 1}/{len(plan)} {h}:{h_kv} d{d} B{len(lens)} {slots or ''} {time.time() - t0:.0f} s", flush=True)
        del bench
        torch.cuda.empty_cache()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"gpu": "h200", "num_sms": sms, "launch_overhead_s": launch_s,
                                    "device_name": str(props.name),
                                    "versions": f"vLLM {vk.source.version} and SGLang {sk.source.version}",
                                    "cases": rows}, indent=1) + "\n")
    print(f"wrote {args.out} ({len(rows)} rows, {time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
