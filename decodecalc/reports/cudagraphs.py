"""What CUDA graphs freeze, and what a real decode batch runs as (pure; `decodecalc cudagraphs`).

vLLM (reusing decodecalc.launchers.vllm_cudagraphs and vllm_unified, upstream-launchers.md 3.3): the
capture sizes, the FULL decode sizes, ``seq_threshold_3D`` snapped to a capture size, and for each
real batch the padded batch (B_pad, T_pad) it replays as, with the 2D/3D geometry decided at capture.

SGLang (upstream-launchers.md 4 e): the decode batch is padded to the next capture batch size and the
padded rows carry ``seq_len = 1`` (triton_backend.py L1440-1441), so ``Lmin = 1`` and the real
requests get ``cdiv(Lmax, max_kv_splits)``-sized chunks: split counts rise (an inference from
code, not run upstream). Capture sizes: ``_generate_cuda_graph_batch_sizes`` of SGLang's
server_args.py (normal case ``[1, 2, 4, 8, 12] + range(16, 257, 8) + range(272, 512, 16) +
range(512, max_bs + 1, 32)``, filtered to ``<= cuda_graph_max_bs``; read from a repository copy
whose release is not pinned; the default ``cuda_graph_max_bs`` depends on GPU memory and TP, so it
is an input here).

FlashInfer (upstream-launchers.md 8.1): under CUDA graphs the decode grid is padded to
``occupancy * SM / h_kv`` CTAs whenever it splits.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from decodecalc.errors import ConfigError, DecodecalcError
from decodecalc.launchers import vllm_cudagraphs as cg
from decodecalc.launchers import flashinfer, sglang_triton, vllm_unified
from decodecalc.launchers.details import FlashInferDecodeDetails
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload, make_workload

DEFAULT_BATCHES = (1, 3, 5, 13, 16, 17, 33, 100, 257)


def cudagraph_report(base: Workload, gpu: GPUSpec, vllm: vllm_unified.VllmSettings,
                     sglang: sglang_triton.SglangSettings, batches: tuple[int, ...], sglang_max_bs: int,
                     occupancy: int | None, layer: str = "global") -> dict[str, Any]:
    """Every number `decodecalc cudagraphs` prints, for uniform decode batches of these sizes."""
    from decodecalc.limits import MAX_BATCH, MAX_BATCHES_TOTAL, MAX_OCCUPANCY, check_int, check_list

    check_list(tuple(batches), "--batches", MAX_BATCH, max_total=MAX_BATCHES_TOTAL)
    check_int(sglang_max_bs, "--sglang-cuda-graph-max-bs", MAX_BATCH)
    check_int(occupancy, "--occupancy", MAX_OCCUPANCY)
    if len(set(base.seq_lens)) != 1 or base.max_seqlen_q != 1 + vllm.num_speculative_tokens:
        raise ConfigError("cudagraphs models uniform decode batches: give one --seq-len (not --seq-lens/--query-lens)")
    L = base.seq_lens[0]

    def work(b: int) -> Workload:
        return make_workload(base.model, tp=base.tp, batch=b, seq_len=L, dtype=base.dtype,
                             num_speculative_tokens=vllm.num_speculative_tokens,
                             kv_cache_dtype=base.kv_cache_dtype, block_size=base.block_size)

    out: dict[str, Any] = {"model": base.model.name, "tp": base.tp, "gpu": gpu.name, "seq_len": L,
                           "batches": list(batches)}
    # ---------------------------------------------------------------- vLLM
    s = vllm
    try:
        backend = vllm_unified.build_backend(work(1), gpu, s)
        q = 1 + s.num_speculative_tokens
        full = cg.full_decode_sizes(backend.capture_sizes, q=q, max_num_seqs=s.max_num_seqs)
        rows = []
        for b in batches:
            vp = vllm_unified.plan_vllm(work(b), gpu, s, layer=layer)
            la = vp.launch
            row = {"batch": b, "replay": vp.replay_mode, "unpadded_path": "3D" if la.use_3d else "2D",
                   "unpadded_grid": list(la.grid), "num_reqs_padded": b, "num_tokens_padded": b * q,
                   "replayed_path": None, "replayed_grid": None, "padded_idle_programs": 0}
            if vp.replay is not None:
                r = vp.replay
                row.update(num_reqs_padded=r.num_reqs_padded, num_tokens_padded=r.num_tokens_padded,
                           replayed_path="3D" if r.launch.use_3d else "2D", replayed_grid=list(r.launch.grid),
                           padded_idle_programs=r.plan.main.programs - vp.plan.main.programs)
            rows.append(row)
        out["vllm"] = {
            "cudagraph_mode": s.cudagraph_mode, "model_runner": s.model_runner, "max_num_seqs": s.max_num_seqs,
            "max_num_batched_tokens": s.max_num_batched_tokens, "num_speculative_tokens": s.num_speculative_tokens,
            "capture_sizes": list(backend.capture_sizes), "builder_capture_sizes": list(backend.builder_capture_sizes),
            "full_decode_sizes": list(full),
            "seq_threshold_3d_raw": vllm_unified.MIN_LAUNCH_GRID_SIZE_2D // base.num_kv_heads,
            "seq_threshold_3d": backend.seq_threshold_3D, "scratch_rows": backend.scratch_rows,
            "rows": rows, "source": f"{cg.SOURCE_SIZES}; {cg.SOURCE_DISPATCH}; {cg.SOURCE_SNAP}",
        }
    except DecodecalcError as exc:  # MLA, a block size vLLM rejects: reported, not raised
        out["vllm"] = {"error": str(exc)}
    # ---------------------------------------------------------------- SGLang
    cap = sglang_triton.cuda_graph_batch_sizes(sglang_max_bs)
    srows = []
    err = None
    for b in batches:
        padded = next((c for c in cap if c >= b), None)
        try:
            eager = sglang_triton.plan_sglang(work(b), gpu, sglang)
            graph = sglang_triton.plan_sglang(work(b), gpu, dataclasses.replace(sglang, padded_batch=padded)) \
                if padded is not None else None
        except DecodecalcError as exc:  # reported, not raised
            err = str(exc)
            break
        srows.append({
            "batch": b, "padded_batch": padded, "padded_rows": (padded - b) if padded else 0,
            "replay": "graph" if padded is not None else "eager (above cuda_graph_max_bs)",
            "splits_unpadded": eager.num_kv_splits[0], "nonempty_unpadded": eager.nonempty_splits[0],
            "grid_unpadded": list(eager.stage1_grid),
            "splits_replayed": graph.num_kv_splits[0] if graph else eager.num_kv_splits[0],
            "nonempty_replayed": graph.nonempty_splits[0] if graph else eager.nonempty_splits[0],
            "grid_replayed": list(graph.stage1_grid) if graph else list(eager.stage1_grid),
        })
    out["sglang"] = {"cuda_graph_max_bs": sglang_max_bs, "capture_bs": list(cap), "rows": srows,
                     "padded_seq_len": 1, "source": sglang_triton.CUDA_GRAPH_BS_SOURCE, "error": err}
    # ---------------------------------------------------------------- FlashInfer
    frows = []
    ferr = None
    for b in batches:
        try:
            e = flashinfer.plan_flashinfer(work(b), gpu, occupancy=occupancy, cuda_graph=False)
            g = flashinfer.plan_flashinfer(work(b), gpu, occupancy=occupancy, cuda_graph=True)
        except DecodecalcError as exc:
            ferr = str(exc)
            break
        frows.append({"batch": b, "grid_eager": list(e.grid), "grid_cuda_graph": list(g.grid),
                      "working": g.main.working_programs, "splits_eager": e.splits[0], "splits_cuda_graph": g.splits[0],
                      "occupancy": g.details_as(FlashInferDecodeDetails).occupancy})
    out["flashinfer"] = {"rows": frows, "error": ferr}
    return out
