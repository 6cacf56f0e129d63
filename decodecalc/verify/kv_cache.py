"""The paged KV cache the kernels run on: random K and V blocks, one block table per copy (vLLM's
layout) and the same blocks as token slots (SGLang's ``kv_indices``).

Several disjoint copies of the cache can be built so that a timed loop cycles over more bytes than
L2 holds (:mod:`decodecalc.verify.timing`).  Block 0 is left unused (vLLM's null block); zero table
rows and zero slot indices point at it.  Random data, never zeros (the device library's METHOD.md).
Used by ``verify`` (:mod:`decodecalc.verify.tensors`), ``calibrate`` (:mod:`decodecalc.verify.calibration`)
and ``benchmarks/measure_splits_h200.py``.  Imports torch inside functions only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from decodecalc.derived import cdiv
from decodecalc.errors import DecodecalcError

__all__ = ["PagedKV", "build_paged_kv", "copies_that_fit", "kv_bytes", "prefix_view"]


def kv_bytes(seq_lens: tuple[int, ...] | list[int], num_kv_heads: int, head_size: int, element_bytes: int) -> int:
    """Bytes of K and V one decode step reads: every token of every sequence once."""
    return sum(seq_lens) * num_kv_heads * head_size * 2 * element_bytes


@dataclass
class PagedKV:
    """K/V blocks ``[num_blocks, block_size, h_kv, d]``, block tables ``[copies, rows, max_blocks]`` int32
    and token slots ``[copies, sum(seq_lens) + extra_slots]`` int64 (as SGLang allocates them)."""

    k_cache: Any
    v_cache: Any
    block_tables: Any
    kv_indices: Any
    copies: int

    @property
    def k_buffer(self) -> Any:
        """SGLang's token-major view ``[slots, h_kv, d]`` of the same K blocks."""
        return self.k_cache.view(-1, *self.k_cache.shape[2:])

    @property
    def v_buffer(self) -> Any:
        return self.v_cache.view(-1, *self.v_cache.shape[2:])


#: the largest KV cache verify builds on the CPU (the Triton interpreter runs tiny shapes only)
CPU_KV_BYTES = 1 << 30


def copies_that_fit(seq_lens: tuple[int, ...] | list[int], num_kv_heads: int, head_size: int, block_size: int,
                    element_bytes: int, copies: int) -> int:
    """On a GPU: at most ``copies``, as many as fit in 80% of free memory less 1 GiB (at least one, or a
    :class:`DecodecalcError` saying how much one copy needs)."""
    import torch

    free, _ = torch.cuda.mem_get_info()
    blocks = sum(cdiv(L, block_size) for L in seq_lens)
    need_one = 2 * blocks * block_size * num_kv_heads * head_size * element_bytes + blocks * block_size * 4
    budget = int(free * 0.8) - (1 << 30)
    if need_one > budget:
        raise DecodecalcError(f"out of GPU memory: the KV cache of this workload needs {need_one / 2**30:.1f} GiB, "
                              f"{free / 2**30:.1f} GiB free")
    return max(1, min(copies, budget // need_one))


def build_paged_kv(
    generator: Any, *, seq_lens: tuple[int, ...] | list[int], num_kv_heads: int, head_size: int, block_size: int,
    dtype: Any, device: str, copies: int = 1, table_rows: int | None = None, extra_slots: int = 0,
) -> PagedKV:
    """Draw K, V and a random block permutation from ``generator`` (in that order), then give each
    copy's sequences disjoint blocks.  ``table_rows`` (default the batch) pads the block tables with
    zero rows, ``extra_slots`` the slot indices with zeros (padded CUDA-graph rows)."""
    import torch

    bs = block_size
    nb = [cdiv(L, bs) for L in seq_lens]
    per_copy = sum(nb)
    num_blocks = copies * per_copy + 1
    shape = (num_blocks, bs, num_kv_heads, head_size)
    if device == "cpu":  # the Triton interpreter: refuse before allocating, not with a MemoryError
        need = 2 * num_blocks * bs * num_kv_heads * head_size * torch.empty((), dtype=dtype).element_size()
        if need > CPU_KV_BYTES:
            raise DecodecalcError(f"the KV cache of this workload needs {need / 2**30:,.1f} GiB; on the CPU (Triton "
                                  f"interpreter) verify takes at most {CPU_KV_BYTES / 2**30:.0f} GiB: use tiny shapes")
    if torch.empty((), dtype=dtype).element_size() == 1:  # fp8: torch draws no fp8 normals; draw fp16, then cast
        k_cache = torch.randn(shape, generator=generator, device=device, dtype=torch.float16).to(dtype)
        v_cache = torch.randn(shape, generator=generator, device=device, dtype=torch.float16).to(dtype)
    else:
        k_cache = torch.randn(shape, generator=generator, device=device, dtype=dtype)
        v_cache = torch.randn(shape, generator=generator, device=device, dtype=dtype)
    perm = torch.randperm(num_blocks - 1, generator=generator, device=device).to(torch.int32) + 1
    rows = len(seq_lens) if table_rows is None else table_rows
    tables = torch.zeros((copies, rows, max(nb)), dtype=torch.int32, device=device)
    # int64 like SGLang's own kv_indices (token slots pass 2**31 / stride on large pools)
    indices = torch.zeros((copies, sum(seq_lens) + extra_slots), dtype=torch.int64, device=device)
    ar = torch.arange(bs, device=device, dtype=torch.int32)
    for c in range(copies):
        off, tok = c * per_copy, 0
        for i, n in enumerate(nb):
            blocks = perm[off:off + n]
            tables[c, i, :n] = blocks
            L = seq_lens[i]
            indices[c, tok:tok + L] = (blocks[:, None].long() * bs + ar[None, :]).reshape(-1)[:L]
            tok += L
            off += n
    return PagedKV(k_cache=k_cache, v_cache=v_cache, block_tables=tables, kv_indices=indices, copies=copies)


def prefix_view(pool: PagedKV, seq_lens: tuple[int, ...] | list[int], block_size: int) -> PagedKV:
    """One step of a workload on a pool of ``rows`` sequences of one length (``build_paged_kv`` with equal lengths):
    sequence j of the step reads the first ``seq_lens[j]`` tokens of row j, in every copy. The same K and V blocks,
    the block tables' first rows, and SGLang's token slots of those prefixes (per copy): timing many steps of one
    workload needs one pool, not a cache per step (``calibrate``'s map steps, :mod:`decodecalc.verify.calibration`)."""
    import torch

    tables = pool.block_tables
    b = len(seq_lens)
    if b > tables.shape[1] or max(seq_lens) > tables.shape[2] * block_size:
        raise DecodecalcError(f"a step of {b} sequences up to {max(seq_lens)} tokens does not fit a pool of "
                              f"{tables.shape[1]} rows of {tables.shape[2] * block_size} tokens")
    dev = tables.device
    lt = torch.tensor(list(seq_lens), device=dev)
    seq = torch.repeat_interleave(torch.arange(b, device=dev), lt)
    tok = torch.arange(int(lt.sum()), device=dev) - (torch.cumsum(lt, 0) - lt)[seq]
    slots = tables[:, :b][:, seq, tok // block_size].long() * block_size + tok % block_size
    return PagedKV(k_cache=pool.k_cache, v_cache=pool.v_cache, block_tables=tables[:, :b].contiguous(),
                   kv_indices=slots.contiguous(), copies=pool.copies)
