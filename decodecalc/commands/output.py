"""Writing results: JSON to stdout or to a file, atomically."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from decodecalc.errors import ConfigError


def _default(o: Any) -> Any:
    if isinstance(o, tuple):
        return list(o)
    if isinstance(o, float) and o != o:
        return None
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _is_number_like(v: Any) -> bool:
    """A value the one-line list form takes: a finite number, a bool or null."""
    if isinstance(v, float):
        return math.isfinite(v)
    return v is None or isinstance(v, bool | int)


def _encode(o: Any, indent: str) -> str:
    if isinstance(o, dict):
        if not o:
            return "{}"
        inner = indent + "  "
        items = [f"{inner}{json.dumps(k if isinstance(k, str) else json.dumps(k))}: {_encode(v, inner)}"
                 for k, v in o.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(o, list | tuple):
        if not o:
            return "[]"
        if all(_is_number_like(v) for v in o):  # grids, per-sequence values: one line
            return json.dumps(list(o), separators=(", ", ": "))
        inner = indent + "  "
        return "[\n" + ",\n".join(inner + _encode(v, inner) for v in o) + "\n" + indent + "]"
    return json.dumps(o, default=_default)


def to_json(data: Any) -> str:
    """Indented JSON (2 spaces) with lists of numbers (grids, per-sequence values) kept on one line.

    Built in one pass, so a 65,536-sequence workload's lists cost one ``json.dumps`` each."""
    return _encode(data, "")


def _folder(path: Path) -> Path:
    return path.parent if str(path.parent) else Path(".")


def _cannot(path: Path, exc: OSError) -> ConfigError:
    """The error for a failed write, naming the file the user asked for (never our temp file)."""
    return ConfigError(f"cannot write {path}: {exc.strerror or exc}")


def check_writable(path: Path, option: str = "--output") -> None:
    """Fail now, before any work, if ``path`` cannot be written: a missing or read-only folder, a
    directory, /proc or /sys. Probes by creating (and removing) a temp file beside it."""
    path = Path(path)
    if _own_descriptor(path) is not None or _is_special(path):  # written into, not beside: no probe in /dev
        return
    folder = _folder(path)
    if path.is_dir():
        raise ConfigError(f"cannot write {path} ({option}): it is a directory")
    if not folder.is_dir():
        raise ConfigError(f"cannot write {path} ({option}): folder {folder} does not exist")
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise ConfigError(f"cannot write {path} ({option}): {exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(tmp)


#: the narrowest and widest console decodecalc draws for: rich takes COLUMNS at its word, and at 0 printed nothing
#: at all, error lines included; at 100,000,000 `grid --explain` took 24 GB (10,000: 35 MB, 0.8 s). A negative or
#: non-numeric COLUMNS rich ignores, falling back to the terminal's width (80 in a pipe)
MIN_COLUMNS, MAX_COLUMNS = 40, 10_000


def clamp_columns() -> None:
    """COLUMNS (what rich reads when it makes a Console: digits only) held within MIN_COLUMNS..MAX_COLUMNS, before any
    Console is made (typer's help and usage errors included)."""
    raw = os.environ.get("COLUMNS")
    if raw is not None and raw.isdigit():
        os.environ["COLUMNS"] = str(min(max(int(raw), MIN_COLUMNS), MAX_COLUMNS))


#: the options that name a file a command writes, by parameter name
OUTPUT_OPTIONS = {"output": "--output", "plot": "--plot", "save_measurements": "--save-measurements"}
#: the options that name a file (or several) a command reads, by parameter name: -m takes a model YAML or config.json
#: (sweep: a comma list of them; calibrate: the option repeated), --metrics a file or a URL
INPUT_OPTIONS = {"model": "--model", "requests": "--requests", "steps": "--steps", "metrics": "--metrics",
                 "profile": "--profile", "rule": "--rule", "from_measurements": "--from-measurements",
                 "tokenizer": "--tokenizer", "measured": "--measured"}


def refuse_outputs_naming_inputs(params: Mapping[str, Any]) -> None:
    """ConfigError, before anything is read or written, where an output option names a file an input option reads
    (``tune --requests t.csv --plot t.csv`` would replace the trace with a PNG; ``calibrate --from-measurements m.json
    -o m.json`` the GPU's timings with a profile). ``params``: a command's parameters by name (what typer hands it).
    Files are compared as the system resolves them (links, ``..``, hard links: os.path.samefile where both exist)."""
    outputs = [(option, Path(params[k])) for k, option in OUTPUT_OPTIONS.items() if isinstance(params.get(k), (str, Path))]
    if not outputs:
        return
    for name, option in INPUT_OPTIONS.items():
        for given in _named_files(params.get(name)):
            for out_option, out in outputs:
                if _same_file(out, given):
                    raise ConfigError(f"{out_option} {out} is the file {option} reads ({given}): writing it would "
                                      "destroy that input; give the output another name")


def _named_files(value: Any) -> list[Path]:
    """The paths an input option's value may name: itself, each item of a list, each part of a comma list (sweep
    -m a.yaml,b.yaml), a checkpoint folder's config.json; never a URL."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    out: list[Path] = []
    for v in items:
        if not isinstance(v, (str, Path)) or not str(v) or "://" in str(v):
            continue
        for text in dict.fromkeys([str(v), *(t.strip() for t in str(v).split(",") if t.strip())]):
            p = Path(text).expanduser()
            out.append(p)
            if p.is_dir():
                out.append(p / "config.json")
    return out


def _same_file(out: Path, given: Path) -> bool:
    """Whether writing ``out`` would replace the existing file ``given`` (one that does not exist, such as the model
    id ``llama3-8b``, loses nothing). An output that is a device or a FIFO (``-o /dev/stdout`` beside ``--requests
    /dev/stdin``: one terminal) is written into, never replaced: not a clash."""
    try:
        if not (out.exists() and given.exists()) or _is_special(out) or out.is_dir():
            return False
        return os.path.samefile(out, given)
    except (OSError, ValueError):  # an unreadable or invalid path: the command's own checks name it
        return False


#: what write_files writes: the text of the file, or a function that writes it to the path it is given
Content = str | Callable[[Path], None]


def write_files(items: Sequence[tuple[Path, Content]]) -> None:
    """Write several files all-or-nothing: each goes to a temp file beside it, and only when every
    one is complete are they moved into place (os.replace). On any failure, Ctrl-C, SIGTERM or SIGHUP, every
    temp file is removed and no requested file is created or changed; the error names the requested path."""
    _check_distinct(items)
    with _signals_unwind():
        _write_files(items)


#: signals whose default action ends the process at once, skipping write_files' cleanup (a killed `sweep -o s.csv` left
#: its 51 MB temp file): while files are written each becomes SystemExit(128 + signal), as the shell reports it
_UNWIND_SIGNALS = ("SIGTERM", "SIGHUP")


@contextlib.contextmanager
def _signals_unwind() -> Iterator[None]:
    """While in the block, SIGTERM and SIGHUP raise SystemExit (so every ``finally`` and ``except BaseException`` on
    the way out runs) where they would have ended the process; handlers the program set itself are left alone, and
    the previous ones come back after. Only the main thread can set handlers: elsewhere the block runs as it is."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    saved = {}
    for name in _UNWIND_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
            saved[sig] = signal.signal(sig, unwind)
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


def _write_files(items: Sequence[tuple[Path, Content]]) -> None:
    import tempfile  # only when writing a file: keeps the plain CLI path light

    staged: list[tuple[str, Path]] = []
    special: list[tuple[Path, Content]] = []
    try:
        for path, content in items:
            path = Path(path)
            # /dev/stdout, /dev/null, /dev/full, a FIFO: written into, never replaced by a file
            if _own_descriptor(path) is not None or _is_special(path):
                special.append((path, content))
                continue
            folder = _folder(path)
            if not folder.is_dir():
                raise ConfigError(f"cannot write {path}: folder {folder} does not exist")
            if path.is_dir():
                raise ConfigError(f"cannot write {path}: it is a directory")
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
            except OSError as exc:
                raise _cannot(path, exc) from None
            staged.append((tmp, path))
            try:
                if isinstance(content, str):
                    with os.fdopen(fd, "w") as f:
                        f.write(content)
                else:
                    os.close(fd)
                    content(Path(tmp))
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the mode open() would
            except OSError as exc:
                raise _cannot(path, exc) from None
        for path, content in special:
            own = _own_descriptor(path)
            if own is None:
                _write_special(path, content)
            else:
                _write_descriptor(own, path, content)
        for tmp, path in staged:
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise _cannot(path, exc) from None
    except BaseException:
        for tmp, _ in staged:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise


def _check_distinct(items: Sequence[tuple[Path, Content]]) -> None:
    """Two outputs of one run naming the same file (``-o a.csv --plot a.csv``) would overwrite each other."""
    seen: dict[str, Path] = {}
    for path, _ in items:
        key = os.path.realpath(path)
        if key in seen:
            raise ConfigError(f"{seen[key]} is named for two outputs; give each output its own file")
        seen[key] = Path(path)


def _own_descriptor(path: Path) -> int | None:
    """The descriptor of this process that ``path`` names through /dev/fd or /proc/self/fd (``/dev/stdout``,
    ``/dev/stderr``, ``/dev/fd/3``, ``/proc/self/fd/1``), or None. With stdout redirected to a file, /dev/stdout
    leads to a regular file, and os.replace swapped the /dev/stdout link itself for a plain file (as root)."""
    import re

    p = os.path.abspath(path)
    for _ in range(40):  # the links of the chain (a loop of links ends here too)
        m = re.fullmatch(r"/(?:dev|proc/(self|thread-self|\d+))/fd/(\d+)", p)
        if m:
            pid = m.group(1)
            return int(m.group(2)) if pid is None or not pid.isdigit() or int(pid) == os.getpid() else None
        try:
            target = os.readlink(p)
        except (OSError, ValueError):
            return None
        p = os.path.normpath(os.path.join(os.path.dirname(p), target))
    return None


def _write_descriptor(fd: int, path: Path, content: Content) -> None:
    """Write into an open descriptor of this process (``-o /dev/stdout``) through a duplicate of it, so the output
    lands where the descriptor is (after what was printed, in a file too), never truncating what it holds."""
    import shutil
    import sys
    import tempfile

    for stream in (sys.stdout, sys.stderr):  # what was printed comes first
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    try:
        dup = os.dup(fd)
        if isinstance(content, str):
            with os.fdopen(dup, "w") as f:
                f.write(content)
            return
        with os.fdopen(dup, "wb") as out:  # a writer that takes a path writes a temp file, copied in
            handle, tmp = tempfile.mkstemp(prefix=".decodecalc.", suffix=path.suffix)
            os.close(handle)
            try:
                content(Path(tmp))
                with open(tmp, "rb") as src:
                    shutil.copyfileobj(src, out)
            finally:
                os.unlink(tmp)
    except OSError as exc:
        raise _cannot(path, exc) from None


def _is_special(path: Path) -> bool:
    """An existing target that is not a regular file (a character device such as /dev/null, a FIFO): os.replace
    would swap it for a plain file (as root, even /dev/full)."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


#: how long a FIFO given as an output may go without a reader before the write is an error (opening it for
#: writing would wait forever)
FIFO_WAIT_S = 5.0


def _open_for_writing(path: Path) -> int:
    """A descriptor writing into a device or FIFO. A FIFO is opened without blocking, again every 50 ms until a
    reader has it open; after FIFO_WAIT_S without one it is an error (``-o fifo`` with no reader hung)."""
    import errno
    import stat
    import time

    if not stat.S_ISFIFO(os.stat(path).st_mode):
        return os.open(path, os.O_WRONLY)
    deadline = time.monotonic() + FIFO_WAIT_S
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            if time.monotonic() > deadline:
                raise ConfigError(f"cannot write {path}: a FIFO that nothing reads from (waited {FIFO_WAIT_S:g} s "
                                  "for a reader)") from None
            time.sleep(0.05)
            continue
        os.set_blocking(fd, True)
        return fd


def _write_special(path: Path, content: Content) -> None:
    """Write into a device or FIFO directly; a failed write (/dev/full: no space left) is an error, not success."""
    try:
        fd = _open_for_writing(path)
        if isinstance(content, str):
            with os.fdopen(fd, "w") as f:
                f.write(content)
                f.flush()
        else:
            try:
                content(path)  # a reader holds the FIFO open (so does fd): this open does not wait
            finally:
                os.close(fd)
    except OSError as exc:
        raise _cannot(path, exc) from None


def write_atomic(path: Path, text: Content) -> None:
    """Write ``text`` to ``path`` via a temp file in the same folder and os.replace: never half-written."""
    write_files([(Path(path), text)])


# ------------------------------------------------------------------------------------------
# terminals that cannot show the output's few non-ASCII characters (PYTHONIOENCODING=ascii, LANG=C)

#: what each non-ASCII character decodecalc prints becomes on such a stream
_ASCII = {"µ": "u", "★": "*", "·": ".", "░": ".", "▒": ":", "▓": "#", "█": "#", "…": "...", "×": "x", "—": "-",
          "–": "-", "≈": "~", "≤": "<=", "≥": ">=", "→": "->", "←": "<-", "✓": "ok", "✗": "x", "│": "|", "─": "-"}


def _transliterate(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    bad = exc.object[exc.start:exc.end]
    return "".join(_ASCII.get(ch, "?") for ch in bad), exc.end


def make_streams_encoding_safe() -> None:
    """Let stdout and stderr print on any encoding: characters it cannot encode are transliterated
    ("µs" -> "us") instead of raising UnicodeEncodeError in the middle of a table."""
    import codecs
    import sys

    try:
        codecs.lookup_error("decodecalc-ascii")
    except LookupError:
        codecs.register_error("decodecalc-ascii", _transliterate)
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "utf-8"
        try:
            "µ★░".encode(encoding)
            continue
        except (UnicodeEncodeError, LookupError):
            pass
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="decodecalc-ascii")
            except (ValueError, OSError):  # a stream already written to in another mode
                pass


# ------------------------------------------------------------------------------------------
# standard output that cannot be written (>&-, >/dev/full): an error, never exit status 0 or Python's 120


#: errors of a write that names no file: writing standard output (every file decodecalc writes is named in its error)
STDOUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EBADF})


def stdout_failure() -> OSError | None:
    """The error writing standard output gives now, or None. Flushing again fails the same way while the output a
    failed write left in the buffer is still there (no space on /dev/full, a closed descriptor)."""
    import sys

    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`| head`): not a failure (decodecalc.cli.run)
        return None
    except OSError as exc:
        return exc
    except (AttributeError, ValueError):  # no stdout, or one closed from Python
        return None
    return None


def guard_closed_stdout() -> None:
    """Started with descriptor 1 closed (``decodecalc grid >&-``), Python sets sys.stdout to None and print()
    drops everything: the run printed nothing and exited 0. Then sys.stdout is a stream whose every write fails,
    as the shell's own commands do (``echo x >&-``: bad file descriptor); a run that prints nothing is unaffected."""
    import io
    import sys

    class ClosedStdout(io.TextIOBase):
        encoding = "utf-8"
        errors = "strict"

        def writable(self) -> bool:
            return True

        def isatty(self) -> bool:
            return False

        def write(self, text: str) -> int:
            if text:
                raise OSError(errno.EBADF, "it is closed (give it a file, or /dev/null)")
            return 0

    if sys.stdout is None:
        sys.stdout = ClosedStdout()


def discard_stdout() -> None:
    """Point descriptor 1 at /dev/null, so the interpreter's last flush of what could not be written cannot fail
    again (that made the exit status 120 and printed 'Exception ignored ...' under the error line)."""
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
        sys.stdout.flush()
    except (AttributeError, OSError, ValueError):
        pass
