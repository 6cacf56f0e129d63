"""`decodecalc determinism`: one request of length L in batches of growing size, per policy.

Shows the tracked request's split count, split length and path at every batch size, whether its
summation order ever changes (batch invariance), and what VLLM_BATCH_INVARIANT and SGLang's
deterministic mode (split tile 256) do to it.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from decodecalc.commands.options import Inputs, parse_int_list, with_workload_options
from decodecalc.errors import ConfigError


def run_determinism(inputs: Inputs, batches: str | None, others: int | None, policies: str | None,
                    json_out: bool) -> dict[str, Any]:
    from decodecalc.reports import determinism as det
    from decodecalc.launchers import registry as pol

    w = inputs.work
    if len(set(w.seq_lens)) != 1:
        raise ConfigError("determinism tracks one request: give its length with --seq-len and the other "
                          "requests' length with --others (not --seq-lens)")
    if w.max_seqlen_q != 1:
        raise ConfigError("determinism models decode steps: one query token per request")
    sizes = parse_int_list(batches, "--batches") if batches is not None else det.DEFAULT_BATCHES
    assert sizes is not None
    if w.batch > 1 and w.batch not in sizes:
        sizes = tuple(sorted(set(sizes) | {w.batch}))
    sizes = tuple(sorted(set(sizes)))
    opts = pol.PolicyOptions(vllm=inputs.vllm, sglang=inputs.sglang, layer=inputs.layer)
    L = w.seq_lens[0]
    rows = det.analyze(w, inputs.gpu, seq_len=L, others=others, batches=sizes, names=pol.resolve_policies(policies),
                       opts=opts)
    sw = det.switches(w, inputs.gpu, seq_len=L, others=others, batches=sizes, opts=opts)
    data = {"model": w.model.name, "tp": w.tp, "gpu": inputs.gpu.name, "seq_len": L, "others": others or L,
            "batches": list(sizes), "policies": [r.to_json() for r in rows],
            "deterministic_switches": [r.to_json() for r in sw]}
    if json_out:
        from decodecalc.commands.output import to_json

        typer.echo(to_json(data))
        return data
    from decodecalc.render import stdout
    from decodecalc.render.determinism import print_determinism

    print_determinism(stdout(), data, rows, sw)
    return data


def determinism(
    inputs: Inputs,
    batches: Annotated[Optional[str], typer.Option("--batches", help="Batch sizes around the request, comma "
                                                   "list (default 1,2,4,8,16,17,32,64,128,256).")] = None,
    others: Annotated[Optional[int], typer.Option("--others", help="KV length of the other requests "
                                                  "(default: the same as --seq-len).")] = None,
    policies: Annotated[Optional[str], typer.Option("--policies", "-p", help="Comma list of policies "
                                                    "(default all).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """How one request's split count and summation order change with the batch around it, per policy;
    which policies are batch-invariant; what VLLM_BATCH_INVARIANT and SGLang's deterministic mode do."""
    if others is not None and others <= 0:
        raise ConfigError(f"--others must be a positive integer, got {others}")
    run_determinism(inputs, batches, others, policies, json_out)


def register(app: typer.Typer) -> None:
    app.command()(with_workload_options(determinism))
