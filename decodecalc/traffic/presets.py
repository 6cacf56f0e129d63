"""Named decode workloads built from published request-length statistics, and a parametric form.

Each preset draws requests (prompt and output lengths log-normal around the published centre, a
fixed seed) and runs them through :func:`decodecalc.traffic.requests.batch_requests` at a fixed
concurrency (``max_num_seqs`` = concurrency, every request waiting at t = 0), keeping the steady
part: the steps up to the one where the last request is admitted (the drain that follows would be
an artefact of a finite sample).

``--workload NAME`` takes a preset name, or a parametric mix
``mix:prompt=2048,output=256[,sigma=0.8][,steps=300]`` (log-normal prompt and output lengths with
these medians and log-space spread ``sigma``), with ``--concurrency`` for either.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from decodecalc.errors import ConfigError, UnknownNameError
from decodecalc.traffic.requests import DEFAULT_ACCEPTANCE_RATE, BatchingLimits, Request, batch_requests
from decodecalc.traffic.steps import StepTrace, nonempty

DEFAULT_STEPS = 300
MAX_STEPS = 1_000_000
SEED = 20261130


@dataclass(frozen=True, slots=True, kw_only=True)
class Preset:
    name: str
    description: str
    prompt_median: float  # tokens
    output_median: float
    sigma_prompt: float  # log-space standard deviation
    sigma_output: float
    concurrency: int
    max_prompt: int = 131_072
    max_output: int = 16_384
    source: str = ""


def _median_from_mean(mean: float, sigma: float) -> float:
    """A log-normal with this sigma has this mean when its median is mean / exp(sigma^2 / 2)."""
    return mean / math.exp(sigma * sigma / 2.0)


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset(name="chat", description="chat assistant (ShareGPT conversations)",
           prompt_median=_median_from_mean(161, 1.0), output_median=_median_from_mean(338, 0.9),
           sigma_prompt=1.0, sigma_output=0.9, concurrency=64,
           source="ShareGPT as used in Kwon et al., 'Efficient Memory Management for Large Language Model Serving "
                  "with PagedAttention', SOSP 2023, Fig. 11: mean input 161 tokens, mean output 338 tokens "
                  "(means quoted from the paper; the spreads sigma are decodecalc's choice)"),
    Preset(name="long-doc-qa", description="question answering over one long document (LongBench single-doc QA)",
           prompt_median=8_000, output_median=32, sigma_prompt=0.7, sigma_output=0.6, concurrency=16,
           source="LongBench (Bai et al., 'LongBench: A Bilingual, Multitask Benchmark for Long Context "
                  "Understanding', ACL 2024), Table 1: single-document QA inputs average 3.6K-18.4K words "
                  "(Qasper 3,619, MultiFieldQA-en 4,559, NarrativeQA 18,409) with short answers; median 8,000 "
                  "tokens and 32-token answers are decodecalc's reading of that range"),
    Preset(name="agentic", description="coding agent with long, growing contexts and short steps (TraceLab)",
           prompt_median=96_000, output_median=_median_from_mean(523, 1.2), sigma_prompt=0.5,
           sigma_output=1.2, concurrency=8,
           source="TraceLab (Univ. of Washington, arXiv 2606.30560; tracelab.cs.washington.edu): 357,161 agent "
                  "steps, 54.9 B input tokens, 186.9 M output tokens, i.e. a mean context of ~154K tokens and "
                  "~523 output tokens per step; contexts here are centred at 96K and capped at 128K so that they "
                  "fit a 128K-context model"),
    Preset(name="code-completion", description="code completion (Azure LLM inference trace, coding)",
           prompt_median=1_500, output_median=13, sigma_prompt=0.8, sigma_output=0.8, concurrency=32,
           source="Azure LLM inference trace 2023, coding service, as reported in Patel et al., 'Splitwise: "
                  "Efficient Generative LLM Inference Using Phase Splitting', ISCA 2024: median prompt 1,500 "
                  "tokens, median output 13 tokens (quoted from the paper)"),
)}


def _draw(rng: random.Random, median: float, sigma: float, hi: int) -> int:
    v = median * math.exp(rng.gauss(0.0, sigma)) if sigma > 0 else median
    return max(1, min(hi, int(round(v))))


def generate(preset: Preset, *, concurrency: int | None = None, steps: int = DEFAULT_STEPS, seed: int = SEED,
             max_num_batched_tokens: int = 8192, num_speculative_tokens: int = 0,
             acceptance_rate: float = DEFAULT_ACCEPTANCE_RATE) -> StepTrace:
    """About ``steps`` steady-state decode steps of ``preset`` at ``concurrency`` sequences (with
    ``num_speculative_tokens`` > 0, under the speculative model of :mod:`decodecalc.traffic.requests`)."""
    c = preset.concurrency if concurrency is None else concurrency
    from decodecalc.limits import MAX_CONCURRENCY, check_int

    check_int(c, "--concurrency", MAX_CONCURRENCY)  # tune's cost grows with it (docs/limits.md)
    if not 1 <= steps <= MAX_STEPS:
        raise ConfigError(f"steps must be between 1 and {MAX_STEPS:,}, got {steps}")
    limits = BatchingLimits(max_num_seqs=c, max_num_batched_tokens=max_num_batched_tokens,
                            num_speculative_tokens=num_speculative_tokens, acceptance_rate=acceptance_rate)
    mean_out = preset.output_median * math.exp(preset.sigma_output ** 2 / 2.0)
    per_step = 1.0 + acceptance_rate * num_speculative_tokens  # tokens a request advances per decode step
    n = max(c + 1, math.ceil(1.3 * (steps + 2 * c) * c * per_step / max(mean_out - 1.0, 1.0)) + c)
    for _ in range(8):  # long prompts spend steps in prefill: draw more requests until the steady part is long enough
        rng = random.Random(seed)
        reqs = [Request(prompt_tokens=_draw(rng, preset.prompt_median, preset.sigma_prompt, preset.max_prompt),
                        output_tokens=_draw(rng, preset.output_median, preset.sigma_output, preset.max_output))
                for _ in range(n)]
        result = batch_requests(reqs, limits, source=f"preset {preset.name}")
        if result.queue_empty_step >= steps:
            break
        n *= 2
    kept = result.trace.steps[:min(steps, max(result.queue_empty_step, 1))]
    note = (f"{preset.description}: {len(kept)} steady-state decode steps at concurrency {c} from {n} requests "
            f"(prompt median {preset.prompt_median:,.0f}, output median {preset.output_median:,.0f} tokens, "
            f"seed {seed}); source: {preset.source}")
    spec = (limits.describe_speculation(),) if num_speculative_tokens else ()
    trace = StepTrace(steps=kept, source=f"preset {preset.name}", notes=(note, *spec))
    return nonempty(trace, f"--workload {preset.name}")


#: the largest median a mix may ask for (a request trace's own bound on one request: decodecalc.traffic.traces)
MAX_MIX_TOKENS = 1 << 31
#: steps a generated mix may have (each is built as an object; 100,000 take a few seconds)
MAX_MIX_STEPS = 100_000


def parse_mix(spec: str) -> tuple[Preset, int]:
    """``mix:prompt=2048,output=256[,sigma=0.8][,steps=300]`` -> (a Preset, steps)."""
    body = spec.split(":", 1)[1] if ":" in spec else ""
    vals: dict[str, float] = {}
    for part in (p.strip() for p in body.split(",") if p.strip()):
        key, eq, raw = part.partition("=")
        key = key.strip()
        if not eq or key not in ("prompt", "output", "sigma", "steps"):
            raise ConfigError(f"--workload {spec!r}: {part!r} is not one of prompt=N, output=N, sigma=X, steps=N")
        try:
            vals[key] = float(raw)
        except ValueError:
            raise ConfigError(f"--workload {spec!r}: {key}={raw!r} is not a number") from None
        if not math.isfinite(vals[key]):
            raise ConfigError(f"--workload {spec!r}: {key}={raw.strip()} is not a finite number")
    for key in ("prompt", "output"):
        if key not in vals:
            raise ConfigError(f"--workload {spec!r}: give {key}=<median tokens>, e.g. mix:prompt=2048,output=256")
        if not 1 <= vals[key] <= MAX_MIX_TOKENS:
            raise ConfigError(f"--workload {spec!r}: {key} must be 1 to {MAX_MIX_TOKENS:,} tokens (a median), got "
                              f"{vals[key]:g}")
    sigma = vals.get("sigma", 0.8)
    if not 0 <= sigma <= 3:
        raise ConfigError(f"--workload {spec!r}: sigma must be between 0 and 3, got {sigma:g}")
    steps = vals.get("steps", DEFAULT_STEPS)
    if steps != int(steps) or not 1 <= steps <= MAX_MIX_STEPS:
        raise ConfigError(f"--workload {spec!r}: steps must be an integer from 1 to {MAX_MIX_STEPS:,}, got {steps:g} "
                          "(a generated mix builds every step; a larger workload is a request trace: --requests)")
    preset = Preset(name="mix", description="parametric mix", prompt_median=vals["prompt"],
                    output_median=vals["output"], sigma_prompt=sigma, sigma_output=sigma, concurrency=32,
                    source="parametric (log-normal lengths)")
    return preset, int(steps)


def workload(name: str, *, concurrency: int | None = None, max_num_batched_tokens: int = 8192,
             num_speculative_tokens: int = 0, acceptance_rate: float = DEFAULT_ACCEPTANCE_RATE) -> StepTrace:
    """``--workload NAME``: a preset, or ``mix:...``."""
    key = name.strip().lower()
    steps = DEFAULT_STEPS
    if key.startswith("mix"):
        preset, steps = parse_mix(name)
    elif key in PRESETS:
        preset = PRESETS[key]
    else:
        raise UnknownNameError("workload preset", name, list(PRESETS) + ["mix:prompt=N,output=N"])
    return generate(preset, concurrency=concurrency, steps=steps, max_num_batched_tokens=max_num_batched_tokens,
                    num_speculative_tokens=num_speculative_tokens, acceptance_rate=acceptance_rate)
