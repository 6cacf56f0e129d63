"""XQA (FlashInfer 0.7.2.post1 csrc/xqa), trtllm-gen and TensorRT-LLM's multi-block rules (launchers/xqa.py,
launchers/trtllm_gen.py, launchers/trtllm.py): the split formulas against their sources' worked values, the grids,
what each kernel leaves idle, and the refusals. The GPU check is ``benchmarks/measure_xqa.py`` (CUPTI grids)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decodecalc.errors import UnsupportedError
from decodecalc.launchers import trtllm, trtllm_gen, xqa
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.timemodel.backends import _xqa_cta_steps, xqa_work
from decodecalc.workload import make_workload

H200 = resolve_gpu("h200")
B200 = resolve_gpu("b200")


def _w(model: str = "llama3-70b", tp: int = 8, batch: int = 1, seq_len: int = 8192, **kw):
    return make_workload(resolve_model(model), tp=tp, batch=batch, seq_len=seq_len, **kw)


# FlashInfer 0.7.2.post1 mha.cu L3123-3129 and mha_sm90.cu L3059-3065 on 132 SMs: (B, Hkv, maxSeqLen) -> sub-sequences
@pytest.mark.parametrize("b, hkv, width, mha, sm90", [
    (1, 1, 8192, 32, 99), (1, 1, 131072, 132, 99), (1, 8, 8192, 16, 12), (16, 8, 8192, 1, 1), (128, 1, 4096, 1, 1)])
def test_sub_sequence_counts(b, hkv, width, mha, sm90):
    assert xqa.nb_sub_seq_mha(132, b, hkv, width) == mha
    assert xqa.nb_sub_seq_sm90(132, b, hkv, width) == sm90


def test_the_block_table_width_sets_the_split_not_the_batch():
    """The issue's H100 case: one KV head, 8,192 tokens; a table sized for max_model_len 131,072 gives 132
    sub-sequences, 100 of them with no 256-token tile; sized for 8,192 it gives 32."""
    wide = xqa.plan_xqa(_w(), H200, max_model_len=131072)
    assert wide.grid == (132, 1, 1) and wide.nonempty_splits == (32,)
    assert wide.main.working_programs == 132  # mha.cu runs every CTA (no early exit)
    tight = xqa.plan_xqa(_w(), H200, max_seq_len=8192)
    assert tight.grid == (32, 1, 1)
    work = xqa_work(wide, _w())
    assert dict(work.kernels[0].iters)[0] == 100  # empty CTAs run with no step
    assert work.kernels[1].family == "xqa_merge" and work.overlapped_launches == 1


def test_fp8_kernel_exits_extra_ctas():
    w = _w(seq_len=1000, kv_cache_dtype="fp8")
    p = xqa.plan_xqa(w, H200, max_seq_len=131072)
    assert p.system == "xqa-fp8" and p.grid == (1, 99, 1)
    assert p.splits == (16,)  # ceil(1000 / 64) tiles: the other 83 CTAs return at once (mha_sm90.cu L707-724)
    assert xqa_work(p, w).kernels[0].idle_programs == 83


@given(L=st.integers(1, 200_000), n=st.integers(1, 300), tile=st.sampled_from([64, 256]))
@settings(max_examples=200, deadline=None)
def test_strided_tiles_cover_the_sequence_once(L, n, tile):
    steps = _xqa_cta_steps(L, n, tile)
    assert sum(c for _, c in steps) == n
    assert sum(u * c for u, c in steps) == -(-L // 64)  # every 64-token step of the sequence read once


@pytest.mark.parametrize("kw, why", [
    (dict(block_size=8), "page sizes"), (dict(kv_cache_dtype="fp8_e5m2"), "e5m2")])
def test_refusals_name_the_rule(kw, why):
    with pytest.raises(UnsupportedError, match=why):
        xqa.plan_xqa(_w(**kw), H200)


def test_group_limit_of_the_fp8_kernel():
    w = make_workload(resolve_model("llama3-70b"), tp=1, batch=1, seq_len=512, kv_cache_dtype="fp8")  # g = 8
    assert xqa.unsupported_reason(w, H200) is None
    big = make_workload(resolve_model("qwen2.5-72b"), tp=1, batch=1, seq_len=512)
    assert xqa.unsupported_reason(big, resolve_gpu("a100")) is not None  # SM80: XQA is built for 9.x-12.x


# TensorRT-LLM decoderXQAImplCommon.h L357-392 (1.2.0rc2): values of decodecalc's port on 132 SMs, KVH 8, B 1 (no
# upstream test covers computeMultiBlockCount); the trace is in the docstring's steps
@pytest.mark.parametrize("hist, m", [(255, 1), (256, 2), (512, 4), (1024, 8), (2048, 11), (4096, 16), (8192, 23),
                                     (32768, 45)])
def test_compute_multi_block_count(hist, m):
    assert trtllm.compute_multi_block_count(batch_size=1, num_kv_heads=8, history_length=hist,
                                            multiprocessor_count=132) == m


def test_multi_block_count_wave_cap_and_env():
    # B 4 at 32,768 tokens: 45 would be 10.9 waves of 132 SMs, cut to floor(45 / 1.36) = 33
    assert trtllm.compute_multi_block_count(batch_size=4, num_kv_heads=8, history_length=32768,
                                            multiprocessor_count=132) == 33
    assert trtllm.compute_multi_block_count(batch_size=256, num_kv_heads=8, history_length=32768,
                                            multiprocessor_count=132) == 1
    assert trtllm.compute_multi_block_count(batch_size=1, num_kv_heads=8, history_length=100, multiprocessor_count=132,
                                            env_blocks=77) == 77


# cpp/tests/unit_tests/kernels/decoderXQAImplCommonTest.cpp @24de1aa3 L45-79 (kvHeads 1, 128 SMs): the upstream
# expectations of the speculative-decoding count, which 1.2.0rc2's computeMultiBlockCountSpecDecGMMA reproduces
@pytest.mark.parametrize("hist, spec_blocks, expected", [(4096, 1, 16), (4096, 8, 8), (1024, 1, 1)])
def test_spec_dec_count_matches_upstream_unit_test(hist, spec_blocks, expected):
    assert trtllm.compute_multi_block_count_spec_dec_gmma(
        batch_size=1, num_kv_heads=1, history_length=hist, multiprocessor_count=128,
        spec_dec_blocks=spec_blocks) == expected


def test_xqa_or_mmha():
    s = trtllm.TrtllmSettings()
    # mayHavePerfGain: Hkv * B * max(1, hist // 128) * 4 >= SMs; KVH 8, B 1: XQA from 640 tokens on
    assert not trtllm.uses_xqa(_w("llama3-8b", tp=1, seq_len=639), H200, s)[0]
    assert trtllm.uses_xqa(_w("llama3-8b", tp=1, seq_len=640), H200, s)[0]
    use, why = trtllm.uses_xqa(_w("phi-3-mini", tp=1), H200, s)  # plain MHA never runs XQA
    assert not use and "plain MHA" in why
    plan = trtllm.plan_trtllm(_w("phi-3-mini", tp=1, batch=1, seq_len=4096), H200)
    assert plan.system == "trtllm-mmha" and plan.grid[:2] == (32, 1)
    assert plan.grid[2] == min(-(-132 // 32), -(-4096 // 128))  # ceil(SMs / (B * Hq)), one 128-token loop per block


def test_trtllm_xqa_grid():
    p = trtllm.plan_trtllm_xqa(_w(batch=4, seq_len=32768), H200)  # one KV head: 45 = round(sqrt(8 * 256)), 1.4 waves
    assert p.grid == (45, 1, 4)
    assert p.details.xqa_sm_count == 45 * 4  # what FlashInfer's launcher is given to run that count


def test_trtllm_gen_split_and_the_post1_clamp():
    w = _w(tp=8, batch=1, seq_len=8192)  # G 8, one KV head
    assert trtllm_gen.plan_trtllm_gen(w, B200, max_seq_len=8192).details.numCtasPerSeqKv == 16  # 32 -> 16
    assert trtllm_gen.plan_trtllm_gen(w, B200, max_seq_len=8192,
                                      flashinfer_version="0.7.2").details.numCtasPerSeqKv == 32
    assert trtllm_gen.plan_trtllm_gen(w, B200, max_seq_len=131072).details.numCtasPerSeqKv == 148  # past 65,536
    with pytest.raises(UnsupportedError, match="SM 10"):
        trtllm_gen.plan_trtllm_gen(w, H200, max_seq_len=8192)


def test_launches_captured_on_an_h100_match_the_plan():
    """benchmarks/results/xqa-h100-sxm.jsonl.gz: 783 runs of FlashInfer 0.7.2.post1's XQA on an H100 (bf16 and fp8,
    13 head layouts, tight and 131,072-token block tables, TensorRT-LLM's count through the SM-count argument), each
    kernel's grid read back through CUPTI: every one is the launcher's plan for its shape and knobs."""
    import gzip
    import json
    from pathlib import Path

    from decodecalc.timemodel.backend_fit import shape_workload
    from decodecalc.verify.profiler import ProfiledLaunch, compare_launches, knob_plan

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "xqa-h100-sxm.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh]
    h100 = resolve_gpu("h100-sxm")
    seen = set()
    for r in records:
        plan = knob_plan(r["backend"], shape_workload(r["shape"], 16), h100, r["knobs"])
        launches = [ProfiledLaunch(name=x["name"], grid=tuple(x["grid"]), block=tuple(x["block"]),
                                   registers_per_thread=None, shared_memory_bytes=None, est_occupancy_pct=None,
                                   duration_us=None, role=x["role"]) for x in r["launches"]]
        assert compare_launches(plan, launches)["match"], (r["backend"], r["shape"]["layout"], r["knobs"])
        seen.add(r["backend"])
    assert len(records) == 783 and seen == {"xqa", "xqa-fp8", "trtllm-xqa"}


def test_verify_refuses_a_backend_that_cannot_run_the_workload(monkeypatch):
    """An explicit --system the launcher refuses is one Error line with the reason and its source, before any kernel
    runs (here on a bf16 cache, which the fp8 Hopper kernel does not read)."""
    from typer.testing import CliRunner

    from decodecalc.cli import app
    from decodecalc.verify import profiler

    monkeypatch.setattr(profiler, "missing_backend", lambda backend: None)
    r = CliRunner().invoke(app, ["verify", "--system", "xqa-fp8", "-m", "llama3-8b", "-s", "512"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "Error: --system xqa-fp8:" in r.output and "xqa.py L386-393" in r.output


def test_fa3_and_flashinfer_launches_on_new_layouts_match_the_plan():
    """benchmarks/results/layouts-h100-sxm.jsonl.gz: 732 runs of vLLM 0.33.0's FA3 and FlashInfer 0.7.2.post1's
    tensor-core decode on an H100, at six head layouts no fit had seen (g 12 and 16, d 96, d 64, 96:8, 32:16), bf16 and
    fp8, eager and under CUDA graphs: every launch (grid, and FA3's per-request splits) is the launcher's plan, so every
    run becomes a measurement."""
    import gzip
    import json
    from pathlib import Path

    from decodecalc.verify.backend_calibration import record_measurements

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "layouts-h100-sxm.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh]
    assert len(records) == 732 and all(r.get("match") for r in records)
    ms = record_measurements(records, resolve_gpu("h100-sxm"))
    assert len(ms) == 732
    assert {(m.shape.num_heads, m.shape.num_kv_heads, m.shape.head_size) for m in ms} == {
        (12, 1, 128), (24, 2, 128), (32, 32, 96), (96, 8, 128), (32, 16, 128), (32, 8, 64)}
