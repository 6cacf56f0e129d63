"""`decodecalc sweep`: policies over batch x sequence length (x models, TP, GPUs).

Ranges are checked before any work starts. Output: CSV or JSON written atomically (temp file +
os.replace), a progress bar on stderr, PNG heatmaps with the optional ``plot`` extra, and a compact
terminal heatmap otherwise.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from decodecalc.commands.options import OUTPUT, Dtype, KvDtype, handle_errors, plain
from decodecalc.errors import ConfigError
from decodecalc.extras import install_hint

if TYPE_CHECKING:
    from collections.abc import Iterator

    from decodecalc.reports.sweep import SweepSpec


class Metric(str, Enum):
    sm_coverage = "sm_coverage"
    nonempty_splits = "nonempty_splits"
    splits = "splits"
    region = "region"


class Format(str, Enum):
    csv = "csv"
    json = "json"


def _names(text: str, option: str) -> tuple[str, ...]:
    from decodecalc.limits import split_items

    return tuple(split_items(text, option, {"--model": "llama3-8b,qwen3-8b", "--gpu": "h100,h200"}.get(option, "")))


def build_spec(*, models: str, tps: str, gpus: str, policies: str, batch: str, seq_len: str, dtype: str | None,
               kv_cache_dtype: str, block_size: int, sms: int | None) -> SweepSpec:
    from decodecalc.launchers import registry as pol
    from decodecalc.commands.options import parse_int_list
    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.specs.models import resolve_model
    from decodecalc.reports.sweep import MAX_BATCH, MAX_SEQ_LEN, SweepSpec, parse_range

    batches = parse_range(batch, "--batch", upper=MAX_BATCH)
    lens = parse_range(seq_len, "--seq-len", upper=MAX_SEQ_LEN)
    tp_list = parse_int_list(tps, "--tp")
    assert tp_list is not None
    if any(t <= 0 for t in tp_list):
        raise ConfigError(f"--tp values must be positive, got {tps}")
    return SweepSpec(
        models=tuple(resolve_model(m) for m in _names(models, "--model")), tps=tp_list,
        gpus=tuple(resolve_gpu(g, sms=sms) for g in _names(gpus, "--gpu")),
        policies=pol.resolve_policies(policies), batches=batches, seq_lens=lens, dtype=dtype,
        kv_cache_dtype=kv_cache_dtype, block_size=block_size,
    )


def sweep(
    model: Annotated[str, typer.Option("--model", "-m", help="Model id(s), comma-separated.")] = "llama3-8b",
    tp: Annotated[str, typer.Option("--tp", help="TP degree(s), comma-separated.")] = "1",
    gpu: Annotated[str, typer.Option("--gpu", "-g", help="GPU name(s), comma-separated.")] = "h200",
    policies: Annotated[str, typer.Option("--policies", "-p", help="Comma list of policies, or 'all'. "
                                          "vllm, sglang and flashdecoding use the fast closed forms.")] = "vllm,sglang",
    batch: Annotated[str, typer.Option("--batch", "-b", help="Batch sizes: N, A:B, A:B:STEP, A:B:xFACTOR, "
                                       "comma-separated.")] = "1:256",
    seq_len: Annotated[str, typer.Option("--seq-len", "-s", help="Sequence lengths, same syntax.")] = "128:131072:128",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write CSV (or JSON for *.json) "
                                                   "atomically.")] = None,
    fmt: Annotated[Optional[Format], typer.Option("--format", help="Print (or write) this format (default: "
                                                  "from --output's suffix, else csv).", case_sensitive=False,
                                                  rich_help_panel=OUTPUT)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print (or write) JSON: the same as --format json, as "
                                          "every other command spells it.", rich_help_panel=OUTPUT)] = False,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Write PNG heatmaps (needs the 'plot' "
                                                 "extra).")] = None,
    metric: Annotated[Metric, typer.Option("--metric", help="What the terminal heatmap shows.",
                                           rich_help_panel=OUTPUT)] = Metric.region,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or notes on stderr (the result "
                                        "is still printed).")] = False,
    dtype: Annotated[Optional[Dtype], typer.Option("--dtype", help="Activation dtype (default the model's).")] = None,
    kv_cache_dtype: Annotated[KvDtype, typer.Option("--kv-cache-dtype", help="KV-cache dtype.")] = KvDtype.auto,
    block_size: Annotated[int, typer.Option("--block-size", help="KV block size.")] = 16,
    sms: Annotated[Optional[int], typer.Option("--sms", help="Override the SM count of every GPU.")] = None,
    cuda_graph: Annotated[bool, typer.Option("--cuda-graph/--no-cuda-graph", help="vLLM CUDA graphs "
                                             "(padded FULL replay) or eager.")] = True,
    batch_invariant: Annotated[bool, typer.Option("--batch-invariant", help="VLLM_BATCH_INVARIANT / SGLang "
                                                  "deterministic inference.")] = False,
    max_kv_splits: Annotated[Optional[int], typer.Option("--max-kv-splits", help="SGLang max_kv_splits.")] = None,
) -> None:
    """Sweep batch x sequence length for chosen policies: CSV/JSON, heatmaps (SM coverage, splits, 2D/3D)."""
    from decodecalc.launchers import registry as pol
    from decodecalc.commands.output import check_writable, to_json, write_files
    from decodecalc.launchers.sglang_triton import SglangSettings
    from decodecalc.launchers.vllm_unified import VllmSettings
    from decodecalc.plot import plot_available, sweep_png_writer
    from decodecalc.reports.sweep import run_sweep

    if as_json and fmt is not None and fmt.value != "json":
        raise ConfigError(f"--json conflicts with --format {fmt.value}")
    kind = "json" if as_json else fmt.value if fmt is not None else (
        "json" if output is not None and output.suffix.lower() == ".json" else "csv")
    if output is not None:  # both files are checked before the sweep runs
        check_writable(output, "--output")
    if plot is not None:
        check_writable(plot, "--plot")
    if plot is not None and not plot_available():
        raise ConfigError(f"--plot needs the 'plot' extra: {install_hint('plot')} (matplotlib)")
    spec = build_spec(models=model, tps=tp, gpus=gpu, policies=policies, batch=batch, seq_len=seq_len,
                      dtype=plain(dtype), kv_cache_dtype=plain(kv_cache_dtype), block_size=block_size, sms=sms)
    spec.validate()
    from decodecalc.limits import MAX_KV_SPLITS, check_int

    check_int(max_kv_splits, "--max-kv-splits", MAX_KV_SPLITS)
    opts = pol.PolicyOptions(
        vllm=VllmSettings(cudagraph_mode="FULL_AND_PIECEWISE" if cuda_graph else "NONE",
                          batch_invariant=batch_invariant),
        sglang=SglangSettings(max_kv_splits=max_kv_splits, deterministic=batch_invariant),
    )
    from decodecalc.render import stderr, stdout

    err = stderr()
    slow = [p for p in spec.policies if p not in ("vllm", "sglang", "flashdecoding")]
    if slow and not quiet:
        err.print(f"note: {', '.join(slow)} use one full launch plan per point (slower than the closed forms)")
    if quiet:
        result = run_sweep(spec, opts)
    else:
        from decodecalc.render.sweep import progress_bar

        with progress_bar(err, spec.num_points // len(spec.seq_lens)) as progress:
            result = run_sweep(spec, opts, progress)
    files: list = []  # written together: a failed plot leaves no CSV, and no temp file either
    if output is not None:
        if kind == "csv":  # streamed: a million-point CSV is never one string in memory
            def write_csv(target: Path, chunks: Iterator[str] = result.iter_csv()) -> None:
                with open(target, "w") as f:
                    f.writelines(chunks)

            files.append((output, write_csv))
        else:
            files.append((output, to_json(result.to_json()) + "\n"))
    if plot is not None:
        files.append((plot, sweep_png_writer(result)))
    write_files(files)
    if not quiet:
        if output is not None:
            err.print(f"wrote {output} ({spec.num_points:,} points)")
        if plot is not None:
            err.print(f"wrote {plot}")
    if output is None and (fmt is not None or as_json):
        typer.echo(result.to_csv() if kind == "csv" else to_json(result.to_json()), nl=kind == "json")
    elif output is None:  # quiet means no progress bar, not no result
        from decodecalc.render.sweep import print_heatmaps

        print_heatmaps(stdout(), result, metric.value)


def register(app: typer.Typer) -> None:
    app.command()(handle_errors(sweep))
