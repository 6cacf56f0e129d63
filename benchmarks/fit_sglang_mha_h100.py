"""SGLang's MHA stage 1 (``sglang_mha_stage1``) on the H100 refitted at head dims 64 and 128 (issue 43).

    python -m benchmarks.fit_sglang_mha_h100 --check     # refit from committed timings, compare with the shipped family
    python -m benchmarks.fit_sglang_mha_h100 --write     # write it into decodecalc/profiles/h100-sxm.yaml

The shipped H100 profile's one command timed one MHA layout (32:32 d128), so its MHA family could not tell an
iteration's latency from its bytes: its latency sat at the fit's bound and a 64-wide head was predicted as slow as a
128-wide one (every SGLang setting of an MHA d64 workload 31-48% under its prediction, measured with ``tune --measure``:
``results/measure-tune-h100-sxm/mha64-tune.json.gz``). Here that one family is fitted on the one command's MHA d128
timings (``results/calibrate-one-command-h100-sxm-measurements.json.gz``) and 20 MHA d64 timings of
``calibrate --keep-physics`` on the same H100 (``results/measure-tune-h100-sxm/mha64-calibrate-keep-physics.json.gz``);
every other family, the occupancies and the residual map stay as shipped. ``--check`` also prints the errors on both
head dims before and after (in sample: these are the fitted timings; the out-of-sample check is ``tune --measure`` on
a 16:16 d64 layout, docs/lab/2026-12-06-sglang-mha-d64-h100.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from decodecalc.timemodel.fit import Measurement, fit_families, measurements_from_rows
from decodecalc.timemodel.predict import launch_time_s
from tools.update_profile_cache import as_written, write

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PROFILE = ROOT / "decodecalc" / "profiles" / "h100-sxm.yaml"
DATA = (RESULTS / "calibrate-one-command-h100-sxm-measurements.json.gz",
        RESULTS / "measure-tune-h100-sxm" / "mha64-calibrate-keep-physics.json.gz")
FAMILY = "sglang_mha_stage1"


def measurements() -> list[Measurement]:
    """SGLang's MHA timings of the two files (one query head per KV head)."""
    out: list[Measurement] = []
    for path in DATA:
        doc = json.loads(gzip.decompress(path.read_bytes()))
        out += [m for m in measurements_from_rows(doc["cases"], num_sms=132)
                if m.kernel == "sglang" and m.shape.num_heads == m.shape.num_kv_heads]
    return out


def refit(base: Any) -> Any:
    """``base`` with :data:`FAMILY` fitted to :func:`measurements`, started from the datasheet profile's family (not
    ``base``'s: the fit is then the same whatever the profile held, so ``--check`` can rebuild it)."""
    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.timemodel.profile_sources import datasheet_profile

    start = datasheet_profile(resolve_gpu(base.gpu)).families[FAMILY]
    start = dataclasses.replace(start, max_programs_per_sm=base.families[FAMILY].max_programs_per_sm,
                                occupancy_by_head_dim=base.families[FAMILY].occupancy_by_head_dim)
    seeded = dataclasses.replace(base, families={**base.families, FAMILY: start})
    fitted, _ = fit_families(measurements(), seeded, families=[FAMILY], restarts=3, max_evals=3000)
    return dataclasses.replace(base, families={**base.families, FAMILY: fitted.families[FAMILY]})


def errors(prof: Any, ms: list[Measurement]) -> str:
    out = []
    for d in sorted({m.shape.head_size for m in ms}):
        e = [launch_time_s(m.work, prof) / m.time_s - 1 for m in ms if m.shape.head_size == d]
        out.append(f"d{d}: {len(e)} timings, median {statistics.median(e):+.1%}, worst {max(e, key=abs):+.1%}")
    return "; ".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 unless the shipped family is the refit's")
    ap.add_argument("--write", action="store_true", help="write the refitted family into the shipped profile")
    args = ap.parse_args()
    shipped = as_written(PROFILE)
    ms = measurements()
    new = refit(shipped)
    print(f"shipped: {errors(shipped, ms)}")
    print(f"refit:   {errors(new, ms)}")
    if args.write:
        source = shipped.source
        note = f"; {FAMILY} refitted at head dims 64 and 128 by benchmarks/fit_sglang_mha_h100.py"
        write(PROFILE, dataclasses.replace(new, source=source if note.strip() in source else source + note))
        print(f"wrote {PROFILE}")
    if args.check and new.families[FAMILY] != shipped.families[FAMILY]:
        print(f"Error: the shipped {FAMILY} is not the refit's: {shipped.families[FAMILY]} != {new.families[FAMILY]}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
