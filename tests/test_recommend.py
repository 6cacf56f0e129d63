"""`decodecalc recommend` and `decodecalc calibrate`: the JSON contract, candidates, bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from decodecalc.cli import app
from decodecalc.errors import ConfigError
from decodecalc.reports.recommend import Choice, choose, parse_candidates, recommend
from helpers import H200, model, work

runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_user_profiles(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("NO_COLOR", "1")


def _json(args: list[str]) -> dict:
    res = runner.invoke(app, ["recommend", "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_json_contract_names():
    data = _json(["-m", "llama3-70b", "--tp", "8", "-b", "1", "-s", "131072"])
    assert set(data["kernels"]) == {"vllm", "sglang"}
    for k, kr in data["kernels"].items():
        assert kr["candidates"], k
        for c in kr["candidates"]:
            assert isinstance(c["splits"], int) and c["splits"] >= 1
            assert c["predicted_time_s"] > 0
        for key in ("recommended", "default"):
            assert isinstance(kr[key]["splits"], int) and kr[key]["predicted_time_s"] > 0
        best = min(c["predicted_time_s"] for c in kr["candidates"])
        rec = kr["recommended"]
        assert rec["splits"] in [c["splits"] for c in kr["candidates"]]
        assert rec["predicted_time_s"] <= best * 1.10  # ranked by the occupancy-robust score, near the fastest
        assert kr["speedup_vs_default"] == pytest.approx(kr["default"]["predicted_time_s"] / rec["predicted_time_s"])
        assert kr["apply"]
    assert data["calibrated"] is True and data["warning"] is None
    assert [c["splits"] for c in data["kernels"]["vllm"]["candidates"]] == [1, 2, 4, 8, 16, 32, 64, 128]
    assert data["kernels"]["vllm"]["default"]["splits"] == 16  # vLLM 0.33's NUM_PAR_SOFTMAX_SEGMENTS
    assert data["kernels"]["sglang"]["default"]["splits"] == 8  # adaptive, max_kv_splits 8


def test_long_context_batch_1_wants_many_splits():
    # measured on the H200 (shared data): 128 segments is vLLM's best split at 70B-TP8, B=1, 128K (7.45x)
    data = _json(["-m", "llama3-70b", "--tp", "8", "-b", "1", "-s", "131072"])
    v = data["kernels"]["vllm"]
    assert v["recommended"]["splits"] >= 64
    assert v["speedup_vs_default"] > 3
    assert any("NUM_PAR_SOFTMAX_SEGMENTS" in a for a in v["apply"])
    s = data["kernels"]["sglang"]
    assert s["recommended"]["splits"] >= 32
    assert any("--triton-attention-num-kv-splits" in a for a in s["apply"])


def test_large_batch_prefers_vllm_2d():
    # measured: Llama-3-8B B=64 L=8192, vLLM's 2D kernel is within 1% of the best variant
    data = _json(["-m", "llama3-8b", "-b", "64", "-s", "8192", "--kernel", "vllm"])
    assert set(data["kernels"]) == {"vllm"}
    assert data["kernels"]["vllm"]["recommended"]["splits"] == 1
    assert data["kernels"]["vllm"]["recommended"]["mode"] == "2d"


def test_candidates_restrict():
    data = _json(["-m", "llama3-8b", "-b", "4", "-s", "8192", "--candidates", "vllm=1,16", "--candidates", "sglang=4"])
    assert [c["splits"] for c in data["kernels"]["vllm"]["candidates"]] == [1, 16]
    assert [c["splits"] for c in data["kernels"]["sglang"]["candidates"]] == [4]
    assert data["kernels"]["sglang"]["recommended"]["splits"] == 4
    data = _json(["-m", "llama3-8b", "-b", "4", "--candidates", "2,8"])
    assert [c["splits"] for c in data["kernels"]["sglang"]["candidates"]] == [2, 8]


@pytest.mark.parametrize("bad, msg", [("0,4", "must be >= 1"), ("x", "not an integer"), ("trt=4", "unknown kernel")])
def test_bad_candidates(bad, msg):
    res = runner.invoke(app, ["recommend", "-m", "llama3-8b", "--candidates", bad])
    assert res.exit_code == 1
    assert "Error:" in res.output and msg in res.output


def test_uncalibrated_gpu_warns_but_predicts():
    res = runner.invoke(app, ["recommend", "-m", "llama3-8b", "-b", "4", "--gpu", "a100-80gb", "--json"])
    assert res.exit_code == 0
    data = json.loads(res.stdout)
    assert data["calibrated"] is False and "uncalibrated" in data["warning"]
    assert "Warning:" in res.stderr
    res = runner.invoke(app, ["recommend", "-m", "llama3-8b", "--gpu", "a100-80gb"])
    assert res.exit_code == 0 and "UNCALIBRATED" in res.stdout and "Warning:" in res.stderr


def test_bad_profile_file_is_named(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("gpu: [unclosed\n")
    res = runner.invoke(app, ["recommend", "-m", "llama3-8b", "--profile", str(f)])
    assert res.exit_code == 1 and "Error:" in res.output and str(f) in res.output
    from decodecalc.timemodel import dump_profile, packaged_profile

    f.write_text(dump_profile(packaged_profile("h200")))
    res = runner.invoke(app, ["recommend", "-m", "llama3-8b", "--gpu", "h100-sxm", "--profile", str(f)])
    assert res.exit_code == 1 and "measured on 'h200'" in res.output and str(f) in res.output


def test_table_output():
    res = runner.invoke(app, ["recommend", "-m", "llama3-8b", "-b", "1", "-s", "32768"])
    assert res.exit_code == 0, res.output
    assert "how to apply" in res.stdout and "S=128" in res.stdout


def test_output_file(tmp_path):
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["recommend", "-m", "llama3-8b", "-o", str(out)])
    assert res.exit_code == 0
    assert "kernels" in json.loads(out.read_text())


def test_calibrate_without_gpu_is_a_clear_error():
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():  # pragma: no cover - the GPU machine
        pytest.skip("a GPU is present")
    res = runner.invoke(app, ["calibrate", "--gpu", "h200"])
    assert res.exit_code == 1
    assert "Error:" in res.output and "CUDA GPU" in res.output


def test_recommend_api_and_choose():
    w = work(model(8, 1), batch=1, seq_len=8192)
    rec = recommend(w, H200, kernels=("vllm",), candidates={"vllm": (1, 16, 64)})
    assert rec.best_kernel == "vllm"
    assert [c.splits for c in rec.kernels["vllm"].candidates] == [1, 16, 64]
    cs = [Choice(splits=s, mode="3d", predicted_time_s=t) for s, t in ((4, 1.0), (8, 0.995), (16, 2.0))]
    assert choose([Choice(splits=4, mode="3d", predicted_time_s=1.0, score_s=3.0),
                   Choice(splits=2, mode="3d", predicted_time_s=1.1, score_s=1.2)]).splits == 2
    assert choose(cs, tie_fraction=0.0).splits == 8
    assert choose(cs, tie_fraction=0.01).splits == 8  # within 1%: the most splits
    assert choose(cs + [Choice(splits=32, mode="3d", predicted_time_s=1.04)], tie_fraction=0.05).splits == 32
    with pytest.raises(ConfigError):
        parse_candidates(["vllm="])


def test_mha_recommendation_from_a_profile_without_the_mha_family_is_uncalibrated(tmp_path):
    """recommend's 'calibrated' follows the kernel families the launches actually use."""
    import yaml

    from decodecalc.timemodel import dump_profile, load_profile_file, packaged_profile

    data = yaml.safe_load(dump_profile(packaged_profile("h200")))
    data["families"].pop("sglang_mha_stage1")
    f = tmp_path / "h200.yaml"
    f.write_text(yaml.safe_dump(data))
    old = load_profile_file(f, expect_gpu="h200")
    mha = recommend(work(model(32, 32), batch=4, seq_len=2000), H200, profile=old)
    assert mha.kernels["sglang"].calibrated is False and mha.kernels["vllm"].calibrated is True
    gqa = recommend(work(model(32, 8), batch=4, seq_len=2000), H200, profile=old)
    assert gqa.kernels["sglang"].calibrated is True
