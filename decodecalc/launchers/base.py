"""The common shape of a modeled decode-attention launch, whatever system produced it."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from decodecalc.derived import Derived, prod
from decodecalc.errors import ConfigError
from decodecalc.launchers.details import PlanDetails

DetailsT = TypeVar("DetailsT")


class KernelKind(StrEnum):
    """Which upstream kernel a launch runs, set by the launcher that models it; the time model reads it
    (never the kernel's name). OTHER: a kernel the time model has no family for."""

    OTHER = "other"
    VLLM_UNIFIED_2D = "vllm_unified_2d"  # kernel_unified_attention, 2D grid (one program per q-block x KV head)
    VLLM_UNIFIED_3D = "vllm_unified_3d"  # kernel_unified_attention, 3D grid (NUM_SEGMENTS_PER_SEQ segments)
    VLLM_REDUCE_SEGMENTS = "vllm_reduce_segments"  # reduce_segments (merge of the 3D segments)
    SGLANG_GROUPED_STAGE1 = "sglang_grouped_stage1"  # _fwd_grouped_kernel_stage1 (GQA / MQA)
    SGLANG_MHA_STAGE1 = "sglang_mha_stage1"  # _fwd_kernel_stage1 (one query head per program)
    SGLANG_STAGE2 = "sglang_stage2"  # _fwd_kernel_stage2 (merge of the splits)
    FLASHINFER_DECODE = "flashinfer_decode"  # BatchDecodeWithPagedKVCacheKernel (CUDA cores)
    FLASHINFER_PREFILL = "flashinfer_prefill"  # BatchPrefillWithPagedKVCacheKernel (tensor-core decode)
    FLASHINFER_MERGE = "flashinfer_merge"  # PersistentVariableLengthMergeStatesKernel
    FA3_FWD = "fa3_fwd"  # FlashAttnFwdSm90
    FA3_COMBINE = "fa3_combine"  # FlashAttnFwdCombine
    FLASHMLA_DECODE = "flashmla_decode"  # flash_fwd_splitkv_mla_kernel
    FLASHMLA_COMBINE = "flashmla_combine"  # flash_fwd_mla_combine_kernel
    FA2_FWD = "fa2_fwd"  # flash_fwd_splitkv_kernel / flash_fwd_kernel (flash-attn 2)
    FA2_COMBINE = "fa2_combine"  # flash_fwd_splitkv_combine_kernel
    XQA_MHA = "xqa_mha"  # kernel_mha of XQA's mha.cu (in-kernel merge by the last CTA of a sequence)
    XQA_MHA_SM90 = "xqa_mha_sm90"  # kernel_mha of XQA's mha_sm90.cu (fp8 e4m3 KV on SM90; in-kernel merge)
    TRTLLM_GEN_FMHA = "trtllm_gen_fmha"  # trtllm-gen's generation FMHA cubin (multi-CTA KV mode)
    MMHA = "mmha"  # TensorRT-LLM's masked_multihead_attention_kernel (multi-block: in-kernel merge)


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelLaunch:
    """One kernel launch: its grid and how many of its programs do real work."""

    name: str
    grid: tuple[int, ...]
    working_programs: int
    constexprs: dict[str, Any] = field(default_factory=dict)
    kind: KernelKind = KernelKind.OTHER

    @property
    def programs(self) -> int:
        return prod(self.grid)


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchPlan:
    """What one system launches for one layer of one decode step on one rank.

    ``splits`` is the number of KV splits each sequence is cut into as the kernel allocates
    them (1 = unsplit); ``nonempty_splits`` those that read at least one key.
    ``partial_state_bytes`` is what stage 1 may write for the whole launch (every allocated
    split of every launched token and query head); ``partial_state_bytes_used`` only the
    splits that do work. ``scratch_bytes`` are the persistent buffers the backend allocates.
    """

    system: str
    kernels: tuple[KernelLaunch, ...]
    splits: tuple[int, ...]
    nonempty_splits: tuple[int, ...]
    tokens_per_split: tuple[int, ...]
    partial_state_bytes: int
    partial_state_bytes_used: int
    scratch_bytes: int
    explain: tuple[Derived, ...] = ()
    #: what this launcher records beyond the common fields (its record in launchers.details); None: nothing
    details: PlanDetails | None = None
    #: small kernels launched besides ``kernels`` that do no attention work, counted for their launch
    #: cost only (SGLang's split-count kernel ``get_num_kv_splits_triton`` in adaptive mode)
    aux_launches: int = 0

    def details_as(self, kind: type[DetailsT]) -> DetailsT:
        """``details`` as the record ``kind`` of the launcher that made this plan; a ConfigError for a plan another
        launcher made (a caller that reads one launcher's details from another's plan)."""
        if not isinstance(self.details, kind):
            raise ConfigError(f"the {self.system} plan has no {kind.__name__} (its details: "
                              f"{type(self.details).__name__})")
        return self.details

    @property
    def main(self) -> KernelLaunch:
        return self.kernels[0]

    @property
    def merge(self) -> KernelLaunch | None:
        return self.kernels[1] if len(self.kernels) > 1 else None

    @property
    def grid(self) -> tuple[int, ...]:
        return self.main.grid


# --------------------------------------------------------------------------------------------
# what a launcher gives the sweep engine (decodecalc.reports.sweep) for uniform decode batches


@dataclass(frozen=True, slots=True)
class SweepRow:
    """One batch size of a uniform decode batch over the sweep's lengths: one value per length.

    A launcher's fast path (``sweep_rows``) yields these without a full LaunchPlan per point; lists
    may be shared between rows (the sweep's CSV writer caches their text by identity)."""

    region: list[str]
    splits: list[int]
    nonempty_splits: list[int]
    tokens_per_split: list[int]
    programs: list[int]
    working_programs: list[int]


@dataclass(frozen=True, slots=True)
class LengthKey:
    """For a launcher whose uniform-batch launch depends on the length only through ``key(L)`` (a block or
    partition count, plus the thresholds the launcher tests): the sweep plans once per (batch, key) and
    recomputes the split length per length with ``tokens_per_split(plan, L)``."""

    key: Callable[[int], Hashable]
    tokens_per_split: Callable[[LaunchPlan, int], int]
