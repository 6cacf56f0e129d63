"""Every command reads at 80 columns and in a pipe (issue 11, first hour 4): CliRunner output is a pipe,
COLUMNS=80; no line may be wider and nothing may be cut with an ellipsis."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from decodecalc.cli import app

runner = CliRunner()

COMMANDS = [
    ["grid"],
    ["grid", "-m", "llama3-70b", "--tp", "8", "--seq-lens", "100,5000,20000,7,131072"],
    ["grid", "--explain", "-m", "deepseek-v3", "--tp", "8"],
    ["grid", "-m", "gemma-2-9b", "--layer", "sliding", "-s", "16384", "--kernel-block-size", "8"],
    ["compare"],
    ["compare", "-m", "llama3-70b", "--tp", "8", "-b", "64", "-s", "8192"],
    ["compare", "--seq-lens", "100,5000,20000", "--explain", "-p", "vllm,fa3"],
    ["recommend", "-m", "llama3-70b", "--tp", "8", "-b", "64", "-s", "8192"],
    ["recommend", "-m", "llama3-8b", "-b", "1", "-s", "32768", "--gpu", "b200"],
    ["determinism"],
    ["determinism", "-m", "llama3-70b", "--tp", "8", "-s", "32768", "--batch-invariant"],
    ["cudagraphs"],
    ["models"],
    ["gpus"],
    ["explain", "-m", "llama3-70b", "--tp", "8", "-b", "4"],
    ["sweep", "-b", "1:64", "-s", "1K:128K:x2", "-p", "vllm,sglang,fa3"],
    ["tune", "-w", "chat"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a))
def test_fits_80_columns_in_a_pipe(args):
    r = runner.invoke(app, args, env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    wide = [line for line in lines if len(line) > 80]
    assert not wide, "\n".join(wide[:3])
    cut = [line for line in lines if "\N{HORIZONTAL ELLIPSIS}" in line]
    assert not cut, "\n".join(cut[:3])


def test_gpus_is_compact():
    """15 GPUs took 224 lines (the source column folded); one row each now, the sources below."""
    r = runner.invoke(app, ["gpus"], env={"COLUMNS": "80", "NO_COLOR": "1"})
    from decodecalc.specs.gpus import GPUS

    assert r.exit_code == 0 and len(r.output.splitlines()) <= 6 + 5 * len(GPUS)
    for g in GPUS:
        assert g.name in r.output


def test_determinism_marks_changes_without_colour():
    r = runner.invoke(app, ["determinism"], env={"COLUMNS": "80", "NO_COLOR": "1"})
    text = " ".join(r.output.split())
    assert "B=1-16: 16x160 3D | B=17-256: 1x2560 2D" in text  # vLLM's 2D/3D switch at 17, chapter example
    assert " NO " in r.output and " yes " in r.output


HELP_COMMANDS = ["grid", "explain", "models", "gpus", "compare", "sweep", "determinism", "cudagraphs", "verify",
                 "recommend", "tune", "calibrate"]


@pytest.mark.parametrize("command", HELP_COMMANDS)
def test_help_at_80_columns_cuts_and_breaks_nothing(command):
    """Issue 19 item 3: every --help at 80 columns shows every option name whole (no `--max-num-batched-tok…`),
    no ellipsis anywhere (env vars such as SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS, default paths), and a flag
    with no `<bool>` value."""
    r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    assert "\N{HORIZONTAL ELLIPSIS}" not in r.output
    assert all(len(line) <= 80 for line in r.output.splitlines())
    for param in _group().get_command(None, command).params:
        for name in getattr(param, "opts", []) + getattr(param, "secondary_opts", []):
            if name.startswith("--"):
                assert name in r.output, name
    flags = [line for line in r.output.splitlines() if ("--json" in line or "--help" in line) and "<bool>" in line]
    assert not flags, flags


def _group():
    import typer

    return typer.main.get_command(app)


def test_ids_tuples_and_headers_stay_whole_at_80_columns():
    """Issue 19 item 3: `models` kept `deepseek-v2-l` / `ite` on two lines, `cudagraphs` split `(12, 1,` / `16)`,
    and compare with a custom config broke its header into `tok/spli` / `t`."""
    import re

    from decodecalc.specs.models import model_library

    env = {"COLUMNS": "80", "NO_COLOR": "1"}
    models = runner.invoke(app, ["models"], env=env).output
    for name in model_library():
        assert re.search(rf"^ ?{re.escape(name)}\s", models, re.M), name
    graphs = runner.invoke(app, ["cudagraphs"], env=env).output
    open_tuple = re.compile(r"\(\d+(, \d+)*,\s*(│|$)")  # a tuple cut after a comma: `(12, 1,`
    assert not [line for line in graphs.splitlines() if open_tuple.search(line)]
    custom = runner.invoke(app, ["compare", "-m", "examples/hf-config/config.json"], env=env).output
    assert "tok/split" in custom and "predicted" in custom
