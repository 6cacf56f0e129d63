"""The one place that calls the upstream launchers, with every argument the engines pass.

* vLLM 0.33.0: ``TritonAttentionImpl.forward`` (vllm/v1/attention/backends/triton_attn.py) calls
  ``unified_attention`` (vllm/v1/attention/ops/triton_unified_attention.py).
* SGLang 0.5.23: ``TritonAttnBackend`` (sglang/srt/layers/attention/triton_backend.py) runs
  ``get_num_kv_splits_triton[(1,)]`` (sglang/kernels/ops/attention/metadata.py) in
  ``get_num_kv_splits``, then ``decode_attention_fwd`` (sglang/kernels/ops/attention/decode_attention.py)
  in ``forward_decode``.

``kernels`` is a :class:`decodecalc.verify.upstream.VllmKernels` or ``SglangKernels``.  The tensors
are the caller's: ``verify`` (:mod:`decodecalc.verify.step`), ``calibrate``
(:mod:`decodecalc.verify.calibration`), the launch recordings (:mod:`decodecalc.verify.recording`)
and ``benchmarks/measure_splits_h200.py`` all come through here.  Nothing is imported at module level.
"""

from __future__ import annotations

from typing import Any

from decodecalc.derived import next_power_of_2

__all__ = ["sglang_decode_attention", "sglang_max_num_seq", "sglang_num_kv_splits", "vllm_unified_attention",
           "vllm_window_size"]


def vllm_window_size(sliding_window: int | None) -> tuple[int, int]:
    """``window_size`` as ``TritonAttentionImpl.__init__`` sets it for decoder attention."""
    return (-1, -1) if sliding_window is None else (sliding_window - 1, 0)


def vllm_unified_attention(
    kernels: Any, *, q: Any, k: Any, v: Any, out: Any, cu_seqlens_q: Any, max_seqlen_q: int, seqused_k: Any,
    max_seqlen_k: int, block_table: Any, softmax_scale: float, seq_threshold_3D: int | None,
    num_par_softmax_segments: int | None, softmax_segm_output: Any, softmax_segm_max: Any, softmax_segm_expsum: Any,
    window_size: tuple[int, int] = (-1, -1), q_descale: Any = None, k_descale: Any = None, v_descale: Any = None,
    kv_quant_mode: Any = None,
) -> None:
    """One ``unified_attention`` call for a causal decoder layer without ALiBi, sinks, soft-cap or
    per-token KV scales (``kv_quant_mode`` None: ``KVQuantMode.NONE``)."""
    kernels.unified_attention(
        q=q, k=k, v=v, out=out, cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q, seqused_k=seqused_k,
        max_seqlen_k=max_seqlen_k, softmax_scale=softmax_scale, causal=True, alibi_slopes=None,
        use_alibi_sqrt=False, window_size=window_size, block_table=block_table, softcap=0,
        q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
        seq_threshold_3D=seq_threshold_3D, num_par_softmax_segments=num_par_softmax_segments,
        softmax_segm_output=softmax_segm_output, softmax_segm_max=softmax_segm_max,
        softmax_segm_expsum=softmax_segm_expsum, sinks=None, output_scale=None, mm_prefix_range=None,
        rswa_prefix_lens=None, rswa_window=None,
        kv_quant_mode=kernels.KVQuantMode.NONE if kv_quant_mode is None else kv_quant_mode,
        k_scale_cache=None, v_scale_cache=None, chunk_lookback=-1, use_td=False,
        mm_prefix_clamp_sliding_window=False,
    )


def sglang_max_num_seq(num_seq: int) -> int:
    """``MAX_NUM_SEQ`` as ``TritonAttnBackend.get_num_kv_splits`` picks it: ``max(256, next_power_of_2(num_seq))``."""
    return 256 if num_seq < 256 else next_power_of_2(num_seq)


def sglang_num_kv_splits(
    kernels: Any, *, num_kv_splits: Any, seq_lens: Any, num_seq: int, num_group: int, num_head: int,
    num_kv_head: int, max_kv_splits: int, device_core_count: int, uneven_batch: Any = None,
) -> None:
    """``get_num_kv_splits_triton[(1,)]`` as ``TritonAttnBackend.get_num_kv_splits`` launches it (writes
    ``num_kv_splits``; ``uneven_batch`` is the engine's [1] int32 flag, or None)."""
    kernels.get_num_kv_splits_triton[(1,)](
        num_kv_splits, seq_lens, num_seq, num_group, num_head, num_kv_head, max_kv_splits, device_core_count,
        MAX_NUM_SEQ=sglang_max_num_seq(num_seq), uneven_batch_ptr=uneven_batch,
    )


def sglang_decode_attention(
    kernels: Any, *, q: Any, k_buffer: Any, v_buffer: Any, o: Any, kv_indptr: Any, kv_indices: Any,
    attn_logits: Any, attn_lse: Any, num_kv_splits: Any, max_kv_splits: int, sm_scale: float,
    k_scale: float = 1.0, v_scale: float = 1.0, use_pdl: bool = False, uneven_batch: Any = None,
) -> None:
    """``decode_attention_fwd`` as ``TritonAttnBackend.forward_decode`` calls it for an MHA/GQA layer
    (no soft-cap, sinks, score_mod or MLA; page size 1; Lean decode is ROCm only)."""
    kernels.decode_attention_fwd(
        q, k_buffer, v_buffer, o, kv_indptr, kv_indices, attn_logits, attn_lse, num_kv_splits, max_kv_splits,
        sm_scale, k_scale, v_scale, logit_cap=0.0, sinks=None, xai_temperature_len=-1, has_mla=False,
        use_pdl=use_pdl, page_size=1, score_mod=None, aux_tensors=None, enable_lean=None, lean_Mp=None,
        lean_Lp=None, lean_Op=None, lean_locks=None, uneven_batch=uneven_batch,
    )
