"""Where verify runs (a CUDA GPU, or the CPU through Triton's interpreter), in which dtype, and which
workloads it can run.  Imports torch and triton inside functions only."""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from decodecalc.errors import DecodecalcError, UnsupportedError
from decodecalc.extras import install_hint
from decodecalc.workload import Workload

__all__ = ["Environment", "check_workload", "detect_environment", "run_dtype"]


@dataclass
class Environment:
    device: str  # "cuda" | "cpu"
    interpret: bool
    torch: str
    triton: str
    gpu_name: str = ""
    sm_count: int = 0
    capability: tuple[int, int] | None = None
    total_mem_gib: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def detect_environment() -> Environment:
    """torch/triton present, and a CUDA GPU or TRITON_INTERPRET=1; else a DecodecalcError."""
    from decodecalc.verify import missing_requirements

    missing = missing_requirements()
    if missing:
        raise DecodecalcError(
            f"{' and '.join(missing)} not installed; verify needs torch and triton: {install_hint('verify')} "
            "(on a CPU-only machine install torch==2.13.0 first)")
    interpret = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    import torch

    triton_version = _triton_version()
    if interpret:
        return Environment(device="cpu", interpret=True, torch=torch.__version__, triton=triton_version)
    if not torch.cuda.is_available():
        raise DecodecalcError(
            "no CUDA GPU visible and TRITON_INTERPRET is not set: run on a GPU, or set TRITON_INTERPRET=1 "
            "to run tiny shapes on the CPU through Triton's interpreter")
    props = torch.cuda.get_device_properties(0)
    return Environment(
        device="cuda", interpret=False, torch=torch.__version__, triton=triton_version, gpu_name=props.name,
        sm_count=props.multi_processor_count, capability=(props.major, props.minor),
        total_mem_gib=round(props.total_memory / 2**30, 1),
    )


def _triton_version() -> str:
    """triton's version without importing it: the first import fixes the interpreter mode for the process."""
    for dist in ("triton", "pytorch-triton", "pytorch-triton-rocm", "triton-rocm"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def run_dtype(name: str, env: Environment) -> tuple[Any, str]:
    """The torch dtype a workload of dtype ``name`` runs in here, and a note when it had to change
    (interpreter: bf16 -> fp16)."""
    import torch

    table = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if name not in table:
        raise UnsupportedError(f"verify runs bfloat16, float16 or float32 KV caches, not {name}")
    if env.interpret and name == "bfloat16":
        return torch.float16, "interpreter: bfloat16 run as float16 (its bf16 tl.dot is wrong)"
    return table[name], ""


def check_workload(work: Workload) -> None:
    if work.kv_cache_dtype != work.dtype:
        raise UnsupportedError(
            f"verify builds the KV cache in the model dtype; --kv-cache-dtype {work.kv_cache_dtype} "
            f"(with --dtype {work.dtype}) is not supported")
    if work.model.is_mla or work.head_size != work.head_size_v:
        raise UnsupportedError(f"{work.model.name}: verify covers MHA/GQA with equal K/V head sizes only")
    if work.head_size < 32 or work.head_size > 256:
        raise UnsupportedError(f"head size {work.head_size}: verify's kernels take 32..256")
