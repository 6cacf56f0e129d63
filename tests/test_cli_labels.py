"""Honest labels (issue 11, first hour 2, 3, 5, 6): uncalibrated predictions outside the measured
domain, recommend's tie rule and fastest prediction, sweep -q, escaped error text, 8K/128k input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from decodecalc.cli import app

ROOT = Path(__file__).resolve().parents[1]

runner = CliRunner()
ENV = {"COLUMNS": "80", "NO_COLOR": "1"}


def run(*args: str):
    return runner.invoke(app, list(args), env=ENV)


def js(*args: str) -> dict:
    r = run(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_inside_the_measured_domain_is_calibrated():
    d = js("grid", "-m", "llama3-8b", "--tp", "8")
    for s in d["systems"].values():
        assert s["predicted_calibrated"] is True and "predicted_warnings" not in s
    r = js("recommend", "-m", "llama3-70b", "--tp", "8", "-b", "64", "-s", "8192")
    assert r["calibrated"] is True and r["warning"] is None and r["domain_warnings"] == []


@pytest.mark.parametrize("args, needle", [
    (["--kv-cache-dtype", "fp8", "--system", "vllm"], "KV-cache dtype fp8"),
    (["-m", "gemma-2-9b", "--kv-cache-dtype", "fp8"], "KV-cache dtype fp8"),
    (["-m", "phi-3-mini", "--kv-cache-dtype", "fp8", "--system", "sglang"],
     "KV-cache dtype fp8 at query-group size 1, head size 96: sglang's fp8 fit measured group sizes 2, 3"),
    (["--dtype", "float16"], "dtype float16"),
    (["--num-speculative-tokens", "3", "--system", "vllm"], "4 query tokens per sequence"),
    (["-m", "gemma-2-9b", "--layer", "sliding", "-s", "16384"], "sliding-window layer"),
    (["--sms", "66"], "--sms 66"),
    (["-m", "qwen3-235b-a22b", "--tp", "1", "--system", "vllm"], "query-group size 16"),
    (["--block-size", "64", "--system", "vllm"], "block size 64: the fit measured 16"),
])
def test_grid_outside_the_domain_is_uncalibrated(args, needle):
    d = js("grid", *args)
    for name, s in d["systems"].items():
        if "error" in s:
            continue
        assert s["predicted_calibrated"] is False, name
        assert any(needle in w for w in s["predicted_warnings"]), s["predicted_warnings"]
    r = run("grid", *args)
    assert r.exit_code == 0 and "(uncalibrated)" in r.stdout and needle in " ".join(r.stdout.split())


def test_block_size_is_no_input_of_sglang_and_outside_for_vllm():
    """vLLM at 32-token blocks was timed and its 2D kernel differs from block 16 (benchmarks/measure_kv_formats_h200.py):
    outside the domain; SGLang's Triton backend reads token slots, so no block size takes it outside; FlashInfer was
    captured at block 16 only."""
    for block in ("16", "32", "128"):
        d = js("grid", "--block-size", block)
        assert d["systems"]["sglang"]["predicted_calibrated"] is True
        assert d["systems"]["vllm"]["predicted_calibrated"] is (block == "16")
    c = js("compare", "--block-size", "32")
    fi = next(p for p in c["policies"] if p["name"] == "flashinfer")
    assert fi["predicted_calibrated"] is False and any("block size 32" in w for w in fi["predicted_warnings"])


def test_fp8_is_calibrated_for_sglangs_grouped_kernel_only():
    """SGLang's grouped stage 1 with an fp8 KV cache has its own family (benchmarks/leaveout_fp8.py, validated on
    layouts no fit saw by benchmarks/validate_fp8.py): inside its kernel domain; vLLM's fp8 stays outside, and so do
    SGLang's MHA kernel (group 1) and head size 256, which its fp8 fit did not cover."""
    d = js("grid", "--kv-cache-dtype", "fp8")  # llama3-8b: 32:8, d128
    assert d["systems"]["sglang"]["predicted_calibrated"] is True and "predicted_warnings" not in d["systems"]["sglang"]
    assert d["systems"]["vllm"]["predicted_calibrated"] is False
    assert js("grid", "--kv-cache-dtype", "fp8_e4m3", "--system", "sglang")["systems"]["sglang"]["predicted_calibrated"]
    e5 = js("grid", "--kv-cache-dtype", "fp8_e5m2", "--system", "sglang")["systems"]["sglang"]
    assert e5["predicted_calibrated"] is False and any("fp8_e5m2" in w for w in e5["predicted_warnings"])
    g = js("grid", "-m", "gemma-2-9b", "--kv-cache-dtype", "fp8", "--system", "sglang")["systems"]["sglang"]
    assert g["predicted_calibrated"] is False and any("head size 256" in w for w in g["predicted_warnings"])


def test_recommend_fp8_marks_each_kernel_by_its_own_domain():
    d = js("recommend", "--kv-cache-dtype", "fp8")
    assert d["calibrated"] is False and "fp8" in d["warning"] and d["domain_warnings"]
    assert d["kernels"]["vllm"]["calibrated"] is False and d["kernels"]["sglang"]["calibrated"] is True
    assert all(w.startswith("vllm: ") for w in d["domain_warnings"])
    r = run("recommend", "--kv-cache-dtype", "fp8")
    assert "Warning:" in r.stderr and "UNCALIBRATED (calibrated for sglang only)" in " ".join(r.stdout.split())
    both = js("recommend", "--sms", "66")  # the same reason for both kernels: one shared list, unprefixed
    assert both["domain_warnings"] and not any(w.startswith(("vllm: ", "sglang: ")) for w in both["domain_warnings"])
    assert all(k["calibrated"] is False for k in both["kernels"].values())


def test_tune_marks_an_engine_outside_its_domain(tmp_path):
    """tune checks each engine's kernel against its measured domain (before: only the families), and compares no
    backend outside its own: FlashInfer and FA3 on fp8 only at the head layouts their fp8 fit measured."""
    args = ["--requests", str(ROOT / "examples" / "traces" / "azure-code-2023.csv"), "-m", "llama3.1-70b", "--tp", "8",
            "--heuristics", "none"]
    d = js("tune", *args, "--kv-cache-dtype", "fp8")
    assert d["engines"]["vllm"]["calibrated"] is False and "KV-cache dtype fp8" in d["engines"]["vllm"]["domain_warnings"][0]
    assert d["engines"]["sglang"]["calibrated"] is True and d["engines"]["sglang"]["domain_warnings"] == []
    # FlashInfer's fp8 paths and FA3 have fp8 families fitted and judged on left-out head layouts
    # (benchmarks/fit_backends_fp8_h200.py): compared with a total where the family met the fit's goals, else the note
    # names the family that missed
    assert any("total_s" in b for b in d["backends"])
    # (vLLM's FlashInfer backend decodes with XQA on the H200, which has no H200 timings)
    assert all("total_s" in b or "no calibrated time for its fa3_fwd_fp8" in b["note"]
               or "no calibrated time for its flashinfer_decode_fp8" in b["note"]
               or b["kernel"].startswith("xqa") for b in d["backends"]), d["backends"]
    plain = js("tune", *args)
    assert all(e["calibrated"] and e["domain_warnings"] == [] for e in plain["engines"].values())
    assert any("total_s" in b for b in plain["backends"])
    r = run("tune", *args, "--kv-cache-dtype", "fp8")
    assert "uncalibrated: outside the profile's measured domain" in " ".join(r.stdout.split())
    # a head layout the fp8 fit never ran (g 10) stays outside the backends' fp8 domain
    cfg = json.loads((ROOT / "examples" / "hf-config" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "num_attention_heads": 40, "hidden_size": 5120}))
    odd = js("tune", "--requests", str(ROOT / "examples" / "traces" / "azure-code-2023.csv"), "-m",
             str(tmp_path / "config.json"), "--heuristics", "none", "--kv-cache-dtype", "fp8")
    assert any("outside the profile's measured domain" in (b.get("note") or "") for b in odd["backends"])


def test_compare_marks_uncalibrated_predictions():
    d = js("compare", "--kv-cache-dtype", "fp8")
    vllm = next(p for p in d["policies"] if p["name"] == "vllm")
    assert vllm["predicted_calibrated"] is False and vllm["predicted_warnings"]


def test_recommend_shows_tie_rule_fastest_and_margin():
    """Issue 11's example: S=32 recommended over S=8 (faster by prediction) and a 0.95x 'speedup'."""
    d = js("recommend", "-m", "llama3-70b", "--tp", "8", "-b", "64", "-s", "8192")
    v = d["kernels"]["vllm"]
    fastest = min(v["candidates"], key=lambda c: c["predicted_time_s"])
    assert v["fastest_predicted"] == fastest and "recommended" in v
    assert v["margin_vs_fastest"] == pytest.approx(v["recommended"]["predicted_time_s"]
                                                   / fastest["predicted_time_s"] - 1)
    r = run("recommend", "-m", "llama3-70b", "--tp", "8", "-b", "64", "-s", "8192")
    text = " ".join(r.stdout.split())
    assert "Tie rule:" in text and "most splits" in text
    if v["recommended"]["splits"] != fastest["splits"]:
        assert f"the fastest prediction is {fastest['label']}" in text
    if v["speedup_vs_default"] < 1:
        assert "(tie)" in text and "the engine default is predicted" in text


def test_recommend_json_has_fastest_beside_recommended():
    d = js("recommend", "-m", "llama3-8b", "-b", "1", "-s", "32768")
    keys = list(d["kernels"]["vllm"])
    assert keys.index("fastest_predicted") == keys.index("recommended") + 1


def test_sweep_quiet_prints_the_result():
    r = run("sweep", "-b", "1:4", "-s", "1K:8K:x2", "-q")
    assert r.exit_code == 0 and "vllm: region" in r.stdout and r.stderr == ""


def test_sweep_accepts_the_labels_it_prints():
    a = run("sweep", "-b", "1", "-s", "8k,128K", "--format", "csv", "-q")
    b = run("sweep", "-b", "1", "-s", "8192,131072", "--format", "csv", "-q")
    assert a.exit_code == 0 and a.stdout == b.stdout and "131072" in a.stdout


def test_error_text_is_not_rich_markup_or_emoji():
    r = run("sweep", "-s", "1K:128K:y2", "-b", "1", "-q")
    assert r.exit_code == 1 and "A:B:STEP" in r.stderr and "\N{NEGATIVE SQUARED LATIN CAPITAL LETTER B}" not in r.stderr
    r = run("grid", "--model", "[bold]x:b:[/]")
    assert r.exit_code == 1 and "[bold]x:b:[/]" in r.stderr


def test_another_gpu_says_why_it_is_uncalibrated():
    d = js("grid", "--gpu", "b200")
    for s in d["systems"].values():
        assert s["predicted_calibrated"] is False and "no calibrated time profile for b200" in s["predicted_warnings"][0]


def test_recommend_refuses_sliding_layers_it_does_not_model():
    r = run("recommend", "-m", "gemma-2-9b", "--layer", "sliding")
    assert r.exit_code == 1 and "global" in r.stderr and "Traceback" not in r.output


def test_sglang_sliding_layer_says_what_it_reads():
    r = run("grid", "-m", "gemma-2-9b", "--layer", "sliding", "-s", "16384", "--system", "sglang")
    d = js("grid", "-m", "gemma-2-9b", "--layer", "sliding", "-s", "16384", "--system", "sglang")
    window = d["systems"]["sglang"]["launches"] and 4095  # gemma-2-9b: sliding_window 4096, SGLang reads W - 1
    text = " ".join(r.stdout.split())
    assert f"min(L, W - 1) = {window} keys" in text and "num_kv_splits of its full length" in text


@pytest.mark.parametrize("command", ["grid", "compare", "cudagraphs", "determinism", "explain", "recommend"])
def test_rich_markup_in_a_model_name_prints_as_written(tmp_path, command):
    model = tmp_path / "m.yaml"
    model.write_text('name: "[red]odd:b:[/red]"\nnum_layers: 2\nnum_attention_heads: 8\nnum_key_value_heads: 2\n'
                     "head_dim: 128\ndtype: bfloat16\n")
    r = runner.invoke(app, [command, "-m", str(model)], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    assert "[red]odd:b:[/red]" in r.output
