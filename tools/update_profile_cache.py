"""Write the parsed copy of every packaged time profile: decodecalc/profiles/<gpu>.json next to <gpu>.yaml.

The YAML is the source and the only file anyone edits; the copy holds the same mapping as JSON with the SHA-256 of
the YAML text it came from, so that start-up reads the residual map in 2 ms instead of 60 (decodecalc.timemodel.
profile._packaged_mapping). A copy that does not match its YAML is ignored at run time, and
tests/test_profile_cache.py fails until this script is run again.

    python -m tools.update_profile_cache
"""

from __future__ import annotations

from pathlib import Path

from decodecalc.timemodel.profile_sources import parsed_copy
from decodecalc.yamlio import safe_load

ROOT = Path(__file__).resolve().parents[1]


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


def main() -> int:
    for src in sorted((ROOT / "decodecalc" / "profiles").glob("*.yaml")):
        dest = src.with_suffix(".json").relative_to(ROOT)
        print(f"wrote {dest}" if refresh(src) else f"{dest} is current")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
