#!/usr/bin/env python3
"""Speed and memory of ``decodecalc tune`` on real-traffic-sized workloads, beside today's exact evaluation.

Every case runs the installed CLI in a fresh process (``python -m decodecalc tune --model llama3.1-8b --gpu h200
... --json``) over the full candidate set of both engines, and reports its wall time and peak resident memory
(``VmHWM`` of the child):

* ``presets-drawn``: 100,000 steps drawn from the four presets' steady-state steps (few distinct shapes: the
  workload of the earlier figure in BENCHMARKS.md), a step file;
* ``chat-distinct``: 100,000 steps of the chat preset's continuous batching (every step distinct), a step file;
* ``long-context-distinct``: a request trace that batches into about 100,000 steps of 1-64 sequences up to 64K
  tokens (every step distinct), ``--max-num-seqs 64``;
* ``requests-500``: 500 requests (lognormal prompts around 2,000 tokens, outputs around 300, Poisson arrivals);
* ``day-1m``: a request trace of about 1,000,000 steps (``--max-num-seqs 256``), read as a stream.

The baseline, measured in the same run: ``--exact`` (every step of every candidate timed by the scalar model) on the
first ``--exact-steps`` steps of ``chat-distinct``, scaled per step to the case, twice: with the Python reference of
the grid-order dispatch (``DECODECALC_PURE_PYTHON=1``: the exact evaluation as it was before the compiled twin) and
with the compiled twin; on those steps the default run's totals are compared with ``--exact``'s (every candidate) and
the picks must agree. ``--check-exact`` also times every candidate of ``requests-500`` (10,126 steps) exactly on every
step and compares its totals (a minute or two).
Run on one core:

    taskset -c 0 python -m benchmarks.bench_tune [--out benchmarks/results/bench_tune.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL, GPU = "llama3.1-8b", "h200"
CHILD = """
import resource, runpy, sys
sys.argv = ["decodecalc"] + sys.argv[1:]
try:
    runpy.run_module("decodecalc", run_name="__main__")
except SystemExit as e:
    code = e.code
else:
    code = 0
# VmHWM: this process image's own peak (ru_maxrss would carry the forking parent's peak across fork and exec)
try:
    hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
except OSError:
    hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("MAXRSS_KB", hwm, file=sys.stderr)
sys.exit(code or 0)
"""


def run_tune(args: list[str], out: Path, env: dict[str, str] | None = None) -> dict:
    """One ``decodecalc tune ... --json`` in a fresh process: wall seconds, peak RSS, the JSON."""
    cmd = [sys.executable, "-c", CHILD, "tune", "--model", MODEL, "--gpu", GPU, "--json", *args]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    t0 = time.perf_counter()
    with open(out, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"tune failed ({' '.join(args)}):\n{proc.stderr}")
    rss = next(int(x.split()[1]) for x in proc.stderr.splitlines() if x.startswith("MAXRSS_KB"))
    return {"wall_s": wall, "peak_rss_mb": rss / 1024, "result": json.loads(out.read_text())}


# ------------------------------------------------------------------------------------------------ workloads


def write_jsonl(path: Path, rows) -> Path:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
    return path


def presets_drawn(path: Path, n: int) -> Path:
    from decodecalc.traffic import PRESETS, generate

    library = [s for name in sorted(PRESETS) for s in generate(PRESETS[name]).steps]
    rng = random.Random(1)
    return write_jsonl(path, ({"seq_lens": list(rng.choice(library).seq_lens)} for _ in range(n)))


def chat_distinct(path: Path, n: int) -> Path:
    from decodecalc.traffic import PRESETS, generate

    return write_jsonl(path, ({"seq_lens": list(s.seq_lens)} for s in generate(PRESETS["chat"], steps=n).steps))


def requests(path: Path, n: int, seed: int, prompt_median: float, prompt_sigma: float, output_median: float,
             output_sigma: float, rate: float | None, max_prompt: int = 60_000) -> Path:
    rng = random.Random(seed)
    t = 0.0
    rows = []
    for _ in range(n):
        row = {"prompt_tokens": min(max_prompt, max(1, int(rng.lognormvariate(math.log(prompt_median), prompt_sigma)))),
               "output_tokens": max(2, int(rng.lognormvariate(math.log(output_median), output_sigma)))}
        if rate is not None:
            t += rng.expovariate(rate)
            row["arrival_s"] = round(t, 3)
        rows.append(row)
    return write_jsonl(path, rows)


#: the Azure LLM inference trace 2024, conversation service, as decodecalc models a day of it: arrivals at 11.6
#: requests/s (Poisson), ContextTokens lognormal with median 1,000 (sigma 1.0, capped at 16,000), GeneratedTokens
#: lognormal with median 200 (sigma 0.8, capped at 2,000): decodecalc's stand-in, generated here, not committed
DAY_RATE, DAY_SECONDS = 11.6, 86_400.0


def azure_day(path: Path, n: int, seed: int = 2024, rate: float = DAY_RATE) -> Path:
    """``n`` requests in the Azure 2024 CSV format (``TIMESTAMP,ContextTokens,GeneratedTokens``), seeded: a day of
    one server when ``n`` is about 1,000,000."""
    import datetime as dt

    rng = random.Random(seed)
    start = dt.datetime(2024, 5, 10, tzinfo=dt.timezone.utc)
    t = 0.0
    with open(path, "w", newline="") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for _ in range(n):
            t += rng.expovariate(rate)
            p = min(16_000, max(1, int(rng.lognormvariate(math.log(1000), 1.0))))
            o = min(2_000, max(1, int(rng.lognormvariate(math.log(200), 0.8))))
            stamp = (start + dt.timedelta(seconds=t)).isoformat(sep=" ")
            f.write(f"{stamp},{p},{o}\n")
    return path


def subset(src: Path, dst: Path, n: int) -> Path:
    with open(src) as f, open(dst, "w") as g:
        for _, line in zip(range(n), f):
            g.write(line)
    return dst


# ------------------------------------------------------------------------------------------------ checks


def compare(fast: dict, exact: dict) -> dict:
    """Largest relative difference of any candidate's total, and whether the picks agree."""
    worst, picks_agree, rows = 0.0, True, 0
    for engine, e in fast["engines"].items():
        ref = {c["label"]: c["total_s"] for c in exact["engines"][engine]["candidates"]}
        for c in e["candidates"]:
            worst = max(worst, abs(c["total_s"] / ref[c["label"]] - 1))
            rows += 1
        picks_agree &= e["best"]["label"] == exact["engines"][engine]["best"]["label"]
    return {"candidates_compared": rows, "max_total_difference": worst, "picks_agree": picks_agree}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="write the figures as JSON here")
    ap.add_argument("--quick", action="store_true", help="a tenth of every size (a smoke run)")
    ap.add_argument("--exact-steps", type=int, default=2000)
    ap.add_argument("--check-exact", action="store_true",
                    help="time every candidate of requests-500 exactly on every step and compare (a minute or two)")
    args = ap.parse_args()
    scale = 10 if args.quick else 1
    tmp = Path(tempfile.mkdtemp(prefix="bench_tune_"))
    cases = {
        "presets-drawn": (["--steps", str(presets_drawn(tmp / "presets.jsonl", 100_000 // scale))], None),
        "chat-distinct": (["--steps", str(chat_distinct(tmp / "chat.jsonl", 100_000 // scale))], None),
        "long-context-distinct": (["--requests", str(requests(tmp / "long.jsonl", 14_000 // scale, 7, 3000, 1.0, 300,
                                                              0.9, None)), "--max-num-seqs", "64"], 64),
        "requests-500": (["--requests", str(requests(tmp / "r500.jsonl", 500, 5, 2000, 0.6, 300, 0.5, 2.0))], None),
        "day-1m": (["--requests", str(requests(tmp / "day.jsonl", 150_000 // scale, 9, 1500, 1.0, 300, 1.0, 6.0)),
                    "--max-num-seqs", "256"], 256),
    }
    report: dict = {"python": sys.version.split()[0], "cpu_count": os.cpu_count(), "cases": {}}
    for name, (cli, _) in cases.items():
        got = run_tune(cli, tmp / f"{name}.json")
        res = got["result"]
        row = {"wall_s": round(got["wall_s"], 2), "peak_rss_mb": round(got["peak_rss_mb"]),
               "steps": res["workload"]["steps"], "distinct_shapes": res["workload"]["distinct_shapes"],
               "candidates": sum(len(e["candidates"]) for e in res["engines"].values()),
               "exact_evaluations": res["estimate"]["exact_evaluations"],
               "max_rel_se": res["estimate"]["max_rel_se"],
               "picks": {e: v["best"]["label"] for e, v in res["engines"].items()}}
        report["cases"][name] = row
        print(f"{name:24s} {row['steps']:>9,} steps ({row['distinct_shapes']:,} distinct) x {row['candidates']} "
              f"candidates: {row['wall_s']:6.2f} s, {row['peak_rss_mb']:,} MB", flush=True)

    # the baseline: every step timed exactly, on the first steps of chat-distinct
    n = args.exact_steps // scale
    sub = subset(tmp / "chat.jsonl", tmp / "chat_sub.jsonl", n)
    pure = run_tune(["--steps", str(sub), "--exact"], tmp / "exact_pure.json", env={"DECODECALC_PURE_PYTHON": "1"})
    exact = run_tune(["--steps", str(sub), "--exact"], tmp / "exact.json")
    fast = run_tune(["--steps", str(sub)], tmp / "fast.json")
    if pure["result"]["engines"] != exact["result"]["engines"]:
        raise SystemExit("--exact differs between the compiled dispatch and the Python reference")
    per_step = pure["wall_s"] / n
    base = {"steps": n, "exact_pure_python_wall_s": round(pure["wall_s"], 2), "exact_wall_s": round(exact["wall_s"], 2),
            "default_wall_s": round(fast["wall_s"], 2), "exact_s_per_step": per_step,
            "accelerated": fast["result"]["estimate"].get("accelerated"),
            **compare(fast["result"], exact["result"])}
    for name, row in report["cases"].items():
        row["exact_s_scaled"] = round(per_step * row["steps"])
        row["speedup_vs_exact"] = round(per_step * row["steps"] / row["wall_s"], 1)
    report["baseline"] = base
    scaled = ", ".join(f"{k} {v['exact_s_scaled']:,} s" for k, v in report["cases"].items())
    print(f"baseline: --exact on {n:,} chat steps {pure['wall_s']:.1f} s with the Python dispatch "
          f"({per_step * 1e3:.1f} ms a step; scaled: {scaled}), {exact['wall_s']:.1f} s with the compiled one; the "
          f"default run on them {fast['wall_s']:.1f} s, every candidate's total within "
          f"{base['max_total_difference']:.3%} of --exact's ({base['candidates_compared']} compared), "
          f"picks {'the same' if base['picks_agree'] else 'DIFFERENT'}")

    if args.check_exact:
        res = report["cases"]["requests-500"]
        truth = run_tune(cases["requests-500"][0] + ["--exact"], tmp / "r500_exact.json")
        res["exact_wall_s"] = round(truth["wall_s"], 2)
        res.update(compare(json.loads((tmp / "requests-500.json").read_text()), truth["result"]))
        print(f"requests-500 against every step timed exactly ({truth['wall_s']:.0f} s): every candidate's total "
              f"within {res['max_total_difference']:.3%} ({res['candidates_compared']} compared), picks "
              f"{'the same' if res['picks_agree'] else 'DIFFERENT'}")
    if args.out:
        tmp_out = Path(args.out).with_suffix(".tmp")
        tmp_out.write_text(json.dumps(report, indent=1) + "\n")
        os.replace(tmp_out, args.out)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
