"""The public Python API: decodecalc.grid / compare / recommend return what `--json` prints."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import decodecalc
from decodecalc.cli import app
from decodecalc.errors import ConfigError, UnknownNameError
from helpers import modules_loaded_by

runner = CliRunner()


def cli_json(*args: str) -> dict:
    r = runner.invoke(app, [*args, "--json"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


# (CLI arguments, the same call in Python)
GRID = [
    (["-m", "llama3-8b", "--tp", "8"], dict(model="llama3-8b", tp=8)),
    (["-m", "llama3-70b", "--tp", "8", "-b", "64", "-s", "8192"], dict(model="llama3-70b", tp=8, batch=64, seq_len=8192)),
    (["-m", "llama3-8b", "--seq-lens", "512,8192,40"], dict(model="llama3-8b", seq_lens=[512, 8192, 40])),
    (["-m", "llama3-8b", "--seq-lens", "512,8192"], dict(model="llama3-8b", seq_lens="512,8192")),
    (["-m", "qwen3-8b", "-b", "4", "--query-lens", "4,4,4,4", "--no-cuda-graph", "--system", "vllm"],
     dict(model="qwen3-8b", batch=4, query_lens=[4, 4, 4, 4], cuda_graph=False, system="vllm")),
    (["-m", "gemma-2-9b", "--layer", "sliding", "-s", "16384"], dict(model="gemma-2-9b", layer="sliding", seq_len=16384)),
    (["-m", "deepseek-v3", "--tp", "8", "--system", "sglang", "--gpu", "b200"],
     dict(model="deepseek-v3", tp=8, system="sglang", gpu="b200")),
    (["-m", "llama3-8b", "--kv-cache-dtype", "fp8", "--batch-invariant"],
     dict(model="llama3-8b", kv_cache_dtype="fp8", batch_invariant=True)),
]


@pytest.mark.parametrize("args, kwargs", GRID)
def test_grid_to_dict_equals_json(args, kwargs):
    assert decodecalc.grid(**kwargs).to_dict() == cli_json("grid", *args)


COMPARE = [
    (["-m", "llama3-70b", "--tp", "8"], dict(model="llama3-70b", tp=8)),
    (["-m", "llama3-8b", "-b", "17", "-s", "4096", "-p", "vllm,fa3,flashinfer"],
     dict(model="llama3-8b", batch=17, seq_len=4096, policies=["vllm", "fa3", "flashinfer"])),
    (["-m", "deepseek-v3", "--tp", "8", "--occupancy", "1"], dict(model="deepseek-v3", tp=8, occupancy=1)),
]


@pytest.mark.parametrize("args, kwargs", COMPARE)
def test_compare_to_dict_equals_json(args, kwargs):
    got = decodecalc.compare(**kwargs)
    assert got.to_dict() == cli_json("compare", *args)
    assert got.best is None or got.policy(got.best) is not None


RECOMMEND = [
    (["-m", "llama3-70b", "--tp", "8", "-b", "64", "-s", "8192"], dict(model="llama3-70b", tp=8, batch=64, seq_len=8192)),
    (["-m", "llama3-8b", "-b", "1", "-s", "32768", "-k", "vllm"], dict(model="llama3-8b", batch=1, seq_len=32768,
                                                                      kernel="vllm")),
    (["-m", "llama3-8b", "--candidates", "vllm=1,16", "--candidates", "sglang=4,8"],
     dict(model="llama3-8b", candidates=["vllm=1,16", "sglang=4,8"])),
]


@pytest.mark.parametrize("args, kwargs", RECOMMEND)
def test_recommend_to_dict_equals_json(args, kwargs):
    assert decodecalc.recommend(**kwargs).to_dict() == cli_json("recommend", *args)


def test_results_are_typed():
    g = decodecalc.grid(model="llama3-8b", tp=8)
    assert g.vllm is not None and g.vllm.figures is not None and g.vllm.figures.coverage.num_sms == 132
    assert g.vllm.model.launch.grid == tuple(g.to_dict()["systems"]["vllm"]["grid"])
    r = decodecalc.recommend(model="llama3-70b", tp=8, batch=64, seq_len=8192)
    kr = r.kernels["vllm"]
    assert kr.recommended.splits == r.to_dict()["kernels"]["vllm"]["recommended"]["splits"]


def test_errors_are_domain_exceptions():
    with pytest.raises(UnknownNameError):
        decodecalc.grid(model="no-such-model")
    with pytest.raises(ConfigError):
        decodecalc.grid(model="llama3-8b", seq_len=128, seq_lens=[1, 2])
    with pytest.raises(TypeError):
        decodecalc.grid(model="llama3-8b", no_such_option=1)  # type: ignore[call-arg]


def test_import_decodecalc_is_cheap():
    """`import decodecalc` loads no core module, typer or rich; the API loads on first use."""
    code = ("import sys, decodecalc\n"
            "bad = sorted(m for m in sys.modules if m.startswith(('decodecalc.', 'typer', 'rich', 'yaml')))\n"
            "print(bad); sys.exit(bool(bad))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_api_imports_no_cli_library():
    code = ("import decodecalc\n"
            "decodecalc.grid(model='llama3-8b'); decodecalc.compare(model='llama3-8b'); "
            "decodecalc.recommend(model='llama3-8b')")
    assert modules_loaded_by(code, packages=("typer", "rich", "click")) == []


def test_version_is_defined_once():
    from importlib.metadata import version

    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.stdout.strip() == f"decodecalc {decodecalc.__version__}"
    assert version("decodecalc") == decodecalc.__version__


def test_pyproject_metadata():
    """One version (decodecalc.__version__), an SPDX license string, no cap on typer, pinned verify extra."""
    import tomllib
    from pathlib import Path

    meta = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    proj = meta["project"]
    assert "version" not in proj and "version" in proj["dynamic"]
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "decodecalc.__version__"}
    # no [project.urls]: there is no public repository or documentation site to point at yet
    assert proj["license"] == "Apache-2.0" and proj["classifiers"]
    typer_dep = next(d for d in proj["dependencies"] if d.startswith("typer"))
    assert "<" not in typer_dep
    verify = proj["optional-dependencies"]["verify"]
    assert all(any(op in d for op in ("<", "==")) for d in verify), verify  # the versions verify was run with


def test_recommend_candidates_as_ints():
    a = decodecalc.recommend(model="llama3-8b", candidates=[1, 4, 16]).to_dict()
    b = cli_json("recommend", "-m", "llama3-8b", "--candidates", "1,4,16")
    assert a == b and [c["splits"] for c in a["kernels"]["vllm"]["candidates"]] == [1, 4, 16]
