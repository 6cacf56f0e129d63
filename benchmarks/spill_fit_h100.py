"""The spilling reduce in a from-scratch calibration, left out whole by workload (issue 18, item 5).

    python -m benchmarks.spill_fit_h100 [--write]

``calibrate --grid``'s plan stops at 128 segments, so vLLM's ``reduce_segments`` past its register tile (512-4,096
segments: the ``vllm_reduce_spill`` family) is timed only by the map steps, the reference workloads' long contexts
under tune's leading settings. A from-scratch profile used to keep that family at neutral values. This script
scores :func:`decodecalc.timemodel.recipe.fit_spill_family` on the H100 run's timings
(``results/calibrate-grid-map-h100-sxm-measurements.json.gz``, `calibrate --gpu h100-sxm --from-scratch --grid
--backends none`, 2026-12-06): for each reference workload with spilling launches, the family is fitted on the
others' and that workload's spilling launches are predicted. The physics is the run's own, without its map
(``results/calibrate-grid-map-h100-sxm.yaml``, written before the fit existed: its spill family is the neutral one).
Columns: that physics as it was; with the family fitted on the other workloads; and with the H200's shipped
family transferred unfitted (what the default, warm calibrate keeps). |predicted / measured - 1| of each launch.
``--write``: results/spill-fit-h100.json and the BENCHMARKS.md table between ``<!-- spill-fit -->`` markers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import load_profile_file
from decodecalc.timemodel.calibration_fit import map_name, workload_measurements
from decodecalc.timemodel.fit import abs_pct_errors
from decodecalc.timemodel.profile_sources import datasheet_profile
from decodecalc.timemodel.recipe import fit_spill_family
from decodecalc.timemodel.work import REDUCE_SPILL_FAMILY as SPILL_FAMILY

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
RUN = RESULTS / "calibrate-grid-map-h100-sxm"
OUT = RESULTS / "spill-fit-h100.json"
MARK = "<!-- spill-fit -->"


def spilling(ms: list[Any]) -> list[Any]:
    return [m for m in ms if any(k.family == SPILL_FAMILY for k in m.work.kernels)]


def figure(errs: list[float]) -> dict[str, Any]:
    from benchmarks.score_gpu_transfer import figure as summary

    out = summary(errs)
    return {"launches": out.pop("timings"), **out}


def compute() -> dict[str, Any]:
    from benchmarks.score_gpu_transfer import load

    data = load(Path(f"{RUN}-measurements.json.gz"))
    run = load_profile_file(Path(f"{RUN}.yaml"))
    physics = dataclasses.replace(run, residuals=None)
    shipped = datasheet_profile(resolve_gpu(str(data["gpu"]))).families[SPILL_FAMILY]
    transferred = dataclasses.replace(physics, families={**physics.families, SPILL_FAMILY: shipped})
    by = {map_name(doc): spilling(list(workload_measurements(doc))) for doc in data["map_steps"]}
    folds: dict[str, Any] = {}
    pooled: dict[str, list[float]] = {"as run": [], "fitted on the other workloads": [], "H200 family, transferred": []}
    for name, test in by.items():
        if not test:
            continue
        fitted, n = fit_spill_family(physics, [m for other, ms in by.items() if other != name for m in ms])
        cols = {"as run": physics, "fitted on the other workloads": fitted, "H200 family, transferred": transferred}
        errs = {c: abs_pct_errors(p, test) for c, p in cols.items()}
        folds[name] = {"training_launches": n, **{c: figure(e) for c, e in errs.items()}}
        for c, e in errs.items():
            pooled[c] += e
    total = {c: figure(e) for c, e in pooled.items()}
    return {"source": f"{RUN.name}-measurements.json.gz ({data.get('device_name')})", "folds": folds, "pooled": total}


def markdown(doc: dict[str, Any]) -> str:
    cols = list(doc["pooled"])
    lines = ["| left out | launches | " + " | ".join(cols) + " |", "|---" * (2 + len(cols)) + "|"]
    rows = [*((k, v) for k, v in doc["folds"].items()), ("all four, pooled", doc["pooled"])]
    for name, cells in rows:
        n = cells[cols[0]]["launches"]
        lines.append(f"| {name} | {n} | " + " | ".join(
            f"{cells[c]['median_abs_err']:.1%} / {cells[c]['p90_abs_err']:.1%} ({cells[c]['within_5pct']:.0%})"
            for c in cols) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    doc = compute()
    table = markdown(doc)
    print(table)
    if args.write:
        OUT.write_text(json.dumps(doc, indent=1) + "\n")
        bench = ROOT / "BENCHMARKS.md"
        text, end = bench.read_text(), MARK.replace("<!-- ", "<!-- /")
        head, rest = text.split(MARK, 1)
        bench.write_text(f"{head}{MARK}\n{table}\n{end}{rest.split(end, 1)[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
