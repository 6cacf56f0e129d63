"""The typer application: every command module registers its commands here, statically.

Start-up time matters (`decodecalc grid` should cost little more than a minimal typer command),
so :func:`main` hands typer only the command named on the command line; ``decodecalc.cli.app``
(tests, --help, no command) holds every command. Command modules import the core inside their
functions, so registering all of them costs only typer's own bookkeeping.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import typer

from decodecalc import __version__
from decodecalc.commands import (
    calibrate,
    fastparams,
    compare,
    cudagraphs,
    determinism,
    grid,
    library,
    recommend,
    sweep,
    tune,
    verify,
)

if TYPE_CHECKING:
    from rich.console import Console

#: command modules, in --help order
COMMAND_MODULES = (grid, library, compare, sweep, determinism, cudagraphs, verify, recommend, tune, calibrate)

HELP = ("What LLM decode attention launches on a GPU, and how well it fills it: vLLM and SGLang launch grids, "
        "KV splits, SM coverage, merge traffic and roofline, from pure-Python models of their launchers.")

CONTEXT = {"help_option_names": ["-h", "--help"]}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"decodecalc {__version__}")
        raise typer.Exit()


def command_name(info: Any) -> str:
    """The name typer gives a registered command (its function name with - for _ unless named)."""
    return info.name or info.callback.__name__.replace("_", "-")


def build_app(only: str | None = None) -> typer.Typer:
    """The application; with ``only`` (a command name) typer is given just that command."""
    fastparams.install()  # plain options are converted without pydantic (start-up; see the module)
    fastparams.install_flag_help()  # --json, not --json <bool>
    app = typer.Typer(name="decodecalc", help=HELP, no_args_is_help=True, pretty_exceptions_show_locals=False,
                      context_settings=CONTEXT, rich_markup_mode="rich")

    @app.callback()
    def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                           help="Print the version and exit.")) -> None:
        """decodecalc."""

    for module in COMMAND_MODULES:
        module.register(app)
    from decodecalc.commands.options import strict_command_class

    strict = strict_command_class()
    for info in app.registered_commands:  # an option given twice is a usage error (exit 2)
        if info.cls is None or info.cls is typer.core.TyperCommand:
            info.cls = strict
    if only is not None:
        chosen = [c for c in app.registered_commands if command_name(c) == only]
        if chosen:
            app.registered_commands = chosen
    return app


def __getattr__(name: str) -> Any:
    """``decodecalc.cli.app``: the full application, built on first use."""
    if name == "app":
        full = build_app()
        globals()["app"] = full
        return full
    raise AttributeError(name)


def main() -> None:
    from decodecalc.commands.output import clamp_columns, guard_closed_stdout, make_streams_encoding_safe

    clamp_columns()  # COLUMNS=0: every Console (help, usage errors, tables) printed nothing
    guard_closed_stdout()  # `decodecalc grid >&-`: an error, not a silent exit 0
    make_streams_encoding_safe()  # PYTHONIOENCODING=ascii / LANG=C: "µs" prints as "us", no crash
    argv = sys.argv[1:]
    command = argv[0] if argv and not argv[0].startswith("-") else None
    sys.exit(finish(run(build_app(command), command)))


def finish(code: int) -> int:
    """The exit status once what is left in stdout's buffer is written: a failed last write (``>/dev/full``: no
    space left) is exit status 1 and one ``Error:`` line, not 0, nor Python's 120 with 'Exception ignored' lines."""
    from decodecalc.commands.output import discard_stdout, stdout_failure

    failure = stdout_failure()
    if failure is None:
        return code
    discard_stdout()
    if code == 0:
        from decodecalc.commands.options import print_error

        print_error(f"cannot write standard output: {failure.strerror or failure}")
        return 1
    return code


def run(app: Any, command: str | None) -> int:
    """Run the app and give its exit status, with one rule for every command (README, "Exit status"): 0 on
    success and when the reader closes the pipe early (``| head``); 1 for a value that parses but cannot be (a
    domain error, a bad file, a conflicting pair: ``Error: ...`` from the command itself); 2 for a usage error (an
    unknown option, a value outside an option's choices, a missing argument), printed as the same one ``Error:``
    line with a pointer to ``--help``; 130 on Ctrl-C."""
    import typer
    from rich.console import Console

    # rich turns a closed stdout into SystemExit(1) after pointing stdout at /dev/null; for a reader that stopped
    # early (`| head`) that is success
    Console.on_broken_pipe = _quiet_on_broken_pipe  # type: ignore[method-assign,assignment]
    try:  # typer >= 0.20 carries its own click
        from typer._click import exceptions as cx
    except ImportError:  # pragma: no cover - older typer on the real click
        from click import exceptions as cx  # type: ignore[no-redef]  # the same module, from the real click

    try:
        rv = app(standalone_mode=False)
    except cx.ClickException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group: its help, as a usage error
            ctx = getattr(exc, "ctx", None)
            print(ctx.get_help() if ctx else exc.format_message())
            return exc.exit_code
        from decodecalc.commands.options import print_error

        where = f"decodecalc {command} -h" if command else "decodecalc -h"
        hint = f" (see {where})" if isinstance(exc, cx.UsageError) else ""
        print_error(exc.format_message() + hint)
        return exc.exit_code
    except typer.Abort:
        return 130
    except BrokenPipeError:
        from decodecalc.commands.options import quiet_broken_pipe

        return quiet_broken_pipe()
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0


def _quiet_on_broken_pipe(console: Console) -> None:
    from decodecalc.commands.options import quiet_broken_pipe

    if not getattr(console, "quiet", False):
        quiet_broken_pipe()
    raise SystemExit(0)
