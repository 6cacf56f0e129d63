"""The README and docs/reference.md document every command and every shared option (sqlite-utils style)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main

from decodecalc.cli import app
from decodecalc.commands.options import SHARED_OPTIONS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
REFERENCE = (ROOT / "docs" / "reference.md").read_text()  # the README links it for commands and options
GROUP = typer.main.get_command(app)  # a click group (typer vendors click in some releases)


@pytest.mark.parametrize("name", sorted(GROUP.commands))
def test_command_in_reference_and_has_help(name):
    assert f"decodecalc {name}" in REFERENCE, name
    assert GROUP.commands[name].help, name


@pytest.mark.parametrize("name", sorted(SHARED_OPTIONS))
def test_shared_option_in_reference(name):
    flag = "--" + name.replace("_", "-")
    if name == "cuda_graph":
        flag = "--cuda-graph/--no-cuda-graph"
    assert flag in REFERENCE, flag


def test_readme_is_short_and_links_only_existing_pages():
    import re

    assert len(README.splitlines()) <= 250
    for link in re.findall(r"\]\(([^)#]+)\)", README):
        if "://" not in link:
            assert (ROOT / link).exists(), link


def test_readme_set_up_commands_match_ci():
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text()
    test_cmd = ci.strip().splitlines()[-1]
    assert test_cmd in README


def test_python_api_doc_runs():
    """The ```python blocks of docs/api.md run as written (the README's "use it from Python" recipe points there)."""
    import re

    text = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, "docs/api.md", "exec"), {})
