"""FlashInfer's CUDA-core decode where its CTA or group size is unusual: three hypotheses tested on the H200 runs
(issue 18: "find the physics that varies with layout"). The last, ``group size alone``, is the model's rule since
2026-12-04 (timemodel.backends.cuda_core_step_factor; the shipped families were refitted under it).

    python -m benchmarks.flashinfer_wide_ctas [--write]

The kernel's CTA is (head_dim / 8, group size, the rest of 128 threads) (launchers.flashinfer.decode_kernel_tiling).
Above CUDA_CORE_G0 heads per KV head the model makes a loop step cost more than its bytes. Until 2026-12-04 that was
in proportion to the group size over the SM's resident threads (resident_thread_step_factor below), and one family
for every layout (what shipped and what calibrate fitted) predicted 16:1 d128 (16 x 16 threads, 3 CTAs per SM)
about 40% slow even in sample: the 405B long-prompt workload's +53% FlashInfer total. Four fits of the bf16 CUDA-core runs of the
calibrate run (``results/calibrate-backends-h200-measurements.json.gz``, 11 layouts), each from scratch with
calibrate's three folds of head layouts left out (backend_fit.calibrate_backends), and each scored besides on six
layouts no fit saw (``results/flashinfer-ctas-h200.jsonl.gz``, benchmarks/measure_flashinfer_ctas_h200.py: group
16 at 128, 256 and 512 threads, group 8 at d256):

* ``resident threads``: the rule until 2026-12-04 (resident_thread_step_factor);
* ``wide family``: that rule, and the 256-thread CTAs' launches in a family of their own;
* ``per-warp bandwidth``: that rule, and a 256-thread CTA streaming at twice a 128-thread one's rate (its SM-side
  bytes halved);
* ``group size alone``: the step cost in proportion to the group size alone (cuda_core_step_factor on bf16, the rule
  since).

``--write`` records the figures in ``results/flashinfer-wide-ctas-h200.json`` (tests/test_calibrate_backends.py
checks BENCHMARKS.md's table against it).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import math
import statistics
from pathlib import Path
from typing import Any

from decodecalc.specs.gpus import resolve_gpu
from decodecalc.timemodel import backends as B
from decodecalc.timemodel import packaged_profile
from decodecalc.timemodel.backend_fit import calibrate_backends, layout_label, layout_of
from decodecalc.timemodel.fit import percentile
from decodecalc.timemodel.predict import launch_time_s
from decodecalc.verify.backend_calibration import record_measurements

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
DATA = RESULTS / "calibrate-backends-h200-measurements.json.gz"
UNSEEN = RESULTS / "flashinfer-ctas-h200.jsonl.gz"
OUT = RESULTS / "flashinfer-wide-ctas-h200.json"
VARIANTS = ("resident threads", "wide family", "per-warp bandwidth", "group size alone")
#: the resident threads per SM (9 CTAs x 128 threads, the 4:1-group kernel on the H200) the old rule was relative to
REF_RESIDENT_THREADS = 9 * 128


def resident_thread_step_factor(group_size: int, resident_threads: int) -> float:
    """The CUDA-core step cost until 2026-12-04: the group size over the SM's resident threads (occupancy x block),
    relative to REF_RESIDENT_THREADS."""
    return max(1.0, group_size / B.CUDA_CORE_G0 * REF_RESIDENT_THREADS / resident_threads)


def _old_rule(m: Any, threads: dict[str, int]) -> Any:
    """``m`` with its CUDA-core step cost under resident_thread_step_factor (the steps are the same under both
    rules, the bytes a step costs differ): the step's bytes, int(base x factor), recovered and scaled by the old
    factor as backends.flashinfer_work rounds them."""
    k0 = m.work.kernels[0]
    g = m.shape.num_heads // m.shape.num_kv_heads
    new = B.cuda_core_step_factor(g, m.shape.kv_bytes_per_element)
    base = math.ceil(k0.bytes_per_iter / new - 1e-6)
    old = resident_thread_step_factor(g, (k0.occupancy or 1) * threads[layout_label(layout_of(m))])
    return _with_main(m, bytes_per_iter=int(base * old))


def _bf16_cuda_core(recs: list[dict[str, Any]], skip: set[str] = frozenset()) -> list[dict[str, Any]]:
    return [r for r in recs if r["backend"] == "flashinfer" and r["shape"]["kv_cache_dtype"] == "bfloat16"
            and r["shape"]["layout"] not in skip]


def _threads(recs: list[dict[str, Any]]) -> dict[str, int]:
    return {r["shape"]["layout"]: x["block"][0] * x["block"][1] * x["block"][2]
            for r in recs for x in r["launches"] if x["role"] == "main"}


def _with_main(m: Any, **changes: Any) -> Any:
    k0 = dataclasses.replace(m.work.kernels[0], **changes)
    return dataclasses.replace(m, work=dataclasses.replace(m.work, kernels=(k0, *m.work.kernels[1:])))


def _variant(name: str, ms: list[Any], threads: dict[str, int]) -> list[Any]:
    def wide(m: Any) -> bool:
        return threads[layout_label(layout_of(m))] > 128

    if name == "wide family":
        return [_with_main(m, family="flashinfer_decode_wide") if wide(m) else m for m in ms]
    if name == "per-warp bandwidth":
        return [_with_main(m, bytes_per_iter=m.work.kernels[0].bytes_per_iter // 2,
                           hbm_bytes_per_iter=m.work.kernels[0].bytes_per_iter) if wide(m) else m for m in ms]
    return ms


def _errors(prof: Any, ms: list[Any]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for m in ms:
        out.setdefault(layout_label(layout_of(m)), []).append(launch_time_s(m.work, prof) / m.time_s - 1)
    return out


def run() -> dict[str, Any]:
    gpu = resolve_gpu("h200")
    recs = _bf16_cuda_core(json.loads(gzip.open(DATA, "rt").read())["backend_cases"])
    seen = {r["shape"]["layout"] for r in recs}
    with gzip.open(UNSEEN, "rt") as f:
        new = _bf16_cuda_core([json.loads(x) for x in f], skip=seen)
    threads = {**_threads(recs), **_threads(new)}
    doc: dict[str, Any] = {"threads": threads, "variants": {}}
    for name in VARIANTS:
        def work(rs: list[dict[str, Any]]) -> list[Any]:
            ms = record_measurements(rs, gpu)
            return _variant(name, ms if name == "group size alone" else [_old_rule(m, threads) for m in ms], threads)

        ms, ns = work(recs), work(new)
        fit = calibrate_backends(ms, packaged_profile("h200"), cold=True, max_evals=600, restarts=1, folds=3)
        train, unseen = _errors(fit.profile, ms), _errors(fit.profile, ns)
        every = sorted(abs(e) for v in unseen.values() for e in v)
        doc["variants"][name] = {
            "left_out": {f: r["left_out"] for f, r in fit.families.items()},
            "in_sample_signed_median": {k: round(statistics.median(v), 4) for k, v in sorted(train.items())},
            "unseen_signed_median": {k: round(statistics.median(v), 4) for k, v in sorted(unseen.items())},
            "unseen": {"rows": len(every), "median_abs_err": round(percentile(every, 0.5), 4),
                       "p90_abs_err": round(percentile(every, 0.9), 4)}}
        v = doc["variants"][name]
        print(name, {f: (r["median_abs_err"], r["p90_abs_err"]) for f, r in v["left_out"].items()}, v["unseen"],
              flush=True)
    return doc


def markdown(doc: dict[str, Any]) -> str:
    """BENCHMARKS.md's table: per variant, the left-out figures, the unseen layouts' figures and the signed medians of
    the 256-thread layouts and the unseen group-16 ones."""
    cols = [("in", "16:1-d128"), ("in", "16:2-d256"), ("in", "16:8-d256"), ("in", "32:8-d128"), ("un", "16:1-d64"),
            ("un", "64:4-d128"), ("un", "16:1-d256")]
    head = ["fit", "left-out median / p90", "6 unseen layouts: median / p90",
            *(f"{'in sample' if k == 'in' else 'unseen'} {lay}" for k, lay in cols)]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for name, v in doc["variants"].items():
        lo = "; ".join(f"{r['median_abs_err']:.1%} / {r['p90_abs_err']:.1%}" + ("" if f == "flashinfer_decode" else
                                                                                f" ({f})")
                       for f, r in v["left_out"].items())
        signed = [(v["in_sample_signed_median"] if k == "in" else v["unseen_signed_median"])[lay] for k, lay in cols]
        lines.append(f"| {name} | {lo} | {v['unseen']['median_abs_err']:.1%} / {v['unseen']['p90_abs_err']:.1%} | "
                     + " | ".join(f"{x:+.1%}" for x in signed) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true")
    write = ap.parse_args().write
    doc = run()
    print(markdown(doc))
    if write:
        OUT.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
