"""The requests of a trace as flat arrays, and the builder every reader fills.

:class:`RequestTable` holds one row per request in four ``array.array`` columns (8 bytes a value,
32 bytes a request: ten million requests are ~320 MB, where a list of objects would be several
GB). :class:`TableBuilder` appends rows as a reader streams the file, counts the rows it skips and
why, and at the end shifts arrivals so the earliest is 0 and sorts out-of-order files, stably,
with the same bounded memory.
"""

from __future__ import annotations

import heapq
import itertools
import operator
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from decodecalc.errors import ConfigError

#: a callback told what the reading is doing (a line for a progress display), or None
Progress = Callable[[str], None] | None

# blocks sorted in Python lists before a k-way merge: bounds the sort's transient memory (~70 MB a block)
_SORT_BLOCK = 1 << 20


@dataclass(frozen=True, slots=True)
class RequestTable:
    """Requests of a trace, sorted by arrival (stable: file order among equal arrivals).

    ``arrival_s`` is in seconds after the earliest request (which arrives at 0); ``records`` is the
    1-based line of each request in the file (line-based formats) or its 1-based record index (JSON
    documents: the conversation of a ShareGPT array, the request of a benchmark result).
    ``has_arrivals`` is False when the file gave no arrival times (every request at 0);
    ``tokens_estimated`` is True when token counts were estimated from text. ``notes`` are one
    sentence each: what was ignored, skipped, assumed, sorted or cut."""

    arrival_s: array  # array('d')
    prompt_tokens: array  # array('q')
    output_tokens: array  # array('q')
    records: array  # array('q')
    path: str
    format: str
    has_arrivals: bool
    tokens_estimated: bool
    notes: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    def rows(self) -> Iterator[tuple[float, int, int, int]]:
        """(arrival_s, prompt_tokens, output_tokens, record) of every request, in arrival order."""
        return zip(self.arrival_s, self.prompt_tokens, self.output_tokens, self.records)


def stable_order(keys: array) -> array:
    """Indices that sort ``keys`` stably, as array('q'). Blocks of 2**20 are sorted as lists and
    merged with heapq.merge (stable: ties keep the earlier block first), so a sort of ten million
    arrivals never holds ten million Python objects at once."""
    n = len(keys)
    if n <= _SORT_BLOCK:
        return array("q", sorted(range(n), key=keys.__getitem__))
    blocks = [array("q", sorted(range(s, min(s + _SORT_BLOCK, n)), key=keys.__getitem__))
              for s in range(0, n, _SORT_BLOCK)]
    return array("q", heapq.merge(*blocks, key=keys.__getitem__))


def first_decrease(values: array) -> int | None:
    """The first index i with values[i] < values[i-1], or None (C-speed scan: map and compress)."""
    drops = itertools.compress(itertools.count(1), map(operator.gt, values, itertools.islice(values, 1, None)))
    return next(drops, None)


#: requests one trace may give (a busy server's day is a few hundred thousand): the reading stops there with an
#: error, so a file of any size costs bounded memory and time (a 2 GB trace holds about 50 million rows)
MAX_REQUESTS = 2_000_000
#: requests read between two progress lines (a quarter to half a second of reading)
PROGRESS_EVERY = 1 << 16
#: the latest arrival a trace may have, in seconds after its first request (ten years; Azure's traces span a week,
#: BurstGPT's four months): the batching model counts engine steps up to it in int64
MAX_ARRIVAL_S = 10 * 365 * 86_400


class TableBuilder:
    """Collects the rows of one file. ``add`` returns False once ``limit`` rows are kept (the
    reader then stops reading); ``skip`` counts a row left out and why; ``finish`` makes the table."""

    def __init__(self, path: str, fmt: str, limit: int | None, record_unit: str = "line",
                 progress: Callable[[str], None] | None = None) -> None:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConfigError(f"limit must be a positive integer (requests to keep), got {limit!r}")
        self.path = path
        self.format = fmt
        self.limit = limit
        self.record_unit = record_unit
        self.arrival = array("d")
        self.prompt = array("q")
        self.output = array("q")
        self.records = array("q")
        self.cut = False  # the limit stopped the reading
        self.notes: list[str] = []
        self._skipped: dict[str, list[int]] = {}  # reason -> [count, first record]
        self._ignored: list[str] = []
        self.progress = progress  # told how many requests are read, every PROGRESS_EVERY

    def add(self, arrival: float, prompt: int, output: int, record: int) -> bool:
        if len(self.prompt) >= MAX_REQUESTS and (self.limit is None or self.limit > MAX_REQUESTS):
            raise ConfigError(f"{self.path}, {self.record_unit} {record}: more than {MAX_REQUESTS:,} requests; tune a "
                              f"part of the trace (--max-requests N, up to {MAX_REQUESTS:,})")
        self.arrival.append(arrival)
        self.prompt.append(prompt)
        self.output.append(output)
        self.records.append(record)
        if self.progress is not None and not len(self.prompt) % PROGRESS_EVERY:
            self.progress(f"reading {self.path}: {len(self.prompt):,} requests")
        if self.limit is not None and len(self.prompt) >= self.limit:
            self.cut = True
            return False
        return True

    def skip(self, reason: str, record: int) -> None:
        entry = self._skipped.setdefault(reason, [0, record])
        entry[0] += 1

    def ignore(self, names: list[str] | tuple[str, ...]) -> None:
        for name in names:
            if name not in self._ignored and len(self._ignored) < 20:
                self._ignored.append(name)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def _skip_notes(self) -> list[str]:
        return [f"skipped {count} request{'s' * (count != 1)} ({reason}), the first at {self.record_unit} {first}"
                for reason, (count, first) in self._skipped.items()]

    def finish(self, *, has_arrivals: bool, tokens_estimated: bool = False, empty: str = "no rows") -> RequestTable:
        n = len(self.prompt)
        if n == 0:
            if self._skipped:
                raise ConfigError(f"{self.path}: no requests (every one was skipped: "
                                  f"{'; '.join(self._skip_notes())})")
            raise ConfigError(f"{self.path}: no requests ({empty})")
        notes: list[str] = []
        if self._ignored:
            notes.append(f"ignored field{'s' * (len(self._ignored) != 1)}: {', '.join(self._ignored)}")
        notes += self._skip_notes()
        notes += self.notes
        arrival, prompt, output, records = self.arrival, self.prompt, self.output, self.records
        if not has_arrivals:
            notes.append("no arrival times in the file: every request arrives at t=0")
        else:
            earliest = min(arrival)
            if earliest != 0.0:
                arrival = array("d", (a - earliest for a in arrival))
            drop = first_decrease(arrival)
            if drop is not None:
                notes.append(f"the file is out of arrival order ({self.record_unit} {records[drop]} arrives before "
                             f"{self.record_unit} {records[drop - 1]}): requests were sorted by arrival, stably")
                if self.progress is not None and n > PROGRESS_EVERY:
                    self.progress(f"sorting {n:,} requests by arrival")
                order = stable_order(arrival)
                # one column at a time, so the copy costs one column, not the whole table
                arrival = array("d", map(arrival.__getitem__, order))
                prompt = array("q", map(prompt.__getitem__, order))
                output = array("q", map(output.__getitem__, order))
                records = array("q", map(records.__getitem__, order))
            if not arrival[-1] <= MAX_ARRIVAL_S:  # also an infinite arrival (a request_rate of 1e-320)
                raise ConfigError(f"{self.path}, {self.record_unit} {records[-1]}: arrives {arrival[-1]:.6g} s after "
                                  f"the first request, more than the supported {MAX_ARRIVAL_S:,} s (ten years)")
        if self.cut:
            notes.append(f"limit {self.limit}: kept the first {self.limit} requests in file order and stopped reading")
        return RequestTable(arrival_s=arrival, prompt_tokens=prompt, output_tokens=output, records=records,
                            path=self.path, format=self.format, has_arrivals=has_arrivals,
                            tokens_estimated=tokens_estimated, notes=tuple(notes))


def within_context(table: RequestTable, context: int,
                   whose: str = "the model's context length, or --max-model-len") -> RequestTable:
    """The table without the requests an engine serving a ``context``-token model refuses: prompt + output tokens
    over the context (vLLM and SGLang reject a request whose prompt plus its max tokens passes max_model_len, and a
    trace's output is at most its max tokens), skipped and counted in a note. ``whose``: where the context comes
    from, for the note. Every request past it is a one-line error."""
    if isinstance(context, bool) or not isinstance(context, int) or context < 2:
        raise ConfigError(f"context must be an integer >= 2 tokens, got {context!r}")
    keep = bytearray(map(context.__ge__, map(operator.add, table.prompt_tokens, table.output_tokens)))
    dropped = len(keep) - sum(keep)
    if not dropped:
        return table
    first = keep.index(0)
    longest = max(itertools.compress(map(operator.add, table.prompt_tokens, table.output_tokens),
                                     (1 - k for k in keep)))
    unit = "record" if table.format in ("vllm-bench", "sglang-bench", "sharegpt") else "line"
    where = (f"{unit} {table.records[first]}: {table.prompt_tokens[first]:,} prompt + {table.output_tokens[first]:,} "
             "output tokens")
    if dropped == len(keep):
        raise ConfigError(f"{table.path}: every request is longer than the context, {context:,} tokens ({whose}); "
                          f"the first at {where}; an engine serving it refuses them all (give --max-model-len if it "
                          "serves a longer context)")
    note = (f"skipped {dropped:,} request{'s' * (dropped != 1)} longer than the context, {context:,} tokens ({whose}): "
            f"prompt + output up to {longest:,}, which an engine refuses; the first at {where}")
    arrival = array("d", itertools.compress(table.arrival_s, keep))
    if arrival[0] != 0.0:  # the earliest request was skipped: the next is the new t=0
        arrival = array("d", (a - arrival[0] for a in arrival))
    return RequestTable(arrival_s=arrival,
                        prompt_tokens=array("q", itertools.compress(table.prompt_tokens, keep)),
                        output_tokens=array("q", itertools.compress(table.output_tokens, keep)),
                        records=array("q", itertools.compress(table.records, keep)),
                        path=table.path, format=table.format, has_arrivals=table.has_arrivals,
                        tokens_estimated=table.tokens_estimated, notes=table.notes + (note,))
