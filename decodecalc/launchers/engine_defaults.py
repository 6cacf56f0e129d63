"""The attention backend each engine picks by default, and the kernels that backend runs for a workload.

vLLM 0.33.0 and 0.34.0 (identical selection: ``vllm/platforms/cuda.py`` ``_get_backend_priorities`` v33 L84-181 /
v34 L81-178, the first backend whose ``validate_configuration`` passes, ``vllm/v1/attention/backend.py`` v33 L279 /
v34 L282); SGLang 0.5.23 (``sglang/srt/arg_groups/model_override_base.py`` ``get_default_attn_backend`` L277-351,
after the model overrides and deterministic inference, ``overrides.py`` L1093-1270); TensorRT-LLM 1.2.0rc2 (XQA where
it is supported and may gain, else masked MHA; trtllm-gen on SM100).

Each backend an engine skips is listed with the check that rejected it and its source line. The modeled decode
kernels are the registered backends (:mod:`decodecalc.launchers.registry`); a backend decodecalc has no launcher
for (FA4, FlashAttention MLA, FlashInfer MLA, CUTLASS MLA) is named and has no kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from decodecalc.errors import ConfigError
from decodecalc.launchers import trtllm
from decodecalc.launchers.names import Backend, Engine
from decodecalc.launchers.registry import PolicyOptions
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

#: the engine releases whose selection rule is modeled, newest first (the default)
VLLM_VERSIONS = ("0.34.0", "0.33.0")
SGLANG_VERSIONS = ("0.5.23",)
TRTLLM_VERSIONS = ("1.2.0rc2",)
VERSIONS = {Engine.VLLM: VLLM_VERSIONS, Engine.SGLANG: SGLANG_VERSIONS, Engine.TRTLLM: TRTLLM_VERSIONS}
#: the FlashInfer release each engine release pins (its rules decide XQA's and trtllm-gen's launches)
FLASHINFER_PIN = {(Engine.VLLM, "0.33.0"): "0.7.2.post1", (Engine.VLLM, "0.34.0"): "0.7.3",
                  (Engine.SGLANG, "0.5.23"): "0.7.2"}

_CUDA = "vllm/platforms/cuda.py"
_FA = "vllm/v1/attention/backends/flash_attn.py"
_FA_UTILS = "vllm/v1/attention/backends/fa_utils.py"
_FI = "vllm/v1/attention/backends/flashinfer.py"
_SG = "sglang 0.5.23 python/sglang/srt/arg_groups"


def _v(version: str, v33: str, v34: str) -> str:
    """A vLLM source line of the release at hand."""
    return f"vllm {version} " + (v33 if version == "0.33.0" else v34)


@dataclass(frozen=True, slots=True)
class Skipped:
    """A backend the engine tried before the one it picked, and why it was rejected."""

    name: str
    reason: str
    source: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "reason": self.reason, "source": self.source}


@dataclass(frozen=True, slots=True, kw_only=True)
class DefaultBackend:
    """The backend an engine release picks for a model on a GPU, and the modeled kernels it decodes with."""

    engine: Engine
    version: str
    #: the engine's name for it (VLLM_ATTENTION_BACKEND / --attention-backend value)
    name: str
    #: what runs, in words ("FA3", "XQA (mha.cu)")
    kernel_note: str
    #: decodecalc's modeled kernels; None when decodecalc has no launcher for them
    backend: Backend | None
    why: str
    source: str
    skipped: tuple[Skipped, ...] = field(default=())

    def to_json(self) -> dict[str, object]:
        return {"engine": self.engine.value, "version": self.version, "name": self.name, "runs": self.kernel_note,
                "kernel": self.backend.value if self.backend else None, "why": self.why, "source": self.source,
                "skipped": [s.to_json() for s in self.skipped]}


def check_version(engine: Engine, version: str | None) -> str:
    """``version`` (None: the newest modeled) checked against the modeled releases of ``engine``."""
    known = VERSIONS[engine]
    if version is None:
        return known[0]
    if version not in known:
        raise ConfigError(f"{engine.display_name} version {version!r} has no modeled backend selection; known: "
                          f"{', '.join(known)}")
    return version


# ------------------------------------------------------------------------------------------------------------------
# vLLM


def fa_version(w: Workload, gpu: GPUSpec, batch_invariant: bool) -> int:
    """The FlashAttention version vLLM's FLASH_ATTN runs (fa_utils.py L74-206, both releases): FA3 on SM 9.x (FA4 above
    head dim 256), FA4 on SM 10.x (FA2 above head dim 128 but 256 and 192, and with VLLM_BATCH_INVARIANT), else
    FA2."""
    major = (gpu.compute_capability or (0, 0))[0]
    if major == 9:
        return 4 if w.head_size > 256 else 3
    if major == 10:
        if batch_invariant or (w.head_size > 128 and w.head_size not in (192, 256)):
            return 2
        return 4
    return 2


def _fa_reason(w: Workload, gpu: GPUSpec, opts: PolicyOptions, version: str) -> str | None:
    """Why FLASH_ATTN fails validate_configuration (None: it passes)."""
    d = w.head_size
    major = (gpu.compute_capability or (0, 0))[0]
    if d % 8:
        return f"head size {d} is not a multiple of 8 ({_v(version, _FA, _FA)} L426)"
    if d > 256 and major not in (9, 10, 11):
        return f"head size {d} > 256 needs FA4, which {gpu.arch} lacks ({_v(version, _FA, _FA)} L425-436)"
    kv = w.kv_cache_dtype
    if kv == "fp8_e5m2":
        return f"FlashAttention reads no fp8_e5m2 cache ({_v(version, _FA_UTILS, _FA_UTILS)} L293)"
    fav = fa_version(w, gpu, opts.batch_invariant)
    if kv.startswith("fp8") and not (fav == 3 or (fav == 4 and major in (9, 10))):
        return (f"an fp8 cache needs FA3 on SM90 or FA4; FA{fav} runs here "
                f"({_v(version, _FA_UTILS, _FA_UTILS)} L282-311)")
    if getattr(w.model, "attention_sinks", False) and fav == 2:
        return f"attention sinks need FA3 or FA4; FA2 runs here ({_v(version, _FA_UTILS, _FA_UTILS)} L319-322)"
    return None


def _flashinfer_reason(w: Workload, gpu: GPUSpec, opts: PolicyOptions, version: str) -> str | None:
    """Why FLASHINFER fails validate_configuration (None: it passes)."""
    from decodecalc.launchers.engine_select import vllm_trtllm_decode_reason

    cc = gpu.compute_capability or (0, 0)
    if w.head_size not in (64, 128, 256, 512):
        return f"head size {w.head_size} is not one of 64, 128, 256, 512 ({_v(version, _FI + ' L691-693', _FI + ' L693-695')})"
    if not (8, 0) <= cc <= (12, 1):
        return f"compute capability {cc[0]}.{cc[1]} is outside 8.0-12.1 ({_v(version, _FI + ' L696-705', _FI + ' L698-707')})"
    if opts.batch_invariant:
        return f"no batch invariance (VLLM_BATCH_INVARIANT) ({_v(version, 'vllm/v1/attention/backend.py L341', 'vllm/v1/attention/backend.py L344')})"
    if getattr(w.model, "attention_sinks", False) and vllm_trtllm_decode_reason(w, gpu, opts) is not None:
        return f"attention sinks need the XQA / trtllm-gen path ({_v(version, _FI + ' L707-726', _FI + ' L709-728')})"
    return None


def _vllm_mha(w: Workload, gpu: GPUSpec, opts: PolicyOptions, version: str) -> DefaultBackend:
    from decodecalc.launchers import engine_select

    major = (gpu.compute_capability or (0, 0))[0]
    order = ("FLASHINFER", "FLASH_ATTN", "TRITON_ATTN") if major == 10 else ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN")
    prio = _v(version, f"{_CUDA} L157-181", f"{_CUDA} L154-178")
    skipped: list[Skipped] = []
    for name in order:
        if name == "FLASH_ATTN":
            why = _fa_reason(w, gpu, opts, version)
            if why is None:
                fav = fa_version(w, gpu, opts.batch_invariant)
                backend = {3: Backend.FA3, 2: Backend.FA2}.get(fav)
                return DefaultBackend(engine=Engine.VLLM, version=version, name=name, kernel_note=f"FA{fav}",
                                      backend=backend, skipped=tuple(skipped),
                                      why=f"first valid backend in {gpu.arch}'s priority list; FA{fav} on {gpu.arch}",
                                      source=f"{prio}; {_v(version, _FA_UTILS, _FA_UTILS)} L74-206")
        elif name == "FLASHINFER":
            why = _flashinfer_reason(w, gpu, opts, version)
            if why is None:
                kernel = engine_select.kernel_for(Engine.VLLM, name, w, gpu, opts)
                note = {Backend.XQA: "XQA (mha.cu)", Backend.XQA_FP8: "XQA (mha_sm90.cu)",
                        Backend.TRTLLM_GEN: "trtllm-gen"}.get(kernel, "FlashInfer tensor-core wrapper")
                return DefaultBackend(engine=Engine.VLLM, version=version, name=name, kernel_note=note, backend=kernel,
                                      skipped=tuple(skipped),
                                      why=f"first valid backend in {gpu.arch}'s priority list; decodes with {note}",
                                      source=f"{prio}; {_v(version, _FI + ' L993-1056', _FI + ' L997-1060')}")
        else:
            if w.head_size < 32:
                why = f"head size {w.head_size} < 32 (vllm {version} vllm/v1/attention/backends/triton_attn.py L379-380)"
            else:
                return DefaultBackend(engine=Engine.VLLM, version=version, name=name, kernel_note="Triton unified attention",
                                      backend=Backend.VLLM, skipped=tuple(skipped),
                                      why="first valid backend in the priority list", source=prio)
        skipped.append(Skipped(name, why, prio))
    raise ConfigError(f"vLLM {version}: no valid attention backend for {w.model.name} on {gpu.name}: "
                      + "; ".join(f"{s.name}: {s.reason}" for s in skipped))


def _vllm_mla(w: Workload, gpu: GPUSpec, opts: PolicyOptions, version: str) -> DefaultBackend:
    cc = gpu.compute_capability or (0, 0)
    major = cc[0]
    kv8 = w.kv_cache_dtype.startswith("fp8")
    prio = _v(version, f"{_CUDA} L96-155", f"{_CUDA} L93-152")
    skipped: list[Skipped] = []
    mla = "vllm/v1/attention/backends/mla"

    def pick(name: str, note: str, backend: Backend | None, why: str, src: str) -> DefaultBackend:
        return DefaultBackend(engine=Engine.VLLM, version=version, name=name, kernel_note=note, backend=backend,
                              skipped=tuple(skipped), why=why, source=f"{prio}; vllm {version} {src}")

    if w.model.sliding_window and version == "0.33.0":
        raise ConfigError(f"vLLM 0.33.0: no MLA backend takes a sliding window ({w.model.name}); 0.34.0's TRITON_MLA "
                          "does (vllm/v1/attention/backends/mla/triton_mla.py L155-157)")
    if major == 10:
        nope = w.model.qk_nope_head_dim
        if opts.batch_invariant:
            skipped.append(Skipped("FLASHINFER_MLA", "no batch invariance", f"{mla}/flashinfer_mla.py"))
            skipped.append(Skipped("CUTLASS_MLA", "no batch invariance", f"{mla}/cutlass_mla.py"))
        elif nope in (64, 128, 192):
            return pick("FLASHINFER_MLA", "FlashInfer MLA (trtllm-gen)", None, "first valid MLA backend on SM100",
                        f"{mla}/flashinfer_mla.py L193-245")
        else:
            skipped.append(Skipped("FLASHINFER_MLA", f"qk_nope_head_dim {nope} not in 64, 128, 192",
                                   f"{mla}/flashinfer_mla.py L245"))
            return pick("CUTLASS_MLA", "CUTLASS MLA", None, "first valid MLA backend on SM100", f"{mla}/cutlass_mla.py L38-65")
    elif major == 9:
        if not kv8:
            return pick("FLASH_ATTN_MLA", "FlashAttention-3 MLA", None, "first valid MLA backend on SM90",
                        f"{mla}/flashattn_mla.py L40-69")
        skipped.append(Skipped("FLASH_ATTN_MLA", "no fp8 cache (auto, float16, bfloat16 only)", f"{mla}/flashattn_mla.py"))
        return pick("FLASHMLA", "FlashMLA (block 64)", Backend.FLASHMLA, "first valid MLA backend on SM90 for an fp8 cache",
                    f"{mla}/flashmla.py L46-73")
    return pick("TRITON_MLA", "Triton MLA decode", Backend.TRITON_MLA,
                f"the only dense MLA backend on {gpu.arch}", f"{mla}/triton_mla.py")


# ------------------------------------------------------------------------------------------------------------------
# SGLang


#: what a user reads for the kernels a default runs
_KERNEL_NOTES = {Backend.FA3: "FA3", Backend.SGLANG: "SGLang Triton decode", Backend.FLASHINFER: "FlashInfer CUDA-core decode",
                 Backend.FLASHINFER_TC: "FlashInfer tensor-core decode", Backend.XQA: "XQA (mha.cu)",
                 Backend.XQA_FP8: "XQA (mha_sm90.cu)", Backend.TRTLLM_GEN: "trtllm-gen", Backend.AITER: "aiter"}
#: SGLang's backends that decodecalc has no launcher for, in words
_UNMODELED_NOTES = {"fa3": "FlashAttention-3 MLA", "flashinfer": "FlashInfer MLA", "fa4": "FA4",
                    "trtllm_mla": "trtllm-gen MLA"}
#: the architectures SGLang's DeepSeek override covers (model_overrides/deepseek_v2.py L37-51), by Hugging Face id
_DEEPSEEK_V3_IDS = ("deepseek-ai/deepseek-v3", "deepseek-ai/deepseek-r1", "moonshotai/kimi-k2")


def _deepseek_v3_family(w: Workload) -> bool:
    hf = (w.model.hf_id or "").lower()
    return hf.startswith(_DEEPSEEK_V3_IDS)


def _sglang(w: Workload, gpu: GPUSpec, opts: PolicyOptions, version: str) -> DefaultBackend:
    from decodecalc.launchers import engine_select

    major = (gpu.compute_capability or (0, 0))[0]
    amd = gpu.vendor == "amd"
    sinks = getattr(w.model, "attention_sinks", False)
    base = f"{_SG}/model_override_base.py"
    name, src, why = "", "", ""
    if w.model.is_mla:
        if amd:
            name, src = ("aiter", f"{base} L341-347") if w.num_kv_heads in (16, 128) else ("triton", f"{base} L341-347")
        elif major == 9:
            name, src = "fa3", f"{base} L337-338"
        elif major == 10 and _deepseek_v3_family(w):
            name, src = "trtllm_mla", "sglang 0.5.23 python/sglang/srt/model_overrides/deepseek_v2.py L179-185"
        elif major == 10:
            name, src = "flashinfer", f"{base} L339-340"
        else:
            name, src = "triton", f"{base} L350-351"
        why = "the MLA default of get_default_attn_backend"
    elif getattr(w.model, "attention_sinks", False) and "gpt-oss" in w.model.name.lower():
        name = {9: "fa3", 10: "trtllm_mha"}.get(major, "aiter" if amd else "triton")
        src, why = "sglang 0.5.23 python/sglang/srt/model_overrides/gpt_oss.py L29-44", "gpt-oss's model override"
    elif opts.sglang.deterministic:
        name = ("flashinfer" if major in (10, 12) else "fa3")
        src, why = f"{_SG}/overrides.py L1093-1123", "--enable-deterministic-inference"
    elif amd:
        name, src, why = "aiter", f"{base} L326-327", "ROCm"
    elif major == 9:  # with plain decoding; EAGLE top-k > 1 (flashinfer on Hopper) is not modeled
        name, src, why = "fa3", f"{base} L305-311", "Hopper with CUDA >= 12.3"
    elif major == 10:
        asym = w.head_size != w.head_size_v
        name, src, why = ("fa4" if asym else "trtllm_mha"), f"{base} L312-325", "SM100 with CUDA >= 12.8"
    else:
        name, src, why = ("triton" if sinks else "flashinfer"), f"{base} L330-334", \
            "no Hopper / Blackwell rule: FlashInfer unless the model has attention sinks"
    skipped: list[Skipped] = []
    if name == "fa3" and w.kv_cache_dtype == "fp8_e5m2":
        skipped.append(Skipped("fa3", "fa3 reads no fp8_e5m2 cache", f"{_SG}/overrides.py L1263-1270"))
        name, src = "triton", f"{_SG}/overrides.py L1263-1270"
    backend: Backend | None
    if name in ("flashinfer", "trtllm_mha") and not w.model.is_mla:
        backend = engine_select.kernel_for(Engine.SGLANG, name, w, gpu, opts)
    else:
        backend = {"fa3": None if w.model.is_mla else Backend.FA3, "triton": Backend.SGLANG,
                   "aiter": Backend.AITER}.get(name)
    note = _KERNEL_NOTES[backend] if backend is not None else _UNMODELED_NOTES.get(name, name)
    return DefaultBackend(engine=Engine.SGLANG, version=version, name=name, kernel_note=note, backend=backend,
                          why=why, source=src, skipped=tuple(skipped))


# ------------------------------------------------------------------------------------------------------------------
# TensorRT-LLM


def _trtllm(w: Workload, gpu: GPUSpec, opts: PolicyOptions, version: str) -> DefaultBackend:
    major = (gpu.compute_capability or (0, 0))[0]
    if w.model.is_mla:
        return DefaultBackend(engine=Engine.TRTLLM, version=version, name="mla", kernel_note="TensorRT-LLM MLA",
                              backend=None, why="MLA models run TensorRT-LLM's MLA kernels (not modeled by decodecalc)",
                              source=f"{trtllm.SRC_COMMON} computeMultiBlockCountForMLA L394-397")
    if major == 10:
        return DefaultBackend(engine=Engine.TRTLLM, version=version, name="trtllm-gen", kernel_note="trtllm-gen FMHA",
                              backend=None, why="SM100 decodes with trtllm-gen (XqaDispatcher mUseTllmGen)",
                              source=f"{trtllm.TRTLLM} cpp/tensorrt_llm/kernels/xqaDispatcher.cpp")
    use, why = trtllm.uses_xqa(w, gpu, opts.trtllm)
    if use:
        return DefaultBackend(engine=Engine.TRTLLM, version=version, name="xqa", kernel_note="XQA multi-block",
                              backend=Backend.TRTLLM_XQA, why=why, source=f"{trtllm.SRC_JIT} L74-131")
    return DefaultBackend(engine=Engine.TRTLLM, version=version, name="mmha", kernel_note="masked MHA multi-block",
                          backend=Backend.TRTLLM_MMHA, why=f"XQA not used: {why}",
                          source=f"{trtllm.SRC_AOP} enqueueGeneration", skipped=(Skipped("xqa", why, trtllm.SRC_JIT),))


def default_backend(engine: Engine | str, w: Workload, gpu: GPUSpec, opts: PolicyOptions | None = None,
                    version: str | None = None) -> DefaultBackend:
    """The backend ``engine`` (release ``version``; None: the newest modeled) picks for ``w`` on ``gpu`` by default,
    with the engine settings of ``opts`` (batch invariance, deterministic inference, cubins, TensorRT-LLM's knobs)."""
    e = Engine(engine)
    v = check_version(e, version)
    opts = opts or PolicyOptions()
    if e is Engine.VLLM:
        if gpu.vendor != "nvidia":
            raise ConfigError(f"vLLM's ROCm backend selection is not modeled ({gpu.name}); see --system vllm-rocm")
        return _vllm_mla(w, gpu, opts, v) if w.model.is_mla else _vllm_mha(w, gpu, opts, v)
    if e is Engine.SGLANG:
        return _sglang(w, gpu, opts, v)
    if gpu.vendor != "nvidia":
        raise ConfigError(f"TensorRT-LLM runs on NVIDIA GPUs only; {gpu.name} is {gpu.vendor}")
    return _trtllm(w, gpu, opts, v)


__all__ = ["FLASHINFER_PIN", "VERSIONS", "DefaultBackend", "Skipped", "check_version", "default_backend",
           "fa_version"]
