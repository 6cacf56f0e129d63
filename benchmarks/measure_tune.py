"""``tune --measure`` on three real-format traces: measured totals beside tune's predictions, on this GPU.

    python -m benchmarks.measure_tune --out DIR            # on the GPU (torch, the engines' kernels, FA3, FlashInfer)
    python -m benchmarks.measure_tune --summarize DIR      # no GPU: the table BENCHMARKS.md shows

Writes three seeded traces in the public formats (Azure LLM inference 2023 code, BurstGPT v1.1, Mooncake; 1,500
requests each, arrival rates that keep 20-60 sequences decoding) under DIR/traces, runs ``decodecalc tune --requests
... --measure --json`` on each with one model per trace (Llama-3.1-8B TP1, Llama-3.1-70B TP8, Qwen2.5-7B TP2: three
head layouts; ``--cases`` adds the backend cases: Llama-3-405B TP8, Gemma-2-9B, Mistral-7B on the chat preset),
and keeps each run's JSON (DIR/<case>-tune.json) and timings (DIR/<case>-timings.json).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path

#: (case, trace format, model, TP): three real-format traces, three head layouts
CASES = (("azure-code", "azure", "llama3.1-8b", 1), ("burstgpt", "burstgpt", "llama3.1-70b", 8),
         ("mooncake", "mooncake", "qwen2.5-7b", 2))
#: the backends' totals on head layouts the backend fits were short of (issue 42: group 16, head dim 256, Mistral),
#: on the seeded chat preset: (case, preset, model, TP)
BACKEND_CASES = (("405b-chat", "chat", "llama3-405b", 8), ("gemma2-chat", "chat", "gemma-2-9b", 1),
                 ("mistral-chat", "chat", "mistral-7b", 1))
REQUESTS = 1500


def _lognormal(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, int(round(median * math.exp(sigma * rng.gauss(0, 1))))))


def write_trace(case: str, fmt: str, path: Path, seed: int = 0) -> None:
    """A seeded trace of :data:`REQUESTS` requests in ``fmt``'s public columns (docs/traces.md)."""
    rng = random.Random(f"{case}-{seed}")
    t = 0.0
    lines = []
    if fmt == "azure":  # code completion: long prompts, short outputs, ~6 requests/s
        lines.append("TIMESTAMP,ContextTokens,GeneratedTokens")
        for _ in range(REQUESTS):
            t += rng.expovariate(6.0)
            whole, frac = divmod(t, 1.0)
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(1700150000 + whole)) + f".{int(frac * 1e7):07d}"
            lines.append(f"{stamp},{_lognormal(rng, 2000, 0.8, 16, 7800)},{_lognormal(rng, 25, 1.0, 1, 1500)}")
    elif fmt == "burstgpt":  # conversation: short prompts, long answers, ~3 requests/s
        lines.append("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type")
        for _ in range(REQUESTS):
            t += rng.expovariate(3.0)
            p, o = _lognormal(rng, 600, 1.0, 8, 16000), _lognormal(rng, 300, 0.7, 1, 3000)
            lines.append(f"{int(t)},ChatGPT,{p},{o},{p + o},Conversation log")
    else:  # Mooncake: long contexts (ms timestamps), ~1 request/s
        for _ in range(REQUESTS):
            t += rng.expovariate(1.0)
            p = _lognormal(rng, 8000, 0.6, 64, 30000)
            lines.append(json.dumps({"timestamp": int(t * 1000), "input_length": p,
                                     "output_length": _lognormal(rng, 200, 0.8, 1, 2000),
                                     "hash_ids": list(range(-(-p // 512)))}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def measure(out: Path, steps: int, cases: list[str]) -> None:
    import torch

    from decodecalc.specs.gpus import resolve_gpu

    gpu = resolve_gpu(torch.cuda.get_device_name(0)).name
    (out / "traces").mkdir(parents=True, exist_ok=True)
    for case, fmt, model, tp in [c for c in CASES + BACKEND_CASES if c[0] in cases]:
        if fmt in ("azure", "burstgpt", "mooncake"):
            trace = out / "traces" / f"{case}.{'jsonl' if fmt == 'mooncake' else 'csv'}"
            write_trace(case, fmt, trace)
            source = ["--requests", str(trace)]
        else:
            source = ["--workload", fmt]
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "decodecalc", "tune", *source, "-m", model, "--tp", str(tp),
               "--gpu", gpu, "--heuristics", "none", "--measure", "--measure-steps", str(steps),
               "--save-measurements", str(out / f"{case}-timings.json"), "--json"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        took = time.monotonic() - t0
        if r.returncode != 0:
            print(f"{case}: exit {r.returncode} after {took:.0f} s: {r.stderr.strip()[-800:]}", flush=True)
            continue
        (out / f"{case}-tune.json").write_text(r.stdout, encoding="utf-8")
        print(f"{case}: {model} TP{tp} on {gpu}, {took:.0f} s", flush=True)
        summarize_one(case, json.loads(r.stdout))


def summarize_one(case: str, doc: dict) -> None:
    m = doc["measured"]
    for s in m["settings"]:
        got = s["measured_vs_predicted"]
        ci = s["ci95_rel"]
        print(f"| {case} | {s['engine']} | {s['label']} | {', '.join(s['roles'])} | "
              f"{s['predicted_mean_step_s'] * 1e6:.1f} | "
              + (f"{s['measured_mean_step_s'] * 1e6:.1f} ±{ci:.1%} | {got - 1:+.1%} |" if got is not None else
                 "not timed | |"))
    for e, v in m["engines"].items():
        print(f"  {e}: pick by {v['pick_by']}: {v['pick']} ({v['why']})")
    if m.get("errors"):
        print(f"  {len(m['errors'])} failures, first: {m['errors'][0]}")


#: the committed runs (python -m benchmarks.tables renders BENCHMARKS.md's table from them)
RESULTS = Path(__file__).resolve().parent / "results" / "measure-tune-h100-sxm"
#: the MHA head-dim-64 case (issue 43: SGLang's MHA path at d64): ``tune -w chat -m benchmarks/configs/mha64-config.json``
#: (a Llama-style config with 32 query and 32 KV heads of 64), timed with --measure as the cases above
EXTRA_CASES = ("mha64",)
MODEL_NAMES = {"mha64": "MHA d64 config"}


def load_case(folder: Path, case: str) -> dict | None:
    for name in (f"{case}-tune.json", f"{case}-tune.json.gz"):
        f = folder / name
        if f.is_file():
            raw = gzip.decompress(f.read_bytes()) if name.endswith(".gz") else f.read_bytes()
            return json.loads(raw)
    return None


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def markdown(folder: Path = RESULTS) -> str:
    """Per case: how many of the measured settings' totals lie within 5% of the prediction (tune's Triton settings;
    the backends apart), the engines' default backend and XQA predicted against measured, and each engine's pick."""
    rows = ["| case | model (per-rank layout) | Triton settings within 5% | worst | FA3 default: meas. vs pred. "
            "| vLLM FlashInfer (XQA): meas. vs pred. | picks (by) |", "|---|---|---|---|---|---|---|"]
    for case in [c[0] for c in CASES + BACKEND_CASES] + list(EXTRA_CASES):
        doc = load_case(folder, case)
        if doc is None:
            continue
        m = doc["measured"]
        tri = [x for x in m["settings"] if x["kind"] == "triton" and x["measured_vs_predicted"] is not None]
        errs = [x["measured_vs_predicted"] - 1 for x in tri]
        within = sum(abs(e) <= 0.05 for e in errs)
        worst = max(errs, key=abs)
        fa3 = next((x for x in m["settings"] if "engine default" in x["roles"] and x["engine"] == "vllm"), None)
        xqa = next((x for x in m["settings"] if x["engine"] == "vllm" and x["kernel"] == "xqa"), None)
        picks = "; ".join(f"{e}: {v['pick']} ({v['pick_by']})" for e, v in m["engines"].items())
        layout = f"{doc['num_heads']}:{doc['num_kv_heads']} d{doc['head_size']}"
        rows.append(f"| {case} | {MODEL_NAMES.get(case, doc['model'])} TP{doc['tp']} ({layout}) | {within} / {len(tri)} | {_pct(worst)} | "
                    + (_pct(fa3["measured_vs_predicted"] - 1) + ("" if fa3["predicted_calibrated"] else " ~")
                       if fa3 else "-") + " | "
                    + (_pct(xqa["measured_vs_predicted"] - 1) + ("" if xqa["predicted_calibrated"] else " ~")
                       if xqa else "-") + f" | {picks} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--cases", default=",".join(c[0] for c in CASES),
                    help="comma list of: " + ", ".join(c[0] for c in CASES + BACKEND_CASES))
    ap.add_argument("--summarize", type=Path, help="print the table of a finished run's folder (no GPU)")
    args = ap.parse_args()
    if args.summarize:
        print("| trace | engine | setting | role | predicted µs | measured µs (95%) | measured vs predicted |")
        print("|---|---|---|---|---|---|---|")
        for case in [c[0] for c in CASES + BACKEND_CASES] + list(EXTRA_CASES):
            doc = load_case(args.summarize, case)
            if doc is not None:
                summarize_one(case, doc)
        print()
        print(markdown(args.summarize))
        return
    if args.out is None:
        ap.error("--out DIR (on the GPU) or --summarize DIR")
    measure(args.out, args.steps, [c for c in args.cases.split(",") if c])


if __name__ == "__main__":
    main()
