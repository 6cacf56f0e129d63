"""FlashInfer's CUDA-core step cost before and after the rule of 2026-12-04 (issue 18), on what no fit saw.

    python -m benchmarks.cuda_core_step_rule [--write]
    python -m benchmarks.cuda_core_step_rule --before OUT.json   # in a checkout of the commit before the rule

The rule (timemodel.backends.cuda_core_step_factor): a step of the CUDA-core decode loop costs like more bytes past
CUDA_CORE_G0 heads per KV head, in proportion to its arithmetic per KV byte (the group size over the cache's bytes
per element), where it had been the group size over the SM's resident threads. The shipped families were refitted
under it (``fit_backends_h200.py --refit flashinfer``, ``fit_backends_fp8_h200.py --write-profile``). Scored here,
with the shipped profile of each side:

* **single launches** of the six head layouts ``measure_flashinfer_ctas_h200.py`` timed that no fit saw
  (``results/flashinfer-ctas-h200.jsonl.gz``: 16:1 d64 and d256, 32:2, 64:4, 8:1 d256, 32:4 d256; bf16 and e4m3);
* **workload totals** of FlashInfer's CUDA-core path in every committed ``validate_backends_workload_h200.py`` run:
  the three of 2026-12-02/03 and the two of 2026-12-04 timed after the rule was chosen (Llama-3-405B TP4 and
  Qwen3-235B-A22B TP1, layouts 32:2 and 64:4; three fp8 chat workloads).

The ``before`` figures come from the commit before the rule (423b818, its code and profile: ``--before``) and are
recorded in ``results/cuda-core-step-rule-h200.json``; ``after`` is what the checkout computes
(``tests/test_backends_workload.py`` recomputes it and checks BENCHMARKS.md's table).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
from pathlib import Path
from typing import Any

from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import packaged_profile
from decodecalc.timemodel.backend_fit import layout_of
from decodecalc.timemodel.fit import percentile
from decodecalc.timemodel.predict import launch_time_s
from decodecalc.verify.backend_calibration import record_measurements

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
OUT = RESULTS / "cuda-core-step-rule-h200.json"
CTAS = RESULTS / "flashinfer-ctas-h200.jsonl.gz"
#: layouts of the CTA run that a FlashInfer fit saw (the calibrate plan's and the fp8 fit's): left out of the scores
FITTED = ("16:1-d128", "16:2-d256", "8:1-d128")
#: (backend runs, the Triton-default runs of the same cases): every committed whole-workload run of the backends
WORKLOAD_RUNS = (
    ("validate-backends-workload-h200.json", ("validate_tune_h200_in_graph.json", "validate_tune_h200_top0_chat.json",
                                              "validate_tune_h200_top0_405b.json")),
    ("validate-backends-workload-h200-run2.json", ("validate_tune_h200_top0_chat2.json",)),
    ("validate-backends-workload-h200-fp8.json", ("validate-tune-fp8-h200.json",)),
    ("validate-backends-workload-h200-run3.json", ("validate_tune_h200_top0_run3.json",)),
    ("validate-backends-workload-h200-fp8-run2.json", ("validate_tune_h200_top0_fp8_run2.json",)),
)


def _summary(errors: list[float]) -> dict[str, Any]:
    a = sorted(abs(e) for e in errors)
    return {"rows": len(a), "median_abs_err": round(percentile(a, 0.5), 4), "p90_abs_err": round(percentile(a, 0.9), 4),
            "within_5pct": sum(e <= 0.05 for e in a), "max_abs_err": round(a[-1], 4)}


def single_launches(profile: Any) -> dict[str, Any]:
    """Per KV dtype, the CUDA-core runs of the CTA file's unseen layouts: summary and per-layout signed medians."""
    with gzip.open(CTAS, "rt") as f:
        recs = [json.loads(x) for x in f]
    out: dict[str, Any] = {}
    for m in record_measurements(recs, resolve_gpu("h200")):
        lay = "%d:%d-d%d" % layout_of(m)
        if m.kernel != "flashinfer" or lay in FITTED:
            continue
        kv = "fp8" if m.shape.kv_bytes_per_element == 1 else "bf16"
        out.setdefault(kv, {}).setdefault(lay, []).append(launch_time_s(m.work, profile) / m.time_s - 1)
    return {kv: {"all": _summary([e for v in by.values() for e in v]),
                 "signed_median": {lay: round(sorted(v)[len(v) // 2], 4) for lay, v in sorted(by.items())}}
            for kv, by in sorted(out.items())}


def workload_totals() -> list[dict[str, Any]]:
    """FlashInfer CUDA-core totals of every committed workload run under the checkout's shipped profile."""
    from benchmarks.validate_backends_workload_h200 import compare

    rows = []
    for runs, triton in WORKLOAD_RUNS:
        with contextlib.redirect_stdout(io.StringIO()):
            got = compare(RESULTS / runs, [RESULTS / t for t in triton])
        for r in got["rows"]:
            t = r["totals"].get("flashinfer")
            if t:
                rows.append({"run": runs, "model": r["model"], "tp": r["tp"], "workload": r["workload"],
                             "kv_cache_dtype": r["kv_cache_dtype"], "measured_s": t["measured_s"],
                             "error": round(t["error"], 4)})
    return rows


def side() -> dict[str, Any]:
    profile = packaged_profile("h200")
    totals = workload_totals()
    return {"single_launches": single_launches(profile), "workload_totals": totals,
            "workload_summary": _summary([r["error"] for r in totals])}


def markdown(doc: dict[str, Any]) -> str:
    """BENCHMARKS.md's two tables: single launches by KV dtype, and every CUDA-core workload total."""
    b, a = doc["before"], doc["after"]

    def cell(s: dict[str, Any]) -> str:
        return f"{s['median_abs_err']:.1%} / {s['p90_abs_err']:.1%} (worst {s['max_abs_err']:.1%})"

    lines = ["| single launches, 6 layouts no fit saw | runs | before: median / p90 | after |", "|---|---|---|---|"]
    for kv in a["single_launches"]:
        sb, sa = b["single_launches"][kv]["all"], a["single_launches"][kv]["all"]
        lines.append(f"| {kv} KV | {sa['rows']} | {cell(sb)} | {cell(sa)} |")
    lines += ["", "| model (TP), workload | KV | measured | before | after |", "|---|---|---|---|---|"]
    before = {(r["model"], r["tp"], r["workload"], r["kv_cache_dtype"]): r["error"] for r in b["workload_totals"]}
    for r in a["workload_totals"]:
        key = (r["model"], r["tp"], r["workload"], r["kv_cache_dtype"])
        kv = "bf16" if r["kv_cache_dtype"] == "auto" else r["kv_cache_dtype"]
        lines.append(f"| {r['model']} ({r['tp']}), {r['workload']} | {kv} | {1e3 * r['measured_s']:.2f} ms | "
                     f"{before[key]:+.1%} | {r['error']:+.1%} |")
    sb, sa = b["workload_summary"], a["workload_summary"]
    lines.append(f"| all {sa['rows']}: within 5% / median / worst | | | {sb['within_5pct']} / "
                 f"{sb['median_abs_err']:.1%} / {sb['max_abs_err']:.1%} | {sa['within_5pct']} / "
                 f"{sa['median_abs_err']:.1%} / {sa['max_abs_err']:.1%} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help=f"record the after side next to the before in {OUT.name}")
    ap.add_argument("--before", type=Path, metavar="JSON", help="write this checkout's side as the before side")
    args = ap.parse_args()
    if args.before:
        args.before.write_text(json.dumps(side(), indent=1) + "\n")
        return 0
    doc = json.loads(OUT.read_text())
    doc["after"] = side()
    print(markdown(doc))
    if args.write:
        tmp = OUT.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        tmp.replace(OUT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
