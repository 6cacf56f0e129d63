"""The chapter's seven-step trace of one layer through vLLM's Triton backend, for any config (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from decodecalc.derived import cdiv, next_power_of_2
from decodecalc.errors import UnsupportedError
from decodecalc.formatting import fmt_bytes
from decodecalc.launchers.vllm_unified import MAX_3D_QUERY_LEN, VllmPlan, segment_ranges
from decodecalc.reports.grid import GridReport


@dataclass(frozen=True, slots=True)
class Step:
    title: str
    source: str
    lines: tuple[str, ...]


def seven_steps(report: GridReport) -> tuple[Step, ...]:
    """Steps 1-7 of the chapter's trace, computed; sequence 0 is followed where a sequence matters."""
    w = report.work
    vr = next(s for s in report.systems if s.name == "vllm")
    vp: VllmPlan | None = vr.model
    if vp is None:  # vLLM cannot serve this config: its result carries why
        raise UnsupportedError(vr.error or "vLLM's Triton backend does not serve this config")
    la, be, d = vp.launch, vp.backend, vr.data
    L0, q0 = w.seq_lens[0], w.query_lens[0]
    hd_pad = next_power_of_2(w.head_size)
    steps = []
    steps.append(Step(
        "1. TritonAttentionMetadataBuilder.build()",
        "vllm 0.33.0 vllm/v1/attention/backends/triton_attn.py L197-271",
        (f"seq_lens = {list(w.seq_lens)[:4]}{' ...' if w.batch > 4 else ''}, query_start_loc = "
         f"{[sum(w.query_lens[:i]) for i in range(min(w.batch, 4) + 1)]}{' ...' if w.batch > 4 else ''}, "
         f"max_query_len = {w.max_seqlen_q}",
         f"block table row of sequence 0: cdiv({L0}, {w.block_size}) = {cdiv(L0, w.block_size)} int32 "
         f"({cdiv(L0, w.block_size) * 4} B)",
         f"build-time constants: seq_threshold_3D = {be.seq_threshold_3D}, num_par_softmax_segments = "
         f"{be.num_par_softmax_segments}",
         f"scratch: softmax_segm_output [{be.scratch_rows}, {w.num_heads}, {be.num_par_softmax_segments}, {hd_pad}] "
         f"fp32 and softmax_segm_max / _expsum [{be.scratch_rows}, {w.num_heads}, {be.num_par_softmax_segments}] "
         f"= {fmt_bytes(d['scratch_bytes'])}"),
    ))
    steps.append(Step(
        "2. TritonAttentionImpl.forward()",
        "vllm 0.33.0 vllm/v1/attention/backends/triton_attn.py L599-749",
        (f"writes this step's {w.num_tokens} new K and V rows into the paged cache, then calls "
         f"unified_attention(..., max_seqlen_q={w.max_seqlen_q})",),
    ))
    gate = ("passes: " + f"max_seqlen_q {w.max_seqlen_q} <= {MAX_3D_QUERY_LEN}, {w.batch} x cdiv({w.max_seqlen_q}, {la.block_q}) <= "
            f"{be.seq_threshold_3D}, batch invariance off") if la.use_3d else "fails: " + "; ".join(la.reasons_2d)
    steps.append(Step(
        "3. unified_attention()",
        "vllm 0.33.0 vllm/v1/attention/ops/triton_unified_attention.py L828-1123",
        (f"num_queries_per_kv = {w.num_heads} // {w.num_kv_heads} = {w.group_size}, BLOCK_M = {la.block_m}, "
         f"BLOCK_Q = {la.block_q}, total_num_q_blocks = {w.num_tokens} // {la.block_q} + {w.batch} = "
         f"{la.total_num_q_blocks}, TILE_SIZE = {la.tile_size}",
         f"the use_3d gate {gate}",
         f"grid = {tuple(la.grid)} = {vp.plan.main.programs:,} programs ({vp.plan.main.working_programs:,} do work)"),
    ))
    if la.use_3d:
        tps = vp.tiles_per_segment[0]
        ranges = [r for r in segment_ranges(L0, la.num_segments, la.tile_size) if r[1] > r[0]]
        last = ranges[-1]
        steps.append(Step(
            "4. kernel_unified_attention[grid], segment bounds",
            "vllm 0.33.0 triton_unified_attention.py L321-327; triton_attention_helpers.py L231-236",
            (f"tiles_per_segment = cdiv({L0}, {la.num_segments} * {la.tile_size}) = {tps}; segment s scans tiles "
             f"[s*{tps}, (s+1)*{tps})",
             f"block 0 scans keys {ranges[0][0]}-{ranges[0][1] - 1}, block {len(ranges) - 1} scans "
             f"{last[0]}-{last[1] - 1}; {la.num_segments - len(ranges)} of {la.num_segments} segments return at once"),
        ))
    else:
        steps.append(Step(
            "4. kernel_unified_attention[grid], 2D",
            "vllm 0.33.0 triton_unified_attention.py L321-329",
            (f"one program per (q block, KV head) scans all cdiv({L0}, {la.tile_size}) = {cdiv(L0, la.tile_size)} "
             "tiles of its sequence; no segments (tiles_per_segment = 0)",),
        ))
    live = la.live_rows(w.group_size, q0)
    tile_kv = 2 * la.tile_size * w.head_size * w.kv_bytes_per_element
    steps.append(Step(
        "5. Per tile",
        "vllm 0.33.0 triton_unified_attention.py (tile loop)",
        (f"one tl.load from the block table gives the physical block; K and V tiles are "
         f"2 x {la.tile_size} x {w.head_size} x {w.kv_bytes_per_element} = {tile_kv:,} B",
         f"tl.dot makes a {la.block_m}x{la.tile_size} score tile of which {live} rows are live "
         f"({1 - live / la.block_m:.0%} masked); online softmax updates M, L, acc"),
    ))
    if la.use_3d:
        assert la.reduce_grid is not None  # the 3D launch always sets reduce_grid
        steps.append(Step(
            "6. IS_3D epilogue",
            "vllm 0.33.0 triton_unified_attention.py L587-642",
            ("each working block stores acc, M and L to the softmax_segm_* scratch without dividing by L: "
             "normalisation waits until every segment has reported",
             f"{fmt_bytes(d['partial_state_bytes_used_per_layer'])} written by the segments that work "
             f"({fmt_bytes(d['partial_state_bytes_per_layer'])} if every launched segment wrote)"),
        ))
        steps.append(Step(
            f"7. reduce_segments[{tuple(la.reduce_grid)}]",
            "vllm 0.33.0 triton_unified_attention.py L726-786, L1211",
            (f"act_num_segments = cdiv({L0}, {vp.tiles_per_segment[0]} * {la.tile_size}) = {vp.active_segments[0]}; "
             "masks the rest, takes the overall max, rescales, sums, divides once",
             f"writes output[token, head, :] in {w.dtype}"),
        ))
    else:
        steps.append(Step("6. 2D epilogue", "vllm 0.33.0 triton_unified_attention.py",
                          ("divides acc by L and stores the output directly: no partial state",)))
        steps.append(Step("7. no reduce_segments launch", "vllm 0.33.0 triton_unified_attention.py L1209",
                          ("the 2D path launches one kernel",)))
    kv = d["kv_bytes_per_layer"]
    merge = d["merge_traffic_bytes_per_layer"]
    launches = len(vp.plan.kernels)
    progs = " + ".join(f"{k.programs:,}" for k in vp.plan.kernels)
    steps.append(Step(
        "Summary", "",
        (f"{launches} kernel launch(es), {progs} thread blocks, {fmt_bytes(kv)} of KV read and "
         f"{fmt_bytes(merge)} of partial "
         f"state round-tripped, per layer",
         f"times {w.model.num_layers} layers: about {fmt_bytes(d['kv_bytes_all_layers'])} of KV plus "
         f"{fmt_bytes(merge * w.model.num_layers)} of partial-state traffic for this step"),
    ))
    return tuple(steps)
