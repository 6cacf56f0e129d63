"""FlashAttention-2 through the CUDA profiler: the launches captured on the H200 from a restricted build
of flash-attn 2.8.3.post2 (benchmarks/results/capture-fa2-h200.jsonl, benchmarks/capture_fa2_h200.py)
must still be what decodecalc's fa2 launcher predicts; the runner's plumbing (roles, the missing-library
message, the stubs of the restricted build) is checked without a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from capture_records import launches_of, workload_of

from benchmarks.build_fa2_h200 import compiled_specialisations, stub_source
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.verify import profiler as P

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CAPTURE = RESULTS / "capture-fa2-h200.jsonl"
CONTIGUOUS = RESULTS / "capture-fa2-h200-contiguous.jsonl"  # block 16: FA2's contiguous cache
SWEEP = RESULTS / "sweep-fa2-h200.jsonl"  # num_splits 1-128
H200 = resolve_gpu("h200")


def _records(path: Path) -> list[dict]:
    if not path.is_file():
        pytest.skip(f"{path.name} not committed")
    with path.open(encoding="utf-8") as fh:
        return [r for r in map(json.loads, fh) if "error" not in r]


@pytest.mark.parametrize("path", [CAPTURE, CONTIGUOUS], ids=["paged-256", "contiguous"])
def test_captured_fa2_launches_match_the_model(path: Path) -> None:
    recs = _records(path)
    assert len(recs) >= 100
    assert {r["launches"][0]["name"].split("<")[0] for r in recs} <= {"void flash::flash_fwd_splitkv_kernel",
                                                                       "void flash::flash_fwd_kernel"}
    bad = []
    for r in recs:
        w = workload_of(r)
        res = P.predict_and_compare("fa2", w, H200, launches_of(r), cuda_graph=False)
        if res["match"] is not True:
            bad.append((r["shape"]["tag"], w.batch, w.max_seqlen_k, res.get("kernels")))
    assert not bad, bad[:5]


def test_swept_fa2_num_splits_match_the_model() -> None:
    recs = _records(SWEEP)
    assert len(recs) >= 100
    bad = [(r["shape"]["tag"], r["knobs"], c["kernels"]) for r in recs
           if not (c := P.compare_launches(P.knob_plan("fa2", workload_of(r), H200, r["knobs"]), launches_of(r)))["match"]]
    assert not bad, bad[:5]


def test_fa2_roles_come_from_the_kernel_names() -> None:
    assert P.role_of("fa2", "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, "
                            "false, false, cutlass::bfloat16_t>, false, false>(flash::Flash_fwd_params)") == "main"
    assert P.role_of("fa2", "void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4>, "
                            "4, 7, true>(flash::Flash_fwd_params)") == "merge"
    assert P.role_of("fa2", "void at::native::vectorized_elementwise_kernel<4>") == "other"


def test_fa2_library_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda n, *a: None if n == "flash_attn_2_cuda" else (object() if n == "torch" else real(n, *a)))
    monkeypatch.delenv("DECODECALC_FA2_LIB", raising=False)
    assert "flash-attn" in (P.missing_backend("fa2") or "")
    monkeypatch.setenv("DECODECALC_FA2_LIB", str(tmp_path / "absent.so"))
    assert "DECODECALC_FA2_LIB" in (P.missing_backend("fa2") or "")
    lib = tmp_path / "flash_attn_2_cuda.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("DECODECALC_FA2_LIB", str(lib))
    assert P.missing_backend("fa2") is None


def test_restricted_build_stubs_every_specialisation_but_the_compiled_one() -> None:
    files = ("flash_fwd_split_hdim128_bf16_sm80.cu",)
    assert compiled_specialisations(files) == {("run_mha_fwd_splitkv_dispatch", "bf16", 128, False)}
    src = stub_source(files)
    # 3 functions x 2 types x 6 head dims x causal or not, less the one compiled
    assert src.count("template<> void") == 3 * 2 * 6 * 2 - 1
    assert "run_mha_fwd_splitkv_dispatch<cutlass::bfloat16_t, 128, false>" not in src
    assert "run_mha_fwd_splitkv_dispatch<cutlass::bfloat16_t, 128, true>" in src
