"""Derived figures of a launch: S*, SM coverage, bytes, arithmetic intensity, roofline (pure).

Definitions follow the reference chapter ("Decode attention: FlashDecoding, split-K, paged
kernels"): G_2D is the unsplit grid, S* = ceil(N_SM / G_2D) the split count that first fills
the SMs (a first-wave heuristic, not an optimum); partial state is one fp32 vector plus its
softmax statistics per (token, head, split), written by stage 1 and read by the merge.
"""

from __future__ import annotations

from dataclasses import dataclass

from decodecalc.derived import Derived, Explain, cdiv
from decodecalc.launchers.base import LaunchPlan
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

CHAPTER = "decode-attention chapter"


@dataclass(frozen=True, slots=True)
class Coverage:
    programs_launched: int
    programs_working: int
    num_sms: int
    waves: int
    last_wave_fill: float  # fraction of N_SM busy in the last wave
    fraction: float  # min(working, N_SM) / N_SM: the first wave's SM coverage

    def as_dict(self) -> dict[str, float | int]:
        return {
            "programs_launched": self.programs_launched, "programs_working": self.programs_working,
            "num_sms": self.num_sms, "waves": self.waves, "last_wave_fill": round(self.last_wave_fill, 6),
            "fraction": round(self.fraction, 6),
        }


def coverage(working: int, launched: int, num_sms: int) -> Coverage:
    """One program per SM per wave: the chapter's first-wave view of occupancy."""
    waves = max(1, cdiv(working, num_sms)) if working else 0
    last = working - (waves - 1) * num_sms if waves else 0
    return Coverage(launched, working, num_sms, waves, last / num_sms if waves else 0.0,
                    min(working, num_sms) / num_sms)


def attended(seq_len: int, window: int | None) -> int:
    return min(seq_len, window) if window else seq_len


def kv_bytes_per_token_position(work: Workload) -> int:
    """Bytes of K and V one key position costs one layer on this rank.

    MHA/GQA: h_kv * (d_k + d_v) * b. MLA: K and V are views of one latent row (kv_lora_rank +
    rope dims), read once: d_k * b.
    """
    if work.model.is_mla:
        return work.head_size * work.kv_bytes_per_element
    return work.num_kv_heads * (work.head_size + work.head_size_v) * work.kv_bytes_per_element


@dataclass(frozen=True, slots=True)
class SystemFigures:
    """Every derived number for one system's launch, each with its explanation."""

    g_2d: int
    s_star: int
    coverage: Coverage
    kv_bytes_per_layer: int
    kv_bytes_all_layers: int
    kv_bytes_per_token_all_layers: float
    partial_state_bytes_per_layer: int
    partial_state_bytes_used_per_layer: int
    merge_traffic_bytes_per_layer: int  # written + read, splits that work
    merge_to_kv_ratio: float
    block_table_bytes: tuple[int, ...]
    paging_overhead: float
    flops_per_layer: float
    bytes_per_layer: int
    tile_arithmetic_intensity: float
    arithmetic_intensity: float
    times_below_ridge: float
    tile_times_below_ridge: float
    roofline_time_s: float
    roofline_time_all_layers_s: float
    explain: tuple[Derived, ...]


def figures(
    work: Workload,
    gpu: GPUSpec,
    plan: LaunchPlan,
    *,
    g_2d: int,
    g_2d_formula: str,
    tile_live_rows: int,
    tile_keys: int,
    window: int | None = None,
) -> SystemFigures:
    ex = Explain()
    n_sm = gpu.num_sms
    ex.add("G_2D", g_2d, g_2d_formula, CHAPTER + " 'The grid'")
    s_star = ex.add("S*", cdiv(n_sm, g_2d), "ceil(N_SM / G_2D)", CHAPTER + " 'The grid'", N_SM=n_sm, G_2D=g_2d)
    main = plan.main
    cov = coverage(main.working_programs, main.programs, n_sm)
    ex.add("sm_coverage", f"{cov.programs_working}/{n_sm} SMs ({cov.fraction:.1%}), {cov.waves} wave(s)",
           "min(programs_working, N_SM) / N_SM; waves = ceil(programs_working / N_SM); "
           "programs_launched - programs_working exit early", CHAPTER + " 'The grid'",
           programs_launched=cov.programs_launched, programs_working=cov.programs_working, N_SM=n_sm)

    per_pos = kv_bytes_per_token_position(work)
    kv_layer = ex.add("kv_bytes_per_layer", sum(attended(L, window) for L in work.seq_lens) * per_pos,
                      "sum_i s_i * h_kv * (d_k + d_v) * b" if not work.model.is_mla else "sum_i s_i * d_latent * b",
                      CHAPTER + " 'What the merge costs'", unit="B", h_kv=work.num_kv_heads, d_k=work.head_size,
                      d_v=work.head_size_v, b=work.kv_bytes_per_element)
    kv_all = _kv_all_layers(work, per_pos)
    ex.add("kv_bytes_all_layers", kv_all, "sum over layers of kv_bytes_per_layer (windowed layers read min(s, sliding_window))",
           CHAPTER + " 'seven-step trace'", unit="B", layers=work.model.num_layers,
           sliding_window=work.model.sliding_window or 0)
    ps = plan.partial_state_bytes
    used = plan.partial_state_bytes_used
    merge = ex.add("merge_traffic_bytes_per_layer", 2 * used, "2 * partial_state_bytes_used (stage 1 writes, merge reads)",
                   CHAPTER + " 'What the merge costs'", unit="B", partial_state_bytes_used=used)
    ratio = ex.add("merge_to_kv_ratio", merge / kv_layer if kv_layer else 0.0,
                   "merge_traffic_bytes_per_layer / kv_bytes_per_layer", CHAPTER + " 'What the merge costs'",
                   merge_traffic_bytes_per_layer=merge, kv_bytes_per_layer=kv_layer)
    bt = tuple(cdiv(L, work.block_size) * 4 for L in work.seq_lens)
    ex.add("block_table_bytes", bt[0] if len(set(bt)) == 1 else bt, "cdiv(s, block_size) * 4 (int32 per block)",
           CHAPTER + " 'paging'", unit="B", block_size=work.block_size)
    # each KV head's programs read the table once per tile: one int32 per block_size keys
    paging = ex.add("paging_overhead", (4 / (work.block_size * per_pos / max(work.num_kv_heads, 1)))
                    if not work.model.is_mla else 4 / (work.block_size * per_pos),
                    "4 / (block_size * bytes of K and V per key and KV head)", CHAPTER + " 'paging'",
                    block_size=work.block_size)

    # FLOPs: QK^T and PV, 2 FLOP per multiply-add, for every live (query token, head, key)
    pairs = sum(q * attended(L, window) for q, L in zip(work.query_lens, work.seq_lens))
    d_qk = work.head_size
    flops = ex.add("flops_per_layer", 2.0 * work.num_heads * pairs * (d_qk + work.head_size_v),
                   "2 * h * sum_i(q_i * s_i) * (d_k + d_v)", CHAPTER + " 'Where GQA enters'", h=work.num_heads,
                   d_k=d_qk, d_v=work.head_size_v)
    q_o_bytes = work.num_tokens * work.num_heads * (d_qk + work.head_size_v) * work.q_bytes
    total_bytes = ex.add("bytes_per_layer", kv_layer + merge + q_o_bytes,
                         "kv_bytes_per_layer + merge_traffic_bytes_per_layer + q_o_bytes (query and output)",
                         CHAPTER + " 'What the merge costs'", unit="B", kv_bytes_per_layer=kv_layer,
                         merge_traffic_bytes_per_layer=merge, q_o_bytes=q_o_bytes)
    tile_flops = 2 * 2 * tile_live_rows * tile_keys * d_qk
    tile_bytes = 2 * tile_keys * d_qk * work.kv_bytes_per_element
    tile_ai = ex.add("tile_arithmetic_intensity", tile_flops / tile_bytes,
                     "(2 * 2 * live_rows * TILE * d) / (2 * TILE * d * b)", CHAPTER + " 'Where GQA enters'",
                     live_rows=tile_live_rows, TILE=tile_keys, d=d_qk, b=work.kv_bytes_per_element)
    ai = ex.add("arithmetic_intensity", flops / total_bytes, "flops_per_layer / bytes_per_layer",
                CHAPTER + " 'Where GQA enters'", flops_per_layer=flops, bytes_per_layer=total_bytes)
    ridge = gpu.ridge_flop_per_byte
    below = ex.add("times_below_ridge", ridge / ai if ai else float("inf"), "I_star / arithmetic_intensity, "
                   "I_star = peak bf16 FLOP/s / HBM bytes/s", CHAPTER + " 'Where GQA enters'", I_star=round(ridge, 1),
                   arithmetic_intensity=ai)
    tile_below = ex.add("tile_times_below_ridge", ridge / tile_ai, "I_star / tile_arithmetic_intensity",
                        CHAPTER + " 'Where GQA enters'", I_star=round(ridge, 1), tile_arithmetic_intensity=tile_ai)
    t = ex.add("roofline_time_s", max(total_bytes / gpu.hbm_bandwidth_bytes_per_s,
                                      flops / gpu.bf16_dense_flops_per_s),
               "max(bytes_per_layer / bandwidth, flops_per_layer / peak)", "roofline model", unit="s",
               bandwidth=gpu.hbm_bandwidth_bytes_per_s, peak=gpu.bf16_dense_flops_per_s)
    t_all = t * kv_all / kv_layer if kv_layer else 0.0
    return SystemFigures(
        g_2d=g_2d, s_star=s_star, coverage=cov, kv_bytes_per_layer=kv_layer, kv_bytes_all_layers=kv_all,
        kv_bytes_per_token_all_layers=kv_all / work.num_tokens, partial_state_bytes_per_layer=ps,
        partial_state_bytes_used_per_layer=used, merge_traffic_bytes_per_layer=merge, merge_to_kv_ratio=ratio,
        block_table_bytes=bt, paging_overhead=paging, flops_per_layer=flops, bytes_per_layer=total_bytes,
        tile_arithmetic_intensity=tile_ai, arithmetic_intensity=ai, times_below_ridge=below,
        tile_times_below_ridge=tile_below,
        roofline_time_s=t, roofline_time_all_layers_s=t_all, explain=ex.items(),
    )


def _kv_all_layers(work: Workload, per_pos: int) -> int:
    """KV bytes over every layer: sliding-window layers read at most W keys.

    ``sliding_window_pattern`` p means every p-th layer is global (Gemma-2: 2, Gemma-3: 6);
    no pattern with a window means every layer is windowed (Mistral-7B v0.1).
    """
    m = work.model
    full = sum(work.seq_lens) * per_pos
    if not m.sliding_window:
        return full * m.num_layers
    windowed = sum(min(L, m.sliding_window) for L in work.seq_lens) * per_pos
    p = m.sliding_window_pattern
    n_global = m.num_layers // p if p and p > 1 else 0
    return full * n_global + windowed * (m.num_layers - n_global)
