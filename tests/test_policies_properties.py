"""Property tests for every launcher module: grids positive, splits cover each sequence, bounds hold."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decodecalc.derived import cdiv
from decodecalc.errors import UnsupportedError
from decodecalc.launchers.aiter import plan_aiter
from decodecalc.launchers.flash_attn2 import plan_flash_attn2
from decodecalc.launchers.flash_attn3 import plan_flash_attn3
from decodecalc.launchers.flashdecoding import plan_flashdecoding
from decodecalc.launchers.flashinfer import plan_flashinfer, plan_flashinfer_tc
from decodecalc.launchers.flashmla import plan_flashmla
from decodecalc.launchers.vllm_paged_attention import plan_vllm_paged_attention
from decodecalc.launchers.vllm_rocm import plan_vllm_rocm
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import ModelConfig, resolve_model
from decodecalc.workload import make_workload

GPUS = {"h200": resolve_gpu("h200"), "a100-80gb": resolve_gpu("a100-80gb"), "mi300x": resolve_gpu("mi300x"),
        "l40s": resolve_gpu("l40s")}

#: name -> (planner, extra kwargs, split cap or None)
PLANNERS = {
    "vllm-paged": (plan_vllm_paged_attention, {}, None),
    "vllm-rocm": (plan_vllm_rocm, {}, 512),
    "fa2": (plan_flash_attn2, {}, 128),
    "fa3": (plan_flash_attn3, {}, 128),
    "flashinfer": (plan_flashinfer, {}, None),
    "flashinfer-cg": (plan_flashinfer, {"cuda_graph": True}, None),
    "flashinfer-tc": (plan_flashinfer_tc, {}, None),
    "aiter": (plan_aiter, {}, 128),
    "flashdecoding": (plan_flashdecoding, {}, None),
    "flashmla": (plan_flashmla, {}, None),
}

heads = st.sampled_from([(32, 8), (8, 1), (64, 8), (16, 16), (28, 4), (40, 8), (128, 8)])
seq = st.integers(min_value=1, max_value=200_000)


@st.composite
def workloads(draw):
    mla = draw(st.booleans()) and draw(st.booleans())
    if mla:
        model = resolve_model("deepseek-v3")
        tp = draw(st.sampled_from([1, 8, 16]))
    else:
        h, h_kv = draw(heads)
        d = draw(st.sampled_from([64, 128, 256]))
        model = ModelConfig(name="prop", num_layers=2, num_attention_heads=h, num_key_value_heads=h_kv, head_dim=d,
                            attention="mha" if h == h_kv else "gqa")
        tp = 1
    n = draw(st.integers(min_value=1, max_value=40))
    lens = tuple(draw(st.lists(seq, min_size=n, max_size=n)))
    block = draw(st.sampled_from([16, 32, 64]))
    return make_workload(model, tp=tp, seq_lens=lens, block_size=block)


@pytest.mark.parametrize("name", sorted(PLANNERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=workloads(), gpu_name=st.sampled_from(sorted(GPUS)))
def test_plan_invariants(name, w, gpu_name):
    planner, kw, cap = PLANNERS[name]
    gpu = GPUS[gpu_name]
    try:
        p = planner(w, gpu, **kw)
    except UnsupportedError as exc:
        assert str(exc)  # a reason is always given
        return
    B = w.batch
    assert len(p.splits) == len(p.nonempty_splits) == len(p.tokens_per_split) == B
    for k in p.kernels:
        assert k.grid and all(x >= 1 for x in k.grid), (k.name, k.grid)
        assert 0 <= k.working_programs <= k.programs, (k.name, k.working_programs, k.programs)
    for L, s, ne, tps in zip(w.seq_lens, p.splits, p.nonempty_splits, p.tokens_per_split):
        assert 1 <= ne <= s
        assert 1 <= tps <= L
        assert ne * tps >= L, (L, ne, tps)  # the non-empty splits cover the sequence
        if cap is not None:
            assert s <= cap
    assert 0 <= p.partial_state_bytes_used
    if p.partial_state_bytes:
        assert p.partial_state_bytes_used <= p.partial_state_bytes


@settings(max_examples=40, deadline=None)
@given(L=st.integers(min_value=1, max_value=100_000), B=st.integers(min_value=1, max_value=64))
def test_fa2_uses_batch_max_blocks(L, B):
    # section 7.1: per-split block range from the batch-max length -> a short sequence in a long
    # batch has fewer non-empty splits than allocated
    w = make_workload(resolve_model("llama3-8b"), seq_lens=(L,) + (100_000,) * (B - 1))
    p = plan_flash_attn2(w, GPUS["h200"])
    per_split = p.details["n_blocks_per_split"]
    assert p.nonempty_splits[0] == cdiv(cdiv(L, 128), per_split)


@settings(max_examples=40, deadline=None)
@given(L=st.integers(min_value=1, max_value=200_000))
def test_fa3_dynamic_never_exceeds_static(L):
    w = make_workload(resolve_model("llama3-8b"), batch=1, seq_len=L)
    p = plan_flash_attn3(w, GPUS["h200"])
    assert 1 <= p.splits[0] <= p.details["num_splits_static"]
