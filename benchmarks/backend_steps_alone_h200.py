"""The backends' workload steps timed alone (issue 18: where a backend's workload error is).

    PYTHONPATH=.:<flashinfer> DECODECALC_FA3_LIB=<so> python3 -m benchmarks.backend_steps_alone_h200 --run --out $OUT
    python -m benchmarks.backend_steps_alone_h200 [--write]

``validate_backends_workload_h200.py`` times a workload's steps in order in one CUDA graph and finds totals far off
where single launches of the same head layout are close (Gemma-3-27B's 32:16: -4% as single launches, +33% as a chat
total on FlashInfer's CUDA cores, +13% to +18% on every other backend). ``--run`` times SAMPLE evenly spaced steps of
each case alone (``--paths``: some of them; one call per install), as calibrate times a run (verify.backend_calibration.run_backend_calibration: the step's plan
profiled and checked against decodecalc's, then calls of it in a CUDA graph over rotating KV copies), on each path
under its CUDA-graph plan (FA3 at vLLM's 32 splits), and writes ``backend-steps-alone-<paths>.jsonl`` (the
calls' files together: ``results/backend-steps-alone-h200.jsonl.gz``). The CPU half compares, per case and path, the sampled steps'
predicted sum with their measured sum alone, and the workload total's error over all its steps in sequence
(``validate-backends-workload-h200*.json``), and splits a step into its kernels (the model's time of each against the
profiler's duration of the same launch) and the rest (launch overhead and gaps, the step's time less its kernels): ``results/backend-steps-alone-h200.json``, checked by
``tests/test_backends_workload.py`` against BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import time
from pathlib import Path
from typing import Any

from decodecalc.specs.gpus import resolve_gpu

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
DATA = RESULTS / "backend-steps-alone-h200.jsonl.gz"
OUT = RESULTS / "backend-steps-alone-h200.json"
#: the cases with the largest backend workload errors, as (model, TP, workload) of validate_backends_workload_h200
CASES = [("gemma-3-27b", 1, "chat"), ("llama3-405b", 8, "chat"), ("gemma-2-9b", 1, "chat"), ("llama3.1-8b", 1, "chat"),
         ("mistral-7b", 1, "chat")]
PATHS = ("flashinfer", "flashinfer-tc", "fa3")
STEPS = 100  # the workload runs' steps per case
SAMPLE = 20
WORKLOAD_RUNS = ("validate-backends-workload-h200.json", "validate-backends-workload-h200-run2.json")


def sampled(n: int = STEPS, k: int = SAMPLE) -> list[int]:
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def plan(paths: tuple[str, ...] = PATHS) -> list[tuple[str, dict[str, Any], bool]]:
    from benchmarks.validate_backends_workload_h200 import case_steps
    from decodecalc.specs.models import resolve_model
    from decodecalc.timemodel.backend_fit import layout_label
    from decodecalc.workload import make_workload

    out = []
    for model, tp, wl in CASES:
        _, lens = case_steps(model, tp, wl, STEPS)
        w = make_workload(resolve_model(model), tp=tp)
        layout = layout_label((w.num_heads, w.num_kv_heads, w.head_size))
        for i in sampled():
            for path in paths:
                out.append((path, {"model": model, "tp": tp, "seq_lens": [int(x) for x in lens[i]],
                                   "kv_cache_dtype": "bfloat16", "layout": layout, "tag": f"{model}:{tp}:{wl}:step{i}"},
                            True))
    return out


def run(out_dir: Path, paths: tuple[str, ...] = PATHS) -> int:
    from decodecalc.verify.backend_calibration import run_backend_calibration

    t0 = time.time()
    recs = run_backend_calibration(resolve_gpu("h200"), list(paths), plan=plan(paths),
                                   progress=lambda i, n, what: print(f"{time.time() - t0:5.0f}s {i}/{n} {what}",
                                                                     flush=True) if i % 50 == 0 else None)
    path = out_dir / f"backend-steps-alone-{'-'.join(paths)}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    print(f"{len(recs)} runs, {sum('error' in r for r in recs)} failed, {time.time() - t0:.0f} s -> {path}")
    return 0


def compare() -> dict[str, Any]:
    """Per case and path: the sampled steps alone (predicted / measured sum - 1, and the median step's error) beside
    the workload total's error in sequence."""
    from benchmarks.validate_backends_workload_h200 import compare as workload_compare
    from decodecalc.timemodel import packaged_profile
    from decodecalc.timemodel.predict import kernel_time_s, launch_time_s
    from decodecalc.verify.backend_calibration import record_measurement

    gpu, prof = resolve_gpu("h200"), packaged_profile("h200")
    with gzip.open(DATA, "rt") as f:
        recs = [json.loads(x) for x in f]
    with contextlib.redirect_stdout(io.StringIO()):
        wl = workload_compare([RESULTS / p for p in WORKLOAD_RUNS], [])
    totals = {(r["model"], r["tp"], r["workload"]): r["totals"] for r in wl["rows"]}
    cells: dict[tuple[str, int, str, str], dict[str, list[float]]] = {}
    unmatched = 0
    for r in recs:
        m = record_measurement(r, gpu)
        model, tp, wl_name, _ = r["shape"]["tag"].split(":")
        if m is None:
            unmatched += 1
            continue
        c = cells.setdefault((model, int(tp), wl_name, r["backend"]), {"pred": [], "meas": [], "kernels": []})
        c["pred"].append(launch_time_s(m.work, prof))
        c["meas"].append(m.time_s)
        # each kernel alone: the model's time (no launch overhead) against the profiler's duration, in launch order
        c["kernels"].append([(kernel_time_s(k, prof.families[k.family], gpu.num_sms, prof.idle_program_s,
                                            prof.hbm_bandwidth_bytes_per_s), 1e-6 * float(x["duration_us"]))
                             for k, x in zip(m.work.kernels, r["launches"])])
    rows = []
    for (model, tp, wl_name, path), c in cells.items():
        errs = sorted(p / m - 1 for p, m in zip(c["pred"], c["meas"]))
        total = totals.get((model, tp, wl_name), {}).get(path)
        n = min(len(k) for k in c["kernels"])
        kernels = [{"predicted_us": round(1e6 * sum(k[i][0] for k in c["kernels"]) / len(errs), 2),
                    "profiled_us": round(1e6 * sum(k[i][1] for k in c["kernels"]) / len(errs), 2)} for i in range(n)]
        profiled = sum(k["profiled_us"] for k in kernels)
        rows.append({"model": model, "tp": tp, "workload": wl_name, "path": path, "steps": len(errs),
                     "alone_sum_error": round(sum(c["pred"]) / sum(c["meas"]) - 1, 4),
                     "alone_median_step_error": round(errs[len(errs) // 2], 4),
                     "alone_mean_step_us": round(1e6 * sum(c["meas"]) / len(errs), 2),
                     "in_sequence_total_error": round(total["error"], 4) if total else None,
                     "in_sequence_mean_step_us": round(1e6 * total["measured_s"] / STEPS, 2) if total else None,
                     "kernels": kernels, "gap_measured_us": round(1e6 * sum(c["meas"]) / len(errs) - profiled, 2),
                     "gap_predicted_us": round(1e6 * sum(c["pred"]) / len(errs)
                                               - sum(k["predicted_us"] for k in kernels), 2)})
    order = {c: i for i, c in enumerate(CASES)}
    rows.sort(key=lambda r: (order[(r["model"], r["tp"], r["workload"])], PATHS.index(r["path"])))
    return {"runs": len(recs), "unmatched": unmatched, "rows": rows}


def markdown(doc: dict[str, Any]) -> str:
    lines = ["| model (TP), workload | path | steps alone | measured per step: alone / in sequence | predicted / "
             "measured - 1: sampled steps alone (median step) | the workload in sequence | main kernel: predicted / "
             "profiled | second kernel | the rest of a step (launch, gaps) |", "|---" * 9 + "|"]
    for r in doc["rows"]:
        seq = "-" if r["in_sequence_total_error"] is None else f"{r['in_sequence_total_error']:+.1%}"
        per = "-" if r["in_sequence_mean_step_us"] is None else f"{r['in_sequence_mean_step_us']:.1f} us"
        lines.append(f"| {r['model']} ({r['tp']}), {r['workload']} | {r['path']} | {r['steps']} | "
                     f"{r['alone_mean_step_us']:.1f} us / {per} | {r['alone_sum_error']:+.1%} "
                     f"({r['alone_median_step_error']:+.1%}) | {seq} | "
                     + " | ".join([f"{k['predicted_us']:.1f} / {k['profiled_us']:.1f} us" for k in r["kernels"][:2]]
                                  + ["-"] * (2 - len(r["kernels"][:2])))
                     + f" | {r['gap_predicted_us']:.1f} / {r['gap_measured_us']:.1f} us |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--paths", default=",".join(PATHS), help="--run: which of " + ", ".join(PATHS))
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.run:
        return run(Path(args.out), tuple(args.paths.split(",")))
    doc = compare()
    print(markdown(doc))
    if args.write:
        OUT.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
