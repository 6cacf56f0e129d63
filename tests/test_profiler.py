"""decodecalc.verify.profiler and the models it checked: every launch captured on the H200 through the CUDA
profiler (benchmarks/results/capture-backends-h200.jsonl: FlashInfer 0.7.2.post1, vLLM 0.33.0's FA3 and
FlashMLA builds) must still be what the launchers predict."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from capture_records import launches_of, workload_of

from decodecalc.errors import UnsupportedError
from decodecalc.launchers import flashinfer as FI
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.verify import profiler as P
from decodecalc.workload import make_workload
from decodecalc.yamlio import load_yaml_file

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "benchmarks" / "results" / "capture-backends-h200.jsonl"
SWEEP = ROOT / "benchmarks" / "results" / "sweep-backends-h200.jsonl"
#: benchmarks/measure_backends_fp8_h200.py: FlashInfer 0.7.2.post1 and vLLM 0.33.0's FA3 on bf16 and fp8 KV caches
FP8_FI = ROOT / "benchmarks" / "results" / "fp8-backends-flashinfer-h200.jsonl.gz"
FP8_FA3 = ROOT / "benchmarks" / "results" / "fp8-backends-fa3-h200.jsonl.gz"
#: benchmarks/measure_flashinfer_ctas_h200.py: FlashInfer's CUDA cores at group 16 (d64 / d128 / d256) and group 8 at d256
CTAS = ROOT / "benchmarks" / "results" / "flashinfer-ctas-h200.jsonl.gz"
H200 = resolve_gpu("h200")


def _records(path: Path = CAPTURE) -> list[dict]:
    return P.read_capture_records(path)


@pytest.mark.parametrize("backend", ["flashinfer", "flashinfer-tc", "fa3", "flashmla"])
def test_captured_launches_match_the_model(backend: str) -> None:
    recs = [r for r in _records() if r["backend"] == backend]
    assert len(recs) >= 30
    bad = []
    for r in recs:
        w = workload_of(r)
        res = P.predict_and_compare(backend, w, H200, [] if "error" in r else launches_of(r), cuda_graph=r["cuda_graph"])
        if "error" in r:  # the kernel refused the shape: the model must not claim it runs
            if res["match"] is not None:
                bad.append((r["shape"], "kernel refused, model applicable", r["error"][-80:]))
        elif res["match"] is not True:
            bad.append((r["shape"]["tag"], w.batch, w.max_seqlen_k, r["cuda_graph"], res.get("kernels")))
    assert not bad, bad[:5]


def test_occupancy_data_follows_from_the_captured_registers() -> None:
    data = load_yaml_file(ROOT / "decodecalc" / "data" / "occupancy.yaml")["sm_90"]
    for table in ("flashinfer_decode", "flashinfer_merge"):
        for key, row in data[table].items():
            occ = P.ctas_per_sm(row["threads"], row["registers_per_thread"], row["shared_memory_bytes"])
            assert occ == row["occupancy"], (table, key)
    # and the captured registers, threads and shared memory are the ones recorded
    seen = {}
    for r in _records() + _records(SWEEP) + _records(FP8_FI):
        if r["backend"] == "flashinfer" and "error" not in r:
            w = workload_of(r)
            main = next(x for x in r["launches"] if x["role"] == "main")
            seen[FI.decode_variant(w)] = (main["registers_per_thread"], main["block"][0] * main["block"][1]
                                                     * main["block"][2], main["shared_memory_bytes"])
            # and the grid follows from that occupancy
            assert P.predict_and_compare("flashinfer", w, H200, launches_of(r), cuda_graph=r["cuda_graph"])["match"]
    # the group-16 layouts at d64 and d256 (benchmarks/measure_flashinfer_ctas_h200.py: calibrate's saved runs, whose
    # launches keep the fields the fit reads)
    from decodecalc.verify.backend_calibration import record_measurement

    for r in _records(CTAS):
        w = workload_of(r)
        main = next(x for x in r["launches"] if x["role"] == "main")
        seen[FI.decode_variant(w)] = (main["registers_per_thread"], main["block"][0] * main["block"][1]
                                      * main["block"][2], main["shared_memory_bytes"])
        assert record_measurement(r, H200) is not None  # the grid follows from that occupancy
    assert seen == {k: (v["registers_per_thread"], v["threads"], v["shared_memory_bytes"])
                    for k, v in data["flashinfer_decode"].items()}


@pytest.mark.parametrize("backend", ["flashinfer", "flashinfer-tc"])
def test_fp8_kv_launches_match_the_model(backend: str) -> None:
    """Every FlashInfer launch of the fp8-KV run (bf16 and e4m3 caches, 18 head layouts) has the predicted grid:
    the CUDA-core kernel's e4m3 template has its own registers per thread, hence its own occupancy (5-7 CTAs/SM
    against 9 for bf16 on the same layout)."""
    recs = [r for r in _records(FP8_FI) if r["backend"] == backend and "error" not in r]
    assert {r["shape"]["kv_cache_dtype"] for r in recs} == {"bfloat16", "fp8"} and len(recs) >= 300
    bad = [(r["shape"]["layout"], r["shape"]["kv_cache_dtype"], r["shape"]["seq_lens"][:2]) for r in recs
           if not P.predict_and_compare(backend, workload_of(r), H200, launches_of(r),
                                        cuda_graph=r["cuda_graph"])["match"]]
    assert not bad, bad[:5]
    if backend == "flashinfer":
        occ = {FI.decode_variant(workload_of(r)): FI.plan_flashinfer(workload_of(r), H200).details.occupancy
               for r in recs}
        assert occ["128/8"] == 9 and occ["128/8/e4m3"] == 7 and occ["128/16/e4m3"] == 5


def test_h200_default_uses_the_measured_occupancy() -> None:
    # upstream-launchers.md corrections: (1024, 1) for 8:1 heads at batch 1 and 131,072 tokens
    w = make_workload(resolve_model("llama3-70b"), tp=8, seq_lens=(131072,) * 4)
    plan = FI.plan_flashinfer(w, H200)
    assert plan.details.occupancy == 9
    lower = FI.plan_flashinfer(w, H200, occupancy=2)
    assert plan.grid != lower.grid
    # issue 18 item 4: occupancy is the sm_90 build's, so the H100 (and H20) share the H200's measurement; an
    # architecture nothing was measured on keeps the labelled lower bound
    assert FI.plan_flashinfer(w, resolve_gpu("h100")).details.occupancy == 9
    assert FI.plan_flashinfer(w, resolve_gpu("h20")).details.occupancy == 9
    assert FI.plan_flashinfer(w, resolve_gpu("a100-80gb")).details.occupancy < 9


def test_cuda_core_group_sizes() -> None:
    w = make_workload(resolve_model("qwen2.5-7b"), seq_lens=(2560,) * 4)  # 28:4 heads, group 7
    with pytest.raises(UnsupportedError, match="group size 7"):
        FI.plan_flashinfer(w, H200)
    assert FI.plan_flashinfer_tc(w, H200).grid  # the prefill kernel takes any group size


def test_tensor_core_cuda_graph_single_token_uses_the_ragged_bound() -> None:
    # captured: llama3-8b, batch 64 x 2560, use_cuda_graph=True -> (79, 1, 8) = cdiv(64*4, 16) + 63
    w = make_workload(resolve_model("llama3-8b"), seq_lens=(2560,) * 64)
    assert FI.plan_flashinfer_tc(w, H200, cuda_graph=True).grid == (79, 1, 8)


def test_compare_launches_detects_a_wrong_grid() -> None:
    w = make_workload(resolve_model("llama3-8b"), seq_lens=(2560,))
    plan = FI.plan_flashinfer(w, H200)
    good = [P.ProfiledLaunch("BatchDecodeWithPagedKVCacheKernel<...>", (*plan.grid, 1), (16, 4, 2), 56, 9216, None, 9.0, "main")]
    merge = [P.ProfiledLaunch("PersistentVariableLengthMergeStatesKernel", (*plan.merge.grid, 1, 1), (16, 8, 1), 40, 0,
                              None, 2.0, "merge")]
    assert P.compare_launches(plan, good + merge)["match"] is True
    wrong = [P.ProfiledLaunch("x", (plan.grid[0] + 1, plan.grid[1], 1), (1,), 1, 0, None, 1.0, "main")]
    assert P.compare_launches(plan, wrong + merge)["match"] is False
    assert P.compare_launches(plan, good)["match"] is False  # the merge kernel is missing


def test_roles_come_from_the_kernel_names() -> None:
    assert P.role_of("fa3", "cutlass::device_kernel<flash::FlashAttnFwdCombine<...>>") == "merge"
    assert P.role_of("fa3", "cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<") == "main"
    assert P.role_of("flashinfer", "void flashinfer::PersistentVariableLengthMergeStatesKernel<8u>") == "merge"
    assert P.role_of("flashmla", "fill_kernel") == "other"


def test_missing_backend_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n in ("flashinfer", "vllm") else (object() if n == "torch" else real(n, *a)))
    monkeypatch.delenv("DECODECALC_FA3_LIB", raising=False)
    assert "flashinfer-python" in (P.missing_backend("flashinfer") or "")
    assert "vllm" in (P.missing_backend("fa3") or "")
    monkeypatch.setenv("DECODECALC_FA3_LIB", str(CAPTURE))  # any existing file counts as the library
    assert P.missing_backend("fa3") is None


@pytest.mark.parametrize("backend", ["flashinfer-tc", "fa3"])
def test_swept_split_settings_match_the_model(backend: str) -> None:
    """fixed_split_size / disable_split_kv (tensor cores) and num_splits (FA3), 47 shapes each."""
    recs = [r for r in _records(SWEEP) if r["backend"] == backend and "error" not in r]
    assert len(recs) >= 300
    for r in recs:
        plan = P.knob_plan(backend, workload_of(r), H200, r["knobs"])
        assert P.compare_launches(plan, launches_of(r))["match"], (r["shape"]["tag"], r["knobs"])


@pytest.mark.parametrize("path", [CAPTURE, SWEEP, FP8_FA3])
def test_fa3_split_counts_match_its_prepare_kernel(path: Path) -> None:
    """FA3 runs on a persistent grid (one CTA per SM), so its grid cannot tell a wrong split count: the per-request
    splits its prepare kernel wrote into the scheduler metadata (read back by the run) are compared instead, for
    every committed FA3 run that split dynamically (bf16 and fp8 caches; vLLM's fork at 617264c1)."""
    checked, bad = 0, []
    for r in _records(path):
        if r["backend"] != "fa3" or "error" in r:
            continue
        w = workload_of(r)
        plan = P.knob_plan("fa3", w, H200, r["knobs"]) if r.get("knobs") else P.fa3_default_plan(w, H200, r["cuda_graph"])
        check = P.fa3_splits_check(plan, r.get("readback"))
        if check is not None:
            checked += 1
            if not check["match"]:
                bad.append((w.num_heads, w.num_kv_heads, w.head_size, w.kv_cache_dtype, w.batch, check["measured"][:4]))
    assert checked >= 150 and not bad, bad[:5]


def test_fa3_splits_check_detects_a_wrong_split_count() -> None:
    rec = next(r for r in _records(FP8_FA3) if r["backend"] == "fa3" and r.get("readback")
               and P.fa3_splits_check(P.fa3_default_plan(workload_of(r), H200, r["cuda_graph"]), r["readback"]))
    plan = P.fa3_default_plan(workload_of(rec), H200, rec["cuda_graph"])
    assert P.fa3_splits_check(plan, rec["readback"])["match"]
    wrong = dataclasses.replace(plan, splits=tuple(s + 1 for s in plan.splits))
    assert P.fa3_splits_check(wrong, rec["readback"])["match"] is False
    assert P.fa3_splits_check(plan, {"scheduler_metadata": None}) is None


def test_verify_prints_fa3_split_check() -> None:
    import io

    from rich.console import Console

    from decodecalc.render.verify import print_profiled
    from decodecalc.verify.environment import Environment

    env = Environment(device="cuda", interpret=False, torch="2.11", triton="3.6", gpu_name="NVIDIA H200")
    buf = io.StringIO()
    rec = {"kernels": [{"role": "main", "match": True}],
           "splits_check": {"predicted": list(range(1, 11)), "measured": list(range(1, 11)), "match": True}}
    print_profiled("fa3", env, rec, True, console=Console(file=buf, width=200))
    out = buf.getvalue()
    assert "splits per request (scheduler metadata): predicted [1, 2, 3, 4, 5, 6, 7, 8, ... (10)]" in out
    assert "match: True" in out
