"""Which kernels an engine's named attention backend runs for a workload on a GPU.

An engine's backend is not one kernel: vLLM's FLASHINFER backend decodes with FlashInfer's XQA on SM90 and SM12x and
with trtllm-gen on SM100 "whenever supported", and with the tensor-core wrapper otherwise; SGLang's ``flashinfer``
backend picks the wrapper's CUDA-core or tensor-core path by the group size. This module mirrors those rules; which
backend an engine picks by default is :mod:`decodecalc.launchers.engine_defaults`.
"""

from __future__ import annotations

from decodecalc.errors import UnsupportedError
from decodecalc.launchers import flashinfer, xqa
from decodecalc.launchers.names import Backend, Engine
from decodecalc.launchers.registry import BACKEND_SPECS, PolicyOptions, platform_reason
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

#: the engines' own names for their backends, as a user reads them
_LABELS = {"FLASH_ATTN": "FlashAttention-3", "fa3": "FlashAttention-3", "FLASHINFER": "FlashInfer",
           "flashinfer": "FlashInfer", "TRITON_ATTN": "Triton", "triton": "Triton", "FLASHMLA": "FlashMLA",
           "flashmla": "FlashMLA", "trtllm_mha": "TRT-LLM MHA (XQA / trtllm-gen)", "ROCM_ATTN": "ROCm attention",
           "aiter": "aiter", "xqa": "XQA multi-block", "mmha": "masked MHA multi-block"}


def label(engine: Engine, name: str) -> str:
    """What a user calls the engine's backend ``name``."""
    return _LABELS.get(name, name)


def _named(engine: Engine, name: str) -> list[Backend]:
    return [b for b, s in BACKEND_SPECS.items() if any(u.engine is engine and u.name == name for u in s.engines)]


def kernel_for(engine: Engine, name: str, w: Workload, gpu: GPUSpec, opts: PolicyOptions | None = None) -> Backend:
    """The registered backend whose kernels ``engine``'s backend ``name`` runs for ``w`` on ``gpu``; an
    UnsupportedError says why it cannot run here."""
    opts = opts or PolicyOptions()
    choices = _named(engine, name)
    if not choices:
        raise UnsupportedError(f"{engine.display_name} has no attention backend {name!r} modeled")
    if name in ("FLASHINFER", "flashinfer", "trtllm_mha"):
        return _flashinfer_kernel(engine, name, w, gpu, opts)
    b = choices[0]
    why = platform_reason(BACKEND_SPECS[b], gpu)
    if why:
        raise UnsupportedError(why)
    return b


V33 = "vllm 0.33.0"
SRC_VLLM_FI = f"{V33} vllm/v1/attention/backends/flashinfer.py"
SRC_VLLM_FI_UTILS = f"{V33} vllm/utils/flashinfer.py"
SRC_SGLANG_TRTLLM = "sglang 0.5.23 python/sglang/srt/layers/attention/trtllm_mha_backend.py"


def vllm_trtllm_decode_reason(w: Workload, gpu: GPUSpec, opts: PolicyOptions) -> str | None:
    """Why vLLM's FlashInfer backend does not decode with XQA / trtllm-gen (None: it does), 0.33.0 and 0.34.0 alike:
    ``can_use_trtllm_attention`` (utils/flashinfer.py L713-721) over ``supports_trtllm_attention`` (L675-697), then
    the builder's XQA head-dim check (flashinfer.py L761-762, L1018-1029)."""
    cc = gpu.compute_capability or (0, 0)
    if opts.use_trtllm_attention is False:
        return f"--attention-config.use_trtllm_attention=false ({SRC_VLLM_FI_UTILS} L700-721)"
    if opts.batch_invariant:
        return f"VLLM_BATCH_INVARIANT ({SRC_VLLM_FI_UTILS} L683)"
    if not opts.cubins:
        return f"no XQA / trtllm-gen cubins (--cubins no: flashinfer-cubin not installed, NVIDIA's cubin repository " \
               f"unreachable; {SRC_VLLM_FI_UTILS} L647, L687)"
    if not (cc == (9, 0) or cc[0] in (10, 12)):
        return f"{gpu.name} ({gpu.arch}) is neither SM 9.0, 10.x nor 12.x ({SRC_VLLM_FI_UTILS} L691-697)"
    if w.num_heads % w.num_kv_heads:
        return f"query heads {w.num_heads} not a multiple of KV heads {w.num_kv_heads} ({SRC_VLLM_FI_UTILS} L721)"
    if cc[0] != 10 and (w.head_size % 16 or not 16 <= w.head_size <= 256):
        return f"XQA needs a head dim in 16-256, a multiple of 16; got {w.head_size} ({SRC_VLLM_FI} L761-762)"
    return None


def _flashinfer_kernel(engine: Engine, name: str, w: Workload, gpu: GPUSpec, opts: PolicyOptions) -> Backend:
    """vLLM's FLASHINFER decode: XQA on SM 9.0 / 12.x, trtllm-gen on SM 10.x "whenever supported"
    (flashinfer.py L993-1056, ``_get_flashinfer_trtllm_api_decode_kernel`` L1302-1308), else the tensor-core wrapper;
    SGLang's ``flashinfer``: the wrapper's CUDA-core or tensor-core path by its group-size rule; SGLang's ``trtllm_mha``:
    XQA on SM90 / SM120, trtllm-gen on SM100 (trtllm_mha_backend.py L10, L258)."""
    if gpu.vendor != "nvidia":
        raise UnsupportedError(f"{label(engine, name)} runs on NVIDIA GPUs only; {gpu.name} is {gpu.vendor}")
    cc = gpu.compute_capability or (0, 0)
    trtllm = False
    if engine is Engine.VLLM:
        trtllm = vllm_trtllm_decode_reason(w, gpu, opts) is None
    elif name == "trtllm_mha":
        if cc[0] not in (9, 10, 12):
            raise UnsupportedError(f"SGLang's trtllm_mha runs on SM90, SM100 and SM120 only; {gpu.name} is "
                                   f"{gpu.arch} (sglang 0.5.23 srt/arg_groups/attention_hook.py L197-236)")
        trtllm = True
    if trtllm:
        if cc[0] == 10:
            return Backend.TRTLLM_GEN
        why = xqa.unsupported_reason(w, gpu)
        if why:
            raise UnsupportedError(f"{label(engine, name)} decodes with XQA here, and {why}")
        return Backend.XQA_FP8 if xqa.uses_sm90_kernel(w, gpu) else Backend.XQA
    return Backend.FLASHINFER_TC if flashinfer.engine_uses_tensor_cores(engine.value, w) else Backend.FLASHINFER


__all__ = ["kernel_for", "label", "vllm_trtllm_decode_reason"]
