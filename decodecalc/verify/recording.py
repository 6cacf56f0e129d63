"""Call the upstream launchers on small synthetic tensors and record what they launch.

Used by ``tools/record_upstream_grids.py`` (the recordings behind tests/test_upstream_recorded.py)
and the live interpreter tests.  The tensors mirror what the engines hold (vLLM:
``TritonAttentionImpl.forward``; SGLang: ``TritonAttnBackend``), and the call itself is
:mod:`decodecalc.verify.engine`'s.  When a kernel is intercepted its tensors are never read, so the
KV pool is kept small (block / slot ids wrap around ``pool_blocks`` / ``pool_slots``): the
launchers read only shapes, strides, dtypes and host scalars.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from decodecalc.derived import cdiv, next_power_of_2
from decodecalc.errors import DecodecalcError
from decodecalc.verify import engine
from decodecalc.verify.capture import LaunchRecorder, RecordedLaunch

__all__ = ["SglangCall", "VllmCall", "call_sglang_decode", "call_vllm_unified", "dtype_from_name"]

_DTYPES = {
    "fp16": "float16",
    "float16": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp32": "float32",
    "float32": "float32",
    "fp8": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "float8_e4m3fn": "float8_e4m3fn",
}


def dtype_from_name(name: str) -> Any:
    """The torch dtype a recording's dtype name (``fp16``, ``bf16``, ``fp8``, ...) stands for."""
    import torch

    try:
        return getattr(torch, _DTYPES[name])
    except KeyError as exc:
        raise DecodecalcError(f"unknown dtype {name!r}; known: {', '.join(sorted(_DTYPES))}") from exc


@dataclass
class VllmCall:
    """Result of one ``unified_attention`` call."""

    launches: list[RecordedLaunch]
    output: Any = None  # the ``out`` tensor (meaningful only when the kernels executed)
    tensors: dict[str, Any] = field(default_factory=dict)


def call_vllm_unified(
    kernels: Any,
    *,
    num_heads: int,
    num_kv_heads: int,
    head_size: int,
    seq_lens: tuple[int, ...],
    query_lens: tuple[int, ...],
    q_dtype: str = "fp16",
    kv_dtype: str | None = None,
    sliding_window: int | None = None,
    seq_threshold_3D: int | None = None,
    num_par_softmax_segments: int | None = 16,
    scratch_rows: int | None = None,
    block_size: int = 16,
    execute: bool | Callable[[str], bool] = False,
    pool_blocks: int | None = 64,
    seed: int = 0,
    device: str = "cpu",
    num_tokens: int | None = None,
) -> VllmCall:
    """Call vLLM's ``unified_attention`` as ``TritonAttentionImpl.forward`` does and record launches.

    ``kernels`` is a :class:`decodecalc.verify.upstream.VllmKernels`.  ``kv_dtype`` defaults to
    the query dtype, except an fp8 query (which vLLM uses only with an fp8 KV cache, whose
    per-tensor scales then fold into the score) gets an fp8 KV cache.  ``seq_threshold_3D=None``
    passes no split-K scratch at all (then vLLM always takes the 2D path); otherwise
    ``scratch_rows`` (the rows ``TritonAttentionMetadataBuilder`` allocates) is needed.
    ``pool_blocks=None`` allocates every KV block for real (needed when executing).
    ``num_tokens`` (default ``sum(query_lens)``) is ``q.shape[0]``; a larger value models a
    FULL CUDA-graph replay, whose padded requests have query length 0 and sequence length 0
    and whose padded tokens follow the real ones.
    """
    import torch

    if len(seq_lens) != len(query_lens):
        raise DecodecalcError("seq_lens and query_lens must have the same length")
    if any(q > s for q, s in zip(query_lens, seq_lens)):
        raise DecodecalcError("a query length exceeds its sequence length")
    if seq_threshold_3D is not None and num_par_softmax_segments is not None and scratch_rows is None:
        raise DecodecalcError("scratch_rows is needed with seq_threshold_3D (the backend's softmax_segm rows)")
    gen = torch.Generator().manual_seed(seed)
    qd = dtype_from_name(q_dtype)
    q_is_fp8 = qd.itemsize == 1
    kvd = dtype_from_name(kv_dtype) if kv_dtype else (dtype_from_name("fp8") if q_is_fp8 else qd)
    kv_is_fp8 = kvd.itemsize == 1
    out_dtype = torch.float16 if q_is_fp8 else qd  # fp8 query: output in the model dtype

    B = len(seq_lens)
    T = sum(query_lens) if num_tokens is None else num_tokens
    if T < sum(query_lens):
        raise DecodecalcError("num_tokens is smaller than the sum of the query lengths")
    d = head_size
    blocks_per_seq = [cdiv(s, block_size) for s in seq_lens]
    max_blocks = max(blocks_per_seq) if blocks_per_seq else 1
    need = sum(blocks_per_seq) + 1
    n_blocks = need if pool_blocks is None else max(1, min(need, pool_blocks))

    def rand(shape: tuple[int, ...], dtype: Any) -> Any:
        x = torch.randn(shape, generator=gen, dtype=torch.float32) * 0.5
        return x.to(dtype).to(device)

    q = rand((T, num_heads, d), qd)
    # vLLM's KV cache arrives as (blocks, kv_heads, block_size, 2*d); forward() transposes
    # dims 1 and 2 and splits the last one (non-contiguous K and V views).
    kv_cache = rand((n_blocks, num_kv_heads, block_size, 2 * d), kvd if not kv_is_fp8 else torch.float16)
    if kv_is_fp8:
        kv_cache = kv_cache.to(kvd)
    kv_cache = kv_cache.transpose(1, 2)
    key_cache, value_cache = kv_cache.split(d, dim=-1)
    out = torch.empty((T, num_heads, d), dtype=out_dtype, device=device)

    block_table = torch.zeros((B, max_blocks), dtype=torch.int32)
    nxt = 1  # block 0 left unused, as in vLLM (null block)
    for i, nb in enumerate(blocks_per_seq):
        ids = torch.arange(nxt, nxt + nb, dtype=torch.int32)
        block_table[i, :nb] = ids if pool_blocks is None else ids % n_blocks
        nxt += nb
    block_table = block_table.to(device)
    cu = [0]
    for ql in query_lens:
        cu.append(cu[-1] + ql)
    cu_seqlens_q = torch.tensor(cu, dtype=torch.int32, device=device)
    seqused_k = torch.tensor(seq_lens, dtype=torch.int32, device=device)

    KVQuantMode = kernels.KVQuantMode
    one = torch.ones((), dtype=torch.float32, device=device)
    descale_shape = (B, num_kv_heads)

    if seq_threshold_3D is None or num_par_softmax_segments is None or scratch_rows is None:  # (checked above)
        segm_out = segm_max = segm_sum = None
    else:
        rows, S = scratch_rows, num_par_softmax_segments
        segm_out = torch.empty((rows, num_heads, S, next_power_of_2(d)), dtype=torch.float32, device=device)
        segm_max = torch.empty((rows, num_heads, S), dtype=torch.float32, device=device)
        segm_sum = torch.empty((rows, num_heads, S), dtype=torch.float32, device=device)
    tensors = dict(q=q, key_cache=key_cache, value_cache=value_cache, block_table=block_table,
                   cu_seqlens_q=cu_seqlens_q, seqused_k=seqused_k)

    with LaunchRecorder(execute=execute) as rec:
        engine.vllm_unified_attention(
            kernels, q=q, k=key_cache, v=value_cache, out=out, cu_seqlens_q=cu_seqlens_q,
            max_seqlen_q=max(query_lens), seqused_k=seqused_k, max_seqlen_k=max(seq_lens),
            block_table=block_table, softmax_scale=float(d) ** -0.5, seq_threshold_3D=seq_threshold_3D,
            num_par_softmax_segments=num_par_softmax_segments, softmax_segm_output=segm_out,
            softmax_segm_max=segm_max, softmax_segm_expsum=segm_sum,
            window_size=engine.vllm_window_size(sliding_window),
            q_descale=one.reshape(1) if (kv_is_fp8 and q_is_fp8) else None,
            k_descale=one.reshape(1).expand(descale_shape), v_descale=one.reshape(1).expand(descale_shape),
            kv_quant_mode=KVQuantMode.FP8_PER_TENSOR if kv_is_fp8 else KVQuantMode.NONE,
        )
    return VllmCall(launches=list(rec.launches), output=out, tensors=tensors)


@dataclass
class SglangCall:
    """Result of one SGLang decode step: split counts and the launches."""

    num_kv_splits: tuple[int, ...]
    uneven_batch: int
    launches: list[RecordedLaunch]
    output: Any = None
    tensors: dict[str, Any] = field(default_factory=dict)


def call_sglang_decode(
    kernels: Any,
    *,
    seq_lens: tuple[int, ...],
    num_head: int,
    num_kv_head: int,
    device_core_count: int,
    max_kv_splits: int = 8,
    head_dim: int = 128,
    v_head_dim: int | None = None,
    dtype: str = "fp16",
    num_group: int = 1,
    execute: bool | Callable[[str], bool] | None = None,
    pool_slots: int | None = 4096,
    seed: int = 0,
    device: str = "cpu",
    run_decode: bool | None = None,
) -> SglangCall:
    """One SGLang Triton decode step, as ``TritonAttnBackend`` (SG23) runs it.

    1. ``init_forward_metadata`` (decode): ``attn_logits [B, h, max_kv_splits, d_v]``,
       ``attn_lse [B, h, max_kv_splits]`` (fp32), ``num_kv_splits [B]`` int32,
       ``uneven_batch [1]`` int32, then ``get_num_kv_splits`` (:func:`engine.sglang_num_kv_splits`);
    2. ``forward_decode`` (:func:`engine.sglang_decode_attention`).

    ``execute`` defaults to running only the split-count kernel (it must run: its result
    is the split count); pass ``True`` to run the attention kernels too (then use
    ``pool_slots=None`` so every KV slot is real).  With ``num_group > 1`` (speculative
    top-k: ``num_kv_splits`` has ``B * num_group`` entries) only the split count is computed
    unless ``run_decode=True``.
    """
    import torch

    if execute is None:
        execute = lambda name: name == "get_num_kv_splits_triton"  # noqa: E731
    gen = torch.Generator().manual_seed(seed)
    dt = dtype_from_name(dtype)
    dv = v_head_dim or head_dim
    B = len(seq_lens)
    num_token = B * num_group

    seq_lens_t = torch.tensor(seq_lens, dtype=torch.int64, device=device)  # forward_batch.seq_lens
    num_kv_splits = torch.empty((num_token,), dtype=torch.int32, device=device)
    uneven_batch = torch.zeros((1,), dtype=torch.int32, device=device)
    attn_logits = torch.empty((B, num_head, max_kv_splits, dv), dtype=torch.float32, device=device)
    attn_lse = torch.empty((B, num_head, max_kv_splits), dtype=torch.float32, device=device)

    total = sum(seq_lens)
    n_slots = total if pool_slots is None else max(1, min(total, pool_slots))

    def rand(shape: tuple[int, ...]) -> Any:
        return (torch.randn(shape, generator=gen, dtype=torch.float32) * 0.5).to(dt).to(device)

    q = rand((B, num_head, head_dim))
    k_buffer = rand((n_slots, num_kv_head, head_dim))
    v_buffer = rand((n_slots, num_kv_head, dv))
    o = torch.empty((B, num_head, dv), dtype=dt, device=device)
    indptr = [0]
    for s in seq_lens:
        indptr.append(indptr[-1] + s)
    kv_indptr = torch.tensor(indptr, dtype=torch.int32, device=device)
    idx = torch.arange(total, dtype=torch.int64)
    kv_indices = (idx if pool_slots is None else idx % n_slots).to(device)

    with LaunchRecorder(execute=execute) as rec:
        engine.sglang_num_kv_splits(
            kernels, num_kv_splits=num_kv_splits, seq_lens=seq_lens_t, num_seq=B, num_group=num_group,
            num_head=num_head, num_kv_head=num_kv_head, max_kv_splits=max_kv_splits,
            device_core_count=device_core_count, uneven_batch=uneven_batch,
        )
        if run_decode is None:
            run_decode = num_group == 1
        if run_decode:
            engine.sglang_decode_attention(
                kernels, q=q, k_buffer=k_buffer, v_buffer=v_buffer, o=o, kv_indptr=kv_indptr,
                kv_indices=kv_indices, attn_logits=attn_logits, attn_lse=attn_lse, num_kv_splits=num_kv_splits,
                max_kv_splits=max_kv_splits, sm_scale=float(head_dim) ** -0.5, uneven_batch=uneven_batch,
            )
    splits = tuple(int(x) for x in num_kv_splits.cpu().tolist())
    return SglangCall(
        num_kv_splits=splits,
        uneven_batch=int(uneven_batch.cpu().item()),
        launches=list(rec.launches),
        output=o,
        tensors={"q": q, "k_buffer": k_buffer, "v_buffer": v_buffer, "kv_indptr": kv_indptr,
                 "kv_indices": kv_indices, "attn_logits": attn_logits, "attn_lse": attn_lse},
    )
