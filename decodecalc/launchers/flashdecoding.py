"""Plain FlashDecoding (split-K) at the first-wave split count S* = ceil(N_SM / G_2D).

Not an engine's launcher: the textbook policy of the reference chapter ("The grid",
decode-attention-chapter.txt L37-43), kept as the baseline every engine is compared with.
G_2D is the unsplit grid of vLLM's Triton wrapper, ``(B // BLOCK_Q + B) * h_kv``
(vLLM v0.33.0 ``vllm/v1/attention/ops/triton_unified_attention.py`` L958-992), and each
sequence is cut into S* contiguous slices of equal length. Partial state is the fp32
(O, m, l) triple of vLLM's 3D path, ``S * (4 * np2(d) + 8)`` bytes per (token, head).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from decodecalc.derived import Explain, cdiv, next_power_of_2
from decodecalc.errors import UnsupportedError
from decodecalc.launchers.base import KernelLaunch, LaunchPlan, SweepRow
from decodecalc.launchers.details import FlashDecodingDetails
from decodecalc.launchers import vllm_unified
from decodecalc.launchers.guards import require_decode, require_not_mla
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

SOURCE = "decode-attention-chapter.txt 'The grid' L37-43 (S* = ceil(N_SM / G_2D)); G_2D from vllm 0.33.0 triton_unified_attention.py L958-992"


def per_token_head_rows(w: Workload) -> int:
    """(query token, query head) pairs of the launch: the rows partial state is kept for."""
    return w.num_tokens * w.num_heads


# --------------------------------------------------------------------------------------


def first_wave_splits(num_sms: int, g2d: int) -> int:
    """S* = ceil(N_SM / G_2D): the smallest split count whose grid fills one wave."""
    return max(1, cdiv(num_sms, g2d))


def plan_flashdecoding(w: Workload, gpu: GPUSpec, *, num_splits: int | None = None) -> LaunchPlan:
    """FlashDecoding at S* (or a forced ``num_splits``) with equal contiguous slices."""
    system = "FlashDecoding (S*)"
    require_not_mla(w, system)
    require_decode(w, system)
    ex = Explain()
    g = w.group_size
    h_kv = w.num_kv_heads
    B = w.batch
    block_m, block_q = vllm_unified.block_shape(g)
    BLOCK_M = ex.add("BLOCK_M", block_m, "16 if g <= 16 else np2(g)",
                     "vllm 0.33.0 triton_unified_attention.py L958-960", g=g)
    BLOCK_Q = ex.add("BLOCK_Q", block_q, "BLOCK_M // g", "vllm 0.33.0 triton_unified_attention.py L961",
                     BLOCK_M=BLOCK_M, g=g)
    q_blocks = w.num_tokens // BLOCK_Q + B
    G_2D = ex.add("G_2D", q_blocks * h_kv, "(T // BLOCK_Q + B) * h_kv", SOURCE, T=w.num_tokens,
                  BLOCK_Q=BLOCK_Q, B=B, h_kv=h_kv)
    if num_splits is None:
        S = ex.add("S_star", first_wave_splits(gpu.num_sms, G_2D), "ceil(N_SM / G_2D)", SOURCE,
                   N_SM=gpu.num_sms, G_2D=G_2D)
    else:
        if num_splits < 1:
            raise UnsupportedError(f"num_splits must be >= 1, got {num_splits}")
        S = ex.add("S", num_splits, "num_splits (forced)", "user input", num_splits=num_splits)
    split_len = tuple(cdiv(L, S) for L in w.seq_lens)
    nonempty = tuple(cdiv(L, sl) for L, sl in zip(w.seq_lens, split_len))
    ex.add("split_len", split_len, "cdiv(L_i, S)", SOURCE, S=S)
    d_pad = next_power_of_2(w.head_size_v)
    per = S * (4 * d_pad + 8) if S > 1 else 0
    rows = per_token_head_rows(w)
    ex.add("partial_state_bytes_per_token_head", per, "S * (4 * np2(d_v) + 8) if S > 1 else 0", SOURCE,
           S=S, d_v=w.head_size_v)
    main_grid = (q_blocks, h_kv, S) if S > 1 else (q_blocks, h_kv)
    working_main = sum(n * h_kv for n in nonempty)
    kernels = [KernelLaunch(name="flash_decoding_stage1", grid=main_grid, working_programs=working_main,
                            constexprs={"BLOCK_M": BLOCK_M, "BLOCK_Q": BLOCK_Q, "NUM_SPLITS": S})]
    if S > 1:
        kernels.append(KernelLaunch(name="flash_decoding_merge", grid=(w.num_tokens, w.num_heads),
                                    working_programs=w.num_tokens * w.num_heads))
    used = sum(n * q * w.num_heads * (4 * d_pad + 8) for n, q in zip(nonempty, w.query_lens)) if S > 1 else 0
    return LaunchPlan(
        system="flashdecoding", kernels=tuple(kernels), splits=(S,) * B, nonempty_splits=nonempty,
        tokens_per_split=split_len, partial_state_bytes=rows * per, partial_state_bytes_used=used,
        scratch_bytes=rows * per, explain=ex.items(),
        details=FlashDecodingDetails(S_star=S, G_2D=G_2D, source=SOURCE),
    )


def sweep_rows(workload: Callable[[int, int], Workload], gpu: GPUSpec, batches: Sequence[int],
               lens: Sequence[int]) -> Iterator[SweepRow]:
    """The sweep's fast path for uniform decode batches: S* once per batch size, equal slices per length."""
    w1 = workload(1, lens[0])
    if w1.model.is_mla:
        raise UnsupportedError("FlashDecoding (S*) does not serve MLA models")
    _, block_q = vllm_unified.block_shape(w1.group_size)
    h_kv = w1.num_kv_heads
    n = len(lens)
    for b in batches:
        q_blocks = b // block_q + b  # (T // BLOCK_Q + B) with one query token per sequence
        S = first_wave_splits(gpu.num_sms, q_blocks * h_kv)
        sl = [cdiv(L, S) for L in lens]
        ne = [cdiv(L, x) for L, x in zip(lens, sl)]
        yield SweepRow(region=["split" if S > 1 else "no split"] * n, splits=[S] * n, nonempty_splits=ne,
                       tokens_per_split=sl, programs=[q_blocks * h_kv * S] * n,
                       working_programs=[b * h_kv * x for x in ne])
