"""The result JSON of ``vllm bench serve --save-result --save-detailed``.

Source: github.com/vllm-project/vllm, ``vllm/benchmarks/serve.py`` (commit 009e6d4). ``benchmark()``
returns ``input_lens`` (``output.prompt_len`` of every request), ``output_lens`` (the output tokens
``calculate_metrics`` counted; 0 for a failed request), ``start_times`` (``output.start_time``, the
client's ``time.perf_counter()`` when the request was sent, in seconds), ``errors`` ("" on
success), plus ``ttfts``, ``itls``, ``latencies``, ``generated_texts``, ``queue_times``; ``main``
adds the run's settings (``date``, ``endpoint_type``, ``backend``, ``model_id``, ``tokenizer_id``,
``num_prompts``, ``request_rate`` — a number or the string ``"inf"`` —, ``burstiness``,
``max_concurrency``, ``ramp_up_*``). Without ``--save-detailed`` the per-request lists are deleted
before the file is written, and ``--append-result`` appends runs to one file, one per line.
Older vLLM (``benchmarks/benchmark_serving.py``) wrote the same lists without ``start_times``.

Read here: request i has ``input_lens[i]`` prompt and ``output_lens[i]`` output tokens and arrives
at ``start_times[i]`` (seconds after the first request sent); failed requests are skipped. Without
``start_times`` the arrivals come from ``request_rate`` (see :mod:`.bench`). ``records`` are the
1-based request indices.
"""

from __future__ import annotations

from decodecalc.traffic.traces.bench import BenchSchema

VLLM_BENCH = BenchSchema(format="vllm-bench", tool="vllm bench serve --save-result",
                         details_flag="--save-detailed",
                         markers=frozenset({"endpoint_type", "tokenizer_id", "model_id", "burstiness",
                                            "start_times", "num_prompts", "label", "date"}))
