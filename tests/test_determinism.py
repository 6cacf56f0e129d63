"""Batch invariance (decodecalc.reports.determinism) and `decodecalc determinism` through CliRunner."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from decodecalc.reports import determinism as det
from decodecalc.launchers.registry import POLICY_NAMES
from decodecalc.cli import app
from decodecalc.errors import ConfigError
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.workload import make_workload

H200 = resolve_gpu("h200")
MI300X = resolve_gpu("mi300x")
BASE = make_workload(resolve_model("llama3-8b"), batch=1, seq_len=2560)
runner = CliRunner()
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def rows(gpu=H200, **kw):
    return {r.name: r for r in det.analyze(BASE, gpu, seq_len=2560, **kw)}


def test_vllm_changes_order_at_the_threshold():
    # section 2.3: 3D with 16 segments of 160 keys up to B = 16, 2D from B = 17
    r = rows(batches=(1, 16, 17), names=("vllm",))["vllm"]
    assert [v.short for v in r.views] == ["16x160 3D", "16x160 3D", "1x2560 2D"]
    assert r.batch_invariant is False and r.distinct_orders == 2


def test_sglang_adaptive_splits_follow_the_batch():
    # section 2.3 SGLang column: 8/320 at B=1, 7/384 at B=13, 6/448 at B=16, 3/864 at B=32, 2/1280 at B=64
    r = rows(batches=(1, 13, 16, 32, 64), names=("sglang",))["sglang"]
    assert [(v.nonempty, v.tokens_per_split) for v in r.views] == [(8, 320), (7, 384), (6, 448), (3, 864), (2, 1280)]
    assert not r.batch_invariant


def test_switches_make_vllm_fa3_sglang_invariant():
    sw = {r.name: r for r in det.switches(BASE, H200, seq_len=2560, batches=(1, 8, 17, 64, 256))}
    assert all(r.batch_invariant for r in sw.values())
    assert sw["vllm"].views[0].short == "1x2560 2D"
    assert sw["sglang"].views[0].nonempty == 10 and sw["sglang"].views[0].tokens_per_split == 256  # cdiv(2560, 256)
    assert sw["fa3"].views[0].nonempty == 1


def test_rocm_custom_is_batch_invariant():
    # 256-token partitions per sequence whatever the batch (upstream-launchers.md section 6)
    r = rows(gpu=MI300X, batches=(1, 4, 64, 256), names=("vllm-rocm", "aiter"))
    assert r["vllm-rocm"].batch_invariant is True
    assert r["aiter"].batch_invariant is False


def test_ranges_cover_the_request_exactly():
    for r in det.analyze(BASE, H200, seq_len=3000, others=100, batches=(1, 3, 40)):
        for v in r.views:
            assert v.ranges[0][0] == 0 and v.ranges[-1][1] == 3000
            assert all(a < b for a, b in v.ranges)
            assert all(v.ranges[i][1] == v.ranges[i + 1][0] for i in range(len(v.ranges) - 1))


def test_flashmla_ranges_follow_the_schedule():
    w = make_workload(resolve_model("deepseek-v3"), tp=8, batch=1, seq_len=2560)
    r = {x.name: x for x in det.analyze(w, H200, seq_len=2560, batches=(1, 2, 64), names=("flashmla",))}["flashmla"]
    assert r.views[0].nonempty == 40 and r.views[0].ranges[1] == (64, 128)
    assert r.batch_invariant is False


def test_bad_inputs():
    with pytest.raises(ConfigError):
        det.analyze(BASE, H200, seq_len=0)
    with pytest.raises(ConfigError):
        det.analyze(BASE, H200, seq_len=10, batches=(0,))


def test_cli_table_and_json():
    r = runner.invoke(app, ["determinism", "-m", "llama3-8b", "-s", "2560"], env=ENV)
    assert r.exit_code == 0, r.output
    assert "Batch invariance" in r.output and "Deterministic switches on" in r.output
    r = runner.invoke(app, ["determinism", "-m", "llama3-70b", "--tp", "8", "-s", "8192", "--batches", "1,64,200",
                            "--json"], env=ENV)
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert [p["name"] for p in data["policies"]] == list(POLICY_NAMES)
    by = {p["name"]: p for p in data["policies"]}
    assert by["vllm"]["batch_invariant"] is False  # threshold 128: 3D at 1 and 64, 2D at 200
    assert all(s["batch_invariant"] for s in data["deterministic_switches"])


@pytest.mark.parametrize(
    "args, message",
    [(("--batches", "0,4"), "positive"), (("--others", "0"), "--others must be"), (("--seq-lens", "100,200"), "--others"),
     (("-p", "bogus"), "unknown policy"), (("--batches", "x"), "not an integer")],
)
def test_cli_bad_input(args, message):
    r = runner.invoke(app, ["determinism", *args], env=ENV)
    assert r.exit_code != 0 and "Error:" in r.output and message in r.output, r.output
    assert "Traceback" not in r.output
