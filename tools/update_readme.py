"""Regenerate the example outputs in README.md from the installed CLI.

A block to refresh is marked in the README as

    <!-- run: decodecalc grid --model llama3-8b --tp 8 -->
    ```text
    (output, replaced)
    ```

The command (a shell pipeline is allowed, e.g. `| head -30`) runs with COLUMNS=110 and
NO_COLOR=1; the block shows `$ <command>` and its output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"(<!-- run: (?P<cmd>.+?) -->\n)```text\n.*?```", re.S)


def render(match: re.Match[str]) -> str:
    cmd = match.group("cmd")
    env = {**os.environ, "COLUMNS": "110", "NO_COLOR": "1", "TERM": "dumb"}
    out = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, env=env)
    shown = cmd
    text = (out.stdout + out.stderr).rstrip("\n")
    text = "\n".join(line.rstrip() for line in text.splitlines())
    return f"{match.group(1)}```text\n$ {shown}\n{text}\n```"


def main() -> None:
    text = README.read_text()
    new = BLOCK.sub(render, text)
    README.write_text(new)
    print(f"{len(BLOCK.findall(text))} blocks refreshed", file=sys.stderr)


if __name__ == "__main__":
    main()
