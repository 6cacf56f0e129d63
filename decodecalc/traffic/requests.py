"""Request traces turned into decode steps by a small model of an engine's continuous batching.

A request file (``--requests``, JSON Lines or CSV) has one request per line:
``{"prompt_tokens": P, "output_tokens": O, "arrival_s": t}`` (``arrival_s`` optional, default 0).

The batching model (a simplification of vLLM v1's scheduler with chunked prefill; SGLang's is alike
for decode batches). Time advances in steps of ``step_interval_s``; each step:

1. requests whose arrival time has come join the waiting queue (by arrival, then file order);
2. every running request that has finished its prefill decodes one token, in admission order,
   each taking one token of the ``max_num_batched_tokens`` budget;
3. a running request still in prefill takes the next chunk of its prompt from what is left of the budget;
4. waiting requests are admitted in order while fewer than ``max_num_seqs`` run and budget is left;
   each takes a chunk of its prompt (``min(prompt left, budget left)``);
5. the decode step recorded is the set of requests of item 2: KV length ``P + g`` for a request that
   has generated ``g`` tokens so far (the token fed this step included), query length 1.
   A step with no decode is not recorded (the clock still advances);
6. the step that finishes a prompt also yields the first output token; a request decodes from the
   step after its prefill to its last token (``O - 1`` decode steps) and then leaves.

Prefill chunks that share a step with decodes are not part of the recorded decode step (vLLM runs
them in the same launch, on the 2D path; SGLang runs them in a separate extend launch).

Worked example (``max_num_seqs`` 2, budget 8; A: P=3, O=3; B: P=4, O=2; C: P=2, O=2, all at t=0):
step 0 prefills A (3) and B (4), C waits (two running); step 1 decodes A at 4 and B at 5, B is done;
step 2 decodes A at 5 and prefills C, A is done; step 3 decodes C at 3. Recorded: [4, 5], [5], [3].

Speculative decoding (``num_speculative_tokens`` k > 0; vLLM's ``--speculative-config``
``num_speculative_tokens``): every decode step of a request verifies its last token and k draft
tokens, so its query length is ``1 + k``, its KV length ``P + g + k`` (the drafts are written to
the KV cache before attention), and it takes ``1 + k`` tokens of the budget (a request that does
not fit waits for the next step). The step then advances the request by ``1 + a`` tokens, ``a``
the accepted drafts, capped at the tokens it has left. Acceptance model (decodecalc's, deterministic):
a fixed draft acceptance rate ``alpha`` (accepted / drafted tokens, what vLLM's spec-decode metrics
log as the draft acceptance rate), spread evenly over a request's steps: its n-th decode step
(n = 0, 1, ...) accepts ``a_n = floor((n+1) alpha k) - floor(n alpha k)`` drafts, so after N steps
it has accepted ``floor(N alpha k)``, the mean acceptance length is ``1 + alpha k``, and every
sequence of a step advances by the same rule (no randomness; the same input gives the same steps).

Worked example (k = 2, alpha = 0.25, so alpha k = 1/2: the steps accept 0, 1, 0, 1, ... drafts;
budget 16; A: P=10, O=6; B: P=4, O=3): step 0 prefills A and B (14 tokens; each has its first
token, g = 1); step 1 decodes A at KV 10+1+2 = 13 and B at 4+1+2 = 7, 3 query tokens each, no
draft accepted: g = 2 and 2; step 2 decodes A at 14 and B at 8, one draft accepted: A has g = 4,
B reaches its 3 tokens and is done; step 3 decodes A at 16 (g = 5); step 4 decodes A at 17 and
A is done (one token left, one generated). Recorded: [13, 7], [14, 8], [16], [17], each sequence
with query length 3; 2 + 3 + 1 + 1 = 7 tokens generated (O - 1 per request). Without speculation
the same requests take five decode steps: [11, 5], [12, 6], [13], [14], [15].
"""

from __future__ import annotations

import functools
import heapq
import math
from array import array
from collections import deque
from itertools import repeat
from fractions import Fraction
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.traffic.steps import DecodeStep, StepTrace, nonempty, records

REQUEST_FIELDS = ("prompt_tokens", "output_tokens", "arrival_s")
#: draft acceptance rate when none is given: decodecalc's choice (a mid value of what EAGLE-style drafters
#: report); pass the rate your engine logs (--draft-acceptance-rate)
DEFAULT_ACCEPTANCE_RATE = 0.7


@dataclass(frozen=True, slots=True)
class Request:
    prompt_tokens: int
    output_tokens: int
    arrival_s: float = 0.0
    origin: str = ""


@functools.lru_cache(maxsize=64)
def _rate(alpha: float, k: int) -> tuple[int, int]:
    """alpha * k as an exact fraction (numerator, denominator): integer arithmetic, no float drift."""
    r = Fraction(alpha).limit_denominator(1_000_000) * k
    return r.numerator, r.denominator


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchingLimits:
    """The engine limits the batching model obeys (vLLM's EngineArgs names and 0.33.0 defaults on a
    >= 70 GiB GPU, vllm/engine/arg_utils.py L2973-2996)."""

    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    step_interval_s: float = 0.025  # wall time of one engine step, to place arrivals on steps
    num_speculative_tokens: int = 0  # k draft tokens verified per decode step
    acceptance_rate: float = DEFAULT_ACCEPTANCE_RATE  # accepted / drafted tokens (used when k > 0)

    @property
    def query_len(self) -> int:
        return 1 + self.num_speculative_tokens

    def accepted(self, n: int) -> int:
        """Drafts accepted at a request's n-th decode step (0-based): floor((n+1) alpha k) - floor(n alpha k)."""
        num, den = _rate(self.acceptance_rate, self.num_speculative_tokens)
        return ((n + 1) * num) // den - (n * num) // den

    def describe_speculation(self) -> str:
        k, a = self.num_speculative_tokens, self.acceptance_rate
        return (f"speculative decoding: {k} draft token{'s' * (k != 1)} per step (query length {1 + k}), draft "
                f"acceptance rate {a:g}: a mean acceptance length of {1 + a * k:g} tokens per step "
                "(deterministic model, decodecalc/traffic/requests.py)")

    def __post_init__(self) -> None:
        from decodecalc.limits import MAX_SPECULATIVE_TOKENS

        k = self.num_speculative_tokens
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= MAX_SPECULATIVE_TOKENS:
            raise ConfigError(f"--num-speculative-tokens must be an integer between 0 and {MAX_SPECULATIVE_TOKENS}, "
                              f"got {k!r}")
        a = self.acceptance_rate
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= a <= 1.0:
            raise ConfigError(f"--draft-acceptance-rate must be a number between 0 and 1, got {a!r}")
        if self.max_num_batched_tokens < 1 + k:
            raise ConfigError(f"--max-num-batched-tokens {self.max_num_batched_tokens} is below one speculative "
                              f"decode step (1 + {k} tokens)")
        if self.max_num_seqs <= 0:
            raise ConfigError(f"max_num_seqs must be positive, got {self.max_num_seqs}")
        if self.max_num_batched_tokens <= 0:
            raise ConfigError(f"max_num_batched_tokens must be positive, got {self.max_num_batched_tokens}")
        if not self.step_interval_s > 0:
            raise ConfigError(f"step_interval_s must be positive, got {self.step_interval_s}")


def make_request(rec: dict[str, Any], where: str) -> Request:
    unknown = sorted(set(rec) - set(REQUEST_FIELDS))
    if unknown:
        raise ConfigError(f"{where}, field '{unknown[0]}': unknown field; a request has "
                          f"{', '.join(REQUEST_FIELDS)}")
    vals = {}
    for name in ("prompt_tokens", "output_tokens"):
        if name not in rec:
            raise ConfigError(f"{where}, field '{name}': missing")
        v = rec[name]
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{where}, field '{name}': expected an integer, got {v!r}")
        if v <= 0:
            raise ConfigError(f"{where}, field '{name}': must be >= 1, got {v}")
        vals[name] = v
    t = rec.get("arrival_s", 0.0)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
        raise ConfigError(f"{where}, field 'arrival_s': expected a number of seconds >= 0, got {t!r}")
    return Request(prompt_tokens=vals["prompt_tokens"], output_tokens=vals["output_tokens"], arrival_s=float(t),
                   origin=where)


def load_requests(path: Path) -> tuple[Request, ...]:
    reqs = tuple(make_request(rec, where) for rec, where in records(path, list_fields=(), known=REQUEST_FIELDS))
    if not reqs:
        raise ConfigError(f"{path}: the workload is empty (no requests)")
    return reqs


@dataclass(slots=True)
class _Running:
    prompt: int
    output: int
    prefilled: int = 0
    generated: int = 0
    order: int = 0
    decode_steps: int = 0


@dataclass(frozen=True, slots=True)
class StepRun:
    """``steps`` consecutive decode steps of the same requests: step ``j``'s KV lengths are ``base[i] + j``, every
    sequence with ``query_len`` query tokens; ``tokens`` generated per step (None: one per sequence)."""

    base: tuple[int, ...]
    steps: int
    first_engine_step: int
    query_len: int = 1
    tokens: int | None = None


@dataclass(frozen=True, slots=True)
class BatchingRuns:
    """The decode steps of a request trace as runs (:class:`StepRun`), with what :class:`BatchingResult` reports."""

    runs: tuple[StepRun, ...]
    engine_steps: int  # steps simulated (with or without a decode)
    queue_empty_step: int  # decode steps before the first one after the last admission
    requests: int

    @property
    def decode_steps(self) -> int:
        return sum(r.steps for r in self.runs)


@dataclass(frozen=True, slots=True)
class BatchingResult:
    trace: StepTrace
    engine_steps: int  # steps simulated (with or without a decode)
    queue_empty_step: int  # index into trace.steps of the first decode step after the last admission
    extra: dict[str, Any] = field(default_factory=dict)


#: KV lengths the runs of a trace may hold per decode step allowed (``max_steps``): at 5,000,000 steps, 40 million
#: lengths, about 1.5 GB while they are Python tuples (a day at 256 sequences holds 27.5 million)
RUN_LENGTHS_PER_STEP = 8


def _check_size(emitted: int, stored: int, max_steps: int | None, requests_in: int, source: str) -> None:
    """A trace too large to hold: more decode steps than ``max_steps``, or runs holding more KV lengths than
    RUN_LENGTHS_PER_STEP per allowed step (their memory), stops the batching with one error."""
    if max_steps is None:
        return
    if emitted > max_steps:
        raise ConfigError(f"{source}: more than {max_steps:,} decode steps (about {requests_in:,} requests in); "
                          "tune a part of the trace (--max-requests N)")
    if stored > max_steps * RUN_LENGTHS_PER_STEP:
        raise ConfigError(f"{source}: the batching holds more than {max_steps * RUN_LENGTHS_PER_STEP:,} sequence "
                          f"lengths (about {requests_in:,} requests in); tune a part of the trace (--max-requests N) "
                          "or lower --max-num-seqs")


def batching_runs(prompt: Sequence[int], output: Sequence[int], arrival: Sequence[float],
                  limits: BatchingLimits = BatchingLimits(), *, max_steps: int | None = None,
                  source: str = "requests") -> BatchingRuns:
    """The continuous-batching model of this module's docstring, for requests given as columns sorted by arrival
    (stable: file order among equal arrivals). Steps where every running request decodes and nobody can be admitted
    repeat with every length one token longer, until the first request finishes or an arrival could be admitted:
    they are emitted as one run (a million steps of a day's traffic cost a few hundred thousand iterations, not a
    million times the batch). ``max_steps``: a ConfigError once more decode steps than that are made (a trace of
    months of traffic would not fit in memory)."""
    n_req = len(prompt)
    q = limits.query_len
    interval = limits.step_interval_s
    nxt = 0  # next request not yet arrived
    waiting: deque[int] = deque()
    running: list[_Running] = []
    runs: list[StepRun] = []
    emitted = 0
    stored = 0  # KV lengths the runs hold (their memory: a run stores one length per sequence, not per step)
    k = 0
    admitted_all_at = -1
    counter = 0
    while nxt < n_req or waiting or running:
        now = k * interval
        if not waiting and not running and nxt < n_req and arrival[nxt] > now:
            k = math.ceil(arrival[nxt] / interval - 1e-12)  # idle: jump to next arrival
            now = k * interval
        while nxt < n_req and arrival[nxt] <= now + 1e-12:
            waiting.append(nxt)
            nxt += 1
        budget = limits.max_num_batched_tokens
        decoding = [r for r in running if r.prefilled == r.prompt][:budget // q]
        budget -= q * len(decoding)
        if (q == 1 and decoding and len(decoding) == len(running)
                and (not waiting or len(running) >= limits.max_num_seqs)):
            # a pure decode stretch: it lasts until a request finishes, or until an arrival could be admitted
            m = min(r.output - r.generated for r in decoding)
            if len(running) < limits.max_num_seqs and nxt < n_req:
                m = min(m, max(1, math.ceil(arrival[nxt] / interval - 1e-12) - k))
            if not waiting and nxt >= n_req and admitted_all_at < 0:
                admitted_all_at = emitted
            runs.append(StepRun(base=tuple(r.prompt + r.generated for r in decoding), steps=m, first_engine_step=k))
            emitted += m
            stored += len(decoding)
            _check_size(emitted, stored, max_steps, nxt, source)
            for r in decoding:
                r.generated += m
                r.decode_steps += m
            running = [r for r in running if r.generated < r.output]
            k += m
            continue
        chunks: list[tuple[_Running, int]] = []
        for r in running:
            if r.prefilled < r.prompt and budget > 0:
                c = min(r.prompt - r.prefilled, budget)
                chunks.append((r, c))
                budget -= c
        while waiting and len(running) < limits.max_num_seqs and budget > 0:
            i = waiting.popleft()
            r = _Running(prompt=int(prompt[i]), output=int(output[i]), order=counter)
            counter += 1
            running.append(r)
            c = min(r.prompt, budget)
            chunks.append((r, c))
            budget -= c
        if not waiting and nxt >= n_req and admitted_all_at < 0:
            admitted_all_at = emitted
        # tokens each decoding request generates this step: its last token's successor plus accepted drafts (without
        # drafts one each: a running request has a token left at least, so no list of ones is built)
        advance = repeat(1) if q == 1 else [min(1 + limits.accepted(r.decode_steps), r.output - r.generated)
                                            for r in decoding]
        if decoding:
            stored += len(decoding)
            _check_size(emitted, stored, max_steps, nxt, source)
            runs.append(StepRun(base=tuple(r.prompt + r.generated + q - 1 for r in decoding), steps=1,
                                first_engine_step=k, query_len=q, tokens=None if q == 1 else sum(advance)))
            emitted += 1
        done = set()
        for r, a in zip(decoding, advance):
            r.generated += a
            r.decode_steps += 1
            if r.generated >= r.output:
                done.add(id(r))
        for r, c in chunks:
            r.prefilled += c
            if r.prefilled == r.prompt:
                r.generated = 1  # the prefill step yields the first output token
                if r.output <= 1:
                    done.add(id(r))
        if done:
            running = [r for r in running if id(r) not in done]
        k += 1
    return BatchingRuns(runs=tuple(runs), engine_steps=k, queue_empty_step=max(admitted_all_at, 0), requests=n_req)


@dataclass(frozen=True, slots=True)
class RequestIntervals:
    """The decode steps of a request trace as one interval per request (no speculation): request ``i`` (in admission
    order) decodes at every engine step from ``start[i]`` to ``start[i] + steps[i] - 1`` with the KV length
    ``base[i] + j`` at its ``j``-th decode step. A decode step's sequences are the requests whose interval holds it,
    in admission order (the batching model's running order). Memory: three integers per request, whatever the
    batch."""

    start: Sequence[int]  # engine step of the first decode
    base: Sequence[int]  # KV length at the first decode: prompt + 1
    steps: Sequence[int]  # decode steps: output - 1
    engine_steps: int
    requests: int


#: engine steps between two progress reports of the batching (a day of one server is about 3.5 million)
PROGRESS_EVERY = 1 << 16


def batching_intervals(prompt: Sequence[int], output: Sequence[int], arrival: Sequence[float],
                       limits: BatchingLimits = BatchingLimits(), *,
                       progress: Callable[[str], None] | None = None) -> RequestIntervals | None:
    """:func:`batching_runs`' model, event by event: the same decode steps as intervals per request. Every decoding
    request takes one token of the budget and decodes at every step until it is done, so only the steps where a
    request arrives, is admitted, prefills or leaves need work, and each step's batch is never stored (a day of one
    server: about 2 iterations per request instead of one per engine step times its batch). None where that does not
    hold: speculative decoding (a step advances a request by a varying count) or ``max_num_seqs`` above
    ``max_num_batched_tokens`` (the budget can leave a decoding request out of a step); :func:`batching_runs` then.
    ``progress``: called with the requests admitted so far, now and then."""
    if limits.num_speculative_tokens or limits.max_num_seqs > limits.max_num_batched_tokens:
        return None
    n_req = len(prompt)
    budget_all, max_seqs, interval = limits.max_num_batched_tokens, limits.max_num_seqs, limits.step_interval_s
    start: array[int] = array("q")
    base: array[int] = array("q")
    steps: array[int] = array("q")
    ends: list[int] = []  # heap: the last decode step of every decoding request
    waiting: deque[int] = deque()
    prefill: deque[list[int]] = deque()  # running requests in prefill, admission order: [prompt left, prompt, output]
    n_dec = 0  # requests decoding
    slots = 0  # requests running (prefill or decode)
    nxt = 0
    k = 0
    report_at = PROGRESS_EVERY
    while True:
        while ends and ends[0] < k:  # done at the end of step ends[0]
            heapq.heappop(ends)
            n_dec -= 1
            slots -= 1
        if not waiting and not slots:
            if nxt >= n_req:
                break
            k = max(k, math.ceil(arrival[nxt] / interval - 1e-12))  # idle: jump to the next arrival
        now = k * interval
        while nxt < n_req and arrival[nxt] <= now + 1e-12:
            waiting.append(nxt)
            nxt += 1
        if progress is not None and k >= report_at:
            report_at = k + PROGRESS_EVERY
            progress(f"batching: {nxt:,} of {n_req:,} requests in")
        if not prefill and (not waiting or slots >= max_seqs):
            # decodes only: nothing changes until a request leaves or arrives
            nk = ends[0] + 1 if ends else math.inf
            if nxt < n_req:
                nk = min(nk, math.ceil(arrival[nxt] / interval - 1e-12))
            if nk == math.inf:
                break
            k = max(int(nk), k + 1)
            continue
        budget = budget_all - n_dec
        completed: list[list[int]] = []
        while prefill and budget > 0:
            r = prefill[0]
            c = min(r[0], budget)
            r[0] -= c
            budget -= c
            if r[0]:
                break
            completed.append(prefill.popleft())
        while waiting and slots < max_seqs and budget > 0:
            i = waiting.popleft()
            slots += 1
            p = int(prompt[i])
            c = min(p, budget)
            budget -= c
            r = [p - c, p, int(output[i])]
            if r[0]:
                prefill.append(r)
            else:
                completed.append(r)
        for _, p, o in completed:  # the prefill's step yields the first token; decodes follow from the next step
            if o <= 1:
                slots -= 1
                continue
            start.append(k + 1)
            base.append(p + 1)
            steps.append(o - 1)
            heapq.heappush(ends, k + o - 1)
            n_dec += 1
        k += 1
    return RequestIntervals(start=start, base=base, steps=steps, engine_steps=k, requests=n_req)


def runs_to_steps(br: BatchingRuns, source: str) -> tuple[DecodeStep, ...]:
    out = []
    for run in br.runs:
        for j in range(run.steps):
            out.append(DecodeStep(seq_lens=tuple(L + j for L in run.base), query_lens=(run.query_len,) * len(run.base),
                                  origin=f"{source}, engine step {run.first_engine_step + j}", tokens=run.tokens))
    return tuple(out)


def _columns(requests: Sequence[Request]) -> tuple[list[int], list[int], list[float]]:
    order = sorted(range(len(requests)), key=lambda i: (requests[i].arrival_s, i))
    return ([requests[i].prompt_tokens for i in order], [requests[i].output_tokens for i in order],
            [requests[i].arrival_s for i in order])


def batch_requests(requests: Sequence[Request], limits: BatchingLimits = BatchingLimits(), *,
                   source: str = "requests") -> BatchingResult:
    """Decode steps of ``requests`` under the continuous-batching model of this module's docstring."""
    if not requests:
        raise ConfigError(f"{source}: the workload is empty (no requests)")
    br = batching_runs(*_columns(requests), limits)
    trace = StepTrace(steps=runs_to_steps(br, source), source=source, notes=batching_notes(limits, len(requests)))
    return BatchingResult(trace=trace, engine_steps=br.engine_steps, queue_empty_step=br.queue_empty_step)


def batching_notes(limits: BatchingLimits, requests: int) -> tuple[str, ...]:
    return ((f"continuous batching: max_num_seqs {limits.max_num_seqs}, max_num_batched_tokens "
             f"{limits.max_num_batched_tokens}, {requests:,} requests",)
            + ((limits.describe_speculation(),) if limits.num_speculative_tokens else ()))


def steps_from_requests(path: Path, limits: BatchingLimits = BatchingLimits()) -> StepTrace:
    result = batch_requests(load_requests(path), limits, source=str(path))
    return nonempty(result.trace, f"{path} (every request has output_tokens 1, so no decode step)")


def requests_from_items(items: Sequence[Any], limits: BatchingLimits = BatchingLimits(),
                        source: str = "requests") -> StepTrace:
    """Decode steps of requests given as Python objects (the API's ``requests=[...]``): each item a
    :class:`Request` or a mapping with the file's fields. Errors name ``source[i]`` and the field."""
    if isinstance(items, (str, bytes)):
        raise ConfigError(f"{source}: expected a list of requests or a file path, got a string")
    reqs = []
    for i, item in enumerate(items):
        where = f"{source}[{i}]"
        if isinstance(item, Request):
            item = {"prompt_tokens": item.prompt_tokens, "output_tokens": item.output_tokens,
                    "arrival_s": item.arrival_s}
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: expected a mapping with prompt_tokens and output_tokens, got "
                              f"{type(item).__name__}")
        reqs.append(make_request(dict(item), where))
    result = batch_requests(reqs, limits, source=source)
    return nonempty(result.trace, f"{source} (every request has output_tokens 1, so no decode step)")
