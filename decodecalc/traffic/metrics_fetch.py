"""Reading a vLLM server's Prometheus text: a file, or a URL fetched within a bounded time and size, decoded as
UTF-8 (decodecalc.traffic.metrics turns it into a workload). Every failure is one ConfigError naming the source."""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import cast

from decodecalc.errors import ConfigError
from decodecalc.textfiles import decode_utf8
from decodecalc.limits import MAX_METRICS_BYTES

#: a URL's whole fetch (connection, answer, body): 9 s, so that the command's error comes within 10 s of its start
METRICS_TIMEOUT_S = 9.0


def one_line(text: object, limit: int = 160) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def is_url(source: str) -> bool:
    return source.strip().lower().startswith(("http://", "https://"))


def read_metrics_text(source: str, *, timeout_s: float = METRICS_TIMEOUT_S) -> tuple[str, str]:
    """(the text, where it came from) of a ``/metrics`` scrape: a file path, or an ``http://`` /
    ``https://`` URL fetched within ``timeout_s`` seconds in all (connection, answer and body).
    At most :data:`decodecalc.limits.MAX_METRICS_BYTES` are read; the text must be UTF-8."""
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(f"--metrics: expected a file path or an http(s):// URL, got {source!r}")
    if not (isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool) and 0 < timeout_s <= 600):
        raise ConfigError(f"--metrics: the timeout must be between 0 and 600 s, got {timeout_s!r}")
    if is_url(source):
        url = source.strip()
        data = _fetch(url, float(timeout_s))
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        return _decode(data, url), f"{url} (scraped {stamp})"
    if "://" in source:
        raise ConfigError(f"--metrics {source}: only http:// and https:// URLs are fetched; give a file path otherwise")
    return _decode(_read_file(Path(source).expanduser(), source), source), source


def _read_file(path: Path, shown: str) -> bytes:
    if not path.exists():
        raise ConfigError(f"{shown}: no such file (save a scrape with: curl http://HOST:8000/metrics > m.txt)")
    if not path.is_file():
        raise ConfigError(f"{shown}: not a file")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_METRICS_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{shown}: cannot be read ({one_line(e.strerror or e)})") from None
    if len(data) > MAX_METRICS_BYTES:
        raise ConfigError(f"{shown}: over the supported {MAX_METRICS_BYTES:,} bytes for a /metrics scrape "
                          "(a vLLM server's is well under 1 MB)")
    return data


def _decode(data: bytes, where: str) -> str:
    """UTF-8 text, or a ConfigError: Prometheus text format is UTF-8 (a NUL byte means a binary file;
    1f 8b starts a gzip stream, what a scrape saved with ``Accept-Encoding: gzip`` holds)."""
    if data[:2] == b"\x1f\x8b":
        raise ConfigError(f"{where}: gzip-compressed, not Prometheus text (gunzip it, or scrape with plain curl)")
    return decode_utf8(data, where, "a /metrics scrape (Prometheus text is UTF-8; scrape with: curl http://HOST:8000/metrics)")


def _fetch(url: str, timeout_s: float) -> bytes:
    """The body of ``url``, fetched on a worker thread so that the whole fetch (DNS included, which a
    socket timeout does not bound) ends within ``timeout_s``; a fetch still running then is abandoned
    (the thread is a daemon and its socket times out on its own)."""
    box: dict[str, object] = {}
    deadline = time.monotonic() + timeout_s

    def work() -> None:
        try:
            box["data"] = _get(url, timeout_s, deadline)
        except BaseException as e:  # handed to the caller's thread, which turns it into a ConfigError
            box["error"] = e

    worker = threading.Thread(target=work, name="decodecalc-metrics-fetch", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise ConfigError(f"{url}: no answer within {timeout_s:g} s (is the vLLM server up, and is this its "
                          "/metrics endpoint?)")
    if "error" in box:
        raise _url_error(url, box["error"], timeout_s)
    return cast(bytes, box["data"])


class _TooBig(Exception):
    pass


class _CutShort(Exception):
    """The server announced more bytes (Content-Length) than it sent before closing the connection."""

    def __init__(self, announced: int, got: int) -> None:
        super().__init__(announced, got)
        self.announced, self.got = announced, got


def _get(url: str, timeout_s: float, deadline: float) -> bytes:
    req = urllib.request.Request(url, headers={"Accept": "text/plain; version=0.0.4", "User-Agent": "decodecalc"})
    chunks: list[bytes] = []
    size = 0
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 (http/https only, checked above)
        while True:
            if time.monotonic() > deadline:  # a server that trickles bytes
                raise TimeoutError("the body did not arrive in time")
            chunk = resp.read(1 << 16)
            if not chunk:
                announced = resp.headers.get("Content-Length")
                if announced is not None and announced.strip().isdigit() and int(announced) != size:
                    # http.client's read(n) ends quietly where the connection closed: a part of a scrape is no scrape
                    raise _CutShort(int(announced), size)
                return b"".join(chunks)
            size += len(chunk)
            if size > MAX_METRICS_BYTES:
                raise _TooBig()
            chunks.append(chunk)


def _url_error(url: str, e: object, timeout_s: float) -> ConfigError:
    if isinstance(e, _TooBig):
        return ConfigError(f"{url}: the answer is over the supported {MAX_METRICS_BYTES:,} bytes for a /metrics "
                           "scrape (a vLLM server's is well under 1 MB)")
    if isinstance(e, _CutShort):
        return ConfigError(f"{url}: the answer was cut short: the server announced {e.announced:,} bytes "
                           f"(Content-Length) and sent {e.got:,}; scrape it again")
    if isinstance(e, urllib.error.HTTPError):
        return ConfigError(f"{url}: HTTP {e.code} {one_line(e.reason)} (is this a vLLM server's /metrics endpoint?)")
    reason = e.reason if isinstance(e, urllib.error.URLError) else e
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return ConfigError(f"{url}: no answer within {timeout_s:g} s (is the vLLM server up, and is this its "
                           "/metrics endpoint?)")
    if isinstance(reason, ConnectionRefusedError):
        return ConfigError(f"{url}: connection refused (no server listening there; vLLM serves /metrics on its "
                           "API port, 8000 by default)")
    if isinstance(reason, socket.gaierror):
        return ConfigError(f"{url}: unknown host ({one_line(reason.strerror or reason)})")
    if isinstance(reason, (OSError, http.client.HTTPException, ValueError)):
        return ConfigError(f"{url}: cannot fetch ({one_line(reason) or type(reason).__name__})")
    return ConfigError(f"{url}: cannot fetch ({type(reason).__name__}: {one_line(reason)})")


# --------------------------------------------------------------------------------------------
# parsing
