"""mypy over the package: 0 errors under the settings in pyproject.toml ([tool.mypy]); CI runs it here, through the
README's test command (mypy comes with the ``test`` extra)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: mypy's own cache beside the sources (it writes a .gitignore into it): a rerun checks only what changed
CACHE = ROOT / ".mypy_cache"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                                reason="mypy is not installed (pip install -e '.[test]' installs it)")


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(CACHE), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_mypy_finds_no_error_in_the_package() -> None:
    r = _mypy()  # the files and settings are pyproject's
    assert r.returncode == 0, f"mypy over decodecalc/ (exit {r.returncode}):\n{r.stdout[-6000:]}{r.stderr[-2000:]}"
    assert "Success: no issues found" in r.stdout


def test_the_settings_catch_what_they_promise(tmp_path: Path) -> None:
    # the same settings on a small module: an unannotated def, a wrong return type and a stale ignore each fail, so
    # the run above cannot pass by checking nothing
    bad = tmp_path / "bad_module.py"
    bad.write_text("def untyped(x):\n    return x\n\n\n"
                   "def wrong(x: int) -> str:\n    return x\n\n\n"
                   "y: int = 1  # type: ignore[assignment]\n")
    r = _mypy("--config-file", str(ROOT / "pyproject.toml"), str(bad))
    assert r.returncode == 1, r.stdout
    for code in ("[no-untyped-def]", "[return-value]", "[unused-ignore]"):
        assert code in r.stdout, (code, r.stdout)
