"""The one place decodecalc reads structured files (model YAML, HF config.json, time-model profiles).

YAML always goes through the safe loader (libyaml's C build when present). Every file is read
with the limits of :mod:`decodecalc.limits` - size before parsing, then nesting depth, number
of values (a YAML alias counts each time it is used, so "billion laughs" files stop here),
text or integer keys, finite numbers within 2**53 - and every problem is a ConfigError naming the
file (and, where there is one, the field).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.textfiles import decode_utf8
from decodecalc.limits import MAX_FILE_BYTES, MAX_FILE_DEPTH, MAX_FILE_NUMBER, MAX_FILE_VALUES, MAX_YAML_BYTES


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` semantics; ``CSafeLoader`` is the same safe constructor, about 10x faster."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe loader


def read_text_capped(path: Path, label: str, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of ``path``, refusing files over ``limit`` bytes before reading them whole."""
    import stat

    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise ConfigError(f"cannot read {label}: it is a directory")
        if not stat.S_ISREG(mode):  # a FIFO or device would block or never end
            raise ConfigError(f"cannot read {label}: not a regular file")
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {label}: {exc.strerror or exc}") from None
    except ValueError:  # a NUL byte in the path
        raise ConfigError(f"cannot read {label!r}: invalid path") from None
    if len(raw) > limit:
        raise ConfigError(f"{label}: file is over the supported {limit:,} bytes")
    return decode_utf8(raw, label, "YAML or JSON text")


def load_yaml_file(path: Path, what: str = "") -> Any:
    """Read and parse one YAML file within the limits; problems are a ConfigError naming the file
    (and the line where the parser gave up, or the field that breaks a limit)."""
    import yaml

    label = f"{what} {path}".strip()
    text = read_text_capped(Path(path), label, MAX_YAML_BYTES)
    try:
        data = safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{label}: malformed YAML{at}") from None
    except RecursionError:
        raise ConfigError(f"{label}: nested deeper than the supported {MAX_FILE_DEPTH}") from None
    except (ValueError, OverflowError) as exc:  # e.g. an integer over Python's 4300-digit limit
        raise ConfigError(f"{label}: unreadable value ({_short(exc)})") from None
    check_tree(data, label, aliases=True)
    return data


def load_json_file(path: Path, what: str = "", *, max_bytes: int = MAX_FILE_BYTES,
                   max_values: int = MAX_FILE_VALUES) -> Any:
    """Read and parse one JSON file within the same limits as YAML files (or the larger ``max_bytes`` and
    ``max_values`` of a file decodecalc wrote itself); a ``.gz`` name is read gzip-compressed, ``max_bytes`` then
    counting its text."""
    label = f"{what} {path}".strip()
    text = _read_gzip_capped(Path(path), label, max_bytes) if str(path).endswith(".gz") else \
        read_text_capped(Path(path), label, max_bytes)
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{label}: malformed JSON at line {exc.lineno}: {exc.msg}") from None
    except RecursionError:
        raise ConfigError(f"{label}: nested deeper than the supported {MAX_FILE_DEPTH}") from None
    except (ValueError, OverflowError) as exc:  # an integer over Python's 4300-digit limit, NaN/Infinity
        raise ConfigError(f"{label}: unreadable value ({_short(exc)})") from None
    check_tree(data, label, max_values=max_values)
    return data


def _read_gzip_capped(path: Path, label: str, limit: int) -> str:
    import gzip
    import zlib

    import stat

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ConfigError(f"cannot read {label}: not a regular file")
        with gzip.open(path, "rb") as f:
            raw = f.read(limit + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise ConfigError(f"cannot read {label}: not a gzip file ({_short(exc)})") from None
    if len(raw) > limit:
        raise ConfigError(f"{label}: file is over the supported {limit:,} bytes uncompressed")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{label}: not UTF-8 text") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _short(exc: BaseException) -> str:
    text = str(exc).split(";")[0].strip()
    return text[:120]


def check_tree(data: Any, label: str, *, aliases: bool = False, max_values: int = MAX_FILE_VALUES) -> None:
    """Walk a parsed file once per distinct node (aliases share nodes) and enforce the limits.

    Counts values as if every alias were expanded (memoised per node, so the walk itself stays
    linear) and reports the first offending field by its dotted path.
    """
    sizes: dict[int, int] = {}  # id(container) -> expanded value count
    depths: dict[int, int] = {}  # id(container) -> nesting below it
    on_path: set[int] = set()
    # iterative post-order walk: (node, path, children_done)
    stack: list[tuple[Any, str, bool]] = [(data, "", False)]
    while stack:
        node, where, done = stack.pop()
        if isinstance(node, dict | list):
            key = id(node)
            if done:
                children = node.values() if isinstance(node, dict) else node
                size, depth = 1, 0
                for child in children:
                    if isinstance(child, dict | list):
                        size += sizes[id(child)]
                        depth = max(depth, depths[id(child)] + 1)
                    else:
                        size += 1
                on_path.discard(key)
                sizes[key], depths[key] = size, depth
                if size > max_values:
                    raise ConfigError(f"{label}: {_field(where)}holds more than the supported {max_values:,} "
                                      "values" + (" (counting each use of a YAML alias)" if aliases else ""))
                if depth >= MAX_FILE_DEPTH:
                    raise ConfigError(f"{label}: {_field(where)}nested deeper than the supported {MAX_FILE_DEPTH}")
                continue
            if key in sizes:
                continue
            if key in on_path:
                raise ConfigError(f"{label}: {_field(where)}refers to itself (recursive YAML alias)")
            if len(on_path) >= MAX_FILE_DEPTH:
                raise ConfigError(f"{label}: {_field(where)}nested deeper than the supported {MAX_FILE_DEPTH}")
            on_path.add(key)
            stack.append((node, where, True))
            if isinstance(node, dict):
                for k, v in node.items():
                    if not isinstance(k, str | int) or isinstance(k, bool):
                        raise ConfigError(f"{label}: {_field(where)}has the key {_scalar(k)}; keys must be "
                                          "text or integers (quote them)")
                    _check_scalar(k, where, label)
                    stack.append((v, f"{where}.{k}" if where else str(k), False))
            else:
                for i, v in enumerate(node):
                    stack.append((v, f"{where}[{i}]", False))
        else:
            _check_scalar(node, where, label)


def _check_scalar(value: Any, where: str, label: str) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        if abs(value) > MAX_FILE_NUMBER:
            raise ConfigError(f"{label}: {_field(where)}integer {_scalar(value)} is over the supported "
                              f"{MAX_FILE_NUMBER:,} (2**53)")
    elif isinstance(value, float):
        if not math.isfinite(value) or abs(value) > MAX_FILE_NUMBER:
            raise ConfigError(f"{label}: {_field(where)}number {_scalar(value)} is not finite or over the supported "
                              f"{MAX_FILE_NUMBER:,} (2**53)")
    elif not isinstance(value, str):  # dates, bytes, sets from YAML tags
        raise ConfigError(f"{label}: {_field(where)}value of type {type(value).__name__} is not supported here")


def _field(where: str) -> str:
    return f"field {where!r} " if where else ""


def _scalar(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"of about {int(abs(value).bit_length() * 0.30103) + 1:,} digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
