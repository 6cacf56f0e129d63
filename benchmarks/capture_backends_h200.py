"""Capture the default backends' launches on an H200 and time them: FlashInfer (CUDA-core and
tensor-core decode), vLLM's FA3 and vLLM's FlashMLA (decodecalc.verify.profiler).

For the worked examples of upstream-launchers.md section 2 and >= 100 further shapes (model head
configurations x batch x lengths, bf16, page 16; FlashMLA page 64), each backend's decode step is
run once under torch.profiler (every kernel's name, grid, block, registers per thread), timed under
CUDA graphs (decodecalc.verify.timing), and compared with decodecalc's model
(decodecalc.reports.compare.evaluate with the matching options: eager plan / CUDA-graph plan).

Run on the device machine (see BENCHMARKS.md for the command); writes JSON lines to --out and a
summary JSON; prints a short table last. A time guard stops starting new cases near --budget-s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.workload import make_workload

#: (model, tp): head configurations (h, h_kv, d) = (32,8,128) (8,1,128) (64,8,128) (16,2,128) (32,8,64) (16,8,256)
HEAD_CONFIGS = [("llama3-8b", 1), ("llama3-70b", 8), ("llama3-70b", 1), ("llama3-70b", 4), ("llama3.2-1b", 1),
                ("gemma-2-9b", 1)]
BATCHES = [1, 4, 16, 64, 256]
LENGTHS = [512, 2560, 8192, 32768, 131072]
MAX_TOKENS = 2_200_000
MLA_CONFIGS = [("deepseek-v3", 1), ("deepseek-v2-lite", 1)]
MLA_BATCHES = [1, 8, 32, 128]
MLA_LENGTHS = [1024, 4096, 16384, 65536]
#: second FlashMLA run (--mla-run 2): DeepSeek-V3 at 128 / 64 / 32 / 16 query heads (TP 1 / 2 / 4 / 8) and
#: DeepSeek-V2-Lite at 16 / 8 (TP 1 / 2), uniform batches and ragged ones; none of them repeats a run-1 shape
MLA_CONFIGS_2 = [("deepseek-v3", 1), ("deepseek-v3", 2), ("deepseek-v3", 4), ("deepseek-v3", 8),
                 ("deepseek-v2-lite", 1), ("deepseek-v2-lite", 2)]
MLA_BATCHES_2 = [1, 3, 8, 16, 32, 64, 128, 256]
MLA_LENGTHS_2 = [512, 2048, 8192, 32768, 131072]
MLA_MAX_TOKENS_2 = 4_200_000


def worked_examples() -> list[dict]:
    """upstream-launchers.md section 2: one request of 2,560 tokens (2.1, 2.2) and the batch sweep (2.3)."""
    ex = [{"model": "llama3-8b", "tp": 1, "seq_lens": [2560], "tag": "worked-2.1"},
          {"model": "llama3-70b", "tp": 8, "seq_lens": [2560], "tag": "worked-2.2"}]
    ex += [{"model": "llama3-8b", "tp": 1, "seq_lens": [2560] * b, "tag": "worked-2.3"} for b in (8, 13, 14, 16)]
    ex.append({"model": "llama3-70b", "tp": 8, "seq_lens": [131072], "tag": "reference-correction"})
    return ex


def uniform_grid(configs: list[tuple[str, int]], batches: list[int], lengths: list[int], max_tokens: int,
                 tag: str) -> list[dict]:
    """Uniform batches of every (model, TP) x batch x length with at most ``max_tokens`` KV tokens."""
    return [{"model": m, "tp": tp, "seq_lens": [L] * b, "tag": tag}
            for m, tp in configs for b in batches for L in lengths if b * L <= max_tokens]


def grid_shapes() -> list[dict]:
    out = uniform_grid(HEAD_CONFIGS, BATCHES, LENGTHS, MAX_TOKENS, "grid")
    # ragged batches: lengths spread over 32x
    for m, tp in HEAD_CONFIGS[:3]:
        for b in (5, 24, 100):
            lens = [256 + (i * 7919) % 8192 for i in range(b)]
            out.append({"model": m, "tp": tp, "seq_lens": lens, "tag": "ragged"})
    out.append({"model": "qwen2.5-7b", "tp": 1, "seq_lens": [2560] * 4, "tag": "group-7"})
    return out


def mla_shapes() -> list[dict]:
    return [{"model": "deepseek-v3", "tp": 1, "seq_lens": [2560], "tag": "worked"}] + \
        uniform_grid(MLA_CONFIGS, MLA_BATCHES, MLA_LENGTHS, MAX_TOKENS, "grid")


def mla_shapes_run2() -> list[dict]:
    """Run 2 of FlashMLA, ordered by a stable hash so that a time-out leaves a spread of configurations."""
    import hashlib

    out = []
    for m, tp in MLA_CONFIGS_2:
        out += uniform_grid([(m, tp)], MLA_BATCHES_2, MLA_LENGTHS_2, MLA_MAX_TOKENS_2, "mla-grid")
        # ragged batches: lengths spread over 64x (and one long request among short ones)
        for b, span in ((4, 65536), (12, 16384), (48, 8192), (96, 4096), (160, 2048)):
            out.append({"model": m, "tp": tp, "seq_lens": [512 + (i * 7919) % span for i in range(b)],
                        "tag": "mla-ragged"})
        out.append({"model": m, "tp": tp, "seq_lens": [131072] + [1024] * 31, "tag": "mla-ragged"})
    return sorted(out, key=lambda s: hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest())


#: a validation run (--validate): shapes of no earlier run, timed against the shipped profile without refitting
#: (benchmarks/validate_backends_h200.py): batches and lengths off the earlier grids, ragged batches, one head
#: configuration no fit saw for tensor cores (Qwen2.5-7B, 28:4)
VALIDATE_CONFIGS = {"flashinfer-tc": [("llama3-8b", 1), ("llama3-70b", 8), ("llama3-70b", 4), ("qwen2.5-7b", 1),
                                      ("llama3.2-1b", 1), ("gemma-2-9b", 1)],
                    "flashinfer": [("llama3-8b", 1), ("llama3-70b", 8), ("llama3-70b", 4)],
                    "flashmla": [("deepseek-v3", 1), ("deepseek-v3", 2), ("deepseek-v3", 8), ("deepseek-v2-lite", 1)]}
VALIDATE_BL = [(2, 3000), (6, 20000), (12, 6000), (48, 1500), (96, 12000), (200, 768), (3, 100000), (24, 40000)]


def validate_shapes(backend: str) -> list[dict]:
    out = []
    for m, tp in VALIDATE_CONFIGS.get(backend, []):
        for b, L in VALIDATE_BL:
            if b * L <= 2_000_000:
                out.append({"model": m, "tp": tp, "seq_lens": [L] * b, "tag": "validate"})
        for b, span in ((7, 30000), (33, 9000)):
            out.append({"model": m, "tp": tp, "seq_lens": [300 + (i * 6151) % span for i in range(b)],
                        "tag": "validate-ragged"})
    return out


#: steps of many short tiles (--short-tiles): continuous batching's chat-like steps, batch 8-96 x contexts 50-800
#: tokens, ragged and uniform, on head layouts none of the backend workload validations use
#: (validate_backends_workload_h200.py: 32:8, 16:8 d256, 16:1, 8:1, 16:4), so those stay unseen
SHORT_TILE_CONFIGS = [("llama3-70b", 1), ("llama3.2-1b", 1), ("qwen2.5-7b", 1), ("mistral-large", 8)]


def short_tile_shapes() -> list[dict]:
    out = []
    for m, tp in SHORT_TILE_CONFIGS:
        for b in (8, 16, 32, 48, 64, 96):
            out.append({"model": m, "tp": tp, "seq_lens": [50 + (i * 7919 + b) % 750 for i in range(b)],
                        "tag": "short-tiles-ragged"})
        for b, L in ((16, 256), (64, 128), (96, 512)):
            out.append({"model": m, "tp": tp, "seq_lens": [L] * b, "tag": "short-tiles"})
    return out


def workload(shape: dict, block: int):
    """A capture record's shape as a Workload (one home: decodecalc.timemodel.backend_fit.shape_workload)."""
    from decodecalc.timemodel.backend_fit import shape_workload

    return shape_workload(shape, block)


#: split sweeps for the time model (several split counts per shape): FA3's num_splits (static bound; the
#: prepare kernel still picks per-sequence splits) and FlashInfer tensor cores' fixed_split_size (pages)
SWEEP_SHAPES = [
    {"model": m, "tp": tp, "seq_lens": [L] * b, "tag": "sweep"}
    for (m, tp) in (("llama3-8b", 1), ("llama3-70b", 8), ("llama3-70b", 1), ("llama3.2-1b", 1), ("gemma-2-9b", 1))
    for (b, L) in ((1, 4096), (1, 32768), (1, 131072), (4, 8192), (8, 2048), (16, 16384), (32, 4096), (64, 1024),
                   (128, 8192))
] + [{"model": "llama3-8b", "tp": 1, "seq_lens": [256 + (i * 7919) % 16384 for i in range(b)], "tag": "sweep-ragged"}
     for b in (6, 40)]
SWEEP_KNOBS = {
    "fa3": [{"num_splits": s} for s in (1, 2, 4, 8, 16, 32, 64, 128)],
    "flashinfer-tc": [{"disable_split_kv": True}] + [{"fixed_split_size": p} for p in (8, 16, 32, 64, 128, 256, 1024)],
}
#: other group sizes of the CUDA-core decode kernel (head dim 128), for the measured occupancy
GROUP_SHAPES = [{"model": "llama3-8b", "tp": 1, "heads": hk, "seq_lens": [L] * b, "tag": "group"}
                for hk in ((32, 32), (16, 8), (24, 8), (48, 8), (64, 4)) for (b, L) in ((1, 32768), (4, 8192))]


def warm_flashinfer_jit() -> None:
    """Compile the FlashInfer decode modules (3 head sizes x 2 paths) in parallel processes first."""
    # run from the repository root, where `python -c` finds the benchmarks package
    code = "from benchmarks.capture_backends_h200 import _warm_one; _warm_one(%r, %d, %r)"
    root = str(Path(__file__).resolve().parents[1])
    procs = []
    for model, tp in (("llama3-8b", 1), ("llama3.2-1b", 1), ("gemma-2-9b", 1)):
        for tc in (False, True):
            procs.append(subprocess.Popen([sys.executable, "-c", code % (model, tp, tc)], cwd=root,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for p in procs:
        out, _ = p.communicate()
        if p.returncode:
            print("warm-up failed:", out[-2000:], flush=True)


def _warm_one(model: str, tp: int, tc: bool) -> None:
    from decodecalc.verify.backend_steps import flashinfer_step

    w = make_workload(resolve_model(model), tp=tp, seq_lens=(2560,), block_size=16)
    flashinfer_step(w, tensor_cores=tc, copies=1).run(0)
    import torch

    torch.cuda.synchronize()


def summarize_occupancy(rec: dict) -> None:
    from decodecalc.verify.profiler import ctas_per_sm

    for x in rec.get("launches", []):
        if x.get("registers_per_thread") and x.get("block"):
            threads = 1
            for v in x["block"]:
                threads *= v
            x["ctas_per_sm_computed"] = ctas_per_sm(threads, x["registers_per_thread"], x.get("shared_memory_bytes") or 0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget-s", type=float, default=480.0)
    ap.add_argument("--backends", default="flashinfer,flashinfer-tc,fa3,flashmla")
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--no-warm", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="split sweeps for the time model and other group sizes")
    ap.add_argument("--kv-cache-dtype", default="auto", help="with --sweep: the KV cache of the swept shapes (fp8: "
                    "writes sweep-fp8.jsonl)")
    ap.add_argument("--mla-run", type=int, default=1, choices=(1, 2), help="FlashMLA shape list: run 1 or run 2")
    ap.add_argument("--validate", action="store_true", help="the validation shapes (VALIDATE_CONFIGS) instead")
    ap.add_argument("--short-tiles", action="store_true", help="steps of many short tiles (SHORT_TILE_CONFIGS), "
                    "CUDA-graph plans, instead")
    args = ap.parse_args()
    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from decodecalc.verify import backend_steps as S
    from decodecalc.verify import profiler as P

    gpu = resolve_gpu("h200")
    import torch

    env = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
           "sms": torch.cuda.get_device_properties(0).multi_processor_count}
    backends = [b for b in args.backends.split(",") if b]
    avail = {b: P.missing_backend(b) for b in backends}
    print("environment", env, "missing:", avail, flush=True)
    if not args.no_warm and any(b.startswith("flashinfer") and avail[b] is None for b in backends):
        warm_flashinfer_jit()
        print(f"flashinfer JIT warm-up done at {time.time() - t0:.0f}s", flush=True)
    plan = []
    if args.sweep:
        for b in backends:
            if b == "flashinfer":
                plan += [(b, sh, False, None) for sh in GROUP_SHAPES]
            for kn in SWEEP_KNOBS.get(b, []):
                plan += [(b, sh if args.kv_cache_dtype == "auto" else {**sh, "kv_cache_dtype": args.kv_cache_dtype},
                          False, kn) for sh in SWEEP_SHAPES]
    for b in (backends if args.short_tiles else []):
        plan += [(b, sh, True, None) for sh in short_tile_shapes()]
    for b in ([] if args.sweep or args.short_tiles or not args.validate else backends):
        plan += [(b, sh, False, None) for sh in validate_shapes(b)]
    for b in ([] if args.sweep or args.validate or args.short_tiles else backends):
        if b == "flashmla":
            plan += [(b, s, False, None) for s in (mla_shapes() if args.mla_run == 1 else mla_shapes_run2())]
            continue
        shapes = worked_examples() + grid_shapes()
        plan += [(b, s, False, None) for s in shapes]
        # CUDA-graph plans for the worked examples and a subset of the grid
        plan += [(b, s, True, None) for s in worked_examples() + grid_shapes()[::4]]
    # interleave backends so a time-out leaves every backend with its worked examples and some grid
    by_b: dict[str, list] = {}
    for item in plan:
        by_b.setdefault(item[0], []).append(item)
    order = []
    while any(by_b.values()):
        for b in list(by_b):
            if by_b[b]:
                order.append(by_b[b].pop(0))
    stem = ("sweep" + ("" if args.kv_cache_dtype == "auto" else f"-{args.kv_cache_dtype}") if args.sweep
            else "short-tiles" if args.short_tiles else "captures")
    lines = (out / f"{stem}.jsonl").open("w")
    done = 0
    failed_load: dict[str, str] = {}
    for backend, shape, cg, knobs in order:
        if time.time() - t0 > args.budget_s:
            break
        if avail.get(backend):
            continue
        if backend in failed_load:
            continue
        block = 64 if backend == "flashmla" else 16
        rec = {"shape": shape, "backend": backend, "cuda_graph": cg, "block_size": block}
        if knobs:
            rec["knobs"] = knobs
        try:
            w = workload(shape, block)
            rec.update(S.run_case(backend, w, gpu, cuda_graph=cg, replays=args.replays, knobs=knobs))
            summarize_occupancy(rec)
            occ = [x.get("ctas_per_sm_computed") for x in rec.get("launches", []) if x.get("role") == "main"]
            if backend == "flashinfer" and occ and occ[0] and not knobs:
                alt = P.predict_and_compare(backend, w, gpu, [P.ProfiledLaunch(**{k: (tuple(v) if k in ("grid", "block") else v)
                                                                                for k, v in x.items() if not k.startswith("ctas_per_sm")})
                                                              for x in rec["launches"]], cuda_graph=cg, occupancy=occ[0])
                rec["with_measured_occupancy"] = {"occupancy": occ[0], "match": alt.get("match"),
                                                  "kernels": alt.get("kernels")}
        except Exception as exc:  # record and go on: one failing shape must not end the capture
            rec["error"] = f"{type(exc).__name__}: {str(exc)[:600]}"
            if backend in ("fa3", "flashmla") and ("undefined symbol" in str(exc) or "load_library" in str(exc)
                                                   or "OSError" in rec["error"]):
                failed_load[backend] = rec["error"]
        try:
            import torch as _t

            _t.cuda.synchronize()
            _t.cuda.empty_cache()
        except Exception as exc:
            rec["error_after"] = str(exc)[:300]
            lines.write(json.dumps(rec) + "\n")
            break
        lines.write(json.dumps(rec) + "\n")
        lines.flush()
        done += 1
        m = rec.get("match")
        t = (rec.get("timing") or {}).get("t_us")
        print(f"{time.time() - t0:6.0f}s {backend:13s} cg={int(cg)} {shape['model']:12s} tp{shape['tp']} "
              f"B={len(shape['seq_lens']):4d} L={max(shape['seq_lens']):6d} match={m} "
              f"t={t if t is None else round(t, 2)} {knobs or ''} {rec.get('error', '')[:160]}", flush=True)
    lines.close()
    summary: dict = {"environment": env, "missing": avail, "failed_load": failed_load, "elapsed_s": time.time() - t0,
                     "cases": done, "per_backend": {}}
    with (out / f"{stem}.jsonl").open() as fh:
        recs = [json.loads(x) for x in fh]
    for b in backends:
        rs = [r for r in recs if r["backend"] == b]
        ok = [r for r in rs if r.get("match") is True]
        comp = [r for r in rs if r.get("match") is not None]
        summary["per_backend"][b] = {"cases": len(rs), "compared": len(comp), "matched": len(ok),
                                     "errors": sum(1 for r in rs if "error" in r)}
    (out / f"{stem}-summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary["per_backend"]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
