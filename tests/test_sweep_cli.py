"""`decodecalc sweep` through CliRunner: files written atomically, heatmaps, bad input before any work."""

from __future__ import annotations

import csv
import json
import struct
import zlib

import pytest
from typer.testing import CliRunner

from decodecalc.cli import app
from decodecalc.plot import plot_available

runner = CliRunner()
ENV = {"COLUMNS": "120", "NO_COLOR": "1"}


def invoke(*args: str):
    return runner.invoke(app, ["sweep", *args], env=ENV)


def test_sweep_csv_file(tmp_path):
    out = tmp_path / "s.csv"
    r = invoke("-b", "1:20", "-s", "256:4096:x2", "-o", str(out), "-q")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 20 * 5 * 2
    vllm16 = [x for x in rows if x["policy"] == "vllm" and x["batch"] == "16" and x["seq_len"] == "4096"][0]
    vllm17 = [x for x in rows if x["policy"] == "vllm" and x["batch"] == "17" and x["seq_len"] == "4096"][0]
    assert vllm16["region"] == "3D" and vllm17["region"] == "2D"  # section 2.3 cliff
    assert not list(tmp_path.glob(".*tmp"))  # the temp file was renamed away


def test_sweep_json_models_tp_gpus(tmp_path):
    out = tmp_path / "s.json"
    r = invoke("-m", "llama3-8b,llama3-70b", "--tp", "8", "-g", "h200,h100-sxm", "-b", "1,8", "-s", "2560",
               "-p", "vllm,sglang,flashdecoding", "-o", str(out), "-q")
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert len(data["grids"]) == 2 * 2 * 3  # 8B cannot use TP 8? it can: 32/8 heads, 8/8 KV heads
    g = [x for x in data["grids"] if x["model"] == "llama3-70b" and x["policy"] == "flashdecoding"][0]
    assert g["values"]["splits"][0][0] == 132  # S* = ceil(132 / 1)


def test_sweep_terminal_heatmap():
    r = invoke("-m", "llama3-70b", "--tp", "8", "-b", "1:256", "-s", "512:131072:x2", "--metric", "region")
    assert r.exit_code == 0, r.output
    assert "vllm: region" in r.output and "sglang: region" in r.output and "█" in r.output


def test_sweep_stdout_csv():
    r = invoke("-b", "1", "-s", "2560", "--format", "csv", "-q")
    assert r.exit_code == 0
    assert r.output.splitlines()[0].startswith("model,tp,gpu,policy,batch,seq_len")


def test_sweep_inapplicable_policy_is_reported():
    r = invoke("-m", "deepseek-v3", "--tp", "8", "-b", "1:4", "-s", "1024", "-p", "vllm,flashmla")
    assert r.exit_code == 0, r.output
    assert "not applicable" in r.output and "MLA" in r.output


@pytest.mark.parametrize(
    "args, message",
    [
        (("-b", "10:1"), "end 1 < start 10"),
        (("-s", "0:100"), "positive"),
        (("-s", "1:999999999"), "over the supported"),
        (("-b", ""), "--batch is empty"),
        (("-p", "nope"), "unknown policy"),
        (("-o", "/no/such/dir/x.csv"), "does not exist"),
        (("-m", "llama3-8b", "--tp", "3"), "not divisible"),
        (("-b", "1:65536", "-s", "1:1000", "-p", "all"), "points"),
    ],
    ids=["empty-range", "zero", "absurd", "blank", "policy", "folder", "tp", "too-many"],
)
def test_sweep_bad_input(args, message):
    r = invoke(*args)
    assert r.exit_code != 0
    assert "Error:" in r.output and message in r.output, r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("args", [("--format", "xml"), ("--metric", "heat")])
def test_sweep_bad_choice_is_a_usage_error(args):
    r = invoke(*args)
    assert r.exit_code == 2 and args[0] in r.output and "Traceback" not in r.output


def _png_pixels_nonuniform(data: bytes) -> bool:
    """Decode enough of an 8-bit RGB(A) PNG to tell whether it has more than one colour."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, ctype = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, _, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    channels = 4 if ctype == 6 else 3
    stride = width * channels + 1
    colours = {raw[r * stride + 1 + c * channels: r * stride + 1 + (c + 1) * channels]
               for r in range(0, height, max(1, height // 50)) for c in range(0, width, max(1, width // 50))}
    return len(colours) > 8


@pytest.mark.skipif(not plot_available(), reason="matplotlib (the 'plot' extra) is not installed")
def test_sweep_png(tmp_path):
    png = tmp_path / "fig1.png"
    r = invoke("-m", "llama3-70b", "--tp", "8", "-b", "1:64", "-s", "512:65536:x2", "--plot", str(png), "-q")
    assert r.exit_code == 0, r.output
    assert png.exists() and png.stat().st_size > 20_000
    assert _png_pixels_nonuniform(png.read_bytes())


@pytest.mark.skipif(plot_available(), reason="only without matplotlib")
def test_sweep_png_without_extra(tmp_path):
    r = invoke("--plot", str(tmp_path / "x.png"))
    assert r.exit_code != 0 and "'plot' extra" in r.output


def test_sweep_help():
    r = invoke("--help")
    assert r.exit_code == 0 and "--seq-len" in r.output
