"""Regenerate, or check, the example outputs in README.md and docs/*.md from the installed CLI.

A block to refresh is marked as

    <!-- run: decodecalc grid --model llama3-8b --tp 8 -->
    ```text
    (output, replaced)
    ```

The command (a shell pipeline is allowed, e.g. `| head -30`) runs from the repository root with
COLUMNS=80, NO_COLOR=1 and TERM=dumb, as in a pipe; the block shows `$ <command>` and its output.

    python -m tools.update_readme            # rewrite the blocks in place
    python -m tools.update_readme --check    # exit 1 and show a diff when a block is stale (CI)
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- run: (?P<cmd>.+?) -->\n)```text\n.*?```", re.S)
ENV = {"COLUMNS": "80", "LINES": "200", "NO_COLOR": "1", "TERM": "dumb", "PYTHONHASHSEED": "0"}


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


_SHIM: list[str] = []


def _shim_dir() -> str:
    """A folder holding a ``decodecalc`` that runs this checkout's package with this interpreter: the blocks run
    the code beside them whether or not the console script is installed or on PATH."""
    if not _SHIM:
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="decodecalc-shim-"))
        script = folder / "decodecalc"
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m decodecalc "$@"\n')
        script.chmod(0o755)
        _SHIM.append(str(folder))
    return _SHIM[0]


def run_block(match: re.Match[str]) -> str:
    cmd = match.group("cmd")
    env = {**os.environ, **ENV}
    env["PATH"] = _shim_dir() + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=300)
    text = (out.stdout + out.stderr).rstrip("\n")
    text = "\n".join(line.rstrip() for line in text.splitlines())
    return f"{match.group(1)}```text\n$ {cmd}\n{text}\n```"


def refresh(text: str) -> str:
    return BLOCK.sub(run_block, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if any block differs")
    ap.add_argument("files", nargs="*", type=Path, help="documents (default: README.md and docs/*.md)")
    args = ap.parse_args(argv)
    stale = 0
    blocks = 0
    for path in args.files or documents():
        old = path.read_text()
        blocks += len(BLOCK.findall(old))
        new = refresh(old)
        if new == old:
            continue
        if args.check:
            stale += 1
            rel = path.relative_to(ROOT) if path.is_absolute() and ROOT in path.parents else path
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                       f"{rel} (committed)", f"{rel} (re-run)"))
        else:
            path.write_text(new)
    verb = "checked" if args.check else "refreshed"
    print(f"{blocks} blocks {verb}; {stale} stale document(s)" if args.check else f"{blocks} blocks {verb}",
          file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
