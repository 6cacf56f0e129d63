"""Run decode-attention kernels for a Workload and compare what they did with the prediction.

For one workload: build a random paged KV cache (several disjoint copies when timing, so L2
cannot hold it), block tables, queries (:mod:`decodecalc.verify.tensors`); then, for every
(system, kernel source) asked for (:mod:`decodecalc.verify.step`):

1. fill the outputs and the split scratch with NaN (and SGLang's split counts with -1), run
   the kernels once under :class:`decodecalc.verify.capture.LaunchRecorder`, and count the
   programs that did work from the rows they wrote;
2. compare the output with a float32 torch reference (a few sequences of large batches);
3. time the step (:mod:`decodecalc.verify.timing`) on a GPU;
4. compare kernel names' roles, grids, working programs and per-sequence split counts with
   the predicted :class:`~decodecalc.launchers.base.LaunchPlan` (:mod:`decodecalc.verify.results`).

torch and triton are imported inside functions only; importing this module is cheap.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from decodecalc.errors import DecodecalcError
from decodecalc.verify.calls import EngineCall
from decodecalc.verify.environment import Environment, check_workload, run_dtype
from decodecalc.verify.kv_cache import kv_bytes
from decodecalc.verify.results import LaunchCheck, RunResult, WorkloadResult, workload_json
from decodecalc.verify.tensors import StepTensors, build_step_tensors, oom_as_error, pick_check_seqs
from decodecalc.workload import Workload

__all__ = ["CudaFault", "SOURCES", "verify_workload"]

SOURCES = ("upstream", "reference")
#: kernels that compute metadata, not attention: not part of a LaunchPlan's kernels
AUX_KERNELS = {"get_num_kv_splits_triton", "ref_num_kv_splits"}
ROLE_NAMES = {
    "kernel_unified_attention": "kernel_unified_attention",
    "ref_split_kv": "kernel_unified_attention",
    "reduce_segments": "reduce_segments",
    "ref_reduce_segments": "reduce_segments",
    "_fwd_grouped_kernel_stage1": "_fwd_grouped_kernel_stage1",
    "_fwd_kernel_stage1": "_fwd_kernel_stage1",
    "ref_grouped_stage1": "_fwd_grouped_kernel_stage1",
    "_fwd_kernel_stage2": "_fwd_kernel_stage2",
    "ref_stage2": "_fwd_kernel_stage2",
}
#: bf16 tolerance: max |err| relative to the output's largest magnitude (fp16 / fp32 are tighter)
TOLERANCE = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-3}
#: constexprs kept in a run's JSON
SHOWN_CONSTEXPRS = ("BLOCK_M", "BLOCK_Q", "TILE_SIZE", "NUM_SEGMENTS_PER_SEQ", "NUM_SEGMENTS", "IS_3D", "BLOCK_N",
                    "BLOCK_H", "MAX_KV_SPLITS", "MAX_SPLITS", "BLOCK_SIZE")


class CudaFault(DecodecalcError):
    """A kernel faulted (illegal address, ...): the CUDA context is unusable for the rest of the process."""

    def __init__(self, message: str, partial: WorkloadResult) -> None:
        super().__init__(f"CUDA fault, stopping: {message}")
        self.partial = partial


def is_cuda_fault(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return "AcceleratorError" in text or "CUDA error" in text or "illegal memory access" in text


def verify_workload(
    work: Workload,
    calls: list[EngineCall],
    env: Environment,
    *,
    sources: tuple[str, ...] | Mapping[str, tuple[str, ...]] = SOURCES,
    vllm_src: str | None = None,
    sglang_src: str | None = None,
    timing: bool = True,
    check_seqs: int = 4,
    seed: int = 0,
    bandwidth: float | None = None,
    rotate_bytes: int | None = None,
    replays: int = 5,
    progress: Callable[[str], None] | None = None,
    results: list[RunResult] | None = None,
) -> WorkloadResult:
    """Run every (call, source) for one workload: ``sources`` for every system, or per system.
    Appends each finished run to ``results`` too (so a caller can save partial results when a
    later run fails)."""
    import torch

    from decodecalc.verify import timing as tm
    from decodecalc.verify.torch_ref import reference_attention

    check_workload(work)
    notes: list[str] = []
    runs: list[RunResult] = []
    from decodecalc.verify.step import step_padding

    elt = torch.tensor([], dtype=run_dtype(work.dtype, env)[0]).element_size()
    copies = 1
    if timing and env.device == "cuda":
        copies = tm.copies_for(kv_bytes(work.seq_lens, work.num_kv_heads, work.head_size, elt),
                               rotate_bytes=rotate_bytes or tm.ROTATE_BYTES)
    inp, note = build_step_tensors(work, env, copies=copies, seed=seed, **step_padding(calls))
    if note:
        notes.append(note)
    checked = pick_check_seqs(work, check_seqs)
    with oom_as_error("computing the float32 reference"):
        ref = reference_attention(inp.q, inp.k_cache, inp.v_cache, inp.block_tables[0], list(work.seq_lens),
                                  list(work.query_lens), inp.scale, seqs=checked)
    tol = TOLERANCE.get(str(inp.dtype).replace("torch.", ""), 2e-2)
    for call in calls:
        for source in (sources.get(call.system, ()) if isinstance(sources, Mapping) else sources):
            if progress:
                progress(f"{call.system} {source}")
            res = RunResult(system=call.system, source=source, version="")
            try:
                _run_one(work, inp, call, source, env, res, ref, tol, timing=timing, vllm_src=vllm_src,
                         sglang_src=sglang_src, bandwidth=bandwidth, replays=replays)
            except DecodecalcError as exc:
                res.status, res.message = "error", str(exc)
            except torch.cuda.OutOfMemoryError as exc:
                torch.cuda.empty_cache()
                res.status, res.message = "error", f"out of GPU memory: {str(exc).splitlines()[0]}"
            except Exception as exc:  # an upstream kernel failing to compile/run is a result, not a crash
                if is_cuda_fault(exc):  # the context is lost: nothing after this can run in this process
                    res.status, res.message = "error", f"CUDA fault: {str(exc).splitlines()[0]}"
                    runs.append(res)
                    if results is not None:
                        results.append(res)
                    raise CudaFault(str(exc).splitlines()[0], WorkloadResult(workload_json(work), runs, notes)) from None
                res.status, res.message = "error", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            runs.append(res)
            if results is not None:
                results.append(res)
    del inp
    if env.device == "cuda":
        torch.cuda.empty_cache()
    return WorkloadResult(workload_json(work), runs, notes)


def _run_one(work: Workload, inp: StepTensors, call: EngineCall, source: str, env: Environment, res: RunResult,
             ref: dict[int, Any], tol: float, *, timing: bool, vllm_src: str | None, sglang_src: str | None,
             bandwidth: float | None, replays: int) -> None:
    import torch

    from decodecalc.verify import timing as tm
    from decodecalc.verify.capture import LaunchRecorder
    from decodecalc.verify.step import make_step
    from decodecalc.verify.torch_ref import compare

    r = make_step(work, inp, call, source, env, {"vllm": vllm_src, "sglang": sglang_src})
    res.version = r.version
    if call.pad_reqs > work.batch:
        res.padded = r.padded()
    r.fill_sentinels()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning)  # interpreter: NaN arithmetic in masked rows
        with LaunchRecorder(execute=True) as rec:
            r.step(0)
        if env.device == "cuda":
            torch.cuda.synchronize()
    aux = [la for la in rec.launches if la.name in AUX_KERNELS]
    attn = [la for la in rec.launches if la.name not in AUX_KERNELS]
    res.aux_launches = [{"kernel": la.name, "grid": list(la.grid)} for la in aux]
    working, allocated, written = r.count(attn)
    r.note_aux(res.aux_launches)
    plan = call.plan
    n = max(len(plan.kernels), len(attn))
    for i in range(n):
        pk = plan.kernels[i] if i < len(plan.kernels) else None
        ol = attn[i] if i < len(attn) else None
        res.launches.append(LaunchCheck(
            role=ROLE_NAMES.get(ol.name, ol.name) if ol else (pk.name if pk else "?"),
            kernel=ol.name if ol else "(not launched)",
            predicted_grid=list(pk.grid) if pk else None,
            observed_grid=list(ol.grid) if ol else None,
            predicted_working=pk.working_programs if pk else None,
            observed_working=working[i] if ol and i < len(working) else None,
            programs=math.prod(ol.grid) if ol else 0,
            constexprs={k: v for k, v in (ol.constexprs if ol else {}).items() if k in SHOWN_CONSTEXPRS},
        ))
    res.splits_predicted = list(plan.splits)
    res.nonempty_predicted = list(plan.nonempty_splits)
    res.splits_observed = allocated
    res.nonempty_observed = written
    err = compare(r.out[:inp.t_real], ref, list(work.query_lens))
    err["tolerance"] = tol
    err["ok"] = err["nan_count"] == 0 and err["max_err_vs_max"] <= tol
    res.error = err
    res.kv_bytes = inp.kv_bytes
    if bandwidth:
        res.roofline_us = inp.kv_bytes / bandwidth * 1e6
    if timing and env.device == "cuda":
        t = tm.time_calls(r.step, inp.copies, replays=replays)
        res.timing = t.to_json()
        if t.t_us:
            res.gbps = inp.kv_bytes / (t.t_us * 1e-6) / 1e9
            if bandwidth:
                res.bandwidth_fraction = res.gbps * 1e9 / bandwidth
    else:
        res.timing = tm.not_timed("interpreter: not timed" if env.interpret else "timing off").to_json()
    res.finish()
