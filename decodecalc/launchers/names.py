"""The names of the serving engines and of the decode-attention backends decodecalc models.

Each :class:`Backend` is one modeled launch (one module in ``launchers/``); its value is the name the CLI takes
(``compare -p``, ``verify --system``, ``recommend --kernel``). What each backend is, who runs it and how it is timed
is registered once, in :data:`decodecalc.launchers.registry.BACKEND_SPECS`.
"""

from __future__ import annotations

from enum import StrEnum


class Engine(StrEnum):
    """A serving engine whose launch decisions decodecalc models."""

    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"

    @property
    def display_name(self) -> str:
        """The engine's name as its project writes it."""
        return {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}[self.value]


class Backend(StrEnum):
    """A modeled decode-attention launch: an engine's Triton kernel or a compiled backend's kernels."""

    VLLM = "vllm"  # vLLM's Triton unified attention (TRITON_ATTN)
    SGLANG = "sglang"  # SGLang's Triton decode (--attention-backend triton)
    VLLM_PAGED = "vllm-paged"
    VLLM_ROCM = "vllm-rocm"
    FA2 = "fa2"
    FA3 = "fa3"
    FLASHINFER = "flashinfer"  # FlashInfer's CUDA-core decode
    FLASHINFER_TC = "flashinfer-tc"  # FlashInfer's tensor-core decode (the prefill kernel)
    XQA = "xqa"  # FlashInfer's XQA, mha.cu (bf16 / fp16 KV cache)
    XQA_FP8 = "xqa-fp8"  # FlashInfer's XQA, mha_sm90.cu (fp8 e4m3 KV cache on SM90)
    TRTLLM_GEN = "trtllm-gen"  # FlashInfer's trtllm-gen FMHA (SM100), multi-CTA KV mode
    TRTLLM_XQA = "trtllm-xqa"  # TensorRT-LLM's XQA with its multi-block count
    TRTLLM_MMHA = "trtllm-mmha"  # TensorRT-LLM's masked MHA with its multi-block grid
    AITER = "aiter"
    FLASHMLA = "flashmla"
    TRITON_MLA = "triton-mla"  # vLLM's TRITON_MLA decode
    FLASHDECODING = "flashdecoding"  # the chapter's FlashDecoding at S*


__all__ = ["Backend", "Engine"]
