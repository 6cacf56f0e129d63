"""GitHub Copilot coding agent sessions 2026: one request per LLM call.

Source: github.com/Azure/AzurePublicDataset, ``GitHubCopilotCodingAgentDataset2026.md`` (commit a77ce7b) and
``analysis/GitHubCopilotCodingAgents/schema.json`` (commit 5a79a2c): gzip-compressed JSON Lines shards
``date=YYYY-MM-DD/shard-NNNN.jsonl.gz``, one agent session a line, ``{"session_id", "date", "turns": [{"turn_id",
"llm_calls": [{"message_id", "timestamp", "duration_ms", "initiator_type", "model", "result", "status_code",
"tokens": {"total", "prompt", "completion", "cached", "cached_pct"}, "message_metadata": [...]}],
"tool_batches": [...]}]}``. ``trace_loader.py`` (same folder and commit) reads the shards in sorted path order and
parses ``timestamp`` as an ISO 8601 string; ``model`` is an anonymized label ("Model A"), ``result`` a status
("Success", "UserCancel").

Read here: every ``turns[].llm_calls[]`` entry is one request, ``tokens.prompt`` its prompt (the cached tokens
included: ``total`` is prompt + completion, and decode attention reads the whole KV cache whether its prefix was
cached or not), ``tokens.completion`` its output, ``timestamp`` its arrival. Accepted timestamps: ISO 8601
(``2026-06-01T12:00:00.123Z``, an offset, or none for UTC), or Unix time as a number, in seconds or milliseconds
(the first value decides: :data:`~decodecalc.traffic.traces.values.EPOCH_MS_FROM`). A call with no ``tokens``
(or 0 prompt or completion tokens) is skipped and counted; calls whose ``result`` is not "Success" are kept with
the tokens they report, and counted in a note, as are the calls of each ``model`` (a trace that mixes models is
read as one model's traffic). ``duration_ms``, ``tool_batches`` and ``message_metadata`` are not used. A directory
is read as the shards under it (``*.jsonl``, ``*.jsonl.gz`` and other compressed JSON Lines, at any depth, in
sorted path order); ``records`` is then the session's line counted on through the shards in that order.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.traffic.traces.records import json_objects
from decodecalc.traffic.traces.table import Progress, RequestTable, TableBuilder
from decodecalc.traffic.traces.textio import show
from decodecalc.traffic.traces.values import Clock, token_count

FORMAT = "copilot-agent"
#: the names a shard may have inside a directory (the release's are .jsonl.gz)
SHARD_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".jsonl.xz", ".jsonl.bz2")
#: shards one directory may hold (the week-long release has a few hundred)
MAX_SHARDS = 100_000


def shard_files(directory: Path) -> list[Path]:
    """The JSON Lines shards under ``directory``, in sorted path order (dates, then shard numbers), or ConfigError."""
    found: list[Path] = []
    for p in directory.rglob("*"):
        if p.name.endswith(SHARD_SUFFIXES) and p.is_file():
            found.append(p)
            if len(found) > MAX_SHARDS:
                raise ConfigError(f"{directory}: more than {MAX_SHARDS:,} shard files; give a part of the directory")
    if not found:
        raise ConfigError(f"{directory}: not a regular file, and no shards under it (*.jsonl, *.jsonl.gz, ...); a "
                          f"request trace is a CSV, JSON Lines or JSON file, or a directory of {FORMAT} shards "
                          "(date=YYYY-MM-DD/shard-NNNN.jsonl.gz)")
    return sorted(found, key=lambda p: p.relative_to(directory).parts)


def _list(value: Any, where: str, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}, field '{field}': expected a list, got {show(value)}")
    return value


class _Calls:
    """The LLM calls of the sessions read so far, into the builder."""

    def __init__(self, builder: TableBuilder) -> None:
        self.builder = builder
        self.clock = Clock("epoch", "timestamp")
        self.models: Counter[str] = Counter()
        self.results: Counter[str] = Counter()

    def session(self, session: dict[str, Any], record: int, where: str) -> bool:
        """Every call of one session; False once the builder's limit is reached."""
        if "turns" not in session:
            raise ConfigError(f"{where}, field 'turns': missing (a {FORMAT} line is one session with its turns)")
        for t, turn in enumerate(_list(session["turns"], where, "turns")):
            if not isinstance(turn, dict):
                raise ConfigError(f"{where}, field 'turns[{t}]': expected an object, got {show(turn)}")
            calls = turn.get("llm_calls")
            for c, call in enumerate(_list(calls, where, f"turns[{t}].llm_calls") if calls is not None else ()):
                if not self.call(call, record, where, f"turns[{t}].llm_calls[{c}]"):
                    return False
        return True

    def call(self, call: Any, record: int, where: str, field: str) -> bool:
        if not isinstance(call, dict):
            raise ConfigError(f"{where}, field '{field}': expected an object, got {show(call)}")
        tokens = call.get("tokens")
        if tokens is None:
            self.builder.skip("an llm_call with no tokens", record)
            return True
        if not isinstance(tokens, dict):
            raise ConfigError(f"{where}, field '{field}.tokens': expected an object, got {show(tokens)}")
        counts = []
        for key in ("prompt", "completion"):
            raw = tokens.get(key)
            if raw is None or raw == "":
                raise ConfigError(f"{where}, field '{field}.tokens.{key}': missing")
            counts.append(token_count(raw, where, f"{field}.tokens.{key}"))
        stamp = call.get("timestamp")
        if stamp is None or stamp == "":
            raise ConfigError(f"{where}, field '{field}.timestamp': missing")
        arrival = self.clock.seconds(stamp, f"{where}, {field}")
        prompt, completion = counts
        if completion == 0:
            self.builder.skip("0 completion tokens", record)
            return True
        if prompt == 0:
            self.builder.skip("0 prompt tokens", record)
            return True
        self.models[str(call.get("model"))] += 1
        result = call.get("result")
        if result is not None and result != "Success":
            self.results[str(result)] += 1
        return self.builder.add(arrival, prompt, completion, record)

    def notes(self) -> None:
        n = len(self.builder.prompt)
        self.builder.note("one request per llm_call: tokens.prompt (its cached tokens included) the prompt, "
                          "tokens.completion the output, timestamp the arrival")
        if n and len(self.models) > 1:
            top = ", ".join(f"{m} {k / n:.0%}" for m, k in self.models.most_common(4))
            more = ", ..." if len(self.models) > 4 else ""
            self.builder.note(f"llm_calls of {len(self.models)} models ({top}{more}), read as one model's traffic")
        if self.results:
            kinds = ", ".join(f"{r} {k:,}" for r, k in self.results.most_common(3))
            self.builder.note(f"{sum(self.results.values()):,} kept llm_calls ended other than Success ({kinds}); "
                              "read with the tokens they report")
        if n:
            self.builder.note(self.clock.describe())


def read_copilot(paths: list[Path], source: Path, limit: int | None, progress: Progress = None) -> RequestTable:
    """The LLM calls of the sessions in ``paths`` (one file, or the shards of the directory ``source``)."""
    builder = TableBuilder(str(source), FORMAT, limit, record_unit="line", progress=progress)
    calls = _Calls(builder)
    offset = 0  # lines of the shards before this one
    for path in paths:
        last = 0
        for n, where, session in json_objects(path, "jsonl"):
            last = n
            if not calls.session(session, offset + n, where):
                break
        if builder.cut:  # the limit was reached
            break
        offset += last
    calls.notes()
    if len(paths) > 1:
        builder.note(f"read {len(paths):,} shard files in path order; records count lines on through them")
    return builder.finish(has_arrivals=True, empty="the sessions hold no llm_calls")
