"""Can the time model learn an fp8 KV cache? Own families for the fp8 launches, fitted with each head layout left out.

    python -m benchmarks.leaveout_fp8 [--out benchmarks/results/leaveout-fp8-h200.json]

The data: benchmarks/measure_kv_formats_h200.py's block-16 timings (kv-formats-h200.json and, where it exists,
kv-formats-h200-extra.json). The KV-streaming kernels of every fp8 launch (vLLM's 2D and 3D kernels, SGLang's grouped
stage 1) get families of their own, started from the packaged bf16 ones; ``fit_profile`` (occupancy search included,
the GPU's globals fixed) fits them on the fp8 rows of all layouts but one, and only those families are kept (the merge
kernels read fp32 partials, the same in both formats). The left-out layout's fp8 rows are then scored by the physics
alone (the map has no fp8 cells), beside the unfitted model (bf16 families, fp8 bytes) and the bf16 physics on the same
shapes. The SGLang family fitted on every layout is written out (``sglang_stage1_fp8``) and is the packaged profile's
(decodecalc/profiles/h200.yaml; tests/test_kv_formats.py checks they agree); benchmarks/validate_fp8.py scores it on
six layouts no fit saw. vLLM's fp8 families are not adopted: left out, they do little better than none.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

from decodecalc.timemodel.fit import fit_profile, measurements_from_rows
from decodecalc.timemodel.predict import model_launch_time_s
from decodecalc.timemodel.profile_sources import packaged_profile

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
#: the thorough batches on twelve layouts, and (SGLang only) four short-context batches on the same twelve
#: (measure_kv_formats_h200.py --short: the regime whole workloads found the first family wrong in)
DATA = (RESULTS / "kv-formats-h200.json", RESULTS / "kv-formats-h200-extra.json", RESULTS / "kv-formats-h200-short.json")
KV_FAMILIES = ("vllm_2d", "vllm_3d", "sglang_stage1")


def _fp8_families(m: Any) -> Any:
    ks = tuple(dataclasses.replace(k, family=k.family + "_fp8") if k.family in KV_FAMILIES else k for k in m.work.kernels)
    return dataclasses.replace(m, work=dataclasses.replace(m.work, kernels=ks))


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    """A timing's shape and launch (batch and longest length: the thorough and short batches share batch sizes)."""
    return r["model"], r["batch"], r["seq_len"], r["variant"], r.get("max_kv_splits")


def _stats(errs: list[float]) -> dict[str, float]:
    a = sorted(abs(e) for e in errs)
    return {"rows": len(a), "median": statistics.median(a), "p90": a[min(len(a) - 1, int(0.9 * len(a)))],
            "within_5": sum(e <= 0.05 for e in a) / len(a)}


def run() -> dict[str, Any]:
    rows = []
    for path in DATA:
        if path.exists():
            rows += [dict(r, short=path.name.endswith("-short.json")) for r in json.loads(path.read_text())["cases"]
                     if r["status"] == "ok" and r["block_size"] == 16]
    base = dataclasses.replace(packaged_profile("h200"), residuals=None)
    fams = dict(base.families)
    for f in KV_FAMILIES:  # every fit starts from the bf16 family (not the packaged fp8 one, fitted on all layouts)
        fams[f + "_fp8"] = fams[f]
    start = dataclasses.replace(base, families=fams)
    ms = measurements_from_rows(rows)
    fp8 = [(r, _fp8_families(m)) for r, m in zip(rows, ms) if r["kv_cache_dtype"] == "fp8"]
    unfitted = {id(m): m for r, m in zip(rows, ms) if r["kv_cache_dtype"] == "fp8"}
    plain = [m for r, m in zip(rows, ms) if r["kv_cache_dtype"] == "fp8"]
    bf16 = {_key(r): m for r, m in zip(rows, ms) if r["kv_cache_dtype"] == "bfloat16"}
    layouts = sorted({r["model"] for r, _ in fp8})
    folds = []
    for engine in ("vllm", "sglang"):
        mine = [(r, m, p) for (r, m), p in zip(fp8, plain) if r["variant"].startswith(engine)]
        for left in layouts:
            train = [m for r, m, _ in mine if r["model"] != left]
            test = [(r, m, p) for r, m, p in mine if r["model"] == left]
            fitted = fit_profile(train, start, fit_globals=False, search_occupancy=True, restarts=2, max_evals=2000)
            keep = dict(start.families)
            keep.update({f + "_fp8": fitted.families[f + "_fp8"] for f in KV_FAMILIES if f + "_fp8" in fitted.families})
            prof = dataclasses.replace(start, families=keep)
            folds.append({
                "engine": engine, "left_out": left, "train_rows": len(train),
                "fitted": _stats([model_launch_time_s(m.work, prof) / m.time_s - 1 for _, m, _ in test]),
                "unfitted": _stats([model_launch_time_s(p.work, start) / p.time_s - 1 for _, _, p in test]),
                "bf16_same_shapes": _stats([model_launch_time_s(b.work, base) / b.time_s - 1 for b in
                                            (bf16[_key(r)] for r, _, _ in test if _key(r) in bf16)]),
                **({"short": _stats([model_launch_time_s(m.work, prof) / m.time_s - 1 for r, m, _ in test
                                     if r.get("short")])} if any(r.get("short") for r, _, _ in test) else {}),
            })
            print(f"{engine} {left}: fitted {folds[-1]['fitted']['median']:.3f} / {folds[-1]['fitted']['p90']:.3f}",
                  flush=True)
    del unfitted
    # the family a profile would ship: SGLang's fp8 stage 1 fitted on every layout's fp8 rows
    every = [m for r, m in fp8 if r["variant"].startswith("sglang")]
    shipped = fit_profile(every, start, fit_globals=False, search_occupancy=True, restarts=2, max_evals=2000)
    fam = shipped.families["sglang_stage1_fp8"]
    return {"data": [p.name for p in DATA if p.exists()], "layouts": layouts, "folds": folds,
            "sglang_stage1_fp8": {"rows": len(every), "family": fam.as_dict()}}


def markdown(res: dict[str, Any]) -> str:
    lines = ["| engine | left out | rows | fp8 families fitted: median | p90 | within 5% | unfitted: median | p90 | "
             "bf16, same shapes: median | p90 | fitted, short-context rows: median | p90 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in res["folds"]:
        a, u, b = f["fitted"], f["unfitted"], f["bf16_same_shapes"]
        sh = f.get("short")
        lines.append(f"| {f['engine']} | {f['left_out']} | {a['rows']} | {100 * a['median']:.1f}% | {100 * a['p90']:.1f}% | "
                     f"{100 * a['within_5']:.0f}% | {100 * u['median']:.1f}% | {100 * u['p90']:.1f}% | "
                     f"{100 * b['median']:.1f}% | {100 * b['p90']:.1f}% | "
                     + (f"{100 * sh['median']:.1f}% | {100 * sh['p90']:.1f}% |" if sh else "- | - |"))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=RESULTS / "leaveout-fp8-h200.json")
    args = ap.parse_args()
    res = run()
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=1) + "\n")
    tmp.replace(args.out)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
