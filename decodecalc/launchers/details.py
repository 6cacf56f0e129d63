"""What each launcher records about its launch beyond the common :class:`~decodecalc.launchers.base.LaunchPlan`
fields: one frozen record per launcher, its fields named as upstream names them (so a field reads against the
upstream line its launcher cites). The time model, the compare notes, determinism and verify read these fields;
:data:`PlanDetails` is their union, so a reader narrows with ``isinstance`` before it reads one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class VllmUnifiedDetails:
    """vLLM's Triton unified attention (launchers.vllm_unified)."""

    use_3d: bool
    #: per sequence: tiles each segment reads (3D), or the sequence's tiles (2D)
    tiles_per_segment: tuple[int, ...]
    #: per sequence: segments that read keys inside the sliding window (the active segments without one)
    window_segments: tuple[int, ...]
    #: per sequence: KV tiles read (a sliding window skips the tiles before it)
    kv_tiles_read: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SglangDetails:
    """SGLang's Triton decode (launchers.sglang_triton)."""

    mode: str  # "adaptive", "static" or "deterministic" num_kv_splits
    padded_rows: int  # CUDA-graph rows past the real batch
    window_kv_lens: tuple[int, ...] | None = None  # sliding-window layer: the keys each request reads


@dataclass(frozen=True, slots=True, kw_only=True)
class PagedAttentionDetails:
    """vLLM's legacy PagedAttention v1/v2 (launchers.vllm_paged_attention)."""

    version: str  # "v1" or "v2"
    max_num_partitions: int | None = None  # v2 only
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RocmDetails:
    """vLLM's ROCm custom paged attention (launchers.vllm_rocm)."""

    kernel: str
    max_num_partitions: int
    npar_loops: int
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Fa2Details:
    """flash-attn 2 (launchers.flash_attn2)."""

    paged_kv: bool
    seqlenq_ngroups_swapped: bool
    kBlockN: int
    num_n_blocks: int
    n_blocks_per_split: int
    entry: str  # "kvcache" or "varlen"
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Fa3Details:
    """FlashAttention-3 (launchers.flash_attn3)."""

    num_splits_static: int
    kBlockM: int
    kBlockN: int
    pagedkv_tma: bool
    pack_gqa: bool
    use_one_mma_wg: bool
    element_size: int
    tiles: int
    varlen: bool
    dynamic_splits: bool
    num_splits_arg: int
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FlashInferDetails:
    """FlashInfer's decode plan, either path (launchers.flashinfer): what its scheduler chose."""

    kv_chunk_size_in_pages: int | None  # None: split KV disabled (tensor-core path, disable_split_kv)
    split_kv: bool
    padded_batch_size: int
    new_batch_size: int
    cuda_graph: bool
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FlashInferDecodeDetails(FlashInferDetails):
    """The CUDA-core path (BatchDecodeWithPagedKVCacheWrapper)."""

    occupancy: int  # CTAs per SM
    max_grid_size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FlashInferTcDetails(FlashInferDetails):
    """The tensor-core path (the prefill plan)."""

    cta_tile_q: int
    fixed_split_size: int | None
    disable_split_kv: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class FlashMlaDetails:
    """FlashMLA (launchers.flashmla)."""

    num_sm_parts: int
    #: per request: the blocks of each of its pieces, in key order
    blocks_per_split: tuple[tuple[int, ...], ...]
    busy_parts: int
    #: per SM part: (blocks, pieces)
    part_loads: tuple[tuple[int, int], ...]
    note: str
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class XqaDetails:
    """FlashInfer's XQA (launchers.xqa)."""

    kernel: str  # "mha.cu" or "mha_sm90.cu"
    nbSubSeqPerSeq: int
    maxSeqLen: int
    sm_count: int
    tile_tokens: int
    in_kernel_merge: bool
    #: sub-sequence i reads tiles i, i + n, ... of this many tokens (determinism's key ranges)
    strided_tile_tokens: int
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TrtllmXqaDetails:
    """TensorRT-LLM's XQA with multi-block mode (launchers.trtllm)."""

    multi_block: int
    kernel: str  # "mha.cu" or "mha_sm90.cu"
    history_length: int
    xqa_sm_count: int
    in_kernel_merge: bool
    strided_tile_tokens: int
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MmhaDetails:
    """TensorRT-LLM's masked multi-head attention (launchers.trtllm)."""

    seq_len_tile: int
    multi_block: bool
    block_size: int  # threads per block (assumed)
    timesteps_per_block: int
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TrtllmGenDetails:
    """trtllm-gen's decode (launchers.trtllm_gen)."""

    numCtasPerSeqKv: int
    multiCtasKvMode: str
    max_seq_len: int
    flashinfer_version: str
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AiterDetails:
    """AMD aiter's unified attention (launchers.aiter)."""

    path: str  # "2D" or "3D"
    arch: str | None = None  # the commit's rule: the GPU architecture it reads
    release: str | None = None  # the package-index release's rule
    NUM_SEGMENTS: int | None = None  # 3D only
    TILE_SIZE: int | None = None  # 3D only
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TritonMlaDetails:
    """vLLM's TRITON_MLA decode (launchers.triton_mla)."""

    num_kv_splits: int
    max_seq_len: int
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FlashDecodingDetails:
    """The chapter's FlashDecoding baseline at S* (launchers.flashdecoding)."""

    S_star: int
    G_2D: int
    source: str


#: a plan's details: one record per launcher that has any
PlanDetails = (VllmUnifiedDetails | SglangDetails | PagedAttentionDetails | RocmDetails | Fa2Details | Fa3Details
               | FlashInferDecodeDetails | FlashInferTcDetails | FlashMlaDetails | XqaDetails | TrtllmXqaDetails
               | MmhaDetails | TrtllmGenDetails | AiterDetails | TritonMlaDetails | FlashDecodingDetails)
