"""What the engine is configured with for one decode step (:class:`EngineCall`), built from
decodecalc's own launch plans, and what it predicts the kernels launch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from decodecalc.launchers.base import LaunchPlan
from decodecalc.workload import Workload

__all__ = ["ENGINE_CALLS", "EngineCall", "engine_call", "reference_use_3d", "sglang_call", "vllm_call"]


@dataclass(frozen=True)
class EngineCall:
    """How the engine calls its kernel for this step, and what decodecalc predicts it launches."""

    system: str  # "vllm" | "sglang"
    plan: LaunchPlan
    # vLLM backend state (TritonAttentionMetadataBuilder)
    seq_threshold_3d: int = 0
    num_segments: int = 16
    scratch_rows: int = 0
    batch_invariant: bool = False
    # a FULL CUDA-graph replay runs a padded batch: (requests, tokens, max_seqlen_q at capture)
    pad_reqs: int = 0
    pad_tokens: int = 0
    max_seqlen_q: int | None = None
    # SGLang backend state
    max_kv_splits: int = 8
    sm_count: int = 0
    pad_seq_len: int = 1  # SGLang fills padded CUDA-graph rows with seq_len 1
    split_mode: str = "adaptive"  # "adaptive" (get_num_kv_splits_triton), "static", "deterministic"
    split_tile_size: int = 0


def vllm_call(vplan: Any) -> EngineCall:
    """From :func:`decodecalc.launchers.vllm_unified.plan_vllm`'s result: the launch the engine runs
    (the padded FULL-graph replay when one runs), with the backend's threshold, segments, scratch."""
    be = vplan.backend
    invariant = vplan.settings.batch_invariant  # VLLM_BATCH_INVARIANT for the upstream module
    if vplan.replay is not None:
        rp = vplan.replay
        return EngineCall(
            system="vllm", plan=rp.plan, seq_threshold_3d=be.seq_threshold_3D,
            num_segments=be.num_par_softmax_segments, scratch_rows=be.scratch_rows,
            pad_reqs=rp.num_reqs_padded, pad_tokens=rp.num_tokens_padded, batch_invariant=invariant,
        )
    return EngineCall(system="vllm", plan=vplan.plan, seq_threshold_3d=be.seq_threshold_3D,
                      num_segments=be.num_par_softmax_segments, scratch_rows=be.scratch_rows,
                      batch_invariant=invariant)


def sglang_call(splan: Any, gpu: Any) -> EngineCall:
    """From :func:`decodecalc.launchers.sglang_triton.plan_sglang`'s result."""
    plan = splan.plan
    tile = 0
    if splan.mode == "deterministic" and splan.kv_len_per_split:
        tile = getattr(splan, "split_tile_size", 0) or 256
    return EngineCall(system="sglang", plan=plan, max_kv_splits=splan.max_kv_splits, sm_count=gpu.num_sms,
                      pad_reqs=plan.kernels[0].grid[0] if splan.padded_rows else 0, split_mode=splan.mode,
                      split_tile_size=tile)


#: grid report system name -> its EngineCall from the system's plan (and the GPU)
ENGINE_CALLS: dict[str, Any] = {
    "vllm": lambda plan, gpu: vllm_call(plan),
    "sglang": sglang_call,
}


def engine_call(system: str, plan: Any, gpu: Any) -> EngineCall:
    """The EngineCall of ``system``'s plan (a grid report row's model)."""
    return ENGINE_CALLS[system](plan, gpu)


def reference_use_3d(work: Workload, call: EngineCall, b_run: int, t_run: int, max_q: int) -> bool:
    """Our reference launcher takes the 2D/3D choice from the same model of vLLM 0.33.0's gate
    (decodecalc.launchers.vllm_unified.unified_attention_grid; only max query length, token and
    sequence counts enter it)."""
    from decodecalc.launchers.vllm_unified import unified_attention_grid

    return unified_attention_grid(
        num_tokens=t_run, seq_lens=(1,) * b_run, query_lens=(max_q,) * b_run, num_heads=work.num_heads,
        num_kv_heads=work.num_kv_heads, head_size=work.head_size, q_dtype_bytes=work.q_bytes, sliding_window=None,
        seq_threshold_3D=call.seq_threshold_3d, num_par_softmax_segments=call.num_segments,
        scratch_rows=call.scratch_rows if call.scratch_rows > 0 else None, batch_invariant=call.batch_invariant,
    ).use_3d
