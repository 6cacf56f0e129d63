"""The shipped H200 profile rebuilt from the repository alone, both parts in one run (issue 44, item 2).

    python -m benchmarks.rebuild_profile --check     # into a scratch copy (~60 s on 2 CPUs): same bytes?
    python -m benchmarks.rebuild_profile --rebuild   # ... and written to decodecalc/profiles/h200.yaml

First benchmarks/fit_timemodel.py's part (the Triton families, the GPU-wide numbers, the residual map: its record's
physics, the map and scores rebuilt from the committed data), then benchmarks/fit_backends_h200.py's (the backends'
bf16 and fp8 families: the chain of fits that shipped them replayed from committed data) under the GPU-wide numbers
the first part wrote. The other parts of the file (the expected error, the domains, the in-graph costs) are other
scripts' and kept as the file has them. The two parts alone: ``python -m benchmarks.fit_timemodel --check`` and
``python -m benchmarks.fit_backends_h200 --check`` (tests/test_profile_rebuild.py runs each).
"""

from __future__ import annotations

import argparse
import difflib
import tempfile
from pathlib import Path

from benchmarks import fit_backends_fp8_h200 as fp8
from benchmarks import fit_backends_h200 as fb
from benchmarks import fit_timemodel as ft


def rebuild(dest: Path, records: Path | None = None) -> Path:
    """Both parts written into ``dest`` (the rest of the file: the shipped profile's), the backends' two records into
    ``records`` (None: not written)."""
    ft.rebuild(dest)
    return fb.rebuild(dest, records=records, progress=lambda s: print(s, flush=True))


def check() -> list[str]:
    """The lines where the rebuild differs from the shipped profile and the backends' records (none: the same)."""
    with tempfile.TemporaryDirectory() as tmp:
        rebuild(Path(tmp) / fb.PROFILE.name, Path(tmp))
        diff: list[str] = []
        for want in (fb.PROFILE, fb.OUT, fp8.OUT):
            a, b = want.read_text(), (Path(tmp) / want.name).read_text()
            if a != b:
                diff += difflib.unified_diff(a.splitlines(), b.splitlines(), want.name, "rebuilt", lineterm="", n=0)
    return diff


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--check", action="store_true", help="rebuild into a scratch copy; exit 1 on any difference")
    what.add_argument("--rebuild", action="store_true", help="rebuild and write the shipped profile and the records")
    args = ap.parse_args()
    if args.rebuild:
        rebuild(fb.PROFILE, fb.RESULTS)
        return 0
    diff = check()
    print("\n".join(diff) if diff else "decodecalc/profiles/h200.yaml and the backends' records rebuild byte for byte")
    return 1 if diff else 0


if __name__ == "__main__":
    raise SystemExit(main())
