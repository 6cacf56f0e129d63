"""The package's layers, read from the source (every import statement, inside functions too).

    __main__ -> cli, commands -> render, plot -> verify -> api -> reports -> batch -> timemodel, figures, inputs
    -> launchers
    -> workload, traffic -> specs -> errors, derived, limits, formatting, yamlio, extras

Arrows point only downward (a module may import its own layer or any lower one), there is no
import cycle between modules, and ``verify`` (torch, triton) is a side package that nothing below
the CLI and rendering import. Only the CLI, rendering, plotting and verify may import typer, rich, torch,
triton, numpy or matplotlib, at any depth of the code; tune's array layer (batch) may import numpy.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "decodecalc"

#: (layer, module prefixes), lowest first
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "derived", "limits", "formatting", "yamlio", "textfiles", "data", "profiles", "extras"),
    ("specs",),
    ("workload", "traffic"),
    ("launchers",),
    ("figures", "timemodel", "inputs"),
    ("batch",),
    ("reports",),
    ("api",),
    ("verify",),
    ("render", "plot"),
    ("commands", "cli"),
    ("__main__",),
)
PRESENTATION_OR_GPU = ("cli", "commands", "render", "plot", "verify", "__main__")
HEAVY = ("typer", "rich", "torch", "triton", "numpy", "matplotlib", "click")


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts) if parts else "__init__"


def layer_of(mod: str) -> int | None:
    top = mod.split(".")[0]
    for i, prefixes in enumerate(LAYERS):
        if top in prefixes:
            return i
    return None


def imports_of(path: Path, name: str | None = None) -> list[tuple[int, str]]:
    """(line, absolute module) for every import in the file, including those inside functions."""
    tree = ast.parse(path.read_text(), str(path))
    here = (name or module_name(path)).split(".")
    is_pkg = path.name == "__init__.py"
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_pkg else here[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(["decodecalc", *base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            if mod == "decodecalc":
                out += [(node.lineno, f"decodecalc.{a.name}") for a in node.names]
            elif mod.startswith("decodecalc."):
                # `from decodecalc.reports import compare` imports the module reports.compare; a name that is
                # no module imports the package itself
                folder = PKG / Path(*mod.split(".")[1:])
                subs = [a.name for a in node.names if (folder / f"{a.name}.py").exists() or (folder / a.name).is_dir()]
                out += [(node.lineno, f"{mod}.{name}") for name in subs]
                if len(subs) < len(node.names):
                    out.append((node.lineno, mod))
            else:
                out.append((node.lineno, mod))
    return out


SOURCES = sorted(PKG.rglob("*.py"))


def internal_edges() -> dict[str, set[str]]:
    mods = {module_name(p) for p in SOURCES}
    edges: dict[str, set[str]] = {}
    for p in SOURCES:
        src = module_name(p)
        for _, mod in imports_of(p):
            if not mod.startswith("decodecalc."):
                continue
            target = mod.removeprefix("decodecalc.")
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != src and target != "__init__":
                edges.setdefault(src, set()).add(target)
    return edges


def test_every_module_has_a_layer():
    missing = sorted(module_name(p) for p in SOURCES
                     if module_name(p) != "__init__" and layer_of(module_name(p)) is None)
    assert not missing, f"modules outside the layer table: {missing}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: module_name(p))
def test_imports_point_downward(path):
    src = module_name(path)
    if src == "__init__":  # the package root only re-exports the API lazily
        return
    mine = layer_of(src)
    up = []
    for line, mod in imports_of(path):
        if not mod.startswith("decodecalc."):
            continue
        target = layer_of(mod.removeprefix("decodecalc."))
        if target is not None and mine is not None and target > mine:
            up.append(f"line {line}: {mod} ({LAYERS[target][0]} layer) from the {LAYERS[mine][0]} layer")
    assert not up, f"{src} imports upward:\n" + "\n".join(up)


@pytest.mark.parametrize("path", [p for p in SOURCES if not module_name(p).startswith(PRESENTATION_OR_GPU)],
                         ids=lambda p: module_name(p))
def test_core_source_imports_no_heavy_library(path):
    # tune's array layer (batch/) may import numpy, and nothing else of these
    allowed = {"numpy"} if module_name(path).startswith("batch") else set()
    bad = [f"line {line}: {mod}" for line, mod in imports_of(path) if mod.split(".")[0] in set(HEAVY) - allowed]
    assert not bad, f"{module_name(path)} imports presentation/GPU libraries:\n" + "\n".join(bad)


def test_core_never_imports_verify():
    bad = [f"{module_name(p)} line {line}" for p in SOURCES if not module_name(p).startswith(PRESENTATION_OR_GPU)
           for line, mod in imports_of(p) if mod.startswith("decodecalc.verify")]
    assert not bad, bad


def test_no_import_cycle():
    edges = internal_edges()
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, stack: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycle.extend(stack[stack.index(nxt):] + [node, nxt] if nxt in stack else [node, nxt])
                return True
            if state.get(nxt) is None and visit(nxt, stack + [node]):
                return True
        state[node] = 2
        return False

    for n in sorted(edges):
        if state.get(n) is None and visit(n, []):
            break
    assert not cycle, " -> ".join(cycle)


def test_checker_sees_imports_inside_functions(tmp_path):
    """The layer check must be able to fail: an import hidden in a function body is found."""
    f = PKG / "launchers" / "base.py"
    src = f.read_text() + "\n\ndef _hidden():\n    from decodecalc.reports import grid\n    import torch\n"
    probe = tmp_path / "probe.py"
    probe.write_text(src)
    mods = [m for _, m in imports_of(probe, name="launchers.probe")]
    assert "decodecalc.reports.grid" in mods and "torch" in mods
