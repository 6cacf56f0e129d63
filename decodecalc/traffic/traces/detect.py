"""Which trace format a file is, from its beginning: the CSV header, or the keys of the first JSON record.

Deterministic and content-only (the file name plays no part). The first non-blank character picks
the container: ``[`` a JSON array (ShareGPT, or records), ``{`` JSON objects (JSON Lines records or
a benchmark result, or Copilot agent sessions, which have ``turns``), anything else CSV. Record formats are
recognized by their required fields, the longest set first (Azure LMM's holds Azure's, Qwen-Bailian's
Mooncake's); a benchmark result by keys only its tool writes. Reading stops at
the first record, or after :data:`DETECT_CHARS` of a large first object. A file that matches
nothing gets one error naming the closest format and what it lacks.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from decodecalc.errors import ConfigError
from decodecalc.traffic.traces.azure import AZURE
from decodecalc.traffic.traces.azure_lmm import AZURE_LMM
from decodecalc.traffic.traces.burstgpt import BURSTGPT
from decodecalc.traffic.traces.jsonstream import JsonStream
from decodecalc.traffic.traces.mooncake import MOONCAKE
from decodecalc.traffic.traces.native import NATIVE
from decodecalc.traffic.traces.qwen_bailian import QWEN_BAILIAN
from decodecalc.traffic.traces.records import RecordSchema
from decodecalc.traffic.traces.sglang_bench import SGLANG_BENCH
from decodecalc.traffic.traces.textio import delimiter_of, open_trace, sniff
from decodecalc.traffic.traces.vllm_bench import VLLM_BENCH

FORMATS = ("native", "azure", "azure-lmm", "burstgpt", "mooncake", "qwen-bailian", "copilot-agent", "vllm-bench",
           "sglang-bench", "sharegpt")
RECORD_SCHEMAS: dict[str, RecordSchema] = {"native": NATIVE, "azure": AZURE, "azure-lmm": AZURE_LMM,
                                           "burstgpt": BURSTGPT, "mooncake": MOONCAKE, "qwen-bailian": QWEN_BAILIAN}
#: the fields that identify each format (for the "closest is ..." message)
SIGNATURES: dict[str, tuple[str, ...]] = {
    "native": ("prompt_tokens", "output_tokens"),
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "azure-lmm": ("TIMESTAMP", "NumImages", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
    "mooncake": ("timestamp", "input_length", "output_length"),
    "qwen-bailian": ("chat_id", "parent_chat_id", "timestamp", "input_length", "output_length"),
    "copilot-agent": ("session_id", "turns"),
    "vllm-bench": ("input_lens", "output_lens", "start_times"),
    "sglang-bench": ("input_lens", "output_lens", "dataset_name"),
    "sharegpt": ("conversations",),
}
#: characters of a first JSON object read before deciding (benchmark results name their tool first)
DETECT_CHARS = 2**20
_HINT = "give --format NAME or --columns prompt=COL,output=COL[,arrival=COL]"


@dataclass(frozen=True, slots=True)
class Detected:
    format: str
    container: str  # csv, jsonl, json-array, or json-document (ShareGPT, a benchmark result)


def detect(path: Path) -> Detected:
    head = sniff(path).lstrip()
    if not head:
        raise ConfigError(f"{path}: no requests (the file is empty)")
    if head[0] == "[":
        keys = _first_element_keys(path)
        if "conversations" in keys:
            return Detected("sharegpt", "json-document")
        return _record_format(path, keys, "json-array")
    if head[0] == "{":
        keys = _first_object_keys(path)
        if "turns" in keys:  # before the benchmarks: a session's "date" is also a vLLM result's key
            return Detected("copilot-agent", "jsonl")
        record = _match_record(keys)
        if record:
            return Detected(record, "jsonl")
        vllm, sglang = len(keys & VLLM_BENCH.markers), len(keys & SGLANG_BENCH.markers)
        if sglang > vllm:
            return Detected("sglang-bench", "json-document")
        if vllm or {"input_lens", "output_lens"} & keys:
            return Detected("vllm-bench", "json-document")
        return _record_format(path, keys, "jsonl")
    return _record_format(path, _csv_header(head), "csv")


def _match_record(fields: set[str]) -> str | None:
    # the longest signature first: Azure LMM's holds Azure's, Qwen-Bailian's Mooncake's (ties: FORMATS order)
    for name in sorted(RECORD_SCHEMAS, key=lambda n: -len(SIGNATURES[n])):
        if set(SIGNATURES[name]) <= fields:
            return name
    return None


def _record_format(path: Path, fields: set[str], container: str) -> Detected:
    name = _match_record(fields)
    if name is None:
        raise not_a_trace(path, fields)
    return Detected(name, container)


def not_a_trace(path: Path, fields: set[str]) -> ConfigError:
    # closest: the most signature fields present (ties: FORMATS order)
    best = max(FORMATS, key=lambda f: (sum(k in fields for k in SIGNATURES[f]), -FORMATS.index(f)))
    has = [k for k in SIGNATURES[best] if k in fields]
    lacks = [k for k in SIGNATURES[best] if k not in fields]
    parts = ([f"has {', '.join(has)}"] if has else []) + [f"lacks {', '.join(lacks)}"]
    return ConfigError(f"{path}: not a known request-trace format; closest is {best} ({', '.join(parts)}); {_HINT}")


def _csv_header(head: str) -> set[str]:
    for line in head.splitlines():
        if line.strip():
            try:
                return {c.strip() for c in next(csv.reader([line], delimiter=delimiter_of(line)))}
            except (csv.Error, StopIteration):
                return set()
    return set()


def _first_element_keys(path: Path) -> set[str]:
    with open_trace(path) as f:
        stream = JsonStream(f, str(path))
        for element in stream.array_items():
            if not isinstance(element, dict):
                raise ConfigError(f"{path}, record 1: expected a JSON object per element, got {type(element).__name__}")
            return set(element)
    raise ConfigError(f"{path}: no requests (an empty JSON array)")


def _first_object_keys(path: Path) -> set[str]:
    keys: set[str] = set()
    with open_trace(path) as f:
        stream = JsonStream(f, str(path))
        for key in stream.object_members():
            keys.add(key)
            stream.skip()
            if stream.offset > DETECT_CHARS:
                break
    return keys
