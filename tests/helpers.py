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
