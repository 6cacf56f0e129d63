"""Workload totals on a GPU other than the H200, before and after `calibrate` on it (issue 18, item 5: "on any GPU
a user calibrates"), beside the shipped H200 profile on the H200's run of the same models and workloads.

    python -m benchmarks.score_gpu_workloads [--runs R.json ...] [--calibrated P.yaml] [--reference H200.json]
                                             [--json OUT]

The inputs are `validate_tune_h200.py --gpu h100-sxm` replays on an H100 (2026-12-06): every candidate setting of
each engine measured as one CUDA graph of the workload's steps. No fit saw these models or workloads; the H100's
calibration timed the plan's single shapes (some of these head layouts among them) and the reference workloads'
steps of Llama-3.1-8B and 70B only. Each profile re-predicts every measured setting (`validate_tune_h200.repredict`):

* ``datasheet (uncalibrated)``: what decodecalc predicted on an H100 before it shipped the H100's profile, and still
  predicts on a GPU with none (the H200's fitted physics and map scaled by the datasheets, sm_90 occupancies);
* ``calibrated (one command)``: the profile of `calibrate --gpu h100-sxm --from-scratch --grid --backends auto`
  on the H100 (`results/calibrate-one-command-h100-sxm.yaml`);
* ``calibrated, no map``: the same physics without its residual map (the map is built from the run's own timings).

A setting measured in two runs (Llama-3-405B's chat was replayed twice, on two machines) is scored once, from the
first; the two measurements' difference is reported as the replay's noise. The reference column re-predicts the
H200's replay of the same (model, workload) cases with the shipped profile: its settings are a subset (that run
measured tune's leading candidates), so the H100 rows are also given on that subset.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import load_profile_file
from decodecalc.timemodel.profile_sources import datasheet_profile
from decodecalc.timemodel.fit import percentile

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
RUNS = tuple(RESULTS / f"validate_tune_h100_layouts{x}.json" for x in ("", "_b", "_c"))
CALIBRATED = RESULTS / "calibrate-one-command-h100-sxm.yaml"
REFERENCE = RESULTS / "validate_tune_h200_layouts3.json"
OUT = RESULTS / "score-gpu-workloads-h100-sxm.json"
PROFILES = ("datasheet (uncalibrated)", "calibrated (one command)", "calibrated, no map")


def shown(path: Path) -> str:
    """A path as the record names it: relative to the repository where it lies inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def key(row: dict[str, Any]) -> tuple[str, int, str, str, str]:
    return (row["model"], row["tp"], row["workload"], row["engine"], row["setting"])


def case_of(row: dict[str, Any]) -> str:
    workload = "mix" if row["workload"].startswith("mix:") else row["workload"]
    return f"{row['model']} TP{row['tp']} {workload} {row['engine']}"


def summary(rows: Sequence[dict[str, Any]], picks: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Totals within 5%, median / p90 / worst |error|, the signed median; tune's picks against the best measured."""
    errs = [abs(r["error"]) for r in rows]
    out = {"settings": len(rows), "within_5pct": sum(e <= 0.05 for e in errs),
           "median_abs_error": round(percentile(errs, 0.5), 4), "p90_abs_error": round(percentile(errs, 0.9), 4),
           "max_abs_error": round(max(errs), 4), "signed_median": round(statistics.median(r["error"] for r in rows), 4)}
    if picks:
        out["picks"] = len(picks)
        out["picks_within_3pct"] = sum(p["pick_vs_best_measured"] <= 0.03 for p in picks)
        out["worst_pick_vs_best"] = round(max(p["pick_vs_best_measured"] for p in picks), 4)
    return out


def repredicted(profile: Any, runs: Sequence[Path]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every run's settings and picks under one profile; a (case, setting) already scored by an earlier run is
    skipped."""
    from benchmarks.validate_tune_h200 import repredict

    rows: dict[tuple[str, int, str, str, str], dict[str, Any]] = {}
    picks: dict[tuple[str, int, str, str], dict[str, Any]] = {}
    for run in runs:
        rep = repredict(run, profile=profile)
        for r in rep["rows"]:
            rows.setdefault(key(r), r)
        for p in rep["picks"]:
            picks.setdefault((p["model"], p["tp"], p["workload"], p["engine"]), p)
    return list(rows.values()), list(picks.values())


def replay_noise(runs: Sequence[Path]) -> dict[str, Any]:
    """The settings measured in more than one run: |second / first - 1| of their measured totals."""
    seen: dict[tuple[str, int, str, str, str], float] = {}
    diffs = []
    for run in runs:
        for case in json.loads(run.read_text())["cases"]:
            for x in case.get("entries", []):
                if "measured_total_s" not in x:
                    continue
                k = (case["model"], case["tp"], case["workload"], x["engine"], x["name"])
                if k in seen:
                    diffs.append(abs(x["measured_total_s"] / seen[k] - 1.0))
                else:
                    seen[k] = x["measured_total_s"]
    if not diffs:
        return {"settings": 0}
    return {"settings": len(diffs), "median_abs_diff": round(percentile(diffs, 0.5), 4),
            "max_abs_diff": round(max(diffs), 4)}


def score(runs: Sequence[Path] = RUNS, calibrated: Path = CALIBRATED, reference: Path = REFERENCE) -> dict[str, Any]:
    from benchmarks.validate_tune_h200 import repredict

    cal = load_profile_file(calibrated)
    gpu = resolve_gpu(json.loads(runs[0].read_text())["gpu"])
    profiles = {PROFILES[0]: datasheet_profile(gpu), PROFILES[1]: cal,
                PROFILES[2]: dataclasses.replace(cal, residuals=None)}
    scored = {name: repredicted(p, runs) for name, p in profiles.items()}
    cases = sorted({case_of(r) for r in scored[PROFILES[0]][0]})
    ref = repredict(reference)  # the H200's replay, the shipped profile
    ref_rows = [r for r in ref["rows"] if case_of(r) in cases]
    ref_picks = [p for p in ref["picks"] if case_of({**p, "setting": ""}) in cases]
    common = {key(r) for r in ref_rows}
    doc: dict[str, Any] = {
        "runs": [shown(r) for r in runs], "calibrated_profile": shown(calibrated), "reference": shown(reference), "replay_noise": replay_noise(runs),
        "all": {n: summary(rows, picks) for n, (rows, picks) in scored.items()},
        "on_the_reference_settings": {n: summary([r for r in rows if key(r) in common])
                                      for n, (rows, _) in scored.items()},
        "by_case": {c: {n: summary([r for r in rows if case_of(r) == c]) for n, (rows, _) in scored.items()}
                    for c in cases},
        "picks": {n: picks for n, (_, picks) in scored.items()},
    }
    doc["all"]["shipped H200 profile on the H200's replay"] = summary(ref_rows, ref_picks)
    doc["on_the_reference_settings"]["shipped H200 profile on the H200's replay"] = summary(ref_rows)
    return doc


def totals_records(profile: Any, runs: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """Per engine, ``workload_totals`` of the profile's ``fit.expected_error`` (timemodel.accuracy): tune's totals of
    every measured setting (tune's own kinds, as expected_error.py counts the H200's) re-predicted by ``profile``,
    split by whether the model's per-rank layout is one the profile's fit timed (its ``fitted_layouts``, written by
    ``calibrate --left-out-folds``)."""
    from benchmarks.expected_error import TUNE_KINDS, profile_figure, model_layout, totals_figure

    kernels = ((getattr(profile, "fit", None) or {}).get("expected_error") or {}).get("kernels") or {}
    rows, _ = repredicted(profile, runs)
    evidence = (f"validate_tune_h200.py --gpu {profile.gpu} replays of models no fit saw "
                f"({', '.join(shown(r) for r in runs)}), re-predicted: tune's totals of every measured setting")
    out: dict[str, dict[str, Any]] = {}
    for engine in ("vllm", "sglang"):
        fitted = set((kernels.get(engine) or {}).get("fitted_layouts") or ())
        sides: dict[str, list[tuple[float, str, str]]] = {"fitted_layout": [], "new_layout": []}
        for r in rows:
            if r["engine"] == engine and r["kind"] in TUNE_KINDS:
                lay = model_layout(r["model"], int(r["tp"]))
                sides["fitted_layout" if lay in fitted else "new_layout"].append(
                    (abs(r["error"]), lay, f"{r['model']} TP{r['tp']}"))
        figs = {side: totals_figure(rs, evidence) for side, rs in sides.items()}
        out[engine] = {side: profile_figure(side, f) for side, f in figs.items() if f}
    return out


def write_totals(path: Path, runs: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """``path``'s profile with :func:`totals_records` in its ``fit.expected_error`` (its vLLM and SGLang records must
    exist: ``calibrate --left-out-folds`` writes them), and its parsed copy refreshed where it is a packaged one."""
    from decodecalc.timemodel.accuracy import check_block
    from tools.update_profile_cache import as_written, write

    prof = as_written(path)
    block = (prof.fit or {}).get("expected_error")
    if not block or not all(e in block["kernels"] for e in ("vllm", "sglang")):
        raise SystemExit(f"Error: {path} has no vLLM and SGLang expected error; make it with calibrate --left-out-folds")
    totals = totals_records(prof, runs)
    block = {**block, "kernels": {**block["kernels"], **{e: {**block["kernels"][e], "workload_totals": t}
                                                          for e, t in totals.items() if t}}}
    check_block(block)
    write(path, dataclasses.replace(prof, fit={**prof.fit, "expected_error": block}))
    return totals


def expected_error_markdown(profile: Any, reference: Any) -> str:
    """BENCHMARKS.md's table of a calibrated GPU's expected error (``calibrate --left-out-folds`` and
    :func:`write_totals`) beside the reference profile's (the shipped H200 one), vLLM and SGLang."""
    def launch(f: dict[str, Any]) -> str:
        return f"{f['median_abs_err']:.1%} / {f['p90_abs_err']:.1%} ({f['rows']}, {f['layouts']})"

    def totals(f: dict[str, Any]) -> str:
        return (f"{f['median_abs_err']:.1%} / {f['p90_abs_err']:.1%}, {f['within_5pct']:.0%} within 5%, worst "
                f"{f['max_abs_err']:.1%} ({f['rows']})")

    mine, ref = (p.fit["expected_error"]["kernels"] for p in (profile, reference))
    rows = [f"| kernel | side | {profile.gpu}: median / p90 (timings, layouts) | shipped {reference.gpu} profile |",
            "|---|---|---|---|"]
    for k in ("vllm", "sglang"):
        for side, name in (("fitted_layout", "a fitted layout's new shapes"), ("new_layout", "a head layout no fit saw")):
            rows.append(f"| {k} | {name} | {launch(mine[k][side])} | {launch(ref[k][side])} |")
        rows.append(f"| {k} | tune's workload totals, new layouts | {totals(mine[k]['workload_totals']['new_layout'])} | "
                    f"{totals(ref[k]['workload_totals']['new_layout'])} |")
    return "\n".join(rows)


def plain(o: Any) -> Any:
    """numpy scalars in the picks (tune's search) as JSON numbers."""
    return o.item() if hasattr(o, "item") else str(o)


def cell(s: dict[str, Any]) -> str:
    return (f"{s['within_5pct']} / {s['settings']} / {s['median_abs_error']:.1%} / {s['p90_abs_error']:.1%} / "
            f"{s['max_abs_error']:.1%} / {s['signed_median']:+.1%}")


def markdown(doc: dict[str, Any]) -> str:
    lines = ["| profile | every measured setting | picks within 3% of the best measured (worst) | "
             "the reference's settings |", "|---|---|---|---|"]
    for name, s in doc["all"].items():
        ref = doc["on_the_reference_settings"][name]
        picks = f"{s['picks_within_3pct']} / {s['picks']} ({s['worst_pick_vs_best']:+.1%})" if "picks" in s else ""
        lines.append(f"| {name} | {cell(s)} | {picks} | {cell(ref)} |")
    return "\n".join(lines)


def case_table(doc: dict[str, Any]) -> str:
    names = list(doc["all"])[:3]
    lines = ["| case | settings | " + " | ".join(names) + " |", "|---" * (2 + len(names)) + "|"]
    for c, by in doc["by_case"].items():
        lines.append(f"| {c} | {by[names[0]]['settings']} | " + " | ".join(
            f"{by[n]['within_5pct']} / {by[n]['median_abs_error']:.1%} / {by[n]['signed_median']:+.1%}" for n in names)
                     + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=Path, nargs="+", default=list(RUNS), metavar="JSON",
                    help="validate_tune_h200.py --gpu <name> replays on one GPU (default: the H100's of 2026-12-06)")
    ap.add_argument("--calibrated", type=Path, default=CALIBRATED, metavar="YAML",
                    help="that GPU's calibrated profile (default: the H100's one-command run)")
    ap.add_argument("--reference", type=Path, default=REFERENCE, metavar="JSON",
                    help="an H200 replay of the same cases, re-predicted with the shipped profile")
    ap.add_argument("--json", type=Path, help="also write the scores here (results/score-gpu-workloads-h100-sxm.json)")
    ap.add_argument("--write-totals", type=Path, metavar="YAML",
                    help="write the runs' totals, re-predicted by this profile, into its fit.expected_error as tune's "
                         "expected error of workload totals (a profile calibrate --left-out-folds wrote)")
    args = ap.parse_args(argv)
    missing = [str(p) for p in (*args.runs, args.calibrated, args.reference) if not p.is_file()]
    if missing:
        print(f"Error: no such file: {', '.join(missing)}; expected validate_tune_h200.py replays (JSON) and a "
              "calibrated profile (YAML)", file=sys.stderr)
        return 2
    doc = score([p.resolve() for p in args.runs], args.calibrated.resolve(), args.reference.resolve())
    print("cells: totals within 5% / settings / median / p90 / worst |predicted / measured - 1| / signed median")
    print(markdown(doc))
    print()
    print("by case: within 5% / median |error| / signed median")
    print(case_table(doc))
    noise = doc["replay_noise"]
    if noise["settings"]:
        print(f"\nreplay noise: {noise['settings']} settings measured twice, |difference| median "
              f"{noise['median_abs_diff']:.2%}, worst {noise['max_abs_diff']:.2%}")
    if args.json:
        from decodecalc.commands.output import write_atomic

        write_atomic(args.json, json.dumps(doc, indent=1, default=plain) + "\n")
    if args.write_totals:
        for engine, figs in write_totals(args.write_totals, [p.resolve() for p in args.runs]).items():
            for side, f in figs.items():
                print(f"{args.write_totals}: {engine} workload totals, {side.replace('_', ' ')}: {f['rows']} settings, "
                      f"{f['median_abs_err']:.1%} median, {f['within_5pct']:.0%} within 5%, worst {f['max_abs_err']:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
