"""Domain exceptions. The CLI turns every one of them into a one-line ``Error: ...``."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class DecodecalcError(Exception):
    """Base class: a problem with the user's input or environment, never a bug."""

    exit_code = 1


class ConfigError(DecodecalcError):
    """A value that cannot describe a real launch (bad TP, bad length, malformed file...)."""


class ChoiceError(ConfigError):
    """An option's value outside its fixed choices (``--objective p50``): a usage error, exit status 2 like an
    unknown option (README, "Exit status")."""

    exit_code = 2


class UnsupportedError(DecodecalcError):
    """The modeled system cannot serve this configuration (for example MLA in vLLM's Triton path)."""


class UnknownNameError(DecodecalcError):
    """A model, GPU or policy name that is not in the library."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        known = sorted(known)
        close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        super().__init__(f"unknown {kind} {name!r}.{hint} Known: {', '.join(known)}")
        self.kind = kind
        self.name = name
        self.known = tuple(known)
        self.suggestions = tuple(close)
