"""One home per upstream rule: change the rule in its launcher module and every report follows.

vLLM's BLOCK_M / BLOCK_Q packing lives only in ``launchers.vllm_unified.block_shape`` and SGLang's
split-count rule only in ``launchers.sglang_triton.kv_chunk_sizes`` (with ``splits_from_chunks``).
Each test replaces that one function and checks that grid, compare, sweep, recommend and the time model
all move with it: a copy of the rule anywhere else would keep one of them at the old value.
"""

from __future__ import annotations

import pytest
from helpers import H200, LLAMA3_8B, work

from decodecalc.derived import next_power_of_2
from decodecalc.launchers import sglang_triton, vllm_unified
from decodecalc.launchers.registry import PolicyOptions
from decodecalc.launchers.vllm_unified import VllmSettings, plan_vllm
from decodecalc.reports import compare, grid, recommend, sweep
from decodecalc.specs.models import ModelConfig
from decodecalc.timemodel import packaged_profile, predict_time_s
from decodecalc.timemodel.fit import Shape, work_for_variant

EAGER = VllmSettings(cudagraph_mode="NONE")  # no CUDA-graph padding: the launch is the batch as given


def _wide_block_shape(num_queries_per_kv: int) -> tuple[int, int]:
    """A different packing: BLOCK_M 64 up to 64 query heads per KV head (upstream: 16 up to 16)."""
    block_m = 64 if num_queries_per_kv <= 64 else next_power_of_2(num_queries_per_kv)
    return block_m, block_m // num_queries_per_kv


def _vllm_figures(w) -> dict[str, object]:
    """What each consumer of the BLOCK_M rule reports for one decode batch."""
    prof = packaged_profile("h200")
    g = grid.grid_report(w, H200, systems=("vllm",), vllm=EAGER).systems[0].data
    opts = PolicyOptions(vllm=EAGER)
    cmp_vllm = compare.evaluate("vllm", w, H200, opts)
    cmp_fd = compare.evaluate("flashdecoding", w, H200, opts)
    spec = sweep.SweepSpec(models=(LLAMA3_8B,), tps=(1,), gpus=(H200,), policies=("vllm", "flashdecoding"),
                           batches=(w.batch,), seq_lens=(w.seq_lens[0],))
    sw = {gr.policy: gr.values["programs"][0][0] for gr in sweep.run_sweep(spec, opts).grids}
    rec = recommend.recommend(w, H200, kernels=("vllm",), profile=prof, vllm_settings=EAGER).kernels["vllm"]
    t, _ = predict_time_s(plan_vllm(w, H200, EAGER).plan, w, H200, "vllm", profile=prof)
    return {
        "grid programs": g["programs"], "grid block_q": g["block_q"], "grid g_2d": g["g_2d"],
        "compare vllm programs": cmp_vllm.plan.main.programs if cmp_vllm.plan else None,
        "compare flashdecoding G_2D": cmp_fd.plan.details.G_2D if cmp_fd.plan else None,
        "compare flashdecoding figures g_2d": cmp_fd.figures.g_2d if cmp_fd.figures else None,
        "sweep vllm programs": sw["vllm"], "sweep flashdecoding programs": sw["flashdecoding"],
        "recommend default time": rec.default.predicted_time_s,
        "recommend candidate times": tuple(c.predicted_time_s for c in rec.candidates),
        "time model": t,
    }


def test_block_m_rule_has_one_home(monkeypatch):
    # Llama-3-8B TP1, 32 sequences x 4096 keys: g = 4, upstream BLOCK_Q = 16 // 4 = 4,
    # total_num_q_blocks = 32 // 4 + 32 = 40; with the wide rule BLOCK_Q = 16: 32 // 16 + 32 = 34
    w = work(batch=32, seq_len=4096)
    before = _vllm_figures(w)
    assert before["grid block_q"] == 4 and before["compare flashdecoding G_2D"] == 40 * 8
    monkeypatch.setattr(vllm_unified, "block_shape", _wide_block_shape)
    after = _vllm_figures(w)
    assert after["grid block_q"] == 16 and after["compare flashdecoding G_2D"] == 34 * 8
    unchanged = [k for k in before if before[k] == after[k]]
    assert not unchanged, f"still computed with the old BLOCK_M rule: {unchanged}"


def _forced_chunks(max_seq_len: int, min_seq_len: int, ext_core_count: int, grid: int,
                   max_kv_splits: int) -> tuple[int, int, int]:
    """A different split rule: chunks of 512 keys (upstream: from Lmax/Lmin and the SM count)."""
    return min_seq_len, 512, 512


def _sglang_figures(w) -> dict[str, object]:
    prof = packaged_profile("h200")
    g = grid.grid_report(w, H200, systems=("sglang",)).systems[0].data
    c = compare.evaluate("sglang", w, H200)
    spec = sweep.SweepSpec(models=(w.model,), tps=(1,), gpus=(H200,), policies=("sglang",), batches=(w.batch,),
                           seq_lens=(w.seq_lens[0],))
    sw = sweep.run_sweep(spec).grids[0].values["splits"][0][0]
    rec = recommend.recommend(w, H200, kernels=("sglang",), profile=prof).kernels["sglang"]
    t, _ = predict_time_s(sglang_triton.plan_sglang(w, H200).plan, w, H200, "sglang", profile=prof)
    fit_splits = work_for_variant(Shape(num_heads=w.num_heads, num_kv_heads=w.num_kv_heads, seq_lens=w.seq_lens),
                                  "sglang-adaptive", num_sms=H200.num_sms)[1]
    return {"grid num_kv_splits": g["num_kv_splits"][0], "compare splits": c.plan.splits[0] if c.plan else None,
            "sweep splits": sw, "recommend default splits": rec.default.splits,
            "recommend default time": rec.default.predicted_time_s, "time model": t, "calibration fit splits": fit_splits}


@pytest.mark.parametrize("m", [LLAMA3_8B, ModelConfig(name="mha", num_layers=1, num_attention_heads=32,
                                                      num_key_value_heads=32, head_dim=128)])
def test_sglang_split_rule_has_one_home(monkeypatch, m):
    # one sequence of 2560 keys: SGLang picks 8 splits on 132 SMs (upstream-launchers.md 2.3; MHA: 132 x
    # log2(40) = 702 extended cores over 32 programs, capped at 8); 512-key chunks give cdiv(2560, 512) = 5
    w = work(m, batch=1, seq_len=2560)
    before = _sglang_figures(w)
    monkeypatch.setattr(sglang_triton, "kv_chunk_sizes", _forced_chunks)
    after = _sglang_figures(w)
    assert before["grid num_kv_splits"] == 8 and after["grid num_kv_splits"] == 5
    unchanged = [k for k in before if before[k] == after[k]]
    assert not unchanged, f"still computed with the old split rule: {unchanged}"
