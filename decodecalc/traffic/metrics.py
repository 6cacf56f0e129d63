"""A decode workload from a running vLLM server's Prometheus metrics (its ``/metrics`` text).

``decodecalc tune --metrics FILE|URL`` reads one scrape (``curl http://host:8000/metrics > m.txt``,
or the URL itself) and builds a workload like a preset's: requests drawn from the server's prompt-
and output-length histograms, run through the continuous-batching model of
:mod:`decodecalc.traffic.requests` at the server's concurrency. docs/metrics.md says how, and what
is assumed; every assumption also lands in :attr:`MetricsWorkload.notes`.

What is read (vLLM 0.33.0, ``vllm/v1/metrics/loggers.py``; names, types and buckets cited in
examples/metrics/README.md), every metric labelled ``model_name`` and ``engine``:

* ``vllm:request_prompt_tokens``, ``vllm:request_generation_tokens`` (histograms, one observation
  per finished request, buckets 1, 2, 5, 10, ... up to ``max_model_len`` unless the server was
  given ``--custom-histogram-buckets``): the length distributions, their means (``_sum / _count``)
  and the request count. The bucket edges are read from the scrape, never assumed.
* ``vllm:num_requests_running`` (gauge): the concurrency, per engine.
* optional: ``vllm:num_requests_waiting`` (gauge), ``vllm:generation_tokens`` (counter) and
  ``vllm:iteration_tokens_total`` (histogram; its ``_count`` is the engine steps) for the
  lifetime mean batch, the ``vllm:spec_decode_*`` counters, ``vllm:cache_config_info``.

The Prometheus text is parsed by ``prometheus_client``'s own parser (imported on use, so the rest
of decodecalc does not load it).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from decodecalc.errors import ConfigError
from decodecalc.limits import MAX_CONCURRENCY
from decodecalc.traffic.metrics_lengths import (
    Bucket,
    LengthDistribution,
    TokenHistogram,
    length_distribution,
)
from decodecalc.traffic.metrics_fetch import one_line, read_metrics_text
from decodecalc.traffic.requests import DEFAULT_ACCEPTANCE_RATE, BatchingLimits, Request, batch_requests
from decodecalc.traffic.steps import StepTrace, nonempty
from decodecalc.traffic.traces.values import MAX_TOKENS as MAX_REQUEST_TOKENS

PROMPT = "vllm:request_prompt_tokens"  # histogram
OUTPUT = "vllm:request_generation_tokens"  # histogram
RUNNING = "vllm:num_requests_running"  # gauge
WAITING = "vllm:num_requests_waiting"  # gauge
GENERATION_TOKENS = "vllm:generation_tokens"  # counter (exposed as ..._total)
ITERATION_TOKENS = "vllm:iteration_tokens_total"  # histogram of tokens per engine step (its _count: steps)
SPEC_DRAFTS = "vllm:spec_decode_num_drafts"  # counters, present with --speculative-config
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
CACHE_INFO = "vllm:cache_config_info"  # gauge set to 1, the CacheConfig fields as labels

DEFAULT_STEPS = 300  # as the presets (decodecalc/traffic/presets.py)
MAX_STEPS = 1_000_000
SEED = 20261130
#: requests one draw_requests call may make (a workload needs a few thousand)
MAX_DRAWS = 10_000_000

_EXPECTED_TYPE = {PROMPT: "histogram", OUTPUT: "histogram", RUNNING: "gauge", WAITING: "gauge",
                  GENERATION_TOKENS: "counter", ITERATION_TOKENS: "histogram", SPEC_DRAFTS: "counter",
                  SPEC_DRAFT_TOKENS: "counter", SPEC_ACCEPTED: "counter", CACHE_INFO: "gauge"}

Labels = dict[str, str]


# --------------------------------------------------------------------------------------------
# reading


@dataclass(frozen=True, slots=True)
class Scrape:
    """One scrape's samples by sample name (``vllm:request_prompt_tokens_bucket``, ...), and the type
    each family was declared with (``# TYPE``; families without one are absent)."""

    origin: str
    samples: dict[str, tuple[tuple[Labels, float], ...]]
    types: dict[str, str]

    def rows(self, sample: str, model_name: str | None = None) -> list[tuple[Labels, float]]:
        return [(lab, v) for lab, v in self.samples.get(sample, ())
                if model_name is None or lab.get("model_name") == model_name]

    def check_type(self, family: str) -> None:
        """A family vLLM declares with one type, found with another, is not vLLM's (``unknown``: untyped)."""
        found, want = self.types.get(family), _EXPECTED_TYPE[family]
        if found not in (None, "unknown", want):
            raise ConfigError(f"{self.origin}: {family} is a {found} here; vLLM exposes a {want} (is this a vLLM "
                              "server's /metrics?)")

    def total(self, sample: str, model_name: str | None) -> float | None:
        rows = self.rows(sample, model_name)
        return sum(v for _, v in rows) if rows else None


def parse_metrics(text: str, origin: str) -> Scrape:
    """The samples of a Prometheus text-format scrape (what vLLM serves a client that does not ask for
    OpenMetrics). A family that occurs twice (two scrapes concatenated) contributes the samples of both."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, list[tuple[Labels, float]]] = {}
    types: dict[str, str] = {}
    try:
        for family in text_string_to_metric_families(text):
            types.setdefault(family.name, family.type)
            for s in family.samples:
                samples.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    except Exception as e:  # noqa: BLE001 -- the parser signals malformed text with ValueError, IndexError, ...
        raise ConfigError(f"{origin}: not Prometheus text format ({one_line(e) or type(e).__name__})") from None
    if not samples:
        raise ConfigError(f"{origin}: no metrics in it (empty, or not a /metrics scrape)")
    return Scrape(origin=origin, samples={k: tuple(v) for k, v in samples.items()}, types=types)


def _missing(scrape: Scrape, what: str) -> ConfigError:
    """The error for a metric vLLM always exposes: name it and say what the scrape holds instead."""
    names = sorted(scrape.types) or sorted(scrape.samples)
    ours = [n for n in names if n.startswith("vllm:")]
    if ours:
        hint = (f"it has {len(ours)} other vllm: metrics, so the server is vLLM, but its metrics are not named "
                "as vLLM 0.33's v1 engine names them")
    else:
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        hint = (f"it has no vllm: metrics at all ({len(names)} others: {shown}); is this a vLLM server's /metrics? "
                "(vLLM exposes them unless started with --disable-log-stats)")
    return ConfigError(f"{scrape.origin}: no {what}; {hint}")


# --------------------------------------------------------------------------------------------
# histograms -> length distributions


def _key(labels: Labels) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "le"))


def _check_count(name: str, v: float, origin: str) -> None:
    if not (math.isfinite(v) and v >= 0):
        raise ConfigError(f"{origin}: {name} has the value {v:g}; counts are finite and >= 0")


def read_histogram(scrape: Scrape, name: str, model_name: str | None) -> TokenHistogram:
    """``name``'s ``_bucket``, ``_count`` and ``_sum`` samples, pooled over every label set (engines,
    model names) by adding the cumulative counts at the edges every label set shares."""
    origin = scrape.origin
    scrape.check_type(name)
    rows = scrape.rows(f"{name}_bucket", model_name)
    if not rows:
        raise _missing(scrape, f"{name} histogram ({name}_bucket samples)")
    series: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
    spelled: dict[tuple[tuple[tuple[str, str], ...], float], str] = {}  # (label set, edge) -> its le as written
    for labels, v in rows:
        try:
            edge = float(labels["le"])
        except (KeyError, ValueError):
            raise ConfigError(f"{origin}: a {name}_bucket sample without a numeric le label "
                              f"({one_line(labels)})") from None
        if math.isnan(edge) or MAX_REQUEST_TOKENS < edge < math.inf:  # NaN and 1e300 broke the length fit
            raise ConfigError(f"{origin}: a {name}_bucket sample with le={labels['le']!r}; a bucket edge is a token "
                              f"count up to {MAX_REQUEST_TOKENS:,} (a request's limit in a trace), or +Inf")
        _check_count(f"{name}_bucket{{le={labels['le']!r}}}", v, origin)
        key = _key(labels)
        first = spelled.get((key, edge))
        if first is not None:  # the last one silently won: which scrape, which count?
            where = f"{origin}: {name}_bucket{{{', '.join(f'{k}={v!r}' for k, v in key)}}}"
            if first == labels["le"]:
                raise ConfigError(f"{where}: the bucket le={first!r} occurs twice (a duplicate series: two scrapes of "
                                  "one server concatenated?); give one scrape, or label sets that differ")
            raise ConfigError(f"{where}: le={first!r} and le={labels['le']!r} are one bucket edge ({edge:g}) given "
                              "twice; each edge once")
        spelled[(key, edge)] = labels["le"]
        series.setdefault(key, {})[edge] = v
    counts = _one_per_series(scrape, f"{name}_count", model_name)
    sums = _one_per_series(scrape, f"{name}_sum", model_name)
    for key, buckets in series.items():
        _check_series(name, key, buckets, counts.get(key), sums.get(key), origin)
    shared = sorted(set.intersection(*(set(b) for b in series.values())) - {math.inf})
    every = sorted(set().union(*(set(b) for b in series.values())) - {math.inf})
    return TokenHistogram(name=name, edges=tuple(shared),
                     cumulative=tuple(sum(b[e] for b in series.values()) for e in shared),
                     count=sum(b[math.inf] for b in series.values()),
                     total=sum(sums[k] for k in series), series=len(series),
                     dropped_edges=tuple(e for e in every if e not in shared))


def _one_per_series(scrape: Scrape, sample: str, model_name: str | None) -> dict[tuple[tuple[str, str], ...], float]:
    """``sample``'s value per label set; ConfigError where a label set has two (a duplicate series)."""
    out: dict[tuple[tuple[str, str], ...], float] = {}
    for labels, v in scrape.rows(sample, model_name):
        key = _key(labels)
        if key in out:
            raise ConfigError(f"{scrape.origin}: {sample}{{{', '.join(f'{k}={v!r}' for k, v in key)}}} occurs twice "
                              "(a duplicate series: two scrapes of one server concatenated?); give one scrape")
        out[key] = v
    return out


def _check_series(name: str, key: tuple[tuple[str, str], ...], buckets: dict[float, float], count: float | None,
                  total: float | None, origin: str) -> None:
    where = f"{origin}: {name}{{{', '.join(f'{k}={v!r}' for k, v in key)}}}"
    if math.inf not in buckets:
        raise ConfigError(f"{where} has no le=\"+Inf\" bucket")
    if total is None:
        raise ConfigError(f"{where} has no {name}_sum sample (the mean length comes from it)")
    if not (math.isfinite(total) and total >= 0):
        raise ConfigError(f"{where}: {name}_sum is {total:g}; token counts add up to a finite number >= 0")
    n = buckets.get(math.inf, 0.0)
    if n > 0 and total <= 0:  # the mean length _sum / _count is 0: nothing to draw lengths from (a ZeroDivisionError)
        raise ConfigError(f"{where}: {name}_sum is {total:g} over {n:g} requests, a mean of 0 tokens; the _sum of a "
                          "scrape with requests holds their token counts")
    if n > 0 and total / n > MAX_REQUEST_TOKENS:
        raise ConfigError(f"{where}: {name}_sum is {total:g} over {n:g} requests, a mean of {total / n:.3g} tokens; "
                          f"a request holds at most {MAX_REQUEST_TOKENS:,}")
    edges = sorted(buckets)
    if edges[0] <= 0:
        raise ConfigError(f"{where}: a bucket edge le={edges[0]:g}; token-count buckets are positive")
    for lo, hi in zip(edges, edges[1:]):
        if buckets[hi] < buckets[lo]:
            raise ConfigError(f"{where}: the bucket counts fall from {buckets[lo]:g} at le={lo:g} to {buckets[hi]:g} "
                              f"at le={hi:g}; Prometheus buckets are cumulative")
    # prometheus_client derives _count from the buckets, so the two agree in any scrape it wrote
    if count is not None and abs(count - buckets[math.inf]) > 0.5:
        raise ConfigError(f"{where}: {name}_count is {count:g} but the +Inf bucket holds {buckets[math.inf]:g}")




@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsWorkload:
    """A decode workload described by one scrape: concurrency and length distributions, with the
    notes that say what was read and what was assumed."""

    origin: str
    model_names: tuple[str, ...]  # the model_name labels pooled
    engines: int  # label sets of the prompt histogram: data-parallel engines (times models, when pooled)
    concurrency: int  # sequences one engine runs together
    prompt: LengthDistribution
    output: LengthDistribution
    requests: int  # finished requests the histograms hold
    running: float | None  # vllm:num_requests_running at the scrape, all engines (None: absent)
    waiting: float | None  # vllm:num_requests_waiting at the scrape, all engines
    lifetime_concurrency: float | None  # decoding sequences per engine step over the server's life
    num_speculative_tokens: int  # draft tokens per speculative step the server ran (0: none)
    draft_acceptance_rate: float | None  # accepted / drafted tokens (None: no speculative decoding)
    kv_cache_tokens: int | None  # KV cache capacity of one engine, from vllm:cache_config_info
    notes: tuple[str, ...]

    @property
    def prompt_mean(self) -> float:
        return self.prompt.mean

    @property
    def output_mean(self) -> float:
        return self.output.mean

    def draw_requests(self, n: int, seed: int) -> list[tuple[int, int]]:
        """``n`` (prompt, output) token lengths by inverse-CDF sampling of the two histograms, drawn
        independently (the scrape holds no pairing), each >= 1; the same ``seed`` gives the same list,
        and a longer list starts with a shorter one."""
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_DRAWS:
            raise ConfigError(f"draw_requests: n must be an integer between 0 and {MAX_DRAWS:,}, got {n!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"draw_requests: seed must be an integer, got {seed!r}")
        rng = random.Random(seed)
        out = []
        for _ in range(n):
            p = self.prompt.quantile(rng.random())
            out.append((p, self.output.quantile(rng.random())))
        return out


def metrics_workload(text: str, *, origin: str, model_name: str | None = None, concurrency: int | None = None,
                     max_model_len: int | None = None) -> MetricsWorkload:
    """The workload a ``/metrics`` scrape describes. ``model_name`` keeps one model's label sets
    (default: pool every model and engine in the scrape); ``concurrency`` overrides what the scrape
    says; ``max_model_len`` caps the longest lengths drawn (default: inferred from the buckets)."""
    if max_model_len is not None and (isinstance(max_model_len, bool) or not isinstance(max_model_len, int)
                                      or max_model_len < 1):
        raise ConfigError(f"max_model_len must be a positive integer, got {max_model_len!r}")
    scrape = parse_metrics(text, origin)
    models = _model_names(scrape, model_name)
    notes: list[str] = []
    hists = [read_histogram(scrape, name, model_name) for name in (PROMPT, OUTPUT)]
    (prompt, prompt_notes), (output, output_notes) = (length_distribution(h, origin, max_model_len=max_model_len)
                                                      for h in hists)
    if len(models) > 1:
        notes.append(f"{len(models)} models pooled ({', '.join(models)}): their histograms are added and the "
                     "concurrency is the mean per engine; pass model_name= to take one")
    notes.append(f"{PROMPT} and {OUTPUT} hold one observation per finished request (whatever its "
                 "finished_reason) since the server started: the mix over its whole life, not a recent window; "
                 "prompt lengths are whole prompts, cached prefixes included (the KV a decode step reads)")
    notes += prompt_notes + output_notes
    if abs(hists[0].count - hists[1].count) > 0.5:
        notes.append(f"{PROMPT} counts {hists[0].count:,.0f} requests, {OUTPUT} {hists[1].count:,.0f}")
    notes.append("the histograms give only a count per bucket: within one, lengths are drawn over its whole token "
                 "counts with density x^-beta, one beta per histogram fitted so that the mean is _sum/_count (beta 1 "
                 "would be log-uniform); prompt and output lengths are drawn independently (the histograms do not "
                 "pair them)")
    running, waiting = _gauge(scrape, RUNNING, model_name), _gauge(scrape, WAITING, model_name)
    lifetime, spec_k, alpha = _lifetime(scrape, model_name)
    if concurrency is not None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"concurrency must be a positive integer, got {concurrency!r}")
        c = concurrency
        notes.append(f"concurrency {c}: given (the scrape's {RUNNING} is "
                     f"{'absent' if running is None else f'{sum(running):g}'})")
    else:
        c, note = _concurrency(scrape, running, lifetime)
        notes.append(note)
    if lifetime is not None and concurrency is None and running and sum(running) > 0:
        notes.append(f"over the server's life an engine step decoded {lifetime:,.1f} sequences on average "
                     f"({GENERATION_TOKENS}_total / {ITERATION_TOKENS}_count)")
    if waiting and sum(waiting) > 0:
        notes.append(f"{sum(waiting):g} requests were waiting at the scrape: the engine was at a limit "
                     "(max_num_seqs or KV cache), so the running count is that limit, not the demand")
    notes.append("arrival times are not in the metrics: every request waits from the start and the workload runs "
                 "at fixed concurrency, like a preset")
    if spec_k:
        notes.append(f"the server ran speculative decoding: {spec_k} draft tokens per step, acceptance rate "
                     f"{alpha:.2f} ({SPEC_ACCEPTED}_total / {SPEC_DRAFT_TOKENS}_total); pass them as "
                     "--num-speculative-tokens and --draft-acceptance-rate to model it")
    kv = _kv_cache_tokens(scrape)
    if kv:
        per_seq = prompt.mean + output.mean / 2.0  # a sequence's KV midway through its reply
        fill = c * per_seq / kv
        over = "; more than it holds: vLLM would preempt, the batching model does not" if fill > 1 else ""
        notes.append(f"KV cache: {kv:,} tokens per engine ({CACHE_INFO}); {c} sequences of mean context "
                     f"{per_seq:,.0f} fill about {fill:.0%} of it{over}")
    return MetricsWorkload(origin=origin, model_names=tuple(models), engines=hists[0].series, concurrency=c,
                           prompt=prompt, output=output, requests=round(prompt.count),
                           running=sum(running) if running is not None else None,
                           waiting=sum(waiting) if waiting is not None else None, lifetime_concurrency=lifetime,
                           num_speculative_tokens=spec_k, draft_acceptance_rate=alpha, kv_cache_tokens=kv,
                           notes=tuple(notes))


def _model_names(scrape: Scrape, model_name: str | None) -> list[str]:
    known = sorted({lab.get("model_name", "") for lab, _ in scrape.rows(f"{PROMPT}_bucket")} - {""})
    if model_name is None:
        return known
    if model_name not in known:
        if not scrape.rows(f"{PROMPT}_bucket"):
            raise _missing(scrape, f"{PROMPT} histogram ({PROMPT}_bucket samples)")
        raise ConfigError(f"{scrape.origin}: no model_name {model_name!r} in {PROMPT}; the scrape has "
                          f"{', '.join(repr(m) for m in known) or 'none'}")
    return [model_name]


def _gauge(scrape: Scrape, name: str, model_name: str | None) -> list[float] | None:
    """The gauge's value per label set (engine), or None when the scrape lacks it."""
    scrape.check_type(name)
    rows = scrape.rows(name, model_name)
    _one_per_series(scrape, name, model_name)  # an engine counted twice would double the concurrency
    for _, v in rows:
        if not (math.isfinite(v) and v >= 0):
            raise ConfigError(f"{scrape.origin}: {name} has the value {v:g}; a request count is finite and >= 0")
    return [v for _, v in rows] if rows else None


def _lifetime(scrape: Scrape, model_name: str | None) -> tuple[float | None, int, float | None]:
    """(mean decoding sequences per engine step over the server's life, draft tokens per speculative
    step, draft acceptance rate). A decoding sequence yields one token per step plus its accepted
    drafts, so sequences = (generated tokens - accepted drafts) / engine steps."""
    for name in (GENERATION_TOKENS, ITERATION_TOKENS, SPEC_DRAFTS, SPEC_DRAFT_TOKENS, SPEC_ACCEPTED):
        scrape.check_type(name)
    drafts = scrape.total(f"{SPEC_DRAFTS}_total", model_name) or 0.0
    draft_tokens = scrape.total(f"{SPEC_DRAFT_TOKENS}_total", model_name) or 0.0
    accepted = scrape.total(f"{SPEC_ACCEPTED}_total", model_name) or 0.0
    k = round(draft_tokens / drafts) if drafts > 0 else 0
    alpha = min(1.0, accepted / draft_tokens) if draft_tokens > 0 else None
    generated = scrape.total(f"{GENERATION_TOKENS}_total", model_name)
    steps = scrape.total(f"{ITERATION_TOKENS}_count", model_name)
    if not generated or not steps or not math.isfinite(generated / steps):
        return None, k, alpha
    return max(generated - accepted, 0.0) / steps, k, alpha


def _concurrency(scrape: Scrape, running: list[float] | None, lifetime: float | None) -> tuple[int, str]:
    """Sequences one engine decodes together: the running gauge's mean per engine (a decode step is
    one engine's batch; data-parallel engines batch apart), else the lifetime mean."""
    if running and sum(running) > 0:
        c = max(1, math.floor(sum(running) / len(running) + 0.5))
        per = f" (mean of {len(running)} engines: {', '.join(f'{v:g}' for v in running)})" if len(running) > 1 else ""
        return c, (f"concurrency {c}: {RUNNING} at the scrape{per}, one instant; a server whose load varies "
                   "runs other batch sizes at other times")
    state = "absent" if running is None else "0"
    if lifetime is not None and lifetime >= 0.5:
        c = math.floor(lifetime + 0.5)
        return c, (f"concurrency {c}: {RUNNING} is {state} at the scrape, so the server's lifetime mean of "
                   f"decoding sequences per engine step is used ({GENERATION_TOKENS}_total minus accepted drafts, "
                   f"over {ITERATION_TOKENS}_count: {lifetime:,.2f})")
    raise ConfigError(f"{scrape.origin}: no concurrency: {RUNNING} is {state} and there is no "
                      f"{GENERATION_TOKENS}_total / {ITERATION_TOKENS}_count to average; give one (--concurrency N)")


def _kv_cache_tokens(scrape: Scrape) -> int | None:
    """num_gpu_blocks x block_size of vllm:cache_config_info (the smallest engine's); None if absent."""
    scrape.check_type(CACHE_INFO)
    sizes = []
    for labels, _ in scrape.rows(CACHE_INFO):
        try:
            sizes.append(int(labels["num_gpu_blocks"]) * int(labels["block_size"]))
        except (KeyError, ValueError):
            continue  # not resolved yet ("None"), or another vLLM's label set
    return min(sizes) if sizes and min(sizes) > 0 else None


# --------------------------------------------------------------------------------------------
# steps


def metrics_steps(mw: MetricsWorkload, *, concurrency: int | None = None, steps: int = DEFAULT_STEPS,
                  seed: int = SEED, max_num_batched_tokens: int = 8192, num_speculative_tokens: int = 0,
                  acceptance_rate: float = DEFAULT_ACCEPTANCE_RATE) -> StepTrace:
    """About ``steps`` steady-state decode steps of ``mw``, as :func:`decodecalc.traffic.presets.generate`
    makes a preset's: requests drawn from the histograms, all waiting at t = 0, batched at
    ``max_num_seqs`` = the concurrency, kept up to the step that admits the last request."""
    c = mw.concurrency if concurrency is None else concurrency
    if isinstance(c, bool) or not isinstance(c, int) or c < 1:
        raise ConfigError(f"--concurrency must be a positive integer, got {c!r}")
    if c > MAX_CONCURRENCY:
        said = "given" if concurrency is not None else f"what {RUNNING} says"
        raise ConfigError(f"{mw.origin}: concurrency {c} ({said}) is over the supported {MAX_CONCURRENCY:,}; "
                          f"pass --concurrency N (at most {MAX_CONCURRENCY:,}) to model a smaller batch")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        raise ConfigError(f"steps must be between 1 and {MAX_STEPS:,}, got {steps!r}")
    limits = BatchingLimits(max_num_seqs=c, max_num_batched_tokens=max_num_batched_tokens,
                            num_speculative_tokens=num_speculative_tokens, acceptance_rate=acceptance_rate)
    per_step = 1.0 + acceptance_rate * num_speculative_tokens  # tokens a request advances per decode step
    n = max(c + 1, math.ceil(1.3 * (steps + 2 * c) * c * per_step / max(mw.output.model_mean - 1.0, 1.0)) + c)
    source = f"vLLM metrics {mw.origin}"
    for _ in range(8):  # long prompts spend steps in prefill: draw more requests until the steady part is long enough
        reqs = [Request(prompt_tokens=p, output_tokens=o) for p, o in mw.draw_requests(n, seed)]
        result = batch_requests(reqs, limits, source=source)
        if result.queue_empty_step >= steps:
            break
        n *= 2
    kept = result.trace.steps[:min(steps, max(result.queue_empty_step, 1))]
    note = (f"{len(kept)} steady-state decode steps at concurrency {c} from {n} requests drawn from the histograms "
            f"of {mw.origin} (prompt mean {mw.prompt_mean:,.0f}, output mean {mw.output_mean:,.0f} tokens, "
            f"seed {seed})")
    spec = (limits.describe_speculation(),) if num_speculative_tokens else ()
    trace = StepTrace(steps=kept, source=source, notes=(note, *mw.notes, *spec))
    return nonempty(trace, f"--metrics {mw.origin}")


def workload_from_metrics(source: str, *, model_name: str | None = None, concurrency: int | None = None,
                          timeout_s: float = 10.0, steps: int = DEFAULT_STEPS, seed: int = SEED,
                          max_num_batched_tokens: int = 8192, num_speculative_tokens: int = 0,
                          acceptance_rate: float = DEFAULT_ACCEPTANCE_RATE) -> StepTrace:
    """``--metrics FILE|URL`` in one call: read the scrape, build the workload, make its steps."""
    text, origin = read_metrics_text(source, timeout_s=timeout_s)
    mw = metrics_workload(text, origin=origin, model_name=model_name, concurrency=concurrency)
    return metrics_steps(mw, steps=steps, seed=seed, max_num_batched_tokens=max_num_batched_tokens,
                         num_speculative_tokens=num_speculative_tokens, acceptance_rate=acceptance_rate)


__all__ = [
    "Bucket", "LengthDistribution", "MetricsWorkload", "Scrape", "TokenHistogram", "length_distribution",
    "metrics_steps", "metrics_workload", "parse_metrics", "read_histogram", "read_metrics_text",
    "workload_from_metrics",
]
