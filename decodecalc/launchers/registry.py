"""The launcher registry: every modeled split policy by name, with its planner and its sweep fast path.

Adding a launcher touches its module here in ``launchers/``, one ``_register`` entry below and, for a predicted
time, its kernel families in :mod:`decodecalc.timemodel.backends`; nothing under ``reports/``. A policy that
cannot serve a configuration (MLA where unsupported, head size not compiled, block size not allowed, wrong GPU
vendor) says so with an :class:`~decodecalc.errors.UnsupportedError` from its planner, or
:func:`platform_reason` before it is planned.

The compare report (:func:`decodecalc.reports.compare.evaluate`) turns a policy into a row: the plan, the
figures of :mod:`decodecalc.figures` (with the tile this entry describes: ``live_rows`` x ``tile_keys``), the
notes and the time model's prediction. ``vllm`` and ``sglang`` have no bare planner here (``build`` is None):
their rows reuse the grid report's launch models and figures.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from decodecalc.errors import ConfigError, UnknownNameError
from decodecalc.formatting import fmt_range
from decodecalc.launchers import (
    aiter,
    flash_attn2,
    flash_attn3,
    flashdecoding,
    flashinfer,
    flashmla,
    sglang_triton,
    vllm_paged_attention,
    vllm_rocm,
    vllm_unified,
)
from decodecalc.launchers.base import LaunchPlan, LengthKey, SweepRow
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyOptions:
    """Engine settings and the run-time inputs some planners need."""

    vllm: vllm_unified.VllmSettings = field(default_factory=vllm_unified.VllmSettings)
    sglang: sglang_triton.SglangSettings = field(default_factory=sglang_triton.SglangSettings)
    layer: str = "global"
    #: FlashInfer CUDA-core CTAs/SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor); None = documented bound
    flashinfer_occupancy: int | None = None
    #: what the predicted times are for (decodecalc.timemodel.profile.REGIMES); the planners ignore it
    regime: str = "back-to-back"

    @property
    def cuda_graph(self) -> bool:
        return self.vllm.cudagraph_mode != "NONE"

    @property
    def batch_invariant(self) -> bool:
        return self.vllm.batch_invariant


#: (workload, gpu, options) -> the launch
PlanFn = Callable[[Workload, GPUSpec, "PolicyOptions"], LaunchPlan]
#: (workload, plan) -> a size of the tile one program works on (live query rows, keys)
TileFn = Callable[[Workload, LaunchPlan], int]
#: (workload, plan, options) -> the notes of the policy's compare row
NotesFn = Callable[[Workload, LaunchPlan, "PolicyOptions"], list[str]]
#: (workload(batch, seq_len), gpu, options, batches, lengths) -> one SweepRow per batch size
SweepRowsFn = Callable[[Callable[[int, int], Workload], GPUSpec, "PolicyOptions", Sequence[int], Sequence[int]],
                       Iterator[SweepRow]]


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    title: str
    upstream: str  # repository, file and pinned version
    platform: str  # "cuda", "rocm" or "any"
    #: True if a request's split count and boundaries depend only on its own length (by construction)
    batch_invariant: str
    #: the bare planner; None for vllm / sglang (their compare rows come from the grid report)
    build: PlanFn | None = None
    #: the tile of the figures (decodecalc.figures): live query rows and keys per program (with ``build``)
    live_rows: TileFn | None = None
    tile_keys: TileFn | None = None
    #: the notes of the compare row (with ``build``); None = no notes
    notes: NotesFn | None = None
    #: the launcher's fast path for uniform decode batches (global layers), one SweepRow per batch size
    sweep_rows: SweepRowsFn | None = None
    #: else, for launchers whose uniform-batch launch depends on the length only through a block count
    length_key: Callable[[Workload], LengthKey] | None = None


# ------------------------------------------------------------------------------------------
# shared helpers


def _const(key: str, default: int) -> TileFn:
    return lambda w, p: int(p.main.constexprs.get(key) or default)


def _group(w: Workload, p: LaunchPlan) -> int:
    return w.group_size


def _one(w: Workload, p: LaunchPlan) -> int:
    return 1


# ------------------------------------------------------------------------------------------
# launchers driven with engine settings


def _fa3(w: Workload, gpu: GPUSpec, opts: PolicyOptions) -> LaunchPlan:
    """FA3 as vLLM drives it (V33 flash_attn.py L767-772, L855-868): 0 = heuristic; under full CUDA
    graphs (token count within the capture range) the upper bound is 32; VLLM_BATCH_INVARIANT -> 1."""
    num_splits = 0
    if opts.batch_invariant:
        num_splits = 1
    elif opts.vllm.cudagraph_mode in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE") and \
            w.num_tokens <= max(_capture_sizes(w, gpu, opts) or (0,)):
        num_splits = 32  # flash_attn_max_num_splits_for_cuda_graph (vllm/config/attention.py L61)
    return flash_attn3.plan_flash_attn3(w, gpu, num_splits=num_splits, layer=opts.layer)


def _capture_sizes(w: Workload, gpu: GPUSpec, opts: PolicyOptions) -> tuple[int, ...]:
    return _capture_sizes_cached(opts.vllm, gpu.compute_capability[0] if gpu.compute_capability else 0)


@functools.lru_cache(maxsize=64)
def _capture_sizes_cached(s: vllm_unified.VllmSettings, cc_major: int) -> tuple[int, ...]:
    from decodecalc.launchers import vllm_cudagraphs as cg

    if s.cudagraph_mode == "NONE":
        return ()
    return cg.capture_sizes(max_num_seqs=s.max_num_seqs, max_num_batched_tokens=s.max_num_batched_tokens,
                            num_speculative_tokens=s.num_speculative_tokens, compute_capability_major=cc_major,
                            performance_mode=s.performance_mode, user_sizes=s.capture_sizes)


def _fa3_notes(w: Workload, p: LaunchPlan, opts: PolicyOptions) -> list[str]:
    d = p.details
    return [f"static bound {d['num_splits_static']} (scratch), dynamic {fmt_range(p.splits)}, kBlockN {d['kBlockN']}"]


def _fi_notes(w: Workload, p: LaunchPlan, opts: PolicyOptions) -> list[str]:
    d = p.details
    occ = f", occupancy {d['occupancy']} CTA/SM" if "occupancy" in d else ""
    return [f"{'CUDA graph' if d['cuda_graph'] else 'eager'}{occ}, padded batch {d['padded_batch_size']}"]


# ------------------------------------------------------------------------------------------
# the registry


POLICIES: dict[str, Policy] = {}


def _register(p: Policy) -> None:
    POLICIES[p.name] = p


_register(Policy("vllm", "vLLM Triton unified attention", "vllm 0.33.0 triton_unified_attention.py", "any",
                 "no (2D/3D switch depends on the batch); yes with VLLM_BATCH_INVARIANT",
                 sweep_rows=lambda wl, g, o, b, ls: vllm_unified.sweep_rows(wl, g, o.vllm, b, ls)))
_register(Policy("sglang", "SGLang Triton decode", "sglang 0.5.23 decode_attention.py / metadata.py", "any",
                 "no (splits depend on Lmax, Lmin and the batch); yes in deterministic mode (tile 256)",
                 sweep_rows=lambda wl, g, o, b, ls: sglang_triton.sweep_rows(wl, g, o.sglang, b, ls)))
_register(Policy(
    "vllm-paged", "vLLM legacy PagedAttention v1/v2", "vllm 0.11.0 paged_attn.py + csrc/attention", "cuda",
    "no (v1/v2 choice depends on B*h and max length; v2 partitions are per sequence)",
    build=lambda w, g, o: vllm_paged_attention.plan_vllm_paged_attention(w, g), live_rows=_one,
    tile_keys=_const("BLOCK_SIZE", 16), notes=lambda w, p, o: [f"{p.details['version']}"],
    length_key=vllm_paged_attention.length_key))
_register(Policy(
    "vllm-rocm", "vLLM ROCm custom paged attention", "vllm csrc/rocm/attention.cu @4388f06c", "rocm",
    "yes (256-token partitions per sequence)",
    build=lambda w, g, o: vllm_rocm.plan_vllm_rocm(w, g, layer=o.layer), live_rows=_group,
    tile_keys=lambda w, p: vllm_rocm.PARTITION_SIZE, notes=lambda w, p, o: [p.details["kernel"]],
    length_key=vllm_rocm.length_key))
_register(Policy(
    "fa2", "FlashAttention-2 (flash_attn_with_kvcache)", "flash-attention@0251105a csrc/flash_attn", "cuda",
    "no (num_splits from B, heads and the batch-max length)",
    build=lambda w, g, o: flash_attn2.plan_flash_attn2(w, g, layer=o.layer),
    live_rows=lambda w, p: w.group_size if p.details["seqlenq_ngroups_swapped"] else 1,
    tile_keys=_const("kBlockN", 128),
    notes=lambda w, p, o: [] if p.details["paged_kv"] else [
        f"contiguous KV cache: upstream FA2 pages must be multiples of 256 (block size {w.block_size})"],
    length_key=flash_attn2.length_key))
_register(Policy(
    "fa3", "FlashAttention-3 (as vLLM drives it)", "vllm-project/flash-attention@617264c1 hopper/ (vLLM's fork)", "cuda",
    "no (static bound from max length, dynamic splits from the batch's total blocks); yes with VLLM_BATCH_INVARIANT",
    build=_fa3, live_rows=_group, tile_keys=_const("kBlockN", 128), notes=_fa3_notes))
#: what FlashInfer's two paths share: a tile holds one KV head's query group and one page of keys
_FLASHINFER = dict(live_rows=_group, tile_keys=lambda w, p: w.block_size, notes=_fi_notes,
                   length_key=flashinfer.length_key)
_register(Policy(
    "flashinfer", "FlashInfer decode (CUDA cores)", "flashinfer@fb28d724 scheduler.cuh", "cuda",
    "no (one chunk size binary-searched over the batch)",
    build=lambda w, g, o: flashinfer.plan_flashinfer(w, g, occupancy=o.flashinfer_occupancy, cuda_graph=o.cuda_graph),
    **_FLASHINFER))
_register(Policy(
    "flashinfer-tc", "FlashInfer decode (tensor cores)", "flashinfer@fb28d724 scheduler.cuh (prefill plan)", "cuda",
    "no; yes with fixed_split_size",
    build=lambda w, g, o: flashinfer.plan_flashinfer_tc(w, g, cuda_graph=o.cuda_graph, layer=o.layer),
    **_FLASHINFER))
_register(Policy(
    "aiter", "AMD aiter unified attention", "aiter@e4048607 unified_attention.py", "rocm",
    "no (segment count from the batch's 2D program count)",
    build=lambda w, g, o: aiter.plan_aiter(w, g, layer=o.layer), live_rows=_group,
    tile_keys=_const("TILE_SIZE", 64), notes=lambda w, p, o: [f"{p.details['path']} ({p.details['arch']})"],
    length_key=aiter.length_key))
_register(Policy(
    "flashmla", "FlashMLA (MLA only)", "FlashMLA@9241ae3e get_decoding_sched_meta.cu", "cuda",
    "no (greedy packing of the whole batch into SM parts)",
    build=lambda w, g, o: flashmla.plan_flashmla(w, g),
    live_rows=lambda w, p: min(64, w.group_size * w.max_seqlen_q), tile_keys=lambda w, p: flashmla.block_size_n,
    notes=lambda w, p, o: [f"{p.details['num_sm_parts']} SM parts"],
    length_key=flashmla.length_key))
_register(Policy(
    "flashdecoding", "FlashDecoding at S* (chapter baseline)", "decode-attention chapter 'The grid'", "any",
    "no (S* = ceil(N_SM / G_2D) depends on B)",
    build=lambda w, g, o: flashdecoding.plan_flashdecoding(w, g), live_rows=_group, tile_keys=lambda w, p: 16,
    sweep_rows=lambda wl, g, o, b, ls: flashdecoding.sweep_rows(wl, g, b, ls)))

POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)


def resolve_policies(text: str | None) -> tuple[str, ...]:
    """Comma list of policy names ("all" or None = every policy), validated."""
    if text is None or text.strip().lower() == "all":
        return POLICY_NAMES
    if not text.strip(" ,"):
        raise ConfigError(f"--policies {text!r} is empty; give a comma list of policies, or 'all' "
                          f"(known: {', '.join(POLICY_NAMES)})")
    names = []
    for raw in text.split(","):
        n = raw.strip().lower()
        if not n:
            continue
        if n not in POLICIES:
            raise UnknownNameError("policy", n, POLICY_NAMES)
        if n not in names:
            names.append(n)
    if not names:
        raise UnknownNameError("policy", text, POLICY_NAMES)
    return tuple(names)


def platform_reason(policy: Policy, gpu: GPUSpec) -> str | None:
    if policy.platform == "cuda" and gpu.vendor != "nvidia":
        return f"{policy.title} runs on CUDA (NVIDIA) GPUs only; {gpu.name} is {gpu.vendor}"
    if policy.platform == "rocm" and gpu.vendor != "amd":
        return f"{policy.title} runs on ROCm (AMD) GPUs only; {gpu.name} is {gpu.vendor}"
    return None


__all__ = ["POLICIES", "POLICY_NAMES", "Policy", "PolicyOptions", "platform_reason", "resolve_policies"]
