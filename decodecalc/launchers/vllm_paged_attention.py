"""vLLM legacy PagedAttention v1 / v2 (CUDA), removed from vLLM in 2026.

Sources (upstream-launchers.md section 5):
- caller ``vllm/attention/ops/paged_attn.py`` of vLLM v0.11.0 (git f71952c1c) L21 (``_PARTITION_SIZE = 512``)
  and L126-136 (the v1/v2 choice);
- ``csrc/attention/paged_attention_v2.cu`` @ 0e60ae8f4d33113973e7db07ae0b9a74c2dd0c79
  (``NUM_THREADS = 128, PARTITION_SIZE = 512``, grids, reduce shared memory, L49-51 and L89-98 hand-counted);
- ``csrc/attention/attention_kernels.cuh`` @ 5bc0e56c7a30800631543dd1a447e4e44fbd5bba L106-114 (early exit).

One CTA per *query* head: GQA heads re-read the same KV. V2 keeps the partial output in the
**model dtype** (``tmp_output [num_seqs, h, P, d]``) plus fp32 ``exp_sums`` and ``max_logits``.
"""

from __future__ import annotations

from decodecalc.derived import Explain, cdiv
from decodecalc.errors import UnsupportedError
from decodecalc.launchers.base import KernelLaunch, LaunchPlan, LengthKey
from decodecalc.launchers.details import PagedAttentionDetails
from decodecalc.launchers.guards import require_decode, require_not_mla, require_vendor
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

SRC_CALLER = "vllm 0.11.0 vllm/attention/ops/paged_attn.py"
SRC_V2 = "vllm csrc/attention/paged_attention_v2.cu @0e60ae8f"
SRC_KERN = "vllm csrc/attention/attention_kernels.cuh @5bc0e56c"

_PARTITION_SIZE = 512  # paged_attn.py L21; launcher template PARTITION_SIZE = 512
NUM_THREADS = 128  # paged_attention_v2.cu L49-51 (hc)
V1_MAX_SEQ_LEN = 8192  # paged_attn.py L126-136: use_v1 needs max_seq_len <= 8192 (v1 shared memory)
V1_MIN_SEQ_HEADS = 512  # ... or num_seqs * num_heads > 512
HEAD_SIZES = (32, 64, 80, 96, 112, 120, 128, 192, 256)  # compiled head sizes
BLOCK_SIZES = (8, 16, 32)


def use_v1(max_seq_len: int, num_seqs: int, num_heads: int) -> bool:
    """V11 paged_attn.py L126-136: ``max_seq_len <= 8192 and (P == 1 or num_seqs * num_heads > 512)``."""
    P = cdiv(max_seq_len, _PARTITION_SIZE)
    return max_seq_len <= V1_MAX_SEQ_LEN and (P == 1 or num_seqs * num_heads > V1_MIN_SEQ_HEADS)


def plan_vllm_paged_attention(
    w: Workload, gpu: GPUSpec, *, version: str = "auto", check_platform: bool = True,
) -> LaunchPlan:
    """``PagedAttention.forward_decode``: v1 (no split) or v2 (512-token partitions).

    ``version``: "auto" (the caller's rule), "v1" or "v2" (forced, as a kernel test would).
    """
    system = "vLLM legacy PagedAttention"
    require_vendor(gpu, "nvidia", system, check_platform)
    require_not_mla(w, system)
    require_decode(w, system)
    d = w.head_size
    if d not in HEAD_SIZES:
        raise UnsupportedError(f"{system}: head size {d} not compiled (compiled: {', '.join(map(str, HEAD_SIZES))})")
    if w.head_size_v != d:
        raise UnsupportedError(f"{system}: needs equal K and V head sizes, got {d} and {w.head_size_v}")
    if w.block_size not in BLOCK_SIZES:
        raise UnsupportedError(f"{system}: block size {w.block_size} not allowed (8, 16 or 32)")
    if version not in ("auto", "v1", "v2"):
        raise UnsupportedError(f"{system}: version must be auto, v1 or v2, got {version!r}")
    ex = Explain()
    B, h = w.batch, w.num_heads
    maxL = w.max_seqlen_k
    P = ex.add("max_num_partitions", cdiv(maxL, _PARTITION_SIZE), "cdiv(max_seq_len, _PARTITION_SIZE)",
               f"{SRC_CALLER} L21, L126", max_seq_len=maxL, _PARTITION_SIZE=_PARTITION_SIZE)
    auto_v1 = use_v1(maxL, B, h)
    ex.add("use_v1", auto_v1, "max_seq_len <= 8192 and (max_num_partitions == 1 or num_seqs * num_heads > 512)",
           f"{SRC_CALLER} L126-136", max_seq_len=maxL, max_num_partitions=P, num_seqs=B, num_heads=h)
    v1 = auto_v1 if version == "auto" else version == "v1"
    if v1 and maxL > V1_MAX_SEQ_LEN and version == "v1":
        raise UnsupportedError(f"{system}: v1 keeps all logits in shared memory; max_seq_len {maxL} > 8192")
    if not v1 and _PARTITION_SIZE % w.block_size:
        raise UnsupportedError(f"{system}: v2 needs 512 % block_size == 0")
    if v1:
        grid = (h, B, 1)
        kernels: tuple[KernelLaunch, ...] = (KernelLaunch(name="paged_attention_v1_kernel", grid=grid, working_programs=h * B,
                                constexprs={"NUM_THREADS": NUM_THREADS, "BLOCK_SIZE": w.block_size,
                                            "HEAD_SIZE": d}),)
        return LaunchPlan(
            system="vllm-paged-v1", kernels=kernels, splits=(1,) * B, nonempty_splits=(1,) * B,
            tokens_per_split=w.seq_lens, partial_state_bytes=0, partial_state_bytes_used=0, scratch_bytes=0,
            explain=ex.items(), details=PagedAttentionDetails(version="v1", source=SRC_CALLER),
        )
    nonempty = tuple(cdiv(L, _PARTITION_SIZE) for L in w.seq_lens)
    ex.add("partitions_per_seq", nonempty, "cdiv(L_i, 512); CTAs with partition_idx * 512 >= L_i return",
           f"{SRC_KERN} L106-114", L_i=w.seq_lens)
    per = ex.add("partial_state_bytes_per_token_head", P * (d * w.q_bytes + 8),
                 "max_num_partitions * (d * sizeof(dtype) + 4 + 4)  (tmp_output in model dtype, exp_sums, max_logits fp32)",
                 f"{SRC_CALLER} v2 branch", max_num_partitions=P, d=d, dtype=w.dtype, unit="bytes")
    allocated = B * h * per
    used = sum(n * h * (d * w.q_bytes + 8) for n in nonempty)
    kernels = (
        KernelLaunch(name="paged_attention_v2_kernel", grid=(h, B, P), working_programs=h * sum(nonempty),
                     constexprs={"NUM_THREADS": NUM_THREADS, "PARTITION_SIZE": _PARTITION_SIZE,
                                 "BLOCK_SIZE": w.block_size, "HEAD_SIZE": d}),
        KernelLaunch(name="paged_attention_v2_reduce_kernel", grid=(h, B), working_programs=h * B,
                     constexprs={"NUM_THREADS": NUM_THREADS, "reduce_smem_bytes": 2 * P * 4}),
    )
    return LaunchPlan(
        system="vllm-paged-v2", kernels=kernels, splits=(P,) * B, nonempty_splits=nonempty,
        tokens_per_split=tuple(min(_PARTITION_SIZE, L) for L in w.seq_lens),
        partial_state_bytes=allocated, partial_state_bytes_used=used, scratch_bytes=allocated,
        explain=ex.items(), details=PagedAttentionDetails(version="v2", max_num_partitions=P, source=SRC_V2),
    )


def length_key(w: Workload) -> LengthKey:
    """For the sweep: the launch depends on the length through its partition count and the v1 length limit."""
    return LengthKey(lambda L: (cdiv(L, _PARTITION_SIZE), L <= V1_MAX_SEQ_LEN),
                     lambda p, L: L if p.details_as(PagedAttentionDetails).version == "v1" else min(_PARTITION_SIZE, L))
