"""What-if split heuristics: the PR models (against their descriptions), the bound, user rules."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from decodecalc.cli import app
from decodecalc.errors import ConfigError, UnknownNameError
from decodecalc.launchers import sglang_triton as sg
from decodecalc.reports.heuristics import (
    HEURISTICS,
    pr27786_splits,
    pr35801_splits,
    pr47520_threshold,
    score_heuristics,
    select_heuristics,
)
from decodecalc.reports.tune import make_context, tune
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.timemodel import resolve_profile
from decodecalc.traffic import DecodeStep, StepTrace
from decodecalc.workload import make_workload

runner = CliRunner()


def test_pr47520_threshold_from_its_description():
    # vllm-project/vllm PR #47520: SM-sized target, x4 for max_model_len >= 8192, capped at 64, never below
    # the stock 128 // h_kv. H200 (132 SMs): h_kv 8 -> 132 // 8 * 4 = 64; h_kv 1 -> stock 128 wins over the cap.
    assert pr47520_threshold(132, 8, 131072) == 64
    assert pr47520_threshold(132, 8, 4096) == 16  # short context: 132 // 8 = 16 = stock
    assert pr47520_threshold(132, 1, 131072) == 128
    assert pr47520_threshold(132, 4, 131072) == 64


def test_pr35801_splits_progression_from_its_description():
    # sgl-project/sglang PR #35801: "1 split for 256 tokens ... scales smoothly (1 -> 2 -> 4 -> 8)"
    got = [pr35801_splits((L,), num_heads=32, num_kv_heads=8, num_sms=132, max_kv_splits=8)[0]
           for L in (256, 512, 1024, 2048, 100000)]
    assert got == [1, 2, 4, 8, 8]
    # bounded by one wave of SMs: 64 sequences x 8 head tiles = 512 programs per split > 132 SMs -> 1 split
    assert set(pr35801_splits((4096,) * 64, num_heads=32, num_kv_heads=8, num_sms=132, max_kv_splits=8)) == {1}


def test_pr27786_gate_keeps_short_sequences_bit_identical():
    # sgl-project/sglang PR #27786: sequences under 24,576 tokens keep their split count; longer ones use cap 64
    lens = (1000, 20000, 30000, 120000)
    got = pr27786_splits(lens, num_heads=32, num_kv_heads=8, num_sms=132, max_kv_splits=8)
    base = sg.get_num_kv_splits(lens, num_head=32, num_kv_head=8, device_core_count=132, max_kv_splits=8)
    high = sg.get_num_kv_splits(lens, num_head=32, num_kv_head=8, device_core_count=132, max_kv_splits=64)
    assert got[:2] == base[:2] and got[2:] == high[2:] and got[3] > 8


@pytest.fixture(scope="module")
def ctx_result():
    model = resolve_model("llama3-8b")
    gpu = resolve_gpu("h200")
    steps = tuple(DecodeStep(seq_lens=tuple(range(L, L + b)), query_lens=(1,) * b, origin=f"w, line {k + 1}")
                  for k, (b, L) in enumerate([(1, 30000), (4, 30000), (12, 8000), (24, 30000), (64, 1500)]))
    ctx = make_context(StepTrace(steps=steps, source="w"), make_workload(model), gpu, resolve_profile(gpu))
    return ctx, tune(ctx, max_regression=None)


def test_bound_is_below_every_heuristic_and_default_rows_match(ctx_result):
    ctx, res = ctx_result
    scores = {s.name: s for s in score_heuristics(ctx, res, select_heuristics(None, None))}
    assert set(scores) == set(HEURISTICS)
    for s in scores.values():
        bound = scores[f"{s.engine}-bound"]
        assert all(b <= t * (1 + 1e-12) for b, t in zip(bound.times, s.times))
        assert s.vs_bound >= -1e-12
    for engine in ("vllm", "sglang"):
        assert list(scores[f"{engine}-default"].times) == list(res.engines[engine].default.times)
        assert scores[f"{engine}-default"].vs_default == 0.0
        assert list(scores[f"{engine}-tuned"].times) == list(res.engines[engine].best.times)


def test_user_rule(tmp_path, ctx_result):
    ctx, res = ctx_result
    rule = tmp_path / "rule.py"
    rule.write_text("def splits(step):\n    return [max(1, min(32, L // 2048)) for L in step.seq_lens]\n"
                    "def segments(step):\n    return 32 if step.batch <= 16 else 1\n")
    chosen = select_heuristics("none", rule)
    scores = {s.name: s for s in score_heuristics(ctx, res, chosen)}
    assert set(scores) == {"user-splits", "user-segments"}
    assert scores["user-segments"].times[0] == ctx.timer.vllm_forced(32).time[0]
    assert scores["user-segments"].times[4] == ctx.timer.vllm_forced(1).time[4]  # batch 64: the 2D kernel
    from decodecalc.timemodel import launch_time_s, sglang_work

    def rule_of(i: int) -> list[int]:
        return [max(1, min(32, L // 2048)) for L in ctx.steps.step_lens(i)[0]]

    grid = max(max(rule_of(i)) for i in range(ctx.steps.num_steps))  # the split dimension: largest over the workload
    assert grid == 30023 // 2048
    w = ctx.timer.exact_timer.work(0)  # a step of one sequence: the same launch as the scalar model's
    assert scores["user-splits"].times[0] == pytest.approx(
        launch_time_s(sglang_work(w, splits=tuple(rule_of(0)), max_kv_splits=grid, adaptive=True), ctx.profile),
        rel=1e-12)


@pytest.mark.parametrize("body, needle", [
    ("def splits(step):\n    return [1 / 0]\n", "raised ZeroDivisionError"),
    ("def splits(step):\n    return [1]\n", "returned 1 values for the step at w, line"),
    ("def splits(step):\n    return [0] * step.batch\n", "expected integers from 1 to 65,535"),
    ("def split(step):\n    return 1\n", "define splits(step)"),
    ("def splits(step:\n", "cannot load it: SyntaxError"),
])
def test_bad_user_rules(tmp_path, ctx_result, body, needle):
    ctx, res = ctx_result
    rule = tmp_path / "rule.py"
    rule.write_text(body)
    with pytest.raises(ConfigError) as e:
        score_heuristics(ctx, res, select_heuristics("none", rule))
    assert needle in str(e.value) and str(rule) in str(e.value)


def test_raising_rule_names_the_step_on_the_command_line(tmp_path):
    rule = tmp_path / "rule.py"
    rule.write_text("def splits(step):\n    if step.batch > 20:\n        raise ValueError('too big')\n"
                    "    return [1] * step.batch\n")
    r = runner.invoke(app, ["tune", "--steps", "examples/workloads/long-context-ramp.jsonl", "--rule", str(rule),
                            "--json"])
    assert r.exit_code == 1 and r.stdout == ""
    assert "raised ValueError: too big on the step at examples/workloads/long-context-ramp.jsonl, line" in r.stderr


def test_unknown_heuristic():
    with pytest.raises(UnknownNameError, match="sglang-pr27786"):
        select_heuristics("sglang-pr2778", None)
