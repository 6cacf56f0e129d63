"""vLLM's Triton attention backend: the engine settings it reads and what its metadata builder fixes at start.

Mirrors ``TritonAttentionMetadataBuilder`` of vLLM v0.33.0, vllm/v1/attention/backends/triton_attn.py
(L58-59 constants, L136-149 seq_threshold_3D and its CUDA-graph snapping, L150-210 scratch, L264-280 SM 12.0),
and the 0.14.0 / 0.11.0 variants. The kernel wrapper it feeds is :mod:`decodecalc.launchers.vllm_unified`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from decodecalc.derived import Explain, cdiv, next_power_of_2
from decodecalc.errors import ConfigError
from decodecalc.formatting import fmt_sizes
from decodecalc.launchers import vllm_cudagraphs as cg
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

VERSIONS = ("0.34.0", "0.33.0", "0.14.0", "0.11.0")
#: the releases with the split-K scratch, the SM120 64-segment rule and the 3D gate as 0.33.0 has them: 0.34.0's
#: NVIDIA path is 0.33.0's (triton_attn.py L50-210 differs only in taking num_heads_kv and head size per KV-cache group,
#: the same for a model whose layers all have one shape, and a renamed speculative field; the ops file adds ROCm RDNA
#: rules only)
SCRATCH_VERSIONS = ("0.34.0", "0.33.0")

_OPS = "vllm/v1/attention/ops/triton_unified_attention.py"
_BACKEND = "vllm/v1/attention/backends/triton_attn.py"

# vllm 0.33.0 triton_attn.py L58-59 (0.14.0 L40-41)
MIN_LAUNCH_GRID_SIZE_2D = 128
NUM_PAR_SOFTMAX_SEGMENTS = 16
# vllm 0.33.0 triton_unified_attention.py L37: longest per-request query the 3D path runs
MAX_3D_QUERY_LEN = 8
# SM 12.0 only: the backend builds 64-segment scratch (triton_attn.py L152-162, 0.33.0)
NUM_PAR_SOFTMAX_SEGMENTS_SM120 = 64
#: Triton's largest tensor, in elements (triton/_utils.py L11 TRITON_MAX_TENSOR_NUMEL, checked for every block shape
#: with every dimension a power of two, L48-58; the same in Triton 3.6.0 and 3.9.0)
TRITON_MAX_TENSOR_NUMEL = 1 << 20


def max_num_par_softmax_segments(head_size: int) -> int:
    """The largest NUM_PAR_SOFTMAX_SEGMENTS vLLM 0.33.0's kernels compile: ``reduce_segments`` holds an
    (NUM_SEGMENTS_PER_SEQ, HEAD_SIZE_PADDED) fp32 tile (triton_unified_attention.py L771-785), so the two multiply to
    at most TRITON_MAX_TENSOR_NUMEL: 8,192 at head size 128. Above it, and for a count that is not a power of two
    (``tl.arange(0, NUM_SEGMENTS_PER_SEQ)``, L745 / L754 / L774; Triton's language/semantic.py L572-583), the first 3D
    launch (the CUDA-graph capture at engine start) fails to compile; the 3D kernel itself takes any count (L325)."""
    return TRITON_MAX_TENSOR_NUMEL // next_power_of_2(head_size)


def is_legal_segment_count(segments: int, head_size: int) -> bool:
    """A power of two from 1 to :func:`max_num_par_softmax_segments`."""
    return 1 <= segments <= max_num_par_softmax_segments(head_size) and segments & (segments - 1) == 0


def src(version: str, path: str, lines: str) -> str:
    return f"vllm {version} {path} {lines}"


# --------------------------------------------------------------------------------------------
# Backend (metadata builder) and engine settings


@dataclass(frozen=True, slots=True, kw_only=True)
class VllmSettings:
    """Engine settings that change what the Triton backend launches (EngineArgs defaults of 0.33.0)."""

    version: str = "0.34.0"
    cudagraph_mode: str = "FULL_AND_PIECEWISE"  # -O2 default (vllm/config/vllm.py L297-311); NONE = eager
    model_runner: str = "v2"  # V2 is the 0.33.0 default (vllm/config/vllm.py L731-767)
    max_num_seqs: int = 1024  # EngineArgs default on >= 70 GiB GPUs (vllm/engine/arg_utils.py L2973-2996)
    max_num_batched_tokens: int = 8192
    num_speculative_tokens: int = 0
    batch_invariant: bool = False
    performance_mode: str = "balanced"
    capture_sizes: tuple[int, ...] | None = None  # user --cuda-graph-sizes
    seq_threshold_3d: int | None = None  # override of the builder's threshold (after snapping)
    # what-if values of the backend's module constants (triton_attn.py L58-59); None: upstream's
    min_launch_grid_size_2d: int | None = None  # MIN_LAUNCH_GRID_SIZE_2D (snapping still applies)
    num_par_softmax_segments: int | None = None  # NUM_PAR_SOFTMAX_SEGMENTS
    #: --attention-config.flash_attn_max_num_splits_for_cuda_graph: FA3's split cap under full CUDA graphs
    #: (vllm/config/attention.py L61 in 0.33.0, L66 in 0.34.0; default 32)
    flash_attn_max_num_splits_for_cuda_graph: int = 32

    def __post_init__(self) -> None:
        if self.version not in VERSIONS:
            raise ConfigError(f"vLLM version {self.version!r} is not modeled; valid: {', '.join(VERSIONS)}")
        if self.cudagraph_mode not in cg.CUDAGRAPH_MODES:
            raise ConfigError(f"cudagraph mode {self.cudagraph_mode!r}; valid: {', '.join(cg.CUDAGRAPH_MODES)}")
        if self.model_runner not in ("v1", "v2"):
            raise ConfigError(f"model runner {self.model_runner!r}; valid: v1, v2")
        if self.max_num_seqs <= 0:
            raise ConfigError(f"--max-num-seqs must be positive, got {self.max_num_seqs}")
        if self.max_num_batched_tokens <= 0:
            raise ConfigError(f"--max-num-batched-tokens must be positive, got {self.max_num_batched_tokens}")
        if self.seq_threshold_3d is not None and self.seq_threshold_3d < 0:
            raise ConfigError(f"--seq-threshold-3d must be >= 0, got {self.seq_threshold_3d}")
        if self.performance_mode not in ("balanced", "interactivity", "throughput"):
            raise ConfigError(f"performance mode {self.performance_mode!r}; valid: balanced, interactivity, throughput")


@dataclass(frozen=True, slots=True)
class TritonBackend:
    """What ``TritonAttentionMetadataBuilder.__init__`` fixes once, at engine start."""

    capture_sizes: tuple[int, ...]  # the engine's list
    builder_capture_sizes: tuple[int, ...]  # the copy the builder snaps against (V1 + spec: rounded)
    seq_threshold_3D: int
    num_par_softmax_segments: int
    max_query_len_3d: int
    scratch_rows: int
    max_seqs_64_segments: int
    head_size_padded: int
    explain: tuple = field(default=(), compare=False)

    def scratch_bytes(self, num_heads: int) -> int:
        per_row_head = self.num_par_softmax_segments * (self.head_size_padded + 2) * 4
        return self.scratch_rows * num_heads * per_row_head


def build_backend(work: Workload, gpu: GPUSpec, settings: VllmSettings) -> TritonBackend:
    """Threshold (snapped to a capture size under FULL decode graphs), segment count and scratch rows."""
    ex = Explain()
    v = settings.version
    q = 1 + settings.num_speculative_tokens
    cc_major = gpu.compute_capability[0] if gpu.compute_capability else 0
    sizes: tuple[int, ...] = ()
    if settings.cudagraph_mode != "NONE":
        sizes = cg.capture_sizes(
            max_num_seqs=settings.max_num_seqs, max_num_batched_tokens=settings.max_num_batched_tokens,
            num_speculative_tokens=settings.num_speculative_tokens, compute_capability_major=cc_major,
            performance_mode=settings.performance_mode, user_sizes=settings.capture_sizes,
        )
    builder_sizes = sizes
    if settings.model_runner == "v1" and settings.cudagraph_mode in cg.FULL_DECODE_MODES:
        builder_sizes = cg.round_sizes_for_spec_decode(sizes, q)
    ex.add("cudagraph_capture_sizes", fmt_sizes(sizes, limit=12, head=6, tail=3, brackets=True),
           "VllmConfig._set_cudagraph_sizes(max_num_seqs, max_num_batched_tokens, 1 + num_speculative_tokens), "
           "empty when mode is NONE", cg.SOURCE_SIZES,
           max_num_seqs=settings.max_num_seqs, max_num_batched_tokens=settings.max_num_batched_tokens,
           num_speculative_tokens=settings.num_speculative_tokens, mode=settings.cudagraph_mode)
    min_grid = MIN_LAUNCH_GRID_SIZE_2D if settings.min_launch_grid_size_2d is None else settings.min_launch_grid_size_2d
    raw = min_grid // work.num_kv_heads
    ex.add("seq_threshold_3D_raw", raw, "MIN_LAUNCH_GRID_SIZE_2D // num_heads_kv",
           src(v, _BACKEND, "L136"), MIN_LAUNCH_GRID_SIZE_2D=min_grid, num_heads_kv=work.num_kv_heads)
    threshold = raw
    if settings.cudagraph_mode in cg.FULL_DECODE_MODES and builder_sizes and v != "0.11.0":
        threshold = cg.snap_threshold(raw, builder_sizes)
        ex.add("seq_threshold_3D", threshold, "capture size closest to seq_threshold_3D_raw (ties: smaller)",
               cg.SOURCE_SNAP, seq_threshold_3D_raw=raw)
    if settings.seq_threshold_3d is not None:
        threshold = settings.seq_threshold_3d
        ex.add("seq_threshold_3D", threshold, "user override (--seq-threshold-3d)", "decodecalc option",
               seq_threshold_3d=threshold)

    segments = settings.num_par_softmax_segments or NUM_PAR_SOFTMAX_SEGMENTS
    max_seqs_64 = 0
    if v in SCRATCH_VERSIONS and gpu.compute_capability == (12, 0):
        max_seqs_64 = (gpu.num_sms - 1) // (NUM_PAR_SOFTMAX_SEGMENTS * work.num_kv_heads)
        ex.add("max_seqs_64_segments", max_seqs_64, "(num_compute_units - 1) // (16 * num_heads_kv)",
               src(v, _BACKEND, "L152-162"), num_compute_units=gpu.num_sms, num_heads_kv=work.num_kv_heads)
    max_query_len_3d = min(q, MAX_3D_QUERY_LEN) if settings.num_speculative_tokens else 1
    if v in SCRATCH_VERSIONS:
        rows = min(threshold, settings.max_num_seqs) * max_query_len_3d
        formula = "min(seq_threshold_3D, max_num_seqs) * max_query_len_3d"
        if max_seqs_64 > 0:
            segments = NUM_PAR_SOFTMAX_SEGMENTS_SM120
            rows = max(min(max_seqs_64, min(threshold, settings.max_num_seqs)) * max_query_len_3d,
                       cdiv(rows, NUM_PAR_SOFTMAX_SEGMENTS_SM120 // NUM_PAR_SOFTMAX_SEGMENTS))
            formula = "max(min(max_seqs_64_segments, max_num_seqs_3d) * max_query_len_3d, cdiv(rows_16, 4))"
        lines = "L164-210"
    elif v == "0.14.0":
        rows, formula, lines = threshold, "seq_threshold_3D", "L167-186"
    else:
        rows, formula, lines = 0, "allocated inside every 3D call with q.shape[0] rows", "L805-826"
    ex.add("scratch_rows", rows, formula, src(v, _BACKEND if v != "0.11.0" else _OPS, lines),
           seq_threshold_3D=threshold, max_num_seqs=settings.max_num_seqs, max_query_len_3d=max_query_len_3d)
    return TritonBackend(
        capture_sizes=sizes, builder_capture_sizes=builder_sizes, seq_threshold_3D=threshold,
        num_par_softmax_segments=segments, max_query_len_3d=max_query_len_3d, scratch_rows=rows,
        max_seqs_64_segments=max_seqs_64, head_size_padded=next_power_of_2(work.head_size), explain=ex.items(),
    )
