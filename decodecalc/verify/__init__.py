"""Run the real upstream launchers (vLLM, SGLang) and record what they launch.

Nothing heavy is imported here: ``torch`` and ``triton`` are only imported by
:mod:`decodecalc.verify.upstream` and :mod:`decodecalc.verify.capture`, on use.

* :mod:`decodecalc.verify.upstream` finds upstream kernel sources (a source
  checkout, an unpacked wheel, an installed package, or ``./upstream/<name>-<version>``
  as written by ``tools/fetch_upstream.sh``) and imports the kernel modules from
  file without importing the ``vllm`` / ``sglang`` packages.
* :mod:`decodecalc.verify.capture` records every Triton launch (kernel name,
  grid, constexprs), either intercepting it (nothing runs) or executing it.
"""

from __future__ import annotations

import importlib.util

__all__ = ["is_available", "missing_requirements"]


def missing_requirements() -> list[str]:
    """Names of the Python packages the verify machinery needs but cannot find."""
    return [name for name in ("torch", "triton") if importlib.util.find_spec(name) is None]


def is_available() -> bool:
    """True when torch and triton can be imported (no GPU needed: the interpreter works on CPU)."""
    return not missing_requirements()
