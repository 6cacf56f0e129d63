"""A JSON document read incrementally: one value at a time through a bounded buffer.

ShareGPT files are one JSON array of ~700 MB and a benchmark result can be one object with a
per-request array of every generated text. :class:`JsonStream` reads such a document as a stream:
it walks the top-level structure itself (``[``, ``{``, ``,``, ``:``) and decodes each *element*
with ``json.JSONDecoder.raw_decode`` over a sliding buffer, so memory is bounded by the largest
single element (:data:`MAX_VALUE_CHARS`), not by the file. A file may also hold several top-level
values one after another (JSON Lines, or results appended to one file).
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from typing import Any, BinaryIO

from decodecalc.errors import ConfigError
from decodecalc.textfiles import BOM, binary_error, not_utf8_error
from decodecalc.traffic.traces.textio import READ_CHUNK_BYTES, TRACE_KIND, show

#: the longest single element (one conversation, one generated text) the reader accepts
MAX_VALUE_CHARS = 16 * 2**20
_WHITESPACE = re.compile(r"[ \t\n\r]*")
# a decode error this close to the end of the buffer may only mean the value continues in the next chunk
_TRUNCATION_MARGIN = 8


class JsonStream:
    """Top-level JSON values of a binary file, decoded piecewise. Errors are one-line ConfigErrors
    naming the file and the line."""

    def __init__(self, f: BinaryIO, path: str, max_value_chars: int = MAX_VALUE_CHARS) -> None:
        self._f = f
        self._path = path
        self._max = max_value_chars
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._decoder = json.JSONDecoder()
        self._buf = ""
        self._pos = 0
        self._dropped_chars = 0  # text before the buffer, already consumed
        self._dropped_lines = 0  # newlines in that text
        self._eof = False
        self._started = False

    # ---------------------------------------------------------------- position
    @property
    def offset(self) -> int:
        """Characters consumed so far."""
        return self._dropped_chars + self._pos

    def line_at(self, pos: int) -> int:
        return self._dropped_lines + self._buf.count("\n", 0, pos) + 1

    @property
    def line(self) -> int:
        return self.line_at(self._pos)

    def _error(self, what: str, pos: int | None = None) -> ConfigError:
        return ConfigError(f"{self._path}, line {self.line_at(self._pos if pos is None else pos)}: {what}")

    # ---------------------------------------------------------------- buffer
    def _fill(self) -> bool:
        """Read more text; False at the end of the file."""
        if self._eof:
            return False
        if self._pos:
            self._dropped_lines += self._buf.count("\n", 0, self._pos)
            self._dropped_chars += self._pos
            self._buf = self._buf[self._pos:]
            self._pos = 0
        # grow geometrically, so a long value is decoded O(log n) times rather than once per chunk
        raw = self._f.read(max(READ_CHUNK_BYTES, len(self._buf)))
        if b"\0" in raw:
            raise binary_error(f"{self._path}, near line {self.line_at(len(self._buf))}", TRACE_KIND)
        try:
            text = self._utf8.decode(raw, final=not raw)
        except UnicodeDecodeError:
            raise not_utf8_error(f"{self._path}, near line {self.line_at(len(self._buf))}", TRACE_KIND) from None
        if not self._started:
            text = text.removeprefix(BOM)
            self._started = True
        self._eof = not raw
        self._buf += text
        return bool(raw)

    def peek(self) -> str:
        """The next non-whitespace character (not consumed), or '' at the end of the file."""
        while True:
            m = _WHITESPACE.match(self._buf, self._pos)
            self._pos = m.end() if m else self._pos
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._fill():
                return ""

    def _expect(self, char: str, context: str) -> None:
        got = self.peek()
        if got != char:
            found = "the end of the file" if got == "" else repr(got)
            raise self._error(f"not valid JSON (expected {char!r} {context}, found {found})")
        self._pos += 1

    # ---------------------------------------------------------------- values
    def value(self) -> Any:
        """Decode the next JSON value whole (bounded by :data:`MAX_VALUE_CHARS`)."""
        if self.peek() == "":
            raise self._error("not valid JSON (the file ends where a value was expected)")
        while True:
            try:
                obj, end = self._decoder.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as e:
                truncated = e.msg.startswith("Unterminated string") or e.pos >= len(self._buf) - _TRUNCATION_MARGIN
                if truncated and not self._eof:
                    self._check_size()
                    self._fill()
                    continue
                raise self._error(f"not valid JSON ({e.msg})", e.pos) from None
            except RecursionError:
                raise self._error("JSON nested too deeply") from None
            except ValueError as e:  # an integer over Python's 4300-digit limit
                raise self._error(f"unreadable JSON value ({str(e).split(';')[0][:80]})") from None
            if end >= len(self._buf) and not self._eof:
                # a number (or a literal) that ends at the buffer's end may go on in the next chunk
                self._check_size()
                self._fill()
                continue
            self._pos = end
            return obj

    def _check_size(self) -> None:
        if len(self._buf) - self._pos > self._max:
            raise self._error(f"a single JSON value longer than {self._max // 2**20} MiB (one request, conversation "
                              "or text of a trace is far smaller: a damaged file?)")

    def array_items(self) -> Iterator[Any]:
        """The elements of the array that starts here, each decoded whole."""
        self._expect("[", "at the start of an array")
        if self.peek() == "]":
            self._pos += 1
            return
        while True:
            yield self.value()
            c = self.peek()
            self._pos += 1
            if c == "]":
                return
            if c != ",":
                self._pos -= 1
                found = "the end of the file" if c == "" else repr(c)
                raise self._error(f"not valid JSON (expected ',' or ']' in an array, found {found})")

    def object_members(self) -> Iterator[str]:
        """The keys of the object that starts here; the caller consumes each key's value (``value``,
        ``array_items`` or ``skip``) before asking for the next key."""
        self._expect("{", "at the start of an object")
        if self.peek() == "}":
            self._pos += 1
            return
        while True:
            if self.peek() != '"':
                raise self._error(f"not valid JSON (expected a key in double quotes, found {show(self.peek())})")
            key = self.value()
            self._expect(":", "after a key")
            yield key
            c = self.peek()
            self._pos += 1
            if c == "}":
                return
            if c != ",":
                self._pos -= 1
                found = "the end of the file" if c == "" else repr(c)
                raise self._error(f"not valid JSON (expected ',' or '}}' in an object, found {found})")

    def skip(self) -> None:
        """Consume the next value without keeping it (element by element for arrays and objects)."""
        c = self.peek()
        if c == "[":
            for _ in self.array_items():
                pass
        elif c == "{":
            for _ in self.object_members():
                self.skip()
        else:
            self.value()
