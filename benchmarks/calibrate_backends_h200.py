"""`calibrate --backends` on the H200 from scratch, judged on what no fit saw (issue 18, item 5: "calibrate for a new
GPU, as good as the shipped profile").

    decodecalc calibrate --gpu h200 --from-scratch --save-measurements M.json.gz -o P.yaml    # on the H200
    python -m benchmarks.calibrate_backends_h200 --build-measurements /tmp/m.json             # or from committed runs
    decodecalc calibrate --gpu h200 --from-scratch --from-measurements /tmp/m.json -o Q.yaml
    python -m benchmarks.calibrate_backends_h200 --score device=P.yaml earlier=Q.yaml [--write]

Two profiles calibrated from scratch: the device run's (:data:`DEVICE_RUN`: one ``calibrate`` command on the H200,
the Triton kernels and the three backends it found installed), and one fitted on earlier sessions' runs of the same
plan (``--build-measurements``: the Triton calibrate run of 2026-12-02, ``calibrate-h200-measurements.json``, and as
``backend_cases`` the runs ``measure_backends_fp8_h200.py`` made of :data:`decodecalc.timemodel.backend_fit.
BACKEND_LAYOUTS`, its ``fit`` and ``fit-short`` tags).

``--score``: each profile against the shipped one (``shipped``, always scored) on data no calibrate fit saw:

* **unseen layouts**: the single launches of the six head layouts ``measure_backends_fp8_h200.py --layouts unseen``
  timed (24:8, 40:8, 28:4, 12:1 at d128, 8:4 d256, 32:8 d64; bf16 and fp8 KV; 2026-12-03), by the main kernel's family;
* **workloads**: the backends' whole-workload totals of ``validate_backends_workload_h200.py`` (bf16: 7 + 5 cases of
  chat and long-prompt steps on 7 models; fp8: 5 chat cases), each backend's predicted total against the measured.

The shipped bf16 families were fitted on other H200 runs (capture-backends-h200.jsonl: six layouts, one of which,
32:8 d64, is among the unseen six) and its fp8 families on the same plan runs the ``earlier`` profile sees; no
profile has residual-map cells for the backends (physics only), so "with and without the map" is one figure here.
``--write`` records the scores in ``results/calibrate-backends-h200.json`` (``tests/test_calibrate_backends.py``
recomputes them from the committed profiles and checks BENCHMARKS.md's table).
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import load_profile_file, packaged_profile
from decodecalc.timemodel.backend_fit import main_family
from decodecalc.timemodel.fit import percentile
from decodecalc.timemodel.predict import launch_time_s
from decodecalc.timemodel.profile import CALIBRATION_GOAL_MEDIAN, CALIBRATION_GOAL_P90
from decodecalc.verify.backend_calibration import record_measurements

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
TRITON_TIMINGS = RESULTS / "calibrate-h200-measurements.json"
#: measure_backends_fp8_h200.py's runs: the plan's layouts (tags fit, fit-short) and the six unseen ones (tag unseen)
PLAN_RUNS = tuple(RESULTS / f"fp8-backends-{x}-h200.jsonl.gz" for x in ("flashinfer", "fa3", "short-flashinfer",
                                                                          "short-fa3"))
WORKLOADS = {"bf16": (RESULTS / "validate-backends-workload-h200.json", RESULTS / "validate-backends-workload-h200-run2.json"),
             "fp8": (RESULTS / "validate-backends-workload-h200-fp8.json",)}
OUT = RESULTS / "calibrate-backends-h200.json"


def runs(tags: tuple[str, ...]) -> list[dict[str, Any]]:
    """The committed plan runs whose shape tag is one of ``tags``."""
    out = []
    for path in PLAN_RUNS:
        with gzip.open(path, "rt") as f:
            out += [r for r in map(json.loads, f) if r["shape"].get("tag") in tags]
    return out


def build_measurements(dest: Path) -> dict[str, Any]:
    from decodecalc.verify.backend_calibration import saved_record

    data = json.loads(TRITON_TIMINGS.read_text())
    data["backend_cases"] = [saved_record(r) for r in runs(("fit", "fit-short"))]
    dest.write_text(json.dumps(data) + "\n")
    return data


#: the device run of 2026-12-04 (``decodecalc calibrate --gpu h200 --from-scratch --save-measurements ...`` with
#: FlashInfer 0.7.2.post1 and vLLM 0.33.0's FA3 build installed, so ``--backends auto`` timed all three)
DEVICE_RUN = RESULTS / "calibrate-backends-h200-measurements.json.gz"


def _stats(errs: list[float]) -> dict[str, Any]:
    a = sorted(abs(e) for e in errs)
    if not a:
        return {"rows": 0}
    return {"rows": len(a), "median_abs_err": round(percentile(a, 0.5), 4), "p90_abs_err": round(percentile(a, 0.9), 4),
            "max_abs_err": round(a[-1], 4), "within_5pct": sum(e <= 0.05 for e in a)}


def score_layouts(profile: Any, ms: list[Any]) -> dict[str, Any]:
    """Per family (the run's main kernel's), |predicted / measured - 1| of the unseen layouts' launches."""
    by: dict[str, list[float]] = {}
    for m in ms:
        by.setdefault(main_family(m), []).append(launch_time_s(m.work, profile) / m.time_s - 1)
    out = {f: _stats(e) for f, e in sorted(by.items())}
    out["all"] = _stats([e for v in by.values() for e in v])
    return out


def score_workloads(profile: Any) -> dict[str, Any]:
    """Each backend's whole-workload total against the measured one, bf16 and fp8 cases."""
    from benchmarks.validate_backends_workload_h200 import predicted_totals

    rows, errs = [], []
    for kv, paths in WORKLOADS.items():
        for p in paths:
            for case in json.loads(p.read_text())["cases"]:
                pred = predicted_totals(case, profile)
                for k, meas in case["measured_total_s"].items():
                    if meas and k in pred:
                        e = pred[k] / meas - 1
                        errs.append(e)
                        rows.append({"model": case["model"], "tp": case["tp"], "workload": case["workload"], "kv": kv,
                                     "backend": k, "error": round(e, 4)})
    return {"totals": _stats(errs), "rows": rows}


def score(profiles: dict[str, Any]) -> dict[str, Any]:
    gpu = resolve_gpu("h200")
    unseen = record_measurements(runs(("unseen",)), gpu)
    doc: dict[str, Any] = {"unseen_rows": len(unseen), "goals": {"median": CALIBRATION_GOAL_MEDIAN,
                                                                 "p90": CALIBRATION_GOAL_P90}, "profiles": {}}
    for name, prof in profiles.items():
        rec = prof.fit.get("backend_calibration") if isinstance(prof.fit, dict) else None
        doc["profiles"][name] = {
            "unseen_layouts": score_layouts(prof, unseen), "workloads": score_workloads(prof),
            "uncalibrated_families": sorted(prof.fit.get("uncalibrated_families") or ()) if isinstance(prof.fit, dict) else [],
            **({"left_out_layouts": {f: r["left_out"] for f, r in rec["families"].items()}} if rec else {})}
    return doc


def markdown(doc: dict[str, Any]) -> str:
    """BENCHMARKS.md's table: per family, unseen-layout median / p90 per profile and the ratio to the shipped one;
    then the workload totals."""
    names = list(doc["profiles"])
    others = [n for n in names if n != "shipped"]
    fams = [f for f in doc["profiles"]["shipped"]["unseen_layouts"] if f != "all"] + ["all"]
    head = ["family", "runs", *(f"{n}: median / p90" for n in names), *(f"{n} / shipped (median, p90)" for n in others)]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]

    def cell(s: dict[str, Any]) -> str:
        return f"{s['median_abs_err']:.1%} / {s['p90_abs_err']:.1%}" if s.get("rows") else "-"

    for f in fams:
        ss = [doc["profiles"][n]["unseen_layouts"].get(f, {"rows": 0}) for n in names]
        base = ss[0]
        ratios = [f"{s['median_abs_err'] / base['median_abs_err']:.2f}x, {s['p90_abs_err'] / base['p90_abs_err']:.2f}x"
                  if s.get("rows") and base.get("rows") else "-" for s in ss[1:]]
        label = f"`{f}`" if f != "all" else "all"
        lines.append(f"| {label} | {base.get('rows', 0)} | " + " | ".join([*map(cell, ss), *ratios]) + " |")
    w = [doc["profiles"][n]["workloads"]["totals"] for n in names]
    wr = [f"{s['median_abs_err'] / w[0]['median_abs_err']:.2f}x, {s['p90_abs_err'] / w[0]['p90_abs_err']:.2f}x"
          for s in w[1:]]
    lines.append(f"| workload totals (within 5%) | {w[0]['rows']} | "
                 + " | ".join([f"{cell(s)} ({s['within_5pct']})" for s in w] + wr) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-measurements", type=Path, metavar="OUT")
    ap.add_argument("--score", nargs="+", default=[], metavar="NAME=PROFILE")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.build_measurements:
        data = build_measurements(args.build_measurements)
        print(f"wrote {args.build_measurements}: {len(data['cases'])} Triton timings, {len(data['backend_cases'])} "
              "backend runs")
    if args.score:
        sources = dict(spec.split("=", 1) for spec in args.score)
        profiles = {"shipped": packaged_profile("h200"),
                    **{name: load_profile_file(Path(path), expect_gpu="h200") for name, path in sources.items()}}
        doc = score(profiles)
        doc["sources"] = sources
        print(markdown(doc))
        if args.write:
            OUT.write_text(json.dumps(doc, indent=1) + "\n")
            print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
