"""`decodecalc compare`: every modeled split policy side by side for one decode step.

Policies that cannot serve the configuration are listed with the reason. The starred row and the
figure it is ranked by come from :func:`decodecalc.api.compare_for` (``best`` and ``best_rule`` in
the JSON). ``--json`` prints ``{"policies": [...], "best": name, ...}``; ``--csv`` one row per policy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from decodecalc.commands.options import OUTPUT, Inputs, RegimeOpt, with_workload_options

PoliciesOpt = Annotated[Optional[str], typer.Option("--policies", "-p", help="Comma list of policies (default all): "
                                                    "vllm, sglang, vllm-paged, vllm-rocm, fa2, fa3, flashinfer, "
                                                    "flashinfer-tc, aiter, flashmla, flashdecoding.")]
OccupancyOpt = Annotated[Optional[int], typer.Option("--occupancy", help="FlashInfer CUDA-core CTAs per SM (a "
                                                     "cudaOccupancy... result). Default: the register-bound lower "
                                                     "bound (2 for 128-thread CTAs).")]

CSV_FIELDS = ("name", "applicable", "reason", "grid", "programs", "working_programs", "splits", "nonempty_splits",
              "tokens_per_split", "sm_coverage", "waves", "partial_state_bytes_per_layer",
              "partial_state_bytes_used_per_layer", "partial_state_to_kv_ratio", "roofline_time_s",
              "sm_limited_time_s", "predicted_time_s", "predicted_calibrated", "predicted_error_median",
              "predicted_error_p90", "best")


def to_csv(data: dict[str, Any]) -> str:
    import csv
    import io

    buf = io.StringIO()
    wr = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    wr.writeheader()
    for row in data["policies"]:
        out = dict(row)
        err = out.get("predicted_error") or {}
        out["predicted_error_median"], out["predicted_error_p90"] = err.get("median_abs_err"), err.get("p90_abs_err")
        for k in ("grid", "splits", "nonempty_splits", "tokens_per_split"):
            if isinstance(out.get(k), list):
                v = out[k]
                out[k] = "x".join(map(str, v)) if k == "grid" else (str(v[0]) if len(set(v)) == 1 else " ".join(map(str, v)))
        wr.writerow({k: ("" if out.get(k) is None else out.get(k)) for k in CSV_FIELDS})
    return buf.getvalue()


def compare(
    inputs: Inputs,
    policies: PoliciesOpt = None,
    occupancy: OccupancyOpt = None,
    regime: RegimeOpt = "back-to-back",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON: {'policies': [...], 'best': name}.",
                                           rich_help_panel=OUTPUT)] = False,
    csv_out: Annotated[bool, typer.Option("--csv", help="Print one CSV row per policy.",
                                          rich_help_panel=OUTPUT)] = False,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write the JSON (or CSV with "
                                                   "--csv) to this file, atomically.", rich_help_panel=OUTPUT)] = None,
    explain: Annotated[bool, typer.Option("--explain", help="Show formula, inputs and upstream source of every "
                                          "number, per policy.", rich_help_panel=OUTPUT)] = False,
) -> None:
    """Every split policy (vLLM, SGLang, legacy PagedAttention, ROCm, FA2, FA3, FlashInfer, aiter, FlashMLA,
    FlashDecoding at S*) side by side: grid, splits, SM coverage, partial state, roofline, predicted time."""
    from decodecalc.api import compare_for
    from decodecalc.commands.output import to_json, write_atomic
    from decodecalc.errors import ConfigError

    if json_out and csv_out:
        raise ConfigError("give either --json or --csv, not both")
    result = compare_for(inputs, policies, occupancy, regime)
    data = result.to_dict()
    text = to_csv(data) if csv_out else to_json(data) + "\n"
    if output is not None:
        write_atomic(output, text)
    if json_out or csv_out:
        typer.echo(text, nl=False)
    else:
        from decodecalc.render import stdout
        from decodecalc.render.compare import print_compare

        from decodecalc.render.defaults import print_defaults

        print_compare(stdout(), result, explain)
        print_defaults(stdout(), result.defaults, inputs.gpu.name)


def register(app: typer.Typer) -> None:
    app.command()(with_workload_options(compare))
