"""A decode workload: a sequence of decode steps, each one batch of KV lengths (and query lengths).

:class:`DecodeStep` is one engine step's decode batch on one rank; :class:`StepTrace` is the whole
workload. (:class:`decodecalc.workload.Workload` is the per-layer launch shape that the launchers
model; tune turns every distinct step into one.)

Step trace files (``--steps``):

* JSON Lines, one step per line: ``{"seq_lens": [...], "query_lens": [...], "weight": n}``;
  ``query_lens`` (default all 1) and ``weight`` (default 1, the number of times the step repeats)
  are optional. Blank lines are skipped.
* CSV with a header naming the same columns; a list cell holds integers separated by spaces,
  semicolons or commas (quote it if it has commas).

Every error names the file, the line and the field.
"""

from __future__ import annotations

import csv
import json
import math
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from decodecalc.errors import ConfigError
from decodecalc.limits import MAX_FILE_NUMBER, MAX_SEQ_LEN, MAX_TOKENS
from decodecalc.textfiles import utf8_lines

STEP_FIELDS = ("seq_lens", "query_lens", "weight")


@dataclass(frozen=True, slots=True)
class DecodeStep:
    """One decode step: KV length of every sequence (this step's tokens included) and its query tokens."""

    seq_lens: tuple[int, ...]
    query_lens: tuple[int, ...]
    weight: int = 1  # how many times this step occurs
    origin: str = ""  # "file, line n" (for error messages)
    tokens: int | None = None  # output tokens the step generates (None: one per sequence); spec decode: more

    @property
    def generated_tokens(self) -> int:
        return self.batch if self.tokens is None else self.tokens

    @property
    def batch(self) -> int:
        return len(self.seq_lens)

    @property
    def query_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def shape(self) -> tuple[tuple[int, int], ...]:
        """Shape: the (KV length, query length) pairs in batch order. Two steps with the same shape launch
        the same work; the order matters because the GPU dispatches a grid's programs in grid order
        (sequences along x), which the time model follows (decodecalc/timemodel/predict.py)."""
        return tuple(zip(self.seq_lens, self.query_lens))


@dataclass(frozen=True, slots=True)
class StepTrace:
    """A decode workload: its steps in order and where they came from."""

    steps: tuple[DecodeStep, ...]
    source: str
    notes: tuple[str, ...] = ()

    @property
    def num_steps(self) -> int:
        """Steps counted with their weights."""
        return sum(s.weight for s in self.steps)

    def summary(self) -> dict[str, Any]:
        """The JSON ``workload`` block: steps, tokens, percentiles of batch size and KV length."""
        batches = [(s.batch, s.weight) for s in self.steps]
        lens: dict[int, int] = {}
        for s in self.steps:
            for L in s.seq_lens:
                lens[L] = lens.get(L, 0) + s.weight
        return {
            "source": self.source,
            "steps": self.num_steps,
            "distinct_shapes": len({s.shape for s in self.steps}),
            "generated_tokens": sum(s.generated_tokens * s.weight for s in self.steps),
            "query_tokens": sum(s.query_tokens * s.weight for s in self.steps),
            "batch": percentiles(batches),
            "seq_len": percentiles(list(lens.items())),
            "speculative": any(q > 1 for s in self.steps for q in s.query_lens),
            "notes": list(self.notes),
        }


def weighted_percentile(pairs: Sequence[tuple[float, int]], q: float) -> float:
    """Nearest-rank percentile of values with integer weights: the smallest value whose cumulative
    weight reaches ``q`` percent of the total (``q`` in [0, 100])."""
    if not pairs:
        raise ConfigError("percentile of an empty workload")
    ordered = sorted(pairs)
    total = sum(w for _, w in ordered)
    rank = max(1, math.ceil(q / 100.0 * total))
    acc = 0
    for v, w in ordered:
        acc += w
        if acc >= rank:
            return v
    return ordered[-1][0]


def percentiles(pairs: Sequence[tuple[float, int]]) -> dict[str, float]:
    total = sum(w for _, w in pairs)
    mean = sum(v * w for v, w in pairs) / total
    return {"mean": mean, "p50": weighted_percentile(pairs, 50), "p90": weighted_percentile(pairs, 90),
            "p99": weighted_percentile(pairs, 99), "max": max(v for v, _ in pairs),
            "min": min(v for v, _ in pairs)}


# --------------------------------------------------------------------------------------------
# validation shared by every source


def _positive_ints(value: Any) -> TypeGuard[list[int]]:
    """Whether ``value`` is a non-empty list of integers from 1 to MAX_SEQ_LEN (the fast check; the slow one names
    the bad value)."""
    if type(value) is not list or not value:
        return False
    try:
        array("q", value)  # every element an integer in int64 (C speed; a float or a string raises)
        if min(value) < 1 or max(value) > MAX_SEQ_LEN:
            return False
    except (TypeError, OverflowError):
        return False
    # True is 1: only a list holding a 1 can hold a JSON true
    return 1 not in value or all(type(v) is int for v in value)


def _fast_step(record: dict[str, Any]) -> tuple[list[int], list[int] | None, int] | None:
    """(seq_lens, query_lens or None, weight) of a well-formed record, else None (then :func:`make_step` says why)."""
    if len(record) > 1 and not set(record) <= _STEP_FIELD_SET:
        return None
    seq = record.get("seq_lens")
    if not _positive_ints(seq):
        return None
    q = record.get("query_lens")
    if q is not None and not (_positive_ints(q) and len(q) == len(seq) and all(a <= b for a, b in zip(q, seq))
                              and sum(q) <= MAX_TOKENS):
        return None
    w = record.get("weight", 1)
    if type(w) is not int or not 0 < w <= MAX_FILE_NUMBER:
        return None
    return seq, q, w


def _int_list(value: Any, where: str, field: str) -> tuple[int, ...]:
    if _positive_ints(value):
        return tuple(value)
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}, field '{field}': expected a non-empty list of integers, got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{where}, field '{field}': {v!r} is not an integer")
        if v <= 0:
            raise ConfigError(f"{where}, field '{field}': lengths must be >= 1, got {v}")
        if v > MAX_SEQ_LEN:  # also keeps every length in the int64 arrays tune reads the file into
            raise ConfigError(f"{where}, field '{field}': {v:,} tokens is over the supported {MAX_SEQ_LEN:,} "
                              "(decodecalc.limits.MAX_SEQ_LEN)")
        out.append(v)
    return tuple(out)


_STEP_FIELD_SET = frozenset(STEP_FIELDS)


def make_step(record: dict[str, Any], where: str) -> DecodeStep:
    """A DecodeStep from one parsed record (a JSON object or a CSV row turned into lists), or ConfigError
    naming ``where`` (file and line) and the field."""
    unknown = sorted(set(record) - set(STEP_FIELDS))
    if unknown:
        raise ConfigError(f"{where}, field '{unknown[0]}': unknown field; a step has {', '.join(STEP_FIELDS)}")
    if "seq_lens" not in record:
        raise ConfigError(f"{where}, field 'seq_lens': missing (every step needs its KV lengths)")
    seq = _int_list(record["seq_lens"], where, "seq_lens")
    q_raw = record.get("query_lens")
    query = (1,) * len(seq) if q_raw is None else _int_list(q_raw, where, "query_lens")
    if len(query) != len(seq):
        raise ConfigError(f"{where}, field 'query_lens': {len(query)} values for {len(seq)} sequences")
    for i, (q, L) in enumerate(zip(query, seq)):
        if q > L:
            raise ConfigError(f"{where}, field 'query_lens': sequence {i} has {q} query tokens but KV length {L} "
                              "(the KV length counts this step's tokens too)")
    if sum(query) > MAX_TOKENS:  # as --query-lens: the batch's query tokens, one step's work
        raise ConfigError(f"{where}, field 'query_lens': {sum(query):,} query tokens in one step, over the supported "
                          f"{MAX_TOKENS:,} (decodecalc.limits.MAX_TOKENS)")
    w = record.get("weight", 1)
    if isinstance(w, bool) or not isinstance(w, int) or w <= 0:
        raise ConfigError(f"{where}, field 'weight': expected a positive integer, got {w!r}")
    if w > MAX_FILE_NUMBER:
        raise ConfigError(f"{where}, field 'weight': {w:,} is over the supported {MAX_FILE_NUMBER:,} (2**53)")
    return DecodeStep(seq_lens=seq, query_lens=query, weight=w, origin=where)


def nonempty(trace: StepTrace, what: str) -> StepTrace:
    if not trace.steps:
        raise ConfigError(f"{what}: the workload is empty (no decode steps)")
    return trace


# --------------------------------------------------------------------------------------------
# files


#: the longest line a step file may have (a step of 65,536 sequences of 16M tokens is about 600 kB)
MAX_LINE_BYTES = 4 << 20


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 text file, read as a stream (memory bounded by one line)."""
    for n, line in utf8_lines(path, "a step trace (UTF-8 JSON Lines or CSV)", MAX_LINE_BYTES):
        yield n, line.rstrip("\r\n")


def _jsonl_records(path: Path) -> Iterable[tuple[dict[str, Any], str]]:
    for n, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path}, line {n}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
        except RecursionError:
            raise ConfigError(f"{where}: JSON nested too deeply") from None
        except ValueError as e:  # an integer over Python's 4300-digit limit
            raise ConfigError(f"{where}: unreadable JSON value ({str(e).split(';')[0][:80]})") from None
        if not isinstance(rec, dict):
            raise ConfigError(f"{where}: expected a JSON object per line, got {type(rec).__name__}")
        yield rec, where


def _csv_list(cell: str, where: str, field: str) -> list[int]:
    parts = [p for p in cell.replace(";", " ").replace(",", " ").split() if p]
    out = []
    for p in parts:
        try:
            out.append(int(p))
        except ValueError:
            raise ConfigError(f"{where}, field '{field}': {p!r} is not an integer") from None
    return out


def _csv_records(path: Path, list_fields: Sequence[str], known: Sequence[str]) -> Iterable[tuple[dict[str, Any], str]]:
    header: list[str] | None = None
    for n, line in _lines(path):
        try:
            row = next(csv.reader([line]))
        except (csv.Error, StopIteration) as e:
            raise ConfigError(f"{path}, line {n}: not a CSV row ({e})") from None
        if not any(c.strip() for c in row):
            continue
        if header is None:
            header = [c.strip() for c in row]
            bad = [h for h in header if h not in known]
            if bad:
                raise ConfigError(f"{path}, line {n}, field '{bad[0]}': unknown column; expected a header naming "
                                  f"{', '.join(known)}")
            continue
        where = f"{path}, line {n}"
        if len(row) != len(header):
            raise ConfigError(f"{where}: {len(row)} cells for {len(header)} columns ({', '.join(header)})")
        rec: dict[str, Any] = {}
        for h, cell in zip(header, row):
            cell = cell.strip()
            if cell == "":
                continue
            if h in list_fields:
                rec[h] = _csv_list(cell, where, h)
            else:
                try:
                    rec[h] = int(cell)
                except ValueError:
                    try:
                        rec[h] = float(cell)
                    except ValueError:
                        raise ConfigError(f"{where}, field '{h}': {cell!r} is not a number") from None
        yield rec, where
    if header is None:
        return


def records(path: Path, *, list_fields: Sequence[str], known: Sequence[str]) -> Iterable[tuple[dict[str, Any], str]]:
    """(record, "file, line n") of a JSON Lines or CSV file (by suffix: .csv is CSV, anything else JSONL)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    if path.suffix.lower() == ".csv":
        return _csv_records(path, list_fields, known)
    return _jsonl_records(path)


@dataclass(frozen=True, slots=True)
class StepColumns:
    """A step file read as flat columns (what tune's batch evaluator takes): step ``i``'s lengths are
    ``seq_lens[offsets[i]:offsets[i + 1]]``; ``lines[i]`` is its line in the file."""

    offsets: array
    seq_lens: array
    query_lens: array
    weights: array
    lines: array
    source: str


def load_step_columns(path: Path) -> StepColumns:
    """Read a step trace (JSON Lines or CSV) as a stream into flat columns, with every check of :func:`make_step`
    (a file of a million steps takes seconds and its numbers' bytes, not objects)."""
    offsets, seq, query, weights, lines = array("q", [0]), array("q"), array("q"), array("q"), array("q")
    query_given = False
    total_weight = 0
    for rec, where in records(path, list_fields=("seq_lens", "query_lens"), known=STEP_FIELDS):
        fast = _fast_step(rec) if type(rec) is dict else None
        if fast is None:
            step = make_step(rec, where)  # raises with the line and the field, or accepts what the check did not
            s_lens, w = list(step.seq_lens), step.weight
            q_lens: list[int] | None = list(step.query_lens)
        else:
            s_lens, q_lens, w = fast
        total_weight += w
        if total_weight > MAX_FILE_NUMBER:  # the step counts stay exact (an int64 sum wrapped to "-2 steps")
            raise ConfigError(f"{where}, field 'weight': the weights add up to {total_weight:,} steps, over the "
                              f"supported {MAX_FILE_NUMBER:,} (2**53)")
        if q_lens is not None or query_given:
            if not query_given:  # the first step with query lengths: every earlier one decoded one token
                query_given = True
                query.extend(array("q", [1]) * len(seq))
            query.extend(q_lens if q_lens is not None else array("q", [1]) * len(s_lens))
        seq.extend(s_lens)
        offsets.append(len(seq))
        weights.append(w)
        lines.append(int(where[where.rindex(" ") + 1:]))
    if len(weights) == 0:
        raise ConfigError(f"{path}: the workload is empty (no decode steps)")
    if not query_given:
        query = array("q", [1]) * len(seq)
    return StepColumns(offsets, seq, query, weights, lines, str(path))


def load_steps(path: Path) -> StepTrace:
    """Read a step trace (JSON Lines or CSV)."""
    steps = tuple(make_step(rec, where) for rec, where in records(path, list_fields=("seq_lens", "query_lens"),
                                                                  known=STEP_FIELDS))
    return nonempty(StepTrace(steps=steps, source=str(path)), str(path))


def steps_from_items(items: Iterable[Any], source: str = "steps") -> StepTrace:
    """A StepTrace from Python objects (the API's ``steps=[...]``): each item a :class:`DecodeStep`, a
    mapping with the file's fields (``{"seq_lens": [...], "query_lens": [...], "weight": n}``) or a
    list of KV lengths. Errors name ``source[i]`` (0-based) and the field."""
    if isinstance(items, (str, bytes)):
        raise ConfigError(f"{source}: expected a list of steps or a file path, got a string")
    out = []
    for i, item in enumerate(items):
        where = f"{source}[{i}]"
        if isinstance(item, DecodeStep):
            out.append(make_step({"seq_lens": list(item.seq_lens), "query_lens": list(item.query_lens),
                                  "weight": item.weight}, item.origin or where))
        elif isinstance(item, dict):
            out.append(make_step(dict(item), where))
        else:
            out.append(make_step({"seq_lens": list(item) if isinstance(item, (list, tuple)) else item}, where))
    return nonempty(StepTrace(steps=tuple(out), source=source), source)


def dump_steps_jsonl(trace: StepTrace) -> str:
    """The trace as JSON Lines (query_lens and weight only where they are not the defaults)."""
    lines = []
    for s in trace.steps:
        rec: dict[str, Any] = {"seq_lens": list(s.seq_lens)}
        if any(q != 1 for q in s.query_lens):
            rec["query_lens"] = list(s.query_lens)
        if s.weight != 1:
            rec["weight"] = s.weight
        lines.append(json.dumps(rec, separators=(", ", ": ")))
    return "\n".join(lines) + "\n"
