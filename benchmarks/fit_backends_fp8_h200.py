"""Fit the default backends' fp8-KV families (issue 18, item 2) on twelve head layouts and judge them on six that no
fit saw.

    python -m benchmarks.fit_backends_fp8_h200 [--write-profile]

Data: benchmarks/measure_backends_fp8_h200.py's H200 runs (fp8-backends-flashinfer-h200.jsonl.gz,
fp8-backends-fa3-h200.jsonl.gz): FlashInfer's CUDA-core and tensor-core decode and vLLM's FA3, each shape on a bf16
and an fp8 (e4m3) cache back to back, over FIT_LAYOUTS and UNSEEN_LAYOUTS (measure_backends_fp8_h200.py). Only runs
whose launch decodecalc's plan reproduces are used (the launchers decide the work: timemodel.backends).

What is fitted: the families an fp8 cache runs (timemodel.backends.flashinfer_family, fa3_family:
flashinfer_decode_fp8, flashinfer_tc_fp8, fa3_fwd_fp8 for FA3's one-MMA-warpgroup tiles, fa3_fwd_fp8_wide for its
d-256 tiles), each started from its bf16 family and fitted on the fp8 rows of FIT_LAYOUTS only; every other family
(the merge and combine kernels, which read fp32 partials either way) and the GPU's globals are held. Scored on the
fp8 rows of UNSEEN_LAYOUTS (whole head layouts left out, never a random split), beside:

* ``before``: the same rows predicted by the bf16 families with fp8 bytes (what ships without this fit);
* ``bf16``: the bf16 rows of the same run by the shipped bf16 families (most of these 18 layouts no bf16 fit saw);
* ``ratio``: the measured t(fp8) / t(bf16) of the same launch, per backend (a session's drift cancels in it).

The training rows also hold SHORT_DATA (chat-like steps on FIT_LAYOUTS); SWEEP_DATA (split settings other than the
engines' defaults) is scored only, for the recommended split. The backends' families have no residual map, so every
figure is the physics alone. A family whose left-out median
misses 5% or whose p90 misses 15% (fit_backends_h200's goals) is listed in the profile's uncalibrated_families;
issue 18's goals (3% / 8%) are reported beside. ``--write-profile`` puts the families, this record
(``fit.backend_fp8_families``) and the fp8 scopes of the three kernels' domains (``fit.kernel_domains``) into
decodecalc/profiles/h200.yaml.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.fit_backends_h200 import PROFILE, measurements_from
from benchmarks.measure_backends_fp8_h200 import FIT_LAYOUTS, UNSEEN_LAYOUTS
from decodecalc.timemodel import packaged_profile
from decodecalc.timemodel import accuracy
from decodecalc.timemodel.backend_fit import fp8_start, layout_of, main_family
from decodecalc.timemodel import fit as timefit
from decodecalc.timemodel.fit import Measurement, percentile, recommendation_quality
from decodecalc.timemodel.predict import launch_time_s
from decodecalc.timemodel.profile import CALIBRATION_GOAL_MEDIAN, CALIBRATION_GOAL_P90

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
DATA = (RESULTS / "fp8-backends-flashinfer-h200.jsonl.gz", RESULTS / "fp8-backends-fa3-h200.jsonl.gz")
#: chat-like steps on FIT_LAYOUTS under the engines' CUDA-graph plans (measure_backends_fp8_h200.py --short): training
#: data too, added after whole fp8 chat workloads (validate_backends_workload_h200.py --kv-cache-dtype fp8) came out
#: 8-13% fast with the families fitted on DATA alone
SHORT_DATA = (RESULTS / "fp8-backends-short-flashinfer-h200.jsonl.gz", RESULTS / "fp8-backends-short-fa3-h200.jsonl.gz")
#: validation only, never fitted on: FA3's num_splits 1-128 and FlashInfer tensor cores' fixed_split_size / disable_split_kv
#: on 47 fp8 shapes (capture_backends_h200.py --sweep --kv-cache-dtype fp8, 2026-12-04): is the recommended split right?
SWEEP_DATA = (RESULTS / "sweep-fp8-backends-h200.jsonl.gz",)
OUT = RESULTS / "fit-backends-fp8-h200.json"
#: per backend kernel, its fp8 families (fitted one at a time on their own rows)
FP8_FAMILIES = {"flashinfer": ("flashinfer_decode_fp8",), "flashinfer-tc": ("flashinfer_tc_fp8",),
                "fa3": ("fa3_fwd_fp8", "fa3_fwd_fp8_wide")}
#: fit_backends_h200's goals (a miss: uncalibrated) and issue 18's
GOAL_MEDIAN, GOAL_P90 = CALIBRATION_GOAL_MEDIAN, CALIBRATION_GOAL_P90
ISSUE_MEDIAN, ISSUE_P90 = accuracy.GOAL_MEDIAN, accuracy.GOAL_P90


def stats(prof: Any, ms: list[Measurement]) -> dict[str, float]:
    """Absolute relative errors of ``prof`` on ``ms`` (median, p90, max), the signed median and the share within 5%:
    the predicted time of every command (launch_time_s) against the measured one."""
    if not ms:
        return {"rows": 0}
    signed = [launch_time_s(m.work, prof) / m.time_s - 1 for m in ms]
    e = [abs(x) for x in signed]
    return {"rows": len(ms), "median_abs_err": round(percentile(e, 0.5), 4), "p90_abs_err": round(percentile(e, 0.9), 4),
            "max_abs_err": round(max(e), 4), "median_signed_err": round(statistics.median(signed), 4),
            "within_5": round(sum(x <= 0.05 for x in e) / len(e), 3)}


def fp8_ratios(ms: list[Measurement]) -> dict[str, float]:
    """Per backend kernel: the median measured t(fp8) / t(bf16) over the shapes timed on both caches."""
    by: dict[tuple[str, str, str], dict[int, float]] = {}
    for m in ms:
        by.setdefault((m.kernel, m.shape.key, m.variant), {})[m.shape.kv_bytes_per_element] = m.time_s
    out: dict[str, list[float]] = {}
    for (k, _, _), t in by.items():
        if 1 in t and 2 in t:
            out.setdefault(k, []).append(t[1] / t[2])
    return {k: round(statistics.median(v), 3) for k, v in sorted(out.items())}


def start_profile(train: list[Measurement], base: Any = None) -> Any:
    """``base`` (default: the shipped profile) with each fp8 family set to its bf16 family's numbers (FAMILY_FALLBACKS)
    and the HBM ceiling its fp8 training rows reached: the fit's start and the ``before`` model. The fp8 families
    ``base`` has are not read."""
    base = base if base is not None else packaged_profile("h200")
    assert base is not None
    return fp8_start(base, train)


def fit_families(fit_rows: list[Measurement], max_evals: int,
                 base: Any = None) -> tuple[Any, Any, dict[str, dict[str, Any]]]:
    """(start profile, fitted profile, per family its kernel, rows and loss): each fp8 family fitted alone on its
    own rows of ``fit_rows``, from ``base``'s bf16 families (default: the shipped profile's)."""
    before = start_profile(fit_rows, base)
    prof = before
    fitted: dict[str, dict[str, Any]] = {}
    for kernel, fams in FP8_FAMILIES.items():
        for fam in fams:
            rows = [m for m in fit_rows if m.kernel == kernel and main_family(m) == fam]
            if not rows:
                continue
            prof, loss = timefit.fit_families(rows, prof, families=[fam], restarts=2, max_evals=max_evals)
            fitted[fam] = {"kernel": kernel, "fit_rows": len(rows), "loss": round(loss, 5)}
            print(f"{fam}: {len(rows)} rows, loss {loss:.4f}", flush=True)
    return before, prof, fitted


def run(max_evals: int = 1500, base: Any = None) -> tuple[dict[str, Any], Any]:
    """The fit and its record: (record, fitted profile). ``base``: the profile whose bf16 families the fp8 ones start
    from (default: the shipped one; benchmarks/fit_backends_h200.py's rebuild passes the bf16 families it rebuilt)."""
    ms = measurements_from(DATA)
    short = [m for m in measurements_from(SHORT_DATA) if m.shape.kv_bytes_per_element == 1]
    fp8 = [m for m in ms if m.shape.kv_bytes_per_element == 1]
    bf16 = [m for m in ms if m.shape.kv_bytes_per_element != 1]
    fit_rows = [m for m in fp8 if layout_of(m) in FIT_LAYOUTS]
    unseen_rows = [m for m in fp8 if layout_of(m) in UNSEEN_LAYOUTS]
    # first without the short steps: how families fitted on 512-32,768-token shapes predict chat-like steps
    _, long_only, _ = fit_families(fit_rows, max_evals, base)
    before, prof, fitted = fit_families(fit_rows + short, max_evals, base)
    per_family: dict[str, Any] = {}
    uncal: list[str] = []
    for fam, rec in fitted.items():
        kern = rec["kernel"]
        tr = [m for m in fit_rows + short if m.kernel == kern and main_family(m) == fam]
        sh = [m for m in short if m.kernel == kern and main_family(m) == fam]
        te = [m for m in unseen_rows if m.kernel == kern and main_family(m) == fam]
        un = stats(prof, te)
        miss = bool(te) and (un["median_abs_err"] > GOAL_MEDIAN or un["p90_abs_err"] > GOAL_P90)
        if miss or not te:
            uncal.append(fam)
        per_family[fam] = {
            **rec, "training": stats(prof, tr), "unseen": un, "before_unseen": stats(before, te),
            "long_only_unseen": stats(long_only, te), "short_by_long_only": stats(long_only, sh),
            "short_training": stats(prof, sh),
            "calibrated": not miss and bool(te),
            "issue_goals_met": bool(te) and un["median_abs_err"] <= ISSUE_MEDIAN and un["p90_abs_err"] <= ISSUE_P90,
            "layouts": sorted({"%d:%d-d%d" % layout_of(m) for m in tr + te}),
        }
    bf16_stats = {k: {"fit_layouts": stats(prof, [m for m in bf16 if m.kernel == k and layout_of(m) in FIT_LAYOUTS]),
                      "unseen_layouts": stats(prof, [m for m in bf16 if m.kernel == k and layout_of(m) in UNSEEN_LAYOUTS])}
                  for k in FP8_FAMILIES}
    sweep = measurements_from(SWEEP_DATA)
    sweep_doc = {k: {"runs": stats(prof, [m for m in sweep if m.kernel == k]),
                     "recommendation": recommendation_quality(prof, [m for m in sweep if m.kernel == k]).get(k)}
                 for k in ("fa3", "flashinfer-tc")}
    domains = {k: {"group_sizes": sorted({m.shape.num_heads // m.shape.num_kv_heads for m in fp8 if m.kernel == k}),
                   "head_sizes": sorted({m.shape.head_size for m in fp8 if m.kernel == k})} for k in FP8_FAMILIES}
    doc = {
        "data": [p.name for p in DATA + SHORT_DATA], "rows": len(ms), "fp8_rows": len(fp8),
        "fit_rows": len(fit_rows) + len(short), "short_rows": len(short),
        "unseen_rows": len(unseen_rows),
        "fit_layouts": ["%d:%d-d%d" % x for x in FIT_LAYOUTS], "unseen_layouts": ["%d:%d-d%d" % x for x in UNSEEN_LAYOUTS],
        "goals": {"median": GOAL_MEDIAN, "p90": GOAL_P90, "issue_median": ISSUE_MEDIAN, "issue_p90": ISSUE_P90},
        "families": per_family, "bf16_families": bf16_stats, "fp8_over_bf16_measured": fp8_ratios(ms),
        "uncalibrated_families": sorted(uncal), "fp8_domains": domains, "sweep": sweep_doc,
        "params": {f: prof.families[f].as_dict() for f in fitted},
        "regime": "back-to-back (calls of one plan in a CUDA graph over rotating KV copies)",
        "map": "none (the backends' families have no residual map: physics only)",
    }
    return doc, prof


def markdown(doc: dict[str, Any]) -> str:
    """BENCHMARKS.md's table of the fp8 families (tests/test_backends_fp8.py checks it is the committed record's)."""
    def cell(r: dict[str, Any]) -> str:
        return f"{100 * r['median_abs_err']:.1f}% / {100 * r['p90_abs_err']:.1f}%" if r.get("rows") else "-"

    lines = ["| family | fit rows (of them short steps) | training | left-out layouts: rows | left out | without the short "
             "steps | bf16 families, fp8 bytes | short steps by the fit without them (signed median) | status |",
             "|---" * 9 + "|"]
    for fam, r in doc["families"].items():
        sh = r["short_by_long_only"]
        lines.append(f"| `{fam}` | {r['fit_rows']} ({r['short_training']['rows']}) | {cell(r['training'])} | "
                     f"{r['unseen']['rows']} | {cell(r['unseen'])} | {cell(r['long_only_unseen'])} | "
                     f"{cell(r['before_unseen'])} | {cell(sh)} ({100 * sh['median_signed_err']:+.1f}%) | "
                     f"{'calibrated' if r['calibrated'] else '**uncalibrated**'} |")
    return "\n".join(lines)


def write_profile(prof: Any, doc: dict[str, Any], dest: Path = PROFILE) -> None:
    """The shipped profile with the fp8 families, their record and the fp8 scopes of the three kernels' domains;
    everything else as the file has it."""
    from tools.update_profile_cache import as_written, write

    on_disk = as_written(dest)
    fams = {**on_disk.families, **{f: prof.families[f] for f in doc["params"]}}
    fit = dict(on_disk.fit)
    fit["backend_fp8_families"] = {
        "source": "benchmarks/fit_backends_fp8_h200.py on " + ", ".join(doc["data"]) + ": fitted on "
                  + ", ".join(doc["fit_layouts"]) + "; judged on " + ", ".join(doc["unseen_layouts"]),
        "unseen": {f: r["unseen"] for f, r in doc["families"].items()},
        "before_unseen": {f: r["before_unseen"] for f, r in doc["families"].items()},
    }
    old = [f for f in (fit.get("uncalibrated_families") or []) if f not in doc["params"]]
    fit["uncalibrated_families"] = sorted({*old, *doc["uncalibrated_families"]})
    kd = {k: dict(v) for k, v in (fit.get("kernel_domains") or {}).items()}
    for kernel, dom in doc["fp8_domains"].items():
        rec = kd.setdefault(kernel, {})
        rec["kv_cache_dtypes"] = ["bfloat16", "fp8", "fp8_e4m3"]
        rec["kv_cache_dtype_scopes"] = {"fp8": dom}
        rec["note"] = ("fp8: the layouts benchmarks/fit_backends_fp8_h200.py fitted and judged its families on "
                       "(fit.backend_fp8_families)")
    fit["kernel_domains"] = kd
    write(dest, dataclasses.replace(on_disk, families=fams, fit=fit))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write-profile", action="store_true")
    ap.add_argument("--max-evals", type=int, default=1500)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    doc, prof = run(args.max_evals)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    tmp.replace(args.out)
    for f, r in doc["families"].items():
        print(f"{f:22s} unseen layouts {r['unseen']['median_abs_err']:.1%} / {r['unseen']['p90_abs_err']:.1%} (fitted "
              f"without the short steps {r['long_only_unseen']['median_abs_err']:.1%} / "
              f"{r['long_only_unseen']['p90_abs_err']:.1%}; bf16 families {r['before_unseen']['median_abs_err']:.1%} / "
              f"{r['before_unseen']['p90_abs_err']:.1%}); short steps by the long-only fit "
              f"{r['short_by_long_only']['median_abs_err']:.1%} (signed {r['short_by_long_only']['median_signed_err']:+.1%})")
    print(json.dumps({"bf16": doc["bf16_families"], "ratio": doc["fp8_over_bf16_measured"],
                      "uncalibrated": doc["uncalibrated_families"]}, indent=1))
    print(markdown(doc))
    if args.write_profile:
        write_profile(prof, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
