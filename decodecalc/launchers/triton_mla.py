"""vLLM's TRITON_MLA decode: the two-stage Triton split-KV kernels on the absorbed MLA latent.

vLLM 0.33.0 ``vllm/v1/attention/backends/mla/triton_mla.py`` L40-50 ``_compute_num_kv_splits``:
``min(next_power_of_2(max(1, max_seq_len // 512)), 2 * SMs)`` over the batch's ``max_seq_len`` (L269-273; 1 under
``VLLM_BATCH_INVARIANT``); 0.34.0 passes ``min(max_seq_len, sliding window)`` (L300-305).
``vllm/v1/attention/ops/triton_decode_attention.py``: stage 1 ``_decode_grouped_att_m_fwd`` L469-562, grid
``(B, cdiv(H, min(16, G)), num_kv_splits)`` (``BLOCK_H`` 16, L512-516), each split ``cdiv(L, num_kv_splits)`` keys of
its request (L352-354; a split past the end reads none); stage 2 ``_decode_softmax_reducev_fwd`` L640-668, grid
``(B, H)``. The partial logits are ``(B, H, num_kv_splits, kv_lora_rank + 1)`` fp32 (triton_mla.py L281).
"""

from __future__ import annotations

from decodecalc.derived import Explain, cdiv, next_power_of_2
from decodecalc.errors import UnsupportedError
from decodecalc.launchers.base import KernelLaunch, LaunchPlan
from decodecalc.launchers.details import TritonMlaDetails
from decodecalc.launchers.guards import layer_window
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

SRC_BACKEND = "vllm 0.33.0 vllm/v1/attention/backends/mla/triton_mla.py"
SRC_OPS = "vllm 0.33.0 vllm/v1/attention/ops/triton_decode_attention.py"
MIN_WORK_PER_SPLIT = 512  # triton_mla.py L40 _MIN_WORK_PER_SPLIT
SPLIT_OCCUPANCY_MULTIPLIER = 2  # L41
BLOCK_H = 16  # triton_decode_attention.py L512


def compute_num_kv_splits(max_seq_len: int, sm_count: int) -> int:
    """triton_mla.py L44-50."""
    return min(next_power_of_2(max(1, max_seq_len // MIN_WORK_PER_SPLIT)), sm_count * SPLIT_OCCUPANCY_MULTIPLIER)


def plan_triton_mla(w: Workload, gpu: GPUSpec, *, version: str = "0.34.0", batch_invariant: bool = False,
                    layer: str = "auto") -> LaunchPlan:
    """TRITON_MLA's decode launch for one step (MLA models only)."""
    if not w.model.is_mla:
        raise UnsupportedError(f"vLLM's TRITON_MLA serves MLA models only; {w.model.name} is {w.model.attention}")
    if w.max_seqlen_q > 1:
        raise UnsupportedError("vLLM's TRITON_MLA decode: one query token per request")
    window = layer_window(w, layer)
    if window and version == "0.33.0":
        raise UnsupportedError("vLLM 0.33.0's TRITON_MLA takes no sliding window (0.34.0 does)")
    ex = Explain()
    L = min(w.max_seqlen_k, window) if window else w.max_seqlen_k
    s = 1 if batch_invariant else ex.add(
        "num_kv_splits", compute_num_kv_splits(L, gpu.num_sms), "min(next_power_of_2(max(1, max_seq_len // 512)), "
        "2 * SMs)", f"{SRC_BACKEND} L44-50, L269-273" + ("; 0.34.0 L300-305 (window)" if window else ""),
        max_seq_len=L, SMs=gpu.num_sms)
    B, H, g = w.batch, w.num_heads, w.group_size
    lens = [min(x, window) if window else x for x in w.seq_lens]
    per = [cdiv(x, s) for x in lens]
    nonempty = tuple(cdiv(x, p) if p else 0 for x, p in zip(lens, per))
    heads = cdiv(H, min(BLOCK_H, g))
    grid1 = ex.add("grid", (B, heads, s), "(B, cdiv(H, min(BLOCK_H, G)), num_kv_splits)", f"{SRC_OPS} L512-516")
    stage1 = KernelLaunch(name="_fwd_grouped_kernel_stage1", grid=grid1, working_programs=sum(nonempty) * heads,
                          constexprs={"BLOCK_H": BLOCK_H})
    stage2 = KernelLaunch(name="_fwd_kernel_stage2", grid=(B, H), working_programs=B * H)
    partial = B * H * s * (w.head_size_v + 1) * 4
    return LaunchPlan(system="triton-mla", kernels=(stage1, stage2), splits=(s,) * B, nonempty_splits=nonempty,
                      tokens_per_split=tuple(per), partial_state_bytes=partial,
                      partial_state_bytes_used=sum(nonempty) * H * (w.head_size_v + 1) * 4, scratch_bytes=partial,
                      explain=ex.items(), details=TritonMlaDetails(num_kv_splits=s, max_seq_len=L, source=SRC_BACKEND))


__all__ = ["compute_num_kv_splits", "plan_triton_mla"]
