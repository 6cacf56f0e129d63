"""Issue 43, "Bad input": ``tune --metrics`` scrapes that are no one server's histograms (a _sum of 0 or 1e308,
a series or a bucket edge given twice) and a URL whose answer stops short of its Content-Length. Each is one
``Error:`` line naming what is wrong, exit 1."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest

from helpers import vllm_scrape
from test_hostile_inputs import run

BASE = vllm_scrape()
SUM = 'vllm:request_prompt_tokens_sum{model_name="m"} 3000.0\n'
EDGE = 'vllm:request_prompt_tokens_bucket{le="1000.0",model_name="m"} 10.0\n'
PROMPT_SERIES = "".join(BASE.splitlines(True)[1:6])
RUNNING = 'vllm:num_requests_running{model_name="m"} 8.0\n'

CASES = [
    ("sum0", BASE.replace(SUM, SUM.replace("3000.0", "0")), "_sum is 0 over 10 requests, a mean of 0 tokens"),
    ("sum_huge", BASE.replace(SUM, SUM.replace("3000.0", "1e308")), "_sum is 1e+308 over 10 requests"),
    ("dup_bucket", BASE.replace(EDGE, EDGE + EDGE), "the bucket le='1000.0' occurs twice (a duplicate series"),
    ("dup_scrape", BASE.replace(PROMPT_SERIES, PROMPT_SERIES * 2), "occurs twice (a duplicate series"),
    ("dup_sum", BASE.replace(SUM, SUM * 2), "vllm:request_prompt_tokens_sum{model_name='m'} occurs twice"),
    ("dup_gauge", BASE + RUNNING, "vllm:num_requests_running{model_name='m'} occurs twice"),
    ("dup_edge", BASE.replace(EDGE, EDGE + EDGE.replace('"1000.0"', '"1e3"')),
     "le='1000.0' and le='1e3' are one bucket edge (1000) given twice"),
]


def _tune(source: str):
    return run(["tune", "--heuristics", "none", "--engine", "vllm", "--metrics", source])


def test_the_base_scrape_is_a_workload(tmp_path: Path) -> None:
    (tmp_path / "m.txt").write_text(BASE)
    assert _tune(str(tmp_path / "m.txt")).exit_code == 0


@pytest.mark.parametrize("name, text, message", CASES, ids=[c[0] for c in CASES])
def test_a_scrape_that_is_no_servers_histograms_is_one_error(tmp_path: Path, name: str, text: str,
                                                            message: str) -> None:
    path = tmp_path / f"{name}.txt"
    path.write_text(text)
    r = _tune(str(path))
    assert r.exit_code == 1 and message in r.stderr and str(path) in r.stderr, r.stderr


def test_an_answer_short_of_its_content_length_is_an_error(monkeypatch) -> None:
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    body = BASE.encode()

    class Short(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body) + 1000))  # then closes after the body
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Short)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        r = _tune(f"http://127.0.0.1:{srv.server_address[1]}/metrics")
    finally:
        srv.shutdown()
        srv.server_close()
    assert r.exit_code == 1, r.stdout[-300:]
    assert f"announced {len(body) + 1000:,} bytes (Content-Length) and sent {len(body):,}" in r.stderr, r.stderr
