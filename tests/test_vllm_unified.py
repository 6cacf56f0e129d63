"""vLLM Triton unified attention: the worked examples and CUDA-graph tables of upstream-launchers.md.

Source: shared/reference/upstream-launchers.md, section 2 (worked examples, 132 SMs, N = 1024,
M = 8192, model runner V2, FULL_AND_PIECEWISE) and section 3 (vLLM 0.33.0 wheel source with lines).
"""

from __future__ import annotations

import pytest
from helpers import H200, LLAMA3_8B, LLAMA3_70B, gpu, model, work

from decodecalc.errors import UnsupportedError
from decodecalc.launchers import vllm_cudagraphs as cg
from decodecalc.launchers.vllm_unified import (
    VllmSettings,
    build_backend,
    get_tile_size,
    plan_vllm,
    unified_attention_grid,
)


def plan(w, g=H200, **kw):
    return plan_vllm(w, g, VllmSettings(**kw))


# --- section 2.1 / 2.2 -------------------------------------------------------------------------------

def test_2_1_v33_llama3_8b():
    p = plan(work(LLAMA3_8B, batch=1))
    assert p.launch.grid == (1, 8, 16) and p.launch.reduce_grid == (1, 32)
    assert p.tiles_per_segment == (10,) and p.plan.tokens_per_split == (160,)
    # scratch min(16, max_num_seqs) x 32 x 16 x 128 fp32 (~4.06 MiB... table: 4 MiB) + 2 x 32 KiB
    assert p.plan.scratch_bytes == 16 * 32 * 16 * 128 * 4 + 2 * 16 * 32 * 16 * 4


def test_2_1_fp8_kv_quantizes_query_tile_32():
    p = plan(work(LLAMA3_8B, batch=1, kv_cache_dtype="fp8"))
    assert p.launch.grid == (1, 8, 16) and p.launch.tile_size == 32 and p.tiles_per_segment == (5,)
    assert p.plan.tokens_per_split == (160,)


def test_fp8_on_rocm_keeps_tile_16():
    # on ROCm the query is not quantized (triton_attn.py L554-558) -> TILE_DECODE 16
    p = plan(work(LLAMA3_8B, batch=1, kv_cache_dtype="fp8"), gpu(304, vendor="amd", compute_capability=None))
    assert p.launch.tile_size == 16


def test_2_1_v11_rule():
    p = plan(work(LLAMA3_8B, batch=1), version="0.11.0")
    assert p.launch.grid == (1, 8, 16) and p.launch.reduce_grid == (1, 32)


def test_2_2_v33_70b_tp8():
    p = plan(work(LLAMA3_70B, tp=8, batch=1))
    assert p.launch.block_m == 16 and p.launch.block_q == 2
    assert p.launch.grid == (1, 1, 16) and p.launch.reduce_grid == (1, 8)
    assert p.backend.seq_threshold_3D == 128
    # scratch min(128, max_num_seqs) x 8 x 16 x 128 fp32 ~ 8.1 MiB
    assert round(p.plan.scratch_bytes / 2**20, 1) == 8.1


# --- section 2.3: batch sweep, Llama-3-8B, L = 2560 --------------------------------------------------

@pytest.mark.parametrize("b,unpadded,replay_b,replay_grid,v11_3d", [
    (1, (1, 8, 16), 1, (1, 8, 16), True),
    (8, (10, 8, 16), 8, (10, 8, 16), True),
    (13, (16, 8, 16), 16, (20, 8, 16), True),
    (14, (17, 8, 16), 16, (20, 8, 16), False),
    (16, (20, 8, 16), 16, (20, 8, 16), False),
    (17, (21, 8), 24, (30, 8), False),
    (32, (40, 8), 32, (40, 8), False),
    (64, (80, 8), 64, (80, 8), False),
])
def test_2_3_batch_sweep(b, unpadded, replay_b, replay_grid, v11_3d):
    p = plan(work(LLAMA3_8B, batch=b))
    assert p.launch.grid == unpadded
    assert p.replay is not None and p.replay.num_reqs_padded == replay_b and p.replay.launch.grid == replay_grid
    assert plan(work(LLAMA3_8B, batch=b), version="0.11.0").launch.use_3d is v11_3d


def test_2_3_batch_17_2d_uses_tile_32():
    assert plan(work(LLAMA3_8B, batch=17)).launch.tile_size == 32


def test_2_3_batch_16_has_4_idle_q_block_programs():
    p = plan(work(LLAMA3_8B, batch=16), cudagraph_mode="NONE")
    assert p.launch.total_num_q_blocks - 16 == 4
    assert p.plan.main.working_programs == 16 * 8 * 16


# --- section 3.1 (a)(e) ------------------------------------------------------------------------------

@pytest.mark.parametrize("qpk,block_m,block_q", [(1, 16, 16), (4, 16, 4), (7, 16, 2), (8, 16, 2), (16, 16, 1),
                                                  (20, 32, 1), (64, 64, 1), (128, 128, 1)])
def test_block_m_block_q(qpk, block_m, block_q):
    la = unified_attention_grid(num_tokens=1, seq_lens=(100,), query_lens=(1,), num_heads=qpk, num_kv_heads=1,
                                head_size=128, q_dtype_bytes=2, sliding_window=None, seq_threshold_3D=128,
                                num_par_softmax_segments=16, scratch_rows=128, batch_invariant=False)
    assert (la.block_m, la.block_q) == (block_m, block_q)


@pytest.mark.parametrize("d,window,elem,prefill,tile", [
    (128, 0, 2, False, 16), (128, 0, 1, False, 32), (128, 0, 4, False, 16), (128, 0, 2, True, 32),
    (128, 1024, 2, False, 32), (256, 1024, 2, False, 32), (64, 1024, 2, False, 16), (128, 4096, 2, False, 16),
])
def test_tile_size(d, window, elem, prefill, tile):
    assert get_tile_size(d, window, elem, prefill) == tile


def test_gemma3_sliding_layer_tile_32():
    gemma = model(32, 16, sliding_window=1024, sliding_window_pattern=6)
    p = plan_vllm(work(gemma, batch=1, seq_len=4096), H200, VllmSettings(), layer="sliding")
    assert p.launch.use_3d and p.launch.tile_size == 32


def test_spec_decode_up_to_8_tokens_stays_3d():
    p = plan(work(LLAMA3_8B, batch=2, num_speculative_tokens=3))
    assert p.launch.use_3d  # 2 * cdiv(4, 4) = 2 <= 16
    p = plan(work(LLAMA3_8B, batch=2, num_speculative_tokens=8))
    assert not p.launch.use_3d and any("MAX_3D_QUERY_LEN" in r for r in p.launch.reasons_2d)


def test_batch_invariance_forces_2d():
    p = plan(work(LLAMA3_8B, batch=1), batch_invariant=True)
    assert not p.launch.use_3d and p.launch.reasons_2d == ("batch invariance: VLLM_BATCH_INVARIANT=1",)


def test_v14_has_no_batch_invariance_gate():
    assert plan(work(LLAMA3_8B, batch=1), version="0.14.0", batch_invariant=True).launch.use_3d


def test_mla_is_unsupported():
    mla = model(128, 128, d=192, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64)
    with pytest.raises(UnsupportedError, match="MLA"):
        plan(work(mla, tp=8, batch=1))


def test_sm120_64_segments():
    # compute capability 12.0: max_seqs_64_segments = (SM - 1) // (16 * h_kv) (triton_attn.py L152-162)
    g = gpu(188, compute_capability=(12, 0))
    p = plan(work(LLAMA3_70B, tp=8, batch=1))
    assert p.launch.num_segments == 16
    p = plan_vllm(work(LLAMA3_70B, tp=8, batch=1), g, VllmSettings())
    assert p.backend.max_seqs_64_segments == 187 // 16 == 11
    assert p.launch.grid == (1, 1, 64)
    # more requests than max_seqs_64_segments: 16-segment view of the same buffer
    p = plan_vllm(work(LLAMA3_70B, tp=8, batch=12), g, VllmSettings())
    assert p.launch.grid[2] == 16


# --- section 3.3: capture sizes, threshold snapping, padding ------------------------------------------

@pytest.mark.parametrize("n,m,expected_head,expected_max", [
    (1, 8192, [1, 2], 2),
    (4, 8192, [1, 2, 4, 8], 8),
    (8, 8192, [1, 2, 4, 8, 16], 16),
    (16, 8192, [1, 2, 4, 8, 16, 24, 32], 32),
    (48, 8192, [1, 2, 4, 8, 16, 24], 96),
    (1024, 8192, [1, 2, 4, 8, 16, 24], 512),
])
def test_3_3_capture_sizes(n, m, expected_head, expected_max):
    sizes = cg.capture_sizes(max_num_seqs=n, max_num_batched_tokens=m)
    assert list(sizes[:len(expected_head)]) == expected_head and max(sizes) == expected_max


def test_3_3_capture_sizes_n100_appends_100_and_n96_m200():
    assert 100 in cg.capture_sizes(max_num_seqs=100, max_num_batched_tokens=8192)
    sizes = cg.capture_sizes(max_num_seqs=96, max_num_batched_tokens=200)
    assert max(sizes) == 192 and 200 not in sizes


def test_3_3_capture_sizes_cc10_and_interactivity():
    assert max(cg.capture_sizes(max_num_seqs=1024, max_num_batched_tokens=8192, compute_capability_major=10)) == 1024
    s = cg.capture_sizes(max_num_seqs=1024, max_num_batched_tokens=8192, performance_mode="interactivity")
    assert s[:33] == tuple(range(1, 33)) + (40,)


def test_3_3_capture_sizes_k2_adds_multiples_of_3():
    s = set(cg.capture_sizes(max_num_seqs=1024, max_num_batched_tokens=8192, num_speculative_tokens=2))
    assert {3, 6, 12, 264, 312, 360, 408, 456, 504} <= s


def test_3_3_v1_rounding_k2():
    sizes = cg.capture_sizes(max_num_seqs=1024, max_num_batched_tokens=8192, num_speculative_tokens=2)
    r = cg.round_sizes_for_spec_decode(sizes, 3)
    assert r[:12] == (3, 6, 9, 12, 18, 24, 33, 42, 48, 57, 66, 72) and r[-1] == 504


@pytest.mark.parametrize("h_kv,v2", [(1, 128), (2, 64), (3, 40), (4, 32), (6, 24), (8, 16), (10, 8), (32, 4)])
def test_3_3_b_threshold_v2(h_kv, v2):
    be = build_backend(work(model(h_kv * 4, h_kv), batch=1), H200, VllmSettings())
    assert be.seq_threshold_3D == v2


@pytest.mark.parametrize("h_kv,k,v1", [(1, 2, 129), (1, 4, 130), (1, 5, 132), (1, 6, 126), (1, 8, 126),
                                       (2, 2, 66), (3, 8, 45), (4, 5, 36), (8, 4, 20), (8, 6, 14), (10, 8, 9),
                                       (32, 2, 3), (32, 8, 9)])
def test_3_3_b_threshold_v1_spec(h_kv, k, v1):
    be = build_backend(work(model(h_kv * 4, h_kv), batch=1, num_speculative_tokens=k), H200,
                       VllmSettings(model_runner="v1", num_speculative_tokens=k))
    assert be.seq_threshold_3D == v1


@pytest.mark.parametrize("n,t1,t8", [(1, 2, 2), (4, 8, 8), (8, 16, 16), (16, 32, 16), (24, 48, 16), (48, 96, 16)])
def test_3_3_b_threshold_small_n(n, t1, t8):
    assert build_backend(work(model(8, 1), batch=1), H200, VllmSettings(max_num_seqs=n)).seq_threshold_3D == t1
    assert build_backend(work(model(32, 8), batch=1), H200, VllmSettings(max_num_seqs=n)).seq_threshold_3D == t8


def test_3_3_none_and_piecewise_keep_raw_threshold():
    assert build_backend(work(model(40, 10), batch=1), H200, VllmSettings(cudagraph_mode="NONE")).seq_threshold_3D == 12
    assert build_backend(work(model(40, 10), batch=1), H200,
                         VllmSettings(cudagraph_mode="PIECEWISE")).seq_threshold_3D == 12


@pytest.mark.parametrize("b,mode,b_pad", [(13, "FULL", 16), (17, "FULL", 24), (257, "FULL", 272), (513, "eager", None)])
def test_3_3_c_padding_k0(b, mode, b_pad):
    r = cg.dispatch(query_lens=(1,) * b, sizes=cg.capture_sizes(max_num_seqs=1024, max_num_batched_tokens=8192),
                    mode="FULL_AND_PIECEWISE", q=1, max_num_seqs=1024)
    assert r.mode == mode
    if b_pad:
        assert r.num_reqs_padded == b_pad


@pytest.mark.parametrize("b,mode,b_pad,t_pad", [(41, "FULL", 43, 129), (42, "FULL", 43, 129),
                                               (169, "PIECEWISE", 169, 507), (170, "PIECEWISE", 170, 510),
                                               (171, "eager", 171, 513)])
def test_3_3_c_padding_k2(b, mode, b_pad, t_pad):
    sizes = cg.capture_sizes(max_num_seqs=1024, max_num_batched_tokens=8192, num_speculative_tokens=2)
    r = cg.dispatch(query_lens=(3,) * b, sizes=sizes, mode="FULL_AND_PIECEWISE", q=3, max_num_seqs=1024)
    assert (r.mode, r.num_reqs_padded, r.num_tokens_padded) == (mode, b_pad, t_pad)


def test_3_3_ragged_query_lengths_run_unpadded():
    # "uniform decode" means one common query length; ragged KV lengths still replay a FULL graph
    assert plan(work(LLAMA3_8B, seq_lens=(100, 2000, 3000))).replay_mode == "FULL"
    p = plan(work(LLAMA3_8B, seq_lens=(100, 2000, 3000), query_lens=(1, 2, 1)))
    assert p.replay_mode == "PIECEWISE" and p.replay is None


@pytest.mark.parametrize("runner,h,h_kv,k,bs,b_pad,t_pad", [
    ("v2", 16, 1, 2, (41, 42), 43, 129),
    ("v2", 16, 1, 4, (25,), 26, 130),
    ("v2", 16, 1, 5, (21,), 22, 132),
    ("v2", 64, 4, 2, (9, 10), 11, 33),
    ("v2", 64, 8, 5, (5,), 6, 36),
    ("v1", 32, 8, 2, (17, 18), 19, 57),
    ("v1", 32, 8, 5, (9,), 10, 60),
    ("v1", 8, 1, 4, (43,), 44, 220),
])
def test_3_3_e_unpadded_3d_replay_2d(runner, h, h_kv, k, bs, b_pad, t_pad):
    for b in bs:
        p = plan(work(model(h, h_kv), batch=b, num_speculative_tokens=k), model_runner=runner,
                 num_speculative_tokens=k)
        assert p.launch.use_3d, (b, p.launch.reasons_2d)
        assert p.replay is not None and (p.replay.num_reqs_padded, p.replay.num_tokens_padded) == (b_pad, t_pad)
        assert not p.replay.launch.use_3d


def test_full_mode_captures_with_t_pad_query_len():
    # mode FULL: graphs captured with max_query_len = T_pad, so T_pad > 8 is 2D whatever the threshold
    p = plan(work(LLAMA3_8B, batch=9), cudagraph_mode="FULL")
    assert p.replay is not None and p.replay.num_tokens_padded == 16 and not p.replay.launch.use_3d
    p = plan(work(LLAMA3_8B, batch=3), cudagraph_mode="FULL")
    assert p.replay is not None and p.replay.launch.use_3d


def test_padded_replay_programs_of_padding_do_no_work():
    p = plan(work(LLAMA3_8B, batch=13))
    assert p.replay is not None
    assert p.replay.plan.main.programs == 20 * 8 * 16
    assert p.replay.plan.main.working_programs == 13 * 8 * 16
