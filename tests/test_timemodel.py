"""The time model: profiles, the work of each launch, fit and prediction on measured H200 rows.

Data: tests/data/timemodel_h200_subset.json, 8 of the 40 shapes of
shared/data/h200-upstream-dev-grid.json (every split count of vLLM 0.33.0 and SGLang 0.5.23).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from decodecalc.timemodel.fit import (
    Shape,
    error_summary,
    fit_profile,
    measurements_from_rows,
    percentile,
    recommendation_quality,
    work_for_variant,
)
from decodecalc.errors import ConfigError
from decodecalc.launchers.registry import BACKEND_SPECS, TIMED_BACKENDS
from decodecalc.timemodel import (
    FamilyParams,
    KernelWork,
    datasheet_profile,
    dump_profile,
    kernel_time_s,
    launch_time_s,
    load_profile_file,
    packaged_profile,
    predict_time_s,
    resolve_profile,
    sglang_work,
    vllm_work,
)
from helpers import H200, LLAMA3_8B, gpu, model, work

DATA = Path(__file__).parent / "data" / "timemodel_h200_subset.json"


@pytest.fixture(scope="module")
def rows():
    return json.loads(DATA.read_text())["cases"]


@pytest.fixture(scope="module")
def ms(rows):
    return measurements_from_rows(rows)


@pytest.fixture(scope="module")
def h200():
    prof = packaged_profile("h200")
    assert prof is not None
    return prof


# -- profiles ---------------------------------------------------------------------------------


def test_packaged_h200_profile_is_calibrated_and_complete(h200):
    assert h200.calibrated
    assert h200.num_sms == 132
    assert 3e12 < h200.hbm_bandwidth_bytes_per_s < 4.8e12  # achievable, under the 4.8 TB/s datasheet
    # every Triton family fitted, SGLang's MHA stage 1 included; backend families that missed their held-out goals
    # (benchmarks/fit_backends_h200.py) are listed, so their predictions say uncalibrated
    backend = {f for b in TIMED_BACKENDS for f in BACKEND_SPECS[b].families}
    assert set(h200.fit.get("uncalibrated_families") or ()) <= backend
    # XQA has no H200 timings: its families start from the tensor-core wrapper's and are listed uncalibrated
    assert {"xqa", "xqa_sm90"} <= set(h200.fit["uncalibrated_families"])
    for fam in ("vllm_2d", "vllm_3d", "sglang_stage1", "sglang_mha_stage1", "ref_vllm_3d", "ref_sglang_stage1"):
        p = h200.family(fam)
        assert 2e-7 < p.latency_s < 5e-6  # one loop iteration's round trip: about a microsecond
        assert 5e9 <= p.sm_bandwidth_bytes_per_s <= 4e11  # an SM's load path: tens to ~250 GB/s
        assert 1 <= p.occupancy_for(128) <= 16


def test_profile_roundtrip(tmp_path, h200):
    f = tmp_path / "h200.yaml"
    f.write_text(dump_profile(h200))
    again = load_profile_file(f, expect_gpu="h200")
    assert again.families == h200.families
    assert again.launch_overhead_s == h200.launch_overhead_s


def test_profile_without_the_mha_family_still_loads(tmp_path, monkeypatch, h200):
    """A profile written before SGLang's MHA stage 1 had its own family: the MHA kernel borrows the grouped
    kernel's numbers and its predictions are marked uncalibrated; everything else stays calibrated."""
    import yaml

    from decodecalc.launchers.sglang_triton import plan_sglang

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    old = h200.to_mapping()
    del old["families"]["sglang_mha_stage1"]
    f = tmp_path / "h200.yaml"
    f.write_text(yaml.safe_dump(old, sort_keys=False))
    prof = load_profile_file(f, expect_gpu="h200")
    assert prof.calibrated
    assert prof.family("sglang_mha_stage1") == h200.family("sglang_stage1")
    assert set(prof.fit["uncalibrated_families"]) == {"sglang_mha_stage1", *(h200.fit.get("uncalibrated_families") or ())}
    w_mha = work(model(32, 32), batch=4, seq_len=2000)
    t_old, cal = predict_time_s(plan_sglang(w_mha, H200).plan, w_mha, H200, "sglang", profile=prof)
    assert t_old > 0 and not cal
    _, cal_new = predict_time_s(plan_sglang(w_mha, H200).plan, w_mha, H200, "sglang", profile=h200)
    assert cal_new
    w_gqa = work(LLAMA3_8B, batch=4, seq_len=2000)
    _, cal_gqa = predict_time_s(plan_sglang(w_gqa, H200).plan, w_gqa, H200, "sglang", profile=prof)
    assert cal_gqa
    # a profile that lists other uncalibrated families keeps them
    old["fit"] = {"uncalibrated_families": ["ref_vllm_3d"]}
    f.write_text(yaml.safe_dump(old, sort_keys=False))
    assert load_profile_file(f).fit["uncalibrated_families"] == ["ref_vllm_3d", "sglang_mha_stage1"]


def test_malformed_profile_names_the_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("gpu: h200\nfamilies: [1, 2\n")
    with pytest.raises(ConfigError, match=str(f)):
        load_profile_file(f)
    f.write_text("gpu: h200\nnum_sms: 132\nlaunch_overhead_s: 1e-6\nfamilies:\n  vllm_2d: {latency_s: -1}\n")
    with pytest.raises(ConfigError, match=f"{f}.*lacks"):
        load_profile_file(f)


def test_profile_from_another_gpu_is_refused(tmp_path, h200):
    f = tmp_path / "h100-sxm.yaml"
    f.write_text(dump_profile(h200))
    with pytest.raises(ConfigError, match=rf"{f} was measured on 'h200', not on 'h100-sxm'"):
        load_profile_file(f, expect_gpu="h100-sxm")


def test_user_profile_dir_wins_and_bad_user_file_is_an_error(tmp_path, monkeypatch, h200):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    d = tmp_path / "decodecalc" / "profiles"
    d.mkdir(parents=True)
    mine = dataclasses.replace(h200, launch_overhead_s=9e-6, source="mine")
    (d / "h200.yaml").write_text(dump_profile(mine))
    assert resolve_profile(H200).source == "mine"
    (d / "h200.yaml").write_text("::: not yaml")
    with pytest.raises(ConfigError, match="h200.yaml"):
        resolve_profile(H200)


def test_unknown_gpu_falls_back_uncalibrated(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    from decodecalc.specs.gpus import resolve_gpu

    a100 = resolve_gpu("a100-80gb")
    prof = resolve_profile(a100)
    assert not prof.calibrated and prof.num_sms == a100.num_sms
    assert datasheet_profile(a100).families["vllm_3d"].sm_bandwidth_bytes_per_s > 0


# -- the work of a launch ---------------------------------------------------------------------


def test_vllm_3d_work_matches_segment_early_exit():
    # 70B TP8: h=8, h_kv=1, L=131072, S=16 -> tiles_per_segment = cdiv(131072, 256) = 512 tiles of 16
    s = Shape(num_heads=8, num_kv_heads=1, seq_lens=(131072,))
    lw = vllm_work(s, splits=16)
    main, red = lw.kernels
    assert main.iters == ((512, 16),)
    assert main.bytes_per_iter == 16 * 256 * 2
    assert red.iters == ((1, 8),)
    # short sequence: only cdiv(L, tps*TILE) segments work; the rest are idle programs
    s2 = Shape(num_heads=32, num_kv_heads=8, seq_lens=(100,))
    m2 = vllm_work(s2, splits=16).kernels[0]
    assert m2.programs == 7 * 8 and m2.idle_programs == 9 * 8


def test_vllm_2d_work_and_idle_q_blocks():
    s = Shape(num_heads=8, num_kv_heads=1, seq_lens=(2560,) * 4)  # BLOCK_Q 2: 4//2 + 4 = 6 q blocks, 2 idle
    main = vllm_work(s, splits=1).kernels[0]
    assert main.iters == ((80, 4),) and main.idle_programs == 2


def test_sglang_work_rounds_split_length_to_32():
    s = Shape(num_heads=32, num_kv_heads=8, seq_lens=(100,))
    st1, st2 = sglang_work(s, splits=8).kernels
    # kv_len_per_split = 32 * cdiv(cdiv(100, 8), 32) = 32 -> 4 nonempty splits, 4 empty
    assert st1.programs == 4 * 8 and st1.idle_programs == 4 * 8
    assert st2.iters == ((4, 32),)


def test_sglang_mha_launch_uses_the_mha_family(monkeypatch, tmp_path):
    """SGLang runs _fwd_kernel_stage1 (one head per program, BLOCK_N 64) when num_heads == num_kv_heads and
    _fwd_grouped_kernel_stage1 (BLOCK_H 16, BLOCK_N 32) otherwise: two families."""
    from decodecalc.launchers.sglang_triton import plan_sglang
    from decodecalc.timemodel import work_for_plan

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    mha = Shape(num_heads=32, num_kv_heads=32, seq_lens=(2000,) * 4, head_size=96, head_size_v=96)
    st1, st2 = sglang_work(mha, splits=6, max_kv_splits=8).kernels
    assert st1.family == "sglang_mha_stage1" and st2.family == "sglang_stage2"
    # grid (4, 32, 8): split length 32 * cdiv(334, 32) = 352 -> 5 splits of 6 iterations of 64 keys, one of 4
    assert st1.iters == ((4, 4 * 32), (6, 5 * 4 * 32)) and st1.idle_programs == 2 * 4 * 32
    assert st1.bytes_per_iter == 64 * (96 + 96) * 2 and st1.head_dim == 128
    gqa = sglang_work(Shape(num_heads=32, num_kv_heads=8, seq_lens=(2000,) * 4), splits=6).kernels[0]
    assert gqa.family == "sglang_stage1" and gqa.bytes_per_iter == 32 * 256 * 2
    # decodecalc's reference kernels keep one stage-1 family
    assert sglang_work(mha, splits=6, prefix="ref_sglang").kernels[0].family == "ref_sglang_stage1"
    # from a launch plan: the kernel name decides
    w = work(model(32, 32, d=96), batch=4, seq_len=2000)
    plan = plan_sglang(w, H200).plan
    assert "_fwd_kernel_stage1" in [k.name for k in plan.kernels]
    assert work_for_plan(plan, w, "sglang").kernels[0].family == "sglang_mha_stage1"
    assert work_for_plan(plan, w, "reference").kernels[0].family == "ref_sglang_stage1"
    wg = work(LLAMA3_8B, batch=4, seq_len=2000)
    assert work_for_plan(plan_sglang(wg, H200).plan, wg, "sglang").kernels[0].family == "sglang_stage1"
    # its own parameters in the packaged profile: occupancy from its registers (88 per thread, 4 warps -> 5/SM)
    h200 = packaged_profile("h200")
    assert h200.family("sglang_mha_stage1") != h200.family("sglang_stage1")


def test_calibration_measures_an_mha_shape():
    """`calibrate` measures at least one MHA shape, so its fit covers SGLang's MHA stage 1."""
    from decodecalc.timemodel.calibration_fit import CALIBRATION_SHAPES, CALIBRATION_VARIANTS
    from decodecalc.timemodel.fit import work_for_variant

    mha = [(h, kv, d, lens) for h, kv, d, lens in CALIBRATION_SHAPES if h == kv]
    assert mha
    h, kv, d, lens = mha[0]
    fams = {k.family for v in CALIBRATION_VARIANTS if v.startswith("sglang-")
            for k in work_for_variant(Shape(num_heads=h, num_kv_heads=kv, head_size=d, head_size_v=d, seq_lens=lens),
                                      v, num_sms=132)[2].kernels}
    assert "sglang_mha_stage1" in fams


def test_sglang_adaptive_variant_uses_the_launchers_rule():
    # upstream-launchers.md 2.3: Llama-3-8B L=2560 -> 8 splits at B=1, 3 at B=32, 2 at B=64; a measured
    # "sglang-adaptive" row without recorded split counts gets them from launchers.sglang_triton
    for b, n in ((1, 8), (32, 3), (64, 2)):
        shape = Shape(num_heads=32, num_kv_heads=8, seq_lens=(2560,) * b)
        _, splits, lw, _ = work_for_variant(shape, "sglang-adaptive", num_sms=132)
        assert splits == n and lw.kernels[1].iters == ((n, b * 32),)  # stage 2 merges n splits per (seq, head)


def test_kernel_time_waves_and_latency():
    fam = FamilyParams(latency_s=1e-6, program_bandwidth_bytes_per_s=20e9, sm_bandwidth_bytes_per_s=30e9,
                       program_overhead_s=0.0, max_programs_per_sm=2)
    one = KernelWork(family="x", iters=((100, 1),), bytes_per_iter=8192)
    assert kernel_time_s(one, fam, 132) == pytest.approx(100 * (1e-6 + 8192 / 20e9 + 8192 / 30e9))
    # the GPU-wide cap: every resident program's bytes through HBM
    assert kernel_time_s(one, fam, 132, hbm_bandwidth_bytes_per_s=1e9) == pytest.approx(100 * 8192 / 1e9)
    full = KernelWork(family="x", iters=((100, 264),), bytes_per_iter=8192)  # exactly one wave of 2/SM
    two = KernelWork(family="x", iters=((100, 265),), bytes_per_iter=8192)  # one program in a second wave
    assert kernel_time_s(two, fam, 132) > kernel_time_s(full, fam, 132) * 1.3
    ragged = KernelWork(family="x", iters=((10, 100), (400, 1)), bytes_per_iter=8192)
    assert kernel_time_s(ragged, fam, 132) >= 400 * 1e-6


def test_sm_saturation_gap_makes_the_last_resident_program_cheap():
    # FamilyParams.sm_saturation_gap: the SM term counts min(c, occupancy - gap) programs' bytes; below the
    # saturation point nothing changes (benchmarks/results/timemodel-h200-probe-waves.json: 32:8 d128, one wave,
    # 46.6 / 54.5 / 60.3 / 67.1 / 68.7 us at 1..5 programs per SM)
    lin = FamilyParams(latency_s=1e-6, program_bandwidth_bytes_per_s=20e9, sm_bandwidth_bytes_per_s=30e9,
                       program_overhead_s=0.0, max_programs_per_sm=5)
    sat = dataclasses.replace(lin, sm_saturation_gap=0.75)
    four = KernelWork(family="x", iters=((100, 4 * 132),), bytes_per_iter=8192)
    five = KernelWork(family="x", iters=((100, 5 * 132),), bytes_per_iter=8192)
    assert kernel_time_s(four, sat, 132) == pytest.approx(kernel_time_s(four, lin, 132))
    assert kernel_time_s(five, sat, 132) == pytest.approx(100 * (1e-6 + 8192 / 20e9 + 4.25 * 8192 / 30e9))
    assert kernel_time_s(five, lin, 132) == pytest.approx(100 * (1e-6 + 8192 / 20e9 + 5 * 8192 / 30e9))
    with pytest.raises(ConfigError, match="sm_saturation_gap"):
        dataclasses.replace(lin, sm_saturation_gap=3.0)


def test_reduce_segments_occupancy_matches_the_compiled_kernels():
    # registers of every reduce_segments specialization Triton 3.6 compiled on the H200
    # (benchmarks/results/timemodel-h200-extra.json; keys end (BLOCK_Q, NUM_SEGMENTS_PER_SEQ, ...); BLOCK_Q 2 is
    # shared by d128 and d256 shapes there and is skipped) against the occupancy the work function gives
    import re

    from decodecalc.timemodel.profile import occupancy
    from decodecalc.timemodel.work import reduce_segments_occupancy

    extra = json.loads((Path(__file__).parents[1] / "benchmarks" / "results" / "timemodel-h200-extra.json").read_text())
    d_pad_of_block_q = {16: 128, 4: 128, 1: 128, 8: 256, 3: 64}
    checked = 0
    for key, res in extra["kernel_resources"]["reduce_segments"].items():
        block_q, segments = (int(x) for x in re.findall(r"\('constexpr', ([^)]*)\)", key)[:2])
        if block_q in d_pad_of_block_q:
            measured = occupancy(res["n_regs"], res["shared"], res["num_warps"])
            assert reduce_segments_occupancy(segments, d_pad_of_block_q[block_q]) == measured, (block_q, segments)
            checked += 1
    assert checked == 35
    # and the launch carries it: 128 segments at d128 leave 3 programs per SM
    w = vllm_work(Shape(num_heads=32, num_kv_heads=8, seq_lens=(4096,) * 4), splits=128, use_3d=True)
    assert w.kernels[1].occupancy == 3


def test_reduce_segments_spill_threshold_matches_the_compiled_kernels():
    # Triton 3.6 on the H200 compiled vLLM 0.33.0's reduce_segments at d128 for 64..4096 segments
    # (benchmarks/results/probe_vllm_B4_L32k.json): a handful of spills at 256 segments (255 registers), then 32
    # registers and 1,100+ spills from 512 on; the model switches to the spilling family exactly there
    from decodecalc.timemodel.work import reduce_segments_spills

    probe = json.loads((Path(__file__).parents[1] / "benchmarks" / "results" / "probe_vllm_B4_L32k.json").read_text())
    checked = 0
    for case in probe["cases"]:
        res = case.get("kernels", {}).get("reduce_segments")
        if res is None:
            continue
        assert reduce_segments_spills(case["segments"], 128) == (res["n_spills"] > 100), case["case"]
        checked += 1
    assert checked == 7
    shape = Shape(num_heads=32, num_kv_heads=8, seq_lens=(32768,) * 4)
    spilled = vllm_work(shape, splits=512, use_3d=True).kernels[1]
    kept = vllm_work(shape, splits=256, use_3d=True).kernels[1]
    assert (spilled.family, kept.family) == ("vllm_reduce_spill", "vllm_reduce")
    assert spilled.bytes_per_iter == 512 * 128 * 4


def test_compiled_occupancy_of_the_3d_kernel_from_the_probe():
    from benchmarks.fit_timemodel import compiled_occupancy

    probe = Path(__file__).parents[1] / "benchmarks" / "results" / "timemodel-h200-probe-waves.json"
    # 88 / 128 / 76 registers, 12.6 / 24.6 / 6.6 KB shared memory at d128 / d256 / d64 (Triton 3.6, H200)
    assert compiled_occupancy([probe]) == {"vllm_3d": {128: 5, 256: 4, 64: 6}}


# -- grid order ----------------------------------------------------------------------------------


def test_vllm_3d_order_follows_the_grid():
    """Grid (total_num_q_blocks, num_kv_heads, segments), x fastest: the sequences along x, then the KV heads,
    then the segments. 8:1 heads, B 2. L 2560: 160 tiles of 16, S 4 -> 40 tiles in each of 4 segments; L 40:
    3 tiles, 1 per segment -> segments 0-2 work, segment 3 exits at once (left out of the order)."""
    main = vllm_work(Shape(num_heads=8, num_kv_heads=1, seq_lens=(2560, 40)), splits=4).kernels[0]
    assert main.order == ((((40, 1), (1, 1)), 3), (((40, 1),), 1))
    assert main.programs == 7 and main.runs == 7
    # batch order is kept: the short sequence first puts its programs first in every x line
    assert vllm_work(Shape(num_heads=8, num_kv_heads=1, seq_lens=(40, 2560)), splits=4).kernels[0].order == \
        ((((1, 1), (40, 1)), 3), (((40, 1),), 1))


def test_sglang_order_puts_each_split_in_its_plane():
    # grid (B, head tiles, max_kv_splits): 32:8 heads -> 8 head tiles. L 930 with 8 splits: 128 keys per split
    # (4 iterations of 32), 8 splits, the last 34 keys (2); L 100: 32 keys per split (1 iteration), 4 splits
    st1, st2 = sglang_work(Shape(num_heads=32, num_kv_heads=8, seq_lens=(930, 100)), splits=8).kernels
    assert st1.order == ((((4, 1), (1, 1)), 8 * 4), (((4, 8 * 3),), 1), (((2, 8),), 1))
    assert st2.order == ((((8, 1), (4, 1)), 32),)  # grid (B, h): each merges its sequence's splits


def _grid_oracle(programs, slots):
    """One program at a time in grid order on the slot that frees first: (last start, remaining per slot)."""
    import heapq

    heap = [0.0] * slots
    start = 0.0
    for dur in programs:
        start = heapq.heappop(heap)
        heapq.heappush(heap, start + dur)
    return start, sorted(f - start for f in heap if f > start)


def test_grid_order_schedule_equals_one_program_at_a_time():
    import random

    from decodecalc.timemodel.predict import _grid_order_schedule

    rng = random.Random(5)
    for _ in range(200):
        slots = rng.randint(1, 12)
        order = tuple((tuple((rng.randint(1, 9), rng.randint(1, 5)) for _ in range(rng.randint(1, 4))), rng.randint(1, 3))
                      for _ in range(rng.randint(1, 4)))
        progs = [float(i) for row, rep in order for _ in range(rep) for i, k in row for _ in range(k)]
        start, running = _grid_order_schedule(order, 0.0, 1.0, slots, 0)
        o_start, o_rem = _grid_oracle(progs, slots)
        assert start == o_start
        assert sorted(r for r, k in running for _ in range(int(k))) == o_rem


def test_grid_order_not_longest_first():
    """The block scheduler dispatches in grid order: a long program at the end of the grid starts only when a
    slot frees, so the kernel takes longer than the same programs longest first (LPT) or with the long one first."""
    fam = FamilyParams(latency_s=1e-6, program_bandwidth_bytes_per_s=1e12, sm_bandwidth_bytes_per_s=1e12,
                       program_overhead_s=0.0, max_programs_per_sm=2)
    short, long_ = (2, 264 * 3), (40, 1)  # three waves of short programs and one long one, on 132 SMs x 2
    hist = ((2, 264 * 3), (40, 1))
    last = KernelWork(family="x", iters=hist, bytes_per_iter=64, order=(((short, long_), 1),))
    first = KernelWork(family="x", iters=hist, bytes_per_iter=64, order=(((long_, short), 1),))
    lpt = KernelWork(family="x", iters=hist, bytes_per_iter=64)  # no order recorded: longest first
    t_last, t_first, t_lpt = (kernel_time_s(w, fam, 132) for w in (last, first, lpt))
    it = 1e-6 + 64 / 1e12 + 2 * 64 / 1e12
    assert t_lpt == pytest.approx(40 * it)
    # the long program starts after the three waves of short ones (6 iterations) and then runs alone on its SM
    assert t_last == pytest.approx(6 * it + 40 * (1e-6 + 64 / 1e12 + 64 / 1e12))
    assert t_last > 1.1 * t_lpt and t_first < t_last


def test_one_wave_programs_speed_up_as_their_sm_empties():
    """One wave of ragged programs: the longest one shares its SM with the others only while they run."""
    fam = FamilyParams(latency_s=1e-6, program_bandwidth_bytes_per_s=1e12, sm_bandwidth_bytes_per_s=4096 / 1e-6,
                       program_overhead_s=0.0, max_programs_per_sm=4)
    w = KernelWork(family="x", iters=((10, 132 * 3), (30, 132)), bytes_per_iter=4096,
                   order=((((10, 3), (30, 1)), 132),))
    # 4 per SM for 10 iterations (latency + 4 x 1 us each), then 1 per SM for 20 (latency + 1 us each)
    lat = 1e-6 + 4096 / 1e12
    assert kernel_time_s(w, fam, 132) == pytest.approx(10 * (lat + 4e-6) + 20 * (lat + 1e-6))
    # the former model: the longest program at the full wave's concurrency throughout
    assert kernel_time_s(w, fam, 132) < 0.8 * 30 * (lat + 4e-6)


def test_coarse_grid_order_close_to_exact(monkeypatch):
    """Above MAX_EXACT_RUNS runs the dispatch is followed in coarser steps; on ragged batches it stays within 10%
    of the run-by-run schedule (median 0.6%, worst 9% over 84 random batches and kernels when written)."""
    import random

    from decodecalc.timemodel import predict

    prof = packaged_profile("h200")
    rng = random.Random(2)
    for b, s in ((64, 16), (16, 16), (48, 8)):
        shape = Shape(num_heads=32, num_kv_heads=8, seq_lens=tuple(rng.randint(100, 30000) for _ in range(b)))
        for lw in (vllm_work(shape, splits=s), sglang_work(shape, splits=s)):
            assert lw.kernels[0].runs > predict.MAX_EXACT_RUNS
            coarse = launch_time_s(lw, prof)
            monkeypatch.setattr(predict, "MAX_EXACT_RUNS", 10**9)
            exact = launch_time_s(lw, prof)
            monkeypatch.undo()
            assert coarse == pytest.approx(exact, rel=0.10)


# -- prediction and fit on measured H200 rows -----------------------------------------------------


def test_packaged_profile_predicts_measured_rows(ms, h200):
    stats = error_summary(h200, ms)
    assert stats["rows"] == 136
    assert stats["median_abs_err"] <= 0.10
    assert stats["p90_abs_err"] <= 0.25


def test_recommendation_quality_on_measured_rows(ms, h200):
    q = recommendation_quality(h200, ms)
    assert q["vllm"]["shapes"] == 8 and q["sglang"]["shapes"] == 8
    assert q["all"]["geomean"] <= 1.10
    assert q["all"]["worst"] <= 1.30


def test_fit_recovers_from_a_bad_start_on_held_out_shapes(ms, h200):
    keys = sorted({m.shape.key for m in ms})
    train = [m for m in ms if m.shape.key in keys[::2]]
    test = [m for m in ms if m.shape.key not in keys[::2]]
    bad = dataclasses.replace(h200, launch_overhead_s=h200.launch_overhead_s * 3, families={
        k: dataclasses.replace(v, latency_s=v.latency_s * 2, sm_bandwidth_bytes_per_s=v.sm_bandwidth_bytes_per_s / 2)
        for k, v in h200.families.items()})
    before = error_summary(bad, test)["median_abs_err"]
    fitted = fit_profile(train, bad, restarts=1, max_evals=600)
    after = error_summary(fitted, test)["median_abs_err"]
    assert after < before / 2
    assert after <= 0.2


def test_predict_time_s_from_launch_plans(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    from decodecalc.launchers.sglang_triton import plan_sglang
    from decodecalc.launchers.vllm_unified import plan_vllm

    w = work(model(8, 1), batch=1, seq_len=131072)
    tv, cal = predict_time_s(plan_vllm(w, H200).plan, w, H200, "vllm")
    ts, cal2 = predict_time_s(plan_sglang(w, H200).plan, w, H200, "sglang")
    assert cal and cal2
    # measured (shared data): vLLM default 658.8 us, SGLang adaptive 1288.0 us
    assert tv == pytest.approx(658.8e-6, rel=0.25)
    assert ts == pytest.approx(1288.0e-6, rel=0.25)
    other = gpu(sms=108, name="a100-80gb")
    _, cal3 = predict_time_s(plan_vllm(w, other).plan, w, other, "vllm")
    assert not cal3


def test_percentile():
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert math.isnan(percentile([], 0.5))


def test_calibration_fit_from_device_rows(h200):
    """The fitting half of `decodecalc calibrate`, on the rows `calibrate --quick` measured on the H200."""
    from decodecalc.timemodel.calibration_fit import fit_calibration_rows

    rows = json.loads((Path(__file__).parent / "data" / "calibrate_h200_quick_rows.json").read_text())["cases"]
    prof = fit_calibration_rows(rows, gpu=H200, base=h200, num_sms=132, launch_overhead_s=1.5e-6,
                                device_name="NVIDIA H200", search_occupancy=False)
    assert prof.calibrated and prof.gpu == "h200" and prof.launch_overhead_s == 1.5e-6
    assert prof.fit["rows"] == 24 and prof.fit["median_abs_err"] < 0.15
    assert "ref_vllm_3d" in prof.fit["uncalibrated_families"]
    assert "sglang_mha_stage1" in prof.fit["uncalibrated_families"]  # --quick measures no MHA shape
    assert "sglang_stage1" not in prof.fit["uncalibrated_families"]
    bad = [dict(r, status="error", error="boom") for r in rows]
    with pytest.raises(Exception, match="calibration failed"):
        fit_calibration_rows(bad, gpu=H200, base=h200, num_sms=132, launch_overhead_s=None)


def test_calibration_fit_covers_the_mha_family(h200):
    """With rows of calibrate's MHA shape, the fitting half fits SGLang's MHA stage 1, starting from a profile
    that lacks it (borrowed from the grouped kernel); here rows 25% slower than the packaged profile predicts."""
    import yaml

    from decodecalc.timemodel.calibration_fit import CALIBRATION_SHAPES, fit_calibration_rows
    from decodecalc.timemodel.fit import work_for_variant
    from decodecalc.timemodel import profile_from_mapping

    old = h200.to_mapping()
    del old["families"]["sglang_mha_stage1"]
    base = profile_from_mapping(yaml.safe_load(yaml.safe_dump(old)), origin="old")
    rows = json.loads((Path(__file__).parent / "data" / "calibrate_h200_quick_rows.json").read_text())["cases"]
    h, kv, d, lens = next(s for s in CALIBRATION_SHAPES if s[0] == s[1])
    shape = Shape(num_heads=h, num_kv_heads=kv, head_size=d, head_size_v=d, seq_lens=lens)
    mha_rows = []
    for v in ("sglang-static-S1", "sglang-static-S4", "sglang-static-S16", "sglang-static-S64"):
        t = launch_time_s(work_for_variant(shape, v, num_sms=132)[2], h200) * 1.25
        mha_rows.append({"variant": v, "num_q_heads": h, "num_kv_heads": kv, "head_dim": d, "batch": len(lens),
                         "seq_len": max(lens), "t_us": t * 1e6, "status": "ok"})
    prof = fit_calibration_rows(rows + mha_rows, gpu=H200, base=base, num_sms=132, launch_overhead_s=1.5e-6,
                                device_name="NVIDIA H200", search_occupancy=False)
    assert "sglang_mha_stage1" not in prof.fit["uncalibrated_families"]
    mha_ms = measurements_from_rows(mha_rows)
    assert error_summary(prof, mha_ms)["median_abs_err"] < 0.5 * error_summary(base, mha_ms)["median_abs_err"]


def test_reference_kernels_are_predicted_from_the_same_plans(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    from decodecalc.launchers.sglang_triton import plan_sglang
    from decodecalc.launchers.vllm_unified import plan_vllm

    w = work(LLAMA3_8B, batch=4, seq_len=8192)
    tv, cal = predict_time_s(plan_vllm(w, H200).plan, w, H200, "reference")
    ts, cal2 = predict_time_s(plan_sglang(w, H200).plan, w, H200, "reference")
    assert cal and cal2 and tv > 0 and ts > 0
    with pytest.raises(ConfigError, match="no time model"):
        predict_time_s(plan_vllm(w, H200).plan, w, H200, "flashinfer")


def test_core_modules_stay_pure():
    """timemodel and recommend are imported by the CLI for every prediction: no torch, typer or rich."""
    import subprocess
    import sys

    code = ("import sys; import decodecalc.timemodel, decodecalc.reports.recommend, decodecalc.timemodel.fit; "
            "bad = [m for m in ('torch', 'triton', 'typer', 'rich') if m in sys.modules]; print(bad); "
            "sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_datasheet_fallback_scales_bandwidth(h200):
    from decodecalc.specs.gpus import resolve_gpu

    h100 = resolve_gpu("h100-sxm")  # 3.35 TB/s datasheet against the H200's 4.8
    fb = datasheet_profile(h100)
    assert fb.hbm_bandwidth_bytes_per_s == pytest.approx(h200.hbm_bandwidth_bytes_per_s * 3.35 / 4.8)
    w = work(model(8, 1), batch=64, seq_len=32768)
    from decodecalc.timemodel import vllm_work

    lw = vllm_work(w, splits=1)
    assert launch_time_s(lw, fb) > launch_time_s(lw, h200)  # bandwidth-bound: slower on the H100


def test_family_blend_power_applies_where_the_work_does_not_say():
    """A family's ``blend_power`` (the L^p norm of an iteration's SM-side and HBM-side times) is used for work
    that leaves its own at 0, survives the profile's YAML round trip, and is left out of it when 0."""
    from decodecalc.timemodel import profile_from_mapping
    from decodecalc.yamlio import safe_load

    fam = FamilyParams(latency_s=2e-6, program_bandwidth_bytes_per_s=1e18, sm_bandwidth_bytes_per_s=1e18,
                       program_overhead_s=0.0, max_programs_per_sm=1)
    w = KernelWork(family="vllm_3d", iters=((10, 132),), bytes_per_iter=30303)  # HBM side 2 us, SM side 2 us
    t_max = kernel_time_s(w, fam, 132, hbm_bandwidth_bytes_per_s=2e12)
    t_l2 = kernel_time_s(w, dataclasses.replace(fam, blend_power=2.0), 132, hbm_bandwidth_bytes_per_s=2e12)
    assert t_l2 == pytest.approx(2 ** 0.5 * t_max, rel=2e-3)
    # the work's own power wins over the family's
    t_w = kernel_time_s(dataclasses.replace(w, blend_power=1.0), dataclasses.replace(fam, blend_power=2.0), 132,
                        hbm_bandwidth_bytes_per_s=2e12)
    assert t_w == pytest.approx(2 * t_max, rel=2e-3)
    prof = packaged_profile("h200")
    assert prof is not None
    fams = dict(prof.families)
    fams["vllm_3d"] = dataclasses.replace(fams["vllm_3d"], blend_power=3.0)
    back = profile_from_mapping(safe_load(dump_profile(dataclasses.replace(prof, families=fams))), origin="test")
    assert back.families["vllm_3d"].blend_power == 3.0
    assert "blend_power" not in dataclasses.replace(fams["vllm_2d"], blend_power=0.0).as_dict()


def test_family_idle_program_cost_overrides_the_gpus():
    """Programs that exit at once cost the family's ``idle_program_s`` of SM time when it sets one, else the
    GPU's (spread over the SMs); the fit frees it per family only for the kernels it is asked to."""
    fam = FamilyParams(latency_s=1e-6, program_bandwidth_bytes_per_s=1e11, sm_bandwidth_bytes_per_s=1e11,
                       program_overhead_s=0.0, max_programs_per_sm=4)
    busy = KernelWork(family="sglang_stage1", iters=((1, 132),), bytes_per_iter=1024)
    idle = dataclasses.replace(busy, idle_programs=132 * 1000)
    base = kernel_time_s(busy, fam, 132, idle_program_s=1e-7)
    assert kernel_time_s(idle, fam, 132, idle_program_s=1e-7) - base == pytest.approx(1000 * 1e-7)
    own = dataclasses.replace(fam, idle_program_s=3e-7)
    assert kernel_time_s(idle, own, 132, idle_program_s=1e-7) - base == pytest.approx(1000 * 3e-7)
    # fitted: measurements made with a known own idle cost give it back for that family only
    prof = packaged_profile("h200")
    truth = dataclasses.replace(prof, families={**prof.families, "sglang_stage1": dataclasses.replace(
        prof.families["sglang_stage1"], idle_program_s=4e-7)})
    rows = []
    for L in (64, 512, 4096):
        for s in (8, 32, 64):
            shape = Shape(num_heads=32, num_kv_heads=8, seq_lens=(L,) * 16)
            lw = sglang_work(shape, splits=1, max_kv_splits=s)
            rows.append(dataclasses.replace(
                measurements_from_rows([{"num_q_heads": 32, "num_kv_heads": 8, "head_dim": 128, "batch": 16,
                                         "seq_len": L, "variant": f"sglang-static-S{s}", "t_us": 1.0}])[0],
                work=lw, time_s=launch_time_s(lw, truth)))
    got = fit_profile(rows, prof, search_occupancy=False, fit_globals=False, max_evals=600, restarts=1,
                      own_idle_kernels=("sglang",))
    assert got.families["sglang_stage1"].idle_program_s == pytest.approx(4e-7, rel=0.1)
    assert got.families["vllm_3d"].idle_program_s == prof.families["vllm_3d"].idle_program_s  # not fitted here


# ---------------------------------------------------------------------------------------------
# the interleaved-rows cost and the stream exponent (decodecalc.timemodel.work.kv_runs_per_iter)


def test_kv_runs_per_iter_counts_pages_for_one_kv_head_and_rows_otherwise():
    from decodecalc.timemodel.work import KV_PAGE_TOKENS, kv_runs_per_iter

    assert KV_PAGE_TOKENS == 16
    assert kv_runs_per_iter(1, 32, 16) == 4  # K and V: two pages each
    assert kv_runs_per_iter(1, 16, 16) == 2
    assert kv_runs_per_iter(1, 64, 16) == 8
    assert kv_runs_per_iter(2, 32, 16) == 64  # one row of the program's head per token, K and V
    assert kv_runs_per_iter(8, 16, 16) == 32
    # both engines' works carry it: SGLang's grouped stage 1 tiles 32 tokens, vLLM's 3D kernel 16 at d128
    sg1 = Shape(num_heads=8, num_kv_heads=1, seq_lens=(4096,))
    sg8 = Shape(num_heads=32, num_kv_heads=8, seq_lens=(4096,))
    assert sglang_work(sg1, splits=4).kernels[0].runs_per_iter == 4
    assert sglang_work(sg8, splits=4).kernels[0].runs_per_iter == 64
    assert vllm_work(sg8, splits=4).kernels[0].runs_per_iter == 32
    assert sglang_work(sg8, splits=4).kernels[1].runs_per_iter == 0  # stage 2 reads its partial states


def test_run_cost_and_stream_exponent_enter_the_iteration_latency():
    from decodecalc.timemodel.predict import STREAM_REF_BYTES, iteration_cost

    fam = FamilyParams(latency_s=1e-6, program_bandwidth_bytes_per_s=10e9, sm_bandwidth_bytes_per_s=80e9,
                       program_overhead_s=1e-7, max_programs_per_sm=4)
    work = KernelWork(family="sglang_stage1", iters=((10, 1),), bytes_per_iter=STREAM_REF_BYTES, runs_per_iter=64)
    plain = iteration_cost(work, fam, 132).latency_s
    assert plain == pytest.approx(1e-6 + STREAM_REF_BYTES / 10e9)  # run_s 0: no run cost
    with_runs = iteration_cost(work, dataclasses.replace(fam, run_s=8e-9), 132).latency_s
    assert with_runs - plain == pytest.approx(64 * 8e-9)
    # the exponent leaves the reference size as fitted, and bends the others: half the bytes cost 2**-0.7 of them
    bent = dataclasses.replace(fam, stream_exponent=0.7)
    assert iteration_cost(work, bent, 132).latency_s == pytest.approx(plain)
    half = dataclasses.replace(work, bytes_per_iter=STREAM_REF_BYTES // 2)
    stream_half = iteration_cost(half, bent, 132).latency_s - 1e-6
    assert stream_half == pytest.approx(STREAM_REF_BYTES / 10e9 * 2 ** -0.7)


def test_run_cost_and_exponent_round_trip_and_are_range_checked(tmp_path):
    prof = packaged_profile("h200")
    fam = dataclasses.replace(prof.families["sglang_stage1"], run_s=7.5e-9, stream_exponent=0.65)
    p2 = dataclasses.replace(prof, families={**prof.families, "sglang_stage1": fam})
    path = tmp_path / "p.yaml"
    path.write_text(dump_profile(p2))
    back = load_profile_file(path)
    assert back.families["sglang_stage1"].run_s == 7.5e-9
    assert back.families["sglang_stage1"].stream_exponent == 0.65
    plain = dataclasses.replace(fam, run_s=0.0, stream_exponent=1.0).as_dict()
    assert "run_s" not in plain and "stream_exponent" not in plain  # defaults are not written
    with pytest.raises(ConfigError, match="run_s must be a number in"):
        dataclasses.replace(fam, run_s=1.0)
    with pytest.raises(ConfigError, match="stream_exponent must be a number in"):
        dataclasses.replace(fam, stream_exponent=5.0)


def test_the_array_model_carries_the_run_count_of_the_scalar_work():
    """tune's array model (decodecalc.batch) and the scalar work must agree on kv_runs_per_iter, or a profile with a
    run cost would time the same launch two ways."""
    import numpy as np

    from decodecalc.batch.launches import _sglang_arrays
    from decodecalc.specs.models import resolve_model
    from decodecalc.workload import make_workload

    for name, tp in (("llama3-8b", 1), ("llama3-70b", 8)):
        w = make_workload(resolve_model(name), tp=tp, batch=2, seq_len=4096)
        lens = np.array([[4096, 4096]])
        mask = np.ones_like(lens, dtype=bool)
        arrays = _sglang_arrays(w, lens, mask, np.array([[8, 8]]), 8, False, "")
        scalar = sglang_work(w, splits=8)
        assert arrays.kernels[0].runs_per_iter == scalar.kernels[0].runs_per_iter > 0
