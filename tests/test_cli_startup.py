"""Start-up: the console script converts plain options without pydantic (decodecalc/commands/fastparams.py),
with the same values and the same kind of usage error as typer's own coercion."""

from __future__ import annotations

import subprocess
import sys
from enum import Enum
from pathlib import Path

import pytest
from typer.testing import CliRunner

from decodecalc.cli import app
from decodecalc.commands import fastparams
from decodecalc.commands.options import CudagraphMode, KvDtype
from helpers import modules_loaded_by

runner = CliRunner()


def test_grid_imports_no_pydantic_torch_or_numpy():
    code = ("import sys, io, contextlib\nsys.argv = ['decodecalc', 'grid', '--model', 'llama3-8b', '--tp', '8']\n"
            "from decodecalc.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main()\n    except SystemExit as e:\n        assert not e.code, e.code")
    assert modules_loaded_by(code, packages=("pydantic", "torch", "numpy", "triton")) == []


class Mode(str, Enum):
    a = "alpha"
    b = "Beta"


CASES = [
    (int, ["8", " 12 ", "-3", "1_000", 7], ["abc", "8.5", ""]),
    (float, ["1.5", "2", " 3e9 ", 4], ["x", ""]),
    (str, ["llama3-8b", "", "[bold]"], []),
    (bool, ["true", "0", "yes", True], ["maybe"]),
    (Path, ["a/b.yaml", "/tmp"], []),
    (Mode, ["alpha", "Beta"], ["beta", "gamma"]),
]


@pytest.mark.parametrize("annotation, good, bad", CASES, ids=lambda c: getattr(c, "__name__", None))
def test_fast_conversion_agrees_with_typer(annotation, good, bad):
    """Every value our converter accepts, typer's pydantic path accepts with the same result; every value it
    rejects, typer rejects too."""
    pytest.importorskip("pydantic")
    from typer import _adapters
    from typer.models import OptionInfo

    info = OptionInfo()
    typer_adapter = _adapters.try_build_adapter(annotation, info)
    ours = fastparams.converter(annotation, info)
    assert ours is not None and typer_adapter is not None
    for v in good:
        assert ours(v) == typer_adapter.validate_python(v), v
    for v in bad:
        with pytest.raises(ValueError):
            ours(v)
        with pytest.raises(ValueError):  # pydantic's ValidationError is a ValueError
            typer_adapter.validate_python(v)


def test_case_insensitive_enum_and_other_settings_fall_back():
    from typer.models import OptionInfo

    conv = fastparams.converter(CudagraphMode, OptionInfo(case_sensitive=False))
    assert conv is not None and conv("piecewise") is CudagraphMode.PIECEWISE
    assert fastparams.converter(KvDtype, OptionInfo())("fp8") is KvDtype.fp8
    assert fastparams.converter(int, OptionInfo(min=1)) is None  # ranges: typer's own code
    assert fastparams.converter(list[str], OptionInfo()) is None
    assert fastparams.converter(Path, OptionInfo(exists=True)) is None


@pytest.mark.parametrize("args, needle", [
    (["--tp", "abc"], "Invalid value for '--tp'"),
    (["--bandwidth", "x"], "Invalid value for '--bandwidth'"),
    (["--layer", "local"], "'local' is not one of 'global', 'sliding'"),
])
def test_bad_values_are_usage_errors(args, needle):
    r = runner.invoke(app, ["grid", *args], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output


def test_shell_completion_offers_commands_and_choices():
    import os

    exe = Path(sys.executable).with_name("decodecalc")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "decodecalc"]
    env = dict(os.environ, _DECODECALC_COMPLETE="complete_bash", COMP_WORDS="decodecalc grid --kv-cache-dtype fp",
               COMP_CWORD="3")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert set(r.stdout.split()) == {"fp8", "fp8_e4m3", "fp8_e5m2"}, r.stdout + r.stderr
    env.update(COMP_WORDS="decodecalc rec", COMP_CWORD="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert r.stdout.split() == ["recommend"], r.stdout + r.stderr
