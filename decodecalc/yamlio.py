"""The one place decodecalc parses YAML: always the safe loader (libyaml's C build when present)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from decodecalc.errors import ConfigError


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` semantics; ``CSafeLoader`` is the same safe constructor, about 10x faster."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe loader


def load_yaml_file(path: Path, what: str = "") -> Any:
    """Read and parse one YAML file; unreadable or malformed files are a ConfigError naming the file
    (and the line where the parser gave up)."""
    import yaml

    label = f"{what} {path}".strip()
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {label}: {exc.strerror}") from None
    try:
        return safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{label}: malformed YAML{at}") from None
