"""Build FlashAttention-2 (restricted: bf16, head dim 128; benchmarks/build_fa2_h200.py) and capture its
decode launches on the H200: ``flash_attn_with_kvcache`` (``fwd_kvcache``), paged KV with page 256.

For the worked examples of upstream-launchers.md section 2 and >= 100 further head-dim-128 shapes (five
library head configurations and one MHA one x batch x lengths, plus ragged batches), each decode step is
run once under torch.profiler (kernel names, grids, blocks, registers), a subset is timed under CUDA
graphs (decodecalc.verify.timing), and every launch is compared with decodecalc's ``fa2`` model
(decodecalc.reports.compare.evaluate; the split-KV kernel's grid and the combine kernel's grid).

One device call: ``PYTHONUNBUFFERED=1 python3 -m benchmarks.capture_fa2_h200 --out $OUT``
(the sdist unpacked into .fa2-src, carried). ``--prebuilt DIR``: link the CUDA objects compiled
beforehand (``build_fa2_h200.py --objects-into DIR``), compiling only flash_api.cpp there; if that
library does not build or load, the whole build runs there. ``--dry`` prints the build and the shapes.
Writes capture-fa2-h200.jsonl and capture-fa2-h200-summary.json under --out; a failed build writes
the summary with the error. ``--page 16`` runs the same shapes on a contiguous cache (FA2 takes no
page under 256; ``cache_seqlens`` only; file suffix ``-contiguous``); ``--sweep`` sets ``num_splits``
1-128 on 29 shapes, every run timed (``sweep-fa2-h200.jsonl``). A time guard stops starting new cases past --budget-s (build included).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

from benchmarks.build_fa2_h200 import build
from benchmarks.capture_backends_h200 import worked_examples, workload

PAGE = 256  # FA2 takes a paged cache only with page_block_size % 256 == 0 (flash_api.cpp L1264)
#: (model, tp) with head dim 128: (h, h_kv) = (32,8) (8,1) (64,8) (16,2) (28,4); plus MHA (32,32) below
HEAD_CONFIGS = [("llama3-8b", 1, None), ("llama3-70b", 8, None), ("llama3-70b", 1, None), ("llama3-70b", 4, None),
                ("qwen2.5-7b", 1, None), ("llama3-8b", 1, (32, 32))]
BATCHES = [1, 4, 16, 64, 256]
LENGTHS = [512, 2560, 8192, 32768, 131072]
MAX_TOKENS = 2_200_000
TIME_EVERY = 4  # time one grid shape in TIME_EVERY (and every worked example) under CUDA graphs
SWEEP_SPLITS = (1, 2, 4, 8, 16, 32, 64, 128)
SWEEP_SHAPES = [
    {"model": m, "tp": tp, "seq_lens": [L] * b, "tag": "sweep"}
    for (m, tp) in (("llama3-8b", 1), ("llama3-70b", 8), ("llama3-70b", 1))
    for (b, L) in ((1, 4096), (1, 32768), (1, 131072), (4, 8192), (8, 2048), (16, 16384), (32, 4096), (64, 1024),
                   (128, 8192))
] + [{"model": "llama3-8b", "tp": 1, "seq_lens": [256 + (i * 7919) % 16384 for i in range(b)], "tag": "sweep-ragged"}
     for b in (6, 40)]


def shapes() -> list[dict]:
    """Worked examples first, then the grid round-robin over head configurations (a time-out keeps each)."""
    per_cfg: list[list[dict]] = []
    for m, tp, heads in HEAD_CONFIGS:
        rows = []
        for b in BATCHES:
            for L in LENGTHS:
                if b * L <= MAX_TOKENS:
                    rows.append({"model": m, "tp": tp, "seq_lens": [L] * b, "tag": "grid",
                                 **({"heads": list(heads)} if heads else {})})
        if heads is None and len(per_cfg) < 3:  # ragged batches, lengths spread over 32x
            rows += [{"model": m, "tp": tp, "seq_lens": [256 + (i * 7919) % 8192 for i in range(b)], "tag": "ragged"}
                     for b in (5, 24, 100)]
        per_cfg.append(rows)
    grid = []
    while any(per_cfg):
        for rows in per_cfg:
            if rows:
                grid.append(rows.pop(0))
    return worked_examples() + grid


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / ".fa2-src"))
    ap.add_argument("--build-dir", default="/tmp/fa2-build")
    ap.add_argument("--budget-s", type=float, default=380.0)
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--prebuilt", help="folder of CUDA objects from build_fa2_h200.py --objects-into")
    ap.add_argument("--page", type=int, default=PAGE, help="256: paged KV; below 256: a contiguous cache")
    ap.add_argument("--sweep", action="store_true", help="num_splits 1-128 on SWEEP_SHAPES, all timed")
    ap.add_argument("--dry", action="store_true")
    args = ap.parse_args()
    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.sweep:
        todo = [(sh, {"num_splits": n}) for sh in SWEEP_SHAPES for n in SWEEP_SPLITS]
        stem = "sweep-fa2-h200"
    else:
        todo = [(sh, None) for sh in shapes()]
        stem = "capture-fa2-h200" + ("" if args.page % 256 == 0 else "-contiguous")
    summary: dict = {"what": "FlashAttention-2 flash_attn_with_kvcache decode, paged KV page 256, bf16, d=128",
                     "source": "flash-attn 2.8.3.post2 sdist, restricted build (benchmarks/build_fa2_h200.py)"}
    pre = Path(args.prebuilt) if args.prebuilt else None
    if args.dry:
        build(Path(args.src), Path(args.build_dir), dry=True, prebuilt=pre)
        for s, kn in todo:
            print(s["tag"], s["model"], s["tp"], s.get("heads"), len(s["seq_lens"]), max(s["seq_lens"]), kn or "")
        print(len(todo), "shapes")
        return 0
    try:
        try:
            mod, so = build(Path(args.src), Path(args.build_dir), prebuilt=pre)
            summary["objects"] = "prebuilt (nvcc 13.0, elsewhere); flash_api.cpp here" if pre else "built here"
        except Exception as exc:
            if pre is None:
                raise
            print(f"PREBUILT FAILED ({type(exc).__name__}: {str(exc)[-600:]}); building everything here", flush=True)
            summary["prebuilt_error"] = f"{type(exc).__name__}: {str(exc)[-1500:]}"
            mod, so = build(Path(args.src), Path(args.build_dir + "-full"))
            summary["objects"] = "built here (prebuilt objects failed)"
    except BaseException as exc:  # the build's own output went to stdout (the log); record the fact
        summary.update({"built": False, "error": f"{type(exc).__name__}: {str(exc)[-3000:]}",
                        "build_s": time.time() - t0})
        (out / f"{stem}-summary.json").write_text(json.dumps(summary, indent=1))
        print("BUILD FAILED", summary["error"][-2000:], flush=True)
        return 1
    summary.update({"built": True, "build_s": round(time.time() - t0, 1), "so_bytes": Path(so).stat().st_size})
    print(f"built at {time.time() - t0:.0f}s ({summary['so_bytes']} bytes)", flush=True)
    sys.modules["flash_attn_2_cuda"] = mod
    os.environ["DECODECALC_FA2_LIB"] = str(so)
    import torch

    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.verify import backend_steps as S
    from decodecalc.verify import profiler as P

    gpu = resolve_gpu("h200")
    summary["environment"] = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                              "sms": torch.cuda.get_device_properties(0).multi_processor_count,
                              "missing": P.missing_backend("fa2")}
    print(summary["environment"], flush=True)
    recs = []
    with (out / f"{stem}.jsonl").open("w") as lines:
        for i, (shape, knobs) in enumerate(todo):
            if time.time() - t0 > args.budget_s:
                break
            rec: dict = {"shape": shape, "backend": "fa2", "cuda_graph": False, "block_size": args.page}
            timed = shape["tag"] != "grid" or i % TIME_EVERY == 0
            try:
                w = workload(shape, args.page)
                rec.update(S.run_case("fa2", w, gpu, time_it=timed, replays=args.replays, knobs=knobs))
            except Exception as exc:  # one failing shape must not end the capture
                rec["error"] = f"{type(exc).__name__}: {str(exc)[:600]}"
                rec["traceback"] = traceback.format_exc()[-1500:]
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            lines.write(json.dumps(rec) + "\n")
            lines.flush()
            recs.append(rec)
            t = (rec.get("timing") or {}).get("t_us")
            grids = [(x["name"][:40], x["grid"]) for x in rec.get("launches", []) if x.get("role") != "other"]
            print(f"{time.time() - t0:6.0f}s {shape['tag']:8s} {shape['model']:11s} tp{shape['tp']} "
                  f"{shape.get('heads') or ''} {knobs or ''} B={len(shape['seq_lens']):4d} L={max(shape['seq_lens']):6d} "
                  f"match={rec.get('match')} t={t if t is None else round(t, 2)} {grids} {rec.get('error', '')[:300]}",
                  flush=True)
    comp = [r for r in recs if r.get("match") is not None]
    summary.update({
        "elapsed_s": round(time.time() - t0, 1), "cases": len(recs), "compared": len(comp),
        "matched": sum(1 for r in comp if r["match"]), "errors": sum(1 for r in recs if "error" in r),
        "by_tag": {tag: {"compared": sum(1 for r in comp if r["shape"]["tag"] == tag),
                         "matched": sum(1 for r in comp if r["shape"]["tag"] == tag and r["match"])}
                   for tag in sorted({r["shape"]["tag"] for r in recs})},
        "mismatches": [{"shape": r["shape"], "kernels": r.get("kernels")} for r in comp if not r["match"]][:20],
        "timed": sum(1 for r in recs if (r.get("timing") or {}).get("t_us") is not None)})
    (out / f"{stem}-summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: summary[k] for k in ("cases", "compared", "matched", "errors", "timed", "by_tag")}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
