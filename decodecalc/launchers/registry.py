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
from collections.abc import Callable
from typing import TypedDict

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
    triton_mla,
    trtllm,
    trtllm_gen,
    vllm_paged_attention,
    vllm_rocm,
    vllm_unified,
    xqa,
)
from decodecalc.launchers.base import LaunchPlan, LengthKey
from decodecalc.launchers.details import (
    AiterDetails,
    Fa2Details,
    Fa3Details,
    FlashInferDecodeDetails,
    FlashInferDetails,
    FlashMlaDetails,
    MmhaDetails,
    PagedAttentionDetails,
    RocmDetails,
    TritonMlaDetails,
    TrtllmGenDetails,
    TrtllmXqaDetails,
    XqaDetails,
)
from decodecalc.launchers.backend_spec import BackendSpec, EngineUse, NotesFn, PlanFn, PolicyOptions, TileFn
from decodecalc.launchers.names import Backend, Engine
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload


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
        num_splits = opts.vllm.flash_attn_max_num_splits_for_cuda_graph  # vllm/config/attention.py L61, default 32
    return flash_attn3.plan_flash_attn3(w, gpu, num_splits=num_splits, layer=opts.layer)


def _fa3_cuda_graph(w: Workload, gpu: GPUSpec, opts: PolicyOptions) -> LaunchPlan:
    """FA3 as vLLM runs it under full CUDA graphs (its cap on the splits applies)."""
    import dataclasses

    graphs = dataclasses.replace(opts.vllm, cudagraph_mode="FULL_AND_PIECEWISE")
    return _fa3(w, gpu, dataclasses.replace(opts, vllm=graphs))


def _fa3_sglang(w: Workload, gpu: GPUSpec, opts: PolicyOptions) -> LaunchPlan:
    """FA3 as SGLang runs it: num_splits 0, the FA runtime's own split sizing, outside deterministic inference
    (sglang/srt/layers/attention/flashattention_backend.py L338-341, 0.5.23)."""
    return flash_attn3.plan_flash_attn3(w, gpu, num_splits=1 if opts.sglang.deterministic else 0, layer=opts.layer)


def _xqa_note(p: LaunchPlan) -> str:
    d = p.details_as(XqaDetails)
    return f"{d.kernel}, {d.nbSubSeqPerSeq} sub-sequences per sequence, maxSeqLen {d.maxSeqLen:,} (block table)"


def _trtllm_gen_note(d: TrtllmGenDetails) -> str:
    return f"{d.numCtasPerSeqKv} KV CTAs per sequence, {d.multiCtasKvMode}"


def _trtllm_xqa_note(d: TrtllmXqaDetails) -> str:
    return f"multi_block {d.multi_block} ({d.kernel})"


def _mmha_note(d: MmhaDetails) -> str:
    return f"seq_len_tile {d.seq_len_tile}, {d.block_size} threads (assumed)"


def _triton_mla_note(d: TritonMlaDetails) -> str:
    return f"num_kv_splits {d.num_kv_splits} from max_seq_len {d.max_seq_len:,}"


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
    d = p.details_as(Fa3Details)
    return [f"static bound {d.num_splits_static} (scratch), dynamic {fmt_range(p.splits)}, kBlockN {d.kBlockN}"]


def _fi_notes(w: Workload, p: LaunchPlan, opts: PolicyOptions) -> list[str]:
    d = p.details_as(FlashInferDetails)
    occ = f", occupancy {d.occupancy} CTA/SM" if isinstance(d, FlashInferDecodeDetails) else ""
    return [f"{'CUDA graph' if d.cuda_graph else 'eager'}{occ}, padded batch {d.padded_batch_size}"]


# ------------------------------------------------------------------------------------------
# the registry


BACKEND_SPECS: dict[Backend, BackendSpec] = {}
#: the same table by CLI name (compare's policies)
POLICIES: dict[str, BackendSpec] = {}


def _register(p: BackendSpec) -> None:
    BACKEND_SPECS[p.backend] = p
    POLICIES[p.name] = p


class _SharedFields(TypedDict, total=False):
    """The BackendSpec fields that two entries share (a TypedDict, so ``**`` keeps each field's type)."""

    live_rows: TileFn
    tile_keys: TileFn
    notes: NotesFn
    length_key: Callable[[Workload], LengthKey]
    install: str


_V, _S = Engine.VLLM, Engine.SGLANG
#: what verify needs to run FlashInfer's kernels (the wrapper's two paths and XQA)
_FI_INSTALL = "flashinfer-python (pip install flashinfer-python)"

_register(BackendSpec(
    Backend.VLLM, "vLLM Triton unified attention", "vllm 0.33.0 triton_unified_attention.py", "any",
    "no (2D/3D switch depends on the batch); yes with VLLM_BATCH_INVARIANT",
    sweep_rows=lambda wl, g, o, b, ls: vllm_unified.sweep_rows(wl, g, o.vllm, b, ls),
    families=("vllm_2d", "vllm_3d", "vllm_reduce", "vllm_reduce_spill"),
    engines=(EngineUse(engine=_V, name="TRITON_ATTN", select="VLLM_ATTENTION_BACKEND=TRITON_ATTN",
                       plan=lambda w, g, o: vllm_unified.plan_vllm(w, g, o.vllm, layer=o.layer).plan),)))
_register(BackendSpec(
    Backend.SGLANG, "SGLang Triton decode", "sglang 0.5.23 decode_attention.py / metadata.py", "any",
    "no (splits depend on Lmax, Lmin and the batch); yes in deterministic mode (tile 256)",
    sweep_rows=lambda wl, g, o, b, ls: sglang_triton.sweep_rows(wl, g, o.sglang, b, ls),
    families=("sglang_stage1", "sglang_mha_stage1", "sglang_stage2", "sglang_stage1_fp8"), blockless=True,
    engines=(EngineUse(engine=_S, name="triton", select="--attention-backend triton",
                       plan=lambda w, g, o: sglang_triton.plan_sglang(w, g, o.sglang, layer=o.layer).plan),),
    attention="any"))
_register(BackendSpec(
    Backend.VLLM_PAGED, "vLLM legacy PagedAttention v1/v2", "vllm 0.11.0 paged_attn.py + csrc/attention", "cuda",
    "no (v1/v2 choice depends on B*h and max length; v2 partitions are per sequence)",
    build=lambda w, g, o: vllm_paged_attention.plan_vllm_paged_attention(w, g), live_rows=_one,
    tile_keys=_const("BLOCK_SIZE", 16), notes=lambda w, p, o: [p.details_as(PagedAttentionDetails).version],
    length_key=vllm_paged_attention.length_key))
_register(BackendSpec(
    Backend.VLLM_ROCM, "vLLM ROCm custom paged attention", "vllm csrc/rocm/attention.cu @4388f06c", "rocm",
    "yes (256-token partitions per sequence)",
    build=lambda w, g, o: vllm_rocm.plan_vllm_rocm(w, g, layer=o.layer), live_rows=_group,
    tile_keys=lambda w, p: vllm_rocm.PARTITION_SIZE, notes=lambda w, p, o: [p.details_as(RocmDetails).kernel],
    length_key=vllm_rocm.length_key,
    engines=(EngineUse(engine=_V, name="ROCM_ATTN", select="VLLM_ATTENTION_BACKEND=ROCM_ATTN"),)))
_register(BackendSpec(
    Backend.FA2, "FlashAttention-2 (flash_attn_with_kvcache)", "flash-attention@0251105a csrc/flash_attn", "cuda",
    "no (num_splits from B, heads and the batch-max length)",
    build=lambda w, g, o: flash_attn2.plan_flash_attn2(w, g, layer=o.layer),
    live_rows=lambda w, p: w.group_size if p.details_as(Fa2Details).seqlenq_ngroups_swapped else 1,
    tile_keys=_const("kBlockN", 128),
    notes=lambda w, p, o: [] if p.details_as(Fa2Details).paged_kv else [
        f"contiguous KV cache: upstream FA2 pages must be multiples of 256 (block size {w.block_size})"],
    length_key=flash_attn2.length_key,
    families=("fa2_fwd", "fa2_fwd_plain", "fa2_combine"), blockless=True,
    profiler_roles=(("main", ("flash_fwd_splitkv_kernel", "flash_fwd_kernel")), ("merge", ("splitkv_combine",))),
    install="flash-attn (pip install flash-attn), or set DECODECALC_FA2_LIB to a build of its flash_attn_2_cuda "
            "extension"))
_register(BackendSpec(
    Backend.FA3, "FlashAttention-3 (as vLLM drives it)", "vllm-project/flash-attention@617264c1 hopper/ (vLLM's fork)",
    "cuda",
    "no (static bound from max length, dynamic splits from the batch's total blocks); yes with VLLM_BATCH_INVARIANT",
    build=_fa3, live_rows=_group, tile_keys=_const("kBlockN", 128), notes=_fa3_notes,
    families=("fa3_fwd", "fa3_combine", "fa3_fwd_fp8", "fa3_fwd_fp8_wide"),
    profiler_roles=(("main", ("FlashAttnFwdSm90",)), ("merge", ("FlashAttnFwdCombine",))),
    install="vllm (its vllm_flash_attn/_vllm_fa3_C.abi3.so), or set DECODECALC_FA3_LIB to a build of it",
    engines=(EngineUse(engine=_V, name="FLASH_ATTN", select="VLLM_ATTENTION_BACKEND=FLASH_ATTN", plan=_fa3_cuda_graph),
             EngineUse(engine=_S, name="fa3", select="--attention-backend fa3", plan=_fa3_sglang))))
def _flashinfer_engines(plan: PlanFn) -> tuple[EngineUse, ...]:
    """vLLM's FLASHINFER and SGLang's flashinfer backends, each running a path's launch under CUDA graphs (which
    path is the engine's rule: launchers/engine_select.py)."""
    return (EngineUse(engine=_V, name="FLASHINFER", select="VLLM_ATTENTION_BACKEND=FLASHINFER", plan=plan),
            EngineUse(engine=_S, name="flashinfer", select="--attention-backend flashinfer", plan=plan))


#: what FlashInfer's two paths share: a tile holds one KV head's query group and one page of keys
_FLASHINFER = _SharedFields(live_rows=_group, tile_keys=lambda w, p: w.block_size, notes=_fi_notes,
                            length_key=flashinfer.length_key, install=_FI_INSTALL)
_register(BackendSpec(
    Backend.FLASHINFER, "FlashInfer decode (CUDA cores)", "flashinfer@fb28d724 scheduler.cuh", "cuda",
    "no (one chunk size binary-searched over the batch)",
    build=lambda w, g, o: flashinfer.plan_flashinfer(w, g, occupancy=o.flashinfer_occupancy, cuda_graph=o.cuda_graph),
    families=("flashinfer_decode", "flashinfer_merge", "flashinfer_decode_fp8"),
    profiler_roles=(("main", ("BatchDecodeWithPagedKVCacheKernel",)), ("merge", ("MergeStates",))),
    engines=_flashinfer_engines(lambda w, g, o: flashinfer.plan_flashinfer(w, g, cuda_graph=True)),
    **_FLASHINFER))
_register(BackendSpec(
    Backend.FLASHINFER_TC, "FlashInfer decode (tensor cores)", "flashinfer@fb28d724 scheduler.cuh (prefill plan)", "cuda",
    "no; yes with fixed_split_size",
    build=lambda w, g, o: flashinfer.plan_flashinfer_tc(w, g, cuda_graph=o.cuda_graph, layer=o.layer),
    families=("flashinfer_tc", "flashinfer_merge", "flashinfer_tc_fp8"),
    profiler_roles=(("main", ("BatchPrefillWithPagedKVCacheKernel",)), ("merge", ("MergeStates",))),
    engines=_flashinfer_engines(lambda w, g, o: flashinfer.plan_flashinfer_tc(w, g, cuda_graph=True)),
    **_FLASHINFER))
#: XQA as the engines drive it: the block table at max_model_len's width (vLLM: flashinfer.py L1926; SGLang:
#: trtllm_mha_backend.py L351-353)
_XQA = _SharedFields(live_rows=_group, tile_keys=_const("tile_tokens", 256), notes=lambda w, p, o: [_xqa_note(p)],
                     install=_FI_INSTALL)
_XQA_ENGINES = (EngineUse(engine=_V, name="FLASHINFER", select="VLLM_ATTENTION_BACKEND=FLASHINFER (SM90: decodes "
                          "with XQA when the cubins are available)"),
                EngineUse(engine=_S, name="trtllm_mha", select="--attention-backend trtllm_mha"))
_register(BackendSpec(
    Backend.XQA, "FlashInfer XQA (mha.cu)", f"{xqa.SRC_MHA} L3123-3136", "cuda",
    "no (sub-sequences from B * Hkv and the block table's width, the same for every request)",
    build=lambda w, g, o: xqa.plan_xqa(w, g, max_model_len=o.max_model_len, kernel="mha"),
    families=("xqa", "xqa_wide", "xqa_merge"),
    family_fallbacks=(("xqa", "flashinfer_tc"), ("xqa_wide", "flashinfer_tc"), ("xqa_merge", "flashinfer_merge")),
    profiler_roles=(("main", ("kernel_mha",)),), engines=_XQA_ENGINES, **_XQA))
_register(BackendSpec(
    Backend.XQA_FP8, "FlashInfer XQA (mha_sm90.cu, fp8 KV)", f"{xqa.SRC_SM90} L3059-3073", "cuda",
    "no (sub-sequences from B * Hkv and the block table's width; a request uses min(its 64-token tiles, that))",
    build=lambda w, g, o: xqa.plan_xqa(w, g, max_model_len=o.max_model_len, kernel="sm90"),
    families=("xqa_sm90", "xqa_sm90_merge"),
    family_fallbacks=(("xqa_sm90", "flashinfer_tc"), ("xqa_sm90_merge", "flashinfer_merge")),
    profiler_roles=(("main", ("kernel_mha",)),), engines=_XQA_ENGINES, **_XQA))
_register(BackendSpec(
    Backend.TRTLLM_GEN, "FlashInfer trtllm-gen decode (SM100)", trtllm_gen.SRC + " L574-793", "cuda",
    "no (KV CTAs from the batch's CTA count and max_seq_len)",
    build=lambda w, g, o: trtllm_gen.plan_trtllm_gen(w, g, max_seq_len=xqa.default_max_seq_len(w, o.max_model_len)),
    live_rows=_group, tile_keys=lambda w, p: trtllm_gen.STEP_KV,
    notes=lambda w, p, o: [_trtllm_gen_note(p.details_as(TrtllmGenDetails))],
    engines=(EngineUse(engine=_V, name="FLASHINFER", select="VLLM_ATTENTION_BACKEND=FLASHINFER (SM100: decodes with "
                       "trtllm-gen when the cubins are available)"),
             EngineUse(engine=_S, name="trtllm_mha", select="--attention-backend trtllm_mha"))))
_register(BackendSpec(
    Backend.TRTLLM_XQA, "TensorRT-LLM XQA (multi-block)", f"{trtllm.SRC_COMMON} L357-482", "cuda",
    "no (the multi-block count follows the batch's longest sequence and size)",
    build=lambda w, g, o: trtllm.plan_trtllm_xqa(w, g, settings=o.trtllm), live_rows=_group,
    tile_keys=_const("tile_tokens", 256), notes=lambda w, p, o: [_trtllm_xqa_note(p.details_as(TrtllmXqaDetails))],
    families=("xqa", "xqa_wide", "xqa_sm90", "xqa_merge", "xqa_sm90_merge"), profiler_roles=(("main", ("kernel_mha",)),), install=_FI_INSTALL,
    engines=(EngineUse(engine=Engine.TRTLLM, name="xqa", select="enable_xqa (default) with multi_block_mode; "
                       "TRTLLM_XQA_BLOCKS_PER_SEQUENCE=N sets the count"),)))
_register(BackendSpec(
    Backend.TRTLLM_MMHA, "TensorRT-LLM masked MHA (multi-block)", f"{trtllm.SRC_MMHA} L99-149", "cuda",
    "no (blocks per sequence from B * Hq and the batch's longest sequence)",
    build=lambda w, g, o: trtllm.plan_trtllm_mmha(w, g, settings=o.trtllm, layer=o.layer), live_rows=_one,
    tile_keys=_const("timesteps_per_block", 128),
    notes=lambda w, p, o: [_mmha_note(p.details_as(MmhaDetails))],
    engines=(EngineUse(engine=Engine.TRTLLM, name="mmha", select="where XQA does not serve or gain (enable_xqa off, "
                       "plain MHA); TRTLLM_MMHA_BLOCKS_PER_SEQUENCE=N with TRTLLM_ENABLE_MMHA_MULTI_BLOCK_DEBUG=1"),)))
_register(BackendSpec(
    Backend.AITER, "AMD aiter unified attention", "aiter@e4048607 unified_attention.py", "rocm",
    "no (segment count from the batch's 2D program count)",
    build=lambda w, g, o: aiter.plan_aiter(w, g, layer=o.layer), live_rows=_group,
    tile_keys=_const("TILE_SIZE", 64), notes=lambda w, p, o: [f"{p.details_as(AiterDetails).path} ({p.details_as(AiterDetails).arch})"],
    length_key=aiter.length_key,
    engines=(EngineUse(engine=_S, name="aiter", select="--attention-backend aiter"),)))
_register(BackendSpec(
    Backend.FLASHMLA, "FlashMLA (MLA only)", "FlashMLA@9241ae3e get_decoding_sched_meta.cu", "cuda",
    "no (greedy packing of the whole batch into SM parts)",
    build=lambda w, g, o: flashmla.plan_flashmla(w, g),
    live_rows=lambda w, p: min(64, w.group_size * w.max_seqlen_q), tile_keys=lambda w, p: flashmla.block_size_n,
    notes=lambda w, p, o: [f"{p.details_as(FlashMlaDetails).num_sm_parts} SM parts"],
    length_key=flashmla.length_key,
    families=("flashmla_fwd", "flashmla_combine"), blockless=True,
    profiler_roles=(("main", ("flash_fwd_splitkv_mla", "splitkv_mla")), ("merge", ("mla_combine",))),
    install="vllm (its _flashmla_C.abi3.so), or set DECODECALC_FLASHMLA_LIB to a build of it",
    engines=(EngineUse(engine=_V, name="FLASHMLA", select="VLLM_ATTENTION_BACKEND=FLASHMLA"),
             EngineUse(engine=_S, name="flashmla", select="--attention-backend flashmla")), attention="mla"))
_register(BackendSpec(
    Backend.TRITON_MLA, "vLLM TRITON_MLA decode (MLA only)", f"{triton_mla.SRC_BACKEND} L40-50", "any",
    "no (one split count from the batch's longest sequence)",
    build=lambda w, g, o: triton_mla.plan_triton_mla(w, g, version=o.vllm.version if o.vllm.version == "0.33.0"
                                                     else "0.34.0", batch_invariant=o.batch_invariant, layer=o.layer),
    live_rows=lambda w, p: min(triton_mla.BLOCK_H, w.group_size), tile_keys=lambda w, p: int(p.tokens_per_split[0]),
    notes=lambda w, p, o: [_triton_mla_note(p.details_as(TritonMlaDetails))],
    engines=(EngineUse(engine=_V, name="TRITON_MLA", select="VLLM_ATTENTION_BACKEND=TRITON_MLA"),), attention="mla"))
_register(BackendSpec(
    Backend.FLASHDECODING, "FlashDecoding at S* (chapter baseline)", "decode-attention chapter 'The grid'", "any",
    "no (S* = ceil(N_SM / G_2D) depends on B)",
    build=lambda w, g, o: flashdecoding.plan_flashdecoding(w, g), live_rows=_group, tile_keys=lambda w, p: 16,
    sweep_rows=lambda wl, g, o, b, ls: flashdecoding.sweep_rows(wl, g, b, ls), attention="any"))

#: the backends the time model has kernel families for, other than the engines' Triton kernels
TIMED_BACKENDS: tuple[Backend, ...] = tuple(b for b, s in BACKEND_SPECS.items()
                                            if s.families and b not in (Backend.VLLM, Backend.SGLANG))
#: the compiled backends verify captures through the CUDA profiler
PROFILED_BACKENDS: tuple[Backend, ...] = tuple(b for b, s in BACKEND_SPECS.items() if s.profiler_roles)


def spec(backend: Backend | str) -> BackendSpec:
    """The registered spec of ``backend`` (an enum member or its CLI name)."""
    try:
        return BACKEND_SPECS[Backend(backend)]
    except ValueError:
        raise UnknownNameError("backend", str(backend), POLICY_NAMES) from None


def engine_uses(engine: Engine) -> tuple[tuple[BackendSpec, EngineUse], ...]:
    """Every backend ``engine`` can run, with how it runs it, in registration order."""
    return tuple((s, u) for s in BACKEND_SPECS.values() for u in s.engines if u.engine is engine)


POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)


def resolve_policies(text: str | None) -> tuple[str, ...]:
    """Comma list of policy names ("all" or None = every policy), validated."""
    if text is None or text.strip().lower() == "all":
        return POLICY_NAMES
    if not text.strip(" ,"):
        raise ConfigError(f"--policies {text!r} is empty; give a comma list of policies, or 'all' "
                          f"(known: {', '.join(POLICY_NAMES)})")
    from decodecalc.limits import split_items

    names = []
    for raw in split_items(text, "--policies", "vllm,sglang"):  # an empty item is an error, not skipped
        n = raw.lower()
        if n not in POLICIES:
            raise UnknownNameError("policy", n, POLICY_NAMES)
        if n not in names:
            names.append(n)
    if not names:
        raise UnknownNameError("policy", text, POLICY_NAMES)
    return tuple(names)


def platform_reason(policy: BackendSpec, gpu: GPUSpec) -> str | None:
    if policy.platform == "cuda" and gpu.vendor != "nvidia":
        return f"{policy.title} runs on CUDA (NVIDIA) GPUs only; {gpu.name} is {gpu.vendor}"
    if policy.platform == "rocm" and gpu.vendor != "amd":
        return f"{policy.title} runs on ROCm (AMD) GPUs only; {gpu.name} is {gpu.vendor}"
    return None


__all__ = ["BACKEND_SPECS", "POLICIES", "POLICY_NAMES", "BackendSpec", "EngineUse", "PolicyOptions", "platform_reason", "resolve_policies"]
