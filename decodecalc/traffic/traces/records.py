"""Traces with one request per record: a CSV row, a JSON Lines object or an element of a JSON array.

The native, Azure, BurstGPT and Mooncake formats and ``--columns`` differ only in which fields
hold the prompt tokens, the output tokens and the arrival time, the unit of that time, and what a
zero token count means; each is a :class:`RecordSchema`, and :func:`read_records` reads any of
them from any of the three containers (the container comes from the file's first character).
Fields a schema does not use are ignored, and one note lists them.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.traffic.traces.jsonstream import JsonStream
from decodecalc.traffic.traces.table import Progress, RequestTable, TableBuilder
from decodecalc.traffic.traces.textio import MAX_LINE_BYTES, delimiter_of, lines, open_trace, sniff
from decodecalc.traffic.traces.values import Clock, token_count


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordSchema:
    format: str
    prompt: str  # field of the prompt (input, context) token count
    output: str  # field of the output (generated, response) token count
    arrival: str | None = None  # field of the arrival time
    arrival_unit: str = "s"  # s, ms, us, ns, datetime or auto (date-time or seconds)
    arrival_optional: bool = False  # True: a missing arrival (or column) means t=0 (the native rule)
    zero_tokens: str = "skip"  # "skip": a 0 count is a failed request, left out; "error": counts must be >= 1
    zero_output_reason: str = "0 output tokens"
    zero_prompt_reason: str = "0 prompt tokens"
    tally: str | None = None  # an informational integer field (>= 0), summed over the kept requests into a note
    tally_note: str = ""  # that note: str.format with with_any, total, requests

    @property
    def fields(self) -> tuple[str, ...]:
        return (self.prompt, self.output) + ((self.arrival,) if self.arrival else ()) + ((self.tally,) if self.tally
                                                                                       else ())


# ------------------------------------------------------------------------------------------ containers

def _csv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(first line of the row, cells) of every CSV row (comma- or tab-separated); quoted fields may span lines."""
    current = 0

    def texts() -> Iterator[str]:
        nonlocal current
        for n, text in lines(path):
            current = n
            yield text

    csv.field_size_limit(max(csv.field_size_limit(), MAX_LINE_BYTES))
    reader = csv.reader(texts(), strict=True, delimiter=delimiter_of(sniff(path)))
    last = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise ConfigError(f"{path}, line {current}: not valid CSV ({e})") from None
        start, last = last + 1, current
        yield start, row


def _json_line(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested too deeply") from None
    except ValueError as e:  # an integer over Python's 4300-digit limit
        raise ConfigError(f"{where}: unreadable JSON value ({str(e).split(';')[0][:80]})") from None


def json_objects(path: Path, container: str) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(record number, where, object) of a JSON Lines file or a JSON array of objects."""
    if container == "jsonl":
        for n, text in lines(path):
            if not text.strip():
                continue
            where = f"{path}, line {n}"
            rec = _json_line(text.rstrip(), where)
            if not isinstance(rec, dict):
                raise ConfigError(f"{where}: expected a JSON object per line, got {type(rec).__name__}")
            yield n, where, rec
        return
    with open_trace(path) as f:
        stream = JsonStream(f, str(path))
        for i, rec in enumerate(stream.array_items(), start=1):
            where = f"{path}, record {i}"
            if not isinstance(rec, dict):
                raise ConfigError(f"{where}: expected a JSON object per element, got {type(rec).__name__}")
            yield i, where, rec
        if stream.peek() != "":
            raise ConfigError(f"{path}, line {stream.line}: text after the JSON array")


# ------------------------------------------------------------------------------------------ rows

class _Rows:
    """Turns the raw (prompt, output, arrival) of one record into a row of the builder."""

    def __init__(self, schema: RecordSchema, builder: TableBuilder) -> None:
        self.schema = schema
        self.builder = builder
        self.clock = Clock(schema.arrival_unit, schema.arrival) if schema.arrival else None
        self.minimum = 1 if schema.zero_tokens == "error" else 0
        self.tally_total = 0  # the tally field summed over the kept requests
        self.tally_any = 0  # kept requests with a tally above 0

    def add(self, record: int, where: str, prompt_raw: Any, output_raw: Any, arrival_raw: Any,
            tally_raw: Any = None) -> bool:
        s = self.schema
        for name, raw in ((s.prompt, prompt_raw), (s.output, output_raw)):
            if raw is None or raw == "":
                raise ConfigError(f"{where}, field '{name}': missing")
        prompt = token_count(prompt_raw, where, s.prompt, self.minimum)
        output = token_count(output_raw, where, s.output, self.minimum)
        arrival = 0.0
        if self.clock is not None:
            if arrival_raw is None or arrival_raw == "":
                if not s.arrival_optional:
                    raise ConfigError(f"{where}, field '{s.arrival}': missing")
            else:
                arrival = self.clock.seconds(arrival_raw, where)
        if output == 0:
            self.builder.skip(s.zero_output_reason, record)
            return True
        if prompt == 0:
            self.builder.skip(s.zero_prompt_reason, record)
            return True
        if s.tally is not None:
            if tally_raw is None or tally_raw == "":
                raise ConfigError(f"{where}, field '{s.tally}': missing")
            n = token_count(tally_raw, where, s.tally)
            self.tally_total += n
            self.tally_any += n > 0
        return self.builder.add(arrival, prompt, output, record)

    def notes(self, has_arrivals: bool) -> None:
        if has_arrivals and self.clock is not None:
            self.builder.note(self.clock.describe())
        if self.schema.tally is not None and len(self.builder.prompt):
            self.builder.note(self.schema.tally_note.format(with_any=self.tally_any, total=self.tally_total,
                                                            requests=len(self.builder.prompt)))


def read_records(path: Path, schema: RecordSchema, container: str, limit: int | None,
                 progress: Progress = None) -> RequestTable:
    unit = "record" if container == "json-array" else "line"
    builder = TableBuilder(str(path), schema.format, limit, record_unit=unit, progress=progress)
    rows = _Rows(schema, builder)
    if container == "csv":
        has_arrivals, empty = _read_csv(path, schema, rows)
    else:
        has_arrivals = False
        for record, where, rec in json_objects(path, container):
            builder.ignore([k for k in rec if k not in schema.fields])
            arrival_raw = rec.get(schema.arrival) if schema.arrival else None
            has_arrivals = has_arrivals or arrival_raw is not None
            if not rows.add(record, where, rec.get(schema.prompt), rec.get(schema.output), arrival_raw,
                            rec.get(schema.tally) if schema.tally else None):
                break
        empty = "the file holds no records" if container == "jsonl" else "an empty JSON array"
    rows.notes(has_arrivals)
    return builder.finish(has_arrivals=has_arrivals, empty=empty)


def _read_csv(path: Path, schema: RecordSchema, rows: _Rows) -> tuple[bool, str]:
    header: list[str] | None = None
    columns: tuple[int, int, int | None, int | None] = (0, 0, None, None)
    for n, cells in _csv_rows(path):
        if not any(c.strip() for c in cells):
            continue  # blank lines, trailing ones included
        if header is None:
            header = [c.strip() for c in cells]
            missing = [f for f in schema.fields
                       if f not in header and not (f == schema.arrival and schema.arrival_optional)]
            if missing:
                raise ConfigError(f"{path}, line {n}: the header lacks {', '.join(repr(m) for m in missing)} "
                                  f"(the {schema.format} format has {', '.join(schema.fields)}; header: "
                                  f"{', '.join(header)[:120]})")
            arrival_at = header.index(schema.arrival) if schema.arrival in header else None
            tally_at = header.index(schema.tally) if schema.tally else None
            columns = (header.index(schema.prompt), header.index(schema.output), arrival_at, tally_at)
            rows.builder.ignore([h for h in header if h not in schema.fields and h])
            continue
        where = f"{path}, line {n}"
        if len(cells) != len(header):
            raise ConfigError(f"{where}: {len(cells)} cells for {len(header)} columns ({', '.join(header)[:120]})")
        p, o, a, c = columns
        if not rows.add(n, where, cells[p], cells[o], None if a is None else cells[a],
                        None if c is None else cells[c]):
            break
    if header is None:
        return False, "the file is empty"
    return columns[2] is not None, "a header and no rows"
