"""decodecalc: what LLM decode attention launches on a GPU, and how well it fills it.

From Python (the same numbers as the CLI's ``--json``)::

    import decodecalc
    r = decodecalc.grid(model="llama3-8b", tp=8, batch=64, seq_len=8192)
    r.to_dict()                     # == `decodecalc grid -m llama3-8b --tp 8 -b 64 -s 8192 --json`
    decodecalc.compare(model="llama3-70b", tp=8, seq_lens=[512, 8192]).best
    decodecalc.recommend(model="llama3-70b", tp=8, batch=64, seq_len=8192).to_dict()["kernels"]

The API lives in :mod:`decodecalc.api` and is imported on first use, so ``import decodecalc``
stays cheap. The core (everything outside ``cli``, ``commands``, ``render``, ``plot`` and
``verify``) is pure Python: it never imports typer, rich, torch or triton.
"""

from __future__ import annotations

from typing import Any

#: the one place the version is written (pyproject.toml reads it: [tool.setuptools.dynamic])
__version__ = "0.1.0"

_API = ("grid", "compare", "recommend", "tune", "GridResult", "CompareResult", "RecommendResult", "TuneResult",
        "WorkloadParams", "TuneParams")

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        from decodecalc import api

        return getattr(api, name)
    raise AttributeError(f"module 'decodecalc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
