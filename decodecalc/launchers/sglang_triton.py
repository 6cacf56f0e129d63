"""SGLang's Triton decode attention: per-sequence num_kv_splits, stage-1 and stage-2 grids.

Mirrors SGLang v0.5.23 (wheel source):
- ``get_num_kv_splits_triton``      python/sglang/kernels/ops/attention/metadata.py L8-60
- ``TritonAttnBackend.get_num_kv_splits``  python/sglang/srt/layers/attention/triton_backend.py L431-480
  (static / deterministic branches L447-462), max_kv_splits and split tile size L328-372
- ``_decode_att_m_fwd`` (MHA) L430-515, ``_decode_grouped_att_m_fwd`` L796-915, split length
  (``kv_len_per_split``) L308-318 / L632-649, ``_decode_softmax_reducev_fwd`` grid L1048,
  ``_MIN_BLOCK_KV = 32`` L46, ``_GROUPED_BLOCK_H = 16`` L58
  (all in python/sglang/kernels/ops/attention/decode_attention.py)
- defaults: ``--triton-attention-num-kv-splits`` 8 (srt/arg_groups/fields/exec_.py L413-416), 16 on HIP
  (srt/arg_groups/platform_hook.py L52-56); deterministic split tile 256 (triton_backend.py L356-367)
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from decodecalc.derived import Explain, cdiv, maximum, minimum, next_power_of_2, select
from decodecalc.errors import ConfigError, UnsupportedError
from decodecalc.launchers.base import KernelKind, KernelLaunch, LaunchPlan, SweepRow
from decodecalc.launchers.details import SglangDetails
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

VERSION = "0.5.23"
_METADATA = "python/sglang/kernels/ops/attention/metadata.py"
_DECODE = "python/sglang/kernels/ops/attention/decode_attention.py"
_BACKEND = "python/sglang/srt/layers/attention/triton_backend.py"

_MIN_BLOCK_KV = 32  # decode_attention.py L46
_GROUPED_BLOCK_H = 16  # decode_attention.py L58
_MHA_BLOCK_N = 64  # _decode_att_m_fwd: BLOCK = 64 on CUDA, decode_attention.py L448 (8 on HIP, L451)
_GROUPED_BLOCK_N = 32  # _decode_grouped_att_m_fwd: BLOCK = 32 on CUDA, decode_attention.py L818 (16 on HIP, Lk >= 576)
DEFAULT_MAX_KV_SPLITS = 8  # exec_.py L413-416
DEFAULT_MAX_KV_SPLITS_HIP = 16  # platform_hook.py L52-56
DETERMINISTIC_SPLIT_TILE_SIZE = 256  # SGLANG_TRITON_DECODE_SPLIT_TILE_SIZE default, triton_backend.py L356-367
#: the largest --triton-attention-num-kv-splits that launches: stage 1's grid is (B, head tiles, max_kv_splits)
#: (decode_attention.py L460, L867) and CUDA's gridDim.z is at most 65,535 (above it the launch fails with "invalid
#: argument"); the flag has no validator (exec_.py L413-416), stage 2 loops to MAX_KV_SPLITS at run time (L976, L991)
#: and takes any count, not only powers of two
MAX_KV_SPLITS_GRID_Z = 65_535


def scratch_bytes(rows: int, num_heads: int, max_kv_splits: int, head_size_v: int) -> int:
    """Split-K scratch of the Triton backend for ``rows`` sequences: ``attn_logits`` [rows, h, max_kv_splits, Lv] and
    ``attn_lse`` [rows, h, max_kv_splits], fp32, plus ``num_kv_splits`` int32 [rows] (triton_backend.py L953-971,
    allocated per decode step; under CUDA graphs once with max_num_tokens rows, L1169-1191)."""
    return rows * num_heads * max_kv_splits * (head_size_v + 1) * 4 + rows * 4


def src(path: str, lines: str) -> str:
    return f"sglang {VERSION} {path} {lines}"


def _f32(x: float) -> float:
    """Round to IEEE float32, as Triton's scalar float math does."""
    return struct.unpack("f", struct.pack("f", x))[0]


def ext_device_core_count(max_seq_len: int, device_core_count: int) -> int:
    """``int32(device_core_count * max(log2(float32(max_seq_len) / 64.0), 1.0))``, in float32."""
    ext_seq_len = _f32(_f32(float(max_seq_len)) / 64.0)
    log2 = _f32(math.log2(ext_seq_len)) if ext_seq_len > 0 else -math.inf
    return int(_f32(device_core_count * max(log2, 1.0)))


def token_grid(num_seq: int, num_head: int, num_kv_head: int, num_group: int = 1) -> int:
    """The stage-1 programs per split (grid dims 0 x 1): MHA B*G*h; grouped B*G*cdiv(h, min(16, g))."""
    return num_seq * num_group * head_tiles(num_head, num_kv_head)


@dataclass(frozen=True, slots=True)
class AdaptiveSplitRule:
    """The intermediate values of ``get_num_kv_splits_triton`` (metadata.py L21-55) for one batch."""

    min_seq_len_used: int  # Lmin, or Lmax when the batch is "uniform enough" (Lmax < 1.25 Lmin)
    ext_device_core_count: int
    token_grid: int
    kv_chunk_size_1: int  # cdiv(Lmax, min(cdiv(Lmax, Lmin), max_kv_splits))
    kv_chunk_size_2: int  # cdiv(Lmax, min(cdiv(ext, token_grid), max_kv_splits))

    def num_kv_splits(self, seq_len: int) -> int:
        return splits_from_chunks(seq_len, self.kv_chunk_size_1, self.kv_chunk_size_2)


def kv_chunk_sizes(max_seq_len: int, min_seq_len: int, ext_core_count: int, grid: int,
                   max_kv_splits: int) -> tuple[int, int, int]:
    """(Lmin used, kv_chunk_size_1, kv_chunk_size_2) of ``get_num_kv_splits_triton`` (metadata.py L21-51)
    from its batch statistics (``ext_core_count``: :func:`ext_device_core_count` of Lmax; ``grid``:
    :func:`token_grid` of the batch). With :func:`splits_from_chunks`, SGLang's split-count rule:
    the one copy every caller uses."""
    # "uniform enough": Lmax < 1.25 Lmin; elementwise on arrays of batches (one value per step) too
    lmin = select(max_seq_len * 8 < min_seq_len * 10, max_seq_len, min_seq_len)
    return (lmin, cdiv(max_seq_len, minimum(cdiv(max_seq_len, lmin), max_kv_splits)),
            cdiv(max_seq_len, splits_cap_2(ext_core_count, grid, max_kv_splits)))


def splits_cap_2(ext_core_count: int, grid: int, max_kv_splits: int) -> int:
    """``max_kv_splits_2 = min(cdiv(ext_device_core_count, token_grid), max_kv_splits)`` (metadata.py L48-50):
    the split count that fills the extended cores, the divisor of kv_chunk_size_2."""
    return minimum(cdiv(ext_core_count, grid), max_kv_splits)


def splits_from_chunks(seq_len: int, kv_chunk_size_1: int, kv_chunk_size_2: int) -> int:
    """``max(cdiv(seq_len, kv_chunk_size_1), cdiv(seq_len, kv_chunk_size_2))`` (metadata.py L53-55); elementwise
    on arrays."""
    return maximum(cdiv(seq_len, kv_chunk_size_1), cdiv(seq_len, kv_chunk_size_2))


def adaptive_split_rule(max_seq_len: int, min_seq_len: int, *, ext_core_count: int, grid: int,
                        max_kv_splits: int) -> AdaptiveSplitRule:
    lmin, c1, c2 = kv_chunk_sizes(max_seq_len, min_seq_len, ext_core_count, grid, max_kv_splits)
    return AdaptiveSplitRule(min_seq_len_used=lmin, ext_device_core_count=ext_core_count, token_grid=grid,
                             kv_chunk_size_1=c1, kv_chunk_size_2=c2)


def split_rule_for(seq_lens: tuple[int, ...], *, num_head: int, num_kv_head: int, device_core_count: int,
                   max_kv_splits: int, num_group: int = 1) -> AdaptiveSplitRule:
    lmax = max(seq_lens)
    return adaptive_split_rule(lmax, min(seq_lens), ext_core_count=ext_device_core_count(lmax, device_core_count),
                               grid=token_grid(len(seq_lens), num_head, num_kv_head, num_group),
                               max_kv_splits=max_kv_splits)


def get_num_kv_splits(
    seq_lens: tuple[int, ...],
    *,
    num_head: int,
    num_kv_head: int,
    device_core_count: int,
    max_kv_splits: int,
    num_group: int = 1,
) -> tuple[int, ...]:
    """``get_num_kv_splits_triton``, one value per sequence (replicated ``num_group`` times upstream)."""
    rule = split_rule_for(tuple(seq_lens), num_head=num_head, num_kv_head=num_kv_head,
                          device_core_count=device_core_count, max_kv_splits=max_kv_splits, num_group=num_group)
    return tuple(rule.num_kv_splits(s) for s in seq_lens)


def deterministic_splits(seq_len: int, split_tile_size: int) -> int:
    """Deterministic inference: ``cdiv(seq_len, split_tile_size)`` splits (triton_backend.py L453-462)."""
    return cdiv(seq_len, split_tile_size)


def kv_len_per_split(seq_len: int, num_kv_splits: int) -> int:
    """``cdiv(cdiv(seq_len, kv_splits), MIN_BLOCK_KV) * MIN_BLOCK_KV`` (decode_attention.py L308-310); elementwise
    on arrays."""
    return cdiv(cdiv(seq_len, num_kv_splits), _MIN_BLOCK_KV) * _MIN_BLOCK_KV


def nonempty_splits(seq_len: int, num_kv_splits: int) -> int:
    """Splits whose [start, end) is non-empty; the others store nothing."""
    return cdiv(seq_len, kv_len_per_split(seq_len, num_kv_splits))


def split_ranges(seq_len: int, num_kv_splits: int, max_kv_splits: int) -> tuple[tuple[int, int], ...]:
    """Key range of every launched split program (grid dim 2 = max_kv_splits)."""
    step = kv_len_per_split(seq_len, num_kv_splits)
    out = []
    for s in range(max_kv_splits):
        start = min(step * s, seq_len)
        out.append((start, min(start + step, seq_len)) if s < num_kv_splits else (seq_len, seq_len))
    return tuple(out)


def is_mha(num_head: int, num_kv_head: int) -> bool:
    """Stage 1 runs the MHA kernel ``_fwd_kernel_stage1`` when kv_group_num == 1, else the grouped one
    ``_fwd_grouped_kernel_stage1`` (``decode_attention_fwd``, decode_attention.py)."""
    return num_head // num_kv_head == 1


def heads_per_program(num_head: int, num_kv_head: int) -> int:
    """Query heads one stage-1 program serves: 1 (MHA), ``min(_GROUPED_BLOCK_H, g)`` (grouped, L123-125)."""
    return 1 if is_mha(num_head, num_kv_head) else min(_GROUPED_BLOCK_H, num_head // num_kv_head)


def stage1_block_n(num_head: int, num_kv_head: int) -> int:
    """Keys per stage-1 loop iteration (BLOCK_N): 64 (MHA kernel) or 32 (grouped kernel), CUDA values."""
    return _MHA_BLOCK_N if is_mha(num_head, num_kv_head) else _GROUPED_BLOCK_N


def head_tiles(num_head: int, num_kv_head: int) -> int:
    """Stage-1 grid dim 1: h for MHA; ``cdiv(h, min(16, g))`` for grouped (``_grouped_head_tiles`` L123-125)."""
    return cdiv(num_head, heads_per_program(num_head, num_kv_head))


def stage1_grid(batch: int, num_head: int, num_kv_head: int, max_kv_splits: int) -> tuple[int, int, int]:
    """MHA ``(B, h, MAX_KV_SPLITS)`` (L460); grouped ``(B, head_tiles, MAX_KV_SPLITS)`` (L867)."""
    return (batch, head_tiles(num_head, num_kv_head), max_kv_splits)


@dataclass(frozen=True, slots=True, kw_only=True)
class SglangSettings:
    """Server arguments that change the Triton decode launch."""

    max_kv_splits: int | None = None  # --triton-attention-num-kv-splits (None: 8, 16 on AMD)
    deterministic: bool = False  # --enable-deterministic-inference
    static_kv_splits: bool = False  # SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS
    split_tile_size: int | None = None  # --triton-attention-split-tile-size
    context_len: int | None = None  # --context-length (None: the model's context_length; sizes max_kv_splits)
    padded_batch: int | None = None  # CUDA-graph replay batch (padded rows carry seq_len 1)

    def __post_init__(self) -> None:
        if self.max_kv_splits is not None and self.max_kv_splits <= 0:
            raise ConfigError(f"--max-kv-splits must be a positive integer, got {self.max_kv_splits}")
        if self.split_tile_size is not None and self.split_tile_size <= 0:
            raise ConfigError(f"--split-tile-size must be a positive integer, got {self.split_tile_size}")


@dataclass(frozen=True, slots=True)
class SglangPlan:
    plan: LaunchPlan
    max_kv_splits: int
    num_kv_splits: tuple[int, ...]
    nonempty_splits: tuple[int, ...]
    kv_len_per_split: tuple[int, ...]
    stage1_grid: tuple[int, int, int]
    stage2_grid: tuple[int, int]
    mode: str  # "adaptive", "static", "deterministic"
    padded_rows: int
    window_kv_lens: tuple[int, ...] | None = None  # sliding-window layer: keys each sequence reads


def sliding_window_size(work: Workload) -> int | None:
    """SGLang's ``sliding_window_size``: ``config.sliding_window - 1`` (gemma2.py L52-53,
    gemma3_causal.py L64-65, gpt_oss.py L131-132, via load_model_utils.py L144-157)."""
    w = work.model.sliding_window
    return w - 1 if w else None


def window_kv_len(seq_len: int, window_size: int) -> int:
    """``window_kv_lens = min(seq_lens, sliding_window_size)`` (triton_backend.py L2869-2872)."""
    return min(seq_len, window_size)


def resolve_max_kv_splits(work: Workload, gpu: GPUSpec, settings: SglangSettings, ex: Explain) -> int:
    base = settings.max_kv_splits or (DEFAULT_MAX_KV_SPLITS_HIP if gpu.is_rocm else DEFAULT_MAX_KV_SPLITS)
    ex.add("max_kv_splits_arg", base, "user if user is not None else (16 if rocm else 8)  (--triton-attention-num-kv-splits)",
           src("python/sglang/srt/arg_groups/fields/exec_.py", "L413-416"), user=settings.max_kv_splits,
           rocm=gpu.is_rocm)
    context_len = ex.add(
        "context_len", settings.context_len or work.model.context_length or work.max_seqlen_k,
        "user if user is not None else (context_length if context_length is not None else Lmax)  (--context-length)",
        src("python/sglang/srt/configs/model_config.py", "L1291-1326; triton_backend.py L313"),
        user=settings.context_len, context_length=work.model.context_length, Lmax=work.max_seqlen_k)
    tile = settings.split_tile_size or (DETERMINISTIC_SPLIT_TILE_SIZE if settings.deterministic else None)
    if tile is not None:
        value = cdiv(context_len, tile)
        return ex.add("max_kv_splits", value, "cdiv(context_len, split_tile_size)", src(_BACKEND, "L369-372"),
                      context_len=context_len, split_tile_size=tile)
    if work.model.is_mla:
        value = max(base, min(next_power_of_2(gpu.num_sms), next_power_of_2(cdiv(context_len, 32))))
        if gpu.gfx_arch == "gfx942":
            value = min(value, 256)
        return ex.add("max_kv_splits", value, "max(base, min(np2(SM), np2(cdiv(context_len, 32)))) (MLA)",
                      src(_BACKEND, "L83-90, L327-338"), base=base, SM=gpu.num_sms, context_len=context_len)
    return ex.add("max_kv_splits", base, "base (the server argument, no MLA adjustment)", src(_BACKEND, "L328-338"),
                  base=base)


def plan_sglang(work: Workload, gpu: GPUSpec, settings: SglangSettings | None = None, *,
                layer: str = "global") -> SglangPlan:
    """Model one decode step of SGLang's Triton backend on one rank (``layer="sliding"``: a
    sliding-window layer, which reads the window KV indices with the full-length split counts)."""
    settings = settings or SglangSettings()
    if work.max_seqlen_q > 1:
        raise UnsupportedError(
            f"query length {work.max_seqlen_q} > 1: SGLang runs prefill, mixed and speculative-verify batches "
            "through extend_attention, which does not split the KV (triton_backend.py L1059, L1127)"
        )
    ex = Explain()
    maxs = resolve_max_kv_splits(work, gpu, settings, ex)
    h, h_kv = work.num_heads, work.num_kv_heads
    seq_lens = work.seq_lens
    padded_rows = 0
    if settings.padded_batch is not None and settings.padded_batch > work.batch:
        # CUDA-graph replay: rows past the real batch carry seq_len 1 (triton_backend.py L1440-1441)
        padded_rows = settings.padded_batch - work.batch
        seq_lens = seq_lens + (1,) * padded_rows
    b = len(seq_lens)
    if settings.deterministic:
        tile = settings.split_tile_size or DETERMINISTIC_SPLIT_TILE_SIZE
        splits = tuple(deterministic_splits(s, tile) for s in seq_lens)
        mode = "deterministic"
        ex.add("num_kv_splits", _compact(splits), "cdiv(seq_len, split_tile_size)", src(_BACKEND, "L453-462"),
               split_tile_size=tile)
    elif settings.static_kv_splits or gpu.num_sms <= 0:
        splits = (maxs,) * b
        mode = "static"
        ex.add("num_kv_splits", _compact(splits), "max_kv_splits (static)", src(_BACKEND, "L447-451"),
               max_kv_splits=maxs)
    else:
        rule = split_rule_for(seq_lens, num_head=h, num_kv_head=h_kv, device_core_count=gpu.num_sms,
                              max_kv_splits=maxs)
        splits = tuple(rule.num_kv_splits(s) for s in seq_lens)
        mode = "adaptive"
        lmax, lmin_used = max(seq_lens), rule.min_seq_len_used
        ext, tg = rule.ext_device_core_count, rule.token_grid
        ex.add("ext_device_core_count", ext, "int32(SM * max(log2(float32(Lmax) / 64), 1))",
               src(_METADATA, "L36-40"), SM=gpu.num_sms, Lmax=lmax)
        ex.add("token_grid", tg, "B * h if g == 1 else B * cdiv(h, min(16, g))", src(_METADATA, "L41-47"),
               B=b, h=h, g=h // h_kv)
        ex.add("kv_chunk_size_1", rule.kv_chunk_size_1, "cdiv(Lmax, min(cdiv(Lmax, Lmin), max_kv_splits))",
               src(_METADATA, "L28-33"), Lmax=lmax, Lmin=lmin_used, max_kv_splits=maxs)
        ex.add("kv_chunk_size_2", rule.kv_chunk_size_2,
               "cdiv(Lmax, min(cdiv(ext_device_core_count, token_grid), max_kv_splits))",
               src(_METADATA, "L48-51"), Lmax=lmax, ext_device_core_count=ext, token_grid=tg, max_kv_splits=maxs)
        ex.add("num_kv_splits", _compact(splits), "max(cdiv(seq_len, kv_chunk_size_1), cdiv(seq_len, kv_chunk_size_2))",
               src(_METADATA, "L53-55"))
    # In the static/deterministic modes a split count may exceed the grid's dim 2 only if the user
    # mis-sizes max_kv_splits; upstream would then drop splits, so say so instead of modelling it.
    if max(splits) > maxs:
        raise ConfigError(f"num_kv_splits {max(splits)} exceeds max_kv_splits {maxs}: raise --max-kv-splits "
                          "or --context-len")
    window = sliding_window_size(work) if layer == "sliding" else None
    window_lens: tuple[int, ...] | None = None
    if window is not None:
        # forward_decode passes window_kv_indptr (lengths min(L, W - 1)) but the num_kv_splits of
        # the full lengths; window_num_kv_splits is computed and never passed (triton_backend.py
        # L917-936, L2353-2356, L2481); stage 2 re-derives the split length from the same pair
        # (decode_attention.py L964-988).
        if window <= 0:
            raise UnsupportedError(f"sliding_window {work.model.sliding_window}: SGLang's window of "
                                   f"sliding_window - 1 = {window} keys reads nothing")
        window_lens = tuple(window_kv_len(s, window) for s in seq_lens)
        ex.add("window_kv_lens", _compact(window_lens), "min(seq_len, sliding_window_size), "
               "sliding_window_size = sliding_window - 1", src(_BACKEND, "L2869-2872; models/gemma2.py L52-53"),
               sliding_window=work.model.sliding_window)
        seq_lens = window_lens
    kvps = tuple(kv_len_per_split(s, n) for s, n in zip(seq_lens, splits))
    nonempty = tuple(cdiv(s, k) for s, k in zip(seq_lens, kvps))
    grid1 = stage1_grid(b, h, h_kv, maxs)
    ex.add("stage1_grid", grid1, "(B, h, max_kv_splits) if g == 1 else (B, cdiv(h, min(16, g)), max_kv_splits)",
           src(_DECODE, "L460, L867"), B=b, h=h, g=h // h_kv, max_kv_splits=maxs)
    grid2 = (b, h)
    ex.add("stage2_grid", grid2, "(batch, head_num)", src(_DECODE, "L1048"), batch=b, head_num=h)
    ex.add("kv_len_per_split", _compact(kvps), "cdiv(cdiv(seq_len, num_kv_splits), 32) * 32",
           src(_DECODE, "L308-310"))
    ht = grid1[1]
    real = work.batch
    working1 = sum(nonempty[:real]) * ht + sum(nonempty[real:]) * ht  # padded rows read their one key too
    d_v = work.head_size_v
    per_split = (d_v + 1) * 4  # attn_logits d_v floats + attn_lse 1 float
    ps = ex.add("partial_state_bytes_per_layer", b * h * maxs * per_split,
                "B * h * max_kv_splits * (Lv + 1) * 4  (attn_logits [B, h, S, Lv] + attn_lse [B, h, S], fp32)",
                src(_BACKEND, "L953-971"), B=b, h=h, max_kv_splits=maxs, Lv=d_v)
    used = ex.add("partial_state_bytes_used_per_layer", sum(nonempty) * h * per_split,
                  "sum_i nonempty_splits_i * h * (Lv + 1) * 4", src(_DECODE, "L308-318"), h=h, Lv=d_v)
    scratch = scratch_bytes(b, h, maxs, d_v)
    mha = is_mha(h, h_kv)
    kernels = (
        KernelLaunch(name="_fwd_kernel_stage1" if mha else "_fwd_grouped_kernel_stage1", grid=grid1,
                     working_programs=working1,
                     kind=KernelKind.SGLANG_MHA_STAGE1 if mha else KernelKind.SGLANG_GROUPED_STAGE1,
                     constexprs={"BLOCK_H": None if mha else _GROUPED_BLOCK_H, "BLOCK_N": stage1_block_n(h, h_kv),
                                 "MIN_BLOCK_KV": _MIN_BLOCK_KV, "MAX_KV_SPLITS": maxs}),
        KernelLaunch(name="_fwd_kernel_stage2", grid=grid2, working_programs=b * h, kind=KernelKind.SGLANG_STAGE2,
                     constexprs={"MAX_KV_SPLITS": maxs, "MIN_BLOCK_KV": _MIN_BLOCK_KV}),
    )
    plan = LaunchPlan(
        system="sglang", kernels=kernels, splits=splits[:real], nonempty_splits=nonempty[:real],
        tokens_per_split=kvps[:real], partial_state_bytes=ps, partial_state_bytes_used=used, scratch_bytes=scratch,
        explain=ex.items(), details=SglangDetails(mode=mode, padded_rows=padded_rows,
                                                 window_kv_lens=window_lens[:real] if window_lens else None),
        aux_launches=1 if mode == "adaptive" else 0,  # get_num_kv_splits_triton (triton_backend.py L431-480)
    )
    return SglangPlan(plan=plan, max_kv_splits=maxs, num_kv_splits=splits[:real], nonempty_splits=nonempty[:real],
                      kv_len_per_split=kvps[:real], stage1_grid=grid1, stage2_grid=grid2, mode=mode,
                      padded_rows=padded_rows, window_kv_lens=window_lens[:real] if window_lens else None)


def sweep_rows(workload: Callable[[int, int], Workload], gpu: GPUSpec, settings: SglangSettings,
               batches: Sequence[int], lens: Sequence[int]) -> Iterator[SweepRow]:
    """The sweep's fast path for uniform decode batches, one row per batch size: ``Lmin == Lmax``, so the
    split count needs :func:`ext_device_core_count` once per length and :func:`token_grid` once per batch;
    split lengths are cached per (length, split count). ``workload(batch, seq_len)``."""
    w1 = workload(1, lens[0])
    h, h_kv = w1.num_heads, w1.num_kv_heads
    ht = head_tiles(h, h_kv)
    depends_on_len = w1.model.is_mla or settings.deterministic or settings.split_tile_size is not None
    if depends_on_len and settings.context_len is None:
        maxs_l = [resolve_max_kv_splits(workload(1, L), gpu, settings, Explain()) for L in lens]
    else:
        maxs_l = [resolve_max_kv_splits(w1, gpu, settings, Explain())] * len(lens)
    cache: dict[tuple[int, int], tuple[int, int, int]] = {}
    by_cap: dict[tuple[int, int], tuple[int, int, int]] = {}

    def split_info(L: int, n: int) -> tuple[int, int, int]:
        r = cache.get((L, n))
        if r is None:
            k = kv_len_per_split(L, n)
            r = cache[(L, n)] = (n, cdiv(L, k), k)
        return r

    fixed: list[tuple[int, int, int]] | None = None
    if settings.deterministic:
        tile = settings.split_tile_size or DETERMINISTIC_SPLIT_TILE_SIZE
        fixed = [split_info(L, deterministic_splits(L, tile)) for L in lens]
    elif settings.static_kv_splits or gpu.num_sms <= 0:
        fixed = [split_info(L, m) for L, m in zip(lens, maxs_l)]
    ext_l = [ext_device_core_count(L, gpu.num_sms) for L in lens] if fixed is None else []
    for b in batches:
        if fixed is not None:
            info = fixed
        else:
            tg = token_grid(b, h, h_kv)
            info = []
            for L, ext, maxs in zip(lens, ext_l, maxs_l):
                # Lmin == Lmax: kv_chunk_size_1 is L, so the split count depends on (L, max_kv_splits_2) only
                key = (L, splits_cap_2(ext, tg, maxs))
                r = by_cap.get(key)
                if r is None:
                    _, c1, c2 = kv_chunk_sizes(L, L, ext, tg, maxs)
                    r = by_cap[key] = split_info(L, splits_from_chunks(L, c1, c2))
                info.append(r)
        ne = [r[1] for r in info]
        c = b * ht
        yield SweepRow(region=["split" if x > 1 else "no split" for x in ne], splits=[r[0] for r in info],
                       nonempty_splits=ne, tokens_per_split=[r[2] for r in info], programs=[c * m for m in maxs_l],
                       working_programs=[c * x for x in ne])


CUDA_GRAPH_BS_SOURCE = ("sglang python/sglang/srt/server_args.py _generate_cuda_graph_batch_sizes "
                        "(read from a repository copy; release not pinned)")


def cuda_graph_batch_sizes(cuda_graph_max_bs: int, *, disable_padding: bool = False) -> tuple[int, ...]:
    """SGLang's decode CUDA-graph batch sizes without speculative decoding: [1, 2, 4, 8, 12], then
    steps of 8 to 256, 16 to 512 and 32 beyond, up to ``cuda_graph_max_bs`` (CUDA_GRAPH_BS_SOURCE)."""
    from decodecalc.limits import MAX_BATCH, check_int

    check_int(cuda_graph_max_bs, "--sglang-cuda-graph-max-bs", MAX_BATCH)
    if disable_padding:
        return tuple(range(1, cuda_graph_max_bs + 1))
    bs = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(
        range(512, cuda_graph_max_bs + 1, 32))
    return tuple(b for b in bs if b <= cuda_graph_max_bs)


def _compact(values: tuple[int, ...]) -> object:
    """One value if all equal, else the tuple (keeps --explain readable for big batches)."""
    return values[0] if len(set(values)) == 1 else values
