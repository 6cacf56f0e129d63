"""CLI: grid, models, gpus, explain — output, --json contract, --help, bad input (typer CliRunner)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from decodecalc.cli import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def grid_json(*args: str) -> dict:
    r = invoke("grid", "--json", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_grid_table_llama3_8b_tp8():
    r = invoke("grid", "--model", "llama3-8b", "--tp", "8")
    assert r.exit_code == 0, r.output
    assert "vLLM 0.34.0 Triton unified" in r.stdout and "SGLang 0.5.23 Triton decode" in r.stdout
    assert "(1, 1, 16) = 16" in r.stdout and "S* = 132" in r.stdout


def test_grid_json_contract():
    d = grid_json("--model", "llama3-8b", "--batch", "1", "--seq-len", "2560")
    assert set(d) >= {"model", "gpu", "tp", "systems"}
    v, s = d["systems"]["vllm"], d["systems"]["sglang"]
    for key in ("use_3d", "grid", "reduce_grid", "block_m", "block_q", "tile_size", "seq_threshold_3d",
                "num_segments", "active_segments", "reasons_2d", "cuda_graph"):
        assert key in v, key
    for key in ("grid", "stage2_grid", "max_kv_splits", "num_kv_splits", "nonempty_splits"):
        assert key in s, key
    for sys_ in (v, s):
        for key in ("s_star", "sm_coverage", "kv_bytes_per_layer", "partial_state_bytes_per_layer",
                    "partial_state_bytes_used_per_layer", "scratch_bytes", "arithmetic_intensity", "roofline_time_s"):
            assert key in sys_, key
    assert v["grid"] == [1, 8, 16] and v["reduce_grid"] == [1, 32] and v["reasons_2d"] == []
    assert v["cuda_graph"]["num_reqs_padded"] == 1 and v["cuda_graph"]["grid"] == [1, 8, 16]
    assert s["grid"] == [1, 8, 8] and s["num_kv_splits"] == [8] and s["nonempty_splits"] == [8]
    assert d["model"]["name"] == "llama3-8b" and d["gpu"]["num_sms"] == 132 and d["tp"] == 1


def test_grid_json_2d_reduce_null_and_eager_cuda_graph_null():
    d = grid_json("--model", "llama3-8b", "--batch", "64", "--no-cuda-graph", "--system", "vllm")
    v = d["systems"]["vllm"]
    assert v["use_3d"] is False and v["reduce_grid"] is None and v["cuda_graph"] is None
    assert v["reasons_2d"] and "sglang" not in d["systems"]


def test_grid_padded_replay_differs():
    d = grid_json("--model", "llama3-8b", "--batch", "13")
    v = d["systems"]["vllm"]
    assert v["grid"] == [16, 8, 16] and v["cuda_graph"]["grid"] == [20, 8, 16]
    assert v["cuda_graph"]["num_reqs_padded"] == 16 and v["cuda_graph"]["num_tokens_padded"] == 16


def test_grid_ragged_and_query_lens_and_spec():
    d = grid_json("--model", "llama3-70b", "--tp", "8", "--seq-lens", "512,4096,131072")
    assert d["systems"]["vllm"]["active_segments"] == [16, 16, 16]
    assert len(d["systems"]["sglang"]["num_kv_splits"]) == 3
    d = grid_json("--model", "llama3-8b", "--batch", "2", "--num-speculative-tokens", "3", "--system", "vllm")
    assert d["workload"]["query_lens"] == [4, 4] and d["systems"]["vllm"]["use_3d"]
    d = grid_json("--model", "llama3-8b", "--seq-lens", "100,2000", "--query-lens", "1,50")
    assert "error" in d["systems"]["sglang"] and not d["systems"]["vllm"]["use_3d"]


def test_grid_output_file_atomic(tmp_path):
    out = tmp_path / "g.json"
    r = invoke("grid", "--model", "llama3-8b", "-o", str(out))
    assert r.exit_code == 0 and json.loads(out.read_text())["systems"]["vllm"]["grid"] == [1, 8, 16]
    assert [p.name for p in tmp_path.iterdir()] == ["g.json"]


def test_grid_explain_shows_formula_and_source():
    r = invoke("grid", "--model", "llama3-8b", "--explain")
    assert r.exit_code == 0
    assert "ceil(N_SM / G_2D)" in r.stdout and "triton_unified_attention.py" in r.stdout
    assert "metadata.py" in r.stdout  # SGLang's split-count kernel


def test_explain_seven_steps():
    r = invoke("explain", "--model", "llama3-8b")
    assert r.exit_code == 0
    for s in ("1. TritonAttentionMetadataBuilder.build()", "reduce_segments[(1, 32)]", "tiles_per_segment = cdiv(2560, 16 * 16) = 10",
              "block 0 scans keys 0-159, block 15 scans 2400-2559", "128 + 32 thread blocks", "336 MB"):
        assert s in r.stdout, s


def test_models_and_gpus():
    r = invoke("models")
    assert r.exit_code == 0 and "llama3-8b" in r.stdout and "deepseek-v3" in r.stdout
    d = json.loads(invoke("gpus", "--json").stdout)
    assert {g["name"] for g in d} >= {"h100-sxm", "h200", "mi300x", "b200"}


@pytest.mark.parametrize("args,needle", [
    (["--model", "llama-3-8b"], "unknown model 'llama-3-8b'. Did you mean"),
    (["--gpu", "h300"], "unknown GPU 'h300'"),
    (["--model", "llama3-8b", "--tp", "3"], "not divisible by --tp 3"),
    (["--model", "qwen2.5-7b", "--tp", "7"], "4 KV heads; --tp 7 exceeds it but is not a multiple"),
    (["--batch", "0"], "--batch must be a positive integer, got 0"),
    (["--seq-len", "-5"], "must be a positive integer, got -5"),
    (["--batch", "3", "--seq-lens", "1,2"], "--seq-lens has 2 values but --batch is 3"),
    (["--seq-lens", "1,x"], "'x' is not an integer"),
    (["--block-size", "24"], "MultipleOf(16)"),
    (["--model", "deepseek-v3", "--tp", "8", "--system", "vllm"], "MLA"),
    (["--max-kv-splits", "0"], "--max-kv-splits must be a positive integer"),
    (["--kernel-block-size", "32", "--block-size", "48"], "must divide"),
])
def test_grid_bad_input(args, needle):
    r = invoke("grid", *args)
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    err = r.stderr
    assert err.startswith("Error: ") and needle in err and err.count("\n") == 1, err


@pytest.mark.parametrize("args, choices", [
    (["--kv-cache-dtype", "int3"], ("auto", "fp8_e4m3", "fp8_e5m2")),
    (["--system", "trtllm"], ("vllm", "sglang")),
    (["--vllm-version", "0.9"], ("0.33.0", "0.14.0", "0.11.0")),
    (["--layer", "local"], ("global", "sliding")),
    (["--cudagraph-mode", "half"], ("FULL_AND_PIECEWISE", "PIECEWISE")),
    (["--dtype", "int8"], ("bfloat16", "float32")),
])
def test_grid_bad_choice_exits_2_listing_choices(args, choices):
    """Choices are enums: a bad one is a usage error (exit 2, like typer's own), naming the valid values."""
    r = invoke("grid", *args)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and args[0] in r.output
    assert all(c.lower() in r.output.lower() for c in choices), r.output


def test_choices_are_listed_in_help():
    r = invoke("grid", "--help")
    assert r.exit_code == 0
    for c in ("fp8_e5m2", "full_decode_only", "0.11.0", "sliding"):
        assert c in r.output.lower(), c


def test_cli_enums_match_the_core():
    """The CLI's choice lists are the core's: one list each (a new dtype or vLLM version shows in --help)."""
    from decodecalc.commands import options as o
    from decodecalc.inputs import LAYERS
    from decodecalc.launchers.vllm_cudagraphs import CUDAGRAPH_MODES
    from decodecalc.launchers.vllm_unified import VERSIONS
    from decodecalc.reports.grid import SYSTEMS
    from decodecalc.reports.recommend import KERNELS
    from decodecalc.workload import DTYPE_BYTES

    assert {e.value for e in o.KvDtype} == {"auto", *DTYPE_BYTES}
    assert {e.value for e in o.Dtype} == {k for k in DTYPE_BYTES if not k.startswith("fp8")}
    assert tuple(e.value for e in o.VllmVersion) == VERSIONS
    assert tuple(e.value for e in o.CudagraphMode) == CUDAGRAPH_MODES
    assert tuple(e.value for e in o.Layer) == LAYERS
    assert tuple(e.value for e in o.System) == SYSTEMS == KERNELS


def test_cudagraph_mode_is_case_insensitive():
    a = grid_json("--cudagraph-mode", "piecewise", "--system", "vllm")
    b = grid_json("--cudagraph-mode", "PIECEWISE", "--system", "vllm")
    assert a == b and a["systems"]["vllm"]["cudagraph_mode"] == "PIECEWISE"


def test_malformed_model_yaml_names_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnum_layers: [\n")
    r = invoke("grid", "--model", str(bad))
    assert r.exit_code == 1 and "bad.yaml" in r.stderr and "malformed YAML" in r.stderr


def test_mla_default_systems_shows_sglang_and_reason():
    d = grid_json("--model", "deepseek-v3", "--tp", "8")
    assert "MLA" in d["systems"]["vllm"]["error"] and d["systems"]["sglang"]["grid"][1] == 1


@pytest.mark.parametrize("cmd", ["grid", "models", "gpus", "explain"])
def test_help(cmd):
    r = invoke(cmd, "--help")
    assert r.exit_code == 0 and "Usage" in r.stdout


def test_python_m_and_no_torch_import():
    code = ("import sys, runpy; sys.argv=['decodecalc','grid','--model','llama3-8b','--json'];\n"
            "try:\n    runpy.run_module('decodecalc', run_name='__main__')\nexcept SystemExit as e:\n    assert not e.code\n"
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules, 'heavy import'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["systems"]["vllm"]["grid"] == [1, 8, 16]


@pytest.mark.parametrize("kw", [dict(batch=1), dict(batch=64), dict(seq_lens=(100, 5000)),
                                dict(batch=2, num_speculative_tokens=3)])
def test_every_explained_number_names_its_inputs_and_source(kw):
    """House style: each Derived's inputs appear in its formula, and each has a source."""
    from decodecalc.reports.grid import grid_report
    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.specs.models import resolve_model
    from decodecalc.workload import make_workload

    r = grid_report(make_workload(resolve_model("llama3-8b"), **kw), resolve_gpu("h200"))
    for s in r.systems:
        for d in s.explain:
            assert d.source and d.formula, d.name
            for k in d.inputs:
                assert k in d.formula, (s.name, d.name, k, d.formula)
