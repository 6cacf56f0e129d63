"""One rule for every text file decodecalc reads (model and profile YAML, HF config.json, request and step traces,
a saved /metrics scrape): a NUL byte means a binary file, and the rest must be UTF-8 (a leading BOM is dropped).
Each refusal is one ConfigError naming the file, where in it, and what the file should have been."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path

from decodecalc.errors import ConfigError

BOM = "\ufeff"


def binary_error(where: str, kind: str) -> ConfigError:
    return ConfigError(f"{where}: a binary file (a NUL byte), not {kind}")


def not_utf8_error(where: str, kind: str) -> ConfigError:
    return ConfigError(f"{where}: not UTF-8 text, so not {kind}")


def decode_utf8(raw: bytes, where: str, kind: str, *, final: bool = True) -> str:
    """``raw`` as text without its BOM. ``final`` False: a multi-byte character cut at the end (a file's first
    bytes) is dropped, not an error. ``kind``: what the file should be ("YAML or JSON text")."""
    nul = raw.find(b"\0")
    if nul >= 0:
        raise binary_error(f"{where}, byte {nul + 1:,}", kind)
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(raw, final=final)
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise not_utf8_error(f"{where}, line {line}" if line > 1 else f"{where}, byte {e.start + 1:,}", kind) from None
    return text.removeprefix(BOM)


def utf8_lines(path: Path, kind: str, max_line_bytes: int, too_long: str = "") -> Iterator[tuple[int, str]]:
    """(1-based line number, text with its line end) of every line, read in binary with a bounded ``readline`` so a
    giant line costs at most the bound; line 1's BOM is dropped. ``too_long``: what a longer line probably is."""
    with open(path, "rb") as f:
        n = 0
        while True:
            raw = f.readline(max_line_bytes + 1)
            if not raw:
                return
            n += 1
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                size = f"{max_line_bytes // 2**20} MiB" if max_line_bytes >= 2**20 else f"{max_line_bytes:,} bytes"
                raise ConfigError(f"{path}, line {n}: longer than {size}" + (f"; {too_long}" if too_long else ""))
            if b"\0" in raw:
                raise binary_error(f"{path}, line {n}", kind)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise not_utf8_error(f"{path}, line {n}, byte {e.start + 1:,}", kind) from None
            yield n, text.removeprefix(BOM) if n == 1 else text
