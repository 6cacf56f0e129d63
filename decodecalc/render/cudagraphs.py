"""`cudagraphs`: captured sizes, padded batches and the geometry frozen at capture."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from decodecalc.formatting import fmt_grid, fmt_sizes


def _cell(text: str) -> str:
    """A launch "(12, 1, 16) = 192" as two lines, the tuple whole on the first (a table cell at 80 columns)."""
    return text.replace(" = ", "\n= ")


def print_cudagraphs(c: Console, d: dict[str, Any]) -> None:
    v = d["vllm"]
    c.print(Text(f"{d['model']} TP={d['tp']} on {d['gpu']}, every request {d['seq_len']} keys", style="bold"))
    if "error" in v:
        c.print(Text(f"vLLM Triton: not applicable: {v['error']}"))
    else:
        c.print(f"\n[bold]vLLM[/] mode {v['cudagraph_mode']}, model runner {v['model_runner']}, max_num_seqs "
                f"{v['max_num_seqs']}, max_num_batched_tokens {v['max_num_batched_tokens']}, k = "
                f"{v['num_speculative_tokens']}", highlight=False)
        c.print(f"  captured sizes: {fmt_sizes(tuple(v['capture_sizes'])) or 'none (eager)'}", highlight=False)
        c.print(f"  FULL decode graphs (tokens): {fmt_sizes(tuple(v['full_decode_sizes'])) or 'none'}", highlight=False)
        c.print(f"  seq_threshold_3D: 128 // h_kv = {v['seq_threshold_3d_raw']} -> {v['seq_threshold_3d']} "
                f"(snapped to the nearest capture size; scratch rows {v['scratch_rows']})", highlight=False)
        t = Table(title="vLLM: the launch each real batch runs as (geometry frozen at capture)")
        for col in ("batch", "graph", "B_pad / T_pad", "unpadded launch", "replayed launch", "idle padded programs"):
            t.add_column(col, justify="right", no_wrap="launch" in col or "grid" in col)  # tuples stay whole
        for r in v["rows"]:
            rep = _cell(f"{r['replayed_path']} {fmt_grid(r['replayed_grid'])}") if r["replayed_grid"] else "-"
            t.add_row(str(r["batch"]), r["replay"], f"{r['num_reqs_padded']} / {r['num_tokens_padded']}",
                      _cell(f"{r['unpadded_path']} {fmt_grid(r['unpadded_grid'])}"), rep,
                      f"{r['padded_idle_programs']:,}")
        c.print(t)
    s = d["sglang"]
    c.print(f"\n[bold]SGLang[/] capture batch sizes (cuda_graph_max_bs {s['cuda_graph_max_bs']}): "
            f"{fmt_sizes(tuple(s['capture_bs']))}", highlight=False)
    if s["error"]:
        c.print(Text(f"  not applicable: {s['error']}"))
    else:
        t = Table(title="SGLang: padded rows carry seq_len 1, so Lmin = 1 and the real requests' splits rise")
        for col in ("batch", "padded batch", "padded rows", "splits eager", "splits in graph", "grid eager",
                    "grid in graph"):
            t.add_column(col, justify="right", no_wrap="launch" in col or "grid" in col)  # tuples stay whole
        for r in s["rows"]:
            up = r["splits_replayed"] > r["splits_unpadded"]
            t.add_row(str(r["batch"]), str(r["padded_batch"] or "-"), str(r["padded_rows"]),
                      f"{r['splits_unpadded']}\n({r['nonempty_unpadded']} busy)",
                      (f"[bold yellow]{r['splits_replayed']}^[/]" if up else str(r["splits_replayed"]))
                      + f"\n({r['nonempty_replayed']} busy)",
                      _cell(fmt_grid(r["grid_unpadded"])), _cell(fmt_grid(r["grid_replayed"])))
        c.print(t)
        c.print("  ^ = the CUDA-graph replay gives the real requests more splits than eager", highlight=False)
    f = d["flashinfer"]
    if f["error"]:
        c.print(Text(f"\nFlashInfer (CUDA cores): not applicable: {f['error']}"))
    else:
        t = Table(title="FlashInfer CUDA-core decode: grid padded to occupancy x SM / h_kv under CUDA graphs")
        for col in ("batch", "grid eager", "grid CUDA graph", "working CTAs", "chunks eager / graph"):
            t.add_column(col, justify="right", no_wrap="launch" in col or "grid" in col)  # tuples stay whole
        for r in f["rows"]:
            t.add_row(str(r["batch"]), _cell(fmt_grid(r["grid_eager"])), _cell(fmt_grid(r["grid_cuda_graph"])),
                      f"{r['working']:,}",
                      f"{r['splits_eager']} / {r['splits_cuda_graph']}")
        c.print(t)
