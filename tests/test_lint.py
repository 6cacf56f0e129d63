"""The package, its tests, benchmarks/ and tools/ pass ``ruff check`` under the rule set in pyproject.toml ([tool.ruff]); ruff comes with
the ``test`` extra, so CI runs it (issue 19: lint configured, and run in .ci/run through the test command)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]' brings it)")
    r = subprocess.run([ruff, "check", "decodecalc", "tests", "benchmarks", "tools"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
