"""The attention backend as a lever: what switching each engine to another decode backend would save.

Data-driven: a backend is compared only when the time model has kernel families for it
(:data:`decodecalc.timemodel.KERNEL_FAMILIES`) and the profile in use calibrates them; otherwise the
result says that there is no calibrated time for it. The launch comes from the backend's launcher
module (launchers/flashinfer.py, launchers/flash_attn3.py), the time from the time model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from decodecalc.errors import ConfigError, UnsupportedError
from decodecalc.launchers import engine_select
from decodecalc.launchers.base import LaunchPlan
from decodecalc.launchers.engine_defaults import DefaultBackend
from decodecalc.launchers.names import Backend, Engine
from decodecalc.launchers.registry import PolicyOptions, engine_uses, platform_reason, spec
from decodecalc.reports.tune_stats import Stats
from decodecalc.timemodel import KERNEL_FAMILIES, kernel_families
from decodecalc.timemodel.accuracy import ExpectedError, expected_error_for
from decodecalc.timemodel.domain import domain_warnings

Planner = Callable[[Any, Any], LaunchPlan]


@dataclass(frozen=True, slots=True)
class BackendNote:
    engine: str
    backend: str
    how: str
    stats: Stats | None
    note: str
    #: the error of the total (timemodel.accuracy, of="workload total"); None without such evidence
    expected_error: ExpectedError | None = None
    #: the registered backend whose kernels run the workload ("" when none was resolved)
    kernel: str = ""

    def to_dict(self, default_total: float | None, tuned_total: float | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"engine": self.engine, "backend": self.backend, "apply": self.how, "note": self.note,
                             "kernel": self.kernel}
        if self.stats is not None:
            d |= self.stats.to_dict()
            if self.expected_error is not None:
                d["predicted_error"] = self.expected_error.to_json()
            if default_total:
                d["saving_vs_default"] = 1.0 - self.stats.total_s / default_total
            if tuned_total:
                d["saving_vs_tuned"] = 1.0 - self.stats.total_s / tuned_total
        return d

def engine_planner(backend: Backend | str, engine: Engine | str, opts: PolicyOptions | None = None) -> Planner:
    """(workload, gpu) -> the launch of ``backend``'s kernels as ``engine`` drives them under CUDA graphs, with the
    engine settings of ``opts`` (the registry's EngineUse.plan; the spec's own planner where the engine has none)."""
    s = spec(backend)
    use = s.use(Engine(engine))
    fn = use.plan if use is not None and use.plan is not None else s.build
    if fn is None:
        raise UnsupportedError(f"{s.title}: no planner for {Engine(engine).display_name}'s use of it")
    o = opts or PolicyOptions()
    return lambda w, g: fn(w, g, o)


@dataclass(frozen=True, slots=True)
class Lever:
    """One backend an engine can switch to: the engine's name for it and how to select it; which registered kernels
    run a workload is the engine's rule (launchers/engine_select.py kernel_for)."""

    engine: Engine
    name: str
    label: str
    select: str


def levers(engines: Iterable[str], *, mla: bool = False, gpu: Any = None,
           skip: Mapping[str, str] | None = None) -> tuple[Lever, ...]:
    """Every backend each engine can run for a model of this kind (``mla``) on ``gpu``'s platform besides its Triton
    kernel (which tune tunes itself) and the backend ``skip`` names for it (its default, timed on its own), from the
    registry."""
    out: list[Lever] = []
    for e in map(Engine, engines):
        for s, use in engine_uses(e):
            if (s.backend in (Backend.VLLM, Backend.SGLANG) and not mla) or not s.serves(mla) or \
                    (gpu is not None and platform_reason(s, gpu)) or (skip or {}).get(e.value) == use.name or \
                    any(x.engine is e and x.name == use.name for x in out):
                continue
            out.append(Lever(engine=e, name=use.name, label=engine_select.label(e, use.name), select=use.select))
    return tuple(out)


#: what the note says of the path a FlashInfer total was timed on
_PATH_NOTE = {"flashinfer-tc": "tensor-core decode, as the engine runs it (launchers/engine_select.py kernel_for)",
              "flashinfer": "CUDA-core decode, as the engine runs it (launchers/engine_select.py kernel_for)",
              "xqa": "XQA decode (mha.cu), as the engine runs it (launchers/engine_select.py kernel_for)",
              "xqa-fp8": "XQA decode (mha_sm90.cu), as the engine runs it (launchers/engine_select.py kernel_for)"}


def _uncalibrated_why(key: str, profile: Any, kv_bytes_per_element: int | None = None) -> str:
    """Why ``key``'s kernels have no calibrated time in ``profile`` on a KV cache of ``kv_bytes_per_element``
    bytes ("" when they have one); names the families that miss."""
    if key not in KERNEL_FAMILIES:
        return "the time model has no kernel family for it yet"
    uncal = set(profile.fit.get("uncalibrated_families", ()) or ())
    fams = kernel_families(key, kv_bytes_per_element)
    missed = [f for f in fams if f not in profile.families or f in uncal]
    if profile.calibrated and not missed:
        return ""
    where = f"the {profile.gpu} profile ({profile.path or 'built-in'})"
    if not profile.calibrated or len(missed) == len(fams):
        return f"no calibrated time for it in {where}"
    from decodecalc.timemodel.profile import uncalibrated_note

    return f"no calibrated time for its {', '.join(missed)} kernels in {where} ({uncalibrated_note(profile, missed)})"


#: another backend's total is estimated to this many times the target error (0.3%: it is compared at the per-cent
#: level, and each backend is one more recipe to time)
BACKEND_LOOSER = 30.0


def backend_levers(ctx: Any, engines: Iterable[str], defaults: Iterable[EngineDefaultTotal] = ()) -> tuple[Any, ...]:
    """Per engine and backend: the backend's total over the workload where the profile calibrates its kernels (the
    engine's default backend, in ``defaults``, left out: it is the baseline)."""
    out = []
    opts = ctx.policy_options()
    skip = {d.engine: d.selection.name for d in defaults if d.selection is not None}
    for lv in levers(engines, mla=ctx.work.model.is_mla, gpu=ctx.gpu, skip=skip):
        engine, name, how = lv.engine.value, lv.label, lv.select
        try:
            backend = engine_select.kernel_for(lv.engine, lv.name, ctx.work, ctx.gpu, opts)
        except (UnsupportedError, ConfigError) as exc:
            out.append(BackendNote(engine=engine, backend=name, how=how, stats=None, note=f"not compared: {exc}"))
            continue
        key = backend.value
        stats, why = _timed_total(ctx, backend, lv.engine, opts)
        if stats is None:
            out.append(BackendNote(engine=engine, backend=name, how=how, stats=None, note=f"not compared: {why}",
                                   kernel=key))
            continue
        path = _PATH_NOTE.get(key)
        out.append(BackendNote(engine=engine, backend=name, how=how, stats=stats, kernel=key,
                               note=f"time-model kernel {key}, calibrated" + (f"; {path}" if path else ""),
                               expected_error=expected_error_for(ctx.profile, key, ctx.work, of="workload total")))
    return tuple(out)


#: the caps of FA3's splits under full CUDA graphs tune tries (vLLM's --attention-config.
#: flash_attn_max_num_splits_for_cuda_graph, default 32; vLLM PRs #25274 and #35899 discuss it)
FA3_CAPS = (1, 2, 4, 8, 16, 32, 64, 128)


@dataclass(frozen=True, slots=True)
class EngineDefaultTotal:
    """An engine's default backend for the workload (launchers/engine_defaults.py) and its total: the baseline every
    saving tune prints is measured against. ``caps``: FA3's split cap under CUDA graphs as a lever (vLLM)."""

    engine: str
    selection: DefaultBackend | None  # None when the rule refused the model
    stats: Stats | None
    note: str
    expected_error: ExpectedError | None = None
    caps: tuple[tuple[int, Stats], ...] = ()

    @property
    def triton(self) -> bool:
        """The default is the engine's own Triton kernel (its total is the tuned engine's default setting's)."""
        sel = self.selection
        return sel is not None and sel.backend in (Backend.VLLM, Backend.SGLANG)

    @property
    def best_cap(self) -> tuple[int, Stats] | None:
        return min(self.caps, key=lambda c: (c[1].total_s, abs(c[0] - 32))) if self.caps else None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"engine": self.engine, "note": self.note}
        if self.selection is not None:
            d["selection"] = self.selection.to_json()
        if self.stats is not None:
            d |= self.stats.to_dict()
            if self.expected_error is not None:
                d["predicted_error"] = self.expected_error.to_json()
        if self.caps:
            d["flash_attn_max_num_splits_for_cuda_graph"] = [{"cap": c, **s.to_dict()} for c, s in self.caps]
            best = self.best_cap
            assert best is not None
            d["best_cap"] = best[0]
            if self.stats is not None and self.stats.total_s:
                d["best_cap_saving_vs_default"] = 1.0 - best[1].total_s / self.stats.total_s
        return d


def fa3_cap_options(ctx: Any, cap: int) -> tuple[PolicyOptions, str]:
    """The workload's engine options with vLLM's FA3 split cap under CUDA graphs set to ``cap``, and the timer's name
    for that setting ("" at vLLM's default of 32: the engine default's own recipe)."""
    import dataclasses

    opts = ctx.policy_options()
    o = dataclasses.replace(opts, vllm=dataclasses.replace(ctx.vllm, flash_attn_max_num_splits_for_cuda_graph=cap))
    return o, "" if cap == 32 else f"cap{cap}"


def _timed_total(ctx: Any, backend: Backend, engine: Engine, opts: PolicyOptions,
                 variant: str = "") -> tuple[Stats | None, str]:
    """``backend``'s total over the workload as ``engine`` drives it (``variant``: names a setting in ``opts``), or
    None and why not: its kernels uncalibrated in the profile, outside its measured domain, or not runnable."""
    key = backend.value
    why = _uncalibrated_why(key, ctx.profile, ctx.work.kv_bytes_per_element)
    if not why and key in KERNEL_FAMILIES:
        outside = domain_warnings(ctx.work, ctx.gpu, ctx.profile, kernel=key)
        why = "outside the profile's measured domain: " + "; ".join(outside) if outside else ""
    if why:
        return None, why
    try:
        est = ctx.timer.backend(key, engine.value, engine_planner(backend, engine, opts), looser=BACKEND_LOOSER,
                                variant=variant)
    except (UnsupportedError, ConfigError) as exc:
        return None, str(exc)
    return ctx.stats(est.time), ""


def engine_default_totals(ctx: Any, engines: Iterable[str]) -> tuple[EngineDefaultTotal, ...]:
    """Per engine: its default backend for the workload's model on the GPU, and that backend's total over the workload
    where the time model has it (an engine whose default is its Triton kernel: the tuned engine's default setting
    holds that total, and ``stats`` stays None here)."""

    from decodecalc.errors import DecodecalcError
    from decodecalc.launchers.engine_defaults import VLLM_VERSIONS, default_backend

    out = []
    opts = ctx.policy_options()
    for name in engines:
        e = Engine(name)
        version = ctx.vllm.version if e is Engine.VLLM and ctx.vllm.version in VLLM_VERSIONS else None
        try:
            sel = default_backend(e, ctx.work, ctx.gpu, opts, version)
        except DecodecalcError as exc:
            out.append(EngineDefaultTotal(engine=name, selection=None, stats=None, note=str(exc)))
            continue
        if sel.backend is None:
            out.append(EngineDefaultTotal(engine=name, selection=sel, stats=None,
                                          note=f"runs {sel.kernel_note}, which decodecalc has no launch model for"))
            continue
        if sel.backend in (Backend.VLLM, Backend.SGLANG):
            out.append(EngineDefaultTotal(engine=name, selection=sel, stats=None, note="the engine's Triton kernel"))
            continue
        stats, why = _timed_total(ctx, sel.backend, e, opts)
        caps: list[tuple[int, Stats]] = []
        if stats is not None and e is Engine.VLLM and sel.backend is Backend.FA3:
            for cap in FA3_CAPS:
                o, variant = fa3_cap_options(ctx, cap)
                st, _ = _timed_total(ctx, sel.backend, e, o, variant=variant)
                if st is not None:
                    caps.append((cap, st))
        out.append(EngineDefaultTotal(
            engine=name, selection=sel, stats=stats, caps=tuple(caps),
            note=f"time-model kernel {sel.backend.value}, calibrated" if stats is not None else f"not timed: {why}",
            expected_error=expected_error_for(ctx.profile, sel.backend.value, ctx.work, of="workload total")
            if stats is not None else None))
    return tuple(out)


#: the TRTLLM_XQA_BLOCKS_PER_SEQUENCE values tune tries against TensorRT-LLM's own multi-block count
TRTLLM_BLOCK_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128)


@dataclass(frozen=True, slots=True)
class TrtllmTune:
    """TensorRT-LLM's multi-block count as a lever: its own rule (computeMultiBlockCount, the default) against fixed
    counts (TRTLLM_XQA_BLOCKS_PER_SEQUENCE), each timed as XQA over the workload."""

    default: Stats | None
    choices: tuple[tuple[int, Stats], ...]
    note: str
    expected_error: ExpectedError | None = None

    @property
    def best(self) -> tuple[int | None, Stats] | None:
        """The fastest setting (None = the default rule), ties to the default, then to fewer blocks."""
        if self.default is None:
            return None
        options: list[tuple[int | None, Stats]] = [(None, self.default), *self.choices]
        return min(options, key=lambda o: (o[1].total_s, o[0] is not None, o[0] or 0))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"engine": "trtllm", "note": self.note}
        if self.default is not None:
            d["default"] = self.default.to_dict()
            d["choices"] = [{"TRTLLM_XQA_BLOCKS_PER_SEQUENCE": n, **s.to_dict()} for n, s in self.choices]
            best = self.best
            assert best is not None
            d["best"] = {"TRTLLM_XQA_BLOCKS_PER_SEQUENCE": best[0], **best[1].to_dict(),
                         "saving_vs_default": 1.0 - best[1].total_s / self.default.total_s}
            if self.expected_error is not None:
                d["predicted_error"] = self.expected_error.to_json()
        return d


def trtllm_tune(ctx: Any) -> TrtllmTune:
    """TensorRT-LLM's XQA over the workload under its own multi-block rule and under each fixed count. Every step is
    timed as XQA (TRTLLM_FORCE_XQA: the steps where TensorRT-LLM would run masked MHA, which has no time model, are
    timed as XQA too)."""
    import dataclasses

    from decodecalc.launchers.trtllm import TrtllmSettings

    key = Backend.TRTLLM_XQA.value
    why = _uncalibrated_why(key, ctx.profile, ctx.work.kv_bytes_per_element)
    if not why:
        outside = domain_warnings(ctx.work, ctx.gpu, ctx.profile, kernel=key)
        why = "outside the profile's measured domain: " + "; ".join(outside) if outside else ""
    if why:
        return TrtllmTune(default=None, choices=(), note=f"not timed: {why}")
    base = dataclasses.replace(ctx.policy_options(), trtllm=TrtllmSettings(force_xqa=True))

    def total(n: int | None) -> Stats | None:
        o = dataclasses.replace(base, trtllm=dataclasses.replace(base.trtllm, xqa_blocks_per_sequence=n))
        try:
            est = ctx.timer.backend(key, "trtllm", engine_planner(Backend.TRTLLM_XQA, Engine.TRTLLM, o),
                                    looser=BACKEND_LOOSER, variant=f"blocks{n}" if n else "")
        except (UnsupportedError, ConfigError):
            return None
        return ctx.stats(est.time)

    default = total(None)
    if default is None:
        return TrtllmTune(default=None, choices=(), note="TensorRT-LLM's XQA cannot run this workload")
    choices = tuple((n, s) for n in TRTLLM_BLOCK_CHOICES if (s := total(n)) is not None)
    return TrtllmTune(default=default, choices=choices, note=f"time-model kernel {key} (XQA's families)",
                      expected_error=expected_error_for(ctx.profile, key, ctx.work, of="workload total"))
