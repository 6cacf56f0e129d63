"""Workloads from a vLLM server's Prometheus metrics (decodecalc/traffic/metrics.py).

The scrapes here are written by prometheus_client itself (the library vLLM exposes its metrics
with), with vLLM 0.33.0's metric names and label names, so the parser sees what a server sends.
"""

from __future__ import annotations

import http.server
import math
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from decodecalc.errors import ConfigError
from decodecalc.traffic import metrics as M
from decodecalc.traffic import metrics_lengths as L
from decodecalc.traffic.metrics import metrics_steps, metrics_workload, read_metrics_text
from decodecalc.traffic.metrics_lengths import Bucket, TokenHistogram, length_distribution, next_1_2_5

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "metrics" / "vllm-metrics.txt"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)  # vLLM's request_tokens buckets for max_model_len 2048


def one_line_error(fn, *args, **kw) -> str:
    with pytest.raises(ConfigError) as e:
        fn(*args, **kw)
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


def scrape(series, *, buckets=TOKENS, running=True, lifetime=None, spec=None, cache_blocks=None) -> str:
    """A /metrics text: ``series`` is [(model_name, engine, running, prompt lengths, output lengths)]."""
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    gauge = Gauge(M.RUNNING, "Number of requests in model execution batches.", labels, registry=reg) if running else None
    waiting = Gauge(M.WAITING, "Number of requests waiting to be processed.", labels, registry=reg)
    hp = Histogram(M.PROMPT, "Number of prefill tokens processed.", labels, buckets=buckets, registry=reg)
    ho = Histogram(M.OUTPUT, "Number of generation tokens processed.", labels, buckets=buckets, registry=reg)
    for model, engine, run, prompts, outputs in series:
        if gauge is not None:
            gauge.labels(model, engine).set(run)
        waiting.labels(model, engine).set(0)
        for p in prompts:
            hp.labels(model, engine).observe(p)
        for o in outputs:
            ho.labels(model, engine).observe(o)
    if lifetime is not None:  # (generated tokens, engine steps), on the first series' labels
        model, engine = series[0][:2]
        Counter(M.GENERATION_TOKENS, "Number of generation tokens processed.", labels,
                registry=reg).labels(model, engine).inc(lifetime[0])
        it = Histogram(M.ITERATION_TOKENS, "Histogram of number of tokens per engine_step.", labels,
                       buckets=(1, 8, 16, 32, 64), registry=reg).labels(model, engine)
        for _ in range(lifetime[1]):
            it.observe(lifetime[0] / lifetime[1])
    if spec is not None:  # (drafts, draft tokens, accepted tokens)
        model, engine = series[0][:2]
        for name, v in zip((M.SPEC_DRAFTS, M.SPEC_DRAFT_TOKENS, M.SPEC_ACCEPTED), spec):
            Counter(name, "spec", labels, registry=reg).labels(model, engine).inc(v)
    if cache_blocks is not None:
        Gauge(M.CACHE_INFO, "Information of the LLMEngine CacheConfig", ["block_size", "num_gpu_blocks", "engine"],
              registry=reg).labels("16", str(cache_blocks), "0").set(1)
    return generate_latest(reg).decode()


PROMPTS = [3, 7, 40, 90, 150, 300, 300, 800, 1200, 1900]
OUTPUTS = [1, 4, 10, 20, 60, 60, 120, 250, 400, 900]


# --------------------------------------------------------------------------------------------
# the example scrape


@pytest.fixture(scope="module")
def example():
    text, origin = read_metrics_text(str(EXAMPLE))
    return text, metrics_workload(text, origin=origin)


def _sample(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)$", text, re.M)
    assert m, name
    return float(m.group(1))


def test_example_concurrency_counts_and_means(example):
    text, mw = example
    assert mw.concurrency == 37 and mw.running == 37 and mw.waiting == 0
    assert mw.requests == 48_213 and mw.engines == 1 and mw.model_names == (MODEL,)
    assert mw.prompt_mean == _sample(text, "vllm:request_prompt_tokens_sum") / 48_213
    assert mw.output_mean == _sample(text, "vllm:request_generation_tokens_sum") / 48_213
    assert 950 < mw.prompt_mean < 1050 and 230 < mw.output_mean < 270  # the scenario: a chat server
    # 33 sequences per engine step over the server's life; 55,800 blocks of 16 tokens
    assert mw.lifetime_concurrency == pytest.approx(33.0, abs=0.05)
    assert mw.kv_cache_tokens == 55_800 * 16
    assert mw.num_speculative_tokens == 0 and mw.draft_acceptance_rate is None
    assert any("one instant" in n for n in mw.notes) and any("since the server started" in n for n in mw.notes)


def test_example_buckets_are_vllms_defaults(example):
    _, mw = example
    # build_1_2_5_buckets(32768) in vllm/v1/metrics/buckets.py, then the +Inf bucket up to the next 1-2-5 value
    edges = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000]
    assert [hi for hi, _ in mw.prompt.cdf()] == edges + [50000]
    assert mw.prompt.cdf()[-1][1] == pytest.approx(1.0)
    assert [hi for hi, _ in mw.output.cdf()] == edges  # no reply is longer than 20,000 tokens: no tail bucket
    assert mw.output.tail_hi is None and mw.prompt.tail_hi == 50000


def test_sampled_means_match_sum_over_count(example):
    _, mw = example
    draws = mw.draw_requests(40_000, 11)
    assert statistics.mean(p for p, _ in draws) == pytest.approx(mw.prompt_mean, rel=0.02)
    assert statistics.mean(o for _, o in draws) == pytest.approx(mw.output_mean, rel=0.02)
    assert mw.prompt.model_mean == pytest.approx(mw.prompt_mean, rel=1e-6)
    assert mw.output.model_mean == pytest.approx(mw.output_mean, rel=1e-6)


def test_log_uniform_buckets_would_overstate_the_means(example):
    """Why the within-bucket exponent is fitted: log-uniform (beta = 1) puts too much of each upper
    bucket near its top for a length distribution that falls there."""
    _, mw = example
    for dist in (mw.prompt, mw.output):
        assert L._model_mean(dist.buckets, 1.0, dist.count) > 1.04 * dist.mean
        assert dist.beta > 1.5


def test_draws_are_deterministic_and_in_range(example):
    _, mw = example
    a, b = mw.draw_requests(2_000, 7), mw.draw_requests(2_000, 7)
    assert a == b and a != mw.draw_requests(2_000, 8)
    assert mw.draw_requests(500, 7) == a[:500]
    assert all(1 <= p <= 50_000 and 1 <= o <= 20_000 for p, o in a)
    assert mw.draw_requests(0, 1) == []
    assert "n must be" in one_line_error(mw.draw_requests, -1, 1)


def test_example_steps(example):
    _, mw = example
    trace = metrics_steps(mw, steps=120)
    assert trace.num_steps == 120 and trace == metrics_steps(mw, steps=120)
    assert max(s.batch for s in trace.steps) == 37
    assert trace.source.startswith("vLLM metrics") and str(EXAMPLE) in trace.source
    assert set(mw.notes) <= set(trace.notes)
    smaller = metrics_steps(mw, steps=50, concurrency=8)
    assert max(s.batch for s in smaller.steps) == 8
    assert "over the supported 256" in one_line_error(metrics_steps, mw, concurrency=300)


def test_module_import_does_not_load_prometheus_client():
    code = ("import sys, decodecalc.traffic.metrics\n"
            "sys.exit('prometheus_client' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# --------------------------------------------------------------------------------------------
# the piecewise CDF, by hand


def hist(edges, cumulative, count, total, name="h"):
    return TokenHistogram(name=name, edges=tuple(edges), cumulative=tuple(cumulative), count=count, total=total,
                          series=1)


def test_cdf_of_a_small_histogram_by_hand():
    # observations 2, 4, 5, 8: le=1: 0, le=2: 1, le=5: 3, le=10: 4, +Inf: 4; sum 19
    dist, notes = length_distribution(hist([1, 2, 5, 10], [0, 1, 3, 4], 4, 19), "t")
    assert [(b.lo, b.hi, b.count) for b in dist.buckets] == [(1, 1, 0), (2, 2, 1), (3, 5, 2), (6, 10, 1)]
    assert dist.cdf() == ((1, 0.0), (2, 0.25), (5, 0.75), (10, 1.0))
    assert dist.tail_hi is None and dist.mean == 4.75
    # mean 4.75 needs 2 m(3..5) + m(6..10) = 17, above the uniform draw's 2 * 4 + 8 = 16: a rising density
    assert dist.model_mean == pytest.approx(4.75, rel=1e-9) and dist.beta < 0
    assert dist.quantile(0.0) == 2 and dist.quantile(0.2) == 2  # the [1, 1] bucket is empty
    assert dist.quantile(0.25) == 3  # the bottom of 3..5
    assert dist.quantile(0.7499) == 5 and dist.quantile(0.9999) == 10
    assert [dist.quantile(u / 100) for u in range(100)] == sorted(dist.quantile(u / 100) for u in range(100))
    assert any("x^-" in n for n in notes)


def test_bucket_draw_and_mean_by_hand():
    b = Bucket(lo=3, hi=5, count=1)  # draws over [2.5, 5.5], rounded
    assert b.mean(0.0) == pytest.approx(4.0)  # uniform
    assert b.mean(1.0) == pytest.approx(3.0 / math.log(2.2))  # log-uniform: (b - a) / ln(b / a)
    assert b.mean(2.0) == pytest.approx(math.log(2.2) / (1 / 2.5 - 1 / 5.5))  # density x^-2
    assert b.at(0.5, 1.0) == 4  # 2.5 * 2.2 ** 0.5 = 3.71, rounds to 4
    assert b.at(0.5, 0.0) == 4 and b.at(0.0, 1.0) == 3 and b.at(1.0, 1.0) == 5
    wider = Bucket(lo=11, hi=20, count=1)  # [10.5, 20.5]
    assert wider.at(0.45, 1.0) == 14 and wider.at(0.45, 0.0) == 15  # 10.5 * (20.5 / 10.5) ** 0.45 = 14.19; 15.0
    assert b.at(0.5, 8.0) == 3 and b.at(0.5, -4.0) == 5  # falling steeply: mass at the bottom; rising: the top
    wide = Bucket(lo=1, hi=1_000_000, count=1)
    assert wide.at(1.0, 8.0) == 1_000_000 and wide.at(0.0, 8.0) == 1  # 2e6 ** -7 underflows: no math error
    assert Bucket(lo=7, hi=7, count=3).mean(1.0) == 7 and Bucket(lo=7, hi=7, count=3).at(0.3, 1.0) == 7


def test_the_inf_bucket_runs_to_the_next_1_2_5_value_or_max_model_len():
    # three requests of 5 tokens at most, one above 10 (sum 30: it has 15 tokens)
    dist, notes = length_distribution(hist([10], [3], 4, 30), "t")
    assert dist.tail_hi == 20 and dist.buckets[-1] == Bucket(lo=11, hi=20, count=1)
    assert "above the last bucket edge 10" in notes[0]
    capped, _ = length_distribution(hist([10], [3], 4, 30), "t", max_model_len=16)
    assert capped.tail_hi == 16 and "max_model_len" in _[0]
    assert [next_1_2_5(x) for x in (0.5, 1, 2, 5, 10, 20000, 32768, 99999)] == [1, 2, 5, 10, 20, 50000, 50000,
                                                                               100000]


def test_a_mean_no_shape_can_reach_is_noted():
    # all four requests in 6..10, but a mean of 20: impossible within the buckets (the scrape is inconsistent)
    dist, notes = length_distribution(hist([5, 10], [0, 4], 4, 80), "t")
    assert dist.beta == L.BETA_MIN and any("no within-bucket shape matches it" in n for n in notes)


def test_no_observations():
    assert "finished no request yet" in one_line_error(length_distribution, hist([10], [0], 0, 0), "t")


# --------------------------------------------------------------------------------------------
# label sets: several models, several engines


def test_several_models_are_pooled_or_picked():
    text = scrape([("a", "0", 10, PROMPTS, OUTPUTS), ("b", "0", 30, PROMPTS[:4], OUTPUTS[:4])])
    mw = metrics_workload(text, origin="t")
    assert mw.model_names == ("a", "b") and mw.requests == 14 and mw.concurrency == 20  # mean per engine
    assert mw.prompt_mean == pytest.approx((sum(PROMPTS) + sum(PROMPTS[:4])) / 14)
    assert any("2 models pooled" in n for n in mw.notes)
    only_b = metrics_workload(text, origin="t", model_name="b")
    assert only_b.model_names == ("b",) and only_b.requests == 4 and only_b.concurrency == 30
    assert only_b.prompt_mean == pytest.approx(sum(PROMPTS[:4]) / 4)
    msg = one_line_error(metrics_workload, text, origin="t", model_name="c")
    assert "no model_name 'c'" in msg and "'a', 'b'" in msg


def test_data_parallel_engines_concurrency_is_per_engine():
    text = scrape([(MODEL, "0", 30, PROMPTS, OUTPUTS), (MODEL, "1", 41, PROMPTS, OUTPUTS)])
    mw = metrics_workload(text, origin="t")
    assert mw.engines == 2 and mw.running == 71 and mw.concurrency == 36  # 35.5 rounds half up
    assert mw.requests == 20 and any("mean of 2 engines: 30, 41" in n for n in mw.notes)


def test_concatenated_scrapes_with_different_buckets_pool_on_shared_edges():
    a = scrape([("a", "0", 8, PROMPTS, OUTPUTS)], buckets=TOKENS)
    b = scrape([("b", "0", 8, PROMPTS, OUTPUTS)], buckets=(10, 100, 1000, 5000))
    mw = metrics_workload(a + b, origin="t")
    assert [hi for hi, _ in mw.prompt.cdf()] == [10, 100, 1000, 2000]  # 1,000's +Inf: up to 2,000
    assert mw.requests == 20 and any("different bucket edges" in n for n in mw.notes)


# --------------------------------------------------------------------------------------------
# concurrency fallbacks and the optional metrics


def test_running_zero_falls_back_to_the_lifetime_mean():
    text = scrape([(MODEL, "0", 0, PROMPTS, OUTPUTS)], lifetime=(12_000, 500))
    mw = metrics_workload(text, origin="t")
    assert mw.concurrency == 24 and mw.lifetime_concurrency == 24
    assert any("is 0 at the scrape" in n and "lifetime mean" in n for n in mw.notes)
    absent = metrics_workload(scrape([(MODEL, "0", 0, PROMPTS, OUTPUTS)], running=False, lifetime=(100, 40)),
                              origin="t")
    assert absent.concurrency == 3 and absent.running is None  # 2.5 rounds half up
    assert any("is absent at the scrape" in n for n in absent.notes)


def test_no_concurrency_at_all_is_an_error_unless_given():
    text = scrape([(MODEL, "0", 0, PROMPTS, OUTPUTS)])
    msg = one_line_error(metrics_workload, text, origin="t")
    assert "no concurrency" in msg and "vllm:num_requests_running is 0" in msg and "--concurrency" in msg
    mw = metrics_workload(text, origin="t", concurrency=12)
    assert mw.concurrency == 12 and any("given" in n for n in mw.notes)


def test_speculative_decoding_counters():
    # 1,000 drafts of 3 tokens, 1,800 accepted: k = 3, acceptance 0.6; 5,000 tokens over 1,000 steps, of which
    # 1,800 accepted drafts: 3.2 sequences per step
    text = scrape([(MODEL, "0", 0, PROMPTS, OUTPUTS)], lifetime=(5_000, 1_000), spec=(1_000, 3_000, 1_800))
    mw = metrics_workload(text, origin="t")
    assert mw.num_speculative_tokens == 3 and mw.draft_acceptance_rate == pytest.approx(0.6)
    assert mw.lifetime_concurrency == pytest.approx(3.2) and mw.concurrency == 3
    assert any("--num-speculative-tokens" in n for n in mw.notes)


def test_cache_config_info():
    mw = metrics_workload(scrape([(MODEL, "0", 4, PROMPTS, OUTPUTS)], cache_blocks=100), origin="t")
    assert mw.kv_cache_tokens == 1600 and any("KV cache: 1,600 tokens" in n for n in mw.notes)
    unresolved = metrics_workload(scrape([(MODEL, "0", 4, PROMPTS, OUTPUTS)], cache_blocks="None"), origin="t")
    assert unresolved.kv_cache_tokens is None


# --------------------------------------------------------------------------------------------
# what is not a vLLM scrape


NODE_EXPORTER = """# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.
# TYPE node_cpu_seconds_total counter
node_cpu_seconds_total{cpu="0",mode="idle"} 1.234e+06
# HELP node_load1 1m load average.
# TYPE node_load1 gauge
node_load1 0.42
"""


def test_missing_metrics_are_named():
    text = scrape([(MODEL, "0", 4, PROMPTS, OUTPUTS)])
    no_output = "\n".join(line for line in text.splitlines() if "request_generation_tokens" not in line)
    msg = one_line_error(metrics_workload, no_output, origin="m.txt")
    assert msg.startswith("m.txt: no vllm:request_generation_tokens histogram") and "other vllm: metrics" in msg
    msg = one_line_error(metrics_workload, NODE_EXPORTER, origin="m.txt")
    assert "no vllm:request_prompt_tokens histogram" in msg and "no vllm: metrics at all" in msg
    assert "node_cpu_seconds" in msg and "vLLM server" in msg


@pytest.mark.parametrize("text, expect", [
    ("hello world\n", "not Prometheus text format"),
    ("<html><body><h1>Welcome to nginx!</h1></body></html>\n", "not Prometheus text format"),
    ('vllm:num_requests_running{engine="0",model_name="m"} many\n', "not Prometheus text format"),
    ("", "no metrics in it"),
    ("# just a comment\n\n", "no metrics in it"),
])
def test_garbage_text(text, expect):
    assert expect in one_line_error(metrics_workload, text, origin="m.txt")


def test_a_metric_of_the_wrong_type():
    text = scrape([(MODEL, "0", 4, PROMPTS, OUTPUTS)]).replace("# TYPE vllm:num_requests_running gauge",
                                                               "# TYPE vllm:num_requests_running counter")
    assert "vllm:num_requests_running is a counter here; vLLM exposes a gauge" in one_line_error(
        metrics_workload, text, origin="t")


def _edit(text: str, pattern: str, repl: str) -> str:
    out, n = re.subn(pattern, repl, text, count=1, flags=re.M)
    assert n == 1, pattern
    return out


@pytest.mark.parametrize("pattern, repl, expect", [
    (r'^(vllm:request_prompt_tokens_bucket\{[^}]*le="100\.0"[^}]*\}) \S+$', r"\1 0.0", "Prometheus buckets are cumulative"),
    (r'^vllm:request_prompt_tokens_bucket\{[^}]*le="\+Inf"[^}]*\} \S+\n', "", 'no le="+Inf" bucket'),
    (r"^vllm:request_prompt_tokens_sum\{.*\n", "", "no vllm:request_prompt_tokens_sum sample"),
    (r"^(vllm:request_prompt_tokens_count\{[^}]*\}) \S+$", r"\1 99.0", "_count is 99 but the +Inf bucket holds 10"),
    (r"^(vllm:request_prompt_tokens_sum\{[^}]*\}) \S+$", r"\1 NaN", "_sum is nan"),
    (r"^(vllm:num_requests_running\{[^}]*\}) \S+$", r"\1 -3.0", "has the value -3"),
])
def test_inconsistent_histograms(pattern, repl, expect):
    text = _edit(scrape([(MODEL, "0", 4, PROMPTS, OUTPUTS)]), pattern, repl)
    assert expect in one_line_error(metrics_workload, text, origin="t")


# --------------------------------------------------------------------------------------------
# reading files


def test_file_errors(tmp_path, monkeypatch):
    binary = tmp_path / "m.bin"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" * 10)
    assert "a binary file" in one_line_error(read_metrics_text, str(binary))
    latin = tmp_path / "latin.txt"
    latin.write_bytes("vllm:x{model_name=\"caf\xe9\"} 1\n".encode("latin-1"))
    assert "not UTF-8 text" in one_line_error(read_metrics_text, str(latin))
    gz = tmp_path / "m.txt.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00" + b"\x01" * 20)
    assert "gzip-compressed" in one_line_error(read_metrics_text, str(gz))
    assert "no such file" in one_line_error(read_metrics_text, str(tmp_path / "absent.txt"))
    assert "not a file" in one_line_error(read_metrics_text, str(tmp_path))
    assert "only http:// and https://" in one_line_error(read_metrics_text, "ftp://host/metrics")
    big = tmp_path / "big.txt"
    big.write_text("x 1\n" * 100)
    from decodecalc.traffic import metrics_fetch

    monkeypatch.setattr(metrics_fetch, "MAX_METRICS_BYTES", 256)
    assert "over the supported 256 bytes" in one_line_error(read_metrics_text, str(big))


# --------------------------------------------------------------------------------------------
# URLs


@pytest.fixture
def no_proxy(monkeypatch):
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def server(no_proxy):
    body = EXAMPLE.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path != "/metrics":
                self.send_error(404, "Not Found")
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_url_serves_the_example(server):
    text, origin = read_metrics_text(f"{server}/metrics", timeout_s=5)
    assert text == EXAMPLE.read_text()
    assert origin.startswith(f"{server}/metrics (scraped ")
    assert metrics_workload(text, origin=origin).concurrency == 37


def test_url_not_found(server):
    msg = one_line_error(read_metrics_text, f"{server}/nope", timeout_s=5)
    assert "HTTP 404" in msg and "/metrics endpoint" in msg


def test_url_that_accepts_and_never_answers(no_proxy):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    held: list[socket.socket] = []

    def accept_and_hold():
        try:
            while True:
                held.append(listener.accept()[0])
        except OSError:  # the listener closed at the end of the test
            pass

    threading.Thread(target=accept_and_hold, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
    t0 = time.monotonic()
    try:
        msg = one_line_error(read_metrics_text, url, timeout_s=1.0)
    finally:
        listener.close()
        for conn in held:
            conn.close()
    assert time.monotonic() - t0 < 3.0
    assert msg == f"{url}: no answer within 1 s (is the vLLM server up, and is this its /metrics endpoint?)"


def test_url_refused(no_proxy):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    t0 = time.monotonic()
    msg = one_line_error(read_metrics_text, f"http://127.0.0.1:{port}/metrics", timeout_s=5)
    assert time.monotonic() - t0 < 3.0
    assert "connection refused" in msg


def test_bad_arguments():
    assert "file path or an http(s):// URL" in one_line_error(read_metrics_text, "  ")
    assert "timeout" in one_line_error(read_metrics_text, str(EXAMPLE), timeout_s=0)
    assert "max_model_len" in one_line_error(metrics_workload, "x 1\n", origin="t", max_model_len=0)


def test_docs_python_block_and_notes_are_current(capsys):
    """docs/metrics.md: its Python block runs, prints what its comments say, and the notes it shows
    are today's."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "metrics.md").read_text()
    code = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    exec(compile(code, "docs/metrics.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "37 1004 253 48213"
    assert printed[1] == "[(201, 435), (1236, 74), (580, 130), (876, 333)]"
    shown = re.search(r"The notes for the example scrape:\n\n```text\n(.*?)```", doc, re.S).group(1)
    assert shown.splitlines() == printed[2:]
