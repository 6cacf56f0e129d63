"""vLLM's Triton unified attention: BLOCK_M/BLOCK_Q packing, the 2D/3D gate, segments, reduce.

Mirrors, in vLLM v0.33.0 (wheel source, line numbers of that release):
- ``unified_attention``               vllm/v1/attention/ops/triton_unified_attention.py L828-1231
  (BLOCK_M/BLOCK_Q L958-961, total_num_q_blocks L992, use_3d L1070-1091, grids L1118-1123,
  reduce_segments grid L1211, tile sizes ``_get_tile_size`` L810-825, MAX_3D_QUERY_LEN L37)
- ``kernel_unified_attention``        same file, early exits L321-327 (q-block, segment)
- ``reduce_segments``                 same file, act_num_segments L741-747
- ``TritonAttentionMetadataBuilder``  vllm/v1/attention/backends/triton_attn.py: in
  :mod:`decodecalc.launchers.vllm_triton_backend` (engine settings, threshold, segments, scratch)
Older gates: v0.14.0 (``2D iff max_seqlen_q > 1 or B > seq_threshold_3D``, L952-963) and
v0.11.0 (``2D iff max_seqlen_q > 1 or total_num_q_blocks * h_kv > 128``, L750, scratch per call).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from decodecalc.derived import Explain, cdiv, maximum, next_power_of_2, prod
from decodecalc.errors import ConfigError, UnsupportedError
from decodecalc.launchers import vllm_cudagraphs as cg
from decodecalc.launchers.base import KernelKind, KernelLaunch, LaunchPlan, SweepRow
from decodecalc.launchers.details import VllmUnifiedDetails
from decodecalc.launchers.vllm_triton_backend import (  # the backend's half, re-exported for callers of this module
    _BACKEND,
    _OPS,
    MAX_3D_QUERY_LEN,
    MIN_LAUNCH_GRID_SIZE_2D,
    NUM_PAR_SOFTMAX_SEGMENTS,
    NUM_PAR_SOFTMAX_SEGMENTS_SM120,
    SCRATCH_VERSIONS,
    VERSIONS,
    TritonBackend,
    VllmSettings,
    build_backend,
    src,
)
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

# 0.11.0: the segment count was a local constant of the wrapper (L803)
NUM_SEGMENTS_V11 = 16


def is_gemma3_attention(head_size: int, sliding_window: int) -> bool:
    """``_is_gemma3_attention``: window 1024 with head size 128 or 256 (0.33.0 L800-807)."""
    return sliding_window == 1024 and head_size in (128, 256)


def get_tile_size(head_size: int, sliding_window: int, element_size: int, is_prefill: bool) -> int:
    """``_get_tile_size`` (0.33.0 L810-825): Gemma-3 32; 2D/prefill 32; 3D 16, or 32 for fp8 queries."""
    if is_gemma3_attention(head_size, sliding_window):
        return 32
    if is_prefill:
        return 32
    return 16 if element_size >= 2 else 32


#: the BLOCK_M rule as --explain prints it (the code is :func:`block_shape`)
BLOCK_M_FORMULA = ("16 if num_queries_per_kv <= 16 "
                   "else next_power_of_2(num_queries_per_kv)")


def block_shape(num_queries_per_kv: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_Q): query heads of one KV group x query tokens packed into one program
    (0.33.0 L958-961): BLOCK_M is 16 up to 16 query heads per KV head, else their next power of 2;
    BLOCK_Q = BLOCK_M // num_queries_per_kv. The one copy of this rule in decodecalc."""
    block_m = 16 if num_queries_per_kv <= 16 else next_power_of_2(num_queries_per_kv)
    return block_m, block_m // num_queries_per_kv


@dataclass(frozen=True, slots=True)
class UnifiedLaunch:
    """What ``unified_attention`` launches for one call."""

    use_3d: bool
    grid: tuple[int, ...]
    reduce_grid: tuple[int, int] | None
    block_m: int
    block_q: int
    tile_size: int
    tile_size_decode: int
    total_num_q_blocks: int
    num_segments: int
    reasons_2d: tuple[str, ...]
    explain: tuple = field(default=(), compare=False)

    def live_rows(self, num_queries_per_kv: int, query_len: int) -> int:
        """Rows of one program's BLOCK_M tile that hold a real (query token, query head) pair for a request
        of ``query_len`` tokens: BLOCK_Q tokens x num_queries_per_kv heads, at most BLOCK_M."""
        return min(self.block_m, num_queries_per_kv * min(query_len, self.block_q))


def unified_attention_grid(
    *,
    num_tokens: int,
    seq_lens: tuple[int, ...],
    query_lens: tuple[int, ...],
    num_heads: int,
    num_kv_heads: int,
    head_size: int,
    q_dtype_bytes: int,
    sliding_window: int | None,
    seq_threshold_3D: int | None,
    num_par_softmax_segments: int | None,
    scratch_rows: int | None,
    batch_invariant: bool,
    version: str = "0.34.0",
    is_sm100: bool = False,
) -> UnifiedLaunch:
    """The wrapper's arithmetic, call by call, exactly as ``unified_attention`` does it."""
    if version not in VERSIONS:
        raise ConfigError(f"vLLM version {version!r} is not modeled; valid: {', '.join(VERSIONS)}")
    ex = Explain()
    num_seqs = len(seq_lens)
    max_seqlen_q = max(query_lens)
    lines = {"0.34.0": ("L1073-1075", "L1076", "L1130", "L1221-1242", "L1382-1387", "L1475", "L924-939"),
             "0.33.0": ("L958-960", "L961", "L992", "L1070-1091", "L1118-1123", "L1211", "L810-825"),
             "0.14.0": ("L899-901", "L902", "L934", "L952-963", "L1019-1021", "L1041", "L840-859"),
             "0.11.0": ("L730-732", "L733", "L747", "L750", "L840-860", "L874", "L746-747")}[version]
    path = _OPS if version != "0.11.0" else "vllm/attention/ops/triton_unified_attention.py"
    qpk = ex.add("num_queries_per_kv", num_heads // num_kv_heads, "num_query_heads // num_kv_heads",
                 src(version, path, lines[0]), num_query_heads=num_heads, num_kv_heads=num_kv_heads)
    block_m, block_q = block_shape(qpk)
    ex.add("BLOCK_M", block_m, BLOCK_M_FORMULA,
           src(version, path, lines[0]), num_queries_per_kv=qpk)
    # SM100-only tuned path for head size 256 prefill-shaped calls (0.33.0 L971-980)
    tuned_large_head = version in SCRATCH_VERSIONS and is_sm100 and head_size == 256 and max_seqlen_q > 1 and qpk <= 16
    if tuned_large_head:
        block_m = 32
        block_q = block_m // qpk
    ex.add("BLOCK_Q", block_q, "BLOCK_M // num_queries_per_kv", src(version, path, lines[1]),
           BLOCK_M=block_m, num_queries_per_kv=qpk)
    total_num_q_blocks = ex.add("total_num_q_blocks", num_tokens // block_q + num_seqs,
                                "q.shape[0] // BLOCK_Q + num_seqs", src(version, path, lines[2]),
                                **{"q.shape[0]": num_tokens, "BLOCK_Q": block_q, "num_seqs": num_seqs})  # type: ignore[arg-type]  # input labels, not parameters
    window = sliding_window or 0
    tile_prefill = get_tile_size(head_size, window, q_dtype_bytes, True)
    tile_decode = get_tile_size(head_size, window, q_dtype_bytes, False)
    if tuned_large_head:
        tile_prefill = 128

    reasons: list[str] = []
    if version in SCRATCH_VERSIONS:
        if seq_threshold_3D is None or num_par_softmax_segments is None or scratch_rows is None:
            reasons.append("no split-K scratch: seq_threshold_3D, num_par_softmax_segments or softmax_segm_* is None")
        if max_seqlen_q > 1:
            if max_seqlen_q > MAX_3D_QUERY_LEN:
                reasons.append(f"mixed prefill: max_seqlen_q {max_seqlen_q} > MAX_3D_QUERY_LEN {MAX_3D_QUERY_LEN}"
                               " (a prefill chunk or speculative decode over 8 tokens)")
            if tuned_large_head:
                reasons.append("SM100 tuned large-head path (head size 256, max_seqlen_q > 1)")
        if seq_threshold_3D is not None:
            q_blocks = num_seqs * cdiv(max_seqlen_q, block_q)
            ex.add("q_blocks_for_gate", q_blocks, "num_seqs * cdiv(max_seqlen_q, BLOCK_Q)",
                   src(version, path, lines[3]), num_seqs=num_seqs, max_seqlen_q=max_seqlen_q, BLOCK_Q=block_q)
            if q_blocks > seq_threshold_3D:
                reasons.append(f"batch over threshold: num_seqs * cdiv(max_seqlen_q, BLOCK_Q) = {q_blocks} > "
                               f"seq_threshold_3D {seq_threshold_3D}")
        if batch_invariant:
            reasons.append("batch invariance: VLLM_BATCH_INVARIANT=1")
        if not reasons and scratch_rows is not None and scratch_rows < num_tokens:
            reasons.append(f"scratch too small: softmax_segm rows {scratch_rows} < query tokens {num_tokens}")
    elif version == "0.14.0":
        if seq_threshold_3D is None or num_par_softmax_segments is None or scratch_rows is None:
            reasons.append("no split-K scratch: seq_threshold_3D or the softmax_segm_* buffers are None")
        if max_seqlen_q > 1:
            reasons.append(f"prefill or speculative tokens in batch: max_seqlen_q {max_seqlen_q} > 1")
        if seq_threshold_3D is not None and num_seqs > seq_threshold_3D:
            reasons.append(f"batch over threshold: num_seqs {num_seqs} > seq_threshold_3D {seq_threshold_3D}")
    else:  # 0.11.0
        if max_seqlen_q > 1:
            reasons.append(f"prefill or speculative tokens in batch: max_seqlen_q {max_seqlen_q} > 1")
        if total_num_q_blocks * num_kv_heads > MIN_LAUNCH_GRID_SIZE_2D:
            reasons.append(f"2D grid already large: total_num_q_blocks * num_kv_heads = "
                           f"{total_num_q_blocks * num_kv_heads} > {MIN_LAUNCH_GRID_SIZE_2D}")
    use_3d = not reasons
    ex.add("use_3d", use_3d, "not any(reasons_2d)", src(version, path, lines[3]),
           reasons_2d="; ".join(reasons) or "none")

    if version == "0.11.0":
        segments = NUM_SEGMENTS_V11
    else:
        segments = num_par_softmax_segments or NUM_PAR_SOFTMAX_SEGMENTS
    if use_3d:
        grid: tuple[int, ...] = (total_num_q_blocks, num_kv_heads, segments)
        reduce_grid: tuple[int, int] | None = (num_tokens, num_heads)
        tile = tile_decode
        ex.add("grid", grid, "(total_num_q_blocks, num_kv_heads, num_par_softmax_segments)",
               src(version, path, lines[4]), total_num_q_blocks=total_num_q_blocks, num_kv_heads=num_kv_heads,
               num_par_softmax_segments=segments)
        ex.add("reduce_grid", reduce_grid, "(q.shape[0], num_query_heads)", src(version, path, lines[5]),
               **{"q.shape[0]": num_tokens, "num_query_heads": num_heads})  # type: ignore[arg-type]  # input labels, not parameters
    else:
        grid = (total_num_q_blocks, num_kv_heads)
        reduce_grid = None
        tile = tile_prefill
        ex.add("grid", grid, "(total_num_q_blocks, num_kv_heads)", src(version, path, lines[4]),
               total_num_q_blocks=total_num_q_blocks, num_kv_heads=num_kv_heads)
    ex.add("TILE_SIZE", tile,
           "32 if sliding_window == 1024 and head_size in (128, 256) (Gemma-3) else 32 if not is_3d "
           "else 16 if element_size >= 2 else 32",
           src(version, path, lines[6]), head_size=head_size, sliding_window=window,
           element_size=q_dtype_bytes, is_3d=use_3d)
    return UnifiedLaunch(
        use_3d=use_3d, grid=grid, reduce_grid=reduce_grid, block_m=block_m, block_q=block_q, tile_size=tile,
        tile_size_decode=tile_decode, total_num_q_blocks=total_num_q_blocks,
        num_segments=segments if use_3d else 1, reasons_2d=tuple(reasons), explain=ex.items(),
    )


def tiles_per_segment(seq_len: int, num_segments: int, tile_size: int) -> int:
    """``cdiv(seq_len, NUM_SEGMENTS_PER_SEQ * TILE_SIZE)`` (kernel L325). Elementwise on arrays of lengths."""
    return cdiv(seq_len, num_segments * tile_size)


def active_segments(seq_len: int, num_segments: int, tile_size: int) -> int:
    """Segments that read keys: ``cdiv(seq_len, tiles_per_segment * TILE_SIZE)`` (reduce L741-747); 0 for an
    empty sequence. Elementwise on arrays of lengths (tune's batch evaluator; empty rows pad a batch)."""
    if not hasattr(seq_len, "shape") and seq_len <= 0:
        return 0
    return cdiv(seq_len, maximum(tiles_per_segment(seq_len, num_segments, tile_size), 1) * tile_size)


def segment_ranges(seq_len: int, num_segments: int, tile_size: int) -> tuple[tuple[int, int], ...]:
    """Key range [start, end) of every launched segment; empty (start == end) for those that return early."""
    tps = tiles_per_segment(seq_len, num_segments, tile_size)
    ranges = []
    for s in range(num_segments):
        start = s * tps * tile_size
        if start >= seq_len:
            ranges.append((seq_len, seq_len))
        else:
            ranges.append((start, min((s + 1) * tps * tile_size, seq_len)))
    return tuple(ranges)


# --------------------------------------------------------------------------------------------
# The plan for one decode step


@dataclass(frozen=True, slots=True)
class VllmPlan:
    """The launch for the batch as given, and the padded FULL-graph replay when one runs."""

    plan: LaunchPlan
    launch: UnifiedLaunch
    backend: TritonBackend
    settings: VllmSettings  # the engine settings this plan was made for
    replay_mode: str  # "FULL", "PIECEWISE" or "eager"
    replay: "VllmReplay | None"
    segments_per_seq: tuple[int, ...]  # allocated segments per sequence (1 on 2D)
    active_segments: tuple[int, ...]
    tiles_per_segment: tuple[int, ...]
    # segments whose tile loop reads keys inside the sliding window (== active_segments on global layers)
    window_segments: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class VllmReplay:
    num_reqs_padded: int
    num_tokens_padded: int
    launch: UnifiedLaunch
    plan: LaunchPlan


def check_supported(work: Workload, settings: VllmSettings) -> None:
    """vLLM's own startup checks that reject a config before any launch."""
    if work.model.is_mla:
        raise UnsupportedError(
            f"{work.model.name} uses MLA; vLLM's Triton unified attention (TRITON_ATTN) serves MHA/GQA only "
            "(MLA runs on the TRITON_MLA / FlashMLA backends)"
        )
    if work.block_size % 16:
        raise ConfigError(
            f"--block-size {work.block_size}: vLLM's Triton backend supports kernel block sizes "
            f"MultipleOf(16) ({_BACKEND} L339-346, 0.33.0); use 16, 32, 48, 64, ..."
        )
    if work.head_size < 32:
        raise UnsupportedError(f"head size {work.head_size} < 32 is not supported by TRITON_ATTN ({_BACKEND} L379-380)")


def _sliding_window(work: Workload, layer: str) -> int | None:
    if layer == "sliding":
        return work.model.sliding_window
    return None


def plan_vllm(work: Workload, gpu: GPUSpec, settings: VllmSettings | None = None, *, layer: str = "global") -> VllmPlan:
    """Model the whole Triton-backend decode step: backend init, the call as given, the graph replay."""
    settings = settings or VllmSettings()
    check_supported(work, settings)
    backend = build_backend(work, gpu, settings)
    window = _sliding_window(work, layer)
    segments = backend.num_par_softmax_segments
    scratch_rows = backend.scratch_rows
    # SM 12.0: build() falls back to a 16-segment view of the same buffer (4x the rows)
    if backend.max_seqs_64_segments > 0 and (
        backend.max_seqs_64_segments < work.batch or backend.scratch_rows < work.num_tokens
    ):
        segments = NUM_PAR_SOFTMAX_SEGMENTS
        scratch_rows = backend.scratch_rows * (NUM_PAR_SOFTMAX_SEGMENTS_SM120 // NUM_PAR_SOFTMAX_SEGMENTS)
    if settings.version == "0.11.0":
        scratch_rows = work.num_tokens  # allocated per call
    launch = unified_attention_grid(
        num_tokens=work.num_tokens, seq_lens=work.seq_lens, query_lens=work.query_lens,
        num_heads=work.num_heads, num_kv_heads=work.num_kv_heads, head_size=work.head_size,
        q_dtype_bytes=_query_element_size(work, gpu), sliding_window=window,
        seq_threshold_3D=backend.seq_threshold_3D, num_par_softmax_segments=segments,
        scratch_rows=scratch_rows, batch_invariant=settings.batch_invariant, version=settings.version,
        is_sm100=gpu.compute_capability is not None and gpu.compute_capability[0] == 10,
    )
    plan, segs, active, tps = _launch_plan(work, launch, backend, window, "vllm")

    # CUDA graphs: a FULL replay repeats the launch decided at capture for the padded batch.
    q = 1 + settings.num_speculative_tokens
    replay = cg.dispatch(query_lens=work.query_lens, sizes=backend.capture_sizes, mode=settings.cudagraph_mode,
                         q=q, max_num_seqs=settings.max_num_seqs) if settings.version != "0.11.0" else \
        cg.Replay("eager", work.batch, work.num_tokens)
    replay_out: VllmReplay | None = None
    if replay.mode == "FULL":
        b_pad, t_pad = replay.num_reqs_padded, replay.num_tokens_padded
        # FULL mode captures with max_query_len = T_pad; the decode modes with q (cudagraph_utils.py L744)
        q_capture = t_pad if settings.cudagraph_mode == "FULL" else q
        pad_q = _padded_query_lens(work.query_lens, b_pad, t_pad, q_capture)
        padded = unified_attention_grid(
            num_tokens=t_pad, seq_lens=(1,) * b_pad, query_lens=pad_q,
            num_heads=work.num_heads, num_kv_heads=work.num_kv_heads, head_size=work.head_size,
            q_dtype_bytes=_query_element_size(work, gpu), sliding_window=window,
            seq_threshold_3D=backend.seq_threshold_3D, num_par_softmax_segments=segments,
            scratch_rows=scratch_rows, batch_invariant=settings.batch_invariant, version=settings.version,
            is_sm100=gpu.compute_capability is not None and gpu.compute_capability[0] == 10,
        )
        # Replayed with the real lengths; padded requests (query length 0, seq_len 0) exit at once.
        replay_plan, *_ = _launch_plan(work, padded, backend, window, "vllm (CUDA-graph replay)")
        replay_out = VllmReplay(b_pad, t_pad, padded, replay_plan)
    return VllmPlan(plan=plan, launch=launch, backend=backend, settings=settings, replay_mode=replay.mode,
                    replay=replay_out,
                    segments_per_seq=segs, active_segments=active, tiles_per_segment=tps,
                    window_segments=plan.details_as(VllmUnifiedDetails).window_segments)


def _padded_query_lens(real: tuple[int, ...], b_pad: int, t_pad: int, q_capture: int) -> tuple[int, ...]:
    """Query lengths the captured launch was decided with: max_seqlen_q = q_capture, T = t_pad."""
    lens = list(real) + [0] * (b_pad - len(real))
    lens[0] = max(lens[0], q_capture)  # only max() and the totals enter the wrapper's arithmetic
    return tuple(lens)


def _query_element_size(work: Workload, gpu: GPUSpec) -> int:
    """On CUDA an fp8 KV cache makes the layer quantize the query to fp8 (0.33.0 attention.py L470-488,
    triton_attn.py supports_quant_query_input = is_cuda()); on ROCm the query stays in the model dtype."""
    if work.kv_cache_dtype.startswith("fp8") and gpu.vendor == "nvidia":
        return 1
    return work.q_bytes


def _launch_plan(
    work: Workload, launch: UnifiedLaunch, backend: TritonBackend, window: int | None, system: str
) -> tuple[LaunchPlan, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Programs that work, segments per sequence, and partial-state bytes of one launch.

    For a padded replay, ``launch`` carries padded counts while ``work`` holds the real requests:
    padded requests have query length 0 and seq_len 0, so none of their programs does work.
    """
    ex = Explain()
    tile = launch.tile_size
    hd_pad = next_power_of_2(work.head_size)
    q_blocks_working = [cdiv(ql, launch.block_q) for ql in work.query_lens]
    if launch.use_3d:
        s = launch.num_segments
        tps = tuple(tiles_per_segment(L, s, tile) for L in work.seq_lens)
        # early exit (kernel L325-327): a segment past seq_len returns; every other segment writes
        # its partial state, even one whose tiles all lie before the window, and reduce_segments
        # reads cdiv(L, tps * TILE) of them (L741-747)
        active = tuple(active_segments(L, s, tile) for L in work.seq_lens)
        window_segs = tuple(window_segments(L, q, s, tile, window) for L, q in zip(work.seq_lens, work.query_lens))
        tiles_read = tuple(window_tiles(L, q, tile, window) for L, q in zip(work.seq_lens, work.query_lens))
        segs = (s,) * work.batch
        working_main = sum(qb * a for qb, a in zip(q_blocks_working, active)) * work.num_kv_heads
        tokens_per_split = tuple(t * tile for t in tps)
        num_tokens_launched = launch.reduce_grid[0] if launch.reduce_grid else work.num_tokens
        per_token_head = s * (hd_pad + 2) * 4
        ps_bytes = ex.add("partial_state_bytes_per_layer", num_tokens_launched * work.num_heads * per_token_head,
                          "q.shape[0] * num_query_heads * NUM_SEGMENTS * (HEAD_SIZE_PADDED + 2) * 4",
                          src("0.33.0", _BACKEND, "L177-210"), **{"q.shape[0]": num_tokens_launched},  # type: ignore[arg-type]  # input label, not a parameter
                          num_query_heads=work.num_heads, NUM_SEGMENTS=s, HEAD_SIZE_PADDED=hd_pad)
        used = sum(ql * a for ql, a in zip(work.query_lens, active)) * work.num_heads * (hd_pad + 2) * 4
        ex.add("partial_state_bytes_used_per_layer", used,
               "sum_i(query_len_i * active_segments_i) * num_query_heads * (HEAD_SIZE_PADDED + 2) * 4",
               src("0.33.0", _OPS, "L324-327, L741-747"), num_query_heads=work.num_heads, HEAD_SIZE_PADDED=hd_pad)
        reduce_working = work.num_tokens * work.num_heads
        kernels: tuple[KernelLaunch, ...] = (
            KernelLaunch(name="kernel_unified_attention", grid=launch.grid, working_programs=working_main,
                         kind=KernelKind.VLLM_UNIFIED_3D, constexprs={"IS_3D": True, "BLOCK_M": launch.block_m, "BLOCK_Q": launch.block_q,
                                     "TILE_SIZE": tile, "NUM_SEGMENTS_PER_SEQ": s, "BLOCK_SIZE": work.block_size,
                                     "HEAD_SIZE_PADDED": hd_pad}),
            KernelLaunch(name="reduce_segments", grid=launch.reduce_grid or (0, 0), working_programs=reduce_working,
                         kind=KernelKind.VLLM_REDUCE_SEGMENTS,
                         constexprs={"TILE_SIZE": launch.tile_size_decode, "NUM_SEGMENTS_PER_SEQ": s,
                                     "BLOCK_Q": launch.block_q}),
        )
    else:
        segs = (1,) * work.batch
        active = (1,) * work.batch
        tps = tuple(cdiv(L, tile) for L in work.seq_lens)
        window_segs = active
        tiles_read = tuple(window_tiles(L, q, tile, window) for L, q in zip(work.seq_lens, work.query_lens))
        tokens_per_split = tuple(work.seq_lens)
        ps_bytes = used = 0
        working_main = sum(q_blocks_working) * work.num_kv_heads
        kernels = (
            KernelLaunch(name="kernel_unified_attention", grid=launch.grid, working_programs=working_main,
                         kind=KernelKind.VLLM_UNIFIED_2D, constexprs={"IS_3D": False, "BLOCK_M": launch.block_m, "BLOCK_Q": launch.block_q,
                                     "TILE_SIZE": tile, "NUM_SEGMENTS_PER_SEQ": 1, "BLOCK_SIZE": work.block_size,
                                     "HEAD_SIZE_PADDED": hd_pad}),
        )
    ex.add("working_programs", working_main,
           "num_kv_heads * sum_i(cdiv(query_len_i, BLOCK_Q) * active_segments_i)" if launch.use_3d
           else "num_kv_heads * sum_i cdiv(query_len_i, BLOCK_Q)",
           src("0.33.0", _OPS, "L321-327"), num_kv_heads=work.num_kv_heads, BLOCK_Q=launch.block_q)
    scratch = backend.scratch_bytes(work.num_heads) if backend.scratch_rows else (
        ps_bytes if launch.use_3d else 0)
    if window:
        ex.add("window_segments", window_segs if len(set(window_segs)) > 1 else window_segs[0],
               "segments with max(segm * tps, tile_start) < min((segm + 1) * tps, num_tiles), "
               "tile_start = (L - q - SLIDING_WINDOW + 1) // TILE_SIZE",
               src("0.33.0", "vllm/v1/attention/ops/triton_attention_helpers.py", "L230-277"),
               SLIDING_WINDOW=window, TILE_SIZE=tile)
        ex.add("kv_bytes_read_per_layer", sum(tiles_read) * tile * work.num_kv_heads * (
            work.head_size + work.head_size_v) * work.kv_bytes_per_element,
            "sum_i (num_tiles_i - tile_start_i) * TILE_SIZE * h_kv * (d_k + d_v) * b  (whole tiles of the window)",
            src("0.33.0", "vllm/v1/attention/ops/triton_attention_helpers.py", "L230-277"), TILE_SIZE=tile,
            h_kv=work.num_kv_heads, d_k=work.head_size, d_v=work.head_size_v, b=work.kv_bytes_per_element)
    plan = LaunchPlan(
        system=system, kernels=kernels, splits=segs, nonempty_splits=active, tokens_per_split=tokens_per_split,
        partial_state_bytes=ps_bytes, partial_state_bytes_used=used, scratch_bytes=scratch,
        explain=launch.explain + backend.explain + ex.items(),
        details=VllmUnifiedDetails(use_3d=launch.use_3d, tiles_per_segment=tps, window_segments=window_segs,
                                   kv_tiles_read=tiles_read),
    )
    return plan, segs, active, tps


def _window_tile_start(seq_len: int, query_len: int, tile: int, window: int | None) -> int:
    """``tile_start = max(0, first_allowed_key // TILE_SIZE)`` for the sequence's first q-block, whose
    first query sits at q_abs = L - q: first_allowed_key = q_abs - SLIDING_WINDOW + 1, SLIDING_WINDOW
    = 1 + window_size[0] = W (helpers L230-272; triton_attn.py L508, kernel wrapper L1169)."""
    if not window:
        return 0
    return max(0, (seq_len - query_len - window + 1) // tile)


def window_tiles(seq_len: int, query_len: int, tile: int, window: int | None) -> int:
    """KV tiles the sequence's programs read: ``[tile_start, cdiv(L, TILE_SIZE))``."""
    if seq_len <= 0:
        return 0
    return cdiv(seq_len, tile) - _window_tile_start(seq_len, query_len, tile, window)


def window_segments(seq_len: int, query_len: int, segments: int, tile: int, window: int | None) -> int:
    """3D segments whose tile loop is non-empty: ``max(segm * tps, tile_start) < min((segm + 1) * tps,
    num_tiles)`` (helpers L275-277). Without a window (or one covering L) this is active_segments;
    the others pass the early exit and write an empty partial state."""
    act = active_segments(seq_len, segments, tile)
    start = _window_tile_start(seq_len, query_len, tile, window)
    if start == 0:
        return act
    tps = tiles_per_segment(seq_len, segments, tile)
    return sum(1 for s in range(act) if (s + 1) * tps > start)


def sweep_rows(workload: Callable[[int, int], Workload], gpu: GPUSpec, settings: VllmSettings,
               batches: Sequence[int], lens: Sequence[int]) -> Iterator[SweepRow]:
    """The sweep's fast path for uniform decode batches on global layers, one row per batch size.

    The 2D/3D choice, grid and tile depend on the batch only (``seq_threshold_3D`` counts sequences),
    so :func:`plan_vllm` runs once per batch size (with CUDA-graph padding: the launch that replays) and
    the active segments once per (segments, tile) over all lengths. ``workload(batch, seq_len)``."""
    seg_cache: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
    n = len(lens)
    for b in batches:
        w = workload(b, lens[0])
        vp = plan_vllm(w, gpu, settings, layer="global")
        la = vp.replay.launch if vp.replay is not None else vp.launch
        programs = [prod(la.grid)] * n
        c = b * w.num_kv_heads
        if la.use_3d:
            S, tile = la.num_segments, la.tile_size
            cached = seg_cache.get((S, tile))
            if cached is None:
                cached = seg_cache[(S, tile)] = ([active_segments(L, S, tile) for L in lens],
                                                 [tiles_per_segment(L, S, tile) * tile for L in lens])
            act, tokens = cached
            yield SweepRow(region=["3D"] * n, splits=[S] * n, nonempty_splits=act, tokens_per_split=tokens,
                           programs=programs, working_programs=[c * a for a in act])
        else:
            yield SweepRow(region=["2D"] * n, splits=[1] * n, nonempty_splits=[1] * n, tokens_per_split=list(lens),
                           programs=programs, working_programs=[c] * n)
