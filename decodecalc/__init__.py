"""decodecalc: what LLM decode attention launches on a GPU, and how well it fills it.

The core (everything outside ``cli``, ``render`` and ``verify``) is pure Python:
it never imports typer, rich, torch or triton.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
