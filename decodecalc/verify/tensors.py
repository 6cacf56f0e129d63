"""The tensors of one verify workload: the paged KV cache (:mod:`decodecalc.verify.kv_cache`), queries,
sequence lengths and query starts, padded as the engine's CUDA-graph replay pads them.
Imports torch inside functions only."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from decodecalc.errors import DecodecalcError
from decodecalc.verify.environment import Environment, run_dtype
from decodecalc.verify.kv_cache import build_paged_kv, copies_that_fit, kv_bytes
from decodecalc.workload import Workload

if TYPE_CHECKING:
    import torch

__all__ = ["StepTensors", "build_step_tensors", "oom_as_error", "pick_check_seqs"]


@dataclass
class StepTensors:
    """Tensors for one workload (padded to the engine's launch where a graph replay pads)."""

    q: torch.Tensor  # [T_run, h, d]
    k_cache: torch.Tensor  # [NB, bs, h_kv, d]
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # [copies, B_run, max_blocks] int32
    seq_lens: torch.Tensor  # [B_run] int32 (padded requests 0)
    query_start: torch.Tensor  # [B_run + 1] int32
    kv_indptr: torch.Tensor  # [B + 1] int32 (SGLang, real requests)
    kv_indices: torch.Tensor  # [copies, sum L] int64 token slots
    sg_seq_lens: torch.Tensor  # [B_sg] int32 (CUDA-graph padded rows: seq_len 1)
    b_sg: int
    copies: int
    scale: float
    dtype: torch.dtype
    kv_bytes: int
    b_real: int
    t_real: int
    b_run: int
    t_run: int


@contextlib.contextmanager
def oom_as_error(what: str) -> Iterator[None]:
    import torch

    try:
        yield
    except torch.cuda.OutOfMemoryError as exc:
        torch.cuda.empty_cache()
        raise DecodecalcError(f"out of GPU memory while {what}: {str(exc).splitlines()[0]}") from None


def build_step_tensors(
    work: Workload, env: Environment, *, copies: int, seed: int = 0, pad_reqs: int = 0, pad_tokens: int = 0,
    sg_pad_reqs: int = 0,
) -> tuple[StepTensors, str]:
    """The workload's tensors and a note when the dtype had to change (:func:`run_dtype`)."""
    import torch

    dtype, note = run_dtype(work.dtype, env)
    dev = env.device
    elt = torch.tensor([], dtype=dtype).element_size()
    B, T = work.batch, work.num_tokens
    h, h_kv, d = work.num_heads, work.num_kv_heads, work.head_size
    b_run = max(B, pad_reqs)
    t_run = max(T, pad_tokens)
    b_sg = max(B, sg_pad_reqs)
    if dev == "cuda":
        copies = copies_that_fit(work.seq_lens, h_kv, d, work.block_size, elt, copies)
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    with oom_as_error("building the KV cache"):
        # SGLang padded rows (seq_len 1) read slot 0 of block 0, which no real sequence uses
        kv = build_paged_kv(gen, seq_lens=work.seq_lens, num_kv_heads=h_kv, head_size=d, block_size=work.block_size,
                            dtype=dtype, device=dev, copies=copies, table_rows=b_run, extra_slots=b_sg - B)
        q = torch.randn((max(t_run, b_sg), h, d), generator=gen, device=dev, dtype=dtype)
    lens = list(work.seq_lens) + [0] * (b_run - B)
    starts = [0]
    for ql in work.query_lens:
        starts.append(starts[-1] + ql)
    starts += [T] * (b_run - B)  # padded requests: query length 0
    indptr = [0]
    sg_lens = list(work.seq_lens) + [1] * (b_sg - B)
    for L in sg_lens:
        indptr.append(indptr[-1] + L)
    tensors = StepTensors(
        q=q, k_cache=kv.k_cache, v_cache=kv.v_cache, block_tables=kv.block_tables,
        seq_lens=torch.tensor(lens, dtype=torch.int32, device=dev),
        query_start=torch.tensor(starts, dtype=torch.int32, device=dev),
        kv_indptr=torch.tensor(indptr, dtype=torch.int32, device=dev), kv_indices=kv.kv_indices,
        sg_seq_lens=torch.tensor(sg_lens, dtype=torch.int32, device=dev), b_sg=b_sg, copies=kv.copies,
        scale=1.0 / math.sqrt(d), dtype=dtype, kv_bytes=kv_bytes(work.seq_lens, h_kv, d, elt), b_real=B, t_real=T,
        b_run=b_run, t_run=t_run,
    )
    return tensors, note


def pick_check_seqs(work: Workload, limit: int) -> list[int]:
    """Sequences checked against the float32 reference: all, or first/last/longest/shortest + spread."""
    B = work.batch
    if limit <= 0 or B <= limit:
        return list(range(B))
    lens = work.seq_lens
    pick = {0, B - 1, max(range(B), key=lambda i: lens[i]), min(range(B), key=lambda i: lens[i])}
    step = max(1, B // limit)
    i = 0
    while len(pick) < limit and i < B:
        pick.add(i)
        i += step
    return sorted(pick)[:max(limit, 4)]
