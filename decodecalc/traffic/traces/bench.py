"""Benchmark result files: per-request lengths kept by ``vllm bench serve`` and ``sglang.bench_serving``.

Both write one JSON object per run with columnar per-request arrays (``input_lens[i]``,
``output_lens[i]``, ``errors[i]`` ... of request i) next to the run's settings, and both append
runs to one file (one object per line). The object is read with :class:`JsonStream`, array element
by array element, so the ``generated_texts`` and ``itls`` arrays cost nothing to skip. The first
result that has per-request lengths is read; a note says when the file holds more.

Requests that failed (a non-empty ``errors[i]``, or 0 output tokens: both tools write 0 for a
failure) are skipped and counted. Arrivals: the send time of each request where the file has it
(vLLM's ``start_times``); otherwise, at a finite ``request_rate`` R, request i arrives at i / R
(both tools drew Poisson gaps of mean 1/R but did not save them: the even spacing keeps the rate,
not the burstiness); otherwise (``inf``, as the tools send then) every request at t=0. A rate that is
none of these (0, negative, NaN, ``true``, a text such as SGLang's ``"trace"``) with no start times is
an error: the file does not say when its requests arrived, and t=0 for all of them would be a guess.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.traffic.traces.jsonstream import JsonStream
from decodecalc.traffic.traces.table import Progress, RequestTable, TableBuilder
from decodecalc.traffic.traces.textio import open_trace, show
from decodecalc.traffic.traces.values import token_count

_SETTINGS = ("request_rate", "burstiness", "max_concurrency", "ramp_up_strategy")


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchSchema:
    format: str
    tool: str  # the command that writes the file
    details_flag: str  # the option that keeps the per-request arrays
    markers: frozenset[str]  # keys only this tool's results have (format detection)


@dataclass(slots=True)
class _Result:
    line: int
    input_lens: array | None = None
    output_lens: array | None = None
    start_times: array | None = None
    failed: bytearray | None = None
    settings: dict[str, Any] = field(default_factory=dict)


def _lengths(stream: JsonStream, where: str, key: str) -> array:
    if stream.peek() != "[":
        raise ConfigError(f"{where}, field '{key}': expected a list of token counts, got {show(stream.value())}")
    out = array("q")
    for i, v in enumerate(stream.array_items()):
        out.append(token_count(v, where, f"{key}[{i}]"))
    return out


def _read_result(stream: JsonStream, path: Path) -> _Result:
    result = _Result(line=stream.line)
    where = f"{path}, line {result.line}"
    for key in stream.object_members():
        if key in ("input_lens", "output_lens"):
            setattr(result, key, _lengths(stream, where, key))
        elif key == "start_times" and stream.peek() == "[":
            # a failed request may have no start time: NaN here, an error only if the request is kept
            result.start_times = array("d", (_start(v) for v in stream.array_items()))
        elif key == "errors" and stream.peek() == "[":
            # "" (vLLM, SGLang) or null on success, the error text on failure
            result.failed = bytearray(1 if v else 0 for v in stream.array_items())
        elif key in _SETTINGS:
            result.settings[key] = stream.value()
        else:
            stream.skip()
    return result


def _start(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return math.nan
    return math.nan


def _rate(value: Any) -> float | str | None:
    """A finite rate > 0, "inf", another string (SGLang's "trace"), or None (absent or unreadable)."""
    if isinstance(value, str):
        return "inf" if value.strip().lower() in ("inf", "infinity") else value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "inf" if math.isinf(value) else (float(value) if value > 0 else None)
    return None


def read_bench(path: Path, schema: BenchSchema, limit: int | None, progress: Progress = None) -> RequestTable:
    builder = TableBuilder(str(path), schema.format, limit, record_unit="request", progress=progress)
    with open_trace(path) as f:
        stream = JsonStream(f, str(path))
        if stream.peek() != "{":
            raise ConfigError(f"{path}: not a {schema.format} result (expected a JSON object written by "
                              f"{schema.tool})")
        chosen: _Result | None = None
        runs = 0
        while stream.peek() != "":
            if stream.peek() != "{":
                raise ConfigError(f"{path}, line {stream.line}: expected a JSON object (one result of "
                                  f"{schema.tool}), found {show(stream.peek())}")
            runs += 1
            result = _read_result(stream, path)
            if result.input_lens is not None or result.output_lens is not None:
                chosen = result
                break
        if chosen is None:
            raise ConfigError(f"{path}: no per-request lengths (input_lens, output_lens) in its {runs} result"
                              f"{'s' * (runs != 1)}; run {schema.tool} with {schema.details_flag}")
        more = stream.peek() != ""
    where = f"{path}, line {chosen.line}"
    inputs, outputs = chosen.input_lens, chosen.output_lens
    if inputs is None or outputs is None:
        missing = "input_lens" if inputs is None else "output_lens"
        raise ConfigError(f"{where}, field '{missing}': missing (the result has the other per-request list)")
    n = len(inputs)
    if len(outputs) != n:
        raise ConfigError(f"{where}, field 'output_lens': {len(outputs)} values for {n} input_lens")
    for name, column in (("start_times", chosen.start_times), ("errors", chosen.failed)):
        if column is not None and len(column) != n:
            raise ConfigError(f"{where}, field '{name}': {len(column)} values for {n} input_lens")
    if runs > 1 or more:
        builder.note(f"read the result on line {chosen.line}, the first with per-request lengths; the file holds "
                     "other results (appended runs), not read")
    arrivals, has_arrivals = _arrivals(chosen, n, builder)
    failed = chosen.failed or bytearray(n)
    for i in range(n):
        if failed[i] or outputs[i] == 0:
            builder.skip("failed: an error, or 0 output tokens", i + 1)
        elif inputs[i] == 0:
            builder.skip("0 input tokens", i + 1)
        else:
            arrival = arrivals(i)
            if not math.isfinite(arrival) and chosen.start_times is None:  # i / rate for a rate of 5e-324
                raise ConfigError(f"{where}, field 'request_rate': {chosen.settings.get('request_rate')!r} req/s puts "
                                  f"request {i + 1} at an infinite time")
            if not math.isfinite(arrival):
                raise ConfigError(f"{where}, field 'start_times[{i}]': expected a number of seconds for a request "
                                  "that did not fail")
            if not builder.add(arrival, inputs[i], outputs[i], i + 1):
                break
    return builder.finish(has_arrivals=has_arrivals, empty="the result holds no requests")


def _arrivals(result: _Result, n: int, builder: TableBuilder) -> tuple[Any, bool]:
    """(arrival of request i, has_arrivals), and a note saying where the arrivals come from."""
    settings = result.settings
    concurrency = settings.get("max_concurrency")
    capped = (f"; the run also capped concurrency at {concurrency}, which arrivals do not model"
              if isinstance(concurrency, int) and not isinstance(concurrency, bool) else "")
    if result.start_times is not None:
        starts = result.start_times
        builder.note(f"arrivals from start_times (when the client sent each request){capped}")
        return starts.__getitem__, True
    rate = _rate(settings.get("request_rate"))
    if "request_rate" in settings and not isinstance(rate, float) and rate != "inf":
        raise _bad_rate(settings["request_rate"], f"{builder.path}, line {result.line}")
    if isinstance(rate, float) and not settings.get("ramp_up_strategy"):
        burst = settings.get("burstiness")
        shape = f", burstiness {burst}" if isinstance(burst, (int, float)) and burst != 1 else ""
        builder.note(f"no per-request send times in the file: arrivals spaced evenly at the run's request_rate "
                     f"{rate:g} req/s (the benchmark drew random gaps of that mean{shape}, not saved){capped}")
        return (lambda i: i / rate), True
    if rate == "inf":
        builder.note(f"request_rate inf: the benchmark sent every request at once{capped}")
    elif settings.get("ramp_up_strategy"):
        builder.note(f"request rate ramped up ({settings['ramp_up_strategy']}) and no send times saved")
    return (lambda i: 0.0), False


def _bad_rate(value: Any, where: str) -> ConfigError:
    """A request rate that gives no arrivals (and no start_times to fall back on)."""
    head = f"{where}, field 'request_rate': "
    if isinstance(value, str) and value.strip().lower() == "trace":
        return ConfigError(head + "'trace': the run replayed a trace's timestamps, which the result does not keep, "
                           "and it has no start_times; read the trace the run replayed instead")
    return ConfigError(head + f"{show(value)} is not a request rate (a number > 0, or inf) and the result has no "
                       "start_times, so when its requests arrived is unknown; read the trace the run replayed, or "
                       "rerun the benchmark with a rate")
