"""Fit the time-model families of the default backends (FlashInfer CUDA-core / tensor-core decode and their
merge kernel, FA3 and its combine kernel, FlashMLA and its combine kernel) to the H200 timings of
benchmarks/capture_backends_h200.py, and report their errors on shapes the fit never saw.

    python -m benchmarks.fit_backends_h200 --check      # the shipped backend families rebuilt (~25 s): same bytes?
    python -m benchmarks.fit_backends_h200 --rebuild    # ... and written (profile and both fit records)
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

What ships is not one run of this script from the neutral start but the chain of runs that made it, and ``--rebuild``
(``--check``: into a scratch copy, compared byte for byte) replays that chain from committed data alone (:func:`chain`):

1. FlashMLA's and FA2's families fitted from the neutral start, as above (today's code gives the shipped bytes);
2. FlashInfer's and FA3's families start from START (benchmarks/results/backend-fit-start-h200.json): this script's
   all-family fit at commit be2be5f, whose work model for these two kernels today's code no longer has (FA3's
   persistent tiles and FlashInfer's CUDA-core step cost came later), so from the neutral start it fits other numbers;
   the file says how to re-run that commit's fit and get its numbers again;
3. ``fa3_fwd.tile_overhead_s`` chosen on FA3's training captures and short-tile steps as benchmarks/fit_fa3_tiles.py
   chooses it (its grid, the training loss);
4. ``flashinfer_decode`` refitted from there on its training rows (``--refit flashinfer``);
5. the fp8 families fitted from these bf16 families (benchmarks/fit_backends_fp8_h200.py).

The held-out scores, the recommended-split quality and the domains are then recomputed from the data, and both records
(timemodel-backends-h200.json, fit-backends-fp8-h200.json) rewritten from the same run. tests/test_profile_rebuild.py
checks the bytes. The plain run (no --rebuild) is step 1 for every kernel: what today's code fits from the neutral
start, not what ships (it rewrites timemodel-backends-h200.json; --rebuild restores it). A new step (a ``--refit``, a
new tile choice) goes into :func:`chain` too, or --check fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from pathlib import Path

from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import KERNEL_FAMILIES, packaged_profile
from decodecalc.timemodel.backend_fit import BACKEND_OCCUPANCY, FP8_FAMILIES, NEUTRAL_BACKEND_FAMILY, hbm_ceilings
from decodecalc.verify.backend_calibration import record_measurements
from decodecalc.timemodel.backends import BACKEND_KERNELS
from decodecalc.timemodel.fit import (Measurement, error_summary, fit_families, fit_profile,
                                      recommendation_quality)
from decodecalc.timemodel.profile import CALIBRATION_GOAL_MEDIAN, CALIBRATION_GOAL_P90, FamilyParams, TimeProfile
from decodecalc.verify import profiler as P

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
DATA = (RESULTS / "capture-backends-h200.jsonl", RESULTS / "sweep-backends-h200.jsonl",
        RESULTS / "capture-flashmla-h200-run2.jsonl", RESULTS / "capture-fa2-h200.jsonl",
        RESULTS / "capture-fa2-h200-contiguous.jsonl", RESULTS / "sweep-fa2-h200.jsonl")
OUT = RESULTS / "timemodel-backends-h200.json"
PROFILE = ROOT / "decodecalc" / "profiles" / "h200.yaml"
#: the chain's start for the kernels whose work model changed after their last all-family fit (see above)
START = RESULTS / "backend-fit-start-h200.json"
#: the kernels whose families the chain takes from START; every other kernel's it fits from the neutral start
FROM_START = ("flashinfer", "flashinfer-tc", "fa3")
#: what fit.backend_families.source says of the chain's later steps (the fa3 note is fit_fa3_tiles.py's own)
REFIT_NOTE = "; flashinfer_decode refitted by benchmarks/fit_backends_h200.py --refit flashinfer"
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
    from decodecalc.timemodel.domain import BLOCKLESS_KERNELS

    out: dict = {}
    for k in BACKEND_KERNELS:
        sub = [m for m in ms if m.kernel == k]
        if sub:
            out[k] = {"dtypes": ["bfloat16"], "kv_cache_dtypes": ["bfloat16"],
                      "head_sizes": sorted({m.shape.head_size for m in sub}),
                      "group_sizes": sorted({m.shape.num_heads // m.shape.num_kv_heads for m in sub}),
                      "mla": any(resolve_model(m.model).is_mla for m in sub)}
            if k not in BLOCKLESS_KERNELS:  # a paged kernel's time depends on the block size its runs used
                out[k]["block_sizes"] = sorted({m.shape.block_size for m in sub})
    return out


def family_stats(prof, ms: list[Measurement]) -> dict:
    out = {}
    for k in BACKEND_KERNELS:
        sub = [m for m in ms if m.kernel == k]
        if sub:
            out[k] = {key: round(v, 4) for key, v in error_summary(prof, sub).items()}
    return out


def split(ms: list[Measurement]) -> tuple[list[Measurement], list[Measurement]]:
    """(training, held out): the stable-hash quarter of the shapes held out."""
    return [m for m in ms if not held_out(m.shape.key)], [m for m in ms if held_out(m.shape.key)]


def bf16_base(base: TimeProfile) -> TimeProfile:
    """``base`` without any backend family (bf16 or fp8): what a rebuild may start from is the GPU-wide numbers and
    the Triton families, never the backends' shipped values."""
    drop = {*NEW_FAMILIES, *(f for fams in FP8_FAMILIES.values() for f in fams)}
    return dataclasses.replace(base, families={k: v for k, v in base.families.items() if k not in drop})


def fit_neutral(train: list[Measurement], base: TimeProfile, max_evals: int, progress=None) -> TimeProfile:
    """The families of ``train``'s kernels fitted from the neutral start (each family's HBM ceiling what its kernels
    reached), every other family of ``base`` held."""
    fams = dict(base.families)
    for f, bw in hbm_ceilings(train).items():  # each family's achievable HBM bandwidth: what its kernels reached
        fams[f] = FamilyParams(**{**_START, **_START_BY_FAMILY.get(f, {}), "max_programs_per_sm": OCCUPANCY.get(f, 4),
                                  "hbm_bandwidth_bytes_per_s": bw})
    base = dataclasses.replace(base, families=fams)
    # both FlashInfer paths run the same merge kernel: fit them as one group, so that its family is fitted once
    joint = [dataclasses.replace(m, kernel="flashinfer") if m.kernel == "flashinfer-tc" else m for m in train]
    prof = fit_profile(joint, base, occupancy=OCCUPANCY, search_occupancy=False, fit_globals=False, restarts=2,
                       max_evals=max_evals, progress=progress)
    # then each FlashInfer main family alone on its own rows, the shared merge family held: the tensor-core rows
    # (three times as many) no longer pull the CUDA-core kernel's numbers, nor the other way round
    for kernel, family in (("flashinfer-tc", "flashinfer_tc"), ("flashinfer", "flashinfer_decode")):
        rows = [m for m in train if m.kernel == kernel]
        if rows:
            prof, v = fit_families(rows, prof, families=[family], restarts=2, max_evals=max_evals)
            if progress:
                progress(f"{family} alone: {len(rows)} rows, loss {v:.4f}")
    return prof


def record(prof: TimeProfile, ms: list[Measurement]) -> dict:
    """This script's record of ``prof`` on the data: held-out and training scores, the recommended split, the families
    that miss the goals, the measured domains and the families (what --write-profile puts in the profile)."""
    train, test = split(ms)
    heldout = family_stats(prof, test)
    uncal = []
    for k, st in heldout.items():
        if st["median_abs_err"] > GOAL_MEDIAN or st["p90_abs_err"] > GOAL_P90:
            uncal += [f for f in KERNEL_FAMILIES[k] if f != "flashinfer_merge"]
    return {
        "data": [p.name for p in DATA], "rows": len(ms), "train_rows": len(train), "heldout_rows": len(test),
        "heldout_shapes": len({m.shape.key for m in test}), "goals": {"median": GOAL_MEDIAN, "p90": GOAL_P90,
                                                                        "pick_worst": GOAL_PICK},
        "heldout": heldout, "training": family_stats(prof, train),
        "recommendation_heldout": recommendation_quality(prof, test),
        "recommendation_training": recommendation_quality(prof, train),
        "uncalibrated_families": sorted(set(uncal)), "domain": measured_domains(ms),
        "families": {f: prof.families[f].as_dict() for f in NEW_FAMILIES if f in prof.families},
    }


def write_json(path: Path, doc: dict) -> None:
    """``doc`` written to ``path`` whole or not at all."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    tmp.replace(path)


def start_families(path: Path = START) -> dict[str, FamilyParams]:
    """The chain's start (START): FlashInfer's and FA3's families as the all-family fit of commit be2be5f left them."""
    raw = json.loads(path.read_text())["families"]
    return {f: FamilyParams(**{**p, "occupancy_by_head_dim": tuple(sorted((int(d), int(o)) for d, o in
                                                                        p["occupancy_by_head_dim"].items()))})
            for f, p in raw.items()}


def chain(base: TimeProfile, max_evals: int = 1500, start: Path = START, progress=None) -> tuple[TimeProfile, dict]:
    """The bf16 backend families as the chain that shipped them made them (the module's docstring, steps 1-4), from
    ``base``'s GPU-wide numbers, START and the committed data; returns the profile and this script's record of it."""
    from benchmarks import fit_fa3_tiles

    ms = measurements()
    train, _ = split(ms)
    prof = bf16_base(base)
    begun = start_families(start)
    assert set(begun) == {f for k in FROM_START for f in KERNEL_FAMILIES[k] if f in NEW_FAMILIES}, begun
    prof = dataclasses.replace(prof, families={**prof.families, **begun})
    # 1. every other kernel from the neutral start
    prof = fit_neutral([m for m in train if m.kernel not in FROM_START], prof, max_evals, progress)
    # 3. FA3's tile overhead: fit_fa3_tiles.choose's rule (the lowest training loss over its grid, the loss rounded as
    # its record has it) on the FA3 training captures and its short-tile steps
    short = measurements_from([fit_fa3_tiles.RESULTS / fit_fa3_tiles.DATA[2]])
    fa3_rows = [m for m in ms if m.kernel == "fa3"] + short
    fa3_train = [m for m in fa3_rows if not held_out(m.shape.key)]
    grid = [(round(fit_fa3_tiles.loss(fit_fa3_tiles.with_tiles(prof, t), fa3_train), 5), t) for t in fit_fa3_tiles.GRID]
    tile = min(grid, key=lambda g: g[0])[1]
    prof = fit_fa3_tiles.with_tiles(prof, tile)
    # 4. flashinfer_decode refitted from the start on its training rows (--refit flashinfer)
    rows = [m for m in train if m.kernel == "flashinfer"]
    prof, loss = fit_families(rows, prof, families=["flashinfer_decode"], restarts=2, max_evals=max_evals)
    doc = record(prof, ms)
    doc["source"] = ("benchmarks/fit_backends_h200.py on " + ", ".join(doc["data"]) + fit_fa3_tiles.SOURCE_NOTE
                     + REFIT_NOTE)
    doc["chain"] = {
        "start": f"{start.name}: {', '.join(sorted(begun))} (the all-family fit of commit "
                 f"{json.loads(start.read_text())['commit'][:7]})",
        "neutral_start": sorted(f for f in NEW_FAMILIES if f not in begun),
        "fa3_tile_overhead_s": {"chosen": tile, "training_rows": len(fa3_train), "rule": "benchmarks/fit_fa3_tiles.py"},
        "flashinfer_decode_refit": {"training_rows": len(rows), "loss": round(loss, 5)},
    }
    return prof, doc


def rebuild(dest: Path = PROFILE, *, base: TimeProfile | None = None, records: Path | None = None,
            max_evals: int = 1500, progress=None) -> Path:
    """The chain (bf16, then the fp8 families fitted from it) written into ``dest`` (a profile file: its other parts
    kept), its two records into the directory ``records`` (None: none written). ``base``: the GPU-wide numbers to fit
    under (default: ``dest``'s own)."""
    from benchmarks import fit_backends_fp8_h200 as fp8
    from decodecalc.timemodel import load_profile_file

    base = base if base is not None else load_profile_file(dest)
    prof, doc = chain(base, max_evals, progress=progress)
    doc8, prof8 = fp8.run(max_evals, base=prof)
    write_profile(prof, doc, dest)
    fp8.write_profile(prof8, doc8, dest)
    if records is not None:
        write_json(records / OUT.name, doc)
        write_json(records / fp8.OUT.name, doc8)
    return dest


def check_rebuild(progress=None) -> list[str]:
    """The lines where :func:`rebuild` differs from the shipped profile and its two records (none: the same bytes)."""
    import difflib
    import shutil
    import tempfile

    from benchmarks import fit_backends_fp8_h200 as fp8

    with tempfile.TemporaryDirectory() as tmp:
        dest = shutil.copy(PROFILE, Path(tmp) / PROFILE.name)
        rebuild(Path(dest), records=Path(tmp), progress=progress)
        pairs = [(PROFILE, Path(dest)), (OUT, Path(tmp) / OUT.name), (fp8.OUT, Path(tmp) / fp8.OUT.name)]
        diff: list[str] = []
        for want, got in pairs:
            a, b = want.read_text(), got.read_text()
            if a != b:
                diff += difflib.unified_diff(a.splitlines(), b.splitlines(), want.name, "rebuilt", lineterm="", n=0)
    return diff


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write-profile", action="store_true")
    ap.add_argument("--max-evals", type=int, default=1500)
    ap.add_argument("--refit", choices=sorted(REFIT_FAMILY), help="refit only this kernel's main family (above)")
    ap.add_argument("--rebuild", action="store_true", help="replay the chain that made the shipped families and write "
                    "them, with both records (above)")
    ap.add_argument("--check", action="store_true", help="replay it into a scratch copy; exit 1 on any difference")
    args = ap.parse_args()
    say = lambda s: print(s, flush=True)  # noqa: E731
    if args.check:
        diff = check_rebuild(say)
        print("\n".join(diff) if diff else "the shipped backend families and both records rebuild byte for byte")
        return 1 if diff else 0
    if args.rebuild:
        rebuild(PROFILE, records=RESULTS, progress=say)
        return 0
    if args.refit:
        return refit(args.refit, args.max_evals, args.write_profile)
    ms = measurements()
    train, _ = split(ms)
    base = packaged_profile("h200")
    assert base is not None
    prof = fit_neutral(train, bf16_base(base), args.max_evals, say)
    doc = record(prof, ms)
    write_json(OUT, doc)
    print(json.dumps({"heldout": doc["heldout"], "recommendation_heldout": doc["recommendation_heldout"],
                      "uncalibrated": doc["uncalibrated_families"]}, indent=1))
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


def _in_order(new: dict, old: dict | None) -> dict:
    """``new``'s entries in ``old``'s order (the file's: the kernels as they were first written), any others after, so
    that rewriting the same numbers moves no line."""
    old = old or {}
    return {**{k: new[k] for k in old if k in new}, **{k: v for k, v in new.items() if k not in old}}


def write_profile(prof, doc: dict, dest: Path | None = None) -> None:
    """The shipped H200 profile with the new families and their fit statistics (``fit.backend_families``) put in;
    every other family, fit entry and the residual map stay as the file has them."""
    from tools.update_profile_cache import as_written, write

    dest = dest or PROFILE
    on_disk = as_written(dest)
    fams = {**on_disk.families, **{f: prof.families[f] for f in NEW_FAMILIES}}
    fit = dict(on_disk.fit)  # replaced in place: the file's order of entries stays
    was = on_disk.fit.get("backend_families") or {}
    fit["backend_families"] = {"source": doc.get("source") or "benchmarks/fit_backends_h200.py on " + ", ".join(doc["data"]),
                               **{key: _in_order(doc[key], was.get(key)) for key in
                                  ("heldout", "recommendation_heldout", "domain")}}
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
