"""The work a launch does: :class:`KernelWork` (a histogram of loop trip counts per kernel) and
:class:`LaunchWork`, built from a launcher's :class:`~decodecalc.launchers.base.LaunchPlan`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from decodecalc.derived import cdiv, next_power_of_2
from decodecalc.errors import ConfigError
from decodecalc.timemodel.profile import KERNEL_FAMILIES


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelWork:
    """What one kernel's programs do: a histogram of loop trip counts of the working programs."""

    family: str
    iters: tuple[tuple[int, int], ...]  # (iterations per program, number of such programs)
    bytes_per_iter: int
    idle_programs: int = 0
    head_dim: int = 128  # padded head dim: selects the family's occupancy

    @property
    def programs(self) -> int:
        return sum(n for _, n in self.iters)

    @property
    def bytes(self) -> int:
        return sum(i * n for i, n in self.iters) * self.bytes_per_iter


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchWork:
    kernel: str  # "vllm" | "sglang" | "reference"
    splits: int  # 1 = unsplit
    kernels: tuple[KernelWork, ...]
    extra_launches: int = 0  # tiny kernels counted for their launch only (SGLang's split-count kernel)
    label: str = ""


def _hist(values: Iterable[int]) -> tuple[tuple[int, int], ...]:
    out: dict[int, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return tuple(sorted(out.items()))


def _scaled(h: tuple[tuple[int, int], ...], k: int) -> tuple[tuple[int, int], ...]:
    return tuple((i, n * k) for i, n in h)


def vllm_work(shape: Any, *, splits: int, use_3d: bool | None = None, tile: int | None = None,
              prefix: str = "vllm") -> LaunchWork:
    """vLLM 0.33 ``unified_attention``: 2D (splits=1) or 3D with ``splits`` segments.

    Mirrors vllm/v1/attention/ops/triton_unified_attention.py (v0.33.0): BLOCK_M, BLOCK_Q,
    total_num_q_blocks = T // BLOCK_Q + B, TILE 32 (2D) / 16 (3D, 16-bit query; 32 for fp8),
    3D segment early exit (tiles_per_segment = cdiv(L, S * TILE)), reduce_segments (T, h).
    """
    if use_3d is None:
        use_3d = splits > 1
    h, h_kv = shape.num_heads, shape.num_kv_heads
    qpk = h // h_kv
    block_m = 16 if qpk <= 16 else next_power_of_2(qpk)
    block_q = max(1, block_m // qpk)
    seq_lens, q_lens = tuple(shape.seq_lens), tuple(shape.query_lens)
    b = len(seq_lens)
    total_q_blocks = sum(q_lens) // block_q + b
    working_q_blocks = [cdiv(q, block_q) for q in q_lens]
    idle_q = max(0, total_q_blocks - sum(working_q_blocks))
    d, dv = shape.head_size, shape.head_size_v
    kvb = shape.kv_bytes_per_element
    kernel = "vllm" if prefix == "vllm" else "reference-vllm"
    if not use_3d:
        tile = tile or 32
        iters = _hist(cdiv(L, tile) for L, nq in zip(seq_lens, working_q_blocks) for _ in range(nq))
        main = KernelWork(family=f"{prefix}_2d", iters=_scaled(iters, h_kv), bytes_per_iter=tile * (d + dv) * kvb,
                          idle_programs=idle_q * h_kv, head_dim=next_power_of_2(d))
        return LaunchWork(kernel=kernel, splits=1, kernels=(main,), label="2D")
    tile = tile or (16 if shape.q_bytes >= 2 and kvb >= 2 else 32)
    s = splits
    per: list[int] = []
    idle = idle_q * s
    for L, nq in zip(seq_lens, working_q_blocks):
        tps = cdiv(L, s * tile)
        active = cdiv(L, tps * tile)
        last = cdiv(L - (active - 1) * tps * tile, tile)
        per.extend(([tps] * (active - 1) + [last]) * nq)
        idle += (s - active) * nq
    main = KernelWork(family=f"{prefix}_3d", iters=_scaled(_hist(per), h_kv), bytes_per_iter=tile * (d + dv) * kvb,
                      idle_programs=idle * h_kv, head_dim=next_power_of_2(d))
    d_pad = next_power_of_2(dv)
    reduce = KernelWork(family=f"{prefix}_reduce", iters=((1, sum(q_lens) * h),), bytes_per_iter=s * (4 * d_pad + 8),
                        head_dim=d_pad)
    return LaunchWork(kernel=kernel, splits=s, kernels=(main, reduce), label=f"3D S={s}")


def sglang_splits_adaptive(seq_lens: Sequence[int], *, num_heads: int, num_kv_heads: int, num_sms: int,
                           max_kv_splits: int = 8) -> tuple[int, ...]:
    """SGLang 0.5.23 ``get_num_kv_splits_triton`` (sglang/kernels/ops/attention/metadata.py)."""
    import struct

    lmax, lmin = max(seq_lens), min(seq_lens)
    if lmax * 8 < lmin * 10:
        lmin = lmax
    m1 = min(cdiv(lmax, lmin), max_kv_splits)
    c1 = cdiv(lmax, m1)
    f32 = struct.unpack("f", struct.pack("f", float(lmax)))[0]
    ext = int(num_sms * max(math.log2(f32 / 64.0), 1.0))
    g = num_heads // num_kv_heads
    b = len(seq_lens)
    token_grid = b * num_heads if g == 1 else b * cdiv(num_heads, min(16, g))
    m2 = min(cdiv(ext, token_grid), max_kv_splits)
    c2 = cdiv(lmax, m2)
    return tuple(max(cdiv(L, c1), cdiv(L, c2)) for L in seq_lens)


def sglang_work(shape: Any, *, splits: int | Sequence[int], max_kv_splits: int | None = None,
                adaptive: bool = False, prefix: str = "sglang", mha: bool | None = None) -> LaunchWork:
    """SGLang 0.5.23 ``decode_attention_fwd``: stage 1 (B, cdiv(h, min(16, g)), max_kv_splits) with
    per-sequence split counts, split length rounded up to 32 (empty splits exit), stage 2 (B, h).

    Stage 1 is one of two kernels: ``_fwd_grouped_kernel_stage1`` (GQA / MQA: BLOCK_H 16 query heads
    of one KV head per program, BLOCK_N 32 keys per iteration, ``tl.dot``; family ``sglang_stage1``)
    or, when num_heads == num_kv_heads (``mha``; from the shape when None), ``_fwd_kernel_stage1``
    (one query head per program, grid (B, h, max_kv_splits), BLOCK_N 64 keys of that head's K and V
    per iteration, an elementwise product and sum; family ``sglang_mha_stage1``). decodecalc's
    reference kernels (``prefix`` ref_sglang) keep one stage-1 family."""
    seq_lens = tuple(shape.seq_lens)
    n_i = tuple(splits) if not isinstance(splits, int) else (splits,) * len(seq_lens)
    max_s = max_kv_splits if max_kv_splits is not None else max(n_i)
    h, h_kv = shape.num_heads, shape.num_kv_heads
    g = h // h_kv
    d, dv = shape.head_size, shape.head_size_v
    kvb = shape.kv_bytes_per_element
    if mha is None:
        mha = g == 1
    if g == 1:
        block_n, head_progs = 64, h
    else:
        block_n, head_progs = 32, cdiv(h, min(16, g))
    stage1_family = f"{prefix}_mha_stage1" if mha and prefix == "sglang" else f"{prefix}_stage1"
    per: list[int] = []
    idle = 0
    nonempty_per_seq: list[int] = []
    for L, n in zip(seq_lens, n_i):
        kvps = 32 * cdiv(cdiv(L, n), 32)
        ne = cdiv(L, kvps)
        nonempty_per_seq.append(ne)
        for s in range(ne):
            per.append(cdiv(min(kvps, L - s * kvps), block_n))
        idle += max_s - ne
    stage1 = KernelWork(family=stage1_family, iters=_scaled(_hist(per), head_progs),
                        bytes_per_iter=block_n * (d + dv) * kvb, idle_programs=idle * head_progs,
                        head_dim=next_power_of_2(d))
    stage2 = KernelWork(family=f"{prefix}_stage2", iters=_scaled(_hist(nonempty_per_seq), h),
                        bytes_per_iter=4 * dv + 4, head_dim=next_power_of_2(dv))
    label = f"adaptive (max {max_s})" if adaptive else f"static S={max_s}"
    return LaunchWork(kernel="sglang" if prefix == "sglang" else "reference-sglang", splits=max(n_i),
                      kernels=(stage1, stage2), extra_launches=1 if adaptive else 0, label=label)


# --------------------------------------------------------------------------------------------
# from a launch plan


def _plan_splits(plan: Any) -> tuple[int, bool | None, tuple[int, ...] | None]:
    """(split count, 3D?, per-sequence splits) read off a LaunchPlan, whatever system built it."""
    splits = tuple(getattr(plan, "splits", ()) or (1,))
    main = plan.kernels[0] if getattr(plan, "kernels", ()) else None
    use_3d: bool | None = None
    if main is not None:
        cx = dict(getattr(main, "constexprs", {}) or {})
        if "IS_3D" in cx:
            use_3d = bool(cx["IS_3D"])
        elif "unified" in main.name:
            use_3d = len(main.grid) == 3
    return max(splits), use_3d, splits


def work_for_plan(plan: Any, workload: Any, kernel: str) -> LaunchWork:
    """The work of a LaunchPlan of vLLM's or SGLang's launcher; ``kernel`` says whose kernels run it:
    vllm, sglang, or reference (decodecalc's own kernels in the plan's layout; also reference-vllm /
    reference-sglang)."""
    s, use_3d, per_seq = _plan_splits(plan)
    names = [k.name for k in getattr(plan, "kernels", ())]
    if kernel == "reference":
        system = str(getattr(plan, "system", ""))
        kernel = "reference-vllm" if system.startswith("vllm") or any("unified" in n for n in names) else "reference-sglang"
    if kernel in ("vllm", "reference-vllm"):
        prefix = "vllm" if kernel == "vllm" else "ref_vllm"
        cx = dict(plan.kernels[0].constexprs or {}) if names else {}
        tile = int(cx["TILE_SIZE"]) if cx.get("TILE_SIZE") else None
        if use_3d:
            seg = int(cx.get("NUM_SEGMENTS_PER_SEQ", s))
            return vllm_work(workload, splits=seg, use_3d=True, tile=tile, prefix=prefix)
        return vllm_work(workload, splits=1, use_3d=False, tile=tile, prefix=prefix)
    if kernel in ("sglang", "reference-sglang"):
        adaptive = any(n.startswith("get_num_kv_splits") for n in names) or \
            str(dict(getattr(plan, "details", {}) or {}).get("mode", "")) == "adaptive"
        max_s = None
        for k in plan.kernels:
            if "stage1" in k.name and len(k.grid) == 3:
                max_s = k.grid[2]
        seq = per_seq if per_seq and len(per_seq) == len(workload.seq_lens) else (s,)
        # which stage-1 kernel the launch runs: SGLang's MHA kernel or its grouped one (else: from the heads)
        mha = True if "_fwd_kernel_stage1" in names else False if "_fwd_grouped_kernel_stage1" in names else None
        lw = sglang_work(workload, splits=seq if len(seq) > 1 else seq[0], max_kv_splits=max_s, adaptive=adaptive,
                         prefix="sglang" if kernel == "sglang" else "ref_sglang", mha=mha)
        if kernel == "reference-sglang":  # run_grouped always launches its split-count kernel
            lw = dataclasses.replace(lw, extra_launches=1)
        return lw
    raise ConfigError(f"no time model for kernel {kernel!r}; known: vllm, sglang, reference, "
                      f"{', '.join(k for k in KERNEL_FAMILIES if k.startswith('reference'))}")
