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
* ``sharegpt-3000``: 3,000 ShareGPT-format conversations (no arrival times: Poisson arrivals at the rate that keeps
  ``--max-num-seqs`` busy; token counts estimated from the text);
* ``day-1m-requests``: a day of one server, 1,000,000 requests in the Azure 2024 CSV format (:func:`azure_day`:
  11.6 requests/s, prompts and outputs drawn like the conversation trace; about 3.4 million decode steps), on
  Llama-3.1-70B at TP8 as issue 43 ran it; wall and CPU seconds and peak memory (goals: 60 s of CPU, 2 GB).

The day is sampled (16,384 measured steps whose totals are estimated over every step): on a smaller day
(``--check-day-requests``, 100,000 requests) the sampled run is compared with every step measured (the sampling
thresholds raised in the child), candidate by candidate against the standard error it states, and the picks.

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
import resource
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


#: the same child with every step of the workload measured (no sample): the reference a sampled day is checked
#: against (decodecalc.reports.tune's sampling thresholds raised past any workload)
EVERY_STEP = "import decodecalc.reports.tune as T; T.SAMPLE_ABOVE = T.MEASURE_STEPS = 10**12\n"


def run_tune(args: list[str], out: Path, env: dict[str, str] | None = None, *, model: tuple[str, ...] = (),
             every_step: bool = False) -> dict:
    """One ``decodecalc tune ... --json`` in a fresh process: wall and CPU seconds, peak RSS, the JSON. ``model``:
    other ``--model`` / ``--tp`` arguments; ``every_step``: no sample (the reference)."""
    child = (EVERY_STEP if every_step else "") + CHILD
    cmd = [sys.executable, "-c", child, "tune", *(model or ("--model", MODEL)), "--gpu", GPU, "--json", *args]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(out, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"tune failed ({' '.join(args)}):\n{proc.stderr}")
    rss = next(int(x.split()[1]) for x in proc.stderr.splitlines() if x.startswith("MAXRSS_KB"))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss / 1024, "result": json.loads(out.read_text())}


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
DAY_MODEL = ("--model", "llama3.1-70b", "--tp", "8")


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


def sharegpt(path: Path, n: int, seed: int = 3) -> Path:
    """``n`` ShareGPT-format conversations (a human turn, a gpt turn) of words, lognormal lengths (prompt median ~150
    words, output ~250): no arrival times, so tune gives them the rate that keeps --max-num-seqs busy."""
    rng = random.Random(seed)
    words = ("the of and to in is you that it was for on are as with they at be this have from or one had by word but "
             "not what all were we when your can said there use an each which she do how their if will up other").split()

    def text(k: int) -> str:
        return " ".join(rng.choice(words) for _ in range(k))

    convs = [{"id": f"c{i}", "conversations": [
        {"from": "human", "value": text(max(1, int(rng.lognormvariate(5.0, 1.0))))},
        {"from": "gpt", "value": text(max(2, int(rng.lognormvariate(5.5, 0.8))))}]} for i in range(n)]
    path.write_text(json.dumps(convs))
    return path


def subset(src: Path, dst: Path, n: int) -> Path:
    with open(src) as f, open(dst, "w") as g:
        for _, line in zip(range(n), f):
            g.write(line)
    return dst


# ------------------------------------------------------------------------------------------------ checks


def against_every_step(sampled: dict, full: dict) -> dict:
    """A sampled day against every step measured: per candidate, the difference of the totals and its ratio to the
    standard error the sampled run states (``total_rel_se``); the picks, and where they differ, the sampled pick's
    total in the full run against the full run's best (within the stated error: the expected error of the totals)."""
    worst, worst_z, rows, picks = 0.0, 0.0, 0, {}
    for engine, e in sampled["engines"].items():
        ref = {c["label"]: c for c in full["engines"][engine]["candidates"]}
        for c in e["candidates"]:
            err = abs(c["total_s"] / ref[c["label"]]["total_s"] - 1)
            worst = max(worst, err)
            worst_z = max(worst_z, err / max(c["total_rel_se"], 1e-12))
            rows += 1
        fb = full["engines"][engine]["best"]
        got = ref[e["best"]["label"]]["total_s"]
        stated = (e.get("predicted_error") or {}).get("median_abs_err", 0.0)
        picks[engine] = {"sampled": e["best"]["label"], "every_step": fb["label"],
                         "sampled_pick_vs_best_every_step": got / fb["total_s"] - 1, "stated_error": stated,
                         "within": got <= fb["total_s"] * (1 + stated)}
    return {"candidates_compared": rows, "max_total_difference": worst, "max_difference_in_stated_se": worst_z,
            "picks": picks, "picks_agree": all(p["sampled"] == p["every_step"] for p in picks.values()),
            "picks_within_stated_error": all(p["within"] for p in picks.values())}


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
    ap.add_argument("--day-requests", type=int, default=1_000_000, help="requests of the day case (issue 43)")
    ap.add_argument("--check-day-requests", type=int, default=100_000,
                    help="requests of the day whose sampled evaluation is checked against every step measured")
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
        # issue 43's ShareGPT case (goal 10 s): 3,000 conversations, arrivals at the busy rate
        "sharegpt-3000": (["--requests", str(sharegpt(tmp / "sharegpt.json", 3000 // scale))], None),
        # issue 43's day: the Azure 2024 conversation trace's shape at 11.6 requests/s, 70B at TP8 as the issue ran it
        "day-1m-requests": (["--requests", str(azure_day(tmp / "day.csv", args.day_requests // scale))], DAY_MODEL),
    }
    report: dict = {"python": sys.version.split()[0], "cpu_count": os.cpu_count(), "cases": {}}
    for name, (cli, model) in cases.items():
        got = run_tune(cli, tmp / f"{name}.json", model=model if isinstance(model, tuple) else ())
        res = got["result"]
        row = {"wall_s": round(got["wall_s"], 2), "cpu_s": round(got["cpu_s"], 2),
               "peak_rss_mb": round(got["peak_rss_mb"]),
               "steps": res["workload"]["steps"], "distinct_shapes": res["workload"]["distinct_shapes"],
               "candidates": sum(len(e["candidates"]) for e in res["engines"].values()),
               "exact_evaluations": res["estimate"]["exact_evaluations"],
               "max_rel_se": res["estimate"]["max_rel_se"],
               "picks": {e: v["best"]["label"] for e, v in res["engines"].items()}}
        report["cases"][name] = row
        print(f"{name:24s} {row['steps']:>9,} steps ({row['distinct_shapes']:,} distinct) x {row['candidates']} "
              f"candidates: {row['wall_s']:6.2f} s wall, {row['cpu_s']:6.2f} s CPU, {row['peak_rss_mb']:,} MB",
              flush=True)

    # the sampled day against every step measured, on a smaller day (every step of 100,000 requests: ~345,000 steps)
    small = azure_day(tmp / "day_small.csv", args.check_day_requests // scale, seed=2025)
    sampled = run_tune(["--requests", str(small)], tmp / "day_small.json", model=DAY_MODEL)
    full = run_tune(["--requests", str(small)], tmp / "day_small_full.json", model=DAY_MODEL, every_step=True)
    check = {"requests": args.check_day_requests // scale, "steps": sampled["result"]["workload"]["steps"],
             "sampled": {k: round(sampled[k], 2) for k in ("wall_s", "cpu_s", "peak_rss_mb")},
             "every_step": {k: round(full[k], 2) for k in ("wall_s", "cpu_s", "peak_rss_mb")},
             **against_every_step(sampled["result"], full["result"])}
    report["day_sampled_vs_every_step"] = check
    print(f"day of {check['requests']:,} requests ({check['steps']:,} steps), sampled against every step measured "
          f"({full['wall_s']:.0f} s, {full['peak_rss_mb']:,.0f} MB): every candidate's total within "
          f"{check['max_total_difference']:.3%} ({check['max_difference_in_stated_se']:.1f} stated standard errors at "
          f"most; {check['candidates_compared']} compared), picks "
          + ("the same" if check["picks_agree"] else "different, " + ("within" if check["picks_within_stated_error"]
                                                                       else "NOT within") + " the stated error"),
          flush=True)

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
