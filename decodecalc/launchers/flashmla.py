"""FlashMLA dense decode scheduler (MLA models only), upstream-launchers.md section 9.

deepseek-ai/FlashMLA @ 9241ae3ef9bac614dd25e45e507e089f888280e0:
- ``csrc/api/dense_decode.h`` L71 (``s_q == 1`` -> non-causal), L78
  (``num_sm_parts = max(num_sms / h_k / cdiv(s_q * h_q / h_k, 64), 1)``), L100-104
  (``block_size_n = 64``, ``fixed_overhead_num_blocks = 5``), L164-166 (``lse_accum`` /
  ``out_accum`` with ``B + num_sm_parts`` rows, fp32); head sizes 576 (or 512) / 512, page 64;
- ``csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu`` L62 (``payload =
  cdiv(total, num_sm_parts) + 5``) and L66-99 (greedy packing in request order);
- ``csrc/sm90/decode/dense/splitkv_mla.cuh`` L1344 (grid ``(n_mblocks, h_k, num_sm_parts)``);
- ``csrc/smxx/decode/combine/combine.cu`` L203 (combine grid ``(B * s_q, 1, cdiv(h_q, 8))``).
A request that fits in one part is written straight to the output; only split requests use
the fp32 accumulators.
"""

from __future__ import annotations

from decodecalc.derived import Explain, cdiv
from decodecalc.errors import UnsupportedError
from decodecalc.launchers.base import KernelKind, KernelLaunch, LaunchPlan, LengthKey
from decodecalc.launchers.details import FlashMlaDetails
from decodecalc.launchers.guards import require_vendor
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

MLA_COMMIT = "9241ae3e"
SRC_API = f"FlashMLA@{MLA_COMMIT} csrc/api/dense_decode.h"
SRC_SCHED = f"FlashMLA@{MLA_COMMIT} csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu"
SRC_COMBINE = f"FlashMLA@{MLA_COMMIT} csrc/smxx/decode/combine/combine.cu L203"

# get_decoding_sched_meta.cu (SRC_SCHED): 64-token blocks, and each request costs 5 blocks of fixed
# overhead when the scheduler packs work into SM parts (upstream names kept)
block_size_n = 64
fixed_overhead_num_blocks = 5
# combine.cu L203 (SRC_COMBINE): rows of (token, head) per combine program
BLOCK_SIZE_M_COMBINE = 8


def schedule(seq_lens: tuple[int, ...], num_sm_parts: int) -> tuple[list[int], list[list[int]], int]:
    """Replay ``get_mla_metadata_kernel``'s greedy packing.

    Returns (splits per request, blocks of each split per request, number of parts that got work).
    """
    splits, pieces, loads = schedule_parts(seq_lens, num_sm_parts)
    return splits, pieces, sum(1 for _, n in loads if n)


def schedule_parts(seq_lens: tuple[int, ...],
                   num_sm_parts: int) -> tuple[list[int], list[list[int]], list[tuple[int, int]]]:
    """:func:`schedule`, with each SM part's (blocks, pieces) in part order instead of the busy count."""
    nblk = [max(cdiv(L, block_size_n), 1) for L in seq_lens]
    total = sum(n + fixed_overhead_num_blocks for n in nblk)
    payload = cdiv(total, num_sm_parts) + fixed_overhead_num_blocks
    B = len(seq_lens)
    pieces: list[list[int]] = [[] for _ in range(B)]
    req, now_block, split_idx = 0, 0, 0
    loads: list[tuple[int, int]] = []
    for _ in range(num_sm_parts):
        remain = payload
        blocks = taken = 0
        while req < B:
            rest = nblk[req] - now_block
            if remain >= rest + fixed_overhead_num_blocks:
                pieces[req].append(rest)
                remain -= rest + fixed_overhead_num_blocks
                req, now_block, split_idx = req + 1, 0, 0
                blocks, taken = blocks + rest, taken + 1
            else:
                if remain - fixed_overhead_num_blocks > 0:
                    take = remain - fixed_overhead_num_blocks
                    pieces[req].append(take)
                    now_block += take
                    split_idx += 1
                    blocks, taken = blocks + take, taken + 1
                    remain = 0
                break
        loads.append((blocks, taken))
    splits = [len(p) for p in pieces]
    return splits, pieces, loads


def plan_flashmla(w: Workload, gpu: GPUSpec, *, check_platform: bool = True) -> LaunchPlan:
    """``flash_mla_with_kvcache`` decode with metadata from ``get_mla_metadata``."""
    system = "FlashMLA"
    if not w.model.is_mla:
        raise UnsupportedError(f"{system} serves MLA models only; {w.model.name} is {w.model.attention}")
    require_vendor(gpu, "nvidia", system, check_platform)
    if check_platform and (gpu.compute_capability is None or gpu.compute_capability[0] not in (9, 10)):
        raise UnsupportedError(f"{system}: SM90/SM100 only; {gpu.name} has compute capability {gpu.compute_capability}")
    if w.head_size not in (576, 512) or w.head_size_v != 512:
        raise UnsupportedError(f"{system}: head sizes must be 576 (or 512) / 512, got {w.head_size}/{w.head_size_v}")
    if not w.is_uniform_decode:
        raise UnsupportedError(f"{system}: one query length for the whole batch")
    ex = Explain()
    B, h_q, h_k = w.batch, w.num_heads, w.num_kv_heads
    s_q = w.max_seqlen_q
    q_seq_per_hk = s_q * (h_q // h_k)
    parts = ex.add("num_sm_parts", max(gpu.num_sms // h_k // cdiv(q_seq_per_hk, 64), 1),
                   "max(num_sms / h_k / cdiv(s_q * h_q / h_k, 64), 1)", f"{SRC_API} L78", num_sms=gpu.num_sms,
                   h_k=h_k, s_q=s_q, h_q=h_q)
    splits, pieces, loads = schedule_parts(w.seq_lens, parts)
    busy = sum(1 for _, n in loads if n)
    ex.add("num_splits", tuple(splits),
           "greedy packing of cdiv(L_i, block_size_n) blocks (+ fixed_overhead_num_blocks per request) into num_sm_parts parts "
           "of cdiv(total, num_sm_parts) + fixed_overhead_num_blocks",
           f"{SRC_SCHED} L62-99", num_sm_parts=parts, block_size_n=block_size_n,
           fixed_overhead_num_blocks=fixed_overhead_num_blocks)
    n_mblocks = cdiv(q_seq_per_hk, 64)
    kernels = [KernelLaunch(name="flash_fwd_splitkv_mla_kernel", grid=(n_mblocks, h_k, parts), kind=KernelKind.FLASHMLA_DECODE,
                            working_programs=n_mblocks * h_k * busy,
                            constexprs={"block_size_n": block_size_n, "num_sm_parts": parts})]
    kernels.append(KernelLaunch(name="flash_fwd_mla_combine_kernel", kind=KernelKind.FLASHMLA_COMBINE,
                                grid=(B * s_q, 1, cdiv(h_q, BLOCK_SIZE_M_COMBINE)),
                                working_programs=sum(1 for s in splits if s > 1) * s_q * cdiv(h_q, BLOCK_SIZE_M_COMBINE)))
    dv = w.head_size_v
    per_row = h_k * q_seq_per_hk * (4 * dv + 4)  # one accumulator row: all heads of one (request, split)
    allocated = ex.add("partial_state_bytes", (B + parts) * per_row,
                       "(B + num_sm_parts) * h_k * q_seq_per_hk * (4 * d_v + 4)", f"{SRC_API} L164-166",
                       B=B, num_sm_parts=parts, h_k=h_k, q_seq_per_hk=q_seq_per_hk, d_v=dv, unit="bytes")
    used = sum(s for s in splits if s > 1) * per_row
    tps = tuple(min(max(p) * block_size_n, L) for p, L in zip(pieces, w.seq_lens))
    return LaunchPlan(
        system="flashmla", kernels=tuple(kernels), splits=tuple(splits), nonempty_splits=tuple(splits),
        tokens_per_split=tps, partial_state_bytes=allocated, partial_state_bytes_used=used,
        scratch_bytes=allocated, explain=ex.items(),
        details=FlashMlaDetails(num_sm_parts=parts, blocks_per_split=tuple(tuple(p) for p in pieces), busy_parts=busy,
                                part_loads=tuple(loads),
                                note="kernel page size is 64 (FlashMLA requires it; engines set it)", source=SRC_SCHED),
    )


def length_key(w: Workload) -> LengthKey:
    """For the sweep: the schedule depends on the length only through its block_size_n block count."""
    return LengthKey(lambda L: cdiv(L, block_size_n),
                     lambda p, L: min(max(p.details_as(FlashMlaDetails).blocks_per_split[0]) * block_size_n, L))
