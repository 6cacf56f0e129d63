"""Predict the time of a decode-attention launch from the work its programs do.

Pure Python (no torch, no numpy): the CLI imports it for ``recommend``, ``grid`` and ``compare``.

The model, per kernel family (``vllm_2d``, ``vllm_3d``, ``vllm_reduce``, ``sglang_stage1`` (SGLang's
grouped GQA/MQA kernel ``_fwd_grouped_kernel_stage1``), ``sglang_mha_stage1`` (SGLang's MHA kernel
``_fwd_kernel_stage1``: one query head per program, BLOCK_N 64, no tensor-core dot), ``sglang_stage2``,
and the ``ref_*`` families of decodecalc's own kernels):

* A launch is a set of *working programs*; program ``i`` runs ``n_i`` loop iterations, each
  moving ``b`` bytes from HBM (one KV tile of K and V, or one partial state for a merge).
  Programs that exit at once (vLLM's surplus q-block programs) only cost
  ``idle_program_s`` each, spread over the SMs.
* At most ``max_programs_per_sm`` programs are resident on one SM (occupancy, from the
  kernel's registers and shared memory: data of the profile, one value per GPU and family).
  ``c = min(occupancy, ceil(N / num_sms))`` programs share the busiest SM.
* One iteration of a program takes ``t_it = max(latency_s + b / program_bandwidth_bytes_per_s
  + c * b / sm_bandwidth_bytes_per_s, n * b / hbm_bandwidth_bytes_per_s)``: an unloaded round
  trip (the dependent loads of the loop body that the kernel's pipelining does not hide), the
  time one program's warps need to stream its tile (their own loads in flight and the math on
  them, so it scales with the head dim), and the time the SM's load path needs to take in the
  bytes of its ``c`` programs, unless all ``n`` resident programs of the GPU together ask more
  of HBM than its achievable bandwidth. This is Little's law: an SM moves ``c * b / t_it`` bytes/s, growing with
  its bytes in flight ``c * b`` towards ``sm_bandwidth``; the GPU moves at most
  ``hbm_bandwidth`` (about the 4.2-4.3 TB/s a device-to-device copy reaches on an H200).
* Programs run in waves of ``occupancy * num_sms``; a program takes
  ``program_overhead_s + n_i * t_it``; the last, partial wave runs at its own lower
  concurrency (the tail). Ragged work is scheduled as a list over the slots.
* Each kernel of the launch adds ``launch_overhead_s`` (graph replay, so no CPU cost); a
  two-kernel split launch pays its merge kernel with the same model.

Parameters live in a :class:`TimeProfile` (YAML, ``decodecalc/profiles/<gpu>.yaml`` packaged,
or ``$XDG_CONFIG_HOME/decodecalc/profiles/<gpu>.yaml`` from ``decodecalc calibrate``).
A GPU with neither falls back to datasheet figures and every prediction is marked
uncalibrated.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from decodecalc.derived import cdiv, next_power_of_2
from decodecalc.errors import ConfigError
from decodecalc.yamlio import load_yaml_file, safe_load

#: kernel families the model knows; each has its own FamilyParams in a profile
FAMILIES = ("vllm_2d", "vllm_3d", "vllm_reduce", "sglang_stage1", "sglang_mha_stage1", "sglang_stage2",
            "ref_vllm_2d", "ref_vllm_3d", "ref_vllm_reduce", "ref_sglang_stage1", "ref_sglang_stage2")
#: families added after profiles were first written: a profile without one loads with the parameters of the
#: family named here, and that family is listed in its fit's ``uncalibrated_families``
FAMILY_FALLBACKS = {"sglang_mha_stage1": "sglang_stage1"}

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
KERNEL_FAMILIES = {
    "vllm": ("vllm_2d", "vllm_3d", "vllm_reduce"),
    "sglang": ("sglang_stage1", "sglang_mha_stage1", "sglang_stage2"),
    # decodecalc's own Triton kernels (decodecalc.verify.reference_kernels), one per engine layout
    "reference-vllm": ("ref_vllm_2d", "ref_vllm_3d", "ref_vllm_reduce"),
    "reference-sglang": ("ref_sglang_stage1", "ref_sglang_stage2"),
}

PROFILE_SCHEMA = 1


# --------------------------------------------------------------------------------------------
# parameters


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
        if not (isinstance(self.program_overhead_s, (int, float)) and self.program_overhead_s >= 0):
            raise ConfigError(f"program_overhead_s must be >= 0, got {self.program_overhead_s!r}")
        if not (isinstance(self.max_programs_per_sm, int) and self.max_programs_per_sm >= 1):
            raise ConfigError(f"max_programs_per_sm must be a positive integer, got {self.max_programs_per_sm!r}")
        for d, o in self.occupancy_by_head_dim:
            if not (isinstance(d, int) and isinstance(o, int) and d > 0 and o >= 1):
                raise ConfigError(f"occupancy_by_head_dim entries must be positive integers, got {d!r}: {o!r}")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["occupancy_by_head_dim"] = {d: o for d, o in self.occupancy_by_head_dim}
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
            known = {f.name for f in dataclasses.fields(FamilyParams)} - {"occupancy_by_head_dim"}
            missing = known - set(raw)
            if missing:
                raise ConfigError(f"family {name!r} lacks {', '.join(sorted(missing))}")
            fams[name] = FamilyParams(
                latency_s=_num(raw["latency_s"], f"{name}.latency_s"),
                program_bandwidth_bytes_per_s=_num(raw["program_bandwidth_bytes_per_s"],
                                                   f"{name}.program_bandwidth_bytes_per_s"),
                sm_bandwidth_bytes_per_s=_num(raw["sm_bandwidth_bytes_per_s"], f"{name}.sm_bandwidth_bytes_per_s"),
                program_overhead_s=_num(raw["program_overhead_s"], f"{name}.program_overhead_s"),
                max_programs_per_sm=_int(raw["max_programs_per_sm"], f"{name}.max_programs_per_sm"),
                occupancy_by_head_dim=_occ_map(raw.get("occupancy_by_head_dim"), f"{name}.occupancy_by_head_dim"),
            )
        fit = dict(data.get("fit") or {})
        borrowed = [new for new, old in FAMILY_FALLBACKS.items() if new not in fams and old in fams]
        for new in borrowed:  # an older profile: the new family borrows its parent's numbers, uncalibrated
            fams[new] = fams[FAMILY_FALLBACKS[new]]
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
        )
    except KeyError as e:
        raise ConfigError(f"time profile {origin}: missing field {e.args[0]!r}") from None
    except ConfigError as e:
        raise ConfigError(f"time profile {origin}: {e}") from None
    if prof.num_sms <= 0:
        raise ConfigError(f"time profile {origin}: num_sms must be positive")
    if prof.hbm_bandwidth_bytes_per_s <= 0:
        raise ConfigError(f"time profile {origin}: hbm_bandwidth_bytes_per_s must be positive")
    if expect_gpu is not None and _norm(prof.gpu) != _norm(expect_gpu):
        raise ConfigError(f"time profile {origin} was measured on {prof.gpu!r}, not on {expect_gpu!r}; "
                          f"run 'decodecalc calibrate' on this GPU or remove the file")
    return prof


def _num(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"{name} must be a number, got {v!r}")
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
        raise ConfigError(f"{name} must be an integer, got {v!r}")
    return v


def _norm(name: str) -> str:
    return name.lower().replace("nvidia ", "").replace(" ", "-")


def load_profile_file(path: Path, *, expect_gpu: str | None = None) -> TimeProfile:
    data = load_yaml_file(path, "time profile")
    return profile_from_mapping(data, origin=str(path), expect_gpu=expect_gpu)


def dump_profile(profile: TimeProfile) -> str:
    import yaml

    header = ("# decodecalc time-model profile (see decodecalc/timemodel.py for what each number means)\n"
              "# units: seconds, bytes/s; max_programs_per_sm is resident programs per SM\n")
    return header + yaml.safe_dump(profile.to_mapping(), sort_keys=False)


def user_profile_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "decodecalc" / "profiles"


def _profile_key(gpu_name: str) -> str:
    return _norm(gpu_name)


@functools.cache
def packaged_profile(gpu_name: str) -> TimeProfile | None:
    key = _profile_key(gpu_name)
    try:
        ref = resources.files("decodecalc.profiles").joinpath(f"{key}.yaml")
        if not ref.is_file():
            return None
        data = safe_load(ref.read_text())
    except (ModuleNotFoundError, FileNotFoundError):
        return None
    return profile_from_mapping(data, origin=f"decodecalc/profiles/{key}.yaml (packaged)", expect_gpu=gpu_name)


def datasheet_profile(gpu: Any) -> TimeProfile:
    """Uncalibrated fallback: the H200's fitted latencies, overheads and occupancies, this GPU's SM count,
    and its datasheet bandwidth scaled by the share of the datasheet the H200 achieves."""
    base = _builtin_h200()
    scale = (gpu.hbm_bandwidth_bytes_per_s * 0.85 / gpu.num_sms) / (4.8e12 * 0.85 / 132)
    fams = {k: dataclasses.replace(v, sm_bandwidth_bytes_per_s=v.sm_bandwidth_bytes_per_s * scale)
            for k, v in base.families.items()}
    hbm = base.hbm_bandwidth_bytes_per_s * gpu.hbm_bandwidth_bytes_per_s / 4.8e12  # same achievable share
    return TimeProfile(gpu=gpu.name, num_sms=gpu.num_sms, launch_overhead_s=base.launch_overhead_s,
                       idle_program_s=base.idle_program_s, families=fams, calibrated=False,
                       hbm_bandwidth_bytes_per_s=hbm,
                       source=f"datasheet fallback: {gpu.name} SM count and bandwidth, H200 latencies (uncalibrated)")


def _builtin_h200() -> TimeProfile:
    prof = packaged_profile("h200")
    if prof is None:  # pragma: no cover - the wheel always ships it
        raise ConfigError("the packaged H200 time profile decodecalc/profiles/h200.yaml is missing")
    return prof


def resolve_profile(gpu: Any, *, profile_path: Path | None = None) -> TimeProfile:
    """The profile for ``gpu`` (a GPUSpec): an explicit file, else the user's calibrated file,
    else the packaged one, else the uncalibrated datasheet fallback."""
    if profile_path is not None:
        return load_profile_file(Path(profile_path), expect_gpu=gpu.name)
    user = user_profile_dir() / f"{_profile_key(gpu.name)}.yaml"
    if user.is_file():
        return load_profile_file(user, expect_gpu=gpu.name)
    for name in (gpu.name, *getattr(gpu, "aliases", ())):
        prof = packaged_profile(name)
        if prof is not None:
            if prof.num_sms != gpu.num_sms:  # --sms override: same kernels, other chip size
                prof = dataclasses.replace(prof, num_sms=gpu.num_sms)
            return prof
    return datasheet_profile(gpu)


# --------------------------------------------------------------------------------------------
# the work a launch does


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
# the time of that work


def kernel_time_s(work: KernelWork, fam: FamilyParams, num_sms: int, idle_program_s: float = 0.0,
                  hbm_bandwidth_bytes_per_s: float = 4.0e12, occupancy_delta: int = 0) -> float:
    """Time of one kernel's programs (no launch overhead): waves of resident programs, each iteration
    ``max(latency + c * bytes / sm_bandwidth, resident programs * bytes / hbm_bandwidth)``, the last
    wave at its own (lower) concurrency."""
    n = work.programs
    idle_cost = work.idle_programs * idle_program_s / num_sms
    if n == 0:
        return idle_cost
    occ = max(1, fam.occupancy_for(work.head_dim) + occupancy_delta)
    slots = occ * num_sms
    b = work.bytes_per_iter

    lat, bw, hbm = fam.latency_s + b / fam.program_bandwidth_bytes_per_s, fam.sm_bandwidth_bytes_per_s, \
        hbm_bandwidth_bytes_per_s

    def t_it(c: int, conc: int | None = None) -> float:
        # the SM: a round trip plus its c programs' bytes through its load path (Little's law: bytes in
        # flight / time); the GPU: every resident program's bytes through HBM
        conc = c * num_sms if conc is None else conc
        return max(lat + c * b / bw, conc * b / hbm)

    t0 = fam.program_overhead_s
    if len(work.iters) == 1:
        iters = work.iters[0][0]
        full, rest = divmod(n, slots)
        t = full * (t0 + iters * t_it(occ, slots))
        if rest:
            t += t0 + iters * t_it(min(occ, cdiv(rest, num_sms)), rest)
        return t + idle_cost
    # ragged: list scheduling (longest first) over the slots at the busiest SM's concurrency
    c = min(occ, cdiv(n, num_sms))
    ti = t_it(c, min(n, slots))
    durations = sorted(((t0 + i * ti, k) for i, k in work.iters), reverse=True)
    if n <= slots:
        return durations[0][0] + idle_cost
    if n > 50_000:  # bound: mean load per slot, at least the longest program
        total = sum(dur * k for dur, k in durations)
        return max(durations[0][0], total / slots) + idle_cost
    heap = [0.0] * slots
    for dur, k in durations:
        for _ in range(k):
            heapq.heapreplace(heap, heap[0] + dur)
    return max(heap) + idle_cost


def launch_time_s(lw: LaunchWork, profile: TimeProfile, occupancy_delta: int = 0) -> float:
    t = (len(lw.kernels) + lw.extra_launches) * profile.launch_overhead_s
    for kw in lw.kernels:
        t += kernel_time_s(kw, profile.family(kw.family), profile.num_sms, profile.idle_program_s,
                           profile.hbm_bandwidth_bytes_per_s, occupancy_delta)
    return t


def robust_time_s(lw: LaunchWork, profile: TimeProfile) -> float:
    """The score ``recommend`` ranks candidates by: the geometric mean of the predicted time at the
    profile's occupancy and one program per SM either side. Occupancy is the least certain input (it
    comes from one compiled specialization per kernel) and a wrong value moves the wave boundaries,
    so a candidate that is fast only at exactly the assumed occupancy is not preferred."""
    ts = [launch_time_s(lw, profile, d) for d in (-1, 0, 1)]
    return math.exp(sum(math.log(t) for t in ts) / len(ts))


# --------------------------------------------------------------------------------------------
# public entry point for grid / compare


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


def predict_time_s(plan: Any, workload: Any, gpu: Any, kernel: str, *,
                   profile: TimeProfile | None = None) -> tuple[float, bool]:
    """Predicted time of ``plan`` (a LaunchPlan for ``workload`` on ``gpu``) in seconds, and whether
    the prediction comes from a calibrated profile of this GPU (and of these kernels).
    ``kernel``: vllm | sglang | reference (decodecalc's own kernels, in the plan's layout)."""
    prof = profile if profile is not None else resolve_profile(gpu)
    lw = work_for_plan(plan, workload, kernel)
    uncal = set(prof.fit.get("uncalibrated_families", ()) or ())
    calibrated = prof.calibrated and not (uncal & {k.family for k in lw.kernels})
    return launch_time_s(lw, prof), calibrated
