"""Mooncake traces (Kimi's serving platform; Qin et al., FAST'25).

Source: github.com/kvcache-ai/Mooncake, ``FAST25-release/README.md`` (commit 40ea55f) and
``FAST25-release/traces/conversation_trace.jsonl`` (commit a2a4b18; also ``synthetic_trace.jsonl``
and the earlier ``mooncake_trace.jsonl`` at the repository root): JSON Lines, one request a line,
``{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}``.
``timestamp`` is the arrival time in milliseconds since the first request (the FAST'25 traces
start at 0 and step by 3000; NVIDIA Dynamo's ``benchmarks/data_generator/README.md``, as stored in
the fork yuekaizhang/dynamo, describes the same format: "The arrival time (in milliseconds) of the request since the first request").
``hash_ids`` are the remapped hashes of the prompt's 512-token blocks (prefix sharing).

Read here: ``input_length`` as the prompt, ``output_length`` as the output, ``timestamp`` as
milliseconds. ``hash_ids`` is ignored (decodecalc's batching model has no prefix cache), named in
the note of ignored fields. A row with 0 output (or input) tokens is skipped and counted.
"""

from __future__ import annotations

from decodecalc.traffic.traces.records import RecordSchema

MOONCAKE = RecordSchema(format="mooncake", prompt="input_length", output="output_length", arrival="timestamp",
                        arrival_unit="ms", zero_output_reason="0 output_length",
                        zero_prompt_reason="0 input_length")
