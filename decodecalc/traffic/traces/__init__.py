"""Request-trace readers: the traces people have, turned into one :class:`RequestTable`.

:func:`read_requests` reads a file of any of :data:`FORMATS` (detected from its content when no
format is given) or any other CSV / JSON Lines / JSON-array file through a ``columns`` mapping, and
returns the requests sorted by arrival as flat arrays (prompt tokens, output tokens, arrival in
seconds after the first request, and where each came from), with notes on what was ignored,
skipped, assumed or sorted. Files are read as streams: memory follows the requests kept, not the
file's size. Every problem is a one-line :class:`~decodecalc.errors.ConfigError` naming the file,
the line or record, and the field.

Formats (one module each, citing its source): ``native`` (:mod:`.native`), ``azure``
(:mod:`.azure`), ``azure-lmm`` (:mod:`.azure_lmm`), ``burstgpt`` (:mod:`.burstgpt`), ``mooncake``
(:mod:`.mooncake`), ``qwen-bailian`` (:mod:`.qwen_bailian`), ``copilot-agent`` (:mod:`.copilot`; a file, or a
directory of its shards), ``vllm-bench`` (:mod:`.vllm_bench`), ``sglang-bench`` (:mod:`.sglang_bench`),
``sharegpt`` (:mod:`.sharegpt`). Any of them may be gzip, xz or bzip2 compressed (zstd with the optional
``zstandard``) or UTF-16 text: see decodecalc.textfiles.open_text. User guide: docs/traces.md. Pure Python
and the standard library (``tokenizers`` optional, for ShareGPT, imported lazily).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from os import PathLike
from pathlib import Path

from decodecalc.errors import ConfigError, UnknownNameError
from decodecalc.traffic.traces.bench import read_bench
from decodecalc.traffic.traces.columns import COLUMN_KEYS, parse_columns
from decodecalc.traffic.traces.copilot import read_copilot, shard_files
from decodecalc.traffic.traces.detect import FORMATS, RECORD_SCHEMAS, detect
from decodecalc.traffic.traces.records import read_records
from decodecalc.traffic.traces.sglang_bench import SGLANG_BENCH
from decodecalc.traffic.traces.sharegpt import read_sharegpt
from decodecalc.traffic.traces.table import Progress, RequestTable, within_context
from decodecalc.traffic.traces.textio import check_file, container_of
from decodecalc.traffic.traces.vllm_bench import VLLM_BENCH

__all__ = ["COLUMN_KEYS", "FORMATS", "RequestTable", "read_requests", "within_context"]

_BENCH = {"vllm-bench": VLLM_BENCH, "sglang-bench": SGLANG_BENCH}


def read_requests(path: str | PathLike[str], *, fmt: str | None = None,
                  columns: str | Mapping[str, str] | None = None, tokenizer: str | None = None,
                  model_hint: str | None = None, limit: int | None = None,
                  progress: Callable[[str], None] | None = None) -> RequestTable:
    """The requests of the trace at ``path``.

    ``fmt``: one of :data:`FORMATS`, or None to detect it from the content. ``columns``:
    ``"prompt=COL,output=COL[,arrival=COL][,unit=s|ms|us|ns]"`` (or a mapping with those keys) to
    read any other CSV, JSON Lines or JSON-array file; not with ``fmt``. ``tokenizer`` (a
    tokenizer.json) / ``model_hint`` (a Hugging Face repo id looked up in the local cache): how
    ShareGPT text is counted (estimated otherwise). ``limit``: keep the first N requests in file
    order and stop reading. ``path`` may be a directory of Copilot agent shards. ``progress``: called with a
    line every 65,536 requests read (and before sorting a large out-of-order file)."""
    p = Path(path)
    if not p.is_dir():
        check_file(p)
    try:
        if p.is_dir():
            return _read_directory(p, fmt, columns, tokenizer, model_hint, limit, progress)
        return _read(p, fmt, columns, tokenizer, model_hint, limit, progress)
    except OSError as e:  # unreadable (permissions, an I/O error): still one line
        raise ConfigError(f"{p}: cannot read the file ({e.strerror or e})") from None
    except MemoryError:
        raise ConfigError(f"{p}: more requests than fit in memory; read a part with limit") from None


def _read_directory(p: Path, fmt: str | None, columns: str | Mapping[str, str] | None, tokenizer: str | None,
                    model_hint: str | None, limit: int | None, progress: Progress) -> RequestTable:
    if columns is not None or fmt not in (None, "copilot-agent"):
        what = "--columns" if columns is not None else f"--format {fmt}"
        raise ConfigError(f"{p}: a directory; only copilot-agent shards are read from one (date=YYYY-MM-DD/"
                          f"shard-NNNN.jsonl.gz), {what} reads a file")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit must be a positive integer (requests to keep), got {limit!r}")
    return _with_unused(read_copilot(shard_files(p), p, limit, progress), tokenizer, model_hint)


def _read(p: Path, fmt: str | None, columns: str | Mapping[str, str] | None, tokenizer: str | None,
          model_hint: str | None, limit: int | None, progress: Progress) -> RequestTable:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit must be a positive integer (requests to keep), got {limit!r}")
    if columns is not None:
        if fmt is not None:
            raise ConfigError(f"give a format or columns, not both: --columns reads the fields it names, "
                              f"--format {fmt} its own")
        table = read_records(p, parse_columns(columns), container_of(p), limit, progress)
        return _with_unused(table, tokenizer, model_hint)
    if fmt is None:
        fmt = detect(p).format
    elif not isinstance(fmt, str) or fmt not in FORMATS:
        raise UnknownNameError("trace format", str(fmt), FORMATS)
    if fmt == "sharegpt":
        return read_sharegpt(p, tokenizer, model_hint, limit, progress)
    if fmt == "copilot-agent":
        table = read_copilot([p], p, limit, progress)
    elif fmt in _BENCH:
        table = read_bench(p, _BENCH[fmt], limit, progress)
    else:
        table = read_records(p, RECORD_SCHEMAS[fmt], container_of(p), limit, progress)
    return _with_unused(table, tokenizer, model_hint)


def _with_unused(table: RequestTable, tokenizer: str | None, model_hint: str | None) -> RequestTable:
    """The table, with a note when a tokenizer file was given for a format that holds token counts (the model's
    name, ``model_hint``, is passed whatever the format, for the case it is ShareGPT: no note for it)."""
    if tokenizer is None:
        return table
    return replace(table, notes=table.notes + (f"--tokenizer not used: the {table.format} trace holds token counts",))
