"""House style: the core never imports typer, rich, torch, triton, numpy or matplotlib.

Every module of the package except the CLI layer (cli, render, commands/*), the plotting module,
the GPU layer (verify/*) and tune's array layer (batch/*, numpy) is imported in a fresh interpreter,
and the heavy or presentation libraries must be absent afterwards; the array layer may bring numpy
and nothing else.

The launcher registry (``launchers/registry.py``) and the launchers' shared checks (``launchers/guards.py``)
live below the reports: nothing under launchers/, timemodel/ or verify/ imports ``decodecalc.reports``
(verify's profiler alone reads the compare report's row, see ``REPORT_READERS``).
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import decodecalc
from helpers import modules_loaded_by

PRESENTATION_OR_GPU = ("decodecalc.cli", "decodecalc.render", "decodecalc.commands", "decodecalc.plot",
                       "decodecalc.verify", "decodecalc.__main__")
ARRAYS = ("decodecalc.batch",)  # tune's batch evaluator: numpy, imported only when tune runs


def core_modules() -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(decodecalc.__path__, "decodecalc.")]
    return sorted(n for n in names if not n.startswith(PRESENTATION_OR_GPU + ARRAYS))


def test_the_array_layer_brings_numpy_only():
    names = sorted(m.name for m in pkgutil.walk_packages(decodecalc.__path__, "decodecalc.") if m.name.startswith(ARRAYS))
    assert "decodecalc.batch.evaluator" in names
    code = ("import importlib, sys\n"
            f"for m in {names!r}: importlib.import_module(m)\n"
            "bad = sorted(m for m in ('typer', 'rich', 'torch', 'triton', 'matplotlib') if m in sys.modules)\n"
            "print(bad, 'numpy' in sys.modules); sys.exit(bool(bad) or 'numpy' not in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_core_is_pure():
    mods = core_modules()
    assert "decodecalc.launchers.vllm_unified" in mods and "decodecalc.reports.grid" in mods
    code = ("import importlib, sys\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            "bad = sorted(m for m in ('typer', 'rich', 'torch', 'triton', 'numpy', 'matplotlib') if m in sys.modules)\n"
            "print(bad); sys.exit(bool(bad))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


PKG = Path(decodecalc.__file__).resolve().parent
#: (file under decodecalc/, report module) pairs allowed below the reports: verify's profiler checks a profiled
#: launch against the compare report's row (decodecalc.reports.compare.evaluate), figures and prediction included
REPORT_READERS = {("verify/profiler.py", "decodecalc.reports.compare")}


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import statement in the file, inside functions too."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = "." * node.level + node.module
            out += [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return out


def test_launchers_timemodel_and_verify_never_import_a_report():
    bad = []
    for sub in ("launchers", "timemodel", "verify"):
        for path in sorted((PKG / sub).rglob("*.py")):
            rel = path.relative_to(PKG).as_posix()
            for line, mod in _imported_modules(path):
                if mod.startswith(".") or mod == "decodecalc.reports" or mod.startswith("decodecalc.reports."):
                    if not any(rel == f and (mod == m or mod.startswith(m + ".")) for f, m in REPORT_READERS):
                        bad.append(f"{rel} line {line}: {mod}")
    assert not bad, "imports of decodecalc.reports below the reports:\n" + "\n".join(bad)


def test_registry_loads_no_report():
    """The launcher registry, every launcher and the time model import without loading any report module."""
    names = sorted(m.name for m in pkgutil.walk_packages(decodecalc.__path__, "decodecalc.")
                   if m.name.startswith(("decodecalc.launchers", "decodecalc.timemodel")))
    assert "decodecalc.launchers.registry" in names and "decodecalc.launchers.guards" in names
    code = ("import importlib\n"
            f"for m in {names!r}: importlib.import_module(m)\n"
            "from decodecalc.launchers.registry import POLICIES\n"
            "assert POLICIES, 'empty registry'")
    assert modules_loaded_by(code, packages=("decodecalc.reports",)) == []
