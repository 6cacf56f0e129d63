"""Is a workload's decode attention the sum of its steps run alone? The in-sequence regime, measured.

``benchmarks/validate_tune_h200.py`` measures a workload as one CUDA graph holding every step in order (step k on
KV copy k % copies): consecutive launches of different shapes, as an engine's decode graphs run them layer after
layer. With ``--per-step N`` it times each step alone instead (a graph of that one step repeated over the KV
copies). Both runs of the same model, workloads and settings (the steps are generated the same way) give, per
setting:

* isolated / in-sequence: the sum of the steps run alone over the workload run in order (the regime's effect);
* predicted / isolated: the time model's error on the steps themselves;
* predicted / in-sequence: the error the validation reports.

    python -m benchmarks.steps_in_sequence            # prints the table, writes results/steps-in-sequence-h200.json
    python -m benchmarks.steps_in_sequence --transfer # also: layout cells from one workload's steps, the other
                                                      # workload re-predicted (two minutes on one core)
    python -m benchmarks.steps_in_sequence --next     # also: the same workload's next 150 steps re-predicted
    python -m benchmarks.steps_in_sequence --sampled  # also: as --next, the cells from what calibrate could time

``--next``: the layout cells from a workload's steps 0-149 and that workload's steps 150-299, measured as totals
(``validate_tune_h200_layouts3_next150.json``: the layouts3 command for the two models with ``--skip-steps 150``,
93 s on the device): does a sample of a user's own traffic correct the rest of it?

``--sampled``: as ``--next``, but the cells come only from what a calibrate of the user's traffic could time with
today's variants: 12 (and 24) evenly spaced steps, under static launches alone (vLLM 2D or 3D at 4, 16 or 64
segments; SGLang static 1, 4, 16 or 64 splits); and from 6 (and 12) steps under every launch the engines made.

``--transfer``: the per-step timings of one workload become layout cells over the packaged profile
(decodecalc.timemodel.calibration_fit.add_layout_cells: one offset per layout and kernel family), and the other
workload of the same model is re-predicted from ``validate_tune_h200_layouts3.json``
(validate_tune_h200.repredict): does a layout's measured bias on one traffic carry to another?

Inputs (H200, 2026-12-02): ``results/per-step-layouts3-<model>-h200.json`` (``--models gemma-2-9b:1`` and
``llama3-405b:8``, ``--workloads "chat;mix:prompt=6000,output=400,sigma=1" --steps 150 --top 6 --per-step 150``;
115 s and 166 s on the device) against ``results/validate_tune_h200_layouts3.json`` (the same command without
``--per-step``).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PER_STEP = ("per-step-layouts3-gemma-2-9b-h200.json", "per-step-layouts3-llama3-405b-h200.json")
SEQUENCE = "validate_tune_h200_layouts3.json"


def compare(per_step: dict, sequence: dict) -> list[dict]:
    """One row per (model, workload, engine): the settings both runs measured on every step, and the three ratios
    (median, min, max over the settings)."""
    out = []
    for case in per_step["cases"]:
        ref = next(c for c in sequence["cases"] if (c["model"], c["workload"]) == (case["model"], case["workload"]))
        alone: dict[str, float] = defaultdict(float)
        predicted: dict[str, float] = defaultdict(float)
        steps: dict[str, int] = defaultdict(int)
        engine: dict[str, str] = {}
        for r in case["per_step"]:
            for name in r["entries"]:
                alone[name] += r["t_us"] * 1e-6
                predicted[name] += r["predicted_us"] * 1e-6
                steps[name] += 1
                engine[name] = r["engine"]
        for eng in ("vllm", "sglang"):
            rows = [(alone[e["name"]] / e["measured_total_s"] - 1, predicted[e["name"]] / alone[e["name"]] - 1,
                     predicted[e["name"]] / e["measured_total_s"] - 1)
                    for e in ref["entries"] if steps.get(e["name"]) == case["steps"] and engine[e["name"]] == eng]
            if not rows:
                continue
            cols = list(zip(*rows))
            out.append({"model": case["model"], "tp": case["tp"], "workload": case["workload"], "engine": eng,
                        "settings": len(rows),
                        **{f"{k}_{stat}": round(f(c), 4) for k, c in zip(("alone_vs_sequence", "predicted_vs_alone",
                                                                             "predicted_vs_sequence"), cols)
                           for stat, f in (("median", statistics.median), ("min", min), ("max", max))}})
    return out


def _within(rows: list[dict]) -> dict:
    e = [abs(float(r["error"])) for r in rows]
    return {"totals": len(e), "within_5pct": sum(x <= 0.05 for x in e), "median_abs_error": round(statistics.median(e), 4),
            "max_abs_error": round(max(e), 4)}


def transfer() -> list[dict]:
    """For each model and workload W: layout cells from W's per-step timings; the other workload's totals
    re-predicted with and without them."""
    import tempfile

    from benchmarks.validate_tune_h200 import repredict

    base = repredict(RESULTS / SEQUENCE)["rows"]
    steps = {(c["model"], c["workload"]): len(c["per_step"]) for name in PER_STEP
             for c in json.loads((RESULTS / name).read_text())["cases"]}
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        profiles = _cells_profiles(Path(tmp))
        for (model, workload), prof in profiles.items():
            rows = repredict(RESULTS / SEQUENCE, prof)["rows"]
            for other in sorted({w for m, w in profiles if m == model} - {workload}):
                mine = [r for r in rows if (r["model"], r["workload"]) == (model, other)]
                before = [r for r in base if (r["model"], r["workload"]) == (model, other)]
                out.append({"model": model, "cells_from": workload, "predicted": other,
                            "step_timings": steps[(model, workload)], "shipped": _within(before),
                            "with_cells": _within(mine)})
    return out


NEXT = "validate_tune_h200_layouts3_next150.json"


def _sample(case: dict, k: int, static_only: bool = True) -> dict:
    """``case`` with only the per-step rows of ``k`` evenly spaced steps; ``static_only``: only the launches today's
    calibrate variants make (else every launch the engines made for the settings tune compares)."""
    def static(r: dict) -> bool:
        if not static_only:
            return True
        launch = r["launch"]
        if r["engine"] == "vllm":
            return not launch["use_3d"] or int(launch["segments"]) in (4, 16, 64)
        return (not launch["adaptive"] and int(launch["max_kv_splits"]) in (1, 4, 16, 64)
                and len(set(launch["splits"])) == 1)

    steps = sorted({r["shape_index"] for r in case["per_step"]})
    pick = {steps[round(j * (len(steps) - 1) / (k - 1))] for j in range(k)}
    return {**case, "per_step": [r for r in case["per_step"] if r["shape_index"] in pick and static(r)]}


def _cells_profiles(tmp: Path, sample: int = 0, static_only: bool = True) -> dict[tuple[str, str], Path]:
    """(model, workload) -> a profile file: the packaged one with the layout cells of that workload's per-step
    timings (decodecalc.timemodel.calibration_fit.add_layout_cells); ``sample``: of :func:`_sample`'s rows."""
    from benchmarks.fit_timemodel import load_steps
    from decodecalc.timemodel import dump_profile, packaged_profile
    from decodecalc.timemodel.calibration_fit import add_layout_cells

    shipped = packaged_profile("h200")
    assert shipped is not None
    physics = dataclasses.replace(shipped, residuals=None)
    out = {}
    for name in PER_STEP:
        data = json.loads((RESULTS / name).read_text())
        for k, case in enumerate(data["cases"]):
            case = _sample(case, sample, static_only) if sample else case
            one = tmp / f"steps-{name}-{k}.json"
            one.write_text(json.dumps({**data, "cases": [case]}))
            ms, _ = load_steps([one])
            prof = tmp / f"profile-{name}-{k}.yaml"
            prof.write_text(dump_profile(add_layout_cells(shipped, physics, ms, f"steps of {case['workload']}")))
            out[(case["model"], case["workload"])] = prof
    return out


def next_steps(sample: int = 0, static_only: bool = True) -> list[dict]:
    """For each model and workload: its next 150 steps' totals re-predicted with the layout cells of its first 150
    (``sample``: of that many of them, :func:`_sample`)."""
    import tempfile

    from benchmarks.validate_tune_h200 import repredict

    base = repredict(RESULTS / NEXT)["rows"]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for (model, workload), prof in _cells_profiles(Path(tmp), sample, static_only).items():
            rows = repredict(RESULTS / NEXT, prof)["rows"]
            mine = [r for r in rows if (r["model"], r["workload"]) == (model, workload)]
            before = [r for r in base if (r["model"], r["workload"]) == (model, workload)]
            out.append({"model": model, "workload": workload, "shipped": _within(before), "with_cells": _within(mine)})
    return out


def main() -> int:
    sequence = json.loads((RESULTS / SEQUENCE).read_text())
    rows = [r for name in PER_STEP for r in compare(json.loads((RESULTS / name).read_text()), sequence)]
    for r in rows:
        print(f"{r['model']:12s} {r['workload'][:10]:10s} {r['engine']:6s} {r['settings']:2d} settings  alone/sequence "
              f"{r['alone_vs_sequence_median']:+.1%} [{r['alone_vs_sequence_min']:+.1%}, {r['alone_vs_sequence_max']:+.1%}]"
              f"  predicted/alone {r['predicted_vs_alone_median']:+.1%}  predicted/sequence "
              f"{r['predicted_vs_sequence_median']:+.1%}")
    doc = {"per_step": list(PER_STEP), "sequence": SEQUENCE, "rows": rows}
    if "--transfer" in sys.argv[1:]:
        doc["transfer"] = transfer()
        for t in doc["transfer"]:
            a, b = t["shipped"], t["with_cells"]
            print(f"{t['model']:12s} cells from {t['cells_from'][:10]:10s} -> {t['predicted'][:10]:10s}: "
                  f"{a['within_5pct']}/{a['totals']} within 5% (median {a['median_abs_error']:.1%}) -> "
                  f"{b['within_5pct']}/{b['totals']} ({b['median_abs_error']:.1%})")
    if "--next" in sys.argv[1:]:
        doc["next"] = next_steps()
        for t in doc["next"]:
            a, b = t["shipped"], t["with_cells"]
            print(f"{t['model']:12s} {t['workload'][:10]:10s} next 150 steps: {a['within_5pct']}/{a['totals']} within 5% "
                  f"(median {a['median_abs_error']:.1%}) -> {b['within_5pct']}/{b['totals']} ({b['median_abs_error']:.1%})")
    elif (RESULTS / "steps-in-sequence-h200.json").is_file():  # keep what an earlier --next recorded
        doc["next"] = json.loads((RESULTS / "steps-in-sequence-h200.json").read_text()).get("next", [])
    if "--sampled" in sys.argv[1:]:
        doc["sampled"] = {str(k): next_steps(k) for k in (12, 24)}
        doc["sampled_engine_launches"] = {str(k): next_steps(k, static_only=False) for k in (6, 12)}
        for key in ("sampled", "sampled_engine_launches"):
            for k, rows in doc[key].items():
                print(f"{key} {k} steps: {sum(t['shipped']['within_5pct'] for t in rows)} -> "
                      f"{sum(t['with_cells']['within_5pct'] for t in rows)} of {sum(t['shipped']['totals'] for t in rows)}")
    elif (RESULTS / "steps-in-sequence-h200.json").is_file():
        old = json.loads((RESULTS / "steps-in-sequence-h200.json").read_text())
        doc["sampled"] = old.get("sampled", {})
        doc["sampled_engine_launches"] = old.get("sampled_engine_launches", {})
    if "--transfer" not in sys.argv[1:] and (RESULTS / "steps-in-sequence-h200.json").is_file():
        doc.setdefault("transfer", json.loads((RESULTS / "steps-in-sequence-h200.json").read_text()).get("transfer", []))
    (RESULTS / "steps-in-sequence-h200.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
