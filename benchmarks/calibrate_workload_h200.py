#!/usr/bin/env python3
"""``calibrate --workload`` on the H200, and what its layout cells do to workload totals no timing of it saw.

Device half (``--run``): for each model and workload, the workload's first 150 steps are written as a step trace and
``decodecalc calibrate -m MODEL --tp TP --steps FILE --keep-physics`` times 6 sampled steps of them under every
launch of tune's search, over the packaged profile. The profiles and timings land in ``$OUT``.

    python3 -m benchmarks.calibrate_workload_h200 --run --out $OUT

CPU half (default): each profile (and the same without its layout cells' local term: ``offset_only``) re-predicts the totals of the same workload's steps 150-299, measured on the H200
as whole workloads (``validate_tune_h200.py --skip-steps 150 --steps 150 --top 6``), and the other workload of the
same model (its steps 0-149, from ``validate_tune_h200_layouts3.json``): traffic the sampled steps did not include,
and traffic of another kind. Writes ``results/calibrate-workload-h200.json`` and prints the table.

    python -m benchmarks.calibrate_workload_h200
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CASES = (("gemma-2-9b", 1), ("llama3-405b", 8), ("mistral-large", 8), ("qwen3-32b", 1))
WORKLOADS = ("chat", "mix:prompt=6000,output=400,sigma=1")
#: a request trace in a real format (the Azure code trace of examples/traces/), for two more layouts no fit saw: MHA at
#: head dim 96, and 4:1 with 4 KV heads per rank; its steps 150-299 measured as totals in TRACE_NEXT
TRACE = "trace:examples/traces/azure-code-2023.csv"
TRACE_CASES = (("phi-3-mini", 1), ("mixtral-8x7b", 2))
TRACE_NEXT = "validate_tune_h200_azure_next150.json"
#: totals of steps 150-299 (next) and of steps 0-149 (first) of each case, measured on the H200
NEXT = ("validate_tune_h200_layouts3_next150.json", "validate_tune_h200_layouts3_next150b.json")
FIRST = "validate_tune_h200_layouts3.json"
FIRST_STEPS = 150
#: the kinds of validation entry that are settings of tune's search (the rest are heuristics: PR rules, bounds)
SETTINGS = ("default", "tuned", "candidate")


def slug(model: str, workload: str) -> str:
    kind = "chat" if workload == "chat" else "azure-code" if workload == TRACE else "mix6000"
    return f"{model}-{kind}"


def all_cases(order: str = "chat-first") -> list[tuple[str, int, str]]:
    presets = [(m, tp, wl) for wl in WORKLOADS for m, tp in CASES] if order == "chat-first" else \
        [(m, tp, wl) for m, tp in CASES for wl in WORKLOADS]
    return presets + [(m, tp, TRACE) for m, tp in TRACE_CASES]


def run(out: Path, sample: int, order: str, deadline_s: float, case_timeout_s: float, only: str = "") -> int:
    """The device half: one calibrate --workload per case (each a fresh process, as a user runs it), chat cases
    first (``order``: "chat-first") until ``deadline_s``; a case running past ``case_timeout_s`` is stopped."""
    from benchmarks.validate_tune_h200 import workload_trace

    out.mkdir(parents=True, exist_ok=True)
    log = []
    cases = [c for c in all_cases(order) if only in slug(c[0], c[2])]
    start = time.perf_counter()
    for model, tp, wl in cases:
        name = slug(model, wl)
        if (out / f"{name}.yaml").is_file():  # an earlier call's
            continue
        if time.perf_counter() - start > deadline_s:
            log.append({"case": name, "skipped": "deadline"})
            continue
        trace = workload_trace(wl, FIRST_STEPS)
        steps = out / f"{name}-steps0-149.jsonl"
        steps.write_text("".join(json.dumps({"seq_lens": list(s.seq_lens), "query_lens": list(s.query_lens)})
                                 + "\n" for s in trace.steps))
        cmd = [sys.executable, "-m", "decodecalc", "calibrate", "-m", model, "--tp", str(tp), "--steps",
               str(steps), "--keep-physics", "--sample-steps", str(sample), "-o", str(out / f"{name}.yaml"),
               "--save-measurements", str(out / f"{name}-measurements.json")]
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                               timeout=case_timeout_s)
        except subprocess.TimeoutExpired as exc:
            err = (exc.stderr or b"")[-800:]
            print(f"{name}: stopped after {case_timeout_s:.0f} s: {err!r}", flush=True)
            log.append({"case": name, "timeout_s": case_timeout_s, "stderr_tail": str(err)})
            continue
        wall = time.perf_counter() - t0
        print(f"{name}: rc {p.returncode}, {wall:.0f} s\n{p.stdout}{p.stderr[-600:] if p.returncode else ''}",
              flush=True)
        log.append({"case": name, "model": model, "tp": tp, "workload": wl, "rc": p.returncode, "wall_s": wall,
                    "stdout": p.stdout})
        steps.unlink()
    runs = out / "calibrate-workload-runs.json"
    old = json.loads(runs.read_text()) if runs.is_file() else []
    runs.write_text(json.dumps(old + log, indent=1) + "\n")
    return 0


def _within(rows: list[dict]) -> dict:
    e = [abs(float(r["error"])) for r in rows]
    return {"totals": len(e), "within_5pct": sum(x <= 0.05 for x in e), "within_10pct": sum(x <= 0.10 for x in e),
            "median_abs_error": round(statistics.median(e), 4), "max_abs_error": round(max(e), 4)}


def compare(results: Path = RESULTS) -> dict:
    """Per case: the shipped profile, the calibrated one, and the calibrated one without its layout cells' local
    term (``offset_only``: one offset per kernel family, as calibrate --model writes them) on the same workload's
    next 150 steps and on the other workload's first 150."""
    import tempfile

    import yaml

    from benchmarks.validate_tune_h200 import repredict

    def cases_of(name: str) -> set:
        return {(c["model"], c["workload"]) for c in json.loads((results / name).read_text())["cases"]
                if "entries" in c}

    def one_case(src: str, model: str, workload: str, tmp: Path) -> Path:
        # one case of a validation file: repredict times only what it is asked about
        data = json.loads((results / src).read_text())
        data["cases"] = [c for c in data["cases"] if (c["model"], c["workload"]) == (model, workload)]
        path = tmp / f"{slug(model, workload)}-{src}"
        path.write_text(json.dumps(data))
        return path

    next_files = [n for n in (*NEXT, TRACE_NEXT) if (results / n).is_file()]
    out = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for model, _tp, wl in all_cases("by-model"):
            prof = results / "calibrate-workload" / f"{slug(model, wl)}.yaml"
            if not prof.is_file():
                continue
            doc = yaml.safe_load(prof.read_text())
            for key in ("layout_local_bandwidth_octaves", "layout_local_prior_launches"):
                doc["residuals"].pop(key, None)
            bare = tmp / f"{slug(model, wl)}-offset-only.yaml"
            bare.write_text(yaml.safe_dump(doc, sort_keys=False))
            row: dict = {"model": model, "cells_from": wl, "profile": str(prof.relative_to(ROOT))}
            fit = _fit_record(prof)
            if fit:
                row["calibrate"] = fit
            others = [w for w in WORKLOADS if w != wl] if wl in WORKLOADS else []
            for kind, files, target in (("next_steps", next_files, wl),
                                        *(("other_workload", [FIRST], w) for w in others)):
                src = next((n for n in files if (model, target) in cases_of(n)), None)
                if src is None:
                    continue
                path = one_case(src, model, target, tmp)
                row[kind] = {"measured": src, "workload": target}
                for who, p in (("shipped", None), ("offset_only", bare), ("calibrated", prof)):
                    rows = repredict(path, p)["rows"]
                    # and the settings tune searches alone (the default, its pick, the candidates), without the
                    # heuristics' what-ifs, whose launches calibrate does not time
                    row[kind][who] = {**_within(rows), "settings": _within([r for r in rows if r["kind"] in SETTINGS])}
            out.append(row)
    whos = ("shipped", "offset_only", "calibrated")
    kinds = ("next_steps", "other_workload")
    totals = {kind: {who: sum(r[kind][who]["within_5pct"] for r in out if kind in r) for who in whos}
              | {"of": sum(r[kind]["shipped"]["totals"] for r in out if kind in r)} for kind in kinds}
    settings = {kind: {who: sum(r[kind][who]["settings"]["within_5pct"] for r in out if kind in r) for who in whos}
                | {"of": sum(r[kind]["shipped"]["settings"]["totals"] for r in out if kind in r)} for kind in kinds}
    return {"cases": out, "totals": totals, "settings_totals": settings}


def _fit_record(prof: Path) -> dict:
    from decodecalc.timemodel import load_profile_file

    return dict(load_profile_file(prof).fit.get("workload") or {})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="store_true", help="the device half: calibrate --workload per case into --out")
    ap.add_argument("--out", type=Path, default=RESULTS / "calibrate-workload")
    ap.add_argument("--sample-steps", type=int, default=6)
    ap.add_argument("--order", default="chat-first", choices=("chat-first", "by-model"))
    ap.add_argument("--deadline-s", type=float, default=1e9, help="start no case after this many seconds")
    ap.add_argument("--case-timeout-s", type=float, default=600.0)
    ap.add_argument("--only", default="", help="only the cases whose name holds this (e.g. azure-code)")
    args = ap.parse_args()
    if args.run:
        return run(args.out, args.sample_steps, args.order, args.deadline_s, args.case_timeout_s, args.only)
    doc = compare()
    for r in doc["cases"]:
        line = f"{r['model']:13s} cells from {r['cells_from'][:10]:10s}"
        for kind in ("next_steps", "other_workload"):
            if kind in r:
                a, o, b = r[kind]["shipped"], r[kind]["offset_only"], r[kind]["calibrated"]
                line += (f" | {kind} {r[kind]['workload'][:10]:10s} {a['within_5pct']:2d}->{o['within_5pct']:2d}->"
                         f"{b['within_5pct']:2d}/{a['totals']}"
                         f" (median {a['median_abs_error']:.1%}->{b['median_abs_error']:.1%}, max "
                         f"{a['max_abs_error']:.1%}->{b['max_abs_error']:.1%})")
        print(line)
    for kind, t in doc["totals"].items():
        st = doc["settings_totals"][kind]
        print(f"{kind}: {t['shipped']} -> {t['offset_only']} (offset only) -> {t['calibrated']} of {t['of']} totals "
              f"within 5%; tune's settings alone {st['shipped']} -> {st['offset_only']} -> {st['calibrated']} of "
              f"{st['of']}")
    (RESULTS / "calibrate-workload-h200.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
