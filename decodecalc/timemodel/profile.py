"""The time model's parameters: :class:`FamilyParams` per kernel family, :class:`TimeProfile` per GPU,
and where a profile comes from (an explicit file, the user's calibrated file, the packaged one, or the
uncalibrated datasheet fallback). What each parameter means: :mod:`decodecalc.timemodel`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from decodecalc.derived import cdiv
from decodecalc.errors import ChoiceError, ConfigError
from decodecalc.launchers.registry import BACKEND_SPECS
from decodecalc.timemodel.residuals import ResidualMap, residual_map_from_mapping

#: kernel families the model knows; each has its own FamilyParams in a profile: these, then the registered backends'
#: families not among them (launchers/registry.py)
_FAMILIES_BEFORE_THE_TABLE = ("vllm_2d", "vllm_3d", "vllm_reduce", "vllm_reduce_spill", "sglang_stage1", "sglang_mha_stage1", "sglang_stage2",
            "sglang_stage1_fp8",
            "ref_vllm_2d", "ref_vllm_3d", "ref_vllm_reduce", "ref_sglang_stage1", "ref_sglang_stage2",
            # the default backends (decodecalc.timemodel.backends): FlashInfer, FA3, FlashMLA
            "flashinfer_decode", "flashinfer_tc", "flashinfer_merge", "fa3_fwd", "fa3_combine", "flashmla_fwd",
            "flashmla_combine", "fa2_fwd", "fa2_fwd_plain", "fa2_combine",
            # the same backends on an fp8 KV cache (timemodel.backends.flashinfer_family, fa3_family)
            "flashinfer_decode_fp8", "flashinfer_tc_fp8", "fa3_fwd_fp8", "fa3_fwd_fp8_wide")
FAMILIES: tuple[str, ...] = _FAMILIES_BEFORE_THE_TABLE + tuple(dict.fromkeys(
    f for s in BACKEND_SPECS.values() for f in s.families if f not in _FAMILIES_BEFORE_THE_TABLE))
#: families added after profiles were first written: a profile without one loads with the parameters of the
#: family named here, and that family is listed in its fit's ``uncalibrated_families``
FAMILY_FALLBACKS = {"sglang_mha_stage1": "sglang_stage1", "vllm_reduce_spill": "vllm_reduce",
                    "sglang_stage1_fp8": "sglang_stage1", "flashinfer_decode_fp8": "flashinfer_decode",
                    "flashinfer_tc_fp8": "flashinfer_tc", "fa3_fwd_fp8": "fa3_fwd", "fa3_fwd_fp8_wide": "fa3_fwd",
                    **{new: old for s in BACKEND_SPECS.values() for new, old in s.family_fallbacks}}

#: what a predicted time is the time of (docs/recommend.md, "Regimes"): ``back-to-back``, one system's decode call
#: repeated in a CUDA graph (how every fit's data was timed), or ``in-graph``, the call inside a decode layer's graph
#: between the layer's other kernels (a projection GEMM and the KV write before it, a GEMM after it), which adds a
#: measured per-launch cost (``in_graph`` in a profile: benchmarks/in_graph_h200.py)
REGIMES = ("back-to-back", "in-graph")
#: the ``in_graph.launch_s`` entry used for a system the in-graph run did not measure
IN_GRAPH_DEFAULT = "default"

def regime_name(regime: Any) -> str:
    """``regime`` checked against REGIMES (ChoiceError naming the valid ones), before any profile is read."""
    name = str(getattr(regime, "value", regime)).lower()
    if name not in REGIMES:
        raise ChoiceError(f"--regime {name!r}; valid: {', '.join(REGIMES)}")
    return name


def occupancy(n_regs: int, shared_bytes: int, num_warps: int, *, regs_per_sm: int = 65536,
              shared_per_sm: int = 233472, max_threads_per_sm: int = 2048, max_blocks_per_sm: int = 32,
              reg_unit: int = 256, shared_reserved: int = 1024) -> int:
    """Resident programs per SM from a compiled kernel's registers and shared memory (CUDA's occupancy
    rules; defaults: compute capability 9.0, as on the H100 / H200)."""
    regs_per_warp = cdiv(max(n_regs, 1) * 32, reg_unit) * reg_unit
    by_regs = regs_per_sm // (regs_per_warp * num_warps)
    by_smem = shared_per_sm // (shared_bytes + shared_reserved) if shared_bytes else max_blocks_per_sm
    by_threads = max_threads_per_sm // (32 * num_warps)
    return max(1, min(by_regs, by_smem, by_threads, max_blocks_per_sm))


#: the --kernel names of predict_time_s / recommend and the families of their kernels
KERNEL_FAMILIES: dict[str, tuple[str, ...]] = {
    # every registered backend with a time model (launchers/registry.py BACKEND_SPECS: its families)
    **{s.name: s.families for s in BACKEND_SPECS.values() if s.families},
    # decodecalc's own Triton kernels (decodecalc.verify.reference_kernels), one per engine layout
    "reference-vllm": ("ref_vllm_2d", "ref_vllm_3d", "ref_vllm_reduce"),
    "reference-sglang": ("ref_sglang_stage1", "ref_sglang_stage2"),
}

#: families that run only on a KV cache of one element size (bytes); the others run on any. An fp8 family is named
#: ``*_fp8*`` and falls back to the bf16 family it splits off (FAMILY_FALLBACKS), which then runs on 2 bytes only
FAMILY_KV_BYTES = {**{FAMILY_FALLBACKS[f]: 2 for f in FAMILIES if "_fp8" in f},
                   **{f: 1 for f in FAMILIES if "_fp8" in f}}

#: a fitted family is calibrated when its held-out (left-out) median and 90th-percentile errors are at most these
#: (benchmarks/fit_backends_h200.py, fit_backends_fp8_h200.py); a family that misses is listed in
#: ``fit.uncalibrated_families``
CALIBRATION_GOAL_MEDIAN, CALIBRATION_GOAL_P90 = 0.05, 0.15


def kernel_families(kernel: str, kv_bytes_per_element: int | None = None) -> tuple[str, ...]:
    """The families ``kernel``'s launches use (KERNEL_FAMILIES), only those that run on a KV cache of
    ``kv_bytes_per_element`` bytes when it is given (a bf16 workload never uses an fp8 family, and the other way
    round)."""
    fams = KERNEL_FAMILIES.get(kernel, ())
    if kv_bytes_per_element is None:
        return fams
    kvb = 1 if kv_bytes_per_element == 1 else 2
    return tuple(f for f in fams if FAMILY_KV_BYTES.get(f, kvb) == kvb)


_GOALS = f"{100 * CALIBRATION_GOAL_MEDIAN:.0f}% / {100 * CALIBRATION_GOAL_P90:.0f}%"
#: fit records that hold a family's left-out figures: (fit key, the key of its per-family table, the script that wrote it)
_FAMILY_RECORDS = (("backend_calibration", "left_out", "decodecalc calibrate --backends, head layouts left out"),
                   ("backend_fp8_families", "unseen", "benchmarks/fit_backends_fp8_h200.py"))


def uncalibrated_note(profile: Any, families: Any) -> str:
    """Why ``families`` (marked uncalibrated in ``profile``'s fit) are: each one's left-out median / p90 error where a
    fit record of the profile holds it (families sharing one record named together), else that no fit of this
    profile calibrated it."""
    fit = getattr(profile, "fit", {}) or {}
    by_reason: dict[str, list[str]] = {}
    for fam in sorted(families):
        reason = ""
        for key, table, script in _FAMILY_RECORDS:
            rec = ((fit.get(key) or {}).get(table) or {}).get(fam) if isinstance(fit.get(key), Mapping) else None
            if isinstance(rec, Mapping) and "median_abs_err" in rec:
                reason = (f"left-out median {100 * rec['median_abs_err']:.1f}%, p90 {100 * rec['p90_abs_err']:.1f}% "
                          f"missed the fit's {_GOALS} goals ({script})")
                break
        if not reason:  # a default backend's bf16 families: the held-out record is per kernel
            kern = next((k for k, fs in KERNEL_FAMILIES.items() if fam in fs and FAMILY_KV_BYTES.get(fam, 2) == 2), None)
            rec = ((fit.get("backend_families") or {}).get("heldout") or {}).get(kern) if kern else None
            if isinstance(rec, Mapping) and "median_abs_err" in rec:
                reason = (f"{kern}'s held-out median {100 * rec['median_abs_err']:.1f}%, p90 "
                          f"{100 * rec['p90_abs_err']:.1f}% missed the fit's {_GOALS} goals (benchmarks/fit_backends_h200.py)")
        by_reason.setdefault(reason or "no fit of this profile calibrated it", []).append(fam)
    return "; ".join(f"{', '.join(fams)}: {reason}" for reason, fams in by_reason.items())


PROFILE_SCHEMA = 1


# --------------------------------------------------------------------------------------------
# parameters


#: the range a kernel family's fitted constants may take: seconds of fixed latency, bytes per second a program or an
#: SM streams (a picosecond to a second; 1 kB/s to 1e20 B/s, a stand-in for "no limit": beyond either end the
#: times overflow or vanish)
PLAUSIBLE = {"latency_s": (1e-12, 1.0), "program_bandwidth_bytes_per_s": (1e3, 1e20),
             "sm_bandwidth_bytes_per_s": (1e3, 1e20), "hbm_bandwidth_bytes_per_s": (1e3, 1e20),
             "launch_overhead_s": (0.0, 1.0), "idle_program_s": (0.0, 1.0)}
#: the L^p norm's power a family's blend of SM and HBM times may take (0: their maximum). Its error on the larger
#: time is at most 2^(1/p) - 1 (1e30 at p = 0.01, the floor: below it (x^p + y^p)^(1/p) nears a float's range) and an
#: iteration's time raised to p = 16 (1e-7 s: 1e-112) stays a normal float, where p = 64 would vanish to 0. The
#: fitted ones: 0.13 (H100 reduce spill), 0.21 (H200), 2 to 4 (timemodel/backends.py)
BLEND_POWER_RANGE = (0.01, 16.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class FamilyParams:
    """The four physical numbers of one kernel family on one GPU."""

    latency_s: float  # one loop iteration of a lone program (unloaded dependent-load round trip)
    program_bandwidth_bytes_per_s: float  # bytes/s one program's warps stream (their own loads in flight)
    sm_bandwidth_bytes_per_s: float  # bytes/s one SM's load path takes in, shared by its resident programs
    program_overhead_s: float  # prologue + epilogue of one program (load Q, store O / partials)
    max_programs_per_sm: int  # occupancy: resident programs per SM (registers, shared memory)
    #: occupancy where it differs by padded head dim (registers and shared memory grow with it)
    occupancy_by_head_dim: tuple[tuple[int, int], ...] = ()
    #: the HBM bandwidth this family's kernels reach together (the GPU's when 0): FA3, FlashInfer and FlashMLA
    #: stream 4.5 TB/s on the H200 where the Triton kernels stop near 3.9 (bulk copies, deeper pipelines)
    hbm_bandwidth_bytes_per_s: float = 0.0
    #: how an iteration's SM-side and HBM-side times combine for this family's kernels when their work does not
    #: say (:attr:`~decodecalc.timemodel.work.KernelWork.blend_power`): 0, the larger; p > 0, their L^p norm
    blend_power: float = 0.0
    #: SM time of one program of this family that exits at once (the GPU's ``idle_program_s`` when 0): SGLang's
    #: stage 1 loads its query tile and computes its split bounds before the empty-split check; vLLM's kernels find
    #: their sequence (a binary search over the query start offsets, ``resolve_seq_and_query_len``) before their
    #: q-block and segment early exits (triton_unified_attention.py 0.33.0 L311-327)
    idle_program_s: float = 0.0
    #: a program's time per separate contiguous run of memory an iteration gathers, beyond its bytes
    #: (:func:`decodecalc.timemodel.work.kv_runs_per_iter`); 0: not modelled
    run_s: float = 0.0
    #: how a program's own stream time grows with the bytes of an iteration: ``(b / STREAM_REF_BYTES) ** (e - 1)``
    #: times the linear ``b / program_bandwidth`` (1: linear; below 1, a larger tile keeps more loads in flight)
    stream_exponent: float = 1.0
    #: persistent kernels (KernelWork.persistent: one CTA per SM slot takes tile after tile): what each tile after a
    #: CTA's first costs instead of ``program_overhead_s`` (the CTA's own prologue), its next tile's loads overlapping
    #: the last one's epilogue; 0: every tile pays ``program_overhead_s``. FA3's varlen scheduler: 2.75 us against
    #: 5.1 (benchmarks/fit_fa3_tiles.py)
    tile_overhead_s: float = 0.0
    #: the SM's load path saturates this many programs short of full occupancy: an iteration's SM-side time counts
    #: ``min(c, occupancy - gap)`` resident programs' bytes, so the last program a full SM takes in costs less
    #: than the ones before it (0: every program adds its bytes). Measured on the H200 with vLLM's 3D kernel
    #: (benchmarks/results/timemodel-h200-probe-waves.json, one wave, 32 tiles per program): 32:8 d128 (5 per SM)
    #: 46.6 / 54.5 / 60.3 / 67.1 / 68.7 us at 1..5 per SM, d64 (6 per SM) and d256 (4 per SM) alike
    sm_saturation_gap: float = 0.0

    def occupancy_for(self, head_dim: int) -> int:
        for d, o in self.occupancy_by_head_dim:
            if d == head_dim:
                return o
        return self.max_programs_per_sm

    def __post_init__(self) -> None:
        for name in ("latency_s", "program_bandwidth_bytes_per_s", "sm_bandwidth_bytes_per_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ConfigError(f"{name} must be a positive number, got {v!r}")
            lo, hi = PLAUSIBLE[name]
            if not lo <= v <= hi:  # a time model of no GPU: its times would overflow or vanish
                raise ConfigError(f"{name} must be between {lo:g} and {hi:g}, got {v!r}")
        for name in ("hbm_bandwidth_bytes_per_s", "idle_program_s"):  # 0: the GPU's own
            v, (lo, hi) = getattr(self, name), PLAUSIBLE[name]
            if v and not (isinstance(v, (int, float)) and lo <= v <= hi):
                raise ConfigError(f"{name} must be 0 (the GPU's) or between {lo:g} and {hi:g}, got {v!r}")
        if not (isinstance(self.program_overhead_s, (int, float)) and self.program_overhead_s >= 0):
            raise ConfigError(f"program_overhead_s must be >= 0, got {self.program_overhead_s!r}")
        if not (isinstance(self.max_programs_per_sm, int) and self.max_programs_per_sm >= 1):
            raise ConfigError(f"max_programs_per_sm must be a positive integer, got {self.max_programs_per_sm!r}")
        b = self.blend_power
        lo, hi = BLEND_POWER_RANGE
        if not (isinstance(b, (int, float)) and math.isfinite(b) and (b == 0 or lo <= b <= hi)):
            # (x^p + y^p)^(1/p): p = 1e-300 overflows a float, p = 1e300 makes every time vanish
            raise ConfigError(f"blend_power must be 0 (the larger of the SM and HBM times) or between {lo:g} and "
                              f"{hi:g}, got {b!r}")
        g = self.sm_saturation_gap
        if not (isinstance(g, (int, float)) and math.isfinite(g) and 0 <= g < 3):
            raise ConfigError(f"sm_saturation_gap must be a number in [0, 3), got {g!r}")
        e = self.stream_exponent
        if not (isinstance(e, (int, float)) and math.isfinite(e) and 0.2 <= e <= 1.5):
            raise ConfigError(f"stream_exponent must be a number in [0.2, 1.5], got {e!r}")
        r = self.run_s
        if not (isinstance(r, (int, float)) and math.isfinite(r) and 0 <= r <= 1e-6):
            raise ConfigError(f"run_s must be a number in [0, 1e-6], got {r!r}")
        for d, o in self.occupancy_by_head_dim:
            if not (isinstance(d, int) and isinstance(o, int) and d > 0 and o >= 1):
                raise ConfigError(f"occupancy_by_head_dim entries must be positive integers, got {d!r}: {o!r}")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["occupancy_by_head_dim"] = {d: o for d, o in self.occupancy_by_head_dim}
        if not self.hbm_bandwidth_bytes_per_s:
            del out["hbm_bandwidth_bytes_per_s"]
        if not self.blend_power:
            del out["blend_power"]
        if not self.idle_program_s:
            del out["idle_program_s"]
        if not self.sm_saturation_gap:
            del out["sm_saturation_gap"]
        if not self.tile_overhead_s:
            del out["tile_overhead_s"]
        if not self.run_s:
            del out["run_s"]
        if self.stream_exponent == 1.0:
            del out["stream_exponent"]
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeProfile:
    """Every parameter of the time model for one GPU, with where it came from."""

    gpu: str
    num_sms: int
    launch_overhead_s: float  # per kernel in a replayed CUDA graph
    idle_program_s: float  # a program that exits at once, per program, before dividing by SMs
    families: Mapping[str, FamilyParams]
    hbm_bandwidth_bytes_per_s: float = 4.0e12  # achievable HBM bandwidth of the whole GPU (all programs together)
    calibrated: bool
    source: str = ""
    path: str = ""  # file it was read from ("" for built-in)
    fit: Mapping[str, Any] = field(default_factory=dict)  # fit statistics, informational
    #: measured residuals of the physics on this GPU, by regime (decodecalc.timemodel.residuals); None: none
    residuals: ResidualMap | None = None
    #: per system (a LaunchWork.kernel: vllm, sglang, flashinfer, ...; IN_GRAPH_DEFAULT for the others), the seconds
    #: a launch adds inside a decode layer's graph over back to back; empty: the profile has no in-graph measurements
    in_graph_launch_s: Mapping[str, float] = field(default_factory=dict)
    in_graph_source: str = ""
    #: the regime this profile's predictions are for (REGIMES; :meth:`in_regime`)
    regime: str = "back-to-back"

    def borrowing(self, family: str) -> TimeProfile:
        """This profile with ``family`` predicted as the family it falls back to (FAMILY_FALLBACKS): that family's
        numbers and residual-map cells (the prediction a profile fitted before ``family`` existed makes)."""
        parent = FAMILY_FALLBACKS[family]
        fams = {**self.families, family: self.families[parent]}
        rmap = self.residuals.with_family_alias(family, parent) if self.residuals is not None else None
        return dataclasses.replace(self, families=fams, residuals=rmap)

    def in_regime(self, regime: str) -> TimeProfile:
        """This profile predicting for ``regime`` (one of REGIMES). ConfigError where ``in-graph`` is asked of a
        profile without in-graph measurements."""
        regime = regime_name(regime)
        if regime == "in-graph" and not self.in_graph_launch_s:
            raise ConfigError(f"--regime in-graph: the time profile for {self.gpu!r} ({self.path or 'built-in'}) has "
                              "no in-graph measurements (an 'in_graph' block, as the packaged H200 profile has); "
                              "valid here: back-to-back")
        return self if regime == self.regime else dataclasses.replace(self, regime=regime)

    def regime_launch_s(self, system: str) -> float:
        """Seconds one launch of ``system`` adds in this profile's regime over back to back (0 back to back)."""
        if self.regime != "in-graph":
            return 0.0
        got = self.in_graph_launch_s.get(system)
        return got if got is not None else self.in_graph_launch_s.get(IN_GRAPH_DEFAULT, 0.0)

    def regime_record(self, systems: tuple[str, ...] = ()) -> dict[str, Any]:
        """The JSON ``regime`` record of the predicted times: the regime, and per system the seconds a launch adds."""
        return {"name": self.regime, "launch_s": {s: self.regime_launch_s(s) for s in systems},
                **({"source": self.in_graph_source} if self.regime == "in-graph" else {})}

    def regime_note(self, systems: tuple[str, ...] = ()) -> str:
        """One line on the regime of the predicted times (what the text outputs print)."""
        if self.regime != "in-graph":
            return ("times: back to back (one system's decode call repeated in a CUDA graph, as the profile was "
                    "measured); --regime in-graph: inside a decode layer's graph")
        parts = [f"{s} +{self.regime_launch_s(s) * 1e6:.1f} us" for s in systems]
        return ("times: in a decode layer's graph (between the layer's GEMMs: back to back plus a measured cost per "
                "launch" + (f": {', '.join(parts)}" if parts else "") + ")")

    def family(self, name: str) -> FamilyParams:
        try:
            return self.families[name]
        except KeyError:
            raise ConfigError(f"time profile for {self.gpu!r} ({self.path or 'built-in'}) has no "
                              f"parameters for kernel family {name!r}") from None

    def to_mapping(self) -> dict[str, Any]:
        return {
            "schema": PROFILE_SCHEMA,
            "gpu": self.gpu,
            "num_sms": self.num_sms,
            "calibrated": self.calibrated,
            "source": self.source,
            "launch_overhead_s": self.launch_overhead_s,
            "idle_program_s": self.idle_program_s,
            "hbm_bandwidth_bytes_per_s": self.hbm_bandwidth_bytes_per_s,
            "families": {k: v.as_dict() for k, v in self.families.items()},
            "fit": dict(self.fit),
            **({"residuals": self.residuals.to_mapping()} if self.residuals is not None else {}),
            **({"in_graph": {"source": self.in_graph_source, "launch_s": dict(self.in_graph_launch_s)}}
               if self.in_graph_launch_s else {}),
        }


def profile_from_mapping(data: Any, *, origin: str, expect_gpu: str | None = None) -> TimeProfile:
    """Build a TimeProfile from parsed YAML; ConfigError naming ``origin`` on any problem."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"time profile {origin}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        gpu = str(data["gpu"])
        fams_raw = data["families"]
        if not isinstance(fams_raw, Mapping) or not fams_raw:
            raise ConfigError("'families' must be a non-empty mapping")
        fams: dict[str, FamilyParams] = {}
        for name, raw in fams_raw.items():
            if name not in FAMILIES:
                raise ConfigError(f"unknown kernel family {name!r} (known: {', '.join(FAMILIES)})")
            if not isinstance(raw, Mapping):
                raise ConfigError(f"family {name!r} must be a mapping")
            known = {f.name for f in dataclasses.fields(FamilyParams)} - {"occupancy_by_head_dim",
                                                                          "hbm_bandwidth_bytes_per_s", "blend_power",
                                                                          "idle_program_s", "sm_saturation_gap", "run_s",
                                                                          "stream_exponent", "tile_overhead_s"}
            missing = known - set(raw)
            if missing:
                raise ConfigError(f"family {name!r} lacks {', '.join(sorted(missing))}")
            fams[name] = _family(name, raw)
        fit_raw = data.get("fit") or {}
        if not isinstance(fit_raw, Mapping):
            raise ConfigError(f"'fit' must be a mapping, got {type(fit_raw).__name__}")
        fit = dict(fit_raw)
        uncal = fit.get("uncalibrated_families")
        if uncal is not None and not (isinstance(uncal, list) and all(isinstance(f, str) for f in uncal)):
            raise ConfigError(f"'fit.uncalibrated_families' must be a list of family names, got {uncal!r:.60}")
        if fit.get("expected_error") is not None:
            from decodecalc.timemodel.accuracy import check_block

            check_block(fit["expected_error"])
        # an older profile: each family added since borrows its parent's numbers and map cells, uncalibrated
        borrowed = [new for new, old in FAMILY_FALLBACKS.items() if new not in fams and old in fams]
        if borrowed:
            fit["uncalibrated_families"] = sorted({*(fit.get("uncalibrated_families") or ()), *borrowed})
        prof = TimeProfile(
            gpu=gpu,
            num_sms=_int(data["num_sms"], "num_sms"),
            launch_overhead_s=_num(data["launch_overhead_s"], "launch_overhead_s"),
            idle_program_s=_num(data.get("idle_program_s", 0.0), "idle_program_s"),
            hbm_bandwidth_bytes_per_s=_num(data.get("hbm_bandwidth_bytes_per_s", 4.0e12), "hbm_bandwidth_bytes_per_s"),
            families=fams,
            calibrated=bool(data.get("calibrated", True)),
            source=str(data.get("source", "")),
            path=origin,
            fit=fit,
            residuals=residual_map_from_mapping(data["residuals"], origin) if data.get("residuals") is not None else None,
            **_in_graph(data.get("in_graph")),
        )
        for new in borrowed:  # its launches predict as the parent family's did
            prof = prof.borrowing(new)
    except KeyError as e:
        raise ConfigError(f"time profile {origin}: missing field {e.args[0]!r}") from None
    except ConfigError as e:
        raise ConfigError(f"time profile {origin}: {e}") from None
    if prof.num_sms <= 0:
        raise ConfigError(f"time profile {origin}: num_sms must be positive")
    if prof.hbm_bandwidth_bytes_per_s <= 0:
        raise ConfigError(f"time profile {origin}: hbm_bandwidth_bytes_per_s must be positive")
    for name in ("hbm_bandwidth_bytes_per_s", "launch_overhead_s", "idle_program_s"):
        lo, hi = PLAUSIBLE[name]
        if not lo <= getattr(prof, name) <= hi:  # a GPU whose times overflow or vanish: nothing to rank
            raise ConfigError(f"time profile {origin}: {name} must be between {lo:g} and {hi:g}, "
                              f"got {getattr(prof, name)!r}")
    if expect_gpu is not None and gpu_key(prof.gpu) != gpu_key(expect_gpu):
        raise ConfigError(f"time profile {origin} was measured on {prof.gpu!r}, not on {expect_gpu!r}; "
                          f"run 'decodecalc calibrate' on this GPU or remove the file")
    return prof


def _in_graph(raw: Any) -> dict[str, Any]:
    """The ``in_graph`` block's fields (none where the profile has no block)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not isinstance(raw.get("launch_s"), Mapping) or not raw["launch_s"]:
        raise ConfigError("'in_graph' must be a mapping with a non-empty 'launch_s' mapping (system: seconds)")
    known = {*KERNEL_FAMILIES, IN_GRAPH_DEFAULT}
    launch_s = {}
    for system, v in raw["launch_s"].items():
        if system not in known:
            raise ConfigError(f"in_graph.launch_s: unknown system {system!r} (known: {', '.join(sorted(known))})")
        x = v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
        if x is None or not math.isfinite(x) or abs(x) > 1e-3:  # a launch's cost, not a kernel's: microseconds
            raise ConfigError(f"in_graph.launch_s.{system} must be seconds between -1e-3 and 1e-3, got {v!r:.40}")
        launch_s[str(system)] = float(x)
    return {"in_graph_launch_s": launch_s, "in_graph_source": str(raw.get("source", ""))}


def _family(name: str, raw: Mapping) -> FamilyParams:
    """One family's numbers, its name in any error."""
    try:
        return FamilyParams(
            latency_s=_num(raw["latency_s"], f"{name}.latency_s"),
            program_bandwidth_bytes_per_s=_num(raw["program_bandwidth_bytes_per_s"],
                                               f"{name}.program_bandwidth_bytes_per_s"),
            sm_bandwidth_bytes_per_s=_num(raw["sm_bandwidth_bytes_per_s"], f"{name}.sm_bandwidth_bytes_per_s"),
            program_overhead_s=_num(raw["program_overhead_s"], f"{name}.program_overhead_s"),
            max_programs_per_sm=_int(raw["max_programs_per_sm"], f"{name}.max_programs_per_sm"),
            occupancy_by_head_dim=_occ_map(raw.get("occupancy_by_head_dim"), f"{name}.occupancy_by_head_dim"),
            hbm_bandwidth_bytes_per_s=_num(raw.get("hbm_bandwidth_bytes_per_s", 0.0),
                                           f"{name}.hbm_bandwidth_bytes_per_s"),
            blend_power=_num(raw.get("blend_power", 0.0), f"{name}.blend_power"),
            idle_program_s=_num(raw.get("idle_program_s", 0.0), f"{name}.idle_program_s"),
            sm_saturation_gap=_num(raw.get("sm_saturation_gap", 0.0), f"{name}.sm_saturation_gap"),
            run_s=_num(raw.get("run_s", 0.0), f"{name}.run_s"),
            stream_exponent=_num(raw.get("stream_exponent", 1.0), f"{name}.stream_exponent"),
            tile_overhead_s=_num(raw.get("tile_overhead_s", 0.0), f"{name}.tile_overhead_s"),
        )
    except ConfigError as e:
        msg = str(e)
        named = msg.startswith(("field ", f"{name}."))
        raise ConfigError(msg if named else f"family {name!r}: {msg}") from None


#: every profile number is a time (s), a bandwidth (B/s) or a count: never negative, never absurd
_MAX_PROFILE_NUMBER = 1e18
_MAX_PROFILE_INT = 1_000_000


def _num(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"field {name!r} must be a number, got {v!r}")
    if not 0 <= v <= _MAX_PROFILE_NUMBER:
        raise ConfigError(f"field {name!r} is {v!r}; supported: 0 to {_MAX_PROFILE_NUMBER:g}")
    return float(v)


def _occ_map(v: Any, name: str) -> tuple[tuple[int, int], ...]:
    if v is None:
        return ()
    if not isinstance(v, Mapping):
        raise ConfigError(f"{name} must be a mapping of head dim to programs per SM, got {v!r}")
    out = []
    for d, o in v.items():
        if isinstance(d, str) and d.isdigit():
            d = int(d)  # a JSON copy of a profile has string keys
        out.append((_int(d, name), _int(o, name)))
    return tuple(sorted(out))


def _int(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"field {name!r} must be an integer, got {v!r}")
    if not 1 <= v <= _MAX_PROFILE_INT:
        raise ConfigError(f"field {name!r} is {v}; supported: 1 to {_MAX_PROFILE_INT:,}")
    return v


def gpu_key(name: str) -> str:
    """A GPU name as profiles are keyed by: lower case, without "nvidia", dashes for spaces."""
    return name.lower().replace("nvidia ", "").replace(" ", "-")
