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

CUDA = ("h200", "a100-80gb", "l40s")
#: query heads per KV head the CUDA-core decode kernel is compiled for (flashinfer 0.7.2.post1
#: include/flashinfer/utils.cuh L142-167 DISPATCH_GQA_GROUP_SIZE)
FI_GROUPS = (1, 2, 3, 4, 6, 8, 16)
#: what each planner serves (from its own checks), so that the invariants are tested on launches and not on
#: refusals: MLA or not, GPUs, head dims, page sizes, longest sequence, uniform lengths (FA3 non-varlen)
DOMAINS: dict[str, dict] = {
    "vllm-paged": dict(gpus=CUDA, dims=(64, 128, 256), blocks=(8, 16, 32)),
    "vllm-rocm": dict(gpus=("mi300x",), dims=(64, 128), blocks=(16, 32), max_len=128 * 1024),
    "fa2": dict(gpus=CUDA, dims=(64, 128, 256), blocks=(16, 32, 64, 256)),
    "fa3": dict(gpus=("h200",), dims=(64, 128, 256), blocks=(16, 32, 64), uniform=True),
    "flashinfer": dict(gpus=CUDA, dims=(64, 128, 256), blocks=(16, 32, 64), groups=FI_GROUPS),
    "flashinfer-cg": dict(gpus=CUDA, dims=(64, 128, 256), blocks=(16, 32, 64), groups=FI_GROUPS),
    "flashinfer-tc": dict(gpus=CUDA, dims=(64, 128, 256), blocks=(16, 32, 64)),
    "aiter": dict(gpus=("mi300x",), dims=(64, 128, 256), blocks=(16, 32, 64)),
    "flashdecoding": dict(gpus=tuple(GPUS), dims=(64, 128, 256), blocks=(16, 32, 64)),
    "flashmla": dict(gpus=("h200",), blocks=(64,), mla=True),
}


@st.composite
def domain_workloads(draw, name: str):
    """(workload, GPU name) inside the domain of planner ``name``."""
    dom = DOMAINS[name]
    if dom.get("mla"):
        model = resolve_model(draw(st.sampled_from(["deepseek-v3", "deepseek-v2-lite"])))
        tp = draw(st.sampled_from([1, 8, 16]))
    else:
        h, h_kv = draw(heads.filter(lambda hk: hk[0] // hk[1] in dom.get("groups", (hk[0] // hk[1],))))
        d = draw(st.sampled_from(dom["dims"]))
        model = ModelConfig(name="prop", num_layers=2, num_attention_heads=h, num_key_value_heads=h_kv, head_dim=d,
                            attention="mha" if h == h_kv else "gqa")
        tp = 1
    n = draw(st.integers(min_value=1, max_value=40))
    lens_of = st.integers(min_value=1, max_value=dom.get("max_len", 200_000))
    if dom.get("uniform"):
        lens = (draw(lens_of),) * n
    else:
        lens = tuple(draw(st.lists(lens_of, min_size=n, max_size=n)))
    block = draw(st.sampled_from(dom["blocks"]))
    return make_workload(model, tp=tp, seq_lens=lens, block_size=block), draw(st.sampled_from(dom["gpus"]))


@pytest.mark.parametrize("name", sorted(PLANNERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_plan_invariants(name, data):
    planner, kw, cap = PLANNERS[name]
    w, gpu_name = data.draw(domain_workloads(name))
    gpu = GPUS[gpu_name]
    try:
        p = planner(w, gpu, **kw)
    except UnsupportedError as exc:  # only the compiled-variant gaps left inside the domain (e.g. FlashInfer groups)
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


@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_domains_reach_the_planners(name):
    """The domain strategies produce launches, not refusals: most drawn inputs are planned."""
    planner, kw, _ = PLANNERS[name]
    served = refused = 0

    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def draw(data):
        nonlocal served, refused
        w, gpu_name = data.draw(domain_workloads(name))
        try:
            planner(w, GPUS[gpu_name], **kw)
            served += 1
        except UnsupportedError:
            refused += 1
    draw()
    assert served >= 3 * refused, (name, served, refused)


@settings(max_examples=40, deadline=None)
@given(L=st.integers(min_value=1, max_value=100_000), B=st.integers(min_value=1, max_value=64))
def test_fa2_uses_batch_max_blocks(L, B):
    # section 7.1: per-split block range from the batch-max length -> a short sequence in a long
    # batch has fewer non-empty splits than allocated
    w = make_workload(resolve_model("llama3-8b"), seq_lens=(L,) + (100_000,) * (B - 1))
    p = plan_flash_attn2(w, GPUS["h200"])
    per_split = p.details.n_blocks_per_split
    assert p.nonempty_splits[0] == cdiv(cdiv(L, 128), per_split)


@settings(max_examples=40, deadline=None)
@given(L=st.integers(min_value=1, max_value=200_000))
def test_fa3_dynamic_never_exceeds_static(L):
    w = make_workload(resolve_model("llama3-8b"), batch=1, seq_len=L)
    p = plan_flash_attn3(w, GPUS["h200"])
    assert 1 <= p.splits[0] <= p.details.num_splits_static
