"""House style: the core never imports typer, rich, torch, triton, numpy or matplotlib.

Every module of the package except the CLI layer (cli, render, commands/*), the plotting module,
the GPU layer (verify/*) and tune's array layer (batch/*, numpy) is imported in a fresh interpreter,
and the heavy or presentation libraries must be absent afterwards; the array layer may bring numpy
and nothing else.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import decodecalc

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
