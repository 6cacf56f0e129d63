"""Time-model families of the default backends (decodecalc.timemodel.backends): the work comes from the
launchers' plans (kinds, not names), the shipped H200 profile meets issue 10's goals on the held-out H200 timings
(benchmarks/results/capture-backends-h200.jsonl, sweep-backends-h200.jsonl, capture-flashmla-h200-run2.jsonl),
and compare shows the times, marking a family listed as uncalibrated."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from decodecalc.launchers import flash_attn2, flash_attn3, flashinfer, flashmla
from decodecalc.launchers.registry import PolicyOptions
from decodecalc.reports.compare import evaluate
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.timemodel import KERNEL_FAMILIES, kernel_families, launch_time_s, packaged_profile, work_for_plan
from decodecalc.timemodel.fit import percentile, recommendation_quality
from decodecalc.timemodel.predict import kernel_time_s, predict_time_s
from decodecalc.timemodel.profile import FamilyParams
from decodecalc.timemodel.work import KernelWork, LaunchWork
from decodecalc.workload import make_workload

ROOT = Path(__file__).resolve().parents[1]
H200 = resolve_gpu("h200")


def _w(model: str, tp: int = 1, lens: tuple[int, ...] = (8192,) * 16, block: int = 16):
    return make_workload(resolve_model(model), tp=tp, seq_lens=lens, block_size=block)


@pytest.mark.parametrize("kernel, planner, model", [
    ("flashinfer", lambda w: flashinfer.plan_flashinfer(w, H200), "llama3-8b"),
    ("flashinfer-tc", lambda w: flashinfer.plan_flashinfer_tc(w, H200), "llama3-8b"),
    ("fa3", lambda w: flash_attn3.plan_flash_attn3(w, H200, num_splits=32), "llama3-8b"),
    ("flashmla", lambda w: flashmla.plan_flashmla(w, H200), "deepseek-v3"),
    ("fa2", lambda w: flash_attn2.plan_flash_attn2(w, H200), "llama3-8b"),
])
def test_work_comes_from_the_plan_not_the_names(kernel, planner, model):
    w = _w(model, block=64 if kernel == "flashmla" else 16, lens=(4096,) * 8)
    plan = planner(w)
    lw = work_for_plan(plan, w, kernel)
    assert {k.family for k in lw.kernels} <= set(KERNEL_FAMILIES[kernel])
    renamed = dataclasses.replace(plan, kernels=tuple(dataclasses.replace(k, name="x") for k in plan.kernels))
    assert work_for_plan(renamed, w, kernel) == lw
    # the main kernel reads every KV byte at least once (pages / tiles round up; FlashMLA also counts its
    # scheduler's fixed per-piece overhead and each query m-block's read of the latent)
    kv = sum(w.seq_lens) * w.num_kv_heads * (w.head_size + (0 if kernel == "flashmla" else w.head_size_v)) * 2
    assert lw.kernels[0].bytes >= kv


def test_cuda_core_steps_cost_more_with_more_heads_per_kv_head():
    # measured (capture-backends-h200.jsonl): the CUDA-core kernel streams 2.9 TB/s at 4:1 heads and 1.6 at 8:1
    prof = packaged_profile("h200")

    def per_byte(w):
        lw = work_for_plan(flashinfer.plan_flashinfer(w, H200), w, "flashinfer")
        return launch_time_s(lw, prof) / (sum(w.seq_lens) * w.num_kv_heads * 512)

    four, eight = _w("llama3-8b", lens=(32768,) * 16), _w("llama3-70b", tp=8, lens=(32768,) * 64)
    assert per_byte(eight) > 1.5 * per_byte(four)


def test_flashinfer_work_follows_the_grid_and_the_persistent_merge():
    # prefill.cuh: grid (padded_batch_size, 1, num_kv_heads), work items request-major; cascade.cuh
    # PersistentVariableLengthMergeStatesKernel: CTA j merges rows j, j + gridDim.x, ... (token-major)
    w = _w("llama3-8b", lens=(256, 8192, 512, 16384))
    plan = flashinfer.plan_flashinfer_tc(w, H200)
    lw = work_for_plan(plan, w, "flashinfer-tc")
    main, merge = lw.kernels
    (row, repeats), = main.order
    assert repeats == w.num_kv_heads
    steps = [i for i, k in row for _ in range(k)]
    assert sum(steps) * repeats == sum(i * k for i, k in main.iters)
    assert steps[0] < steps[-1]  # the short first request's chunk comes first, in batch order, not sorted
    mk = next(k for k in plan.kernels if k.kind.name == "FLASHINFER_MERGE")
    assert merge.programs + merge.idle_programs == mk.programs
    bdy = int(mk.constexprs.get("bdy") or 1)
    rows = sum(-(-max(s, 1) // bdy) * q * w.num_heads for s, q in zip(plan.splits, w.query_lens))
    assert sum(i * k for i, k in merge.iters) == rows


def _heldout() -> list:
    from benchmarks.fit_backends_h200 import held_out, measurements

    return [m for m in measurements() if held_out(m.shape.key)]


#: issue 10's goals on shapes the fit never saw: median and 90th percentile of |predicted / measured - 1|, and the
#: measured time of the recommended split over the best measured split of that kernel (worst shape)
GOAL_MEDIAN, GOAL_P90, GOAL_PICK = 0.05, 0.15, 1.15


def test_shipped_profile_meets_the_goals_on_held_out_shapes():
    """Recomputed from the committed H200 timings (capture-backends-h200.jsonl, sweep-backends-h200.jsonl,
    capture-flashmla-h200-run2.jsonl, capture-fa2-h200*.jsonl, sweep-fa2-h200.jsonl) with the shipped numbers: the
    held-out figures recorded in decodecalc/profiles/h200.yaml (fit.backend_families) are what they give; FA3,
    FlashInfer (both paths) and FlashMLA meet the goals and are calibrated; a kernel that misses them (FA2 today)
    has its families listed as uncalibrated."""
    prof = packaged_profile("h200")
    recorded = prof.fit["backend_families"]["heldout"]
    uncal = set(prof.fit.get("uncalibrated_families") or ())
    test = _heldout()
    errs: dict[str, list[float]] = {}
    for m in test:
        errs.setdefault(m.kernel, []).append(abs(launch_time_s(m.work, prof) / m.time_s - 1))
    assert set(errs) == {"flashinfer", "flashinfer-tc", "fa3", "flashmla", "fa2"}
    assert len(errs["flashmla"]) >= 50  # run 2 of FlashMLA: enough held-out shapes to tell
    for kernel, e in errs.items():
        med, p90 = percentile(e, 0.5), percentile(e, 0.9)
        assert med == pytest.approx(recorded[kernel]["median_abs_err"], abs=2e-3), kernel
        assert p90 == pytest.approx(recorded[kernel]["p90_abs_err"], abs=2e-3), kernel
        meets = med <= GOAL_MEDIAN and p90 <= GOAL_P90
        assert meets == (kernel != "fa2"), (kernel, med, p90)
        fams = set(kernel_families(kernel, 2)) - {"flashinfer_merge"}  # the bf16 families this fit judged
        assert (fams <= uncal) if not meets else not (fams & uncal), kernel
    picks = recommendation_quality(prof, test)
    for kernel in ("fa3", "flashinfer-tc"):  # the kernels with a split knob that was swept
        assert picks[kernel]["shapes"] >= 10
        assert picks[kernel]["worst"] <= GOAL_PICK, (kernel, picks[kernel])
        assert picks[kernel]["worst"] == pytest.approx(
            prof.fit["backend_families"]["recommendation_heldout"][kernel]["worst"], abs=1e-3)


def test_compare_shows_backend_times_and_says_which_are_uncalibrated():
    w = _w("llama3-70b", tp=8, lens=(8192,) * 64)
    rows = {n: evaluate(n, w, H200, PolicyOptions()) for n in ("fa3", "flashinfer", "flashinfer-tc", "fa2")}
    for n in ("fa3", "flashinfer", "flashinfer-tc"):
        assert rows[n].extra["predicted_time_s"] > 0, n
        assert rows[n].extra["predicted_calibrated"] is True, n
    # FA2 has families, fitted on the H200 but short of the goals: its time is shown and marked uncalibrated
    assert rows["fa2"].extra["predicted_time_s"] > 0 and rows["fa2"].extra["predicted_calibrated"] is False
    assert any("not calibrated" in x for x in rows["fa2"].extra["predicted_warnings"])
    mla = evaluate("flashmla", _w("deepseek-v3", lens=(8192,) * 32, block=64), H200, PolicyOptions())
    assert mla.extra["predicted_calibrated"] is True
    # measured on the H200 for these shapes (capture-backends-h200.jsonl, eager plan): FA3 73.4 us; FlashMLA
    # DeepSeek-V3 B=32 x 8192 136.7 us (capture-flashmla-h200-run2.jsonl)
    t = rows["fa3"].extra["predicted_time_s"] * 1e6
    assert 0.85 * 73.4 < t < 1.15 * 73.4
    t = mla.extra["predicted_time_s"] * 1e6
    assert 0.85 * 136.7 < t < 1.15 * 136.7
    # a family listed as uncalibrated makes the prediction say so
    plan = flashinfer.plan_flashinfer_tc(w, H200)
    prof = packaged_profile("h200")
    marked = dataclasses.replace(prof, fit={**prof.fit, "uncalibrated_families": ["flashinfer_tc"]})
    assert predict_time_s(plan, w, H200, "flashinfer-tc", profile=marked)[1] is False
    assert predict_time_s(plan, w, H200, "flashinfer-tc", profile=prof)[1] is True


def test_flashmla_work_reads_the_latent_once_per_part_and_follows_the_busiest_part():
    """128 heads: two query m-blocks per SM part read the same latent blocks (HBM counts them once, the CTAs'
    load path twice); the main kernel's loop runs as long as the most loaded part; the combine kernel's grid
    order has the split requests along x, the head tiles along z."""
    w128 = _w("deepseek-v3", lens=(8192,) * 32, block=64)
    w16 = _w("deepseek-v3", tp=8, lens=(8192,) * 32, block=64)
    for w, mblocks in ((w128, 2), (w16, 1)):
        plan = flashmla.plan_flashmla(w, H200)
        main, comb = work_for_plan(plan, w, "flashmla").kernels
        assert main.bytes_per_iter == 64 * 576 * 2
        assert main.hbm_bytes_per_iter * mblocks == main.bytes_per_iter
        loads = [(b, n) for b, n in plan.details.part_loads if n]
        assert len(loads) == plan.details.busy_parts
        assert sum(b for b, _ in loads) == sum(sum(p) for p in plan.details.blocks_per_split)
        assert sum(n for _, n in loads) == sum(plan.splits)
        ((iters, programs),) = main.iters
        assert programs == len(loads) * mblocks
        assert iters >= max(b + n for b, n in loads)  # each piece costs at least one block's time
        split = [s for s in plan.splits if s > 1]
        assert comb.order and sum(k for row, rep in comb.order for _, k in row * rep) == comb.programs
        assert comb.programs == len(split) * -(-w.num_heads // 8)
    # the combine kernel's launch overlaps the main kernel (programmatic dependent launch)
    assert work_for_plan(plan, w16, "flashmla").overlapped_launches == 1


def test_schedule_parts_agrees_with_the_schedule():
    for lens, parts in (((8192,) * 2, 4), ((131072,) + (1024,) * 31, 132), ((512,) * 256, 66), ((100, 70000, 5), 33)):
        splits, pieces, busy = flashmla.schedule(lens, parts)
        s2, p2, loads = flashmla.schedule_parts(lens, parts)
        assert (s2, p2) == (splits, pieces) and len(loads) == parts
        assert sum(1 for _, n in loads if n) == busy
        assert sum(b for b, _ in loads) == sum(map(sum, pieces)) and sum(n for _, n in loads) == sum(splits)


def test_hbm_bytes_per_iter_moves_only_the_hbm_term():
    """KernelWork.hbm_bytes_per_iter (default None: every byte from HBM): the HBM term and a program's own stream
    count those bytes, the SM's load path all of them."""
    fam = FamilyParams(latency_s=1e-6, program_bandwidth_bytes_per_s=1e18, sm_bandwidth_bytes_per_s=100e9,
                       program_overhead_s=0.0, max_programs_per_sm=1)
    many = KernelWork(family="flashmla_fwd", iters=((100, 132),), bytes_per_iter=65536)
    assert many.hbm_bytes_per_iter is None and many.hbm_bytes == many.bytes == 100 * 132 * 65536
    hbm_bound = kernel_time_s(many, fam, 132, hbm_bandwidth_bytes_per_s=1e12)
    assert hbm_bound == pytest.approx(100 * 132 * 65536 / 1e12)  # HBM-bound: 8.65 us per iteration
    half = dataclasses.replace(many, hbm_bytes_per_iter=32768)
    assert half.hbm_bytes == many.bytes // 2
    # half the bytes from HBM: 4.3 us per iteration, still over the SM side's 1.66 us
    assert kernel_time_s(half, fam, 132, hbm_bandwidth_bytes_per_s=1e12) == pytest.approx(hbm_bound / 2)
    # the SM side (latency + bytes over the load path) still counts every byte
    fast_hbm = 1e16
    assert kernel_time_s(half, fam, 132, hbm_bandwidth_bytes_per_s=fast_hbm) == pytest.approx(
        kernel_time_s(many, fam, 132, hbm_bandwidth_bytes_per_s=fast_hbm)) == pytest.approx(100 * (1e-6 + 65536 / 100e9))
    # a program's own stream (program bandwidth) pays for the HBM bytes only
    slow_stream = dataclasses.replace(fam, program_bandwidth_bytes_per_s=65536 / 1e-6)
    t_all = kernel_time_s(many, slow_stream, 132, hbm_bandwidth_bytes_per_s=fast_hbm)
    t_half = kernel_time_s(half, slow_stream, 132, hbm_bandwidth_bytes_per_s=fast_hbm)
    assert t_all - t_half == pytest.approx(100 * 0.5e-6)


def test_blend_power_lies_between_the_larger_term_and_their_sum():
    fam = FamilyParams(latency_s=2e-6, program_bandwidth_bytes_per_s=1e18, sm_bandwidth_bytes_per_s=1e18,
                       program_overhead_s=0.0, max_programs_per_sm=1)
    w = KernelWork(family="flashinfer_tc", iters=((10, 132),), bytes_per_iter=30303)  # HBM side 132 * 30303 / 2e12 = 2 us
    t_max = kernel_time_s(w, fam, 132, hbm_bandwidth_bytes_per_s=2e12)
    assert t_max == pytest.approx(10 * 2e-6, rel=1e-3)
    for p, expect in ((1.0, 2.0), (2.0, 2 ** 0.5), (3.0, 2 ** (1 / 3))):
        t = kernel_time_s(dataclasses.replace(w, blend_power=p), fam, 132, hbm_bandwidth_bytes_per_s=2e12)
        assert t == pytest.approx(expect * t_max, rel=2e-3), p
    # far from the corner the blend is the larger term
    far = dataclasses.replace(w, blend_power=3.0, bytes_per_iter=100)
    assert kernel_time_s(far, fam, 132, hbm_bandwidth_bytes_per_s=2e12) == pytest.approx(10 * 2e-6, rel=1e-6)


def test_overlapped_launches_are_not_counted():
    prof = packaged_profile("h200")
    k = KernelWork(family="fa3_combine", iters=((1, 8),), bytes_per_iter=4096)
    two = LaunchWork(kernel="flashmla", splits=2, kernels=(k, k))
    assert launch_time_s(two, prof) - launch_time_s(dataclasses.replace(two, overlapped_launches=1), prof) == \
        pytest.approx(prof.launch_overhead_s)


def test_backend_predictions_outside_their_measured_domain_say_so():
    """Each backend kernel is calibrated on the shapes its H200 timings cover (fit.backend_families.domain): FlashMLA
    on MLA models, FlashInfer and FA3 on head sizes 64 / 128 / 256; a head size of 96 is outside."""
    from decodecalc.reports.grid import predicted

    prof = packaged_profile("h200")
    dom = prof.fit["backend_families"]["domain"]
    assert dom["flashmla"]["mla"] is True and 576 in dom["flashmla"]["head_sizes"]
    w = _w("deepseek-v2-lite", lens=(4096,) * 8, block=64)
    out = predicted(flashmla.plan_flashmla(w, H200), w, H200, "flashmla")
    assert out["predicted_calibrated"] is True and "predicted_warnings" not in out
    w96 = make_workload(dataclasses.replace(resolve_model("llama3-8b"), head_dim=96), tp=1, seq_lens=(8192,) * 4,
                        block_size=16)
    assert 96 not in dom["fa3"]["head_sizes"]
    out = predicted(flash_attn3.plan_flash_attn3(w96, H200), w96, H200, "fa3")
    assert out["predicted_calibrated"] is False and any("head size 96" in x for x in out["predicted_warnings"])


def test_fa2_work_takes_the_kernel_the_launcher_picked():
    """flash_attn2: a paged cache (page 256) forces flash_fwd_splitkv_kernel, a contiguous one without splits runs
    flash_fwd_kernel (its own family: 1.45x slower on the same grid on the H200); an empty split's program reads no
    block but still runs (it writes a zero output and a -inf LSE for the combine kernel)."""
    paged = _w("llama3-70b", tp=8, lens=(100, 9000, 3000), block=256)
    plan = flash_attn2.plan_flash_attn2(paged, H200)
    main, comb = work_for_plan(plan, paged, "fa2").kernels
    assert main.family == "fa2_fwd" and comb.family == "fa2_combine"
    k = plan.kernels[0]
    assert main.programs == k.programs and main.idle_programs == 0
    empty = dict(main.iters).get(0, 0)
    assert empty == k.programs - k.working_programs == sum(max(plan.splits) - n for n in plan.nonempty_splits) * k.grid[0]
    assert sum(i * n for i, n in main.iters) == sum(-(-L // plan.details.kBlockN) for L in paged.seq_lens) * k.grid[0]
    assert comb.iters == ((max(plan.splits), plan.kernels[1].programs),)
    plain = _w("llama3-8b", lens=(512,) * 64)
    lw = work_for_plan(flash_attn2.plan_flash_attn2(plain, H200), plain, "fa2")
    assert [x.family for x in lw.kernels] == ["fa2_fwd_plain"]


def test_shipped_profile_on_a_later_validation_run():
    """benchmarks/results/validate-backends-h200.jsonl: 130 runs of shapes no fit saw (batches and lengths off the
    earlier grids, ragged batches, Qwen2.5-7B's 28:4 heads for tensor cores), measured after the fit: the shipped
    numbers stay within the goals there too (benchmarks/validate_backends_h200.py prints the same figures)."""
    from benchmarks.fit_backends_h200 import measurements_from

    prof = packaged_profile("h200")
    errs: dict[str, list[float]] = {}
    for m in measurements_from([ROOT / "benchmarks/results/validate-backends-h200.jsonl"]):
        errs.setdefault(m.kernel, []).append(abs(launch_time_s(m.work, prof) / m.time_s - 1))
    assert {k: len(v) for k, v in errs.items()} == {"flashinfer-tc": 60, "flashinfer": 30, "flashmla": 40}
    for kernel, e in errs.items():
        assert percentile(e, 0.5) <= GOAL_MEDIAN and percentile(e, 0.9) <= GOAL_P90, kernel


def test_the_cuda_core_step_is_charged_its_arithmetic_per_kv_byte():
    # timemodel.backends.cuda_core_step_factor: bytes-bound up to CUDA_CORE_G0 heads per KV head on bf16, half of it
    # on e4m3 (the same multiply-adds on half the bytes), then in proportion to group size / bytes per element
    from decodecalc.timemodel.backends import CUDA_CORE_G0, cuda_core_step_factor

    assert cuda_core_step_factor(1, 2) == cuda_core_step_factor(2, 2) == 1.0
    assert cuda_core_step_factor(16, 2) == pytest.approx(16 / CUDA_CORE_G0)
    assert cuda_core_step_factor(16, 1) == pytest.approx(2 * cuda_core_step_factor(16, 2))
    assert cuda_core_step_factor(2, 1) == pytest.approx(4 / CUDA_CORE_G0) and 4 / CUDA_CORE_G0 > 1.0
    assert cuda_core_step_factor(1, 1) == 1.0
