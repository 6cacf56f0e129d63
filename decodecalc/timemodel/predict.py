"""The time of a launch's work under a :class:`~decodecalc.timemodel.profile.TimeProfile`."""

from __future__ import annotations

import heapq
import math
from decodecalc.derived import cdiv
from decodecalc.launchers.base import LaunchPlan
from decodecalc.specs.gpus import GPUSpec
from decodecalc.timemodel.profile import FamilyParams, TimeProfile, resolve_profile
from decodecalc.timemodel.work import KernelWork, LaunchWork, work_for_plan
from decodecalc.workload import Workload


#: candidates whose ranking scores lie within this fraction of the best are indistinguishable to the model
#: (its median error on the H200 training shapes is 4.5%); among them the one with the most splits is
#: recommended, because on the H200 the measured time kept falling with more programs a little longer than
#: the model predicts (more bytes in flight, a smaller last wave). benchmarks/fit_timemodel.py reports the
#: effect: worst recommended/best 1.34 -> 1.18 on the training shapes, 1.43 -> 1.15 on the held-out ones.
TIE_FRACTION = 0.05


def kernel_time_s(work: KernelWork, fam: FamilyParams, num_sms: int, idle_program_s: float = 0.0,
                  hbm_bandwidth_bytes_per_s: float = 4.0e12, occupancy_delta: int = 0) -> float:
    """Time of one kernel's programs (no launch overhead): waves of resident programs, each iteration
    ``max(latency + c * bytes / sm_bandwidth, resident programs * bytes / hbm_bandwidth)``, the last
    wave at its own (lower) concurrency."""
    n = work.programs
    idle_cost = work.idle_programs * idle_program_s / num_sms
    if n == 0:
        return idle_cost
    occ = max(1, (work.occupancy or fam.occupancy_for(work.head_dim)) + occupancy_delta)
    slots = occ * num_sms
    b = work.bytes_per_iter

    lat, bw, hbm = fam.latency_s + b / fam.program_bandwidth_bytes_per_s, fam.sm_bandwidth_bytes_per_s, \
        (fam.hbm_bandwidth_bytes_per_s or hbm_bandwidth_bytes_per_s)

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
    return _list_schedule_s(durations, slots) + idle_cost


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


def predict_time_s(plan: LaunchPlan, workload: Workload, gpu: GPUSpec, kernel: str, *,
                   profile: TimeProfile | None = None) -> tuple[float, bool]:
    """Predicted time of ``plan`` (a LaunchPlan for ``workload`` on ``gpu``) in seconds, and whether
    the prediction comes from a calibrated profile of this GPU (and of these kernels).
    ``kernel``: vllm | sglang | reference (decodecalc's own kernels, in the plan's layout)."""
    prof = profile if profile is not None else resolve_profile(gpu)
    lw = work_for_plan(plan, workload, kernel)
    uncal = set(prof.fit.get("uncalibrated_families", ()) or ())
    calibrated = prof.calibrated and not (uncal & {k.family for k in lw.kernels})
    return launch_time_s(lw, prof), calibrated
