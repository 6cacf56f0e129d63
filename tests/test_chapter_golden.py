"""Every number of the reference chapter, as golden tests.

Source: shared/reference/decode-attention-chapter.txt ("Decode attention: FlashDecoding, split-K,
paged kernels"); the section named in each test is the chapter's heading. The chapter quotes vLLM's
Triton unified attention and SGLang's Triton decode; the launch models mirror vLLM 0.33.0 and
SGLang 0.5.23, which agree with it on every number below.
"""

from __future__ import annotations

import pytest
from helpers import H200, LLAMA3_8B, LLAMA3_70B, gpu, model, work

from decodecalc.launchers import sglang_triton, vllm_unified
from decodecalc.reports.grid import grid_report, paging_figures
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.errors import ConfigError


def vllm(w, g=H200, **settings):
    return grid_report(w, g, systems=("vllm",), vllm=vllm_unified.VllmSettings(**settings)).systems[0].data


def sglang(w, g=H200, **settings):
    return grid_report(w, g, systems=("sglang",), sglang=sglang_triton.SglangSettings(**settings)).systems[0].data


# --- opening: "Here is the grid" / "Work it for Llama-3-8B" --------------------------------------

def test_llama3_8b_block_m_16_block_q_4():
    d = vllm(work(LLAMA3_8B, batch=1))
    assert (d["block_m"], d["block_q"], d["num_queries_per_kv"]) == (16, 4, 4)


@pytest.mark.parametrize("b", [1, 2, 3, 4, 5, 8, 16, 17, 64])
def test_2d_grid_holds_floor_b_over_4_plus_b_times_8(b):
    # "the 2D grid holds (floor(B/4) + B) x 8 blocks"
    d = vllm(work(LLAMA3_8B, batch=b), cudagraph_mode="NONE")
    assert d["g_2d"] == (b // 4 + b) * 8


def test_batch_1_uses_6_percent():
    # "Batch 1 uses 6% of the GPU": the unsplit grid has 8 programs on 132 SMs
    d = vllm(work(LLAMA3_8B, batch=1))
    assert d["g_2d"] == 8 and round(100 * d["g_2d"] / 132) == 6


def test_70b_tp8_block_q_2_and_one_block():
    # "Llama-3-70B on TP=8 gives each rank h = 8, h_kv = 1, so BLOCK_Q = 2 and the batch-1 2D grid is one
    # thread block on 132 SMs — the same 0.76% figure"
    d = vllm(work(LLAMA3_70B, tp=8, batch=1))
    assert d["block_q"] == 2 and d["g_2d"] == 1
    assert round(100 * d["g_2d"] / 132, 2) == 0.76


# --- "The grid" ------------------------------------------------------------------------------------

def test_llama3_8b_s_star_17_and_fixed_16_lands_on_128_sms():
    d = vllm(work(LLAMA3_8B, batch=1))
    assert d["s_star"] == 17
    assert d["num_segments"] == 16 and d["working_programs"] == 128
    assert d["sm_coverage"]["programs_working"] == 128 and d["sm_coverage"]["num_sms"] == 132


def test_70b_tp8_s_star_132_and_fixed_16_gives_16_blocks():
    d = vllm(work(LLAMA3_70B, tp=8, batch=1))
    assert d["g_2d"] == 1 and d["s_star"] == 132
    assert d["programs"] == 16 and d["working_programs"] == 16


# --- "Segment length, and the early exit" ----------------------------------------------------------

@pytest.mark.parametrize("s", [1, 100, 255, 256, 257, 512, 1000, 2560, 4096, 131072])
def test_segment_covers_16_ceil_s_over_256_keys(s):
    # "each segment covers 16 ceil(s/256) keys, and the number of segments that actually do work is
    # ceil(s / (16 ceil(s/256)))"
    from math import ceil

    tps = vllm_unified.tiles_per_segment(s, 16, 16)
    assert tps * 16 == 16 * ceil(s / 256)
    assert vllm_unified.active_segments(s, 16, 16) == ceil(s / (16 * ceil(s / 256)))


@pytest.mark.parametrize("s", [16, 64, 100, 128, 200, 256])
def test_below_256_split_saturates_at_s_over_16(s):
    # "Below s = 256 the split saturates at s/16 segments and the surplus blocks return immediately"
    from math import ceil

    assert vllm_unified.active_segments(s, 16, 16) == ceil(s / 16)


# --- "What the merge costs" ------------------------------------------------------------------------

def test_8320_bytes_per_token_head_and_266_kb():
    # "S(d_h + 2) * 4 bytes = 16 x 130 x 4 = 8,320 B. For B = 1, h = 32: 266 KB"
    d = vllm(work(LLAMA3_8B, batch=1))
    assert d["partial_state_bytes_per_layer"] == 8320 * 32 == 266_240
    assert round(d["partial_state_bytes_per_layer"] / 1e3) == 266


def test_kv_per_layer_10_5_mb():
    # "2 h_kv d_h s b = 2 x 8 x 128 x 2560 x 2 = 10.5 MB"
    d = vllm(work(LLAMA3_8B, batch=1, seq_len=2560))
    assert d["kv_bytes_per_layer"] == 2 * 8 * 128 * 2560 * 2
    assert round(d["kv_bytes_per_layer"] / 1e6, 1) == 10.5


def test_s_512_quarter_of_the_traffic():
    # "At s = 512 the same 532 KB of partial state sits against 2.1 MB of KV — a quarter of the traffic"
    d = vllm(work(LLAMA3_8B, batch=1, seq_len=512))
    assert round(d["merge_traffic_bytes_per_layer"] / 1e3) == 532
    assert round(d["kv_bytes_per_layer"] / 1e6, 1) == 2.1
    assert d["merge_to_kv_ratio"] == pytest.approx(0.25, abs=0.01)


# --- "Where GQA enters" ----------------------------------------------------------------------------

def test_tile_intensity_4_and_74x_below_h100_ridge():
    # "K and V tiles are 2 x 16 x 128 x 2 = 8,192 bytes; ... 4 of the 16 rows ... 32,768 FLOP. The ratio
    # is 4 ... Against the H100's ridge of I* = 295 that is 74x memory-bound"
    d = vllm(work(LLAMA3_8B, batch=1), resolve_gpu("h100-sxm"))
    assert d["tile_arithmetic_intensity"] == 4
    assert round(d["tile_times_below_ridge"]) == 74


def test_mha_runs_at_intensity_1():
    # "an MHA model (g = 1) runs the same kernel at I = 1"
    d = vllm(work(model(32, 32), batch=1))
    assert d["tile_arithmetic_intensity"] == 1


# --- the reduce and the seven-step trace -----------------------------------------------------------

def test_grid_1_8_16_reduce_1_32_tiles_per_segment_10():
    d = vllm(work(LLAMA3_8B, batch=1, seq_len=2560))
    assert d["use_3d"] and d["grid"] == [1, 8, 16] and d["reduce_grid"] == [1, 32]
    assert d["tiles_per_segment"] == [10] and d["active_segments"] == [16]
    # "Block 0 scans keys 0-159, block 15 scans 2400-2559"
    ranges = vllm_unified.segment_ranges(2560, 16, 16)
    assert ranges[0] == (0, 160) and ranges[15] == (2400, 2560)


def test_two_launches_128_plus_32_blocks_336_mb_17_mb():
    # "Two kernel launches, 128 + 32 thread blocks, 10.5 MB of KV read and 0.5 MB of partial state
    # round-tripped, per layer. Times 32 layers: about 336 MB of KV plus 17 MB"
    d = vllm(work(LLAMA3_8B, batch=1, seq_len=2560))
    assert [k["programs"] for k in d["launches"]] == [128, 32]
    assert round(d["merge_traffic_bytes_per_layer"] / 1e6, 1) == 0.5
    assert round(d["kv_bytes_all_layers"] / 1e6) == 336
    assert round(32 * d["merge_traffic_bytes_per_layer"] / 1e6) == 17


def test_block_table_640_bytes():
    # "the whole block table for a 2,560-token sequence is 640 bytes"
    d = vllm(work(LLAMA3_8B, batch=1, seq_len=2560))
    assert paging_figures(work(LLAMA3_8B, batch=1, seq_len=2560), None)["block_table_bytes"] == [640]
    assert d["kv_bytes_per_layer"] > 0


# --- "vLLM: a threshold, and a fixed split count" ---------------------------------------------------

@pytest.mark.parametrize("m,tp,threshold", [(LLAMA3_8B, 1, 16), (LLAMA3_70B, 8, 128)])
def test_threshold_16_and_128(m, tp, threshold):
    assert vllm(work(m, tp=tp, batch=1))["seq_threshold_3d"] == threshold


def test_split_for_16_or_fewer_not_above():
    assert vllm(work(LLAMA3_8B, batch=16), cudagraph_mode="NONE")["use_3d"]
    d = vllm(work(LLAMA3_8B, batch=17), cudagraph_mode="NONE")
    assert not d["use_3d"] and any("threshold" in r for r in d["reasons_2d"])


def test_threshold_2_exercise():
    # "With threshold 2, batches above 2 use 2D" (h_kv = 64 per rank: 128 // 64 = 2)
    m = model(64, 64)
    assert vllm(work(m, batch=2), cudagraph_mode="NONE")["use_3d"]
    assert not vllm(work(m, batch=3), cudagraph_mode="NONE")["use_3d"]


def test_one_prefill_request_sends_the_batch_2d():
    # "max_seqlen_q > 1 kills it for any mixed batch" (0.33.0: beyond MAX_3D_QUERY_LEN = 8)
    d = vllm(work(LLAMA3_8B, seq_lens=(2560, 2560), query_lens=(1, 100)))
    assert not d["use_3d"] and any("mixed prefill" in r for r in d["reasons_2d"])


# --- "SGLang: a split count computed per sequence, on device" ---------------------------------------

def test_sglang_702_block_h_4_head_tiles_8():
    # "ext_device_core_count = floor(132 x log2 40) = 702, block_h = min(16, 4) = 4, head tiles = ceil(32/4) = 8,
    # and max_kv_splits at its default of 8"
    assert sglang_triton.ext_device_core_count(2560, 132) == 702
    d = sglang(work(LLAMA3_8B, batch=1, seq_len=2560))
    assert d["grid"] == [1, 8, 8] and d["max_kv_splits"] == 8
    assert sglang_triton.token_grid(1, 32, 8) == 8


def test_sglang_mla_group_128_tiled_across_8_blocks():
    # "For DeepSeek-style MLA where g is 128, BLOCK_H caps at 16 and the group is tiled across 8 blocks"
    assert sglang_triton.head_tiles(128, 1) == 8


# --- "Over-splitting short sequences" ---------------------------------------------------------------

def test_s_128_eight_segments_266_kb_useful_vs_524_kb_kv():
    # "At s=128, TILE_SIZE=16 and 16 maximum segments give eight useful key segments ... 532 KB is an
    # allocation/full-16-segment upper accounting ... useful partial traffic is about 266 KB against 524 KB of KV"
    d = vllm(work(LLAMA3_8B, batch=1, seq_len=128))
    assert d["active_segments"] == [8]
    assert round(2 * d["partial_state_bytes_per_layer"] / 1e3) == 532
    assert round(d["merge_traffic_bytes_per_layer"] / 1e3) == 266
    assert round(d["kv_bytes_per_layer"] / 1e3) == 524


# --- "Kernel block size vs allocator block size" -----------------------------------------------------

def test_map_to_kernel_blocks_8x_wider():
    # "eight times as many int32s for a 128-token allocator block cut to 16"
    p = paging_figures(work(LLAMA3_8B, batch=1, seq_len=2560, block_size=128), 16)
    assert p["blocks_per_kv_block"] == 8 and p["block_table_width"] == [160]


def test_kernel_block_size_must_divide_block_size():
    with pytest.raises(ConfigError, match="must divide block_size"):
        paging_figures(work(LLAMA3_8B, batch=1, block_size=48), 32)


def test_block_size_not_multiple_of_16_is_a_startup_error():
    # "A backend that requires MultipleOf(16) and an allocator configured with --block-size 1 is a startup error"
    with pytest.raises(ConfigError, match="MultipleOf\\(16\\)"):
        vllm(work(LLAMA3_8B, batch=1, block_size=1))


def test_small_gpu_changes_s_star():
    # S* = ceil(N_SM / G_2D): a 78-SM H20-like part needs 10 splits for Llama-3-8B at batch 1
    assert vllm(work(LLAMA3_8B, batch=1), gpu(78))["s_star"] == 10
