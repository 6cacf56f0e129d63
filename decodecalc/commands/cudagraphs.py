"""`decodecalc cudagraphs`: what CUDA graphs freeze, and what a real batch runs as.

vLLM (reusing decodecalc.launchers.cudagraphs and vllm_unified, upstream-launchers.md 3.3): the
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

from typing import Annotated, Any, Optional

import typer

from decodecalc.commands.options import Inputs, parse_int_list, with_workload_options
from decodecalc.errors import ConfigError

DEFAULT_BATCHES = (1, 3, 5, 13, 16, 17, 33, 100, 257)
SGLANG_CG_SOURCE = "sglang python/sglang/srt/server_args.py _generate_cuda_graph_batch_sizes (release not pinned)"


def sglang_capture_bs(cuda_graph_max_bs: int, *, disable_padding: bool = False) -> tuple[int, ...]:
    """SGLang's decode CUDA-graph batch sizes (no speculative decoding)."""
    if cuda_graph_max_bs <= 0:
        raise ConfigError(f"--sglang-cuda-graph-max-bs must be positive, got {cuda_graph_max_bs}")
    if disable_padding:
        return tuple(range(1, cuda_graph_max_bs + 1))
    bs = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(
        range(512, cuda_graph_max_bs + 1, 32))
    return tuple(b for b in bs if b <= cuda_graph_max_bs)


def _short(sizes: tuple[int, ...]) -> str:
    if len(sizes) <= 14:
        return ", ".join(map(str, sizes))
    return f"{', '.join(map(str, sizes[:8]))}, ..., {', '.join(map(str, sizes[-3:]))} ({len(sizes)} sizes)"


def cudagraph_report(inputs: Inputs, batches: tuple[int, ...], sglang_max_bs: int,
                     occupancy: int | None) -> dict[str, Any]:
    """Pure: every number the command prints."""
    import dataclasses

    from decodecalc.launchers import cudagraphs as cg
    from decodecalc.launchers import flashinfer, sglang_triton, vllm_unified
    from decodecalc.workload import make_workload

    base = inputs.work
    if len(set(base.seq_lens)) != 1 or base.max_seqlen_q != 1 + inputs.vllm.num_speculative_tokens:
        raise ConfigError("cudagraphs models uniform decode batches: give one --seq-len (not --seq-lens/--query-lens)")
    L = base.seq_lens[0]
    gpu = inputs.gpu

    def work(b: int):
        return make_workload(base.model, tp=base.tp, batch=b, seq_len=L, dtype=base.dtype,
                             num_speculative_tokens=inputs.vllm.num_speculative_tokens,
                             kv_cache_dtype=base.kv_cache_dtype, block_size=base.block_size)

    out: dict[str, Any] = {"model": base.model.name, "tp": base.tp, "gpu": gpu.name, "seq_len": L,
                           "batches": list(batches)}
    # ---------------------------------------------------------------- vLLM
    s = inputs.vllm
    try:
        backend = vllm_unified.build_backend(work(1), gpu, s)
        q = 1 + s.num_speculative_tokens
        full = cg.full_decode_sizes(backend.capture_sizes, q=q, max_num_seqs=s.max_num_seqs)
        rows = []
        for b in batches:
            vp = vllm_unified.plan_vllm(work(b), gpu, s, layer=inputs.layer)
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
    except ConfigError as exc:
        out["vllm"] = {"error": str(exc)}
    except Exception as exc:  # UnsupportedError (MLA) and friends
        out["vllm"] = {"error": str(exc)}
    # ---------------------------------------------------------------- SGLang
    cap = sglang_capture_bs(sglang_max_bs)
    srows = []
    err = None
    for b in batches:
        padded = next((c for c in cap if c >= b), None)
        try:
            eager = sglang_triton.plan_sglang(work(b), gpu, inputs.sglang)
            graph = sglang_triton.plan_sglang(work(b), gpu, dataclasses.replace(inputs.sglang, padded_batch=padded)) \
                if padded is not None else None
        except Exception as exc:  # noqa: BLE001 - reported, not raised
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
                     "padded_seq_len": 1, "source": SGLANG_CG_SOURCE, "error": err}
    # ---------------------------------------------------------------- FlashInfer
    frows = []
    ferr = None
    for b in batches:
        try:
            e = flashinfer.plan_flashinfer(work(b), gpu, occupancy=occupancy, cuda_graph=False)
            g = flashinfer.plan_flashinfer(work(b), gpu, occupancy=occupancy, cuda_graph=True)
        except Exception as exc:  # noqa: BLE001
            ferr = str(exc)
            break
        frows.append({"batch": b, "grid_eager": list(e.grid), "grid_cuda_graph": list(g.grid),
                      "working": g.main.working_programs, "splits_eager": e.splits[0], "splits_cuda_graph": g.splits[0],
                      "occupancy": g.details["occupancy"]})
    out["flashinfer"] = {"rows": frows, "error": ferr}
    return out


def _render(d: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from decodecalc.render import fmt_grid

    c = Console()
    v = d["vllm"]
    c.print(f"[bold]{d['model']} TP={d['tp']} on {d['gpu']}, every request {d['seq_len']} keys[/]")
    if "error" in v:
        c.print(f"vLLM Triton: not applicable: {v['error']}", highlight=False)
    else:
        c.print(f"\n[bold]vLLM[/] mode {v['cudagraph_mode']}, model runner {v['model_runner']}, max_num_seqs "
                f"{v['max_num_seqs']}, max_num_batched_tokens {v['max_num_batched_tokens']}, k = "
                f"{v['num_speculative_tokens']}", highlight=False)
        c.print(f"  captured sizes: {_short(tuple(v['capture_sizes'])) or 'none (eager)'}", highlight=False)
        c.print(f"  FULL decode graphs (tokens): {_short(tuple(v['full_decode_sizes'])) or 'none'}", highlight=False)
        c.print(f"  seq_threshold_3D: 128 // h_kv = {v['seq_threshold_3d_raw']} -> {v['seq_threshold_3d']} "
                f"(snapped to the nearest capture size; scratch rows {v['scratch_rows']})", highlight=False)
        t = Table(title="vLLM: the launch each real batch runs as (geometry frozen at capture)")
        for col in ("batch", "graph", "B_pad / T_pad", "unpadded launch", "replayed launch", "idle padded programs"):
            t.add_column(col, justify="right")
        for r in v["rows"]:
            rep = f"{r['replayed_path']} {fmt_grid(r['replayed_grid'])}" if r["replayed_grid"] else "-"
            t.add_row(str(r["batch"]), r["replay"], f"{r['num_reqs_padded']} / {r['num_tokens_padded']}",
                      f"{r['unpadded_path']} {fmt_grid(r['unpadded_grid'])}", rep, f"{r['padded_idle_programs']:,}")
        c.print(t)
    s = d["sglang"]
    c.print(f"\n[bold]SGLang[/] capture batch sizes (cuda_graph_max_bs {s['cuda_graph_max_bs']}): "
            f"{_short(tuple(s['capture_bs']))}", highlight=False)
    if s["error"]:
        c.print(f"  not applicable: {s['error']}", highlight=False)
    else:
        t = Table(title="SGLang: padded rows carry seq_len 1, so Lmin = 1 and the real requests' splits rise")
        for col in ("batch", "padded batch", "padded rows", "splits eager", "splits in graph", "grid eager",
                    "grid in graph"):
            t.add_column(col, justify="right")
        for r in s["rows"]:
            up = r["splits_replayed"] > r["splits_unpadded"]
            t.add_row(str(r["batch"]), str(r["padded_batch"] or "-"), str(r["padded_rows"]),
                      f"{r['splits_unpadded']} ({r['nonempty_unpadded']} busy)",
                      (f"[bold yellow]{r['splits_replayed']}[/]" if up else str(r["splits_replayed"]))
                      + f" ({r['nonempty_replayed']} busy)",
                      fmt_grid(r["grid_unpadded"]), fmt_grid(r["grid_replayed"]))
        c.print(t)
    f = d["flashinfer"]
    if f["error"]:
        c.print(f"\nFlashInfer (CUDA cores): not applicable: {f['error']}", highlight=False)
    else:
        t = Table(title="FlashInfer CUDA-core decode: grid padded to occupancy x SM / h_kv under CUDA graphs")
        for col in ("batch", "grid eager", "grid CUDA graph", "working CTAs", "chunks eager / graph"):
            t.add_column(col, justify="right")
        for r in f["rows"]:
            t.add_row(str(r["batch"]), fmt_grid(r["grid_eager"]), fmt_grid(r["grid_cuda_graph"]), f"{r['working']:,}",
                      f"{r['splits_eager']} / {r['splits_cuda_graph']}")
        c.print(t)


def register(app: typer.Typer) -> None:
    @app.command()
    @with_workload_options
    def cudagraphs(
        inputs: Inputs,
        batches: Annotated[Optional[str], typer.Option("--batches", help="Real batch sizes to show, comma list "
                                                       "(default 1,3,5,13,16,17,33,100,257).")] = None,
        sglang_max_bs: Annotated[int, typer.Option("--sglang-cuda-graph-max-bs", help="SGLang cuda_graph_max_bs "
                                                   "(its default depends on GPU memory and TP).")] = 256,
        occupancy: Annotated[Optional[int], typer.Option("--occupancy", help="FlashInfer CTAs per SM "
                                                         "(default: the documented lower bound).")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """CUDA graphs: captured sizes, the padded batch a real batch runs as, the geometry frozen at capture,
        vLLM's threshold snapping, and SGLang's padded rows (seq_len 1) raising split counts."""
        sizes = parse_int_list(batches, "--batches") if batches is not None else DEFAULT_BATCHES
        assert sizes is not None
        if min(sizes) <= 0 or max(sizes) > 65536:
            raise ConfigError("--batches must be in 1..65536")
        if occupancy is not None and occupancy < 1:
            raise ConfigError(f"--occupancy must be a positive integer, got {occupancy}")
        if inputs.work.batch > 1:
            sizes = tuple(sizes) + (inputs.work.batch,)  # --batch adds one more real batch to the table
        data = cudagraph_report(inputs, tuple(sorted(set(sizes))), sglang_max_bs, occupancy)
        if json_out:
            from decodecalc.commands.output import to_json

            typer.echo(to_json(data))
        else:
            _render(data)
