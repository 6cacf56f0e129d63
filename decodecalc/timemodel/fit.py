"""Fit the time model's parameters to measured launches (the GPU measuring lives in decodecalc.verify.calibration).

Pure Python (used by ``benchmarks/fit_timemodel.py`` and by ``decodecalc calibrate``); the shapes
and variants below are what :mod:`decodecalc.verify.calibration` times on the GPU.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from decodecalc.errors import ConfigError, DecodecalcError
from decodecalc.timemodel.accuracy import percentile  # one home for the error figures' quantile
from decodecalc.timemodel.predict import TIE_FRACTION, launch_time_s, model_launch_time_s, robust_time_s
from decodecalc.timemodel.profile import FamilyParams, TimeProfile
from decodecalc.launchers.sglang_triton import get_num_kv_splits
from decodecalc.timemodel.work import LaunchWork, sglang_work, vllm_work
from decodecalc.workload import DTYPE_BYTES


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    """The per-rank shape of one measured launch (the attributes the work functions read)."""

    num_heads: int
    num_kv_heads: int
    seq_lens: tuple[int, ...]
    head_size: int = 128
    head_size_v: int = 128
    kv_bytes_per_element: int = 2
    q_bytes: int = 2
    block_size: int = 16
    query_lens: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.query_lens:
            object.__setattr__(self, "query_lens", (1,) * len(self.seq_lens))

    @property
    def key(self) -> str:
        lens = self.seq_lens
        ls = str(lens[0]) if len(set(lens)) == 1 else "ragged:" + ",".join(map(str, lens))
        return f"{self.num_heads}:{self.num_kv_heads} d{self.head_size} B{len(lens)} L{ls}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    shape: Shape
    kernel: str  # vllm | sglang | reference
    variant: str  # e.g. vllm-3d-S16, vllm-2d, vllm-default, sglang-static-S8, sglang-adaptive
    splits: int  # 1 = unsplit (2D for vLLM)
    time_s: float
    work: LaunchWork
    is_default: bool = False
    model: str = ""


def work_for_variant(shape: Shape, variant: str, *, num_sms: int, row: Mapping[str, Any] | None = None) -> tuple[str, int, LaunchWork, bool]:
    """(kernel, splits, work, is_default) for one measured variant name."""
    if variant.startswith("vllm-"):
        if variant == "vllm-2d":
            return "vllm", 1, vllm_work(shape, splits=1, use_3d=False), False
        if variant.startswith("vllm-3d-S"):
            s = int(variant.removeprefix("vllm-3d-S"))
            return "vllm", s, vllm_work(shape, splits=s, use_3d=True), False
        if variant == "vllm-default":
            used_3d = True
            if row and "used_3d" in row:
                used_3d = bool(row["used_3d"])
            elif row and row.get("launches"):
                used_3d = len(row["launches"][0]["grid"]) == 3
            s = int(row.get("num_par_softmax_segments", 16)) if row else 16
            if used_3d:
                return "vllm", s, vllm_work(shape, splits=s, use_3d=True), True
            return "vllm", 1, vllm_work(shape, splits=1, use_3d=False), True
    if variant.startswith("sglang-"):
        if variant.startswith("sglang-static-S"):
            s = int(variant.removeprefix("sglang-static-S"))
            return "sglang", s, sglang_work(shape, splits=s, max_kv_splits=s), False
        if variant == "sglang-adaptive":
            mx = int(row.get("max_kv_splits", 8)) if row else 8
            if row and row.get("num_kv_splits") and len(row["num_kv_splits"]) == len(shape.seq_lens):
                n_i = tuple(int(x) for x in row["num_kv_splits"])
            else:
                n_i = get_num_kv_splits(shape.seq_lens, num_head=shape.num_heads, num_kv_head=shape.num_kv_heads,
                                        device_core_count=num_sms, max_kv_splits=mx)
            return "sglang", max(n_i), sglang_work(shape, splits=n_i, max_kv_splits=mx, adaptive=True), True
    if variant == "reference-vllm-2d":
        return "reference-vllm", 1, vllm_work(shape, splits=1, use_3d=False, prefix="ref_vllm"), False
    if variant.startswith("reference-vllm-3d-S"):
        s = int(variant.removeprefix("reference-vllm-3d-S"))
        return "reference-vllm", s, vllm_work(shape, splits=s, use_3d=True, prefix="ref_vllm"), False
    if variant.startswith("reference-sglang-S"):
        # run_grouped: SGLang's split rule with an unbounded SM count, i.e. max_kv_splits for long sequences
        s = int(variant.removeprefix("reference-sglang-S"))
        if row and row.get("num_kv_splits") and len(row["num_kv_splits"]) == len(shape.seq_lens):
            ref_n_i: tuple[int, ...] = tuple(int(x) for x in row["num_kv_splits"])
        else:
            ref_n_i = get_num_kv_splits(shape.seq_lens, num_head=shape.num_heads, num_kv_head=shape.num_kv_heads,
                                        device_core_count=1 << 20, max_kv_splits=s)
        lw = sglang_work(shape, splits=ref_n_i, max_kv_splits=s, prefix="ref_sglang")
        return "reference-sglang", s, dataclasses.replace(lw, extra_launches=1), False
    raise ConfigError(f"unknown measured variant {variant!r}")


def measurements_from_rows(rows: Iterable[Mapping[str, Any]], *, num_sms: int = 132) -> list[Measurement]:
    """Rows in the format of shared/data/h200-upstream-dev-grid.json (``cases``) or
    benchmarks/results/timemodel-*.json; rows without an ok time are skipped."""
    out: list[Measurement] = []
    for r in rows:
        if r.get("status", "ok") != "ok" or not r.get("t_us"):
            continue
        seq_lens = tuple(r["seq_lens"]) if r.get("seq_lens") else (int(r["seq_len"]),) * int(r["batch"])
        shape = Shape(num_heads=int(r["num_q_heads"]), num_kv_heads=int(r["num_kv_heads"]), seq_lens=seq_lens,
                      head_size=int(r["head_dim"]), head_size_v=int(r.get("head_dim_v", r["head_dim"])),
                      block_size=int(r.get("block_size", 16)),
                      kv_bytes_per_element=DTYPE_BYTES[str(r.get("kv_cache_dtype", "bfloat16"))])
        kernel, splits, work, is_default = work_for_variant(shape, r["variant"], num_sms=num_sms, row=r)
        out.append(Measurement(shape=shape, kernel=kernel, variant=r["variant"], splits=splits,
                               time_s=float(r["t_us"]) * 1e-6, work=work, is_default=is_default,
                               model=str(r.get("model", ""))))
    return out


# --------------------------------------------------------------------------------------------
# fitting

#: the continuous parameters of a family, fitted in log space
_FAM_KEYS = ("latency_s", "program_bandwidth_bytes_per_s", "sm_bandwidth_bytes_per_s", "program_overhead_s")
#: physical ranges the fit keeps each parameter in (a degenerate fit must not leave them)
_BOUNDS = {"latency_s": (1e-7, 5e-6), "program_bandwidth_bytes_per_s": (1e9, 1e12),
           "sm_bandwidth_bytes_per_s": (5e9, 4e11), "program_overhead_s": (1e-9, 1e-5),
           "idle_program_s": (1e-9, 1e-6), "hbm_bandwidth_bytes_per_s": (1e12, 6e12),
           "sm_saturation_gap": (0.01, 2.5), "run_s": (1e-11, 1e-7), "stream_exponent": (0.3, 1.3)}
#: where a fitted run cost starts (a few DRAM bursts' worth)
RUN_S_START = 5e-9
DEFAULT_FAMILY: dict[str, Any] = dict(latency_s=1e-6, program_bandwidth_bytes_per_s=20e9, sm_bandwidth_bytes_per_s=60e9,
                       program_overhead_s=1e-6, max_programs_per_sm=4)


def families_in(ms: Sequence[Measurement]) -> list[str]:
    """The time families the measurements' launches run, in first-seen order."""
    seen: dict[str, None] = {}
    for m in ms:
        for k in m.work.kernels:
            seen[k.family] = None
    return list(seen)


def _pack(profile: TimeProfile, fams: Sequence[str], free_globals: bool,
          idle_fams: Sequence[str] = (), sat_fams: Sequence[str] = (), run_fams: Sequence[str] = ()) -> list[float]:
    x = [math.log(_clamp("idle_program_s", profile.idle_program_s)),
         math.log(_clamp("hbm_bandwidth_bytes_per_s", profile.hbm_bandwidth_bytes_per_s))] if free_globals else []
    for f in fams:
        p = profile.families[f]
        x += [math.log(_clamp(k, getattr(p, k))) for k in _FAM_KEYS]
    for f in idle_fams:  # a family's own idle-program cost, starting from the GPU's
        x.append(math.log(_clamp("idle_program_s", profile.families[f].idle_program_s or profile.idle_program_s)))
    for f in sat_fams:  # where a family's SM load path saturates, short of full occupancy
        x.append(math.log(_clamp("sm_saturation_gap", profile.families[f].sm_saturation_gap or 0.5)))
    for f in run_fams:  # the cost of a separate run of memory in a program's iteration, and the stream's exponent
        x.append(math.log(_clamp("run_s", profile.families[f].run_s or RUN_S_START)))
        x.append(math.log(_clamp("stream_exponent", profile.families[f].stream_exponent)))
    return x


def _unpack(x: Sequence[float], base: TimeProfile, fams: Sequence[str], free_globals: bool,
            idle_fams: Sequence[str] = (), sat_fams: Sequence[str] = (), run_fams: Sequence[str] = ()) -> TimeProfile:
    families = dict(base.families)
    off = 2 if free_globals else 0
    for i, f in enumerate(fams):
        vals: dict[str, Any] = {k: _clamp(k, math.exp(v)) for k, v in zip(_FAM_KEYS, x[off + 4 * i: off + 4 * i + 4])}
        families[f] = dataclasses.replace(families[f], **vals)
    off += 4 * len(fams)
    for j, f in enumerate(idle_fams):
        families[f] = dataclasses.replace(families[f], idle_program_s=_clamp("idle_program_s", math.exp(x[off + j])))
    off += len(idle_fams)
    for j, f in enumerate(sat_fams):
        families[f] = dataclasses.replace(
            families[f], sm_saturation_gap=_clamp("sm_saturation_gap", math.exp(x[off + j])))
    off += len(sat_fams)
    for j, f in enumerate(run_fams):
        families[f] = dataclasses.replace(families[f], run_s=_clamp("run_s", math.exp(x[off + 2 * j])),
                                          stream_exponent=_clamp("stream_exponent", math.exp(x[off + 2 * j + 1])))
    if free_globals:
        return dataclasses.replace(base, idle_program_s=_clamp("idle_program_s", math.exp(x[0])),
                                   hbm_bandwidth_bytes_per_s=_clamp("hbm_bandwidth_bytes_per_s", math.exp(x[1])),
                                   families=families)
    return dataclasses.replace(base, families=families)


def _clamp(name: str, v: float) -> float:
    lo, hi = _BOUNDS[name]
    return min(hi, max(lo, v))


def _with_occupancy(profile: TimeProfile, fam: str, head_dim: int, occ: int) -> TimeProfile:
    p = profile.families[fam]
    table = dict(p.occupancy_by_head_dim)
    table[head_dim] = occ
    newp = dataclasses.replace(p, occupancy_by_head_dim=tuple(sorted(table.items())),
                               max_programs_per_sm=occ if head_dim == 128 else p.max_programs_per_sm)
    return dataclasses.replace(profile, families={**profile.families, fam: newp})


def log_errors(profile: TimeProfile, ms: Sequence[Measurement]) -> list[float]:
    """The physics' log errors (what the fit minimizes; a profile's residual map is not part of it)."""
    return [math.log(model_launch_time_s(m.work, profile) / m.time_s) for m in ms]


def log_loss(profile: TimeProfile, ms: Sequence[Measurement]) -> float:
    """What every fit minimizes: the mean soft-L1 of the physics' log errors (robust to the odd noisy row, still
    smooth; 5% is where it turns from quadratic to linear)."""
    tot = 0.0
    for e in log_errors(profile, ms):
        tot += 2.0 * (math.sqrt(1.0 + (e / 0.05) ** 2) - 1.0)
    return tot / max(1, len(ms))


def nelder_mead(f: Callable[[list[float]], float], x0: Sequence[float], *, step: float = 0.3,
                max_evals: int = 4000, tol: float = 1e-7) -> tuple[list[float], float]:
    n = len(x0)
    pts = [list(x0)]
    for i in range(n):
        p = list(x0)
        p[i] += step
        pts.append(p)
    vals = [f(p) for p in pts]
    evals = n + 1
    while evals < max_evals:
        order = sorted(range(n + 1), key=lambda i: vals[i])
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) <= tol * (abs(vals[0]) + 1e-12):
            break
        cen = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]
        xr = [c + (c - w) for c, w in zip(cen, pts[-1])]
        fr = f(xr)
        evals += 1
        if fr < vals[0]:
            xe = [c + 2 * (c - w) for c, w in zip(cen, pts[-1])]
            fe = f(xe)
            evals += 1
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = [c + 0.5 * (w - c) for c, w in zip(cen, pts[-1])]
            fc = f(xc)
            evals += 1
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                best = pts[0]
                pts = [best] + [[b + 0.5 * (p - b) for b, p in zip(best, q)] for q in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
                evals += n
    i = min(range(n + 1), key=lambda k: vals[k])
    return pts[i], vals[i]


def fit_families(ms: Sequence[Measurement], base: TimeProfile, *, families: Sequence[str], free_globals: bool = False,
                 restarts: int = 2, max_evals: int = 2000, idle_families: Sequence[str] = (),
                 saturating_families: Sequence[str] = (), run_families: Sequence[str] = ()) -> tuple[TimeProfile, float]:
    """Fit ``families`` of ``base`` (and, with ``free_globals``, the GPU-wide values) to ``ms`` by Nelder-Mead on the
    log loss, ``restarts`` times from jittered starts; every other family and the occupancies stay as ``base`` has them.
    ``idle_families`` / ``saturating_families`` / ``run_families`` also get their own idle-program cost, saturation gap
    and run cost. Returns the fitted profile and its loss."""
    fams, idle_fams, sat_fams, run_fams = families, idle_families, saturating_families, run_families

    def f(x: list[float]) -> float:
        return log_loss(_unpack(x, base, fams, free_globals, idle_fams, sat_fams, run_fams), ms)

    best_x = _pack(base, fams, free_globals, idle_fams, sat_fams, run_fams)
    best_v = f(best_x)
    rng = random.Random(0)
    for r in range(max(1, restarts)):
        start = best_x if r == 0 else [v + rng.gauss(0, 0.15) for v in best_x]
        x, v = nelder_mead(f, start, max_evals=max_evals, step=0.4 if r == 0 else 0.2)
        if v < best_v:
            best_x, best_v = x, v
    return _unpack(best_x, base, fams, free_globals, idle_fams, sat_fams, run_fams), best_v


#: resident programs per SM tried by the occupancy search (per family and padded head dim)
OCCUPANCY_CHOICES = (2, 3, 4, 5, 6, 8, 10, 12, 16)


def fit_profile(ms: Sequence[Measurement], base: TimeProfile, *, occupancy: Mapping[str, int] | None = None,
                search_occupancy: bool = True, restarts: int = 2, max_evals: int = 2000,
                launch_overhead_s: float | None = None, fit_globals: bool = True,
                progress: Callable[[str], None] | None = None, first_kernel: str | None = None,
                own_idle_kernels: Sequence[str] = (), saturating_kernels: Sequence[str] = (),
                run_kernels: Sequence[str] = (),
                fixed_occupancy: Mapping[str, Mapping[int, int]] | None = None) -> TimeProfile:
    """Least-squares fit (soft-L1 on log time), one kernel at a time: each family's latency, program
    bandwidth, SM bandwidth and program overhead; with the first (largest) kernel group also the GPU's
    achievable HBM bandwidth and the idle-program cost (``fit_globals``). Occupancy starts from
    ``occupancy`` (registers / shared memory of the compiled kernels) and, with ``search_occupancy``, is
    then chosen per family and padded head dim among OCCUPANCY_CHOICES (coordinate descent on the loss,
    alternating with the continuous fit). ``launch_overhead_s`` (measured: a tiny kernel's CUDA-graph
    replay) is fixed. ``first_kernel``: the kernel whose group is fitted first, with the globals.
    ``own_idle_kernels``: kernels whose families with idle programs get their own idle-program cost.
    ``saturating_kernels``: kernels whose working families (not their merge kernels) get their own
    ``sm_saturation_gap``. ``fixed_occupancy``: family -> {padded head dim: resident programs per SM}
    measured from the compiled kernels; set as given and left out of the occupancy search. The result has no
    residual map: a map belongs to the physics it was measured against (benchmarks/fit_timemodel.py builds one
    after the fit)."""
    if not ms:
        raise DecodecalcError("no measurements to fit the time model to")
    base = dataclasses.replace(base, residuals=None)
    if launch_overhead_s is not None:
        base = dataclasses.replace(base, launch_overhead_s=float(launch_overhead_s))
    families = dict(base.families)
    for f in families_in(ms):
        if f not in families:
            families[f] = FamilyParams(**DEFAULT_FAMILY)
        if occupancy and f in occupancy:
            families[f] = dataclasses.replace(families[f], max_programs_per_sm=int(occupancy[f]))
    prof = dataclasses.replace(base, families=families)
    fixed = {f: dict(t) for f, t in (fixed_occupancy or {}).items()}
    for f, table in fixed.items():
        if f in prof.families:
            for d, o in table.items():
                prof = _with_occupancy(prof, f, d, o)
    groups: dict[str, list[Measurement]] = {}
    for m in ms:
        groups.setdefault(m.kernel, []).append(m)
    # the globals are fitted with the first group: the largest, or ``first_kernel`` when it is measured
    order = sorted(groups, key=lambda k: (k != first_kernel, -len(groups[k])))
    for gi, kernel in enumerate(order):
        sub = groups[kernel]
        fams = families_in(sub)
        free = fit_globals and gi == 0
        idle_fams = [f for f in fams if kernel in own_idle_kernels
                     and any(k.family == f and k.idle_programs for m in sub for k in m.work.kernels)]
        sat_fams = [f for f in fams if kernel in saturating_kernels and not f.endswith(("_reduce", "_reduce_spill", "_stage2"))]
        # a run cost and a stream exponent are only told apart from the latency where the family's iterations
        # differ in size and in runs (several head dims, one and several KV heads per rank)
        run_fams = [f for f in fams if kernel in run_kernels
                    and len({(k.bytes_per_iter, k.runs_per_iter) for m in sub for k in m.work.kernels
                             if k.family == f and k.runs_per_iter}) >= 3]
        prof, v = fit_families(sub, prof, families=fams, free_globals=free, restarts=restarts, max_evals=max_evals,
                               idle_families=idle_fams, saturating_families=sat_fams, run_families=run_fams)
        for _round in range(3 if search_occupancy else 0):
            changed = False
            for f in fams:
                dims = sorted({k.head_dim for m in sub for k in m.work.kernels if k.family == f})
                for d in dims:
                    if d in fixed.get(f, {}):
                        continue
                    cur = prof.families[f].occupancy_for(d)
                    best_l, best_o = log_loss(prof, sub), cur
                    for o in OCCUPANCY_CHOICES:
                        if o != cur:
                            lo = log_loss(_with_occupancy(prof, f, d, o), sub)
                            if lo < best_l - 1e-9:
                                best_l, best_o = lo, o
                    if best_o != cur:
                        prof = _with_occupancy(prof, f, d, best_o)
                        changed = True
                        if progress:
                            progress(f"{f} d{d}: occupancy {cur} -> {best_o}")
            if not changed:
                break
            prof, v = fit_families(sub, prof, families=fams, free_globals=free, restarts=1, max_evals=max_evals,
                                   idle_families=idle_fams, saturating_families=sat_fams, run_families=run_fams)
        if progress:
            progress(f"{kernel}: {len(sub)} rows, loss {v:.4f}")
    return prof


# --------------------------------------------------------------------------------------------
# statistics


def abs_pct_errors(profile: TimeProfile, ms: Sequence[Measurement]) -> list[float]:
    return [abs(launch_time_s(m.work, profile) / m.time_s - 1.0) for m in ms]


def recommendation_quality(profile: TimeProfile, ms: Sequence[Measurement], *, robust: bool = True) -> dict[str, Any]:
    """Per (shape, kernel): the measured time of the split the model picks (from the measured
    candidates, defaults excluded; ranked as ``recommend`` ranks them) over the best measured candidate."""
    score = (lambda m: robust_time_s(m.work, profile)) if robust else (lambda m: launch_time_s(m.work, profile))

    def pick_of(cands: list[Measurement]) -> Measurement:  # recommend.choose on measured candidates
        sc = {id(m): score(m) for m in cands}
        best = min(sc.values())
        tie = TIE_FRACTION if robust else 0.0
        return max((m for m in cands if sc[id(m)] <= best * (1 + tie)), key=lambda m: (m.splits, -sc[id(m)]))
    groups: dict[tuple[str, str], list[Measurement]] = {}
    for m in ms:
        if m.is_default:
            continue
        groups.setdefault((m.shape.key, m.kernel), []).append(m)
    ratios: dict[str, list[tuple[str, float, str, str]]] = {}
    for (key, kernel), cands in groups.items():
        if len(cands) < 2:
            continue
        pick = pick_of(cands)
        best = min(cands, key=lambda m: m.time_s)
        ratios.setdefault(kernel, []).append((key, pick.time_s / best.time_s, pick.variant, best.variant))
    out: dict[str, Any] = {}
    for kernel, rs in ratios.items():
        vals = [r[1] for r in rs]
        out[kernel] = {
            "shapes": len(vals),
            "geomean": math.exp(sum(math.log(v) for v in vals) / len(vals)),
            "worst": max(vals),
            "worst_shape": max(rs, key=lambda r: r[1])[0],
            "within_1_10": sum(v <= 1.10 for v in vals) / len(vals),
        }
    all_vals = [r[1] for rs in ratios.values() for r in rs]
    if all_vals:
        out["all"] = {"shapes": len(all_vals), "geomean": math.exp(sum(math.log(v) for v in all_vals) / len(all_vals)),
                      "worst": max(all_vals)}
    return out


def error_summary(profile: TimeProfile, ms: Sequence[Measurement]) -> dict[str, float]:
    e = abs_pct_errors(profile, ms)
    return {"rows": len(e), "median_abs_err": percentile(e, 0.5), "p90_abs_err": percentile(e, 0.9),
            "max_abs_err": max(e) if e else float("nan")}
