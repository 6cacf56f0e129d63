"""How vLLM 0.33.0's split-KV kernel fills an SM: the 3D launch timed at a fixed per-program work while its
program count grows one batch at a time, and the registers / shared memory of every compiled specialization
of ``kernel_unified_attention`` and ``reduce_segments`` (what sets their resident programs per SM).

    tools/fetch_upstream.sh
    python -m benchmarks.probe_vllm_waves_h200 --out benchmarks/results/timemodel-h200-probe-waves.json

Each row: one (h, h_kv, d, batch, segments, length) launch of ``unified_attention`` (3D: segments > 1), timed
as the other H200 scripts time (decodecalc.verify.timing: a CUDA graph over rotating KV copies, median of
replays). Every program of a row reads the same number of KV tiles, so the time over the program count shows
the waves and the cost of one more resident program per SM. The rows have the fields of the other
benchmarks/results/timemodel-h200-*.json files, which fit_timemodel.py reads; it also takes the 3D kernel's
occupancy per head dim from ``specializations`` (``compiled_occupancy``).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from benchmarks.measure_splits_h200 import compiled_resources

ROOT = Path(__file__).resolve().parents[1]

#: (h, h_kv, d, segments, length, batches): every program reads length / (segments * 16) tiles of 16 tokens
SERIES = (
    (32, 8, 128, 8, 4096, tuple(range(1, 41))),  # 64 .. 2560 programs, 32 tiles each
    (8, 1, 128, 8, 4096, tuple(range(8, 321, 8))),  # 64 .. 2560 programs
    (32, 8, 128, 16, 8192, (2, 4, 6, 8, 10, 12, 16, 20)),
    (16, 2, 256, 8, 4096, tuple(range(4, 121, 4))),
    (20, 4, 64, 8, 4096, tuple(range(2, 81, 2))),
)
ROTATE_BYTES = 256 << 20


def constexprs(key: str) -> list[str]:
    import re

    return re.findall(r"\('constexpr', ([^)]*)\)", key)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=400.0)
    args = ap.parse_args()

    import torch

    from decodecalc.verify import engine
    from decodecalc.verify.kv_cache import build_paged_kv
    from decodecalc.verify.timing import graph_seconds
    from decodecalc.verify.upstream import load_vllm

    dev = "cuda"
    cap = torch.cuda.get_device_capability()
    vk = load_vllm(None, capability=cap, interpret=False)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    t0 = time.time()
    rows = []
    for h, h_kv, d, S, L, batches in SERIES:
        bmax = max(batches)
        per_copy = bmax * L * h_kv * d * 2 * 2
        copies = max(1, min(64, math.ceil(ROTATE_BYTES / (min(batches) * L * h_kv * d * 4))))
        copies = max(1, min(copies, int(40e9 // per_copy)))
        gen = torch.Generator(device=dev)
        gen.manual_seed(0)
        kv = build_paged_kv(gen, seq_lens=[L] * bmax, num_kv_heads=h_kv, head_size=d, block_size=16,
                            dtype=torch.bfloat16, device=dev, copies=copies)
        d_pad = 1 << (d - 1).bit_length()
        for b in batches:
            if time.time() - t0 > args.budget_s:
                break
            q = torch.randn((b, h, d), generator=gen, device=dev, dtype=torch.bfloat16)
            out = torch.empty_like(q)
            sl = torch.full((b,), L, dtype=torch.int32, device=dev)
            cu = torch.arange(b + 1, dtype=torch.int32, device=dev)
            so = torch.empty((b, h, S, d_pad), device=dev, dtype=torch.float32)
            sm = torch.empty((b, h, S), device=dev, dtype=torch.float32)
            se = torch.empty((b, h, S), device=dev, dtype=torch.float32)
            tabs = [kv.block_tables[c][:b].contiguous() for c in range(copies)]
            n_copies = max(1, min(copies, math.ceil(ROTATE_BYTES / (b * L * h_kv * d * 4))))

            def call(c: int, q=q, out=out, sl=sl, cu=cu, so=so, sm=sm, se=se, tabs=tabs) -> None:
                engine.vllm_unified_attention(
                    vk, q=q, k=kv.k_cache, v=kv.v_cache, out=out, cu_seqlens_q=cu, max_seqlen_q=1, seqused_k=sl,
                    max_seqlen_k=L, block_table=tabs[c % len(tabs)], softmax_scale=1.0 / math.sqrt(d),
                    seq_threshold_3D=1 << 20, num_par_softmax_segments=S, softmax_segm_output=so,
                    softmax_segm_max=sm, softmax_segm_expsum=se)

            t = graph_seconds(call, n_copies, what="probe")
            rows.append({"model": f"{h}:{h_kv}-d{d}", "num_q_heads": h, "num_kv_heads": h_kv, "head_dim": d,
                         "batch": b, "seq_len": L, "variant": f"vllm-3d-S{S}", "status": "ok",
                         "t_us": round(t * 1e6, 3), "programs": b * h_kv * S, "copies": n_copies})
            print(f"{h}:{h_kv} d{d} S{S} L{L} B{b}: {b * h_kv * S} programs, {t * 1e6:.1f} us", flush=True)
        del kv
        torch.cuda.empty_cache()
    res = {}
    for name in ("kernel_unified_attention", "reduce_segments"):  # the JIT functions of the loaded module
        fn = getattr(vk.module, name, None)
        specs = compiled_resources(fn) if fn is not None else {}
        res[name] = [{"constexprs": constexprs(k), **v} for k, v in specs.items()]
    out = {"env": {"sm_count": sms, "device": torch.cuda.get_device_name(0), "torch": torch.__version__},
           "method": "CUDA graph over rotating KV copies (>= 256 MiB), median of replays; uniform lengths",
           "cases": rows, "specializations": res, "elapsed_s": round(time.time() - t0, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}: {len(rows)} rows in {out['elapsed_s']} s")
    for name, specs in res.items():
        for s in specs:
            print(name, s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
