"""`decodecalc verify`: run the kernels for one decode step and compare with what decodecalc predicts.

On a CUDA GPU, or on the CPU with ``TRITON_INTERPRET=1`` (tiny shapes; bf16 runs as fp16).
Needs the optional ``verify`` extra (torch, triton); nothing here imports them at import time.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from enum import Enum
from typing import Annotated, Any, Optional

import typer

from decodecalc.commands.options import Inputs, SglangSrcOpt, VllmSrcOpt, fail, with_workload_options
from decodecalc.commands.output import to_json, write_atomic
from decodecalc.errors import ConfigError, DecodecalcError, UnknownNameError, UnsupportedError

KERNELS = ("auto", "upstream", "reference", "both")
#: backends verify captures through the CUDA profiler: the keys of decodecalc.verify.profiler.BACKENDS
#: (listed here so that the CLI starts without importing it; tests/test_verify_nodeps.py checks they agree)
PROFILED = ("flashinfer", "flashinfer-tc", "fa3", "flashmla", "fa2")

VerifySystem = Enum("VerifySystem", {n: n for n in ("vllm", "sglang") + PROFILED}, type=str)  # type: ignore[misc]
VerifySystemOpt = Annotated[Optional[VerifySystem], typer.Option(  # type: ignore[valid-type]
    "--system", help="Only one system: vllm or sglang (default both), or a backend captured through the CUDA "
    "profiler (GPU only; needs its package).", case_sensitive=False)]

KernelsOpt = Annotated[str, typer.Option("--kernels", help="Which kernels run: auto (vLLM's / SGLang's own where "
                                         "their sources are found, decodecalc's reference kernels otherwise), "
                                         "upstream (unmodified engine kernels), reference (decodecalc's), or both.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print everything as JSON instead of tables.")]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the JSON to this file (atomic; "
                                                   "partial results are written if a later run fails).")]
TimeOpt = Annotated[bool, typer.Option("--time/--no-time", help="Time each step (CUDA-graph replay over rotating "
                                       "KV-cache copies; GPU only).")]
ReplaysOpt = Annotated[int, typer.Option("--replays", help="Graph replays to take the median of.")]
CheckSeqsOpt = Annotated[int, typer.Option("--check-seqs", help="Sequences compared with the float32 reference "
                                           "(0 = all).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed for the KV cache and queries.")]


def _systems(system: Any) -> tuple[str, ...]:
    """vllm and sglang (default both), or one backend the CUDA profiler captures (verify/profiler.py)."""
    from decodecalc.reports.grid import SYSTEMS

    if system is None:
        return SYSTEMS
    s = str(getattr(system, "value", system)).lower()
    if s in SYSTEMS or s in PROFILED:
        return (s,)
    raise UnknownNameError("system", s, SYSTEMS + PROFILED)


def _mode(kernels: str) -> str:
    k = kernels.lower()
    if k not in KERNELS:
        raise ConfigError(f"--kernels {kernels!r}; valid: {', '.join(KERNELS)}")
    return k


def _choose_kernels(systems: tuple[str, ...], mode: str, srcs: dict[str, Path | None],
                    env: Any) -> tuple[dict[str, tuple[str, ...]], dict[str, str], list[str]]:
    """Per system, which kernel sources run, why a system falls back to the reference kernels, and the
    warnings of the upstream sources found (their versions go into ``env.versions``).

    auto: the upstream kernels where their sources are found, decodecalc's reference kernels otherwise
    (a source path given on the command line must hold them); upstream / both: a missing source is an
    error naming what to install."""
    from decodecalc.verify import locate as loc

    ran: dict[str, tuple[str, ...]] = {}
    fallback: dict[str, str] = {}
    warned: list[str] = []
    for s in systems:
        if mode == "reference":
            ran[s] = ("reference",)
            continue
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                src = loc.locate(s, srcs[s])
        except ConfigError as exc:
            if mode != "auto" or srcs[s] is not None:
                raise
            ran[s] = ("reference",)
            fallback[s] = str(exc)
            continue
        env.versions[s] = f"{src.version} ({src.origin}: {src.root})"
        warned += [str(w.message) for w in caught]
        ran[s] = ("upstream", "reference") if mode == "both" else ("upstream",)
    return ran, fallback, warned


def run_verify(
    inputs: Inputs,
    *,
    system: str | None = None,
    kernels: str = "auto",
    vllm_src: Path | None = None,
    sglang_src: Path | None = None,
    json_out: bool = False,
    output: Path | None = None,
    timing: bool = True,
    replays: int = 5,
    check_seqs: int = 4,
    seed: int = 0,
) -> int:
    """Run, print, write; return the exit code (0 all matched, 1 any mismatch or failed run)."""
    import dataclasses

    from rich.console import Console
    from rich.markup import escape

    from decodecalc.reports.grid import grid_report
    from decodecalc.verify.calls import sglang_call, vllm_call
    from decodecalc.verify.environment import check_workload, detect_environment
    from decodecalc.verify.locate import EXPECTED_VERSIONS
    from decodecalc.verify.results import workload_json
    from decodecalc.verify.runner import CudaFault, verify_workload

    systems = _systems(system)
    mode = _mode(kernels)
    if replays <= 0:
        raise ConfigError(f"--replays must be positive, got {replays}")
    if output is not None:  # before minutes of kernel runs
        from decodecalc.commands.output import check_writable

        check_writable(output, "--output")
    if systems[0] in PROFILED:
        return _run_profiled(systems[0], inputs, json_out=json_out, output=output, timing=timing, replays=replays)
    if inputs.layer != "global":
        raise UnsupportedError("verify runs full-causal (global) layers only; --layer sliding is not supported")
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    env = detect_environment()
    work, gpu = inputs.work, inputs.gpu
    check_workload(work)
    if env.device == "cuda" and env.sm_count and env.sm_count != gpu.num_sms:
        err.print(f"[yellow]Warning:[/] local GPU {env.gpu_name} has {env.sm_count} SMs, --gpu {gpu.name} "
                  f"{gpu.num_sms}; predicting for the local count")
        gpu = dataclasses.replace(gpu, num_sms=env.sm_count)
    if env.device == "cuda" and gpu.name.split("-")[0] not in env.gpu_name.lower():
        err.print(f"[yellow]Warning:[/] running on {env.gpu_name} but --gpu is {gpu.name}: bandwidth, roofline "
                  "and predicted times use the --gpu figures")
        env.warnings.append(f"local GPU {env.gpu_name}, --gpu {gpu.name}")
    if env.interpret and sum(work.seq_lens) * work.num_kv_heads > 200_000:
        err.print("[yellow]Warning:[/] the Triton interpreter is slow: use tiny shapes (a few hundred tokens)")

    # which kernels run, and the versions of the upstream sources, before anything runs
    srcs = {"vllm": vllm_src, "sglang": sglang_src}
    sources, fallback, warned = _choose_kernels(systems, mode, srcs, env)
    for w in warned:
        env.warnings.append(w)
        err.print(f"[yellow]Warning:[/] {escape(w)}")
    for s, why in fallback.items():
        err.print(f"[yellow]Note:[/] {s}: running decodecalc's reference kernels: {escape(why)}")
    if "upstream" in sources.get("vllm", ()) and inputs.vllm.version != EXPECTED_VERSIONS["vllm"]:
        msg = (f"--vllm-version {inputs.vllm.version} is modeled, but the kernels that run are vLLM "
               f"{env.versions.get('vllm', '?').split(' ')[0]}")
        env.warnings.append(msg)
        err.print(f"[yellow]Warning:[/] {msg}")

    report = grid_report(work, gpu, systems=systems, vllm=inputs.vllm, sglang=inputs.sglang,
                         kernel_block_size=inputs.kernel_block_size, layer=inputs.layer)
    calls = []
    skipped = {}
    for sr in report.systems:
        if sr.error or sr.model is None:
            skipped[sr.name] = sr.error or "no model"
            continue
        calls.append(vllm_call(sr.model) if sr.name == "vllm" else sglang_call(sr.model, gpu))
    if not calls:
        raise UnsupportedError("; ".join(f"{k}: {v}" for k, v in skipped.items()) or "nothing to run")
    for name, why in skipped.items():
        err.print(f"[yellow]Skipped {name}:[/] {why}")

    results: list[Any] = []
    kernels_doc = {"mode": mode, "ran": {c.system: list(sources[c.system]) for c in calls},
                   "fallback": {k: v for k, v in fallback.items() if any(c.system == k for c in calls)}}
    doc: dict[str, Any] = {"environment": env.to_json(), "workload": workload_json(work), "kernels": kernels_doc,
                           "gpu": {"name": gpu.name, "num_sms": gpu.num_sms,
                                   "hbm_bandwidth_bytes_per_s": gpu.hbm_bandwidth_bytes_per_s},
                           "skipped": skipped, "runs": [], "ok": False, "complete": False}

    def save() -> None:
        doc["runs"] = [r.to_json() for r in results]
        if output is not None:
            write_atomic(output, to_json(doc) + "\n")

    total = sum(len(sources[c.system]) for c in calls)
    wr = None
    try:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=err, transient=True, disable=json_out and output is None) as prog:
            task = prog.add_task("verify", total=total)

            def progress(label: str) -> None:
                prog.update(task, description=f"running {label}", completed=len(results))

            wr = verify_workload(work, calls, env, sources=sources, vllm_src=_str(vllm_src),
                                 sglang_src=_str(sglang_src), timing=timing, check_seqs=check_seqs, seed=seed,
                                 bandwidth=gpu.hbm_bandwidth_bytes_per_s, replays=replays, progress=progress,
                                 results=results)
            prog.update(task, completed=total)
    except CudaFault as exc:
        save()
        _print(Console(), results, work, gpu, env, kernels=kernels_doc)
        raise DecodecalcError(f"{exc}; partial results{' in ' + str(output) if output else ''}") from None
    except DecodecalcError:
        save()
        raise
    except KeyboardInterrupt:
        save()
        raise
    doc["notes"] = wr.notes if wr else []
    doc["predicted_time_s"] = _predicted_times(report, work, gpu)
    doc["ok"] = all(r.ok for r in results)
    doc["complete"] = True
    save()
    if json_out:
        typer.echo(to_json(doc))
    else:
        out = Console()
        _print(out, results, work, gpu, env, notes=doc["notes"], predicted=doc["predicted_time_s"],
               kernels=kernels_doc)
    return 0 if doc["ok"] else 1


def _run_profiled(backend: str, inputs: Inputs, *, json_out: bool, output: Path | None, timing: bool,
                  replays: int) -> int:
    """``--system flashinfer|fa3|...``: one capture through the CUDA profiler (decodecalc.verify.profiler),
    compared with compare's row for that backend."""
    from rich.console import Console
    from rich.markup import escape

    from decodecalc.verify.environment import detect_environment
    from decodecalc.verify.profiler import missing_backend, run_case
    from decodecalc.verify.results import workload_json

    why = missing_backend(backend)
    if why:
        raise UnsupportedError(why)
    env = detect_environment()
    if env.device != "cuda":
        raise UnsupportedError(f"--system {backend} runs on a CUDA GPU only (its launches are read from the CUDA "
                               "profiler); under TRITON_INTERPRET=1 verify runs vllm and sglang")
    rec = run_case(backend, inputs.work, inputs.gpu, time_it=timing, replays=replays)
    doc = {"environment": env.to_json(), "workload": workload_json(inputs.work),
           "kernels": {"mode": "profiled", "ran": {backend: ["upstream"]}, "fallback": {}},
           "profiled": rec, "ok": bool(rec.get("match")), "complete": True}
    if output is not None:
        write_atomic(output, to_json(doc) + "\n")
    if json_out:
        typer.echo(to_json(doc))
    else:
        out = Console()
        out.print(f"[bold]verify[/] {escape(backend)} on {escape(env.gpu_name)} (CUDA profiler)", highlight=False)
        for row in rec.get("kernels", []):
            out.print("  " + ", ".join(f"{k}: {v}" for k, v in row.items()), highlight=False, markup=False)
        out.print("[green]all launches match the prediction[/]" if doc["ok"] else
                  "[bold red]mismatch or no prediction: see --json[/]")
    return 0 if doc["ok"] else 1


def _str(p: Path | None) -> str | None:
    return None if p is None else str(p)


def _predicted_times(report: Any, work: Any, gpu: Any) -> dict[str, float]:
    """decodecalc's own kernel-time prediction per system (the time model), when available."""
    try:
        from decodecalc.timemodel import predict_time_s
    except ImportError:
        return {}
    out = {}
    for s in report.systems:
        if s.error or s.model is None:
            continue
        try:
            out[s.name] = predict_time_s(s.model.plan, work, gpu, s.name)[0]
        except Exception:  # a prediction problem must not hide the measurement
            continue
    return out


def _fmt_grid(g: list[int] | None) -> str:
    from decodecalc.formatting import fmt_grid_x

    return fmt_grid_x(g)


def _pair(predicted: str, observed: str) -> str:
    """One value when prediction and observation agree, else both, in red."""
    return predicted if predicted == observed else f"[red]{predicted} != {observed}[/]"


def _compact(xs: list[int]) -> str:
    from decodecalc.formatting import fmt_count_list

    return fmt_count_list(xs, width=24)


def _print(console: Any, results: list[Any], work: Any, gpu: Any, env: Any, *, notes: list[str] | None = None,
           predicted: dict[str, float] | None = None, kernels: dict[str, Any] | None = None) -> None:
    """One section row per run (its splits, error, time and status), then one row per kernel launch;
    fits 80 columns under the interpreter."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    dev = f"{env.gpu_name} ({env.sm_count} SMs)" if env.device == "cuda" else "CPU (Triton interpreter)"
    console.print(f"[bold]verify[/] {work.model.name} tp={work.tp}: B={work.batch}, h={work.num_heads}, "
                  f"h_kv={work.num_kv_heads}, d={work.head_size}, {work.dtype}, block {work.block_size}", highlight=False)
    console.print(f"  on {dev}; torch {env.torch}, triton {env.triton}", highlight=False, markup=False)
    kd = kernels or {}
    for k, ran in kd.get("ran", {}).items():
        what = " + ".join(f"upstream {env.versions.get(k, '?')}" if r == "upstream"
                          else "reference kernels" if len(ran) > 1 else "decodecalc's reference kernels" for r in ran)
        why = " (no upstream sources found)" if k in kd.get("fallback", {}) else ""
        console.print(f"  {k}: {what}{why}", highlight=False, markup=False)
    for n in notes or []:
        console.print(f"  note: {n}", highlight=False, markup=False)
    timed = any(r.timing and r.timing.get("t_us") for r in results)
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold")
    cols = ["run / kernel", "grid", "working", "splits (live)", "max err"]
    if timed:
        cols += ["us", "GB/s (%HBM)", "roofline us"]
    cols.append("status")
    for col in cols:
        t.add_column(col, overflow="fold", no_wrap=col not in ("splits (live)", "status"))
    for r in results:
        sp = _pair(_compact(r.splits_predicted), _compact(r.splits_observed))
        if r.nonempty_predicted or r.nonempty_observed:
            sp += " (" + _pair(_compact(r.nonempty_predicted), _compact(r.nonempty_observed)) + ")"
        e = r.error.get("max_err_vs_max") if r.error else None
        es = "-" if e is None else _wrap(f"{e:.1e}", "" if r.error_ok else "red")
        status = {"ok": "[green]ok[/]", "mismatch": "[bold red]MISMATCH[/]", "error": "[bold red]ERROR[/]"}[r.status]
        if r.status == "error":
            status += f" {escape(r.message)}"
        label = f"{r.system} {r.version}" if r.source == "upstream" else f"{r.system} ref"
        row = [f"[bold]{escape(label)}[/]", "", "", sp, es]
        if timed:
            tu = r.timing.get("t_us") if r.timing else None
            row += ["-" if tu is None else f"{tu:.1f}",
                    "-" if r.gbps is None else f"{r.gbps:.0f} ({100 * (r.bandwidth_fraction or 0):.0f}%)",
                    "-" if r.roofline_us is None else f"{r.roofline_us:.1f}"]
        t.add_row(*row, status)
        for c in r.launches:
            t.add_row(f" {escape(c.kernel)}", _pair(_fmt_grid(c.predicted_grid), _fmt_grid(c.observed_grid)),
                      _pair(str(c.predicted_working), str(c.observed_working)), *[""] * (len(cols) - 3))
    console.print(t)
    if predicted:
        console.print("predicted time (decodecalc time model): "
                      + ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in predicted.items()), highlight=False)
    if not timed and results:
        console.print("not timed (" + (results[0].timing or {}).get("note", "") + ")", highlight=False)
    ok = all(r.ok for r in results)
    console.print("[green]all launches match the prediction[/]" if ok else
                  "[bold red]mismatch or failed run: see the red cells (predicted != observed)[/]")


def _wrap(text: str, style: str) -> str:
    return f"[{style}]{text}[/]" if style else text


def _run_or_fail(inputs: Inputs, **kwargs: Any) -> None:
    """Run; a domain error becomes `Error: ...` (fail() escapes rich markup such as 'decodecalc[verify]')."""
    try:
        code = run_verify(inputs, **kwargs)
    except DecodecalcError as exc:
        fail(str(exc), exc.exit_code)
    if code:
        raise typer.Exit(code)


def run_verify_from_grid(inputs: Inputs, *, system: str | None = None, json_out: bool = False) -> None:
    """Hook for ``decodecalc grid --verify``: verify with the defaults, exit 1 on any mismatch."""
    _run_or_fail(inputs, system=system, json_out=json_out)


def register(app: typer.Typer) -> None:
    @app.command()
    @with_workload_options
    def verify(
        inputs: Inputs,
        system: VerifySystemOpt = None,
        kernels: KernelsOpt = "auto",
        vllm_src: VllmSrcOpt = None,
        sglang_src: SglangSrcOpt = None,
        json_out: JsonOpt = False,
        output: OutputOpt = None,
        time: TimeOpt = True,
        replays: ReplaysOpt = 5,
        check_seqs: CheckSeqsOpt = 4,
        seed: SeedOpt = 0,
    ) -> None:
        """Run the kernels for one decode step (GPU, or CPU with TRITON_INTERPRET=1) and compare launches,
        working programs, splits and output with decodecalc's prediction; time them on a GPU."""
        _run_or_fail(inputs, system=system, kernels=kernels, vllm_src=vllm_src, sglang_src=sglang_src,
                     json_out=json_out, output=output, timing=time, replays=replays, check_seqs=check_seqs, seed=seed)


__all__ = ["register", "run_verify", "run_verify_from_grid", "fail"]
