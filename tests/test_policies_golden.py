"""Golden tests: the worked examples of upstream-launchers.md section 2 for every launcher module.

Each case names the table it comes from (../shared/reference/upstream-launchers.md):
  2.1 = "Llama-3-8B: h = 32, h_kv = 8, d = 128 (g = 4)", 2.2 = "Llama-3-70B on TP = 8".
Assumptions of section 2: one decode request, L = 2560, bf16, page/block size 16, 132 SMs.
Integers must match exactly. Partial-state bytes are per (query token, query head), as in the tables.
"""

from __future__ import annotations

import pytest

from decodecalc.errors import UnsupportedError
from decodecalc.launchers.aiter import plan_aiter
from decodecalc.launchers.flash_attn2 import f32, plan_flash_attn2
from decodecalc.launchers.flash_attn2 import num_splits_heuristic as fa2_heuristic
from decodecalc.launchers.flash_attn3 import blocks_per_sm, plan_flash_attn3
from decodecalc.launchers.flash_attn3 import num_splits_heuristic as fa3_heuristic
from decodecalc.launchers.flashdecoding import plan_flashdecoding
from decodecalc.launchers.flashinfer import occupancy_lower_bound, plan_flashinfer, plan_flashinfer_tc
from decodecalc.launchers.flashmla import plan_flashmla, schedule
from decodecalc.launchers.vllm_paged_attention import plan_vllm_paged_attention, use_v1
from decodecalc.launchers.vllm_rocm import plan_vllm_rocm
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import ModelConfig, resolve_model
from decodecalc.workload import make_workload

H200 = resolve_gpu("h200")  # 132 SMs, compute capability 9.0
MI300X = resolve_gpu("mi300x")


def work(model: str = "llama3-8b", tp: int = 1, **kw):
    kw.setdefault("batch", 1)
    kw.setdefault("seq_len", 2560)
    return make_workload(resolve_model(model), tp=tp, **kw)


def custom(h: int, h_kv: int, d: int = 128) -> ModelConfig:
    return ModelConfig(name=f"test-{h}-{h_kv}", num_layers=2, num_attention_heads=h, num_key_value_heads=h_kv,
                       head_dim=d, attention="mha" if h == h_kv else "gqa")


W8B = work()
W70B = work("llama3-70b", tp=8)


def per_token_head(plan, w, used: bool = False) -> int:
    total = plan.partial_state_bytes_used if used else plan.partial_state_bytes
    return total // (w.num_tokens * w.num_heads)


# ---------------------------------------------------------------------------------------- legacy

@pytest.mark.parametrize(
    "w, grid, reduce_grid",
    [(W8B, (32, 1, 5), (32, 1)), (W70B, (8, 1, 5), (8, 1))],
    ids=["2.1-8B", "2.2-70B-TP8"],
)
def test_vllm_legacy_v2(w, grid, reduce_grid):
    # section 2.1/2.2 row "vLLM legacy PagedAttention (V2 chosen: P = 5, B*h <= 512)"
    p = plan_vllm_paged_attention(w, H200)
    assert p.details.version == "v2"
    assert p.grid == grid and p.main.programs == grid[0] * grid[2]
    assert p.merge is not None and p.merge.grid == reduce_grid
    assert p.splits == (5,) and p.tokens_per_split == (512,)
    assert per_token_head(p, w) == 1320  # 5 * (256 + 8), bf16 partial O


@pytest.mark.parametrize(
    "max_len, seqs, heads, v1",
    [(2560, 1, 32, False), (512, 1, 32, True), (2560, 17, 32, True), (2560, 16, 32, False), (8193, 64, 32, False)],
    ids=["P5-small", "P1", "B*h>512", "B*h=512", "over-8192"],
)
def test_vllm_legacy_v1_rule(max_len, seqs, heads, v1):
    # section 5 (b): use_v1 = max_seq_len <= 8192 and (P == 1 or num_seqs * num_heads > 512)
    assert use_v1(max_len, seqs, heads) is v1


def test_vllm_legacy_v1_grid_and_bad_block():
    p = plan_vllm_paged_attention(work(batch=32), H200)  # 32 * 32 = 1024 > 512 -> v1
    assert p.details.version == "v1" and p.grid == (32, 32, 1) and p.merge is None
    with pytest.raises(UnsupportedError, match="block size 64"):
        plan_vllm_paged_attention(work(block_size=64), H200)
    with pytest.raises(UnsupportedError, match="MLA"):
        plan_vllm_paged_attention(work("deepseek-v3", tp=8), H200)


# ---------------------------------------------------------------------------------------- ROCm

@pytest.mark.parametrize(
    "w, grid, kernel, reduce_grid",
    [(W8B, (1, 10, 8), "mfma4", (32, 1)), (W70B, (1, 10, 1), "mfma16", (8, 1))],
    ids=["2.1-8B-mfma4", "2.2-70B-mfma16"],
)
def test_vllm_rocm(w, grid, kernel, reduce_grid):
    # section 2.1/2.2 row "vLLM ROCm custom"; the SM count does not enter this launcher
    p = plan_vllm_rocm(w, MI300X)
    assert p.grid == grid and kernel in p.main.name
    assert p.merge is not None and p.merge.grid == reduce_grid and p.details.npar_loops == 1
    assert p.splits == (10,) and p.tokens_per_split == (256,)
    assert per_token_head(p, w) == 2640  # 10 * (256 + 8)


def test_vllm_rocm_rules():
    # section 6: CDNA rules and platform
    with pytest.raises(UnsupportedError, match="ROCm"):
        plan_vllm_rocm(W8B, H200)
    with pytest.raises(UnsupportedError, match="block size 64"):
        plan_vllm_rocm(work(block_size=64), MI300X)
    with pytest.raises(UnsupportedError, match="GQA ratio 32"):
        plan_vllm_rocm(make_workload(custom(64, 2), batch=1, seq_len=100), MI300X)
    # one partition: vLLM 0.33.0 still launches the reduce (csrc/rocm/attention_kernels.cuh L3552-3588;
    # the "no reduce" of section 6 is an older attention.cu), reading one partial per (sequence, head)
    p = plan_vllm_rocm(work(seq_len=200), MI300X)
    assert p.merge is not None and p.merge.grid == (32, 1) and p.partial_state_bytes == 32 * (128 * 2 + 8)


# ---------------------------------------------------------------------------------------- FA2

@pytest.mark.parametrize(
    "w, grid, combine",
    [(W8B, (1, 20, 8), 8), (W70B, (1, 20, 1), 2)],
    ids=["2.1-8B", "2.2-70B-TP8"],
)
def test_fa2(w, grid, combine):
    # section 2.1/2.2 row "FA2 (flash_attn_with_kvcache, GQA swap)"
    p = plan_flash_attn2(w, H200)
    assert p.details.seqlenq_ngroups_swapped is True
    assert p.grid == grid and p.merge is not None and p.merge.grid == (combine,)
    assert p.splits == (20,) and p.tokens_per_split == (128,)
    assert per_token_head(p, w) == 10320  # 20 * (512 + 4)


def test_fa2_heuristic_examples():
    # batch 1 x 12 heads on 108 "SMs", 64 n-blocks (the flash-attention#609 setting, peers 1.9):
    # s = 9 would fill one wave exactly but is not eligible (cdiv(64, 9) == cdiv(64, 8)); the best
    # eligible efficiency is 96/108 (s = 8) and s = 7 reaches 84/108 >= 0.85 * 96/108
    assert fa2_heuristic(12, 108, 64, 128) == 7
    assert fa2_heuristic(240, 264, 20, 128) == 1  # a >= 0.8 * n_sm: no split


def test_fa2_varlen_mha_does_not_split():
    # section 7.1: "for MHA varlen decode there is no split at all"; kvcache MHA decode does
    w = make_workload(custom(32, 32), batch=1, seq_len=8192)
    assert plan_flash_attn2(w, H200, entry="varlen").splits == (1,)
    assert plan_flash_attn2(w, H200).splits[0] > 1


# ---------------------------------------------------------------------------------------- FA3

def test_fa3_8b_paged():
    # section 2.1 row "FA3 (varlen, paged, page 16 -> paged-non-TMA, blockN = 128)"
    p = plan_flash_attn3(W8B, H200)
    assert p.details.kBlockN == 128 and p.details.num_splits_static == 14
    # vLLM's fork (vllm-project/flash-attention@617264c1 hopper/heuristics.h L10-14, tile_size.h L41-42): hdim 128
    # with seqlen_q * g = 4 <= 64 runs one MMA warp group, tile 64 x 128 (the reference's 128 x 128 is upstream's)
    assert p.details.use_one_mma_wg is True and p.details.kBlockM == 64
    assert p.grid == (132,) and p.details.tiles == 80  # 1 m-block x 8 heads x 10 splits
    assert p.splits == (10,) and p.tokens_per_split == (256,)
    assert per_token_head(p, W8B) == 7224 and per_token_head(p, W8B, used=True) == 5160


def test_fa3_8b_non_paged_float32_edge():
    # section 2.1 row "FA3 (non-paged KV: blockN = 176, 15 n-blocks)": 15*1.1f*8/132 == 1.0 exactly
    assert blocks_per_sm(15, 8, 132) == 1
    p = plan_flash_attn3(W8B, H200, paged=False)
    assert p.details.kBlockN == 176 and p.details.num_splits_static == 13
    assert p.splits == (13,) and p.nonempty_splits == (8,) and p.tokens_per_split == (352,)
    assert per_token_head(p, W8B) == 6708
    # the reference's non-varlen grid (1, 13 * 8, 1) is upstream's: vLLM's fork is built varlen only
    # (vllm-project/flash-attention@617264c1 CMakeLists.txt L310, hopper/static_switch.h L130-137)
    with pytest.raises(UnsupportedError, match="varlen"):
        plan_flash_attn3(W8B, H200, paged=False, varlen=False)


def test_fa3_70b_float_tie():
    # section 2.2 row "FA3": static 18, not 17 (float32(17/132) < 0.85 * float32(20/132))
    assert f32(17 / 132) < 0.85 * f32(20 / 132)
    assert fa3_heuristic(1, 132, 20, 1, 0, False, 128) == 18
    p = plan_flash_attn3(W70B, H200)
    assert p.details.num_splits_static == 18
    assert p.splits == (18,) and p.nonempty_splits == (10,)  # ceil(20/18) = 2 blocks/split: 10-17 empty
    assert per_token_head(p, W70B) == 9288


def test_fa3_needs_hopper():
    with pytest.raises(UnsupportedError, match="SM90"):
        plan_flash_attn3(W8B, resolve_gpu("a100-80gb"))


# ---------------------------------------------------------------------------------------- FlashInfer

@pytest.mark.parametrize(
    "w, occ, cuda_graph, grid, splits",
    [
        (W8B, 2, False, (20, 8), 20), (W8B, 1, False, (16, 8), 16), (W8B, 2, True, (33, 8), 20),
        (W70B, 2, False, (20, 1), 20), (W70B, 2, True, (264, 1), 20),
    ],
    ids=["2.1-occ2", "2.1-occ1", "2.1-cudagraph", "2.2", "2.2-cudagraph"],
)
def test_flashinfer_cuda_cores(w, occ, cuda_graph, grid, splits):
    # section 2.1/2.2 rows "FlashInfer CUDA-core decode" (and "under CUDA graph": 13 CTAs masked off)
    p = plan_flashinfer(w, H200, occupancy=occ, cuda_graph=cuda_graph)
    assert p.grid == grid and p.splits == (splits,)
    assert p.main.working_programs == splits * w.num_kv_heads
    assert p.merge is not None and p.merge.grid == (132,)  # 132 * min(occ_m, cdiv(B*h, 132) = 1)
    assert per_token_head(p, w, used=True) == splits * (256 + 4)


def test_flashinfer_default_occupancy_is_documented_bound():
    # 128-thread CTA, 9216 B shared memory (Llama-3-8B, bf16): registers bound it at >= 2 CTAs/SM
    assert occupancy_lower_bound(128, 9216, (9, 0)) == 2
    p = plan_flashinfer(W8B, resolve_gpu("a100-80gb"))  # nothing measured for sm_80: the documented bound
    assert p.details.occupancy == occupancy_lower_bound(128, 9216, (8, 0)) and p.grid == (20, 8)
    p = plan_flashinfer(W8B, H200)  # the H200's measured 9 CTAs/SM (decodecalc/data/occupancy.yaml): same grid
    assert p.details.occupancy == 9 and p.grid == (20, 8)
    assert per_token_head(p, W8B) == 20 * (512 + 4)  # buffer sized as fp32


@pytest.mark.parametrize(
    "w, cuda_graph, grid",
    [(W8B, False, (20, 1, 8)), (W8B, True, (33, 1, 8)), (W70B, False, (20, 1, 1)), (W70B, True, (264, 1, 1))],
    ids=["2.1", "2.1-cudagraph", "2.2", "2.2-cudagraph"],
)
def test_flashinfer_tensor_cores(w, cuda_graph, grid):
    # section 2.1/2.2 rows "FlashInfer tensor-core decode"
    p = plan_flashinfer_tc(w, H200, cuda_graph=cuda_graph)
    assert p.grid == grid and p.splits == (20,) and p.tokens_per_split == (128,)


def test_flashinfer_tc_fixed_split_is_batch_invariant():
    # section 8.2: fixed_split_size (pages) makes the chunking depend on the request alone
    a = plan_flashinfer_tc(work(batch=1), H200, fixed_split_size=32)
    b = plan_flashinfer_tc(work(batch=64), H200, fixed_split_size=32)
    assert a.splits[0] == b.splits[0] == 5  # 160 pages / 32


# ---------------------------------------------------------------------------------------- plain FlashDecoding

@pytest.mark.parametrize("w, s_star, grid", [(W8B, 17, (1, 8, 17)), (W70B, 132, (1, 1, 132))], ids=["8B", "70B-TP8"])
def test_flashdecoding_s_star(w, s_star, grid):
    # decode-attention-chapter.txt 'The grid': G_2D = 8 -> S* = 17; G_2D = 1 -> S* = 132
    p = plan_flashdecoding(w, H200)
    assert p.details.S_star == s_star and p.grid == grid


# ---------------------------------------------------------------------------------------- aiter

@pytest.mark.parametrize(
    "batch, seq_len, path, segments",
    [(1, 2560, "3D", 128), (64, 2560, "3D", 16), (1, 512, "2D", 1), (200, 2560, "2D", 1)],
    ids=["B1-max128", "B64-np2(10)", "short-2D", "wide-2D"],
)
def test_aiter_segments(batch, seq_len, path, segments):
    # aiter e4048607 unified_attention.py: MI300X 304 CUs -> target 1216 programs, occ 4;
    # B=64: num_2d = 512, ceil(1216*4/512) = 10 -> np2 = 16; L <= 512 or num_2d > target -> 2D
    p = plan_aiter(work(batch=batch, seq_len=seq_len), MI300X)
    assert p.details.path == path and p.splits[0] == segments
    if path == "3D":
        assert p.grid == (batch, 8, segments)


# ---------------------------------------------------------------------------------------- FlashMLA

def test_flashmla_schedule_and_rules():
    # section 9: num_sm_parts = max(132 / 1 / cdiv(16, 64), 1) = 132 for DeepSeek-V3 on TP 8 (h = 16)
    w = work("deepseek-v3", tp=8)
    p = plan_flashmla(w, H200)
    assert p.details.num_sm_parts == 132 and p.grid == (1, 1, 132)
    # 40 blocks + 5 overhead -> payload cdiv(45, 132) + 5 = 6: one block per part, 40 splits
    assert p.splits == (40,) and p.tokens_per_split == (64,)
    splits, pieces, busy = schedule((8192,) * 2, 4)
    assert sum(sum(x) for x in pieces) == 256 and busy == 4 and splits == [2, 3]  # payload 72: [67, 61] and [1, 67, 60]
    with pytest.raises(UnsupportedError, match="MLA models only"):
        plan_flashmla(W8B, H200)


def test_every_derived_input_appears_in_its_formula():
    # house style section 7: "A test asserts every inputs key appears in its formula"
    from decodecalc.reports import compare as pol

    for model, tp, gpu in (("llama3-8b", 1, H200), ("llama3-70b", 8, H200), ("deepseek-v3", 8, H200),
                           ("llama3-8b", 1, MI300X), ("llama3-8b", 1, resolve_gpu("a100-80gb"))):
        for batch in (1, 64):
            w = work(model, tp=tp, batch=batch)
            for r in pol.evaluate_all(w, gpu):
                if r.plan is None or r.name in ("vllm", "sglang"):
                    continue
                for d in r.plan.explain:
                    assert d.source, (r.name, d.name)
                    for key in d.inputs:
                        assert key in d.formula, (r.name, d.name, key, d.formula)


def test_sliding_layer_changes_fa2_fa3_rocm():
    # 7.1: the GQA swap needs "no window"; 7.2: local attention loads min(L, W + kBlockM) keys and uses
    # the local tile (head 256: kBlockN 64); section 6: CDNA custom paged attention rejects sliding windows
    w = work("gemma-2-9b", seq_len=32768)
    assert plan_flash_attn2(w, H200, layer="sliding").details.seqlenq_ngroups_swapped is False
    assert plan_flash_attn2(w, H200, layer="global").details.seqlenq_ngroups_swapped is True
    p = plan_flash_attn3(w, H200, layer="sliding")
    assert p.details.kBlockN == 64 and p.tokens_per_split[0] * p.nonempty_splits[0] >= 4096
    with pytest.raises(UnsupportedError, match="sliding"):
        plan_vllm_rocm(w, MI300X, layer="sliding")
    with pytest.raises(UnsupportedError, match="head size 256"):  # Gemma-2's d = 256 is not compiled either
        plan_vllm_rocm(w, MI300X, layer="global")


def test_fa2_page_size_rule():
    # flash_api.cpp L613 / L1305: "Paged KV cache block size must be divisible by 256"
    with pytest.raises(UnsupportedError, match="divisible by 256|% 256"):
        plan_flash_attn2(W8B, H200, paged=True)
    assert plan_flash_attn2(W8B, H200).details.paged_kv is False  # block 16: contiguous cache, same split rule
    p = plan_flash_attn2(work(block_size=256), H200)
    assert p.details.paged_kv is True and p.grid == (1, 20, 8)
