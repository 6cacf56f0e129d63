"""Each engine's default attention backend (launchers/engine_defaults.py) and the kernels its FlashInfer backend
decodes with (launchers/engine_select.py), against a table of (engine, architecture, model) cases read off the engines'
selection code: vLLM 0.33.0 / 0.34.0 ``vllm/platforms/cuda.py`` ``_get_backend_priorities`` with each backend's
``validate_configuration``, ``vllm/v1/attention/backends/flashinfer.py`` L993-1056 and ``vllm/utils/flashinfer.py``
L675-721; SGLang 0.5.23 ``srt/arg_groups/model_override_base.py`` L277-351 and its model overrides; TensorRT-LLM
1.2.0rc2 ``decoderXQAImplJIT.cpp`` L74-131. The table was written by reading those files (not by running them)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from decodecalc.cli import app
from decodecalc.errors import ConfigError
from decodecalc.launchers.engine_defaults import default_backend
from decodecalc.launchers.names import Backend, Engine
from decodecalc.launchers.registry import PolicyOptions
from decodecalc.launchers.vllm_unified import VllmSettings
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.workload import make_workload


def _w(model: str, kv: str = "auto"):
    return make_workload(resolve_model(model), tp=1, batch=4, seq_len=1024, kv_cache_dtype=kv)


# (engine, gpu, model, kv cache, cubins, batch invariant) -> (the engine's backend name, decodecalc's kernels)
CASES = [
    ("vllm", "a100", "llama3-8b", "auto", True, False, "FLASH_ATTN", Backend.FA2),  # FA2 below SM90
    ("vllm", "l40s", "llama3-8b", "fp8", True, False, "FLASHINFER", Backend.FLASHINFER_TC),  # FA2 reads no fp8; no XQA on SM89
    ("vllm", "h200", "llama3-8b", "auto", True, False, "FLASH_ATTN", Backend.FA3),
    ("vllm", "h100", "llama3-8b", "fp8", True, False, "FLASH_ATTN", Backend.FA3),  # FA3 reads e4m3
    ("vllm", "h200", "llama3-8b", "fp8_e5m2", True, False, "FLASHINFER", None),  # XQA reads no e5m2: an error
    ("vllm", "h200", "llama3-8b", "fp8_e5m2", False, False, "FLASHINFER", Backend.FLASHINFER_TC),
    ("vllm", "b200", "llama3-8b", "auto", True, False, "FLASHINFER", Backend.TRTLLM_GEN),
    ("vllm", "b200", "llama3-8b", "auto", False, False, "FLASHINFER", Backend.FLASHINFER_TC),
    ("vllm", "b200", "phi-3-mini", "auto", True, False, "FLASH_ATTN", None),  # head 96: FlashInfer refuses; FA4
    ("vllm", "b200", "llama3-8b", "auto", True, True, "FLASH_ATTN", Backend.FA2),  # batch invariant: FA2
    ("vllm", "a100", "gpt-oss-20b", "auto", True, False, "TRITON_ATTN", Backend.VLLM),  # sinks: no FA2, no FI
    ("vllm", "h200", "gpt-oss-20b", "auto", True, False, "FLASH_ATTN", Backend.FA3),
    ("vllm", "h200", "deepseek-v3", "auto", True, False, "FLASH_ATTN_MLA", None),
    ("vllm", "h200", "deepseek-v3", "fp8", True, False, "FLASHMLA", Backend.FLASHMLA),
    ("vllm", "b200", "deepseek-v3", "auto", True, False, "FLASHINFER_MLA", None),
    ("vllm", "b200", "deepseek-v3", "auto", True, True, "TRITON_MLA", Backend.TRITON_MLA),
    ("vllm", "a100", "deepseek-v2-lite", "auto", True, False, "TRITON_MLA", Backend.TRITON_MLA),
    ("sglang", "h200", "llama3-8b", "auto", True, False, "fa3", Backend.FA3),
    ("sglang", "h200", "llama3-8b", "fp8_e5m2", True, False, "triton", Backend.SGLANG),  # fa3 + e5m2 -> triton
    ("sglang", "b200", "llama3-8b", "auto", True, False, "trtllm_mha", Backend.TRTLLM_GEN),
    ("sglang", "a100", "llama3-8b", "auto", True, False, "flashinfer", Backend.FLASHINFER_TC),  # g 4: tensor cores
    ("sglang", "a100", "phi-3-mini", "auto", True, False, "flashinfer", Backend.FLASHINFER),  # g 1: CUDA cores
    ("sglang", "a100", "gpt-oss-20b", "auto", True, False, "triton", Backend.SGLANG),  # gpt-oss override
    ("sglang", "h200", "gpt-oss-20b", "auto", True, False, "fa3", Backend.FA3),
    ("sglang", "h200", "deepseek-v3", "auto", True, False, "fa3", None),
    ("sglang", "b200", "deepseek-v3", "auto", True, False, "trtllm_mla", None),
    ("sglang", "b200", "deepseek-v2-lite", "auto", True, False, "flashinfer", None),
    ("sglang", "a100", "deepseek-v3", "auto", True, False, "triton", Backend.SGLANG),
    ("trtllm", "h200", "llama3-8b", "auto", True, False, "xqa", Backend.TRTLLM_XQA),
    ("trtllm", "h200", "phi-3-mini", "auto", True, False, "mmha", Backend.TRTLLM_MMHA),  # plain MHA
]


@pytest.mark.parametrize("engine, gpu, model, kv, cubins, invariant, name, backend", CASES)
def test_default_backend(engine, gpu, model, kv, cubins, invariant, name, backend):
    opts = PolicyOptions(vllm=VllmSettings(batch_invariant=invariant), cubins=cubins)
    w = _w(model, kv)
    if engine == "vllm" and name == "FLASHINFER" and backend is None:
        with pytest.raises(Exception, match="XQA"):
            default_backend(engine, w, resolve_gpu(gpu), opts)
        return
    d = default_backend(engine, w, resolve_gpu(gpu), opts)
    assert (d.name, d.backend) == (name, backend)
    assert d.source and d.why


def test_skipped_backends_say_why():
    d = default_backend(Engine.VLLM, _w("gpt-oss-20b"), resolve_gpu("a100"), PolicyOptions())
    assert [s.name for s in d.skipped] == ["FLASH_ATTN", "FLASHINFER"]
    assert "sinks" in d.skipped[0].reason and "L" in d.skipped[0].source


def test_versions_are_checked():
    w, g = _w("llama3-8b"), resolve_gpu("h200")
    assert default_backend("vllm", w, g).version == "0.34.0"  # the newest modeled is the default
    assert default_backend("vllm", w, g, version="0.33.0").version == "0.33.0"
    with pytest.raises(ConfigError, match="0.34.0, 0.33.0"):
        default_backend("vllm", w, g, version="0.20.0")


def test_vllm_033_refuses_windowed_mla():
    m = dataclasses.replace(resolve_model("deepseek-v2-lite"), sliding_window=4096)
    w = make_workload(m, tp=1, batch=1, seq_len=512)
    with pytest.raises(ConfigError, match="0.34.0"):
        default_backend("vllm", w, resolve_gpu("a100"), version="0.33.0")
    assert default_backend("vllm", w, resolve_gpu("a100"), version="0.34.0").name == "TRITON_MLA"


def test_grid_and_compare_show_the_defaults():
    r = CliRunner().invoke(app, ["grid", "-m", "llama3-70b", "--tp", "8", "-b", "1", "-s", "8192"],
                           env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "vLLM 0.34.0: FLASH_ATTN (FA3)" in r.output and "TensorRT-LLM 1.2.0rc2: xqa" in r.output
    r = CliRunner().invoke(app, ["compare", "-m", "llama3-70b", "--tp", "8", "-b", "1", "-s", "8192", "--json",
                                 "--cubins", "no"])
    assert r.exit_code == 0, r.output
    import json

    data = json.loads(r.output)
    assert {d["engine"]: d["kernel"] for d in data["default_backends"]} == {
        "vllm": "fa3", "sglang": "fa3", "trtllm": "trtllm-xqa"}


def test_max_model_len_sets_xqa_table():
    r = CliRunner().invoke(app, ["compare", "-m", "llama3.1-70b", "--tp", "8", "-b", "1", "-s", "8192", "-p", "xqa",
                                 "--max-model-len", "8192", "--json"])
    assert r.exit_code == 0, r.output
    import json

    row = json.loads(r.output)["policies"][0]
    assert row["grid"][0] == 32
    bad = CliRunner().invoke(app, ["grid", "-m", "llama3-8b", "-s", "8192", "--max-model-len", "100"])
    assert bad.exit_code != 0 and "Error: --max-model-len" in bad.output


def test_kernels_without_sinks_refuse_a_sink_model():
    """gpt-oss adds learned sinks to its softmax: FlashInfer's wrapper and FA2 cannot run it (vLLM skips them for it),
    FA3 and XQA can."""
    from decodecalc.reports.compare import evaluate

    w, g = _w("gpt-oss-20b"), resolve_gpu("h200")
    for name in ("flashinfer", "flashinfer-tc", "fa2"):
        r = evaluate(name, w, g)
        assert not r.applicable and "sinks" in r.reason and " L" in r.reason
    assert evaluate("fa3", w, g).applicable and evaluate("xqa", w, g).applicable


def test_recommend_names_the_defaults_of_its_engines():
    r = CliRunner().invoke(app, ["recommend", "-m", "llama3.1-70b", "--tp", "8", "-b", "1", "-s", "131072", "--json",
                                 "--kernel", "sglang"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)["default_backends"]
    assert [x["engine"] for x in d] == ["sglang"] and d[0]["kernel"] == "fa3" and d[0]["predicted_time_s"] > 0
