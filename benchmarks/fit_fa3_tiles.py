"""FA3's persistent tiles: choose ``fa3_fwd``'s ``tile_overhead_s`` on the training captures (issue 18).

vLLM's FA3 runs varlen decode on its dynamic persistent tile scheduler: one CTA per SM takes tile after tile. The
time model charged every tile a whole program overhead (5.1 us, the CTA's prologue and epilogue), which over-predicts
steps of many short tiles: whole chat workloads by 21-42% (BENCHMARKS.md, "Other backends on whole workloads").
With ``tile_overhead_s`` a CTA pays its prologue once and each further tile less (its next tile's loads overlap the
last one's epilogue). This script picks that one number by the training loss (mean squared log error) of the FA3
captures fit_backends_h200.py trains on (the same stable-hash split; every other FA3 number as shipped), and reports
the held-out captures, the recommended-split quality and, never used for the choice, the workload totals.

    python -m benchmarks.fit_fa3_tiles [--write-profile]

``--write-profile`` puts the chosen value and the held-out figures into decodecalc/profiles/h200.yaml.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import re
import subprocess
import sys
from pathlib import Path

from benchmarks.fit_backends_h200 import held_out, measurements_from
from decodecalc.timemodel import packaged_profile
from decodecalc.timemodel.fit import error_summary, log_loss, recommendation_quality

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
PROFILE = ROOT / "decodecalc" / "profiles" / "h200.yaml"
#: the FA3 captures fit_backends_h200.py trains on, and steps of many short tiles captured for this choice
#: (capture_backends_h200.py --short-tiles: chat-like batches on four head layouts no workload validation uses)
DATA = ("capture-backends-h200.jsonl", "sweep-backends-h200.jsonl", "capture-fa3-short-tiles-h200.jsonl")
#: what fit.backend_families.source says of this script's numbers (no colon-space: a plain YAML scalar)
SOURCE_NOTE = ("; fa3_fwd.tile_overhead_s and the fa3 held-out record from benchmarks/fit_fa3_tiles.py (with "
               "capture-fa3-short-tiles-h200.jsonl)")
#: the values tried (seconds): 0 is the old model (every tile a whole program overhead)
GRID = tuple(round(k * 0.25e-6, 12) for k in range(0, 19))


def with_tiles(prof, toh: float):
    fams = dict(prof.families)
    fams["fa3_fwd"] = dataclasses.replace(fams["fa3_fwd"], tile_overhead_s=toh)
    return dataclasses.replace(prof, families=fams)


def loss(prof, ms) -> float:
    """The backend fit's own loss (soft-L1 on log time, decodecalc.timemodel.fit)."""
    return log_loss(prof, ms)


def workload_errors(prof) -> list[float]:
    """FA3's error on each whole workload of validate_backends_workload_h200.py under ``prof`` (validation only)."""
    from benchmarks.validate_backends_workload_h200 import compare

    with contextlib.redirect_stdout(io.StringIO()):
        got = compare(RESULTS / "validate-backends-workload-h200.json",
                      [RESULTS / t for t in ("validate_tune_h200_in_graph.json", "validate_tune_h200_top0_chat.json",
                                             "validate_tune_h200_top0_405b.json")], profile=prof)
    return [round(r["totals"]["fa3"]["error"], 4) for r in got["rows"]]


def choose() -> dict:
    caps = [m for m in measurements_from([RESULTS / p for p in DATA[:2]]) if m.kernel == "fa3"]
    short = measurements_from([RESULTS / DATA[2]])
    train = [m for m in caps + short if not held_out(m.shape.key)]
    test_caps = [m for m in caps if held_out(m.shape.key)]
    test_short = [m for m in short if held_out(m.shape.key)]
    test = test_caps + test_short
    base = with_tiles(packaged_profile("h200"), 0.0)
    rows = [{"tile_overhead_s": t, "training_loss": round(loss(with_tiles(base, t), train), 5)} for t in GRID]
    best = min(rows, key=lambda r: r["training_loss"])["tile_overhead_s"]
    out = {"train_rows": len(train), "heldout_rows": len(test), "grid": rows, "chosen_tile_overhead_s": best}
    for name, t in (("without", 0.0), ("chosen", best)):
        prof = with_tiles(base, t)
        out[name] = {"training": error_summary(prof, train), "heldout": error_summary(prof, test),
                     "heldout_captures": error_summary(prof, test_caps),
                     "heldout_short_tiles": error_summary(prof, test_short),
                     "recommendation_heldout": recommendation_quality(prof, test_caps).get("fa3"),
                     "workload_errors": workload_errors(prof)}
    return out


def write_profile(out: dict) -> None:
    """The chosen value into fa3_fwd's block and the held-out records of fit.backend_families (the YAML's text
    edited in place: every other number stays as written), then the parsed copy."""
    text = PROFILE.read_text(encoding="utf-8")
    block = re.search(r"\n  fa3_fwd:\n(?:    .*\n)+", text)
    assert block is not None
    body = re.sub(r"    tile_overhead_s: .*\n", "", block.group(0))
    body += f"    tile_overhead_s: {out['chosen_tile_overhead_s']:.4e}\n"  # YAML 1.1 floats need the dot
    text = text[:block.start()] + body + text[block.end():]
    h = out["chosen"]["heldout_captures"]  # the record fit_backends_h200.py writes: its held-out captures
    text = re.sub(r"      fa3: \{rows: \d+, median_abs_err: [0-9.]+, p90_abs_err: [0-9.]+, max_abs_err: [0-9.]+\}",
                  f"      fa3: {{rows: {h['rows']}, median_abs_err: {h['median_abs_err']:.4f}, "
                  f"p90_abs_err: {h['p90_abs_err']:.4f}, max_abs_err: {h['max_abs_err']:.4f}}}", text, count=1)
    r = out["chosen"]["recommendation_heldout"]
    text = re.sub(r"      fa3: \{shapes: \d+, geomean: [0-9.]+, worst: [0-9.]+, worst_shape: '[^']*', within_1_10: [0-9.]+\}",
                  f"      fa3: {{shapes: {r['shapes']}, geomean: {r['geomean']}, worst: {r['worst']}, "
                  f"worst_shape: '{r['worst_shape']}', within_1_10: {r['within_1_10']}}}", text, count=1)
    if SOURCE_NOTE not in text:  # the fit record names the script that set these numbers
        text = text.replace("sweep-fa2-h200.jsonl\n    heldout:", f"sweep-fa2-h200.jsonl{SOURCE_NOTE}\n    heldout:", 1)
    tmp = PROFILE.with_suffix(".yaml.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(PROFILE)
    subprocess.run([sys.executable, str(ROOT / "tools" / "update_profile_cache.py")], check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write-profile", action="store_true")
    args = ap.parse_args()
    out = choose()
    print(json.dumps(out, indent=1, default=str))
    (RESULTS / "fit-fa3-tiles-h200.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
    if args.write_profile:
        write_profile(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
