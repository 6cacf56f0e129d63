"""Shared plumbing for tests/test_oracles_*.py: where the built oracles live, how to run one.

The oracles are upstream host code compiled by tools/fetch_oracles.sh (tests/oracles/build.py) into
./oracles/build/; without them (no network, no compiler) the oracle tests skip with the reason.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ORACLES = ROOT / "oracles"
BUILD = ORACLES / "build"


def oracle(name: str, how: str = "run tools/fetch_oracles.sh (needs PyPI, g++, and nvcc for FlashInfer)") -> Path:
    """The executable ``oracles/build/<name>``, or skip the test saying how to build it."""
    exe = BUILD / name
    if not exe.is_file():
        pytest.skip(f"oracle {name} not built: {how}")
    return exe


def run_lines(exe: Path, lines: list[str]) -> list[str]:
    """Feed one case per line on stdin; one answer line per case comes back."""
    res = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True,
                         timeout=300)
    out = res.stdout.splitlines()
    assert len(out) == len(lines), f"{exe.name}: {len(lines)} cases in, {len(out)} answers out"
    return out


def source(rel: str) -> Path:
    """An unpacked upstream file under ./oracles/, or skip."""
    path = ORACLES / rel
    if not path.is_file():
        pytest.skip(f"{rel} not unpacked: run tools/fetch_oracles.sh")
    return path
