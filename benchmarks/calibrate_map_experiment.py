"""Where a from-scratch calibrate loses to the shipped profile: its physics or its residual map (issue 18, item 5).

    python -m benchmarks.calibrate_map_experiment [--cold [--missing]] [--write]

The from-scratch profile of the ``calibrate --backends`` run (``results/calibrate-backends-h200.yaml``: 80 Triton
timings, its own map) misses the 1.5x bar on workloads of head layouts no fit saw. Each variant below is re-predicted
on the six H200 validations of BENCHMARKS.md's calibrate table (``validate_tune_h200.py --repredict``):

* ``shipped``; ``shipped physics, no map``: the shipped profile, with and without its residual map;
* ``from scratch``: the calibrate run's profile;
* ``from scratch, shipped map data``: its physics with a map built from every launch behind the shipped map (the
  shipped fit's 2,127 shape timings and 6,691 timings of 300 sampled workload steps: fit_timemodel.py's data);
* ``from scratch, N steps``: its physics with a map of the step timings alone, all 300 steps or N of them drawn at
  random (what a calibrate timing the presets' steps on two reference layouts, 8:1 and 32:8, would build);
* ``calibrate --grid on the H200 (from scratch)``: the profile of the device's ``calibrate --grid`` run
  (``results/calibrate-grid-h200.yaml``: 509 timings of 75 shapes, its own map), and its physics with the shipped map
  data or the map of the steps (all 300, or the same 100 or 50 as above);
* ``--cold``: ``cold fit, F of the shipped shapes``: calibrate's cold recipe (recipe.CALIBRATE_COLD from
  calibration_fit.neutral_start) fitted on the shipped fit's shape timings, all of them (2,127 timings of its shapes)
  or the fraction COLD_FRACTIONS of its shapes drawn by a stable hash, each with the shipped map data (minutes each
  on 2 cores: recorded, not recomputed by the tests); and on a quarter of the shapes at their static launches only
  (``calibrate --grid``'s plan, decodecalc/data/calibration_grid.json, with the shipped timings).

``--write`` records ``results/calibrate-map-experiment-h200.json``; ``tests/test_calibrate_tables.py`` checks
BENCHMARKS.md's table against it and recomputes one cell.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
from pathlib import Path
from typing import Any

from benchmarks.fit_timemodel import in_fraction, shipped_data, static

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
OUT = RESULTS / "calibrate-map-experiment-h200.json"
SCRATCH = RESULTS / "calibrate-backends-h200.yaml"
GRID_RUN = RESULTS / "calibrate-grid-h200.yaml"
GRID_RUN_NAME = "calibrate --grid on the H200 (from scratch)"
#: the same command with its map steps (``--map-steps 16``, the default with ``--grid``) and the backends: one run
GRID_MAP_RUN = RESULTS / "calibrate-grid-map-h200.yaml"
GRID_MAP_RUN_NAME = "calibrate --grid on the H200 (from scratch), its own map steps"
VALIDATIONS = ("heldout", "range", "fresh5", "layouts", "layouts2", "layouts3")
KEYS = ("within_5pct", "settings", "median_abs_error", "max_abs_error", "picks_within_3pct")
STEP_SAMPLES = (100, 50)
COLD_FRACTIONS = (1.0, 0.5, 0.25)


def cold_name(fraction: float) -> str:
    return "cold fit, all the shipped shapes" if fraction == 1 else f"cold fit, {fraction:.0%} of the shipped shapes"


GRID = "cold fit, calibrate --grid's plan"


COLD_NAMES = (*map(cold_name, COLD_FRACTIONS), GRID)


def cold_profile(fraction: float, grid: bool = False) -> Any:
    """Calibrate's cold recipe on ``fraction`` of the shipped fit's shapes (all their timings; ``grid``: only their
    static launches, calibrate --grid's plan at a quarter), and the shipped map data over that physics."""
    from decodecalc.timemodel import packaged_profile
    from decodecalc.timemodel.calibration_fit import neutral_start
    from decodecalc.timemodel.recipe import CALIBRATE_COLD, fit_physics, with_residuals

    shipped = packaged_profile("h200")
    ms, steps = shipped_data()
    rows = [m for m in ms if in_fraction(m.shape.key, fraction) and (not grid or static(m.variant))]
    physics = fit_physics(rows, neutral_start(shipped), CALIBRATE_COLD, launch_overhead_s=shipped.launch_overhead_s)
    return with_residuals(physics, ms + steps, f"cold fit on {len(rows)} shipped shape timings")


def profiles(cold: bool = False, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    from decodecalc.timemodel import load_profile_file, packaged_profile
    from decodecalc.timemodel.recipe import with_residuals

    shipped = packaged_profile("h200")
    scratch, grid_run = load_profile_file(SCRATCH), load_profile_file(GRID_RUN)
    ms, steps = shipped_data()
    out = {"shipped": shipped, "shipped physics, no map": dataclasses.replace(shipped, residuals=None),
           "from scratch": scratch,
           "from scratch, shipped map data": with_residuals(scratch, ms + steps, "shipped map data"),
           "from scratch, all 300 steps": with_residuals(scratch, steps, "300 steps"),
           GRID_RUN_NAME: grid_run,
           f"{GRID_RUN_NAME}, shipped map data": with_residuals(grid_run, ms + steps, "shipped map data"),
           f"{GRID_RUN_NAME}, all 300 steps": with_residuals(grid_run, steps, "300 steps")}
    if GRID_MAP_RUN.exists():
        out[GRID_MAP_RUN_NAME] = load_profile_file(GRID_MAP_RUN)
    keys = sorted({m.shape.key for m in steps})
    rng = random.Random(0)
    for n in STEP_SAMPLES:
        pick = set(rng.sample(keys, n))
        out[f"from scratch, {n} steps"] = with_residuals(scratch, [m for m in steps if m.shape.key in pick], f"{n} steps")
        out[f"{GRID_RUN_NAME}, {n} steps"] = with_residuals(grid_run, [m for m in steps if m.shape.key in pick],
                                                             f"{n} steps")
    for f in COLD_FRACTIONS if cold else ():
        if cold_name(f) not in skip:
            out[cold_name(f)] = cold_profile(f)
    if cold and GRID not in skip:
        out[GRID] = cold_profile(0.25, grid=True)
    return out


def cell(profile: Any, validation: str) -> dict[str, Any]:
    from benchmarks.validate_tune_h200 import repredict

    r = repredict(RESULTS / f"validate_tune_h200_{validation}.json", profile=profile)
    return {k: (round(float(r[k]), 6) if k.endswith("error") else int(r[k])) for k in KEYS}


def markdown(doc: dict[str, Any]) -> str:
    lines = ["| profile | " + " | ".join(f"`{v}`" for v in VALIDATIONS) + " |", "|---" * (1 + len(VALIDATIONS)) + "|"]
    for name, cells in doc["variants"].items():
        lines.append(f"| {name} | " + " | ".join(
            f"{c['within_5pct']} / {c['median_abs_error']:.1%}" for c in (cells[v] for v in VALIDATIONS)) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cold", action="store_true", help="also the cold fit on the shipped data (minutes)")
    ap.add_argument("--missing", action="store_true", help="with --cold: only the cold fits the record lacks")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="re-predict only this variant (repeatable); the record keeps the others' cells")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    old = json.loads(OUT.read_text()) if OUT.exists() else {"variants": {}}
    doc: dict[str, Any] = {"validations": list(VALIDATIONS), "variants": {}}
    skip = frozenset(old["variants"]) if args.missing else frozenset()
    chosen = profiles(args.cold, skip)
    if args.only:
        unknown = [n for n in args.only if n not in chosen]
        if unknown:
            raise SystemExit(f"Error: --only {unknown[0]!r}; valid: {', '.join(chosen)}")
        doc["variants"] = {n: c for n, c in old["variants"].items() if n in chosen or n in COLD_NAMES}
        chosen = {n: chosen[n] for n in args.only}
    for name, prof in chosen.items():
        doc["variants"][name] = {v: cell(prof, v) for v in VALIDATIONS}
        print(name, {v: (c["within_5pct"], c["settings"]) for v, c in doc["variants"][name].items()}, flush=True)
    for name in COLD_NAMES:  # recorded by a --cold run
        if name in old["variants"] and name not in doc["variants"]:
            doc["variants"][name] = old["variants"][name]
    order = [*(n for n in doc["variants"] if n not in COLD_NAMES), *(n for n in COLD_NAMES if n in doc["variants"])]
    doc["variants"] = {n: doc["variants"][n] for n in order}
    print(markdown(doc))
    if args.write:
        OUT.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
