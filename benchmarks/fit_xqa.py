"""Fit XQA's time-model families (xqa, xqa_merge, xqa_sm90) on a GPU's XQA timings and write them into its packaged
profile, with the figures of head layouts the fit left out.

    python -m benchmarks.fit_xqa --gpu h100-sxm benchmarks/results/xqa-h100-sxm.jsonl.gz [--write]

The timings are ``benchmarks/measure_xqa.py``'s records (FlashInfer 0.7.2.post1's XQA through CUPTI and CUDA-graph
replay, TensorRT-LLM's multi-block count run on the same kernel). Only runs whose launch matched decodecalc's plan are
fitted (:func:`decodecalc.verify.backend_calibration.record_measurements`). The families are fitted three times with
a third of the head layouts left out and once on all (:func:`decodecalc.timemodel.backend_fit.calibrate_backends`);
a family is calibrated when its left-out median and 90th-percentile errors meet the profile goals. Without
``--write`` the figures are printed only.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
XQA_FAMILIES = ("xqa", "xqa_wide", "xqa_merge", "xqa_sm90", "xqa_sm90_merge")
XQA_KERNELS = ("xqa", "xqa-fp8", "trtllm-xqa")


def read_records(paths: list[Path]) -> list[dict[str, Any]]:
    out = []
    for p in paths:
        with gzip.open(p, "rt", encoding="utf-8") as fh:
            out += [json.loads(line) for line in fh if line.strip()]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+", type=Path)
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--write", action="store_true", help="write the families into decodecalc/profiles/<gpu>.yaml")
    ap.add_argument("--max-evals", type=int, default=1500)
    args = ap.parse_args()

    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.timemodel.backend_fit import calibrate_backends
    from decodecalc.timemodel.profile_sources import dump_profile, packaged_profile
    from decodecalc.timemodel.profile import profile_from_mapping
    from decodecalc.verify.backend_calibration import record_measurements
    from decodecalc.yamlio import safe_load

    gpu = resolve_gpu(args.gpu)
    records = read_records(args.records)
    ms = record_measurements(records, gpu)
    print(f"{len(records)} runs, {len(ms)} fitted (launch as planned)")
    base = packaged_profile(gpu.name)
    if base is None:
        raise SystemExit(f"Error: no packaged profile for {gpu.name}")
    fit = calibrate_backends(ms, base, cold=True, max_evals=args.max_evals, progress=print)
    for fam, rec in fit.families.items():
        print(f"{fam}: {rec['rows']} rows, {rec['layouts']} layouts; training median {rec['training']['median_abs_err']:.1%}"
              f" p90 {rec['training']['p90_abs_err']:.1%}; left out median {rec['left_out']['median_abs_err']:.1%} p90 "
              f"{rec['left_out']['p90_abs_err']:.1%}; calibrated {rec['calibrated']}")
    for key, rec in fit.expected_error.items():
        nl = rec.get("new_layout", {})
        print(f"expected error {key}: new layout median {nl.get('median_abs_err', float('nan')):.1%} p90 "
              f"{nl.get('p90_abs_err', float('nan')):.1%} over {nl.get('layouts')} layouts")
    if not args.write:
        return
    path = ROOT / "decodecalc" / "profiles" / f"{gpu.name}.yaml"
    data = safe_load(path.read_text())
    fams = fit.profile.to_mapping()["families"]
    for f in XQA_FAMILIES:
        if f in fit.families or f in fams:
            data["families"][f] = fams[f]
    info = data.setdefault("fit", {})
    uncal = [f for f in info.get("uncalibrated_families", []) if f not in XQA_FAMILIES]
    uncal += [f for f in XQA_FAMILIES if not fit.families.get(f, {}).get("calibrated")]
    info["uncalibrated_families"] = sorted(set(uncal))
    info["xqa_calibration"] = {**fit.record(), "source": f"benchmarks/fit_xqa.py on {len(ms)} XQA timings "
                               f"(benchmarks/measure_xqa.py; {', '.join(p.name for p in args.records)})"}
    dom = info.setdefault("backend_families", {}).setdefault("domain", {})
    dom.update({k: v for k, v in fit.domains.items() if k in XQA_KERNELS})
    kernels = info.setdefault("expected_error", {}).setdefault("kernels", {})
    kernels.update({k: v for k, v in fit.expected_error.items() if k.split("/")[0] in XQA_KERNELS})
    text = dump_profile(profile_from_mapping(data, origin=str(path)))
    path.write_text(text)
    print(f"wrote {path}; run tools/update_profile_cache.py")


if __name__ == "__main__":
    main()
