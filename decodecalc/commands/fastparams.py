"""Option values converted without pydantic, on typer releases that coerce through pydantic.

typer 0.29 builds one pydantic ``TypeAdapter`` per option at every run (about 0.7 ms each) and
imports pydantic for it (about 0.1 s of CPU): for ``grid``, with its 32 options, that is most of
the start-up. decodecalc's options are plain ``int``, ``float``, ``str``, ``Path`` (no path
checks), ``bool`` and ``str`` enums, which need no schema. :func:`install` hands typer a converter
for exactly those; any other annotation or option setting (``parser=``, ``min``/``max``, path
checks, lists) goes to typer's own code, and on a typer without this internal hook nothing is
changed. Errors read like typer's (``Invalid value for '--tp': ...``, exit 2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

_INSTALLED = False


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("Input should be a valid integer")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError("Input should be a valid integer, unable to parse string as an integer") from None


def _float(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        raise ValueError("Input should be a valid number, unable to parse string as a number") from None


def _str(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, Enum):
        return str(value.value)
    return str(value)


_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{value!r} is not a valid boolean")


def _enum(cls: type[Enum], case_sensitive: bool) -> Callable[[Any], Enum]:
    members = list(cls)

    def convert(value: Any) -> Enum:
        if isinstance(value, cls):
            return value
        text = _str(value)
        for m in members:
            if m.value == text or (not case_sensitive and str(m.value).casefold() == text.casefold()):
                return m
        shown = [str(m.value) if case_sensitive else str(m.value).lower() for m in members]
        raise ValueError(f"{text!r} is not one of {', '.join(repr(s) for s in shown)}.")

    return convert


def _plain_path_option(info: Any) -> bool:
    """No path checks asked for: typer would only wrap the text in a Path."""
    return (not getattr(info, "exists", False) and getattr(info, "file_okay", True) and getattr(info, "dir_okay", True)
            and not getattr(info, "writable", False) and not getattr(info, "resolve_path", False)
            and not getattr(info, "allow_dash", False) and getattr(info, "path_type", None) is None)


def converter(annotation: Any, info: Any) -> Callable[[Any], Any] | None:
    """The conversion for an option, or None to leave it to typer."""
    if getattr(info, "parser", None) is not None or getattr(info, "min", None) is not None \
            or getattr(info, "max", None) is not None:
        return None
    if annotation is bool:
        return _bool
    if annotation is int:
        return _int
    if annotation is float:
        return _float
    if annotation is str:
        return _str
    if annotation is Path:
        return (lambda v: v if isinstance(v, Path) else Path(_str(v))) if _plain_path_option(info) else None
    if isinstance(annotation, type) and issubclass(annotation, Enum) and issubclass(annotation, str):
        return _enum(annotation, bool(getattr(info, "case_sensitive", True)))
    return None


def install() -> bool:
    """Route typer's per-option coercion through :func:`converter` where it applies; True if installed."""
    global _INSTALLED
    if _INSTALLED:
        return True
    try:
        from typer import _coercion, core
        from typer._click.exceptions import BadParameter
    except ImportError:  # another typer layout: its own coercion stays
        return False
    original = getattr(core, "build_runtime_param", None)
    base = getattr(_coercion, "RuntimeParam", None)
    if original is None or base is None:
        return False

    @dataclass(frozen=True)
    class FastRuntimeParam(base):  # type: ignore[misc,valid-type]  # typer's abstract runtime parameter
        convert: Callable[[Any], Any]

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return self.convert(value)
            except ValueError as exc:
                raise BadParameter(str(exc), ctx=ctx, param=param) from None

    def build_runtime_param(descriptor: Any) -> Any:
        if getattr(descriptor, "file_annotation", None) is None:
            convert = converter(descriptor.annotation, descriptor.parameter_info)
            if convert is not None:
                try:
                    return FastRuntimeParam(parameter_info=descriptor.parameter_info,
                                            annotation=descriptor.annotation, convert=convert)
                except TypeError:  # a typer whose runtime parameter has other fields: its own coercion
                    pass
        return original(descriptor)

    core.build_runtime_param = build_runtime_param
    _INSTALLED = True
    return True


def install_flag_help() -> bool:
    """typer 0.29 shows a flag's type in --help as ``<bool>`` (``--json <bool>``, ``--help -h <bool>``), as if it
    took a value; a flag takes none, so its type column is left empty. True if installed (on a typer without this
    hook nothing changes)."""
    try:
        from typer.core import TyperOption
    except ImportError:
        return False
    original = getattr(TyperOption, "display_type_rich", None)
    if original is None:
        return False
    if getattr(original, "flags_untyped", False):
        return True

    def display_type_rich(self: Any, ctx: Any) -> Any:
        # help is being drawn, so typer's rich_utils (rich.markdown, markdown_it: ~75 ms) is loaded by now; its
        # table is patched here rather than at start-up, which never imports it (each panel's table is made
        # after its rows' types are read)
        _install_unbroken_names()
        return None if getattr(self, "is_flag", False) else original(self, ctx)

    display_type_rich.flags_untyped = True  # type: ignore[attr-defined]  # marks the patch (installed once)
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]  # typer's own, patched once
    return True


def _install_unbroken_names() -> None:
    """typer's help tables let rich squeeze the option-name column until a long name is cut with an ellipsis
    (``--max-num-batched-tok…`` at 80 columns). Every column but the last (the help text) is given the width of
    its longest cell, so names never break and the help text wraps in what is left."""
    import sys

    rich_utils = sys.modules.get("typer.rich_utils")
    if rich_utils is None or not hasattr(rich_utils, "Table"):
        return
    from rich.table import Table

    if getattr(rich_utils.Table, "names_unbroken", False):
        return

    class HelpTable(Table):
        names_unbroken = True

        def add_row(self, *renderables: Any, **kwargs: Any) -> None:
            super().add_row(*renderables, **kwargs)
            for column, cell in zip(self.columns[:-1], renderables[:-1]):
                width = getattr(cell, "cell_len", None)
                if width is None:
                    width = len(str(cell)) if cell is not None else 0
                column.min_width = max(column.min_width or 0, width)
                column.overflow = "fold"

    rich_utils.Table = HelpTable  # type: ignore[attr-defined]  # typer.rich_utils imports rich's Table by name
