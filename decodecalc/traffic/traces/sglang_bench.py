"""The JSON Lines results of SGLang's ``python -m sglang.bench_serving --output-details``.

Source: github.com/sgl-project/sglang, ``python/sglang/bench_serving.py`` (commit 0033168), end of
``benchmark()``: one JSON object per run appended to ``--output-file`` (``f.write(json.dumps(...) +
"\\n")``) with the run's settings and metrics (``backend``, ``dataset_name``, ``request_rate`` — a
float, so ``Infinity`` when unlimited; later versions write ``"trace"`` when replaying a trace's
timestamps —, ``max_concurrency``, ``sharegpt_output_len``, ``random_input_len``,
``random_output_len``, ``random_range_ratio``, ``duration``, ``completed``, ...) and, only with
``--output-details``, ``input_lens`` (``output.prompt_len``), ``output_lens`` (from
``calculate_metrics``: the output tokens of a successful request, 0 for a failed one), ``ttfts``,
``itls``, ``generated_texts`` and ``errors``. The file keeps no per-request send time.

Read here: the first line with per-request lengths; request i has ``input_lens[i]`` prompt and
``output_lens[i]`` output tokens; failed requests are skipped; arrivals come from ``request_rate``
(see :mod:`.bench`). ``records`` are the 1-based request indices.
"""

from __future__ import annotations

from decodecalc.traffic.traces.bench import BenchSchema

SGLANG_BENCH = BenchSchema(format="sglang-bench", tool="python -m sglang.bench_serving",
                           details_flag="--output-details",
                           markers=frozenset({"dataset_name", "sharegpt_output_len", "random_input_len",
                                              "random_output_len", "random_range_ratio", "server_info",
                                              "total_output_tokens_retokenized", "accept_length", "tag"}))
