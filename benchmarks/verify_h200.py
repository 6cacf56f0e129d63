"""`decodecalc verify` over the H200 dev grid: predicted vs observed launches, and timings.

Runs, for every shape, vLLM 0.33.0's and SGLang 0.5.23's real Triton decode kernels (loaded
unmodified from ./upstream/, see tools/fetch_upstream.sh) and decodecalc's reference kernels:
grids, programs that did work, splits per sequence, error against float32, and time
(CUDA-graph replay over rotating KV-cache copies, median of replays).

    # on the GPU machine, from the repository root (upstream/ carried along):
    python3 -m benchmarks.verify_h200 --out $OUT/verify-h200.json --budget 420
    # here: table for BENCHMARKS.md from the committed JSON (predictions recomputed now)
    python -m benchmarks.verify_h200 --report benchmarks/results/verify-h200.json

Shapes: the 40 of ../shared/data/h200-upstream-dev-grid.json (Llama-3-8B h=32:8 and
Llama-3-70B on TP=8 h=8:1, head size 128, bf16, block size 16; batch 1/4/16/64; lengths
512..131072) plus ragged batches.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

MODELS = (("llama3-8b", 1), ("llama3-70b", 8))
BATCHES = (1, 4, 16, 64)
SEQ_LENS = (512, 2560, 8192, 32768, 131072)


def dev_grid() -> list[dict[str, Any]]:
    return [{"name": f"{m}-tp{tp}-b{b}-l{L}", "model": m, "tp": tp, "seq_lens": [L] * b}
            for m, tp in MODELS for b in BATCHES for L in SEQ_LENS]


def ragged() -> list[dict[str, Any]]:
    import random

    rng = random.Random(7)
    return [
        {"name": "llama3-8b-ragged4", "model": "llama3-8b", "tp": 1, "seq_lens": [512, 4096, 32768, 131072]},
        {"name": "llama3-8b-ragged5-graphpad", "model": "llama3-8b", "tp": 1, "seq_lens": [1000, 2000, 3000, 4000, 5000]},
        {"name": "llama3-70b-tp8-ragged16", "model": "llama3-70b", "tp": 8,
         "seq_lens": [rng.randint(1000, 100000) for _ in range(16)]},
        {"name": "llama3-70b-tp8-ragged3", "model": "llama3-70b", "tp": 8, "seq_lens": [77, 16384, 65536]},
        {"name": "llama3-8b-spec3-b8", "model": "llama3-8b", "tp": 1, "seq_lens": [4096] * 8, "query_lens": [3] * 8},
    ]


def _atomic_write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def copy_bandwidth() -> float:
    """Device-to-device copy, bytes read + written per second (median of 20)."""
    import torch

    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    a.fill_(1)
    for _ in range(3):
        b.copy_(a)
    ts = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    del a, b
    torch.cuda.empty_cache()
    return 2 * n / statistics.median(ts)


def build_calls(case: dict[str, Any], gpu: Any) -> tuple[Any, list[Any]]:
    from decodecalc.errors import DecodecalcError
    from decodecalc.launchers.sglang_triton import SglangSettings, plan_sglang
    from decodecalc.launchers.vllm_unified import VllmSettings, plan_vllm
    from decodecalc.specs.models import resolve_model
    from decodecalc.verify.calls import sglang_call, vllm_call
    from decodecalc.workload import make_workload

    work = make_workload(resolve_model(case["model"]), tp=case["tp"], seq_lens=tuple(case["seq_lens"]),
                         query_lens=tuple(case["query_lens"]) if case.get("query_lens") else None,
                         dtype="bfloat16")
    calls = [vllm_call(plan_vllm(work, gpu, VllmSettings()))]
    try:
        calls.append(sglang_call(plan_sglang(work, gpu, SglangSettings()), gpu))
    except DecodecalcError:
        pass  # e.g. speculative decode: SGLang runs extend attention there
    return work, calls


def run(args: argparse.Namespace) -> int:
    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.verify import runner as R
    from decodecalc.verify.environment import detect_environment

    t0 = time.time()
    env = detect_environment()
    gpu = resolve_gpu("h200", sms=env.sm_count or None)
    out = Path(args.out)
    doc: dict[str, Any] = {"env": env.to_json(), "args": vars(args), "cases": [], "skipped": []}
    done: set[str] = set()
    if args.resume and out.exists():  # a CUDA fault ended the last process: keep what it measured
        doc = json.loads(out.read_text())
        doc["skipped"] = []
        done = {c["name"] for c in doc["cases"]}
        t0 -= doc.get("elapsed_s", 0)
    elif env.device == "cuda":
        doc["env"]["copy_bandwidth_Bps"] = copy_bandwidth()
    cases = (dev_grid() if args.shapes in ("all", "dev40") else []) + (ragged() if args.shapes in ("all", "ragged") else [])
    if args.quick:
        cases = [c for c in cases if sum(c["seq_lens"]) <= 64 * 1024][: args.quick]
    # long contexts first within each model so a budget cut drops the cheap ones last? no: keep order,
    # but run the big-KV shapes early enough to fit the budget.
    cases.sort(key=lambda c: -sum(c["seq_lens"]) * (1 if c["tp"] == 1 else 0.125))
    for i, case in enumerate(cases):
        if case["name"] in done:
            continue
        if time.time() - t0 > args.budget:
            doc["skipped"].append(case["name"])
            continue
        work, calls = build_calls(case, gpu)
        tc = time.time()
        try:
            wr = R.verify_workload(work, calls, env, sources=tuple(args.sources.split(",")), timing=True,
                                   check_seqs=args.check_seqs, bandwidth=gpu.hbm_bandwidth_bytes_per_s)
            rec = {"name": case["name"], **wr.to_json(), "wall_s": round(time.time() - tc, 2)}
        except R.CudaFault as exc:  # record, save, and let the caller restart with --resume
            rec = {"name": case["name"], **exc.partial.to_json(), "fault": str(exc),
                   "wall_s": round(time.time() - tc, 2)}
            doc["cases"].append(rec)
            _print_case(rec)
            doc["elapsed_s"] = round(time.time() - t0, 1)
            _atomic_write(out, doc)
            return 3
        except Exception as exc:  # keep going: record the failure
            rec = {"name": case["name"], "error": f"{type(exc).__name__}: {exc}", "wall_s": round(time.time() - tc, 2)}
        doc["cases"].append(rec)
        _print_case(rec)
        doc["elapsed_s"] = round(time.time() - t0, 1)
        _atomic_write(out, doc)
    _atomic_write(out, doc)
    print(f"done: {len(doc['cases'])} cases, {len(doc['skipped'])} skipped, {time.time() - t0:.0f} s", flush=True)
    return 0


def _print_case(rec: dict[str, Any]) -> None:
    if "error" in rec:
        print(f"{rec['name']}: ERROR {rec['error']}", flush=True)
        return
    parts = []
    for r in rec["runs"]:
        t = r["timing"].get("t_us")
        parts.append(f"{r['system'][:2]}/{r['source'][:3]} {'OK' if r['status'] == 'ok' else r['status'].upper()}"
                     f" {t:.1f}us" if t else f"{r['system'][:2]}/{r['source'][:3]} {r['status']} {r['message'][:80]}")
    print(f"{rec['name']} ({rec['wall_s']}s): " + " | ".join(parts), flush=True)


# --------------------------------------------------------------------------------------------
# Report (offline): recompute predictions with today's models and compare with what ran


def _recompare(case: dict[str, Any], run: dict[str, Any], gpu: Any) -> dict[str, bool]:
    """Predicted grids / working programs / splits recomputed now, against the recorded observation."""
    spec = {"model": case["workload"]["model"], "tp": case["workload"]["tp"],
            "seq_lens": case["workload"]["seq_lens"], "query_lens": case["workload"]["query_lens"]}
    _, calls = build_calls(spec, gpu)
    call = next(c for c in calls if c.system == run["system"])
    plan = call.plan
    pg = [list(k.grid) for k in plan.kernels]
    og = [c["observed_grid"] for c in run["launches"]]
    pw = [k.working_programs for k in plan.kernels]
    ow = [c["observed_working"] for c in run["launches"]]
    return {"grids": pg == og, "programs": pw == ow,
            "splits": list(plan.splits) == run["splits_observed"]
            and list(plan.nonempty_splits) == run["nonempty_observed"]}


def report(path: str) -> int:
    from decodecalc.specs.gpus import resolve_gpu

    doc = json.loads(Path(path).read_text())
    gpu = resolve_gpu("h200", sms=doc["env"].get("sm_count") or None)
    bw = doc["env"].get("copy_bandwidth_Bps")
    rows = []
    tally = {k: [0, 0] for k in ("grids", "programs", "splits", "error")}
    ratios: dict[str, list[float]] = {"vllm": [], "sglang": []}
    long_ratios: dict[str, list[float]] = {"vllm": [], "sglang": []}
    for case in doc["cases"]:
        if "error" in case:
            rows.append(f"| {case['name']} | error: {case['error'][:60]} |")
            continue
        w = case["workload"]
        runs = {(r["system"], r["source"]): r for r in case["runs"]}
        cells = []
        for system in ("vllm", "sglang"):
            up, ref = runs.get((system, "upstream")), runs.get((system, "reference"))
            for r in (up, ref):
                if r is None or r["status"] == "error":
                    continue
                m = _recompare(case, r, gpu)
                for k in ("grids", "programs", "splits"):
                    tally[k][0] += m[k]
                    tally[k][1] += 1
                tally["error"][0] += bool(r["error"].get("ok"))
                tally["error"][1] += 1
            def cell(r: dict[str, Any] | None) -> str:
                if r is None:
                    return "-"
                if r["status"] == "error":
                    return "error"
                t = r["timing"].get("t_us")
                return f"{t:.1f} ({r['gbps']:.0f})" if t else "-"
            ratio = "-"
            if up and ref and up["timing"].get("t_us") and ref["timing"].get("t_us"):
                x = ref["timing"]["t_us"] / up["timing"]["t_us"]
                ratios[system].append(x)
                if max(w["seq_lens"]) >= 32768:
                    long_ratios[system].append(x)
                ratio = f"{x:.2f}"
            grid = "-"
            if up and up["status"] != "error":
                grid = "x".join(map(str, up["launches"][0]["observed_grid"]))
            ok = all((r is None or r["status"] == "ok") for r in (up, ref))
            cells += [grid, cell(up), cell(ref), ratio, "yes" if ok else "**no**"]
        lens = w["seq_lens"]
        seq = str(lens[0]) if len(set(lens)) == 1 else f"ragged {min(lens)}..{max(lens)}"
        if w["query_lens"] and max(w["query_lens"]) > 1:
            seq += f" (q={max(w['query_lens'])})"
        kv_mb = sum(lens) * w["num_kv_heads"] * w["head_size"] * 4 / 1e6
        rows.append(f"| {w['model']} tp{w['tp']} | {w['batch']} | {seq} | {kv_mb:.1f} | " + " | ".join(cells) + " |")

    def gm(xs: list[float]) -> str:
        return f"{math.exp(sum(map(math.log, xs)) / len(xs)):.2f} (n={len(xs)}, max {max(xs):.2f})" if xs else "-"

    print(f"GPU: {doc['env'].get('gpu_name')}, {doc['env'].get('sm_count')} SMs, torch {doc['env']['torch']}, "
          f"triton {doc['env']['triton']}; copy bandwidth {bw / 1e9:.0f} GB/s" if bw else "")
    for k, (a, n) in tally.items():
        print(f"{k} matched: {a}/{n}")
    for s in ("vllm", "sglang"):
        print(f"{s}: reference/upstream time, geomean all {gm(ratios[s])}; seq >= 32768: {gm(long_ratios[s])}")
    print()
    print("| model | B | seq | KV MB | vLLM grid | vLLM us (GB/s) | ref us (GB/s) | ref/vLLM | ok "
          "| SGLang stage-1 grid | SGLang us (GB/s) | ref us (GB/s) | ref/SGLang | ok |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(r)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="benchmarks/results/verify-h200.json")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds; later shapes are skipped (and listed)")
    ap.add_argument("--shapes", choices=("all", "dev40", "ragged"), default="all")
    ap.add_argument("--sources", default="upstream,reference")
    ap.add_argument("--check-seqs", type=int, default=4)
    ap.add_argument("--quick", type=int, default=0, help="only the first N small shapes")
    ap.add_argument("--resume", action="store_true", help="continue the results file (after a CUDA fault)")
    ap.add_argument("--report", metavar="JSON", help="print the BENCHMARKS.md table for a results file")
    args = ap.parse_args(argv)
    if args.report:
        return report(args.report)
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
