"""How well decodecalc predicts a GPU before and after `calibrate` on it: a calibration's saved timings scored by
the profile decodecalc uses there without one, and by the profiles named (issue 18: "on any GPU a user calibrates").

    python -m benchmarks.score_gpu_transfer M.json.gz [--profile NAME=P.yaml ...] [--json OUT]

``M.json.gz``: what ``calibrate --save-measurements`` wrote on that GPU (its ``gpu`` field names it): the plan's
shape timings (``cases``), the reference workloads' steps (``map_steps``) and the compiled backends' runs
(``backend_cases``). Each is scored as |predicted / measured - 1| per kernel (median, p90, share within 5%) by

* ``shipped``: the packaged profile of that GPU, where one ships (the H200's; the H100 SXM's since 2026-12-06, fitted
  on the one-command run's timings, so for H100 timings it is in sample or nearly);
* ``datasheet (uncalibrated)``, for every GPU but the H200: the datasheet fallback, the H200's fitted physics with this
  GPU's SM count and bandwidth, sm_90 occupancies for every sm_90 part. None of these timings was seen by its fit:
  this is the figure of a GPU no fit saw;
* each ``--profile NAME=P.yaml``: for the run's own profile these timings are its fit's data (in sample; its backend
  families' out-of-fold figures are in its ``fit.backend_calibration``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import load_profile_file, packaged_profile
from decodecalc.timemodel.calibration_fit import workload_measurements
from decodecalc.timemodel.fit import abs_pct_errors, measurements_from_rows, percentile
from decodecalc.timemodel.profile_sources import DATASHEET_SOURCE_GPU, datasheet_profile

ROOT = Path(__file__).resolve().parents[1]


def load(path: Path) -> dict[str, Any]:
    """A saved calibration, read as `calibrate --from-measurements` reads one (its limits; .gz by name)."""
    from decodecalc.limits import MAX_MEASUREMENTS_BYTES, MAX_MEASUREMENTS_VALUES
    from decodecalc.yamlio import load_json_file

    return load_json_file(path, "calibration measurements", max_bytes=MAX_MEASUREMENTS_BYTES,
                          max_values=MAX_MEASUREMENTS_VALUES)


def groups(data: dict[str, Any], gpu: Any) -> dict[str, list[Any]]:
    """The run's timings as measurements, by what they are: shapes and map steps by engine kernel, backends by path."""
    from decodecalc.verify.backend_calibration import record_measurements

    out: dict[str, list[Any]] = {}
    for m in measurements_from_rows(data.get("cases") or [], num_sms=gpu.num_sms):
        out.setdefault(f"shapes: {m.kernel}", []).append(m)
    for doc in data.get("map_steps") or []:
        for m in workload_measurements(doc):
            out.setdefault(f"map steps: {m.kernel}", []).append(m)
    for m in record_measurements(data.get("backend_cases") or [], gpu):
        out.setdefault(f"backends: {m.kernel}", []).append(m)
    return out


def figure(errs: Sequence[float]) -> dict[str, Any]:
    """Median, p90 and share within 5% of |predicted / measured - 1| (fit.percentile, as error_summary takes them)."""
    return {"timings": len(errs), "median_abs_err": round(percentile(errs, 0.5), 4),
            "p90_abs_err": round(percentile(errs, 0.9), 4),
            "within_5pct": round(sum(e <= 0.05 for e in errs) / len(errs), 4)}


def score(profile: Any, ms: Sequence[Any]) -> dict[str, Any]:
    return figure(abs_pct_errors(profile, ms))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("measurements", type=Path)
    ap.add_argument("--profile", action="append", default=[], metavar="NAME=YAML")
    ap.add_argument("--json", type=Path, help="also write the scores here")
    args = ap.parse_args(argv)
    data = load(args.measurements)
    gpu = resolve_gpu(str(data.get("gpu") or "h200"))
    base = packaged_profile(gpu.name)
    profiles = {"shipped": base} if base is not None else {}
    if gpu.name != DATASHEET_SOURCE_GPU:  # the transfer of the H200's physics: what a GPU no fit saw gets
        profiles["datasheet (uncalibrated)"] = datasheet_profile(gpu)
    for spec in args.profile:
        name, _, path = spec.partition("=")
        if not path:
            raise SystemExit(f"Error: --profile {spec!r}; expected NAME=YAML")
        profiles[name] = load_profile_file(Path(path))
    by = groups(data, gpu)
    doc = {"gpu": gpu.name, "device": data.get("device_name"), "source": str(args.measurements),
           "profiles": {n: (p.source or p.path or "") for n, p in profiles.items()},
           "scores": {g: {n: score(p, ms) for n, p in profiles.items()} for g, ms in by.items()}}
    print(f"{gpu.name} ({doc['device']}): |predicted / measured - 1|, median / p90 (share within 5%)")
    print("| timings | n | " + " | ".join(profiles) + " |")
    print("|---" * (2 + len(profiles)) + "|")
    for g, cells in doc["scores"].items():
        n = next(iter(cells.values()))["timings"]
        print(f"| {g} | {n} | " + " | ".join(f"{c['median_abs_err']:.1%} / {c['p90_abs_err']:.1%} ({c['within_5pct']:.0%})"
                                            for c in cells.values()) + " |")
    if args.json:
        from decodecalc.commands.output import write_atomic

        write_atomic(args.json, json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
