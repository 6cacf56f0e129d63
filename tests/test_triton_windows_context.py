"""The Triton models' context-length and sliding-window rules, worked by hand from the source.

SGLang 0.5.23 (wheel source):
- max_kv_splits for MLA: ``_mla_decode_kv_splits_cap(base, SM, max_context_len)`` = max(base,
  min(np2(SM), np2(cdiv(context_len, 32)))) (srt/layers/attention/triton_backend.py L83-90, L327-338),
  with ``max_context_len = model_config.context_len`` (L313), from ``get_context_length`` of
  config.json (srt/utils/hf_transformers/common.py L668-694) or ``--context-length``
  (srt/configs/model_config.py L1291-1326);
- split rule ``get_num_kv_splits_triton`` (kernels/ops/attention/metadata.py L8-60);
- sliding-window layers: ``window_kv_lens = min(seq_lens, sliding_window_size)`` (triton_backend.py
  L2869-2872), ``sliding_window_size = config.sliding_window - 1`` (models/gemma2.py L52-53,
  gpt_oss.py L131-132); forward_decode reads window_kv_indptr with the full-length num_kv_splits
  (triton_backend.py L2353-2356, L2481).
vLLM 0.33.0: kernel early exit (triton_unified_attention.py L325-327), reduce_segments'
``act_num_segments`` (L741-747), window tile bounds (triton_attention_helpers.py L230-277).
H200: 132 SMs.
"""

from __future__ import annotations

from pathlib import Path

from helpers import H200, model, work

from decodecalc.launchers.sglang_triton import SglangSettings, plan_sglang
from decodecalc.launchers.vllm_unified import VllmSettings, plan_vllm
from decodecalc.specs.hf import load_hf_config
from decodecalc.specs.models import resolve_model

DSV3 = resolve_model("deepseek-v3")


def test_deepseek_v3_context_length_from_config_json():
    # tests/data/hf/deepseek-v3/config.json: max_position_embeddings 163840
    cfg = load_hf_config(Path(__file__).parent / "data" / "hf" / "deepseek-v3" / "config.json")
    assert cfg.context_length == DSV3.context_length == 163840


def test_deepseek_v3_batch1_tp8_max_kv_splits_from_context():
    # max(8, min(np2(132) = 256, np2(cdiv(163840, 32) = 5120) = 8192)) = 256, whatever the batch's length
    p = plan_sglang(work(DSV3, tp=8, batch=1, seq_len=4096), H200, SglangSettings())
    assert p.max_kv_splits == 256
    # h = 16 query heads, one latent head: token_grid = 1 * cdiv(16, min(16, 16)) = 1
    assert p.stage1_grid == (1, 1, 256)
    # ext = int(132 * log2(4096 / 64) = 6) = 792; min(cdiv(792, 1), 256) = 256; chunk = cdiv(4096, 256) = 16
    assert p.num_kv_splits == (256,)
    # kv_len_per_split = cdiv(cdiv(4096, 256), 32) * 32 = 32 -> 128 non-empty splits
    assert p.kv_len_per_split == (32,) and p.nonempty_splits == (128,)


def test_deepseek_v3_batch1_tp1_short_sequence():
    # L = 1024: the batch-sized cap would be np2(cdiv(1024, 32)) = 32; the context-sized one is 256
    p = plan_sglang(work(DSV3, tp=1, batch=1, seq_len=1024), H200, SglangSettings())
    assert p.max_kv_splits == 256 and p.stage1_grid == (1, 8, 256)  # cdiv(128, 16) = 8 head tiles
    # ext = 132 * log2(16) = 528; min(cdiv(528, 8) = 66, 256) = 66; chunk = cdiv(1024, 66) = 16 -> 64 splits
    assert p.num_kv_splits == (64,)
    assert p.kv_len_per_split == (32,) and p.nonempty_splits == (32,)


def test_context_length_flag_overrides_the_model():
    # --context-length 1024: max(8, min(256, np2(32) = 32)) = 32; min(66, 32) = 32; chunk 32 -> 32 splits
    p = plan_sglang(work(DSV3, tp=1, batch=1, seq_len=1024), H200, SglangSettings(context_len=1024))
    assert p.max_kv_splits == 32 and p.num_kv_splits == (32,)


def test_model_without_context_length_sizes_from_the_batch():
    mla = model(128, 128, d=192, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                v_head_dim=128)
    assert mla.context_length is None
    # falls back to Lmax: max(8, min(256, np2(cdiv(4096, 32)) = 128)) = 128
    assert plan_sglang(work(mla, tp=8, batch=1, seq_len=4096), H200).max_kv_splits == 128


def test_deterministic_tile_sizes_from_context():
    # split_tile_size 256: max_kv_splits = cdiv(context_len, 256) (triton_backend.py L369-372)
    llama = resolve_model("llama3-8b")  # context_length 8192 (max_position_embeddings)
    p = plan_sglang(work(llama, batch=1, seq_len=1000), H200, SglangSettings(deterministic=True))
    assert p.max_kv_splits == 32 and p.num_kv_splits == (4,)  # cdiv(1000, 256) = 4


# ---------------------------------------------------------------------------------- SGLang windows


def test_sglang_gpt_oss_window_layer():
    m = resolve_model("gpt-oss-20b")  # window 128, 64 q heads, 8 kv heads, head 64
    full = plan_sglang(work(m, batch=1, seq_len=8192), H200)
    win = plan_sglang(work(m, batch=1, seq_len=8192), H200, layer="sliding")
    # splits from the full length: ext = int(132 * log2(128)) = 924, token_grid = cdiv(64, 8) = 8,
    # min(cdiv(924, 8), 8) = 8 -> 8 splits on both layer kinds
    assert full.num_kv_splits == win.num_kv_splits == (8,)
    assert win.stage1_grid == full.stage1_grid == (1, 8, 8)
    # window layer: min(8192, 128 - 1) = 127 keys; cdiv(cdiv(127, 8), 32) * 32 = 32; cdiv(127, 32) = 4
    assert win.window_kv_lens == (127,)
    assert win.kv_len_per_split == (32,) and win.nonempty_splits == (4,)
    assert full.kv_len_per_split == (1024,) and full.nonempty_splits == (8,)
    assert win.plan.main.working_programs == 4 * 8
    assert win.plan.partial_state_bytes_used == 4 * 64 * (64 + 1) * 4
    # the buffers are the same: attn_logits [B, h, max_kv_splits, Lv]
    assert win.plan.partial_state_bytes == full.plan.partial_state_bytes


def test_sglang_window_shorter_than_sequence_only():
    m = model(16, 8, d=256, sliding_window=4096, sliding_window_pattern=2)
    p = plan_sglang(work(m, batch=2, seq_len=1000), H200, layer="sliding")
    assert p.window_kv_lens == (1000, 1000)
    assert p.kv_len_per_split == plan_sglang(work(m, batch=2, seq_len=1000), H200).kv_len_per_split


def test_sglang_compare_row_uses_window_keys():
    from decodecalc.reports import grid

    m = resolve_model("gpt-oss-20b")
    res = grid.sglang_result(work(m, batch=1, seq_len=8192), H200, SglangSettings(), "sliding")
    assert res.data["window_kv_lens"] == [127]
    per_key = 8 * (64 + 64) * 2  # h_kv * (d_k + d_v) * bf16
    assert res.data["kv_bytes_per_layer"] == 127 * per_key


# ------------------------------------------------------------------------------------ vLLM windows


def test_vllm_window_segments_keep_early_exit_meaning():
    g2 = resolve_model("gemma-2-9b")  # window 4096, 16 q heads, 8 kv heads, head 256
    p = plan_vllm(work(g2, batch=1, seq_len=8192), H200, layer="sliding")
    assert p.launch.use_3d and p.launch.tile_size == 16 and p.launch.num_segments == 16
    # tps = cdiv(8192, 16 * 16) = 32; act_num_segments = cdiv(8192, 32 * 16) = 16: all pass the early exit
    assert p.tiles_per_segment == (32,) and p.active_segments == (16,)
    # tile_start = (8192 - 1 - 4096 + 1) // 16 = 256: segments 8..15 read window keys
    assert p.window_segments == (8,)
    assert p.plan.details.kv_tiles_read == (512 - 256,)
    # partial state written by every active segment: 16 * 16 heads * (256 + 2) * 4
    assert p.plan.partial_state_bytes_used == 16 * 16 * 258 * 4
    assert p.plan.main.working_programs == 8 * 16  # h_kv * active segments


def test_vllm_window_unaligned_start():
    g2 = resolve_model("gemma-2-9b")
    p = plan_vllm(work(g2, batch=1, seq_len=5000), H200, layer="sliding")
    # tps = cdiv(5000, 256) = 20; act = cdiv(5000, 320) = 16; tile_start = (5000 - 4096) // 16 = 56
    # segments s with (s + 1) * 20 > 56: s >= 2 -> 14; tiles read cdiv(5000, 16) - 56 = 257
    assert p.active_segments == (16,) and p.window_segments == (14,)
    assert p.plan.details.kv_tiles_read == (257,)


def test_vllm_global_layer_window_segments_equal_active():
    g2 = resolve_model("gemma-2-9b")
    p = plan_vllm(work(g2, batch=1, seq_len=8192), H200)
    assert p.window_segments == p.active_segments == (16,)


def test_vllm_json_has_window_segments():
    from decodecalc.reports import grid

    g2 = resolve_model("gemma-2-9b")
    res = grid.vllm_result(work(g2, batch=1, seq_len=8192), H200, VllmSettings(), "sliding")
    assert res.data["active_segments"] == [16] and res.data["window_segments"] == [8]
