"""Writing results: JSON to stdout or to a file, atomically."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from decodecalc.errors import ConfigError


def _default(o: Any) -> Any:
    if isinstance(o, tuple):
        return list(o)
    if isinstance(o, float) and o != o:
        return None
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


_NUMBER_LIST = re.compile(r"\[\s*((?:-?[\d.eE+-]+|null|true|false)(?:,\s*(?:-?[\d.eE+-]+|null|true|false))*)\s*\]")


def to_json(data: Any) -> str:
    """Indented JSON with lists of scalars (grids, per-sequence values) kept on one line."""
    text = json.dumps(data, indent=2, default=_default)
    return _NUMBER_LIST.sub(lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file in the same folder and os.replace: never half-written."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ConfigError(f"cannot write {path}: folder {folder} does not exist")
    import tempfile  # only when writing a file: keeps the plain CLI path light

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the mode open() would
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
