"""Shared plumbing for tests/test_oracles_*.py: where the built oracles live, how to run one.

The oracles are upstream host code compiled by tools/fetch_oracles.sh (tests/oracles/build.py) into
./oracles/build/; without them (no network, no compiler) the oracle tests skip with the reason.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
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


def exec_with_stubs(path: Path, name: str, stubs: dict[str, object]) -> types.ModuleType:
    """Execute an upstream Python file unmodified as module ``name``, with ``stubs`` standing in for the
    modules it imports (restored afterwards, so no other test sees them)."""
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)  # type: ignore[arg-type]
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None, path
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return mod
