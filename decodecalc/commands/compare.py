"""`decodecalc compare`: every modeled split policy side by side for one decode step.

Policies that cannot serve the configuration are listed with the reason. The best row (the
smallest roofline time divided by first-wave SM coverage, see :mod:`decodecalc.reports.compare`) is
highlighted. ``--json`` prints ``{"policies": [...], "best": name}``; ``--csv`` one row per policy.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from decodecalc.commands.options import Inputs, with_workload_options
from decodecalc.commands.output import to_json, write_atomic
from decodecalc.errors import ConfigError

PoliciesOpt = Annotated[Optional[str], typer.Option("--policies", "-p", help="Comma list of policies (default all): "
                                                    "vllm, sglang, vllm-paged, vllm-rocm, fa2, fa3, flashinfer, "
                                                    "flashinfer-tc, aiter, flashmla, flashdecoding.")]
OccupancyOpt = Annotated[Optional[int], typer.Option("--occupancy", help="FlashInfer CUDA-core CTAs per SM (a "
                                                     "cudaOccupancy... result). Default: the register-bound lower "
                                                     "bound (2 for 128-thread CTAs).")]

CSV_FIELDS = ("name", "applicable", "reason", "grid", "programs", "working_programs", "splits", "nonempty_splits",
              "tokens_per_split", "sm_coverage", "waves", "partial_state_bytes_per_layer",
              "partial_state_bytes_used_per_layer", "partial_state_to_kv_ratio", "roofline_time_s",
              "sm_limited_time_s", "best")


def compare_data(inputs: Inputs, policies: str | None, occupancy: int | None) -> tuple[dict[str, Any], list]:
    from decodecalc.reports import compare as pol

    if occupancy is not None and occupancy < 1:
        raise ConfigError(f"--occupancy must be a positive integer, got {occupancy}")
    names = pol.resolve_policies(policies)
    opts = pol.PolicyOptions(vllm=inputs.vllm, sglang=inputs.sglang, layer=inputs.layer,
                             flashinfer_occupancy=occupancy)
    results = pol.evaluate_all(inputs.work, inputs.gpu, opts, names)
    best = pol.best_policy(results)
    w, gpu = inputs.work, inputs.gpu
    data = {
        "model": w.model.name, "tp": w.tp, "gpu": gpu.name, "num_sms": gpu.num_sms,
        "workload": {"batch": w.batch, "seq_lens": list(w.seq_lens), "query_lens": list(w.query_lens),
                     "num_heads_per_rank": w.num_heads, "num_kv_heads_per_rank": w.num_kv_heads,
                     "head_size": w.head_size, "dtype": w.dtype, "kv_cache_dtype": w.kv_cache_dtype,
                     "block_size": w.block_size},
        "best": best,
        "best_rule": "smallest roofline_time_s / sm_coverage (first-wave SM coverage of the main kernel)",
        "policies": [dict(r.to_json(), best=(r.name == best)) for r in results],
    }
    return data, results


def to_csv(data: dict[str, Any]) -> str:
    buf = io.StringIO()
    wr = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    wr.writeheader()
    for row in data["policies"]:
        out = dict(row)
        for k in ("grid", "splits", "nonempty_splits", "tokens_per_split"):
            if isinstance(out.get(k), list):
                v = out[k]
                out[k] = "x".join(map(str, v)) if k == "grid" else (str(v[0]) if len(set(v)) == 1 else " ".join(map(str, v)))
        wr.writerow({k: ("" if out.get(k) is None else out.get(k)) for k in CSV_FIELDS})
    return buf.getvalue()


def render(data: dict[str, Any], results: list, explain: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    from decodecalc.render import fmt_bytes, fmt_per_seq, fmt_time

    console = Console()
    w = data["workload"]
    caption = (f"{data['model']} TP={data['tp']} on {data['gpu']} ({data['num_sms']} SMs): B={w['batch']}, "
               f"seq {fmt_per_seq(w['seq_lens'], 4)}, h={w['num_heads_per_rank']}, h_kv={w['num_kv_heads_per_rank']}"
               f", d={w['head_size']}, {w['kv_cache_dtype']} KV, block {w['block_size']}")
    from rich import box

    t = Table(title="Decode attention: every split policy", caption=caption, box=box.SIMPLE_HEAD, pad_edge=False)
    # below ~115 columns the byte and ratio columns move out of the table (JSON/CSV always carry them)
    wide = console.width >= 115
    cols = ["policy", "grid", "busy/all", "splits", "tok/split", "SM (waves)"]
    cols += ["partial a/u", "/KV", "roofline", "/cov"] if wide else ["roofline"]
    for col in cols:
        t.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)

    def kb(n: int) -> str:
        return fmt_bytes(n).replace(" ", "").replace("B", "") or "0"

    for row in data["policies"]:
        if not row["applicable"]:
            t.add_row(f"[dim]{row['name']}[/]", "[dim]n/a[/]", *[""] * (len(cols) - 2))
            continue
        splits = fmt_per_seq(row["splits"], 3)
        if row["nonempty_splits"] != row["splits"]:
            splits += f" ({fmt_per_seq(row['nonempty_splits'], 3)})"
        cells = [
            ("★ " if row["best"] else "") + row["name"],
            "x".join(map(str, row["grid"])), f"{row['working_programs']:,}/{row['programs']:,}", splits,
            fmt_per_seq(row["tokens_per_split"], 3), f"{row['sm_coverage']:.0%} ({row['waves']})",
        ]
        if wide:
            cells += [f"{kb(row['partial_state_bytes_per_layer'])}/{kb(row['partial_state_bytes_used_per_layer'])}",
                      f"{row['partial_state_to_kv_ratio']:.2f}", fmt_time(row["roofline_time_s"]),
                      fmt_time(row["sm_limited_time_s"])]
        else:
            cells += [fmt_time(row["roofline_time_s"])]
        t.add_row(*cells, style="bold green" if row["best"] else None)
    console.print(t)
    skipped = [r for r in data["policies"] if not r["applicable"]]
    if skipped:
        console.print("Not applicable:", highlight=False)
        for r in skipped:
            console.print(f"  {r['name']}: {r['reason']}", highlight=False, soft_wrap=True)
    notes = [f"  {r.name}: {'; '.join(r.notes)}" for r in results if r.applicable and r.notes]
    if notes:
        console.print("Notes:", highlight=False)
        for n in notes:
            console.print(n, highlight=False, soft_wrap=True)
    if wide:
        console.print("busy/all: main-kernel programs that read keys / launched; splits: per sequence, allocated "
                      "(non-empty); partial a/u: stage-1 partial state per layer, allocated/used (K = kB, M = MB); "
                      "/KV: allocated partial state over the layer's KV bytes; /cov: roofline time / SM coverage",
                      highlight=False)
    else:
        console.print("busy/all: main-kernel programs that read keys / launched; splits: per sequence, allocated "
                      "(non-empty). Partial-state bytes: widen the terminal (>= 115 columns) or use --json/--csv.",
                      highlight=False)
        for row in data["policies"]:
            if row["applicable"]:
                console.print(f"  {row['name']}: partial state {fmt_bytes(row['partial_state_bytes_per_layer'])} "
                              f"allocated, {fmt_bytes(row['partial_state_bytes_used_per_layer'])} used "
                              f"({row['partial_state_to_kv_ratio']:.2f} x KV)", highlight=False)
    if explain:
        from decodecalc.render import explain_panel

        for r in results:
            if r.applicable and r.plan is not None:
                items = tuple(r.plan.explain) + (tuple(r.figures.explain) if r.figures is not None else ())
                console.print(explain_panel(f"{r.name}: formula, inputs and source of every number", items))
    if data["best"]:
        console.print(f"★ best: {data['best']} ({data['best_rule']}; a ranking proxy, not a measured time)",
                      highlight=False)


def run_compare(inputs: Inputs, policies: str | None, occupancy: int | None, json_out: bool, csv_out: bool,
                output: Path | None, explain: bool = False) -> dict[str, Any]:
    if json_out and csv_out:
        raise ConfigError("give either --json or --csv, not both")
    data, results = compare_data(inputs, policies, occupancy)
    text = to_csv(data) if csv_out else to_json(data) + "\n"
    if output is not None:
        write_atomic(output, text)
    if json_out or csv_out:
        typer.echo(text, nl=False)
    else:
        render(data, results, explain)
    return data


def register(app: typer.Typer) -> None:
    @app.command()
    @with_workload_options
    def compare(
        inputs: Inputs,
        policies: PoliciesOpt = None,
        occupancy: OccupancyOpt = None,
        json_out: Annotated[bool, typer.Option("--json", help="Print JSON: {'policies': [...], 'best': name}.")] = False,
        csv_out: Annotated[bool, typer.Option("--csv", help="Print one CSV row per policy.")] = False,
        output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write the JSON (or CSV with "
                                                       "--csv) to this file, atomically.")] = None,
        explain: Annotated[bool, typer.Option("--explain", help="Show formula, inputs and upstream source of every "
                                              "number, per policy.")] = False,
    ) -> None:
        """Every split policy (vLLM, SGLang, legacy PagedAttention, ROCm, FA2, FA3, FlashInfer, aiter, FlashMLA,
        FlashDecoding at S*) side by side: grid, splits, SM coverage, partial state, roofline."""
        run_compare(inputs, policies, occupancy, json_out, csv_out, output, explain)
