"""Fit the time-model families of the default backends (FlashInfer CUDA-core / tensor-core decode and their
merge kernel, FA3 and its combine kernel, FlashMLA and its combine kernel) to the H200 timings of
benchmarks/capture_backends_h200.py, and report their errors on shapes the fit never saw.

    python -m benchmarks.fit_backends_h200 [--write-profile]
    python -m benchmarks.fit_backends_h200 --refit flashinfer [--write-profile]

Data: benchmarks/results/capture-backends-h200.jsonl (default plans, eager and CUDA-graph),
sweep-backends-h200.jsonl (FA3 num_splits 1-128, FlashInfer tensor cores' fixed_split_size / disable_split_kv),
capture-flashmla-h200-run2.jsonl (FlashMLA, 252 more shapes) and FA2's capture-fa2-h200.jsonl (paged),
capture-fa2-h200-contiguous.jsonl and sweep-fa2-h200.jsonl (num_splits 1-128).
The work of every run comes from the launcher's plan for that run (decodecalc.timemodel.backends); the
existing families and the GPU-wide numbers of decodecalc/profiles/h200.yaml are kept as they are
(launch overhead, idle-program cost and achievable HBM bandwidth are not refitted).

Shapes are split by a stable hash: a quarter is held out; the shipped parameters are the ones fitted on the
other three quarters, so the held-out figures describe what ships. A family whose held-out median error
misses 5% or whose 90th percentile misses 15% is listed in the profile's fit.uncalibrated_families (compare
then marks its time '~' and predicted_calibrated false).

``--refit KERNEL`` refits only that kernel's main family, from its shipped values on the same training rows, every
other family as shipped, and updates that kernel's entries of the record and of the profile's
``fit.backend_families`` (how ``flashinfer_decode`` followed the CUDA-core step cost of 2026-12-04,
timemodel.backends.cuda_core_step_factor, without refitting FA3's tile overhead of benchmarks/fit_fa3_tiles.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from pathlib import Path

from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import KERNEL_FAMILIES, packaged_profile
from decodecalc.timemodel.backend_fit import BACKEND_OCCUPANCY, NEUTRAL_BACKEND_FAMILY, hbm_ceilings
from decodecalc.verify.backend_calibration import record_measurements
from decodecalc.timemodel.backends import BACKEND_KERNELS
from decodecalc.timemodel.fit import (Measurement, error_summary, fit_families, fit_profile,
                                      recommendation_quality)
from decodecalc.timemodel.profile import CALIBRATION_GOAL_MEDIAN, CALIBRATION_GOAL_P90, FamilyParams
from decodecalc.verify import profiler as P

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
DATA = (RESULTS / "capture-backends-h200.jsonl", RESULTS / "sweep-backends-h200.jsonl",
        RESULTS / "capture-flashmla-h200-run2.jsonl", RESULTS / "capture-fa2-h200.jsonl",
        RESULTS / "capture-fa2-h200-contiguous.jsonl", RESULTS / "sweep-fa2-h200.jsonl")
OUT = RESULTS / "timemodel-backends-h200.json"
PROFILE = ROOT / "decodecalc" / "profiles" / "h200.yaml"
NEW_FAMILIES = ("flashinfer_decode", "flashinfer_tc", "flashinfer_merge", "fa3_fwd", "fa3_combine", "flashmla_fwd",
                "flashmla_combine", "fa2_fwd", "fa2_fwd_plain", "fa2_combine")
OCCUPANCY = BACKEND_OCCUPANCY
GOAL_MEDIAN, GOAL_P90, GOAL_PICK = CALIBRATION_GOAL_MEDIAN, CALIBRATION_GOAL_P90, 1.15


def held_out(key: str, fraction: float = 0.25) -> bool:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < fraction


def measurements() -> list[Measurement]:
    return measurements_from(DATA)


def measurements_from(paths) -> list[Measurement]:
    """The timed runs of capture JSONL files whose launch the model reproduces, with their work (calibrate's reading
    of a run: decodecalc.verify.backend_calibration.record_measurement)."""
    gpu = resolve_gpu("h200")
    return [m for path in map(Path, paths) for m in record_measurements(P.read_capture_records(path), gpu)]


_START = NEUTRAL_BACKEND_FAMILY
#: starting points where _START lies far from the optimum (the simplex otherwise stops at a clamp): FlashMLA's
#: iteration is a 72 KiB latent block that one CTA takes ~2 us for (its captured kernel durations)
_START_BY_FAMILY = {"flashmla_fwd": dict(latency_s=1.5e-6, program_bandwidth_bytes_per_s=400e9,
                                         sm_bandwidth_bytes_per_s=400e9, program_overhead_s=3e-6)}


def measured_domains(ms: list[Measurement]) -> dict:
    """Per kernel, the shapes its timings cover (timemodel.domain keys): compare's prediction for a shape outside
    them is marked uncalibrated. All runs: bf16 queries and KV, one query token, full-attention layers."""
    from decodecalc.specs.models import resolve_model

    out: dict = {}
    for k in BACKEND_KERNELS:
        sub = [m for m in ms if m.kernel == k]
        if sub:
            out[k] = {"dtypes": ["bfloat16"], "kv_cache_dtypes": ["bfloat16"],
                      "head_sizes": sorted({m.shape.head_size for m in sub}),
                      "group_sizes": sorted({m.shape.num_heads // m.shape.num_kv_heads for m in sub}),
                      "mla": any(resolve_model(m.model).is_mla for m in sub)}
    return out


def family_stats(prof, ms: list[Measurement]) -> dict:
    out = {}
    for k in BACKEND_KERNELS:
        sub = [m for m in ms if m.kernel == k]
        if sub:
            out[k] = {key: round(v, 4) for key, v in error_summary(prof, sub).items()}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write-profile", action="store_true")
    ap.add_argument("--max-evals", type=int, default=1500)
    ap.add_argument("--refit", choices=sorted(REFIT_FAMILY), help="refit only this kernel's main family (above)")
    args = ap.parse_args()
    if args.refit:
        return refit(args.refit, args.max_evals, args.write_profile)
    ms = measurements()
    train = [m for m in ms if not held_out(m.shape.key)]
    test = [m for m in ms if held_out(m.shape.key)]
    base = packaged_profile("h200")
    assert base is not None
    fams = {k: v for k, v in base.families.items() if k not in NEW_FAMILIES}
    for f, bw in hbm_ceilings(train).items():  # each family's achievable HBM bandwidth: what its kernels reached
        fams[f] = FamilyParams(**{**_START, **_START_BY_FAMILY.get(f, {}), "max_programs_per_sm": OCCUPANCY.get(f, 4),
                                  "hbm_bandwidth_bytes_per_s": bw})
    base = dataclasses.replace(base, families=fams)
    # both FlashInfer paths run the same merge kernel: fit them as one group, so that its family is fitted once
    joint = [dataclasses.replace(m, kernel="flashinfer") if m.kernel == "flashinfer-tc" else m for m in train]
    prof = fit_profile(joint, base, occupancy=OCCUPANCY, search_occupancy=False, fit_globals=False, restarts=2,
                       max_evals=args.max_evals, progress=lambda s: print(s, flush=True))
    # then each FlashInfer main family alone on its own rows, the shared merge family held: the tensor-core rows
    # (three times as many) no longer pull the CUDA-core kernel's numbers, nor the other way round
    for kernel, family in (("flashinfer-tc", "flashinfer_tc"), ("flashinfer", "flashinfer_decode")):
        rows = [m for m in train if m.kernel == kernel]
        if rows:
            prof, v = fit_families(rows, prof, families=[family], restarts=2, max_evals=args.max_evals)
            print(f"{family} alone: {len(rows)} rows, loss {v:.4f}", flush=True)
    heldout = family_stats(prof, test)
    training = family_stats(prof, train)
    picks = recommendation_quality(prof, test)
    picks_train = recommendation_quality(prof, train)
    uncal = []
    for k, st in heldout.items():
        if st["median_abs_err"] > GOAL_MEDIAN or st["p90_abs_err"] > GOAL_P90:
            uncal += [f for f in KERNEL_FAMILIES[k] if f != "flashinfer_merge"]
    doc = {
        "data": [p.name for p in DATA], "rows": len(ms), "train_rows": len(train), "heldout_rows": len(test),
        "heldout_shapes": len({m.shape.key for m in test}), "goals": {"median": GOAL_MEDIAN, "p90": GOAL_P90,
                                                                        "pick_worst": GOAL_PICK},
        "heldout": heldout, "training": training, "recommendation_heldout": picks, "recommendation_training": picks_train,
        "uncalibrated_families": sorted(set(uncal)), "domain": measured_domains(ms),
        "families": {f: prof.families[f].as_dict() for f in NEW_FAMILIES if f in prof.families},
    }
    OUT.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(json.dumps({"heldout": heldout, "recommendation_heldout": picks, "uncalibrated": doc["uncalibrated_families"]},
                     indent=1))
    if args.write_profile:
        write_profile(prof, doc)
    return 0


#: the kernels --refit takes, and the family each one's main kernel runs on a bf16 cache
REFIT_FAMILY = {"flashinfer": "flashinfer_decode", "flashinfer-tc": "flashinfer_tc", "fa3": "fa3_fwd"}


def refit(kernel: str, max_evals: int, write: bool) -> int:
    """``--refit``: ``kernel``'s main family refitted from the shipped values on its training rows; the record's and
    (with ``write``) the profile's entries of that kernel replaced, everything else kept."""
    family = REFIT_FAMILY[kernel]
    ms = [m for m in measurements() if m.kernel == kernel]
    train = [m for m in ms if not held_out(m.shape.key)]
    test = [m for m in ms if held_out(m.shape.key)]
    shipped = packaged_profile("h200")
    assert shipped is not None
    before = family_stats(shipped, test)[kernel]
    prof, loss = fit_families(train, shipped, families=[family], restarts=2, max_evals=max_evals)
    heldout = family_stats(prof, test)[kernel]
    print(f"{family}: {len(train)} training rows, loss {loss:.4f}; held out ({len(test)}): "
          f"{before['median_abs_err']:.1%} / {before['p90_abs_err']:.1%} -> "
          f"{heldout['median_abs_err']:.1%} / {heldout['p90_abs_err']:.1%}", flush=True)
    doc = json.loads(OUT.read_text())
    doc["heldout"][kernel] = heldout
    doc["training"][kernel] = family_stats(prof, train)[kernel]
    pick = recommendation_quality(prof, test).get(kernel)
    if pick is not None:
        doc["recommendation_heldout"][kernel] = pick
    doc["families"][family] = prof.families[family].as_dict()
    doc.setdefault("refits", {})[family] = {"from": "the shipped values", "held_out_before": before,
                                            "training_rows": len(train), "loss": round(loss, 5)}
    tmp = OUT.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    tmp.replace(OUT)
    if write:
        from tools.update_profile_cache import as_written, write as write_file

        on_disk = as_written(PROFILE)
        fit = dict(on_disk.fit)
        rec = dict(fit["backend_families"])
        rec["heldout"] = {**rec["heldout"], kernel: heldout}
        if pick is not None:
            rec["recommendation_heldout"] = {**rec["recommendation_heldout"], kernel: pick}
        note = f"; {family} refitted by benchmarks/fit_backends_h200.py --refit {kernel}"
        rec["source"] = rec["source"] if note in rec["source"] else rec["source"] + note
        fit["backend_families"] = rec
        fams = {**on_disk.families, family: prof.families[family]}
        write_file(PROFILE, dataclasses.replace(on_disk, families=fams, fit=fit))
    return 0


def write_profile(prof, doc: dict, dest: Path | None = None) -> None:
    """The shipped H200 profile with the new families and their fit statistics (``fit.backend_families``) put in;
    every other family, fit entry and the residual map stay as the file has them."""
    from tools.update_profile_cache import as_written, write

    dest = dest or PROFILE
    on_disk = as_written(dest)
    fams = {**on_disk.families, **{f: prof.families[f] for f in NEW_FAMILIES}}
    fit = dict(on_disk.fit)  # replaced in place: the file's order of entries stays
    fit["backend_families"] = {"source": "benchmarks/fit_backends_h200.py on " + ", ".join(doc["data"]),
                               "heldout": doc["heldout"], "recommendation_heldout": doc["recommendation_heldout"],
                               "domain": doc["domain"]}
    # other families' entries (a Triton family another fit marked) stay
    old = on_disk.fit.get("uncalibrated_families") or []
    uncal = sorted({*(f for f in old if f not in NEW_FAMILIES), *doc["uncalibrated_families"]})
    if uncal:
        fit["uncalibrated_families"] = uncal
    else:
        fit.pop("uncalibrated_families", None)
    write(dest, dataclasses.replace(on_disk, families=fams, fit=fit))

if __name__ == "__main__":
    raise SystemExit(main())
