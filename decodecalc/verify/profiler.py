"""Run the default backends' decode kernels (FlashInfer, FA3, FlashMLA) and record every launch through
the CUDA profiler (CUPTI via ``torch.profiler``): kernel name, grid, block, registers per thread,
shared memory and the profiler's occupancy estimate; time the step under CUDA graphs
(:mod:`decodecalc.verify.timing`).

Unlike Triton kernels (:mod:`decodecalc.verify.capture`), these are compiled libraries: the
launch is read back from the profiler's trace, not intercepted. torch and the backends are
imported inside functions only; importing this module is cheap.

Where the backends come from:

* ``flashinfer``, ``flashinfer-tc``: the ``flashinfer`` package (``pip install flashinfer-python``;
  it JIT-compiles its decode kernels with nvcc on first use);
* ``fa3``: vLLM's build of FlashAttention-3, ``vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so``
  (``pip install vllm``), or any file named by ``DECODECALC_FA3_LIB``;
* ``flashmla``: vLLM's build of FlashMLA, ``vllm/_flashmla_C.abi3.so``, or ``DECODECALC_FLASHMLA_LIB``;
* ``fa2``: flash-attn's ``flash_attn_2_cuda`` extension (``pip install flash-attn``), or the file named by
  ``DECODECALC_FA2_LIB`` (``benchmarks/build_fa2_h200.py`` builds a restricted one: bf16, head dim 128).

The libraries are loaded with ``torch.ops.load_library`` (their ops register themselves), so
importing the whole ``vllm`` package is not needed.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from decodecalc.errors import UnsupportedError
from decodecalc.launchers.base import LaunchPlan
from decodecalc.launchers.details import Fa3Details, TrtllmXqaDetails
from decodecalc.launchers.names import Backend
from decodecalc.launchers.registry import BACKEND_SPECS, PROFILED_BACKENDS
from decodecalc.workload import Workload

#: verify --system name -> (compare policy, what to install when it is missing): the registry's profiled backends
BACKENDS: dict[str, tuple[str, str]] = {b.value: (b.value, BACKEND_SPECS[b].install) for b in PROFILED_BACKENDS}
_LIB_FILES = {"fa3": ("DECODECALC_FA3_LIB", "vllm_flash_attn/_vllm_fa3_C.abi3.so", "_vllm_fa3_C"),
              "flashmla": ("DECODECALC_FLASHMLA_LIB", "_flashmla_C.abi3.so", "_flashmla_C")}
#: substrings of the kernel names each backend launches, by role (the capture's only name rule; the registry's
#: profiler roles)
ROLES: dict[str, dict[str, tuple[str, ...]]] = {b.value: dict(BACKEND_SPECS[b].profiler_roles) for b in PROFILED_BACKENDS}


def _lib_path(backend: str) -> Path | None:
    env, rel, _ = _LIB_FILES[backend]
    if os.environ.get(env):
        p = Path(os.environ[env])
        return p if p.is_file() else None
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        p = Path(root) / rel
        if p.is_file():
            return p
    return None


def missing_backend(backend: str) -> str | None:
    """None when the backend can run here, else the one-line reason naming the package to install."""
    if backend not in BACKENDS:
        return f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}"
    need = BACKENDS[backend][1]
    if importlib.util.find_spec("torch") is None:
        return f"--system {backend} needs torch with CUDA, and {need}"
    if backend.startswith("flashinfer") or BACKEND_SPECS[Backend(backend)].install == BACKEND_SPECS[
            Backend.FLASHINFER].install:
        return None if importlib.util.find_spec("flashinfer") is not None else f"--system {backend} needs {need}"
    if backend == "fa2":
        lib = os.environ.get("DECODECALC_FA2_LIB")
        ok = Path(lib).is_file() if lib else importlib.util.find_spec("flash_attn_2_cuda") is not None
        return None if ok else f"--system {backend} needs {need}"
    return None if _lib_path(backend) is not None else f"--system {backend} needs {need}"


def load_ops(backend: str) -> Any:
    """torch.ops namespace of a library backend (loads the shared library once)."""
    import torch

    path = _lib_path(backend)
    if path is None:
        raise UnsupportedError(f"--system {backend} needs {BACKENDS[backend][1]}")
    ns = _LIB_FILES[backend][2]
    if not hasattr(torch.ops, ns) or not list(getattr(torch.ops, ns)):
        torch.ops.load_library(str(path))
    return getattr(torch.ops, ns)


def load_fa2() -> Any:
    """flash-attn's ``flash_attn_2_cuda`` module: the file ``DECODECALC_FA2_LIB`` names (loaded with
    RTLD_LAZY, so a restricted build's missing head dims fail only when called), else the installed one."""
    import sys

    import torch  # noqa: F401  (the extension links against torch's libraries)

    if "flash_attn_2_cuda" in sys.modules:
        return sys.modules["flash_attn_2_cuda"]
    lib = os.environ.get("DECODECALC_FA2_LIB")
    if not lib:
        return importlib.import_module("flash_attn_2_cuda")
    flags = sys.getdlopenflags()
    sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_GLOBAL)
    try:
        spec = importlib.util.spec_from_file_location("flash_attn_2_cuda", lib)
        if spec is None or spec.loader is None:
            raise UnsupportedError(f"DECODECALC_FA2_LIB={lib} is not a Python extension module")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.setdlopenflags(flags)
    sys.modules["flash_attn_2_cuda"] = mod
    return mod


# ------------------------------------------------------------------------------------------
# the profiler's record


@dataclass
class ProfiledLaunch:
    """One kernel launch as CUPTI saw it."""

    name: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    registers_per_thread: int | None
    shared_memory_bytes: int | None
    est_occupancy_pct: float | None
    duration_us: float | None
    role: str = "other"

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["grid"], d["block"] = list(self.grid), list(self.block)
        return d


def _triple(v: Any) -> tuple[int, ...]:
    if not isinstance(v, (list, tuple)):
        return ()
    return tuple(int(x) for x in v)


def role_of(backend: str, name: str) -> str:
    for role, keys in ROLES.get(backend, {}).items():
        if any(k in name for k in keys):
            return role
    return "other"


def profile_launches(fn: Callable[[], Any], backend: str) -> list[ProfiledLaunch]:
    """Run ``fn`` once under torch.profiler (CUDA activity only) and read every kernel from its trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as fh:
            trace = json.load(fh)
    events = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]
    events.sort(key=lambda e: float(e.get("ts", 0)))
    out = []
    for e in events:
        a = e.get("args", {})
        occ = a.get("est. achieved occupancy %")
        out.append(ProfiledLaunch(
            name=str(e.get("name", "")), grid=_triple(a.get("grid")), block=_triple(a.get("block")),
            registers_per_thread=a.get("registers per thread"), shared_memory_bytes=a.get("shared memory"),
            est_occupancy_pct=float(occ) if occ is not None else None,
            duration_us=float(e["dur"]) if "dur" in e else None, role=role_of(backend, str(e.get("name", "")))))
    return out


def ctas_per_sm(threads: int, registers_per_thread: int, smem_bytes: int, *, max_threads: int = 2048,
                max_ctas: int = 32, smem_sm: int = 228 * 1024, regs_sm: int = 65536) -> int:
    """CTAs/SM that cudaOccupancyMaxActiveBlocksPerMultiprocessor reports on SM90 for a kernel with these
    resources (registers allocated per warp in 256-register units, warps of a CTA counted in groups of 4
    for the register file - seen on the H200 for 96-thread CTAs; 1 KiB shared memory reserved per CTA)."""
    warps = math.ceil(threads / 32)
    regs_warp = math.ceil(max(registers_per_thread, 1) * 32 / 256) * 256
    by_regs = (regs_sm // regs_warp) // (math.ceil(warps / 4) * 4)
    by_smem = smem_sm // (smem_bytes + 1024) if smem_bytes else max_ctas
    return max(0, min(max_ctas, max_threads // (warps * 32), by_regs, by_smem))


# ------------------------------------------------------------------------------------------
# comparison with the model


def read_capture_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of a capture JSONL file (one JSON object per line), plain or gzip-compressed (``.gz``: the
    larger result files are committed compressed)."""
    import gzip

    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _strip(grid: tuple[int, ...]) -> tuple[int, ...]:
    g = list(grid)
    while len(g) > 1 and g[-1] == 1:
        g.pop()
    return tuple(g)


def compare_launches(plan: Any, launches: list[ProfiledLaunch]) -> dict[str, Any]:
    """Main and merge kernels of the predicted :class:`LaunchPlan` against the profiled roles, by grid."""
    got = {r: [x for x in launches if x.role == r] for r in ("main", "merge")}
    rows: list[dict[str, Any]] = []
    ok = True
    for role, k in (("main", plan.main), ("merge", plan.merge)):
        meas = got[role]
        if k is None:
            match = not meas
            rows.append({"role": role, "predicted": None, "measured": [list(x.grid) for x in meas], "match": match})
        else:
            mg = _strip(meas[0].grid) if meas else None
            match = mg == _strip(tuple(k.grid))
            rows.append({"role": role, "predicted": list(k.grid), "measured": list(mg) if mg else None,
                         "kernel": k.name, "match": match})
        ok = ok and match
    return {"match": ok, "kernels": rows}


def fa3_measured_splits(readback: dict[str, Any] | None, plan: LaunchPlan) -> tuple[int, ...] | None:
    """The per-request split counts FA3's prepare kernel wrote into the scheduler metadata the run read back, when the
    plan splits dynamically (``dynamic_splits``), else None (launchers.flash_attn3.metadata_num_splits reads them)."""
    from decodecalc.launchers.flash_attn3 import metadata_num_splits

    md = (readback or {}).get("scheduler_metadata")
    if not (isinstance(plan.details, Fa3Details) and plan.details.dynamic_splits) or not isinstance(md, list):
        return None
    return metadata_num_splits(md, len(plan.splits))


def fa3_splits_check(plan: Any, readback: dict[str, Any] | None) -> dict[str, Any] | None:
    """FA3's predicted per-request split counts against the ones its prepare kernel computed (None when the run
    did not split dynamically or read nothing back): the grid is persistent (one CTA per SM), so the splits are
    what tells a right launch from a wrong one."""
    got = fa3_measured_splits(readback, plan)
    if got is None:
        return None
    pred = tuple(plan.splits)
    return {"predicted": list(pred), "measured": list(got), "match": pred == got}


def knob_plan(backend: str, w: Workload, gpu: Any, knobs: dict[str, Any]) -> Any:
    """The launcher's plan for an explicit split setting (eager plan): FlashInfer tensor cores'
    fixed_split_size / disable_split_kv, FA3's and FA2's num_splits."""
    from decodecalc.launchers import flash_attn2, flash_attn3, flashinfer, trtllm, xqa

    if backend == "flashinfer-tc":
        return flashinfer.plan_flashinfer_tc(w, gpu, fixed_split_size=knobs.get("fixed_split_size"),
                                             disable_split_kv=bool(knobs.get("disable_split_kv", False)))
    if backend == "fa3":
        return flash_attn3.plan_flash_attn3(w, gpu, num_splits=int(knobs.get("num_splits", 0)))
    if backend == "fa2":
        return flash_attn2.plan_flash_attn2(w, gpu, num_splits=int(knobs.get("num_splits", 0)))
    if backend in ("xqa", "xqa-fp8"):
        return xqa.plan_xqa(w, gpu, max_seq_len=int(knobs.get("max_seq_len") or w.max_seqlen_k),
                            sm_count=knobs.get("sm_count"), kernel="sm90" if backend == "xqa-fp8" else "mha")
    if backend == "trtllm-xqa":  # TensorRT-LLM's count, run as FlashInfer's launcher with the SM count that gives it
        return trtllm.plan_trtllm_xqa(w, gpu)
    raise UnsupportedError(f"{backend}: no split setting to sweep")


def trtllm_xqa_knobs(w: Workload, gpu: Any) -> dict[str, Any]:
    """How FlashInfer's XQA launcher runs TensorRT-LLM's multi-block count ``m`` (launchers/trtllm.py): the SM count
    ``m * B * Hkv`` (mha.cu takes min(max(1, SMs // (B * Hkv)), ceil(maxSeqLen / 256))) and a table wide enough that
    the second term does not cut it. ``XQA_NB_SUB_SEQ`` cannot do this: FlashInfer's launchers do not read it."""
    from decodecalc.launchers import trtllm

    plan = trtllm.plan_trtllm_xqa(w, gpu)
    m = plan.details_as(TrtllmXqaDetails).multi_block
    return {"sm_count": m * w.batch * w.num_kv_heads, "max_seq_len": max(m * 256, w.max_seqlen_k)}


def default_result(backend: str, w: Workload, gpu: Any, *, cuda_graph: bool, occupancy: int | None = None) -> Any:
    """The compare report's evaluation of this backend with the run's options (vLLM's settings under CUDA graphs:
    FA3's 32 splits)."""
    from decodecalc.launchers.registry import PolicyOptions
    from decodecalc.reports.compare import evaluate

    return evaluate(BACKENDS[backend][0], w, gpu,
                    PolicyOptions(vllm=_vllm_settings(cuda_graph), flashinfer_occupancy=occupancy))


def predict_and_compare(backend: str, w: Workload, gpu: Any, launches: list[ProfiledLaunch], *,
                        cuda_graph: bool, occupancy: int | None = None, result: Any = None) -> dict[str, Any]:
    """The compare report's row for this backend (same options as the run; ``result``: that evaluation, when the
    caller has it) and the launch comparison."""
    res = result if result is not None else default_result(backend, w, gpu, cuda_graph=cuda_graph, occupancy=occupancy)
    if res.plan is None:
        return {"prediction": {"applicable": False, "reason": res.reason}, "match": None}
    return {"prediction": res.to_json(), **compare_launches(res.plan, launches)}


def fa3_default_plan(w: Workload, gpu: Any, cuda_graph: bool) -> Any:
    """The plan compare evaluates for FA3 with the run's CUDA-graph setting (vLLM's 32 splits under graphs)."""
    return default_result("fa3", w, gpu, cuda_graph=cuda_graph).plan


def _vllm_settings(cuda_graph: bool) -> Any:
    import dataclasses

    from decodecalc.launchers.vllm_unified import VllmSettings

    s = VllmSettings()
    return dataclasses.replace(s, cudagraph_mode="FULL_AND_PIECEWISE" if cuda_graph else "NONE")
