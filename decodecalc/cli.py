"""The typer application. Commands live in decodecalc/commands/, one module each."""

from __future__ import annotations

import importlib

import typer

from decodecalc import __version__

app = typer.Typer(
    name="decodecalc",
    help="What LLM decode attention launches on a GPU, and how well it fills it: vLLM and SGLang launch "
    "grids, KV splits, SM coverage, merge traffic and roofline, from pure-Python models of their launchers.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
    rich_markup_mode=None,
)

#: command modules, in --help order; a module that is absent in this build is skipped
COMMAND_MODULES = ("grid", "library", "compare", "sweep", "determinism", "cudagraphs", "verify", "recommend",
                   "calibrate")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"decodecalc {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """decodecalc."""


for _name in COMMAND_MODULES:
    try:
        _mod = importlib.import_module(f"decodecalc.commands.{_name}")
    except ModuleNotFoundError as _exc:
        if _exc.name != f"decodecalc.commands.{_name}":
            raise
        continue
    _mod.register(app)


def main() -> None:
    app()
