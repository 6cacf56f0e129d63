"""Compressed and UTF-16 traces (issue 43): gzip, xz and bzip2 read by content, zstd through the optional module,
UTF-16 exports transcoded, and each bad compressed input refused with one line naming the file and where the reading
stopped, bounded in time and memory, with no partial output."""

from __future__ import annotations

import bz2
import gzip
import lzma
import sys
import time
import tracemalloc
import types
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from decodecalc import textfiles
from decodecalc.cli import app
from helpers import trace_error as error
from decodecalc.errors import ConfigError
from decodecalc.textfiles import compression_of
from decodecalc.traffic.traces import read_requests

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "traces"
FILES = ["azure-code-2023.csv", "burstgpt.csv", "mooncake.jsonl", "native.csv", "vllm-bench-result.json",
         "sglang-bench.jsonl", "sharegpt.json"]
PACK = {"gzip": gzip.compress, "xz": lzma.compress, "bz2": bz2.compress}




def same(a, b) -> bool:
    return (list(a.rows()), a.format, a.has_arrivals, a.notes) == (list(b.rows()), b.format, b.has_arrivals, b.notes)


@pytest.mark.parametrize("method", sorted(PACK))
@pytest.mark.parametrize("name", FILES)
def test_compressed_reads_like_the_text_by_content_not_name(tmp_path, name, method):
    plain = read_requests(EXAMPLES / name)
    packed = tmp_path / name  # the same name as the text file: the magic bytes decide, not a .gz suffix
    packed.write_bytes(PACK[method]((EXAMPLES / name).read_bytes()))
    got = read_requests(packed)
    assert same(got, plain) and got.path == str(packed)


def test_a_gz_name_on_plain_text_and_concatenated_members(tmp_path):
    text = (EXAMPLES / "native.csv").read_bytes()
    named = tmp_path / "trace.csv.gz"
    named.write_bytes(text)
    assert len(read_requests(named)) == 24
    head, _, rest = text.partition(b"\n")
    members = tmp_path / "m.csv"  # `cat a.gz b.gz` is one valid gzip file of two members
    members.write_bytes(gzip.compress(head + b"\n" + rest[:200]) + gzip.compress(rest[200:]))
    assert list(read_requests(members).rows()) == list(read_requests(EXAMPLES / "native.csv").rows())


def test_compression_is_recognized_by_its_magic_only():
    assert compression_of(b"\x1f\x8b\x08\x00") == "gzip"
    assert compression_of(b"\x28\xb5\x2f\xfd\x00") == "zstd"
    assert compression_of(bz2.compress(b"x")[:10]) == "bz2" and compression_of(bz2.compress(b"")[:10]) == "bz2"
    assert compression_of(b"BZh91,2,3\n4,5,6\n") is None  # a CSV whose first column is named BZh9
    assert compression_of(b"prompt_tokens,output_tokens\n") is None


@pytest.mark.parametrize("encoding, bom", [("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff")])
def test_utf16_excel_export_is_read(tmp_path, encoding, bom):
    text = (EXAMPLES / "azure-code-2023.csv").read_text(encoding="utf-8").replace("\n", "\r\n")
    p = tmp_path / "excel.csv"
    p.write_bytes(bom + text.encode(encoding))
    plain = read_requests(EXAMPLES / "azure-code-2023.csv")
    assert list(read_requests(p).rows()) == list(plain.rows())
    z = tmp_path / "excel2.csv"
    z.write_bytes(gzip.compress(bom + text.encode(encoding)))
    assert list(read_requests(z).rows()) == list(plain.rows())
    tsv = tmp_path / "excel.txt"  # Excel's "Unicode text": UTF-16 and tab-separated
    tsv.write_bytes(bom + text.replace(",", "\t").encode(encoding))
    assert list(read_requests(tsv).rows()) == list(plain.rows()) and read_requests(tsv).format == "azure"
    broken = tmp_path / "broken.csv"
    broken.write_bytes(bom + text.encode(encoding) + b"\x00")  # an odd byte count: a character cut in half
    assert "UTF-16 text with a broken character (near line 42" in error(broken)


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_without_its_byte_order_mark_is_named(tmp_path, encoding):
    p = tmp_path / "nobom.csv"
    p.write_bytes((EXAMPLES / "azure-code-2023.csv").read_text(encoding="utf-8").encode(encoding))
    assert "UTF-16 text without a byte-order mark (a NUL byte beside each character), not a text request trace" in \
        error(p)
    from decodecalc.traffic.steps import load_step_columns

    steps = tmp_path / "s.jsonl"
    steps.write_bytes('{"seq_lens": [5]}\n'.encode(encoding))
    with pytest.raises(ConfigError, match="line 1: UTF-16 text without a byte-order mark .*; save it as UTF-8"):
        load_step_columns(steps)
    binary = tmp_path / "b.csv"  # NULs, but not every other byte: still a binary file
    binary.write_bytes(b"\x00\x01\x00\x00\x02\x03" * 20)
    assert "a binary file (a NUL byte)" in error(binary)


def test_gzip_cut_short_says_where(tmp_path):
    data = gzip.compress((EXAMPLES / "azure-code-2023.csv").read_bytes())
    p = tmp_path / "cut.csv.gz"
    p.write_bytes(data[: len(data) // 2])
    msg = error(p)
    assert msg.startswith(f"{p}: the gzip stream is cut short (it ends after ") and "bytes of text, in line " in msg
    line = int(msg.split("in line ")[1].split(",")[0])
    assert 2 < line < 41  # somewhere inside the file's 41 lines, not at its start or end
    p.write_bytes(data[:-4])  # only the trailer's length missing
    assert "cut short" in error(p)
    p.write_bytes(data[:5])
    assert "cut short (it ends after 0 bytes of text, in line 1, at compressed byte 5" in error(p)
    for method in ("xz", "bz2"):
        q = tmp_path / f"cut.{method}"
        q.write_bytes(PACK[method]((EXAMPLES / "mooncake.jsonl").read_bytes())[:300])
        assert f"the {method} stream is cut short" in error(q)


def test_damaged_gzip_and_binary_content(tmp_path):
    data = bytearray(gzip.compress((EXAMPLES / "azure-code-2023.csv").read_bytes()))
    data[40] ^= 0xFF
    p = tmp_path / "bad.gz"
    p.write_bytes(bytes(data))
    assert "damaged gzip data (" in error(p)
    png = tmp_path / "image.csv.gz"
    png.write_bytes(gzip.compress(b"\x89PNG\r\n\x1a\n\x00\x00" + bytes(range(256)) * 50))
    assert error(png).endswith("gzip-compressed, and what it holds is binary (a NUL byte at byte 9 of its content), "
                               "not a text request trace (a UTF-8 CSV, JSON Lines or JSON file)")
    late = tmp_path / "late.gz"  # a NUL past the first chunk is caught too
    late.write_bytes(gzip.compress(b"prompt_tokens,output_tokens\n" + b"5,3\n" * 400_000 + b"5,\x003\n"))
    assert "binary (a NUL byte at byte 1,600,031 of its content)" in error(late)
    z = tmp_path / "a.zip"
    z.write_bytes(b"PK\x03\x04" + bytes(40))
    assert "a zip archive, not a text request trace" in error(z)


def _bomb(path: Path, head: bytes, fill: bytes, mib: int) -> None:
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip header and trailer
    with open(path, "wb") as f:
        f.write(comp.compress(head))
        chunk = fill * (2**20 // len(fill))
        for _ in range(mib):
            f.write(comp.compress(chunk))
        f.write(comp.flush())


def test_a_gzip_bomb_stops_early_with_bounded_memory_and_time(tmp_path, monkeypatch):
    p = tmp_path / "bomb.json"
    _bomb(p, b"[", b" ", 64)  # 64 MiB of blanks inside a JSON array, ~64 KB compressed
    assert p.stat().st_size < 2**20
    tracemalloc.start()
    start = time.monotonic()
    try:
        msg = error(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - start < 20 and peak < 64 * 2**20  # stopped at ~17 MiB of text, never held
    assert "decompresses to over 200 times its compressed size (stopped after 1" in msg
    assert "a decompression bomb, not a trace; if it is one, gunzip -k bomb.json" in msg
    # a newline bomb in a CSV: blank lines are skipped, so the ratio check is what ends it (a smaller floor here
    # keeps the test fast; the shipped 16 MiB costs ~10 s)
    monkeypatch.setattr(textfiles, "RATIO_FLOOR", 2**20)
    nl = tmp_path / "nl.csv"
    _bomb(nl, b"prompt_tokens,output_tokens\n", b"\n", 64)
    assert "decompresses to over 200 times" in error(nl)
    # and the absolute cap, for text that compresses like a trace
    monkeypatch.setattr(textfiles, "MAX_TEXT_BYTES", 2**20)
    big = tmp_path / "big.csv"
    big.write_bytes(gzip.compress(b"prompt_tokens,output_tokens\n" +
                                  b"".join(b"%d,%d\n" % (i % 9973 + 1, i % 7919 + 1) for i in range(300_000))))
    assert "decompresses to more than 0 GiB of text (stopped after 1.0 MiB of text" in error(big)


def test_zstd_needs_the_optional_module(tmp_path, monkeypatch):
    p = tmp_path / "trace.jsonl.zst"
    p.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(20))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # not installed
    assert error(p) == (f"{p}: zstd-compressed, and reading zstd needs the optional 'zstandard' module "
                        "(pip install zstandard), or decompress it first (zstd -d trace.jsonl.zst)")


def test_zstd_through_the_module_when_installed(tmp_path, monkeypatch):
    """The zstandard module's stream reader is driven like the stdlib's (a stand-in module here: the real one is an
    optional dependency, and its frames are what the magic bytes recognize)."""
    text = (EXAMPLES / "mooncake.jsonl").read_bytes()
    p = tmp_path / "trace.jsonl.zst"
    p.write_bytes(b"\x28\xb5\x2f\xfd" + gzip.compress(text))

    class Decompressor:
        def stream_reader(self, f, read_across_frames=False):
            assert read_across_frames and f.read(4) == b"\x28\xb5\x2f\xfd"
            return gzip.GzipFile(fileobj=f)

    fake = types.ModuleType("zstandard")
    fake.ZstdDecompressor = Decompressor  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "zstandard", fake)
    assert list(read_requests(p).rows()) == list(read_requests(EXAMPLES / "mooncake.jsonl").rows())


def test_cli_reads_gzip_and_refuses_a_cut_stream_with_no_output(tmp_path):
    runner = CliRunner()
    good = tmp_path / "t.csv.gz"
    good.write_bytes(gzip.compress((EXAMPLES / "azure-code-2023.csv").read_bytes()))
    r = runner.invoke(app, ["tune", "-m", "llama3-8b", "--requests", str(good), "--engine", "vllm"],
                      env={"COLUMNS": "100"})
    assert r.exit_code == 0 and "azure trace: 40 requests" in r.output, r.output
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(good.read_bytes()[:300])
    out = tmp_path / "out.json"
    r = runner.invoke(app, ["tune", "-m", "llama3-8b", "--requests", str(cut), "--engine", "vllm", "-o", str(out)],
                      env={"COLUMNS": "100"})
    assert r.exit_code == 1 and r.output.startswith(f"Error: {cut}: the gzip stream is cut short")
    assert r.output.count("\n") == 1 and not out.exists()


def test_a_gzip_step_trace(tmp_path):
    from decodecalc.traffic.steps import load_step_columns

    text = b'{"seq_lens": [5, 9]}\n{"seq_lens": [6, 10, 3]}\n'
    plain, packed = tmp_path / "s.jsonl", tmp_path / "s.jsonl.gz"
    plain.write_bytes(text)
    packed.write_bytes(gzip.compress(text))
    assert repr(load_step_columns(packed)) == repr(load_step_columns(plain)).replace(str(plain), str(packed))



def test_progress_lines_while_reading(tmp_path, monkeypatch):
    from decodecalc.traffic.traces import table as table_module

    monkeypatch.setattr(table_module, "PROGRESS_EVERY", 10)
    p = tmp_path / "t.csv.gz"
    rows = "".join(f"{i + 1},{i % 7 + 1},{(25 - i) * 0.5}\n" for i in range(25))  # out of order: sorted at the end
    p.write_bytes(gzip.compress(("prompt_tokens,output_tokens,arrival_s\n" + rows).encode()))
    lines: list[str] = []
    t = read_requests(p, progress=lines.append)
    assert len(t) == 25 and lines == [f"reading {p}: 10 requests", f"reading {p}: 20 requests",
                                      "sorting 25 requests by arrival"]


def test_a_compressed_trace_is_read_as_a_stream(tmp_path):
    """32 MB of text in a gzip file (a long ignored column) read with a few MB of memory: never held whole."""
    import random

    rng = random.Random(7)
    pad = "".join(rng.choice("0123456789abcdef") for _ in range(4000))
    text = "prompt_tokens,output_tokens,note\n" + "".join(f"{i % 500 + 1},{i % 90 + 1},{pad[i % 97:][:3000]}\n"
                                                        for i in range(11_000))
    assert len(text) > 32 * 10**6
    p = tmp_path / "wide.csv"
    p.write_bytes(gzip.compress(text.encode(), 1))
    del text
    tracemalloc.start()
    try:
        t = read_requests(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(t) == 11_000 and peak < 12 * 2**20, peak
