"""`decodecalc verify` without the optional extra: importing stays light, errors say what to install."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from decodecalc.cli import app


def test_importing_the_cli_imports_neither_torch_nor_triton():
    code = ("import sys, decodecalc.cli, decodecalc.commands.verify, decodecalc.verify.runner; "
            "bad = [m for m in ('torch', 'triton') if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_missing_extra_is_a_clear_error(monkeypatch):
    import decodecalc.verify as v

    monkeypatch.setattr(v, "missing_requirements", lambda: ["torch", "triton"])
    r = CliRunner().invoke(app, ["verify", "--model", "llama3-8b", "--seq-len", "64"], env={"COLUMNS": "200"})
    assert r.exit_code == 1
    from decodecalc.extras import install_hint

    assert "Error:" in r.output and install_hint("verify") in r.output
    assert "decodecalc[verify]" not in r.output  # nothing is published under that name
    assert "Traceback" not in r.output


def test_grid_verify_without_the_extra_fails_before_printing(monkeypatch):
    import decodecalc.verify as v

    monkeypatch.setattr(v, "missing_requirements", lambda: ["torch", "triton"])
    r = CliRunner().invoke(app, ["grid", "--model", "llama3-8b", "--verify"], env={"COLUMNS": "200"})
    assert r.exit_code == 1 and r.output.startswith("Error:") and "Decode attention launch" not in r.output


def test_the_install_hint_names_where_decodecalc_came_from(monkeypatch):
    import decodecalc.extras as ex

    monkeypatch.setattr(ex, "_source_dir", lambda: "/home/me/decodecalc")
    assert ex.install_hint("plot") == "pip install '/home/me/decodecalc[plot]'"
    monkeypatch.setattr(ex, "_source_dir", lambda: None)
    assert ex.install_hint("verify") == "pip install '.[verify]' (from the decodecalc clone)"


def test_verify_help_lists_its_options():
    r = CliRunner().invoke(app, ["verify", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    for opt in ("--kernels", "--vllm-src", "--sglang-src", "--json", "--output", "--model", "--seq-lens"):
        assert opt in r.stdout


def test_profiled_systems_are_the_profilers_backends():
    from decodecalc.commands.verify import PROFILED
    from decodecalc.verify.profiler import BACKENDS

    assert PROFILED == tuple(BACKENDS)


def test_verify_a_backend_that_cannot_be_imported_names_the_package(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "flashinfer" else real(name, *a))
    r = CliRunner().invoke(app, ["verify", "--model", "llama3-8b", "--seq-len", "64", "--system", "flashinfer"],
                           env={"COLUMNS": "200"})
    assert r.exit_code == 1
    assert r.output.startswith("Error:") and r.output.count("\n") == 1, r.output
    assert "pip install flashinfer-python" in r.output and "Traceback" not in r.output


def test_verify_unknown_system_is_a_usage_error():
    r = CliRunner().invoke(app, ["verify", "--model", "llama3-8b", "--seq-len", "64", "--system", "nope"],
                           env={"COLUMNS": "200"})
    assert r.exit_code == 2 and "flashinfer" in r.output
