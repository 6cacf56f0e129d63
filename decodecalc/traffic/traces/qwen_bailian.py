"""Qwen-Bailian usage traces (Aliyun Bailian; KVCache cache in the wild, USENIX ATC'25).

Source: github.com/alibaba-edu/qwen-bailian-usagetraces-anon, ``README.md`` (commit 03a51e3), "Data Specification
of the Traces": JSON Lines, one request a line, ``{"chat_id": 159, "parent_chat_id": 55, "timestamp": 61.114,
"input_length": 521, "output_length": 132, "type": "text", "turn": 2, "hash_ids": [...]}``. ``timestamp`` is in
seconds from the start of the trace file ("normalized to trace-relative values, starting from 0");
``parent_chat_id`` is -1 for a conversation's first request; ``type`` is text, search, image or file; ``hash_ids``
are salted hashes of the prompt's 16-token blocks. Files: ``qwen_traceA_blksz_16.jsonl`` (to-C chat),
``qwen_traceB_blksz_16.jsonl`` (to-B API calls), ``qwen_coder_blksz_16.jsonl``, ``qwen_thinking_blksz_16.jsonl``.

Read here: ``input_length`` as the prompt, ``output_length`` as the output, ``timestamp`` as seconds. The rows
differ from Mooncake's (:mod:`.mooncake`, the same token fields, but milliseconds) by ``chat_id`` and
``parent_chat_id``, which detection looks for first. A later turn's ``input_length`` holds its whole context, the
earlier turns included (``docs/qa-context-growth-pattern.md``, commit 3d3d2b3: the next turn's input carries the
previous output, less the template's think tokens), so each request is read with its full
prompt; ``chat_id``, ``parent_chat_id``,
``turn``, ``type`` and ``hash_ids`` are ignored (decodecalc's batching model has no prefix cache), and the note
of ignored fields names them. A row with 0 output (or input) tokens is skipped and counted.
"""

from __future__ import annotations

from decodecalc.traffic.traces.records import RecordSchema

QWEN_BAILIAN = RecordSchema(format="qwen-bailian", prompt="input_length", output="output_length", arrival="timestamp",
                            arrival_unit="s", zero_output_reason="0 output_length",
                            zero_prompt_reason="0 input_length")
