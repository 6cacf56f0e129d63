"""The length distributions of a vLLM server's token histograms: a histogram's buckets, each with a density
x^-beta fitted to the series' _sum and _count, and the +Inf bucket closed at the next 1-2-5 value (the model and
its assumptions: docs/metrics.md). decodecalc.traffic.metrics reads the histograms and draws requests from these."""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field

from decodecalc.errors import ConfigError

#: bounds of the within-bucket exponent: density x^-BETA from rising as x^4 to falling as x^-8
BETA_MIN, BETA_MAX = -4.0, 8.0


@dataclass(frozen=True, slots=True)
class TokenHistogram:
    """A cumulative histogram pooled over its label sets: upper edges (finite), the count at or below
    each, the total count (the +Inf bucket) and the sum of the observations."""

    name: str
    edges: tuple[float, ...]
    cumulative: tuple[float, ...]
    count: float
    total: float
    series: int  # label sets pooled
    dropped_edges: tuple[float, ...] = ()  # edges not shared by every label set, left out to pool them


def _ratio_integral(s: float, log_r: float) -> float:
    """(r^s - 1) / s for r = exp(log_r), continuous at s = 0 (where it is log r)."""
    return math.expm1(s * log_r) / s if abs(s) > 1e-12 else log_r


@dataclass(frozen=True, slots=True)
class Bucket:
    """The whole token counts ``lo..hi`` of one histogram bucket, and how many requests fell in it.
    Within it lengths are drawn over [lo - 1/2, hi + 1/2] with density proportional to x^-beta, then
    rounded: beta = 1 is log-uniform (equal probability per equal ratio of lengths), beta = 0 uniform."""

    lo: int
    hi: int
    count: float

    def mean(self, beta: float) -> float:
        """The continuous mean of the draw (the rounded draw's is within a fraction of a token)."""
        if self.hi <= self.lo:
            return float(self.lo)
        a, log_r = self.lo - 0.5, math.log((self.hi + 0.5) / (self.lo - 0.5))
        t = 1.0 - beta
        return a * _ratio_integral(t + 1.0, log_r) / _ratio_integral(t, log_r)

    def at(self, v: float, beta: float) -> int:
        """The length at fraction ``v`` in [0, 1] of the bucket's probability (inverse CDF)."""
        if self.hi <= self.lo:
            return self.lo
        a, log_r = self.lo - 0.5, math.log((self.hi + 0.5) / (self.lo - 0.5))
        t = 1.0 - beta
        if abs(t) <= 1e-12:
            x = a * math.exp(v * log_r)
        else:
            y = v * math.expm1(t * log_r)
            if y <= -1.0:  # r^t underflowed (a steep density, v = 1): the top of the bucket
                return self.hi
            x = a * math.exp(math.log1p(y) / t)
        return min(self.hi, max(self.lo, math.floor(x + 0.5)))


def next_1_2_5(x: float) -> int:
    """The smallest value of vLLM's 1, 2, 5, 10, 20, 50, ... series above ``x``."""
    e = max(0, int(math.floor(math.log10(x))) - 1) if x >= 1 else 0
    while True:
        for m in (1, 2, 5):
            if m * 10 ** e > x:
                return m * 10 ** e
        e += 1


@dataclass(frozen=True, slots=True)
class LengthDistribution:
    """Token lengths as a piecewise CDF: :attr:`buckets` in order (the last one is the +Inf bucket
    with its assumed upper edge, when it holds any request), their counts, the histogram's own count
    and sum, and the within-bucket exponent :attr:`beta`. :meth:`quantile` inverts the CDF."""

    metric: str
    buckets: tuple[Bucket, ...]
    count: float  # observations (finished requests)
    total: float  # the histogram's _sum
    beta: float  # within-bucket density x^-beta, fitted to the mean
    last_edge: float  # the largest finite bucket edge
    tail_hi: int | None  # the +Inf bucket's assumed upper edge; None when it is empty
    cumulative: tuple[float, ...] = field(default=(), repr=False)  # P(X <= bucket.hi), per bucket

    @property
    def mean(self) -> float:
        """The observed mean, ``_sum / _count``."""
        return self.total / self.count

    @property
    def model_mean(self) -> float:
        """The mean of what :meth:`quantile` draws."""
        return _model_mean(self.buckets, self.beta, self.count)

    def cdf(self) -> tuple[tuple[int, float], ...]:
        """(a bucket's largest token count, the probability of a length at or below it), per bucket."""
        return tuple((b.hi, p) for b, p in zip(self.buckets, self.cumulative))

    def quantile(self, u: float) -> int:
        """The length at cumulative probability ``u`` in [0, 1): the bucket that holds ``u``, then the
        within-bucket inverse CDF."""
        i = min(bisect_right(self.cumulative, u), len(self.buckets) - 1)
        while self.buckets[i].count <= 0 and i > 0:  # u at a float edge of an empty bucket: the one below
            i -= 1
        below = self.cumulative[i - 1] if i else 0.0
        span = self.cumulative[i] - below
        v = min(max((u - below) / span, 0.0), 1.0) if span > 0 else 0.5
        return self.buckets[i].at(v, self.beta)

    def percentile(self, q: float) -> int:
        return self.quantile(min(q / 100.0, 1.0 - 1e-12))


def _model_mean(buckets: tuple[Bucket, ...] | list[Bucket], beta: float, count: float) -> float:
    return sum(b.count * b.mean(beta) for b in buckets if b.count > 0) / count


def fit_beta(buckets: tuple[Bucket, ...] | list[Bucket], count: float, mean: float) -> float:
    """The within-bucket exponent whose model mean equals ``mean`` (every bucket's mean falls as beta
    grows, so bisect), held within [BETA_MIN, BETA_MAX]."""
    lo, hi = BETA_MIN, BETA_MAX
    if _model_mean(buckets, hi, count) >= mean:
        return hi
    if _model_mean(buckets, lo, count) <= mean:
        return lo
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if _model_mean(buckets, mid, count) > mean:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def length_distribution(h: TokenHistogram, origin: str, *, max_model_len: int | None = None
                        ) -> tuple[LengthDistribution, list[str]]:
    """The piecewise CDF of ``h`` (and notes on what was assumed).

    * Bucket ``(a, b]`` of whole token counts holds ``floor(a) + 1 .. floor(b)``, at least 1 (a
      length of 0, a request aborted before its first token, is drawn as 1).
    * The +Inf bucket runs from the last edge to ``max_model_len`` when given, else to the next value
      of vLLM's 1-2-5 series: vLLM's default token buckets end at the largest 1-2-5 value <=
      max_model_len, so no request is longer than the next one.
    * Within a bucket the density is x^-beta, one beta for the whole histogram, fitted so that the
      model's mean equals ``_sum / _count`` (log-uniform, beta = 1, overstates the mean of a length
      distribution that falls across its upper buckets by 5-8% with 1-2-5 buckets).
    """
    if h.count <= 0:
        raise ConfigError(f"{origin}: {h.name} has no observations: the server has finished no request yet "
                          "(scrape it after it has served traffic)")
    buckets: list[Bucket] = []
    prev_edge, prev_cum = 0.0, 0.0
    for edge, cum in zip(h.edges, h.cumulative):
        lo = max(1, math.floor(prev_edge) + 1)
        buckets.append(Bucket(lo=lo, hi=max(lo, math.floor(edge)), count=cum - prev_cum))
        prev_edge, prev_cum = edge, cum
    last = h.edges[-1] if h.edges else 0.0
    tail_n = h.count - prev_cum
    notes: list[str] = []
    tail_hi: int | None = None
    if tail_n > 0:
        lo = max(1, math.floor(last) + 1)
        tail_hi = max(lo, max_model_len or next_1_2_5(last))
        buckets.append(Bucket(lo=lo, hi=tail_hi, count=tail_n))
        why = ("max_model_len" if max_model_len else
               "the next value of vLLM's 1-2-5 bucket series, above any max_model_len these buckets allow")
        notes.append(f"{h.name}: {tail_n:,.0f} requests ({tail_n / h.count:.2%}) are above the last bucket edge "
                     f"{last:,.0f}; they are drawn from {lo:,} to {tail_hi:,} tokens ({why})")
    beta = fit_beta(buckets, h.count, h.total / h.count)
    cumulative, acc = [], 0.0
    for b in buckets:
        acc += b.count
        cumulative.append(acc / h.count)
    dist = LengthDistribution(metric=h.name, buckets=tuple(buckets), count=h.count, total=h.total, beta=beta,
                              last_edge=last, tail_hi=tail_hi, cumulative=tuple(cumulative))
    if h.dropped_edges:
        notes.append(f"{h.name}: the label sets have different bucket edges; pooled over the {len(h.edges)} they "
                     f"share ({len(h.dropped_edges)} left out)")
    off = dist.model_mean / dist.mean - 1.0
    fit = (f"density x^-{beta:.2f} within each bucket matches it" if abs(off) < 0.005 else
           f"no within-bucket shape matches it: the model's mean is {off:+.1%} off (beta held at {beta:g})")
    notes.append(f"{h.name}: mean {dist.mean:,.1f} tokens (_sum/_count over {h.count:,.0f} requests); {fit}; "
                 f"p50 {dist.percentile(50):,}, p90 {dist.percentile(90):,}, p99 {dist.percentile(99):,}")
    return dist, notes


# --------------------------------------------------------------------------------------------
# the workload
