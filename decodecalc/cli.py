"""The typer application. Commands live in decodecalc/commands/, one module each.

Start-up time matters (`decodecalc grid` should cost little more than importing typer and
rich), so the console script builds an app holding only the command it was asked for;
``decodecalc.cli.app`` (tests, --help, no command) holds every command.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer

from decodecalc import __version__

#: command modules, in --help order; a module that is absent in this build is skipped
COMMAND_MODULES = ("grid", "library", "compare", "sweep", "determinism", "cudagraphs", "verify", "recommend",
                   "calibrate")
#: command name -> module, for commands whose module is not named after them
COMMAND_TO_MODULE = {"models": "library", "gpus": "library", "explain": "library"}

HELP = ("What LLM decode attention launches on a GPU, and how well it fills it: vLLM and SGLang launch grids, "
        "KV splits, SM coverage, merge traffic and roofline, from pure-Python models of their launchers.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"decodecalc {__version__}")
        raise typer.Exit()


def build_app(modules: tuple[str, ...] = COMMAND_MODULES) -> typer.Typer:
    app = typer.Typer(name="decodecalc", help=HELP, no_args_is_help=True, pretty_exceptions_show_locals=False,
                      add_completion=False, rich_markup_mode=None)

    @app.callback()
    def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                           help="Print the version and exit.")) -> None:
        """decodecalc."""

    for name in modules:
        try:
            module = importlib.import_module(f"decodecalc.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"decodecalc.commands.{name}":
                raise
            continue
        module.register(app)
    return app


def __getattr__(name: str) -> Any:
    """``decodecalc.cli.app``: the full application, built on first use."""
    if name == "app":
        full = build_app()
        globals()["app"] = full
        return full
    raise AttributeError(name)


def main() -> None:
    argv = sys.argv[1:]
    command = argv[0] if argv and not argv[0].startswith("-") else None
    module = COMMAND_TO_MODULE.get(command or "", command)
    if module in COMMAND_MODULES:
        build_app((module,))()
    else:
        build_app()()
