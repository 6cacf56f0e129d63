"""Write the parsed copy of every packaged time profile: decodecalc/profiles/<gpu>.json next to <gpu>.yaml.

The YAML is the source and the only file anyone edits; the copy holds the same mapping as JSON with the SHA-256 of
the YAML text it came from, so that start-up reads the residual map in 2 ms instead of 60 (decodecalc.timemodel.
profile._packaged_mapping). A copy that does not match its YAML is ignored at run time, and
tests/test_profile_cache.py fails until this script is run again.

    python -m tools.update_profile_cache

The fit scripts that each write one part of a packaged profile read it with :func:`as_written` and write it with
:func:`write`, so that a re-run from the same data leaves the file's bytes as they are.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from decodecalc.timemodel import dump_profile, load_profile_file
from decodecalc.timemodel.profile_sources import parsed_copy
from decodecalc.yamlio import safe_load

if TYPE_CHECKING:
    from decodecalc.timemodel import TimeProfile

ROOT = Path(__file__).resolve().parents[1]
PACKAGED = ROOT / "decodecalc" / "profiles"


def refresh(src: Path) -> bool:
    """Write ``src``'s parsed copy (``src`` a profile YAML) if it is not current; True if it was written. The fit
    scripts call this after writing the packaged profile."""
    text = src.read_text()
    dest = src.with_suffix(".json")
    new = parsed_copy(text, safe_load(text))
    if dest.is_file() and dest.read_text() == new:
        return False
    tmp = dest.with_suffix(".json.tmp")
    tmp.write_text(new)
    tmp.replace(dest)
    return True


def as_written(path: Path) -> TimeProfile:
    """The profile in ``path`` as its file has it: the loader fills in the families a file predates (and lists them
    uncalibrated in ``fit``); a script that rewrites one part of the file must not write those out, so only the
    families the file lists are kept, and ``fit`` is the file's own."""
    prof = load_profile_file(path)
    raw = safe_load(path.read_text()) or {}
    return dataclasses.replace(prof, families={f: prof.families[f] for f in raw.get("families") or {}},
                               fit=dict(raw.get("fit") or {}))


def write(path: Path, prof: TimeProfile) -> Path:
    """``prof`` written to ``path`` by the package's dump (whole or not at all), and, for a packaged profile, its
    parsed copy refreshed."""
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(dump_profile(prof), encoding="utf-8")
    tmp.replace(path)
    if path.parent.resolve() == PACKAGED.resolve():
        refresh(path)  # the parsed copy start-up reads
    return path


def main() -> int:
    for src in sorted((ROOT / "decodecalc" / "profiles").glob("*.yaml")):
        dest = src.with_suffix(".json").relative_to(ROOT)
        print(f"wrote {dest}" if refresh(src) else f"{dest} is current")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
