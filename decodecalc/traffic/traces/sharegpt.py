"""ShareGPT conversations (``ShareGPT_V3_unfiltered_cleaned_split.json``) as requests, the way vLLM's benchmark does.

Source of the format and the rule: github.com/vllm-project/vllm,
``vllm/benchmarks/datasets/sharegpt.py`` (commit 237145e), ``ShareGPTDataset``: the file is one JSON
array of ``{"id": ..., "conversations": [{"from": "human", "value": "..."}, {"from": "gpt",
"value": "..."}, ...]}``; ``load_data`` keeps the entries that have ``"conversations"`` with at
least two turns; ``sample`` takes ``conversations[0]["value"]`` as the prompt and
``conversations[1]["value"]`` as the completion (whatever their ``from``) and counts both with
``tokenizer(text).input_ids``. SGLang's ``sample_sharegpt_requests`` (``python/sglang/bench_serving.py``)
does the same.

Read here: one request per kept conversation, in file order (vLLM shuffles with a seed; decodecalc
keeps the file's order so the same file gives the same table). Not applied: vLLM's
``is_valid_sequence`` pruning (prompt or output under 4 tokens, prompt over 1024, both over 2048),
a limit of the benchmark's defaults, not of the data. Token counts: see :mod:`.tokens`. A turn
with 0 tokens (an empty text, when estimating) is skipped and counted. There are no arrival
times: every request arrives at t=0, as ``vllm bench serve`` sends them at ``--request-rate inf``.
``records`` are the 1-based indices of the conversations in the array.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.traffic.traces.jsonstream import JsonStream
from decodecalc.traffic.traces.table import Progress, RequestTable, TableBuilder
from decodecalc.traffic.traces.textio import open_trace, show
from decodecalc.traffic.traces.tokens import Counter, make_counter


def _turn_text(turns: list[Any], i: int, where: str) -> str:
    turn = turns[i]
    if not isinstance(turn, dict):
        raise ConfigError(f"{where}, field 'conversations[{i}]': expected an object with 'from' and 'value', "
                          f"got {show(turn)}")
    text = turn.get("value")
    if not isinstance(text, str):
        raise ConfigError(f"{where}, field 'conversations[{i}].value': expected a string, got {show(text)}")
    return text


def _count(count: Counter, turns: list[Any], i: int, where: str) -> int:
    text = _turn_text(turns, i, where)
    try:
        return count(text)
    except Exception as e:  # the tokenizers library raises its own types (a lone surrogate from a \ud800 escape)
        raise ConfigError(f"{where}, field 'conversations[{i}].value': the tokenizer cannot encode it "
                          f"({str(e).splitlines()[0][:80] if str(e) else type(e).__name__})") from None


def read_sharegpt(path: Path, tokenizer: str | None, model_hint: str | None, limit: int | None,
                  progress: Progress = None) -> RequestTable:
    count, estimated, how = make_counter(tokenizer, model_hint)
    builder = TableBuilder(str(path), "sharegpt", limit, record_unit="record", progress=progress)
    with open_trace(path) as f:
        stream = JsonStream(f, str(path))
        if stream.peek() != "[":
            raise ConfigError(f"{path}: not a ShareGPT file (expected a JSON array of conversations)")
        for record, entry in enumerate(stream.array_items(), start=1):
            where = f"{path}, record {record}"
            if not isinstance(entry, dict):
                raise ConfigError(f"{where}: expected an object with 'conversations', got {show(entry)}")
            turns = entry.get("conversations")
            if turns is None:
                builder.skip("no 'conversations'", record)
                continue
            if not isinstance(turns, list):
                raise ConfigError(f"{where}, field 'conversations': expected a list of turns, got {show(turns)}")
            if len(turns) < 2:
                builder.skip("fewer than 2 turns: vLLM's rule", record)
                continue
            prompt = _count(count, turns, 0, where)
            output = _count(count, turns, 1, where)
            if prompt == 0 or output == 0:
                builder.skip("an empty first or second turn", record)
                continue
            if not builder.add(0.0, prompt, output, record):
                break
        else:
            if stream.peek() != "":
                raise ConfigError(f"{path}, line {stream.line}: text after the JSON array")
    builder.note("one request per conversation: its first turn is the prompt, its second the output "
                 "(vLLM's ShareGPT rule)")
    builder.note(how)
    return builder.finish(has_arrivals=False, tokens_estimated=estimated, empty="an empty JSON array")
