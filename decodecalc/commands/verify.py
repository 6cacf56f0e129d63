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
from decodecalc.launchers.registry import PROFILED_BACKENDS

KERNELS = ("auto", "upstream", "reference", "both")
#: backends verify captures through the CUDA profiler (launchers/registry.py: those with profiler roles)
PROFILED = tuple(b.value for b in PROFILED_BACKENDS)

# (an Enum made from a computed table of members, which mypy cannot read)
VerifySystem = Enum("VerifySystem", {n: n for n in ("vllm", "sglang") + PROFILED}, type=str)  # type: ignore[misc]
VerifySystemOpt = Annotated[Optional[VerifySystem], typer.Option(
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

    from decodecalc.render import verify as render
    from decodecalc.reports.grid import grid_report
    from decodecalc.verify.calls import engine_call
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
    err = render.stderr()
    env = detect_environment()
    work, gpu = inputs.work, inputs.gpu
    check_workload(work)
    if env.device == "cuda" and env.sm_count and env.sm_count != gpu.num_sms:
        render.print_warning(err, f"local GPU {env.gpu_name} has {env.sm_count} SMs, --gpu {gpu.name} "
                             f"{gpu.num_sms}; predicting for the local count")
        gpu = dataclasses.replace(gpu, num_sms=env.sm_count)
    if env.device == "cuda" and gpu.name.split("-")[0] not in env.gpu_name.lower():
        render.print_warning(err, f"running on {env.gpu_name} but --gpu is {gpu.name}: bandwidth, roofline "
                             "and predicted times use the --gpu figures")
        env.warnings.append(f"local GPU {env.gpu_name}, --gpu {gpu.name}")
    if env.interpret and sum(work.seq_lens) * work.num_kv_heads > 200_000:
        render.print_warning(err, "the Triton interpreter is slow: use tiny shapes (a few hundred tokens)")

    # which kernels run, and the versions of the upstream sources, before anything runs
    srcs = {"vllm": vllm_src, "sglang": sglang_src}
    sources, fallback, warned = _choose_kernels(systems, mode, srcs, env)
    for w in warned:
        env.warnings.append(w)
        render.print_warning(err, w)
    for s, why in fallback.items():
        render.print_fallback(err, s, why)
    if "upstream" in sources.get("vllm", ()) and inputs.vllm.version != EXPECTED_VERSIONS["vllm"]:
        msg = (f"--vllm-version {inputs.vllm.version} is modeled, but the kernels that run are vLLM "
               f"{env.versions.get('vllm', '?').split(' ')[0]}")
        env.warnings.append(msg)
        render.print_warning(err, msg)

    report = grid_report(work, gpu, systems=systems, vllm=inputs.vllm, sglang=inputs.sglang,
                         kernel_block_size=inputs.kernel_block_size, layer=inputs.layer)
    calls = []
    skipped = {}
    for sr in report.systems:
        if sr.error or sr.model is None:
            skipped[sr.name] = sr.error or "no model"
            continue
        calls.append(engine_call(sr.name, sr.model, gpu))
    if not calls:
        raise UnsupportedError("; ".join(f"{k}: {v}" for k, v in skipped.items()) or "nothing to run")
    for name, why in skipped.items():
        render.print_skipped(err, name, why)

    results: list[Any] = []
    kernels_doc: dict[str, Any] = {"mode": mode, "ran": {c.system: list(sources[c.system]) for c in calls},
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
        with render.progress_bar(err, total, disable=json_out and output is None) as update:
            wr = verify_workload(work, calls, env, sources=sources, vllm_src=_str(vllm_src),
                                 sglang_src=_str(sglang_src), timing=timing, check_seqs=check_seqs, seed=seed,
                                 bandwidth=gpu.hbm_bandwidth_bytes_per_s, replays=replays,
                                 progress=lambda label: update(label, len(results)), results=results)
    except CudaFault as exc:
        save()
        render.print_verify(results, work, env, ran=kernels_doc["ran"], fallback=kernels_doc["fallback"])
        raise DecodecalcError(f"{exc}; partial results{' in ' + str(output) if output else ''}") from None
    except DecodecalcError:
        save()
        raise
    except KeyboardInterrupt:
        save()
        raise
    doc["notes"] = wr.notes if wr else []
    doc["predicted_time_s"] = _predicted_times(report)
    doc["ok"] = all(r.ok for r in results)
    doc["complete"] = True
    save()
    if json_out:
        typer.echo(to_json(doc))
    else:
        render.print_verify(results, work, env, ran=kernels_doc["ran"], fallback=kernels_doc["fallback"],
                            notes=doc["notes"], predicted=doc["predicted_time_s"])
    return 0 if doc["ok"] else 1


def _run_profiled(backend: str, inputs: Inputs, *, json_out: bool, output: Path | None, timing: bool,
                  replays: int) -> int:
    """``--system flashinfer|fa3|...``: one capture through the CUDA profiler (decodecalc.verify.profiler),
    compared with compare's row for that backend."""
    from decodecalc.render.verify import print_profiled
    from decodecalc.verify.environment import detect_environment
    from decodecalc.verify.backend_steps import run_case
    from decodecalc.verify.profiler import missing_backend
    from decodecalc.verify.results import workload_json

    why = missing_backend(backend)
    if why:
        raise UnsupportedError(why)
    from decodecalc.verify.profiler import default_result

    planned = default_result(backend, inputs.work, inputs.gpu, cuda_graph=False)
    if planned.plan is None:  # the backend cannot run this workload: say why (with the rule's source), run nothing
        raise UnsupportedError(f"--system {backend}: {planned.reason}")
    env = detect_environment()
    if env.device != "cuda":
        raise UnsupportedError(f"--system {backend} runs on a CUDA GPU only (its launches are read from the CUDA "
                               "profiler); under TRITON_INTERPRET=1 verify runs vllm and sglang")
    knobs = None
    if backend in ("xqa", "xqa-fp8") and inputs.max_model_len is not None:  # the block table --max-model-len sizes
        from decodecalc.launchers.xqa import default_max_seq_len

        knobs = {"max_seq_len": default_max_seq_len(inputs.work, inputs.max_model_len)}
    rec = run_case(backend, inputs.work, inputs.gpu, time_it=timing, replays=replays, knobs=knobs)
    doc: dict[str, Any] = {"environment": env.to_json(), "workload": workload_json(inputs.work),
           "kernels": {"mode": "profiled", "ran": {backend: ["upstream"]}, "fallback": {}},
           "profiled": rec, "ok": bool(rec.get("match")), "complete": True}
    if output is not None:
        write_atomic(output, to_json(doc) + "\n")
    if json_out:
        typer.echo(to_json(doc))
    else:
        print_profiled(backend, env, rec, doc["ok"])
    return 0 if doc["ok"] else 1


def _str(p: Path | None) -> str | None:
    return None if p is None else str(p)


def _predicted_times(report: Any) -> dict[str, float]:
    """decodecalc's time-model prediction per system, as the grid report already attached it."""
    return {s.name: s.prediction.time_s for s in report.systems
            if not s.error and s.prediction is not None and s.prediction.time_s is not None}


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
