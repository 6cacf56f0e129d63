"""One rule for every text file decodecalc reads (model and profile YAML, HF config.json, request and step traces,
a saved /metrics scrape): a NUL byte means a binary file, and the rest must be UTF-8 (a leading BOM is dropped).
Each refusal is one ConfigError naming the file, where in it, and what the file should have been.

Traces and step files are also read when compressed or saved as UTF-16 (:func:`open_text`): the compression is
recognized by its magic bytes, never by the file's name (a ``.csv`` that is really gzip is read; a ``.gz`` that is
plain text is read as text), and the text is decompressed and transcoded as a stream, a chunk at a time, so memory
never holds the whole decompressed file. A decompression bomb is stopped by two caps (:data:`MAX_TEXT_BYTES`,
:data:`MAX_RATIO`), a stream cut short or damaged by one error saying where it stopped.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
import lzma
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO

from decodecalc.errors import ConfigError

BOM = "\ufeff"

#: the most text a compressed file may decompress to: a week of Azure's busiest trace is ~1.2 GB of CSV, and the
#: readers keep at most 2,000,000 requests, so a real trace stops long before; a bomb stops here (memory is never
#: at stake, every layer streams; this bounds the time)
MAX_TEXT_BYTES = 4 * 2**30
#: the most text per compressed byte once past :data:`RATIO_FLOOR`. Request traces compress 3-20x (numbers and
#: timestamps that differ row to row); deflate's ceiling is ~1,032x, reached only by runs of one byte (a newline
#: bomb of 16 MiB costs the CSV reader ~10 s of blank lines, so the check starts there, not later)
MAX_RATIO = 200
RATIO_FLOOR = 16 * 2**20
#: bytes decompressed or transcoded per read (the buffer of the stream the readers see)
CHUNK_BYTES = 2**20

#: magic bytes -> compression name (gzip RFC 1952; zstd RFC 8878; xz "File Format" 1.2.1 section 2.1.1.1; bzip2
#: "BZh" + block size digit + the block or end-of-stream magic, so a CSV starting with "BZh" is not taken for one)
_MAGIC: tuple[tuple[bytes, str], ...] = ((b"\x1f\x8b", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"),
                                         (b"\xfd7zXZ\x00", "xz"))
_BZ2_BLOCKS = (bytes.fromhex("314159265359"), bytes.fromhex("177245385090"))
_UNPACK = {"gzip": "gunzip -k", "zstd": "zstd -d", "xz": "xz -dk", "bz2": "bunzip2 -k"}


def binary_error(where: str, kind: str, raw: bytes = b"") -> ConfigError:
    """A NUL byte in ``raw`` (the bytes it was found in): a binary file, or UTF-16 text that lost its byte-order
    mark, named as such (with the mark it is read: :func:`open_text`)."""
    if looks_utf16(raw):
        return ConfigError(f"{where}: UTF-16 text without a byte-order mark (a NUL byte beside each character), not "
                           f"{kind}; save it as UTF-8")
    return ConfigError(f"{where}: a binary file (a NUL byte), not {kind}")


def looks_utf16(raw: bytes) -> bool:
    """Whether ``raw`` starts like UTF-16 text of mostly ASCII characters: every other byte NUL, the others not."""
    sample = raw[:256]
    sample = sample[: len(sample) // 2 * 2]
    if len(sample) < 4:
        return False
    for nuls, chars in ((sample[0::2], sample[1::2]), (sample[1::2], sample[0::2])):
        if nuls.count(0) >= 0.9 * len(nuls) and 0 not in chars:
            return True
    return False


def not_utf8_error(where: str, kind: str) -> ConfigError:
    return ConfigError(f"{where}: not UTF-8 text, so not {kind}")


def decode_utf8(raw: bytes, where: str, kind: str, *, final: bool = True) -> str:
    """``raw`` as text without its BOM. ``final`` False: a multi-byte character cut at the end (a file's first
    bytes) is dropped, not an error. ``kind``: what the file should be ("YAML or JSON text")."""
    nul = raw.find(b"\0")
    if nul >= 0:
        raise binary_error(f"{where}, byte {nul + 1:,}", kind, raw)
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(raw, final=final)
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise not_utf8_error(f"{where}, line {line}" if line > 1 else f"{where}, byte {e.start + 1:,}", kind) from None
    return text.removeprefix(BOM)


def utf8_lines(path: Path, kind: str, max_line_bytes: int, too_long: str = "") -> Iterator[tuple[int, str]]:
    """(1-based line number, text with its line end) of every line, read in binary with a bounded ``readline`` so a
    giant line costs at most the bound; line 1's BOM is dropped. ``too_long``: what a longer line probably is.
    A compressed or UTF-16 file is read through :func:`open_text`."""
    with open_text(path, kind) as f:
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
                raise binary_error(f"{path}, line {n}", kind, raw if n == 1 else b"")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise not_utf8_error(f"{path}, line {n}, byte {e.start + 1:,}", kind) from None
            yield n, text.removeprefix(BOM) if n == 1 else text


# ------------------------------------------------------------------------------------ compressed and UTF-16 text

def compression_of(head: bytes) -> str | None:
    """The compression a file's first bytes announce (gzip, zstd, xz, bz2), or None."""
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    if head[:3] == b"BZh" and head[3:4].isdigit() and head[3:4] != b"0" and head[4:10] in _BZ2_BLOCKS:
        return "bz2"
    return None


def open_text(path: Path, kind: str) -> BinaryIO:
    """The file's text as a binary stream of (unchecked) UTF-8 bytes, for ``readline`` / ``read`` as from
    ``open(path, "rb")``: decompressed when its first bytes are a gzip, zstd, xz or bzip2 header, transcoded when they
    are a UTF-16 byte-order mark (an Excel "Unicode text" export). A plain file is returned as it is opened. Errors
    are one-line ConfigErrors: zstd without the optional ``zstandard`` module, a stream cut short or damaged, a
    bomb, binary content. ``kind`` names what the file should be."""
    f = open(path, "rb")  # noqa: SIM115 - handed to the caller, closed through the returned stream
    try:
        head = f.peek(16)[:16]
        method = compression_of(head)
        if method == "zstd" and not _zstd_available():
            raise ConfigError(f"{path}: zstd-compressed, and reading zstd needs the optional 'zstandard' module "
                              f"(pip install zstandard), or decompress it first (zstd -d {path.name})")
        if head[:4] == b"PK\x03\x04":
            raise ConfigError(f"{path}: a zip archive, not {kind}; unzip it and give the file inside")
        stream: io.BufferedReader = f
        label = ""
        raw: _Decompressed | None = None
        if method is not None:
            raw = _Decompressed(f, method, path, kind)
            stream = io.BufferedReader(raw, CHUNK_BYTES)
            head = stream.peek(4)[:4]
            label = f"{method}-compressed"
        if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
            stream = io.BufferedReader(_Utf16(stream, path, f"{label} UTF-16".strip()), CHUNK_BYTES)
        elif raw is not None:
            raw.check_nul(stream.peek(CHUNK_BYTES))
        return stream
    except BaseException:
        f.close()
        raise


def _zstd_available() -> bool:
    try:
        import zstandard  # noqa: F401  (optional: pip install zstandard)
    except ImportError:
        return False
    return True


def _zstd_reader(f: IO[bytes]) -> IO[bytes]:
    import zstandard

    return zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)


_OPENERS: dict[str, Callable[[IO[bytes]], Any]] = {
    "gzip": lambda f: gzip.GzipFile(fileobj=f, mode="rb"),
    "xz": lambda f: lzma.LZMAFile(f),
    "bz2": lambda f: bz2.BZ2File(f),
    "zstd": _zstd_reader,
}


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n:,} bytes"


class _Decompressed(io.RawIOBase):
    """The decompressed bytes of ``f``, counted: a stream cut short or damaged, text past :data:`MAX_TEXT_BYTES` or
    :data:`MAX_RATIO` times the compressed bytes read, and (once :meth:`check_nul` has run) a NUL byte each end the
    reading with one ConfigError naming the file and where in it the reading stopped."""

    def __init__(self, f: IO[bytes], method: str, path: Path, kind: str) -> None:
        super().__init__()
        self._file = f
        self._inner = _OPENERS[method](f)
        self._method = method
        self._path = path
        self._kind = kind
        self._nul = False
        self.out = 0  # decompressed bytes handed out
        self.lines = 0  # newlines in them

    def readable(self) -> bool:
        return True

    def _where(self) -> str:
        return f"after {_size(self.out)} of text, in line {self.lines + 1:,}, at compressed byte {self._file.tell():,}"

    def check_nul(self, data: bytes) -> None:
        """From now on a NUL byte is an error; ``data`` is what was read before (the first chunk, peeked)."""
        self._nul = True
        nul = data.find(b"\0")
        if nul >= 0:
            raise self._binary(nul)

    def _binary(self, at: int) -> ConfigError:
        return ConfigError(f"{self._path}: {self._method}-compressed, and what it holds is binary (a NUL byte at "
                           f"byte {at + 1:,} of its content), not {self._kind}")

    def readinto(self, b: Any) -> int:
        try:
            # read1: what one step decompresses, so a stream cut short hands out its text up to the cut first and
            # the error can say where that was
            data = self._inner.read1(min(len(b), CHUNK_BYTES))
        except EOFError:
            raise ConfigError(f"{self._path}: the {self._method} stream is cut short (it ends {self._where()}: a "
                              "partial download or copy?)") from None
        except (OSError, zlib.error, lzma.LZMAError, ValueError) as e:
            raise ConfigError(f"{self._path}: damaged {self._method} data ({str(e)[:80] or type(e).__name__}), "
                              f"{self._where()}") from None
        except Exception as e:  # zstandard.ZstdError (the optional module's own type)
            if type(e).__module__.startswith("zstandard"):
                raise ConfigError(f"{self._path}: damaged zstd data ({str(e)[:80]}), {self._where()}") from None
            raise
        n = len(data)
        if self._nul:
            nul = data.find(b"\0")
            if nul >= 0:
                raise self._binary(self.out + nul)
        self.out += n
        self.lines += data.count(b"\n")
        unpack = f"{_UNPACK[self._method]} {self._path.name}"
        if self.out > MAX_TEXT_BYTES:
            raise ConfigError(f"{self._path}: decompresses to more than {MAX_TEXT_BYTES // 2**30} GiB of text "
                              f"(stopped {self._where()}): not a trace decodecalc can read whole; {unpack} and read "
                              "a part of it")
        if self.out > RATIO_FLOOR and self.out > MAX_RATIO * max(self._file.tell(), 1):
            raise ConfigError(f"{self._path}: decompresses to over {MAX_RATIO} times its compressed size (stopped "
                              f"{self._where()}): a decompression bomb, not a trace; if it is one, {unpack} and "
                              "give the text file")
        b[:n] = data
        return n

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._file.close()
            super().close()


class _Utf16(io.RawIOBase):
    """UTF-16 text (its BOM says the byte order) re-encoded as UTF-8, a chunk at a time."""

    def __init__(self, src: IO[bytes], path: Path, label: str) -> None:
        super().__init__()
        self._src = src
        self._path = path
        self._label = label
        self._decoder = codecs.getincrementaldecoder("utf-16")()
        self._pending = b""
        self._in = 0  # UTF-16 bytes read
        self._lines = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._pending:
            raw = self._src.read(CHUNK_BYTES)
            try:
                text = self._decoder.decode(raw, final=not raw)
            except UnicodeDecodeError as e:
                raise ConfigError(f"{self._path}: {self._label} text with a broken character (near line "
                                  f"{self._lines + 1:,}, byte {self._in + e.start + 1:,}: {e.reason})") from None
            self._in += len(raw)
            self._lines += text.count("\n")
            self._pending = text.encode("utf-8")
            if not raw:
                break
        n = min(len(b), len(self._pending))
        b[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def close(self) -> None:
        try:
            self._src.close()
        finally:
            super().close()
