"""Reading a trace file as text: UTF-8 only, bounded lines, the first bytes for detection.

Every reader goes through here, so a binary file, a file that is not UTF-8 and a line too long to be
a request are refused the same way, with a one-line ``ConfigError`` naming the file and the line.
Lines are read in binary with a bounded ``readline`` so that a giant line (a damaged file, a whole
JSON document on one line where lines are expected) costs at most the bound, never the whole line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from decodecalc.errors import ConfigError
from typing import BinaryIO

from decodecalc.textfiles import decode_utf8, open_text, utf8_lines

#: the longest line a line-based trace may have (a Mooncake line with 2,000 block hashes is ~16 KB)
MAX_LINE_BYTES = 4 * 2**20
#: bytes read at once by the JSON document reader
READ_CHUNK_BYTES = 2**20
#: bytes read to detect the format
SNIFF_BYTES = 64 * 2**10

#: what a trace file should be, in every refusal
TRACE_KIND = "a text request trace (a UTF-8 CSV, JSON Lines or JSON file)"


def check_file(path: Path) -> None:
    if not path.exists():
        raise ConfigError(f"{path}: no such file")
    if not path.is_file():
        raise ConfigError(f"{path}: not a regular file (a request trace is a CSV, JSON Lines or JSON file)")


def lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, text with its line end) of every line; the BOM of line 1 is dropped."""
    return utf8_lines(path, TRACE_KIND, MAX_LINE_BYTES,
                      "not a line of a request trace (a damaged file, or a JSON document where lines were expected)")


def open_trace(path: Path) -> BinaryIO:
    """The file's bytes as UTF-8, decompressed (gzip, zstd, xz, bzip2) or transcoded (UTF-16) as a stream when its
    first bytes say so (decodecalc.textfiles.open_text)."""
    return open_text(path, TRACE_KIND)


def sniff(path: Path) -> str:
    """The first :data:`SNIFF_BYTES` of the file's text (BOM dropped), or ConfigError for binary / non-UTF-8."""
    with open_trace(path) as f:
        raw = f.read(SNIFF_BYTES)
    return decode_utf8(raw, str(path), TRACE_KIND, final=False)


def container_of(path: Path) -> str:
    """How the file holds its records, from its first character: ``json-array`` ('['), ``jsonl`` ('{')
    or ``csv`` (anything else)."""
    head = sniff(path).lstrip()
    if not head:
        raise ConfigError(f"{path}: no requests (the file is empty)")
    if head[0] == "[":
        return "json-array"
    if head[0] == "{":
        return "jsonl"
    return "csv"


def delimiter_of(head: str) -> str:
    """The cell separator of a CSV whose text starts with ``head``: a tab when the first non-blank line has tabs and
    no commas (Excel's "Unicode text" export is tab-separated UTF-16), else a comma."""
    for line in head.splitlines():
        if line.strip():
            return "\t" if "\t" in line and "," not in line else ","
    return ","


def show(value: object, width: int = 40) -> str:
    """repr of a value for an error message, cut to ``width`` characters."""
    r = repr(value)
    return r if len(r) <= width else r[: width - 3] + "..."
