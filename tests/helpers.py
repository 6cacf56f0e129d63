"""Shared builders for tests: a model of any head configuration, and the GPUs the references use."""

from __future__ import annotations

import dataclasses

from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import ModelConfig
from decodecalc.workload import make_workload

H200 = resolve_gpu("h200")  # 132 SMs, compute capability 9.0 (the references' "132 SMs, e.g. H100 SXM / H200")


def model(h: int, h_kv: int, d: int = 128, layers: int = 1, **kw) -> ModelConfig:
    return ModelConfig(name=f"m{h}x{h_kv}x{d}", num_layers=layers, num_attention_heads=h,
                       num_key_value_heads=h_kv, head_dim=d, **kw)


LLAMA3_8B = model(32, 8, layers=32)
LLAMA3_70B = model(64, 8, layers=80)


def work(m: ModelConfig = LLAMA3_8B, **kw):
    return make_workload(m, **kw)


def gpu(sms: int = 132, **changes):
    return dataclasses.replace(H200, num_sms=sms, **changes)


def modules_loaded_by(code: str, *, packages: tuple[str, ...]) -> list[str]:
    """Run ``code`` in a fresh interpreter (it must exit 0) and return the modules it left loaded that are, or lie
    under, one of ``packages`` (sorted)."""
    import json
    import subprocess
    import sys

    probe = (f"{code}\nimport json as _json, sys as _sys\n"
             f"_p = {tuple(packages)!r}\n"
             "print(_json.dumps(sorted(m for m in _sys.modules if any(m == p or m.startswith(p + '.') for p in _p))))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def random_steps_trace(seed: int, n: int = 120, max_len: int = 70000,
                       batches: tuple[int, ...] = (1, 2, 3, 5, 8, 13, 16, 31, 64, 100)):
    """A StepTrace of ``n`` decode steps of random batches (from ``batches``) and KV lengths up to ``max_len``, weights
    1 or 3: every step a distinct shape."""
    import random

    from decodecalc.traffic import DecodeStep, StepTrace

    rng = random.Random(seed)
    out = []
    for k in range(n):
        b = rng.choice(batches)
        out.append(DecodeStep(seq_lens=tuple(rng.randint(1, max_len) for _ in range(b)), query_lens=(1,) * b,
                              weight=rng.choice([1, 1, 3]), origin=f"r, line {k + 1}"))
    return StepTrace(steps=tuple(out), source="random")


def fit_without_inherited(fit: dict) -> dict:
    """A calibrated profile's ``fit`` without what rides along from the starting (packaged) profile and moves when
    that one's does: the default backends' records (bf16 and fp8), the kernels' own domains, what was measured outside
    the domain, the expected error kept with its physics (--keep-physics), and the backend families' entries of the
    uncalibrated list."""
    from decodecalc.launchers.registry import BACKEND_SPECS, TIMED_BACKENDS

    backend = {f for b in TIMED_BACKENDS for f in BACKEND_SPECS[b].families}
    out = {k: v for k, v in fit.items()
           if k not in ("backend_families", "backend_fp8_families", "kernel_domains", "outside_domain",
                        "expected_error", "xqa_calibration")}
    if "uncalibrated_families" in out:
        out["uncalibrated_families"] = sorted(set(out["uncalibrated_families"]) - backend)
    return out


def trace_error(path, **kw) -> str:
    """The one-line ConfigError message reading the request trace ``path`` raises (it names the file)."""
    import pytest

    from decodecalc.errors import ConfigError
    from decodecalc.traffic.traces import read_requests

    with pytest.raises(ConfigError) as e:
        read_requests(path, **kw)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg, msg
    return msg


def vllm_scrape(le: str = "1000.0") -> str:
    """A small vLLM /metrics exposition: prompt and output length histograms of 10 requests (the prompts' middle
    bucket edge ``le``) and 8 running."""
    return ('# TYPE vllm:request_prompt_tokens histogram\n'
            'vllm:request_prompt_tokens_bucket{le="100.0",model_name="m"} 5.0\n'
            f'vllm:request_prompt_tokens_bucket{{le="{le}",model_name="m"}} 10.0\n'
            'vllm:request_prompt_tokens_bucket{le="+Inf",model_name="m"} 10.0\n'
            'vllm:request_prompt_tokens_count{model_name="m"} 10.0\n'
            'vllm:request_prompt_tokens_sum{model_name="m"} 3000.0\n'
            '# TYPE vllm:request_generation_tokens histogram\n'
            'vllm:request_generation_tokens_bucket{le="100.0",model_name="m"} 10.0\n'
            'vllm:request_generation_tokens_bucket{le="+Inf",model_name="m"} 10.0\n'
            'vllm:request_generation_tokens_count{model_name="m"} 10.0\n'
            'vllm:request_generation_tokens_sum{model_name="m"} 300.0\n'
            '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 8.0\n')
