"""The time of a launch's work under a :class:`~decodecalc.timemodel.profile.TimeProfile`."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from decodecalc.derived import cdiv, maximum, minimum
from decodecalc.launchers.base import LaunchPlan
from decodecalc.specs.gpus import GPUSpec
from decodecalc.errors import ConfigError
from decodecalc.timemodel.profile import BLEND_POWER_RANGE, FamilyParams, TimeProfile
from decodecalc.timemodel.profile_sources import resolve_profile
from decodecalc.timemodel.plan_work import work_for_plan
from decodecalc.timemodel.residuals import Correction
from decodecalc.timemodel.work import KernelWork, LaunchWork, Order, Row
from decodecalc.workload import Workload


#: candidates whose ranking scores lie within this fraction of the best are indistinguishable to the model
#: (its median error on the H200 training shapes is 4.5%); among them the one with the most splits is
#: recommended, because on the H200 the measured time kept falling with more programs a little longer than
#: the model predicts (more bytes in flight, a smaller last wave). benchmarks/fit_timemodel.py reports the
#: effect: worst recommended/best 1.34 -> 1.18 on the training shapes, 1.43 -> 1.15 on the held-out ones.
TIE_FRACTION = 0.05


#: the iteration size at which a family's ``stream_exponent`` leaves its program bandwidth as fitted: 16 KiB, one
#: iteration of K and V tiles of 32 tokens at head dim 128 in bf16 (SGLang's stage 1; vLLM's 3D kernel at d128)
STREAM_REF_BYTES = 16384

#: Python's own numbers: t_it's scalar path (anything else, numpy's scalars included, takes the array arithmetic)
_PLAIN = frozenset({int, float, bool})


@dataclass(frozen=True, slots=True)
class IterationCost:
    """What one loop iteration of a kernel's programs costs (the iteration model of :mod:`decodecalc.timemodel`), and
    the per-program constants: built once per kernel by :func:`iteration_cost`. Its functions take one value or
    arrays of them (tune's batch evaluator, :mod:`decodecalc.batch`), so both time a launch with the same code."""

    latency_s: float  # an unloaded round trip plus the program's own stream of one iteration's HBM bytes
    bytes_per_iter: float  # through the SM's load path (every byte)
    hbm_bytes_per_iter: float  # into HBM traffic (bytes L2 serves to a second reader excluded)
    sm_bandwidth: float
    hbm_bandwidth: float
    blend_power: float  # 0: the larger of the SM and HBM times; p > 0: their L^p norm
    saturated: float  # resident programs from which the SM's load path is saturated (occupancy - gap)
    occupancy: int  # resident programs per SM
    num_sms: int
    program_overhead_s: float  # t0: prologue + epilogue of one program
    idle_program_s: float  # SM time of a program that exits at once (spread over the SMs)
    #: a persistent kernel's tile after a CTA's first (FamilyParams.tile_overhead_s); 0: not persistent
    tile_overhead_s: float = 0.0

    @property
    def slots(self) -> int:
        return self.occupancy * self.num_sms

    # the rates below take plain numbers, or numpy arrays of them elementwise (tune's batch evaluator): typed as the
    # scalars, as the launcher rules they mirror are
    def t_it(self, c: float, conc: float | None = None) -> float:
        """One iteration with ``c`` programs on the busiest SM and ``conc`` resident GPU-wide (default ``c`` per SM):
        ``max(latency + min(c, saturated) * bytes / sm_bandwidth, conc * hbm_bytes / hbm_bandwidth)`` or their L^p
        norm. Little's law on the SM's load path; the GPU's achievable HBM bandwidth caps it."""
        conc = c * self.num_sms if conc is None else conc
        if type(c) not in _PLAIN or type(conc) not in _PLAIN:  # arrays of concurrencies (tune's batch evaluator)
            sm = self.latency_s + minimum(c, self.saturated) * self.bytes_per_iter / self.sm_bandwidth
            hbm = conc * self.hbm_bytes_per_iter / self.hbm_bandwidth
            if self.blend_power:
                return (sm ** self.blend_power + hbm ** self.blend_power) ** (1 / self.blend_power)
            return maximum(sm, hbm)
        sm = self.latency_s + min(c, self.saturated) * self.bytes_per_iter / self.sm_bandwidth
        hbm = conc * self.hbm_bytes_per_iter / self.hbm_bandwidth
        if self.blend_power:
            try:
                return (sm ** self.blend_power + hbm ** self.blend_power) ** (1 / self.blend_power)
            except OverflowError:  # a power the profile loader's range (BLEND_POWER_RANGE) keeps out: not a traceback
                raise ConfigError(f"the time model overflows a float with blend_power {self.blend_power!r} "
                                  f"(valid: 0, or {BLEND_POWER_RANGE[0]:g} to {BLEND_POWER_RANGE[1]:g})") from None
        return max(sm, hbm)

    def busy_t_it(self, m: int) -> float:
        """An iteration while ``m`` programs run, spread over the SMs: ``t_it(min(occupancy, cdiv(m, SMs)), m)``."""
        return self.t_it(minimum(self.occupancy, cdiv(m, self.num_sms)), m)

    def idle_s(self, idle_programs: int) -> float:
        return idle_programs * self.idle_program_s / self.num_sms

    def uniform_s(self, programs: int, iters: int) -> float:
        """``programs`` programs of ``iters`` iterations each: full waves at full occupancy, then the last partial
        wave at its own concurrency (``programs > 0``)."""
        full, rest = programs // self.slots, programs % self.slots
        t = full * (self.program_overhead_s + iters * self.t_it(self.occupancy, self.slots))
        last = self.program_overhead_s + iters * self.t_it(minimum(self.occupancy, cdiv(rest, self.num_sms)), rest)
        if hasattr(rest, "shape"):
            return t + (rest > 0) * last
        return t + last if rest else t


def iteration_cost(work: KernelWork, fam: FamilyParams, num_sms: int, idle_program_s: float = 0.0,
                   hbm_bandwidth_bytes_per_s: float = 4.0e12, occupancy_delta: int = 0) -> IterationCost:
    """The :class:`IterationCost` of ``work``'s programs under family ``fam``: the occupancy (the work's own, else
    the family's for its head dim, plus ``occupancy_delta``, at least 1) and the bytes each iteration moves."""
    occ = max(1, (work.occupancy or fam.occupancy_for(work.head_dim)) + occupancy_delta)
    b = work.bytes_per_iter
    b_hbm = b if work.hbm_bytes_per_iter is None else work.hbm_bytes_per_iter  # bytes one program adds to HBM traffic
    # a program's own stream (its loads in flight) pays HBM latency on the bytes it brings in from HBM; re-reads
    # that L2 serves do not (b_hbm < b); every byte crosses the SM's load path
    # each separate run of memory a program's iteration gathers costs its stream a fixed time beyond the bytes
    runs_s = work.runs_per_iter * fam.run_s
    stream_s = b_hbm / fam.program_bandwidth_bytes_per_s
    if fam.stream_exponent != 1.0 and b_hbm > 0:
        stream_s *= (b_hbm / STREAM_REF_BYTES) ** (fam.stream_exponent - 1.0)
    return IterationCost(latency_s=fam.latency_s + stream_s + runs_s,
                         bytes_per_iter=b,
                         hbm_bytes_per_iter=b_hbm, sm_bandwidth=fam.sm_bandwidth_bytes_per_s,
                         hbm_bandwidth=fam.hbm_bandwidth_bytes_per_s or hbm_bandwidth_bytes_per_s,
                         blend_power=work.blend_power or fam.blend_power,
                         saturated=occ - fam.sm_saturation_gap,  # the SM's load path is saturated from here on
                         occupancy=occ, num_sms=num_sms, program_overhead_s=fam.program_overhead_s,
                         idle_program_s=fam.idle_program_s or idle_program_s,
                         tile_overhead_s=fam.tile_overhead_s if getattr(work, "persistent", False) else 0.0)


def kernel_time_s(work: KernelWork, fam: FamilyParams, num_sms: int, idle_program_s: float = 0.0,
                  hbm_bandwidth_bytes_per_s: float = 4.0e12, occupancy_delta: int = 0) -> float:
    """Time of one kernel's programs (no launch overhead): waves of resident programs, each iteration
    ``max(latency + c * bytes / sm_bandwidth, resident programs * HBM bytes / hbm_bandwidth)``, the last
    wave at its own (lower) concurrency.

    With the grid order recorded (``work.order``) and ragged programs, they start in that order, each on
    the first slot that frees (the block scheduler's dispatch: blockIdx.x fastest, then y, then z), and
    once the last one has started the ones still running speed up as their SMs empty
    (:func:`_shared_tail_s`); in one wave that is all. Without it (the backends) the programs are
    scheduled longest first. A program that exits at once costs ``idle_program_s`` of SM time.
    """
    n = work.programs
    cost = iteration_cost(work, fam, num_sms, idle_program_s, hbm_bandwidth_bytes_per_s, occupancy_delta)
    occ, slots, t_it = cost.occupancy, cost.slots, cost.t_it
    t0 = cost.program_overhead_s
    idle_cost = cost.idle_s(work.idle_programs)
    if n == 0:
        return idle_cost
    if cost.tile_overhead_s and n > slots:
        # persistent CTAs, one per slot, take the tiles longest first: a CTA's prologue once (t0), each further tile
        # tile_overhead_s (its loads overlap the last tile's epilogue), every tile at full concurrency
        toh = cost.tile_overhead_s
        ti = t_it(occ, slots)
        durations = sorted(((toh + i * ti, k) for i, k in work.iters), reverse=True)
        if n > 50_000:  # bound: mean load per slot, at least the longest tile
            busy = max(durations[0][0], sum(dur * k for dur, k in durations) / slots)
        else:
            busy = _list_schedule_s(durations, slots)
        return t0 - toh + busy + idle_cost
    if len(work.iters) == 1:
        return cost.uniform_s(n, work.iters[0][0]) + idle_cost
    if not work.order:
        # the order was not recorded: list scheduling longest first over the slots at the busiest SM's concurrency
        c = min(occ, cdiv(n, num_sms))
        ti = t_it(c, min(n, slots))
        durations = sorted(((t0 + i * ti, k) for i, k in work.iters), reverse=True)
        if n <= slots:
            return durations[0][0] + idle_cost
        if n > 50_000:  # bound: mean load per slot, at least the longest program
            total = sum(dur * k for dur, k in durations)
            return max(durations[0][0], total / slots) + idle_cost
        return _list_schedule_s(durations, slots) + idle_cost
    # ragged, in grid order: every program starts on the first slot that frees (the block scheduler's dispatch);
    # once the last one has started, the programs still running share their SMs with fewer and fewer others
    if n <= slots:  # one wave: everything starts at once
        return t0 + _shared_tail_s([(float(i), k) for i, k in work.iters], t_it, num_sms, occ) + idle_cost
    return grid_order_busy_s(work.order, work.runs, cost) + idle_cost


def grid_order_busy_s(order: Order, runs: int, cost: IterationCost) -> float:
    """The working programs' time of a ragged launch of more than one wave dispatched in grid order (``order``, of
    ``runs`` runs): the time the last program starts (:func:`_grid_order_schedule`, at the full-occupancy iteration
    time), its program overhead, and the shared tail of the programs still running then. The batch evaluator's
    dispatch (decodecalc/batch/dispatch.py, and its C twin) computes this for many launches at once."""
    t0, occ = cost.program_overhead_s, cost.occupancy
    t_start, running = _grid_order_schedule(order, t0, cost.t_it(occ, cost.slots), cost.slots, runs)
    return t_start + t0 + _shared_tail_s(running, cost.t_it, cost.num_sms, occ)


#: above this many runs (rows written out) a grid's dispatch is followed run by run only over its last
#: TAIL_WAVES waves of programs
MAX_EXACT_RUNS = 64
TAIL_WAVES = 2
#: a group of programs this many times the slots is placed in whole rounds (decodecalc.limits: no input may
#: cost more than a few seconds; a walk of programs / slots steps did at --sms 1)
FAST_ROUNDS = 16


def _grid_order_schedule(order: Order, t0: float, ti: float, slots: int, runs: int
                         ) -> tuple[float, list[tuple[float, int]]]:
    """List scheduling in grid order: each program, in the order the grid dispatches them, on the slot that
    frees first (a program takes ``t0 + iterations x ti``). Returns the time the last program starts and,
    for the programs running then, their remaining loop iterations (at the iteration time ``ti``) with
    their counts.

    Slots with equal loads form one group (their last program's iterations kept), so the cost grows with
    the runs and the distinct loads, not the programs. A grid with more than MAX_EXACT_RUNS runs is
    followed in coarser steps that keep the order of the rows (the z planes and the y repeats): each row's
    repeats summarized (:func:`_row_parts`), except that of the rows in the last TAIL_WAVES waves the last
    repeat is followed in its order (its long programs may be the last to start)."""
    # load -> [slots (an int), iterations of their last program (a float)]: a mutable pair (the innermost loop
    # updates it in place), so its items are typed Any
    loads: dict[float, list[Any]] = {0.0: [slots, 0.0]}
    heap = [0.0]
    start = 0.0
    fast = FAST_ROUNDS * slots

    def place(i: float, k: int) -> None:
        nonlocal start
        dur = t0 + i * ti
        while k:
            if k >= fast and max(loads) - heap[0] < dur:
                # every slot takes one program per round, in load order, and the loads keep their spread:
                # whole rounds at once (few SMs, many programs: otherwise a walk of k / slots steps; the
                # same schedule up to the rounding of the loads)
                rounds = k // slots
                shift, top = rounds * dur, max(loads)
                moved = {load + shift: [g[0], i] for load, g in loads.items()}
                loads.clear()
                loads.update(moved)
                heap[:] = sorted(loads)
                low = top + shift - dur  # where the last program of the last round started
                k -= rounds * slots
                continue
            low = heap[0]
            grp = loads[low]
            have = grp[0]
            if have <= k:  # (comparisons, not min/max: the scalar model's innermost loop)
                take = have
                heapq.heappop(heap)
                del loads[low]
            else:
                take = k
                grp[0] = have - k
            new = low + dur
            g = loads.get(new)
            if g is None:
                loads[new] = [take, i]
                heapq.heappush(heap, new)
            else:
                g[0] += take
                if i > g[1]:
                    g[1] = i
            k -= take
        start = low

    if runs <= MAX_EXACT_RUNS:
        for row, rep in order:
            for _ in range(rep):
                for i, k in row:
                    place(i, k)
    else:
        # the programs that start in the last TAIL_WAVES waves decide the end: of each row there, its last repeat in
        # grid order; the repeats before, and the rows before the tail, as ROW_PARTS runs of equal program counts
        # (the row's programs by length, each part its mean), longest first
        left = sum(sum(k for _, k in row) * rep for row, rep in order) - TAIL_WAVES * slots
        for row, rep in order:
            progs = sum(k for _, k in row)
            early = rep if len(row) == 1 or left >= progs * rep else rep - 1
            left -= progs * rep
            if early:
                for mean, n in _row_parts(row, progs):
                    place(mean, n * early)
            if early < rep:
                for i, k in row:
                    place(i, k)
    running = [(min(g[1], (load - start) / ti), g[0]) for load, g in loads.items() if load > start]
    return start, running


#: parts a row is summarized in where its order is not followed
ROW_PARTS = 4


def _row_parts(row: Row, progs: int) -> list[tuple[float, int]]:
    """A row's programs by length, longest first, in ROW_PARTS parts of (nearly) equal counts: (mean, count)."""
    if len(row) == 1:
        return [(float(row[0][0]), row[0][1])]
    size = cdiv(progs, ROW_PARTS)
    out: list[tuple[float, int]] = []
    n_p = it_p = 0
    for i, k in sorted(row, reverse=True):
        while k:
            take = min(k, size - n_p)
            n_p += take
            it_p += i * take
            k -= take
            if n_p == size:
                out.append((it_p / n_p, n_p))
                n_p = it_p = 0
    if n_p:
        out.append((it_p / n_p, n_p))
    return out


def _shared_tail_s(running: list[tuple[float, int]], t_it: Callable[[int, int], float], num_sms: int,
                   occ: int) -> float:
    """Time for programs with these remaining iterations (and counts), all running now, to finish: an
    iteration costs ``t_it`` at the resident programs per SM left (the running ones spread over the SMs),
    so a long program that outlives its neighbours speeds up (processor sharing on the SM's load path)."""
    m = sum(k for _, k in running)
    t, done = 0.0, 0.0
    for i, k in sorted(running):
        if i > done:
            t += (i - done) * t_it(min(occ, -(-m // num_sms)), m)  # cdiv(m, num_sms), inlined (hot)
            done = i
        m -= k
    return t


def _list_schedule_s(durations: list[tuple[float, int]], slots: int) -> float:
    """Makespan of list scheduling, longest first, each program on the least-loaded slot. Slots with equal
    loads are one group, so the cost grows with the distinct loads, not the programs (the same result as
    placing the programs one by one on a heap of slots; tests/test_tune.py checks it against that)."""
    loads = {0.0: slots}  # load -> slots that have it
    heap = [0.0]
    for dur, k in durations:
        while k:
            low = heap[0]
            have = loads[low]
            take = min(have, k)
            if take == have:
                heapq.heappop(heap)
                del loads[low]
            else:
                loads[low] = have - take
            new = low + dur
            if new in loads:
                loads[new] += take
            else:
                loads[new] = take
                heapq.heappush(heap, new)
            k -= take
    return max(loads)


def model_launch_time_s(lw: LaunchWork, profile: TimeProfile, occupancy_delta: int = 0) -> float:
    """The physics alone: launch gaps plus each kernel's :func:`kernel_time_s` (what the fit fits)."""
    t = (len(lw.kernels) + lw.extra_launches - lw.overlapped_launches) * profile.launch_overhead_s
    for kw in lw.kernels:
        t += kernel_time_s(kw, profile.family(kw.family), profile.num_sms, profile.idle_program_s,
                           profile.hbm_bandwidth_bytes_per_s, occupancy_delta)
    return t


def launch_time_s(lw: LaunchWork, profile: TimeProfile, occupancy_delta: int = 0) -> float:
    """The predicted time of a launch: :func:`model_launch_time_s` times the profile's measured residual correction
    for the launch's regime (:mod:`decodecalc.timemodel.residuals`; 1 where the profile has no map or the map no
    measurements near the launch), plus the profile's per-launch cost of its timing regime
    (:meth:`TimeProfile.regime_launch_s`: 0 back to back). Every command's predicted time comes from here."""
    t = model_launch_time_s(lw, profile, occupancy_delta)
    if profile.residuals is not None:
        t *= profile.residuals.factor(lw, profile)
    return t + profile.regime_launch_s(lw.kernel)


def robust_time_s(lw: LaunchWork, profile: TimeProfile) -> float:
    """The score ``recommend`` ranks candidates by: the geometric mean of the predicted time at the
    profile's occupancy and one program per SM either side. Occupancy is the least certain input (it
    comes from one compiled specialization per kernel) and a wrong value moves the wave boundaries,
    so a candidate that is fast only at exactly the assumed occupancy is not preferred."""
    ts = [launch_time_s(lw, profile, d) for d in (-1, 0, 1)]
    return math.exp(sum(math.log(t) for t in ts) / len(ts))


@dataclass(frozen=True, slots=True)
class Prediction:
    """A launch plan's predicted time and what it is made of."""

    time_s: float  # model_time_s * the residual correction's factor + regime_s
    model_time_s: float  # the physics alone (model_launch_time_s)
    correction: Correction | None  # the profile's residual correction for this launch; None: the profile has no map
    calibrated: bool  # from a calibrated profile of this GPU and of these kernels
    regime_s: float = 0.0  # the per-launch cost of the profile's regime (TimeProfile.regime_launch_s)
    uncalibrated_families: frozenset[str] = frozenset()  # the launch's families the profile marks uncalibrated


def predict_plan(plan: LaunchPlan, workload: Workload, gpu: GPUSpec, kernel: str, *,
            profile: TimeProfile | None = None) -> Prediction:
    """The prediction for ``plan`` (a LaunchPlan for ``workload`` on ``gpu``), with its parts.
    ``kernel``: vllm | sglang | reference (decodecalc's own kernels, in the plan's layout)."""
    prof = profile if profile is not None else resolve_profile(gpu)
    lw = work_for_plan(plan, workload, kernel)
    uncal = frozenset(prof.fit.get("uncalibrated_families", ()) or ()) & {k.family for k in lw.kernels}
    calibrated = prof.calibrated and not uncal
    model = model_launch_time_s(lw, prof)
    corr = prof.residuals.correction(lw, prof) if prof.residuals is not None else None
    regime_s = prof.regime_launch_s(lw.kernel)
    return Prediction(time_s=model * (corr.factor if corr else 1.0) + regime_s, model_time_s=model, correction=corr,
                      calibrated=calibrated, regime_s=regime_s, uncalibrated_families=uncal)


def predict_time_s(plan: LaunchPlan, workload: Workload, gpu: GPUSpec, kernel: str, *,
                   profile: TimeProfile | None = None) -> tuple[float, bool]:
    """Predicted time of ``plan`` in seconds, and whether the prediction comes from a calibrated profile of this
    GPU (and of these kernels): :func:`predict_plan` without its parts."""
    p = predict_plan(plan, workload, gpu, kernel, profile=profile)
    return p.time_s, p.calibrated
