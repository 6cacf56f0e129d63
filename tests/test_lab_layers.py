"""benchmarks/ and tools/ are a lab on top of the package: they run as ``python -m benchmarks.NAME`` /
``python -m tools.NAME`` from the repository root, call only the package's public names, and point downward.

    decodecalc <- tools (lab plumbing) <- benchmarks (scripts that regenerate shipped artefacts and claims)

Read from the source (every import, inside functions too): a name starting with ``_`` taken from decodecalc (imported,
or read as an attribute of an imported decodecalc module) or imported from another lab script, tools importing benchmarks, a bare import of a sibling script
(it only resolves when the script's folder is put on ``sys.path``), any edit of ``sys.path`` (also in code handed to a
child ``python -c``), and a ``# noqa: E402`` (an import held back, once only for a ``sys.path`` edit) fail.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAB = ("benchmarks", "tools")
SOURCES = sorted(p for d in LAB for p in (ROOT / d).glob("*.py") if p.name != "__init__.py")
SIBLINGS = {p.stem for p in SOURCES}
#: imports that must wait for a statement above them, and why (nothing else may hold an import back)
E402_ALLOWED = {"tools/record_upstream_grids.py": "TRITON_INTERPRET is set before triton is first imported"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def problems(src: str, where: str) -> list[str]:
    """What breaks the lab's rules in one file's source; ``where`` is its path under the repository root."""
    tree = ast.parse(src)
    folder = where.split("/")[0]
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    out: list[str] = []
    modules: dict[str, str] = {}  # local name -> the decodecalc module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if top == "decodecalc":
                    if any(map(_private, a.name.split("."))):
                        out.append(f"line {node.lineno}: private module {a.name}")
                    modules[a.asname or top] = a.name if a.asname else top
                elif top in SIBLINGS:
                    out.append(f"line {node.lineno}: bare import of {a.name} (import it as {folder}.{a.name})")
                elif top == "benchmarks" and folder == "tools":
                    out.append(f"line {node.lineno}: tools imports {a.name} (upward)")
        elif isinstance(node, ast.ImportFrom) and not node.level:
            mod = node.module or ""
            top = mod.split(".")[0]
            if top == "decodecalc":
                bad = [a.name for a in node.names if _private(a.name)]
                if bad or any(map(_private, mod.split("."))):
                    out.append(f"line {node.lineno}: private name from {mod}: {', '.join(bad) or mod}")
                for a in node.names:
                    modules[a.asname or a.name] = f"{mod}.{a.name}"
            elif top in SIBLINGS:
                out.append(f"line {node.lineno}: bare import from {mod} (import it from {folder}.{mod})")
            elif top == "benchmarks" and folder == "tools":
                out.append(f"line {node.lineno}: tools imports {mod} (upward)")
            elif top in LAB and any(_private(a.name) for a in node.names):
                # one script's private helper is no other script's interface either
                out.append(f"line {node.lineno}: private name from {mod}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in modules:
                out.append(f"line {node.lineno}: private name {ast.unparse(node)} of {modules[base.id]}")
        elif isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) \
                and node.value.id == "sys":
            out.append(f"line {node.lineno}: sys.path")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "sys.path" in node.value \
                and id(node) not in docs:  # a docstring may say how a script was once run; code may not do it
            out.append(f"line {node.lineno}: sys.path in code for a child process")
    if where not in E402_ALLOWED:
        out += [f"line {i}: noqa E402" for i, line in enumerate(src.splitlines(), 1) if re.search(r"noqa:.*E402", line)]
    return out


def test_the_lab_is_packages():
    for d in LAB:
        assert (ROOT / d / "__init__.py").is_file(), f"{d}/__init__.py is missing: `python -m {d}.NAME` needs it"
    assert len(SOURCES) > 10


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_lab_script_imports_public_names_downward_without_path_edits(path):
    bad = problems(path.read_text(), path.relative_to(ROOT).as_posix())
    assert not bad, f"{path.relative_to(ROOT)}:\n" + "\n".join(bad)


@pytest.mark.parametrize("src, where, expected", [
    ("from decodecalc.timemodel.fit import _fit_group\n", "benchmarks/x.py", "private name from decodecalc.timemodel.fit"),
    ("def f():\n    from decodecalc.timemodel import fit as F\n    return F._fit_group\n", "benchmarks/x.py",
     "private name F._fit_group"),
    ("import decodecalc.batch._dispatch\n", "tools/x.py", "private module"),
    ("from benchmarks.fit_timemodel import load\n", "tools/x.py", "upward"),
    ("import benchmarks.fit_timemodel\n", "tools/x.py", "upward"),
    ("import fit_timemodel\n", "benchmarks/x.py", "bare import"),
    ("from benchmarks.expected_error import _model_layout\n", "benchmarks/x.py", "private name from benchmarks"),
    ("import sys\nsys.path.insert(0, '.')\n", "benchmarks/x.py", "sys.path"),
    ("import sys\nsys.path[:0] = ['.']\n", "tools/x.py", "sys.path"),
    ("code = 'import sys; sys.path.append(\"/r\"); import x'\n", "benchmarks/x.py", "child process"),
    ("import os\nx = 1\nimport json  # noqa: E402\n", "benchmarks/x.py", "noqa E402"),
])
def test_the_check_can_fail(src, where, expected):
    """Each rule, broken once in a made-up file, is caught."""
    assert any(expected in p for p in problems(src, where)), problems(src, where)


def test_the_check_passes_public_downward_code():
    src = ("from decodecalc.timemodel.fit import fit_families\nfrom tools.update_profile_cache import refresh\n"
           "from benchmarks.fit_timemodel import load\n\n\ndef f(x):\n    return x._private\n")
    assert problems(src, "benchmarks/x.py") == []
