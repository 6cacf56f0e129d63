"""The records of the backend table (:mod:`decodecalc.launchers.registry` registers one :class:`BackendSpec` per
modeled backend): the options every planner takes, how an engine runs a backend, and the spec itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from decodecalc.launchers import sglang_triton, trtllm, vllm_unified
from decodecalc.launchers.base import LaunchPlan, LengthKey, SweepRow
from decodecalc.launchers.names import Backend, Engine
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyOptions:
    """Engine settings and the run-time inputs some planners need."""

    vllm: vllm_unified.VllmSettings = field(default_factory=vllm_unified.VllmSettings)
    sglang: sglang_triton.SglangSettings = field(default_factory=sglang_triton.SglangSettings)
    trtllm: trtllm.TrtllmSettings = field(default_factory=trtllm.TrtllmSettings)
    layer: str = "global"
    #: FlashInfer CUDA-core CTAs/SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor); None = documented bound
    flashinfer_occupancy: int | None = None
    #: what the predicted times are for (decodecalc.timemodel.profile.REGIMES); the planners ignore it
    regime: str = "back-to-back"
    #: XQA / trtllm-gen cubins available (flashinfer-cubin installed or NVIDIA's cubin repository reachable): what
    #: vLLM's FlashInfer backend needs to decode with them (--cubins)
    cubins: bool = True
    #: vLLM --attention-config.use_trtllm_attention (None: auto, decode with XQA / trtllm-gen whenever supported)
    use_trtllm_attention: bool | None = None
    #: the engine's max_model_len (--max-model-len): sizes the block table XQA reads its maxSeqLen from; None: the
    #: model's context length
    max_model_len: int | None = None
    #: XQA_NB_SUB_SEQ, FlashInfer XQA's override of its sub-sequence count (None: unset)
    xqa_nb_sub_seq: int | None = None

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


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineUse:
    """How one engine runs a backend's kernels: its name for the backend, how a user selects it, and the launch the
    engine makes (its own options applied: FA3's split cap under CUDA graphs, FlashInfer's CUDA-graph plan)."""

    engine: Engine
    #: the engine's own name for its backend (VLLM_ATTENTION_BACKEND value, SGLang --attention-backend value)
    name: str
    #: what the user sets to run it
    select: str
    #: (workload, gpu, options) -> the launch as this engine drives it under CUDA graphs; None = the spec's ``build``
    plan: PlanFn | None = None


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """One modeled backend: its launcher, its time model's families, how verify captures it and who runs it.

    The one table every other part iterates over (compare's rows, the time model's kernels, verify's systems, tune's
    backend levers): adding a backend adds its launcher module, one ``_register`` entry here, its time family
    (:mod:`decodecalc.timemodel.backends`) and its tests."""

    backend: Backend
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
    #: the time model's kernel families of its launches (decodecalc.timemodel.profile); () = no time model
    families: tuple[str, ...] = ()
    #: (new family, the family whose parameters it takes until a profile fits it): a family a shipped profile
    #: predates starts from another's numbers and is listed as uncalibrated (timemodel.profile.FAMILY_FALLBACKS)
    family_fallbacks: tuple[tuple[str, str], ...] = ()
    #: its measured launches cover every KV block size (the time model's domain ignores the block size)
    blockless: bool = False
    #: (role, substrings of the kernel names CUPTI reports) for verify's capture of a compiled backend; () = not
    #: captured through the profiler
    profiler_roles: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: what verify needs installed to run it
    install: str = ""
    #: the engines that run it, and how
    engines: tuple[EngineUse, ...] = ()
    #: the attention it serves: "mha" (MHA / GQA / MQA), "mla", or "any"
    attention: str = "mha"

    def serves(self, is_mla: bool) -> bool:
        """Whether it serves a model of this kind (MLA or not) at all."""
        return self.attention == "any" or (self.attention == "mla") == is_mla

    @property
    def name(self) -> str:
        return self.backend.value

    def use(self, engine: Engine) -> EngineUse | None:
        """How ``engine`` runs this backend (None: it does not)."""
        return next((u for u in self.engines if u.engine is engine), None)
