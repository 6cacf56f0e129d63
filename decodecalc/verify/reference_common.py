"""decodecalc's own Triton decode-attention kernels, written from the launch rules alone: what both
families share (dtypes, head sizes, a Triton helper).

Two families, each the shape of one engine's launch so that ``verify`` can check a predicted
grid with no engine installed:

* ``vllm``-style paged split-KV (:mod:`decodecalc.verify.reference_split_kv`: ``ref_split_kv`` +
  ``ref_reduce_segments``): grid ``(T // BLOCK_Q + B, h_kv[, S])``; one program packs ``g`` query
  heads x ``BLOCK_Q`` tokens into ``BLOCK_M`` rows; in the 3D form segment ``s`` of a sequence of
  length ``L`` reads tiles ``[s*tps, (s+1)*tps)`` with ``tps = cdiv(L, S*TILE)`` and returns at once
  when ``s*tps*TILE >= L``; it writes the unnormalised accumulator, the running max and the
  exp-sum, and the reduce kernel (grid ``(T, h)``) merges the live segments.
* ``sglang``-style grouped two-stage (:mod:`decodecalc.verify.reference_grouped`:
  ``ref_num_kv_splits``, ``ref_grouped_stage1``, ``ref_stage2``): per-sequence split counts from
  SGLang's rule, stage 1 on ``(B, cdiv(h, min(16, g)), max_splits)`` with split length rounded up
  to 32 tokens, empty splits storing nothing, stage 2 on ``(B, h)``.

These modules import torch and triton at import time: import them only through
:mod:`decodecalc.verify.step` (after the optional ``verify`` extra has been checked), and set
``TRITON_INTERPRET=1`` before importing them to run on the CPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl  # noqa: F401 - Triton needs triton.language visible to jit'd functions

from decodecalc.errors import UnsupportedError

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def check_head_size(head_size: int) -> None:
    if head_size < 16 or head_size > 256:
        raise UnsupportedError(
            f"the reference kernels take head sizes 16..256 (padded to a power of two); got {head_size}")


def check_dtype(dtype: torch.dtype) -> None:
    if dtype not in SUPPORTED_DTYPES:
        raise UnsupportedError(f"the reference kernels take float16, bfloat16 or float32 tensors, not {dtype}")


@triton.jit
def cdiv_jit(x, y):
    return (x + y - 1) // y
