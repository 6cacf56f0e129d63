"""Write examples/metrics/vllm-metrics.txt: a /metrics scrape as a vLLM 0.33.0 OpenAI server exposes it.

The metrics are declared with prometheus_client exactly as vLLM 0.33.0 declares them (names, help
text, label names, bucket boundaries: vllm/v1/metrics/loggers.py and buckets.py, cited in
examples/metrics/README.md) in the order vLLM registers them, for one engine serving
``meta-llama/Llama-3.1-8B-Instruct`` with ``--max-model-len 32768`` and no speculative decoding,
KV connector, LoRA or ``--kv-cache-metrics``. The observations are synthetic: a chat server that
finished 48,213 requests in about six hours (prompt mean ~1,000 tokens, output mean ~250) and
has 37 requests running at the scrape. The values of the Python and process collectors and of the
HTTP instrumentator are fixed numbers of the same kind. Deterministic (fixed seed and timestamps):

    python -m tools.make_metrics_example            # rewrites the example
    python -m tools.make_metrics_example --check    # exit 1 if the file differs
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path
from unittest import mock

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

OUT = Path(__file__).resolve().parent.parent / "examples" / "metrics" / "vllm-metrics.txt"
SEED = 20260518
T0 = 1_779_091_200.0  # 2026-05-18 08:00 UTC: when the stat logger created its metrics
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
MAX_MODEL_LEN = 32_768
FINISHED = 48_213
RUNNING = 37
BLOCK_SIZE, NUM_GPU_BLOCKS = 16, 55_800  # Llama-3.1-8B bf16: 128 KiB of KV per token; ~109 GiB of KV on an H200

# vllm/v1/metrics/buckets.py (0.33.0)
REQUEST_LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0)
TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
        160.0, 640.0, 2560.0)
ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
ITERATION_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N = (1, 2, 5, 10, 20)
PREEMPTIONS = (1, 2, 3, 4, 5, 10, 20)


def build_1_2_5_buckets(max_value: int) -> list[float]:
    """vLLM's request_tokens family: 1, 2, 5, 10, 20, ... up to max_model_len."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10 ** exponent
            if v > max_value:
                return out
            out.append(v)
        exponent += 1


class Fixed:
    """A collector that yields fixed families (stands in for the process, platform and GC collectors)."""

    def __init__(self, families):
        self.families = families

    def collect(self):
        return self.families


def python_and_process(registry: CollectorRegistry) -> None:
    gc = []
    for name, doc, vals in (("python_gc_objects_collected", "Objects collected during gc", (48113, 9472, 1311)),
                            ("python_gc_objects_uncollectable", "Uncollectable objects found during GC", (0, 0, 0)),
                            ("python_gc_collections", "Number of times this generation was collected",
                             (7841, 712, 23))):
        fam = CounterMetricFamily(name, doc, labels=["generation"])
        for gen, v in enumerate(vals):
            fam.add_metric([str(gen)], v)
        gc.append(fam)
    registry.register(Fixed(gc))
    info = GaugeMetricFamily("python_info", "Python platform information",
                             labels=["version", "implementation", "major", "minor", "patchlevel"])
    info.add_metric(["3.12.12", "CPython", "3", "12", "12"], 1)
    registry.register(Fixed([info]))
    registry.register(Fixed([
        GaugeMetricFamily("process_virtual_memory_bytes", "Virtual memory size in bytes.", value=29_012_504_576),
        GaugeMetricFamily("process_resident_memory_bytes", "Resident memory size in bytes.", value=3_148_394_496),
        GaugeMetricFamily("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                          value=T0 - 41.37),
        CounterMetricFamily("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                            value=9_813.42),
        GaugeMetricFamily("process_open_fds", "Number of open file descriptors.", value=87),
        GaugeMetricFamily("process_max_fds", "Maximum number of open file descriptors.", value=1_048_576),
    ]))


def lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return median * math.exp(rng.gauss(0.0, sigma))


def draw_request(rng: random.Random) -> dict:
    """One chat request: a system prompt and a conversation, a reply capped by the client's max_tokens."""
    prompt = max(1, min(MAX_MODEL_LEN - 1, round(lognormal(rng, 610, 1.0))))
    u = rng.random()
    max_tokens = 1024 if u < 0.60 else 2048 if u < 0.85 else 512 if u < 0.90 else None
    room = MAX_MODEL_LEN - prompt
    want = max(1, round(lognormal(rng, 166, 1.0)))
    out = min(want, room, max_tokens or room)
    reason = "length" if out < want else "stop"
    if rng.random() < 0.008:  # the client went away mid-reply
        out, reason = max(1, int(out * rng.random())), "abort"
    cached = (int(prompt * rng.uniform(0.2, 0.9)) // BLOCK_SIZE * BLOCK_SIZE) if rng.random() < 0.45 else 0
    return {"prompt": prompt, "out": out, "reason": reason, "max_tokens": max_tokens, "cached": cached,
            "max_gen": max_tokens if max_tokens is not None else room}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the example differs from what this writes")
    args = ap.parse_args()

    rng = random.Random(SEED)
    finished = [draw_request(rng) for _ in range(FINISHED)]
    running = [draw_request(rng) for _ in range(RUNNING)]
    for r in running:  # partway through their replies
        r["out"] = max(1, int(r["out"] * rng.random()))

    reg = CollectorRegistry()
    python_and_process(reg)
    labels = ["model_name", "engine"]
    lv = (MODEL, "0")
    with mock.patch("prometheus_client.metrics.time.time", return_value=T0):
        # PerfMetricsProm (vllm/v1/metrics/perf.py): registered always, zero without --enable-mfu-metrics
        for name, what in (("vllm:estimated_flops_per_gpu_total", "Estimated number of floating point operations "
                            "per GPU (for Model Flops Utilization calculations)."),
                           ("vllm:estimated_read_bytes_per_gpu_total", "Estimated number of bytes read from memory "
                            "per GPU (for Model Flops Utilization calculations)."),
                           ("vllm:estimated_write_bytes_per_gpu_total", "Estimated number of bytes written to memory "
                            "per GPU (for Model Flops Utilization calculations).")):
            Counter(name, what, labels, registry=reg).labels(*lv)
        Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", labels,
              registry=reg, multiprocess_mode="mostrecent").labels(*lv).set(RUNNING)
        Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels,
              registry=reg, multiprocess_mode="mostrecent").labels(*lv).set(0)
        by_reason = Gauge("vllm:num_requests_waiting_by_reason",
                          "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
                          "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, "
                          "blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
                          labels + ["reason"], registry=reg, multiprocess_mode="mostrecent")
        for reason in ("capacity", "deferred"):
            by_reason.labels(*lv, reason).set(0)
        sleep = Gauge("vllm:engine_sleep_state",
                      "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
                      "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
                      labels + ["sleep_state"], registry=reg, multiprocess_mode="mostrecent")
        for state, v in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0)):
            sleep.labels(model_name=MODEL, engine="0", sleep_state=state).set(v)
        blocks_now = sum(math.ceil((r["prompt"] + r["out"]) / BLOCK_SIZE) for r in running)
        Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels, registry=reg,
              multiprocess_mode="mostrecent").labels(*lv).set(blocks_now / NUM_GPU_BLOCKS)
        every = finished + running
        queried = sum(r["prompt"] for r in every)
        hits = sum(r["cached"] for r in every)
        Counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", labels,
                registry=reg).labels(*lv).inc(queried)
        Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", labels,
                registry=reg).labels(*lv).inc(hits)
        Counter("vllm:external_prefix_cache_queries", "External prefix cache queries from KV connector "
                "cross-instance cache sharing, in terms of number of queried tokens.", labels, registry=reg).labels(*lv)
        Counter("vllm:external_prefix_cache_hits", "External prefix cache hits from KV connector cross-instance "
                "cache sharing, in terms of number of cached tokens.", labels, registry=reg).labels(*lv)
        Counter("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.", labels,
                registry=reg).labels(*lv)
        Counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.", labels,
                registry=reg).labels(*lv)
        Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels,
                registry=reg).labels(*lv)
        Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=reg).labels(*lv).inc(
            queried)
        by_source = Counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", labels + ["source"],
                            registry=reg)
        by_source.labels(*lv, "local_compute").inc(queried - hits)
        by_source.labels(*lv, "local_cache_hit").inc(hits)
        by_source.labels(*lv, "external_kv_transfer")
        Counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).", labels,
                registry=reg).labels(*lv).inc(hits)
        cached_by = Counter("vllm:prompt_tokens_cached_by_source",
                            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
                            "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
                            "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
                            "vllm:external_prefix_cache_hits.", labels + ["source"], registry=reg)
        for src in ("device", "host", "p2p", "disk", "external_unspecified"):
            cached_by.labels(*lv, src).inc(hits if src == "device" else 0)
        generated = sum(r["out"] for r in every)
        Counter("vllm:generation_tokens", "Number of generation tokens processed.", labels,
                registry=reg).labels(*lv).inc(generated)
        success = Counter("vllm:request_success", "Count of successfully processed requests.",
                          labels + ["finished_reason"], registry=reg)
        for reason in ("stop", "length", "abort", "error", "repetition"):
            success.labels(*lv, reason).inc(sum(r["reason"] == reason for r in finished))
        rej = Counter("vllm:admission_rejections", "Number of admission attempts rejected by a queue limit, by reason.",
                      ["model_name", "reason"], registry=reg)
        for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
            rej.labels(model_name=MODEL, reason=reason)

        tok = build_1_2_5_buckets(MAX_MODEL_LEN)

        def hist(name, doc, buckets):
            return Histogram(name, doc, labels, buckets=buckets, registry=reg).labels(*lv)

        h_prompt = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tok)
        h_gen = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", tok)
        h_iter = hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", ITERATION_TOKENS)
        h_max_gen = hist("vllm:request_max_num_generation_tokens",
                         "Histogram of maximum number of requested generation tokens.", tok)
        h_n = hist("vllm:request_params_n", "Histogram of the n request parameter.", PARAMS_N)
        h_max_tokens = hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tok)
        h_ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT)
        h_itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL)
        h_tpot = hist("vllm:request_time_per_output_token_seconds",
                      "Histogram of time_per_output_token_seconds per request.", ITL)
        h_e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                     REQUEST_LATENCY)
        h_queue = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                       REQUEST_LATENCY)
        h_inf = hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
                     REQUEST_LATENCY)
        h_prefill = hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
                         REQUEST_LATENCY)
        h_decode = hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
                        REQUEST_LATENCY)
        h_preempt = hist("vllm:request_num_preemptions", "Histogram of the number of times a request was preempted.",
                         PREEMPTIONS)
        h_kv = hist("vllm:request_prefill_kv_computed_tokens",
                    "Histogram of new KV tokens computed during prefill (excluding cached tokens).", tok)

        for r in every:  # observed when a request arrives or produces its first token (running ones included)
            h_n.observe(1)
            h_max_gen.observe(r["max_gen"])
            queue = rng.expovariate(1 / 0.004)
            r["prefill_s"] = 0.009 + (r["prompt"] - r["cached"]) / 24_000 * (1 + rng.random() * 0.3)
            r["tpot"] = max(0.008, rng.gauss(0.0128, 0.0011))
            r["queue"] = queue
            h_ttft.observe(queue + r["prefill_s"] + 0.002)
            for _ in range(r["out"] - 1):  # a prefill sharing the step now and then stretches one gap
                h_itl.observe(r["tpot"] * (1.0 + (rng.random() * 2.5 if rng.random() < 0.06 else 0.0)))
        for r in finished:  # observed when a request finishes
            decode_s = (r["out"] - 1) * r["tpot"]
            h_e2e.observe(r["queue"] + r["prefill_s"] + decode_s + 0.003)
            h_queue.observe(r["queue"])
            h_prefill.observe(r["prefill_s"])
            h_decode.observe(decode_s)
            h_inf.observe(r["prefill_s"] + decode_s)
            h_preempt.observe(0)
            h_kv.observe(r["prompt"] - r["cached"])
            h_prompt.observe(r["prompt"])
            h_gen.observe(r["out"])
            h_tpot.observe(r["tpot"] if r["out"] > 1 else 0.0)
            if r["max_tokens"]:
                h_max_tokens.observe(r["max_tokens"])
        # engine steps: ~33 decoding sequences on average over the server's life, prefills in chunks of 8,192
        steps = round(generated / 33.0)
        prefill = [0] * steps
        for r in every:
            left, at = r["prompt"] - r["cached"], rng.randrange(steps)
            while left > 0:
                chunk = min(left, 8192 - prefill[at] if prefill[at] < 8192 else 8192)
                prefill[at] += chunk
                left -= chunk
                at = (at + 1) % steps
        decodes = generated
        for s in range(steps):
            b = max(0, min(decodes, round(rng.gauss(33.0, 9.0)))) if s < steps - 1 else decodes
            decodes -= b
            h_iter.observe(b + prefill[s])

    info_labels = {
        "block_size": "16", "user_specified_block_size": "False", "kv_cache_layout": "NHD",
        "prefix_match_unit": "None", "gpu_memory_utilization": "0.92", "cache_dtype": "auto",
        "is_attention_free": "False", "num_gpu_blocks_override": "None", "sliding_window": "None",
        "enable_prefix_caching": "True", "prefix_caching_hash_algo": "sha256", "prefix_cache_retention_interval": "0",
        "kv_cache_dtype_skip_layers": "[]", "mamba_page_size_padded": "None", "skip_page_size_padded": "None",
        "mamba_block_size": "None", "mamba_cache_dtype": "auto", "mamba_ssm_cache_dtype": "auto",
        "mamba_cache_mode": "none", "enable_mamba_shared_prefix_checkpoint": "False", "replayssm_buffer_len": "16",
        "use_replayssm": "False", "use_kda_recoverssm": "False", "num_gpu_blocks": str(NUM_GPU_BLOCKS),
        "num_cpu_blocks": "None", "simple_cpu_offload_num_blocks": "None", "effective_attention_block_size": "16",
        "kv_cache_size_tokens": str(NUM_GPU_BLOCKS * BLOCK_SIZE),
        "kv_cache_max_concurrency": f"{NUM_GPU_BLOCKS * BLOCK_SIZE / MAX_MODEL_LEN:.2f}",
        "hash_block_size": "16", "cache_hit_alignment_tokens": "16", "kv_sharing_fast_prefill": "False",
        "swa_bounded_replay": "True", "kv_cache_memory_bytes": "None", "kv_offloading_size": "None",
        "kv_offloading_backend": "native", "_block_size_resolved": "True", "engine": "0",
    }
    Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", list(info_labels), registry=reg,
          multiprocess_mode="mostrecent").labels(**info_labels).set(1)

    # prometheus-fastapi-instrumentator's default metrics (vllm/entrypoints/serve/instrumentator/metrics.py)
    with mock.patch("prometheus_client.metrics.time.time", return_value=T0 + 3.2):
        http = Counter("http_requests_total", "Total number of requests by method, status and handler.",
                       ["handler", "method", "status"], registry=reg)
        http.labels("/v1/chat/completions", "POST", "2xx").inc(FINISHED + RUNNING)
        http.labels("/health", "GET", "2xx").inc(2_233)
        size = Summary("http_request_size_bytes", "Content length of incoming requests by handler. Only value of "
                       "header is respected. Otherwise ignored. No percentile calculated. ", ["handler"], registry=reg)
        for r in every:  # a chat request's JSON body: ~4.3 bytes per prompt token plus the envelope
            size.labels("/v1/chat/completions").observe(round(r["prompt"] * 4.3) + 180)
        highr = Histogram("http_request_duration_highr_seconds", "Latency with many buckets but no API specific "
                          "labels. Made for more accurate percentile calculations. ",
                          buckets=(0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5,
                                   7.5, 10, 30, 60), registry=reg)
        for r in finished:
            highr.observe(r["queue"] + r["prefill_s"] + (r["out"] - 1) * r["tpot"] + 0.004)
    text = generate_latest(reg).decode()
    if args.check:
        same = OUT.read_text() == text
        print(f"{OUT}: {'up to date' if same else 'differs'}")
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
