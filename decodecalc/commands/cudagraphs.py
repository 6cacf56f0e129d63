"""`decodecalc cudagraphs`: parse, call decodecalc.reports.cudagraphs, render."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from decodecalc.commands.options import Inputs, parse_int_list, with_workload_options
from decodecalc.errors import ConfigError


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
    from decodecalc.reports.cudagraphs import DEFAULT_BATCHES, cudagraph_report

    sizes = parse_int_list(batches, "--batches") if batches is not None else DEFAULT_BATCHES
    assert sizes is not None
    if min(sizes) <= 0 or max(sizes) > 65536:
        raise ConfigError("--batches must be in 1..65536")
    from decodecalc.limits import MAX_OCCUPANCY, check_int

    check_int(occupancy, "--occupancy", MAX_OCCUPANCY)  # compare's bound and words
    if inputs.work.batch > 1:
        sizes = tuple(sizes) + (inputs.work.batch,)  # --batch adds one more real batch to the table
    data = cudagraph_report(inputs.work, inputs.gpu, inputs.vllm, inputs.sglang, tuple(sorted(set(sizes))),
                            sglang_max_bs, occupancy, inputs.layer)
    if json_out:
        from decodecalc.commands.output import to_json

        typer.echo(to_json(data))
    else:
        from decodecalc.render import stdout
        from decodecalc.render.cudagraphs import print_cudagraphs

        print_cudagraphs(stdout(), data)


def register(app: typer.Typer) -> None:
    app.command()(with_workload_options(cudagraphs))
