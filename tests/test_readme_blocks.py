"""Every output block in README.md and docs/*.md is what the CLI prints today (python -m tools.update_readme --check)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools import update_readme

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("doc", update_readme.documents(), ids=lambda p: p.name)
def test_output_blocks_are_current(doc):
    text = doc.read_text()
    for match in update_readme.BLOCK.finditer(text):
        fresh = update_readme.run_block(match)
        assert fresh == match.group(0), f"{doc.name}: stale block for `{match.group('cmd')}`; run tools/update_readme.py"


def test_check_mode_fails_on_a_stale_block(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("<!-- run: echo fresh -->\n```text\n$ echo fresh\nstale\n```\n")
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "update_readme.py"), "--check", str(doc)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "+fresh" in r.stdout
    assert re.search(r"1 stale", r.stderr)
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "update_readme.py"), str(doc)], capture_output=True, text=True)
    assert r.returncode == 0 and doc.read_text().endswith("$ echo fresh\nfresh\n```\n")
