"""SGLang Triton decode: upstream-launchers.md section 2 worked examples and section 4 rules.

Source: shared/reference/upstream-launchers.md sections 2.1-2.3 and 4 (SGLang 0.5.23 wheel source:
kernels/ops/attention/metadata.py L8-60, decode_attention.py, srt/layers/attention/triton_backend.py).
"""

from __future__ import annotations

import pytest
from helpers import H200, LLAMA3_8B, LLAMA3_70B, gpu, model, work

from decodecalc.errors import ConfigError, UnsupportedError
from decodecalc.launchers.sglang_triton import (
    SglangSettings,
    ext_device_core_count,
    get_num_kv_splits,
    kv_len_per_split,
    plan_sglang,
    stage1_grid,
)


def plan(w, g=H200, **kw):
    return plan_sglang(w, g, SglangSettings(**kw))


def test_2_1_llama3_8b():
    p = plan(work(LLAMA3_8B, batch=1))
    assert p.stage1_grid == (1, 8, 8) and p.stage2_grid == (1, 32)
    assert p.num_kv_splits == (8,) and p.kv_len_per_split == (320,)
    # partial state per (token, head): 8 * (512 + 4) = 4128 B
    assert p.plan.partial_state_bytes == 32 * 4128


def test_2_2_70b_tp8():
    p = plan(work(LLAMA3_70B, tp=8, batch=1))
    assert p.stage1_grid == (1, 1, 8) and p.stage2_grid == (1, 8)
    assert p.num_kv_splits == (8,) and p.kv_len_per_split == (320,)


@pytest.mark.parametrize("b,splits,length", [(1, 8, 320), (8, 8, 320), (13, 7, 384), (14, 7, 384), (16, 6, 448),
                                             (17, 6, 448), (32, 3, 864), (64, 2, 1280)])
def test_2_3_batch_sweep(b, splits, length):
    p = plan(work(LLAMA3_8B, batch=b))
    assert p.stage1_grid == (b, 8, 8)
    assert set(p.num_kv_splits) == {splits} and set(p.kv_len_per_split) == {length}


def test_mha_grid_uses_every_head():
    assert stage1_grid(3, 32, 32, 8) == (3, 32, 8)
    p = plan(work(model(32, 32), batch=2))
    assert p.stage1_grid == (2, 32, 8) and p.plan.kernels[0].name == "_fwd_kernel_stage1"


def test_uniformity_snap_and_skewed_batch():
    # Lmax < 1.25 Lmin snaps Lmin to Lmax: c1 = Lmax, only the SM-count chunk c2 = cdiv(1200, 8) = 150 splits
    assert get_num_kv_splits((1000, 1200), num_head=32, num_kv_head=8, device_core_count=132, max_kv_splits=8) == (7, 8)
    # skewed batch of 64: m2 = cdiv(int(132 * log2(125)) = 919, 512) = 2 would give the long sequence 2 splits;
    # the c1 term (chunk cdiv(8000, min(cdiv(8000, 2000), 8)) = 2000) gives it 4
    lens = (2000,) * 63 + (8000,)
    s = get_num_kv_splits(lens, num_head=32, num_kv_head=8, device_core_count=132, max_kv_splits=8)
    assert s[-1] == 4 and s[0] == 1


def test_ext_float32_truncation():
    assert ext_device_core_count(2560, 132) == 702  # floor(132 * log2(40))
    assert ext_device_core_count(64, 132) == 132  # log2(1) = 0 -> max(., 1)
    assert ext_device_core_count(32, 132) == 132


def test_split_length_rounded_to_32_and_empty_splits():
    assert kv_len_per_split(100, 8) == 32  # cdiv(100, 8) = 13 -> 32
    p = plan(work(LLAMA3_8B, batch=1, seq_len=100))
    assert p.nonempty_splits[0] == 4 and p.num_kv_splits[0] >= 4


def test_deterministic_split_tile_256():
    p = plan(work(LLAMA3_8B, batch=3, seq_len=2560), deterministic=True)
    assert p.num_kv_splits == (10, 10, 10) and p.max_kv_splits == 10 and p.mode == "deterministic"
    # batch-invariant: the same request has the same split count in any batch
    assert plan(work(LLAMA3_8B, batch=40, seq_len=2560), deterministic=True).num_kv_splits[0] == 10


def test_static_splits_and_amd_default_16():
    assert plan(work(LLAMA3_8B, batch=64), static_kv_splits=True).num_kv_splits == (8,) * 64
    amd = gpu(304, vendor="amd", compute_capability=None, gfx_arch="gfx942")
    assert plan(work(LLAMA3_8B, batch=1), amd).max_kv_splits == 16


def test_mla_max_kv_splits():
    mla = model(128, 128, d=192, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                v_head_dim=128)
    p = plan(work(mla, tp=8, batch=1, seq_len=4096))
    # max(8, min(np2(132) = 256, np2(cdiv(4096, 32)) = 128)) = 128; g = 16 -> one head tile
    assert p.max_kv_splits == 128 and p.stage1_grid[1] == 1
    assert plan(work(mla, tp=1, batch=1, seq_len=4096)).stage1_grid[1] == 8


def test_cuda_graph_padding_raises_splits():
    # padded rows carry seq_len 1, so Lmin = 1 and c1 = cdiv(Lmax, max_kv_splits)
    plain = plan(work(LLAMA3_8B, batch=30, seq_len=2560))
    padded = plan(work(LLAMA3_8B, batch=30, seq_len=2560), padded_batch=32)
    assert plain.num_kv_splits[0] < padded.num_kv_splits[0] == 8 and padded.padded_rows == 2


def test_prefill_is_not_split():
    with pytest.raises(UnsupportedError, match="extend"):
        plan(work(LLAMA3_8B, batch=2, num_speculative_tokens=2))


def test_bad_max_kv_splits():
    with pytest.raises(ConfigError):
        SglangSettings(max_kv_splits=0)
