"""Sweep engine: the closed forms equal the full launch plans; ranges are validated before any work."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decodecalc.launchers.registry import POLICY_NAMES
from decodecalc.reports import compare as pol
from decodecalc.errors import ConfigError
from decodecalc.launchers.sglang_triton import SglangSettings, plan_sglang
from decodecalc.launchers.vllm_unified import VllmSettings, plan_vllm
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.reports.sweep import METRICS, SweepSpec, parse_range, run_sweep
from decodecalc.workload import make_workload

H200 = resolve_gpu("h200")
MODELS = {n: resolve_model(n) for n in ("llama3-8b", "llama3-70b", "qwen3-8b", "deepseek-v3", "phi-3-mini")}


def spec(model="llama3-8b", tp=1, policies=("vllm", "sglang"), batches=(1, 2, 13, 16, 17, 64),
         lens=(1, 100, 256, 2560, 2561, 131072), gpu=H200):
    return SweepSpec(models=(MODELS[model],), tps=(tp,), gpus=(gpu,), policies=policies, batches=batches,
                     seq_lens=lens)


@pytest.mark.parametrize(
    "text, expected",
    [("1:4", (1, 2, 3, 4)), ("1-4", (1, 2, 3, 4)), ("2:10:4", (2, 6, 10)), ("512:4096:x2", (512, 1024, 2048, 4096)),
     ("8,1,8,3", (1, 3, 8)), ("1:3,16", (1, 2, 3, 16))],
)
def test_parse_range(text, expected):
    assert parse_range(text, "--batch", upper=1000000) == expected


@pytest.mark.parametrize(
    "text, message",
    [("", "is empty"), ("10:1", "end 1 < start 10"), ("0:5", "positive"), ("1:99999999", "over the supported"),
     ("a:b", "is not N"), ("1:8:x1", "factor"), ("1:8:0", "step")],
)
def test_parse_range_errors(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_range(text, "--seq-len", upper=16 * 1024 * 1024)


def test_too_many_points_refused_before_work():
    big = SweepSpec(models=(MODELS["llama3-8b"],), tps=(1,), gpus=(H200,), policies=POLICY_NAMES,
                    batches=tuple(range(1, 65537)), seq_lens=tuple(range(1, 100)))
    with pytest.raises(ConfigError, match="points"):
        run_sweep(big)


def _check_point(result, model_name, tp, b, L):
    w = make_workload(MODELS[model_name], tp=tp, batch=b, seq_len=L)
    by = {g.policy: g for g in result.grids}
    g = by["vllm"]
    i, j = g.batches.index(b), g.seq_lens.index(L)
    assert g.applicable is not MODELS[model_name].is_mla
    if g.applicable:
        vp = plan_vllm(w, H200, VllmSettings())
        run = vp.replay.plan if vp.replay is not None else vp.plan
        assert g.values["splits"][i][j] == run.splits[0]
        assert g.values["nonempty_splits"][i][j] == run.nonempty_splits[0]
        assert g.values["tokens_per_split"][i][j] == run.tokens_per_split[0]
        assert g.values["programs"][i][j] == run.main.programs
        assert g.values["working_programs"][i][j] == run.main.working_programs
    sp = plan_sglang(w, H200, SglangSettings())
    g = by["sglang"]
    assert g.values["splits"][i][j] == sp.num_kv_splits[0]
    assert g.values["nonempty_splits"][i][j] == sp.nonempty_splits[0]
    assert g.values["tokens_per_split"][i][j] == sp.kv_len_per_split[0]
    assert g.values["programs"][i][j] == sp.plan.main.programs
    assert g.values["working_programs"][i][j] == sp.plan.main.working_programs


@pytest.mark.parametrize("model, tp", [("llama3-8b", 1), ("llama3-70b", 8), ("phi-3-mini", 1), ("deepseek-v3", 8)])
def test_fast_paths_match_full_plans_grid(model, tp):
    r = run_sweep(spec(model, tp))
    for b in (1, 13, 17, 64):
        for L in (1, 256, 2561, 131072):
            _check_point(r, model, tp, b, L)


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 300), L=st.integers(1, 300_000), model=st.sampled_from(["llama3-8b", "llama3-70b", "qwen3-8b"]))
def test_fast_paths_match_full_plans_random(b, L, model):
    tp = 8 if model == "llama3-70b" else 1
    r = run_sweep(spec(model, tp, batches=(b,), lens=(L,)))
    _check_point(r, model, tp, b, L)


def test_generic_and_flashdecoding_paths_match_planners():
    r = run_sweep(spec(policies=("flashdecoding", "fa3"), batches=(1, 8), lens=(512, 2560)))
    by = {g.policy: g for g in r.grids}
    assert not by["fa3"].fast and by["flashdecoding"].fast
    for b in (1, 8):
        for L in (512, 2560):
            w = make_workload(MODELS["llama3-8b"], batch=b, seq_len=L)
            for name in ("flashdecoding", "fa3"):
                p = pol.evaluate(name, w, H200).plan
                g = by[name]
                i, j = g.batches.index(b), g.seq_lens.index(L)
                assert g.values["splits"][i][j] == p.splits[0]
                assert g.values["working_programs"][i][j] == p.main.working_programs


def test_inapplicable_policy_keeps_reason_and_outputs():
    r = run_sweep(spec("deepseek-v3", 8, policies=("vllm", "flashmla"), batches=(1, 2), lens=(1024,)))
    by = {g.policy: g for g in r.grids}
    assert not by["vllm"].applicable and "MLA" in by["vllm"].reason
    assert by["flashmla"].applicable
    data = json.loads(json.dumps(r.to_json()))
    assert data["metrics"] == list(METRICS)
    csv_text = r.to_csv()
    assert csv_text.count("\n") == 1 + 2  # header + the flashmla points only
    assert ",flashmla,1,1024," in csv_text


def test_vllm_region_cliff_llama8b():
    # section 2.3: unpadded threshold 16 -> 3D up to B = 16, 2D from B = 17 (TILE 32)
    r = run_sweep(spec(policies=("vllm",), batches=(16, 17), lens=(2560,)))
    g = r.grids[0]
    assert [row[0] for row in g.values["region"]] == ["3D", "2D"]


def test_core_modules_import_no_cli_or_plot_libraries():
    # house style section 7: the core never imports typer, rich or matplotlib (plot.py imports it in functions)
    import subprocess
    import sys

    code = ("import sys; import decodecalc.reports.compare, decodecalc.reports.sweep, decodecalc.reports.determinism, decodecalc.plot; "
            "import decodecalc.launchers.flashinfer, decodecalc.launchers.flashmla, decodecalc.launchers.aiter; "
            "bad = [m for m in ('typer', 'rich', 'matplotlib', 'torch', 'numpy') if m in sys.modules]; "
            "print(bad); sys.exit(bool(bad))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize(
    "model, tp, gpu, names",
    [("llama3-8b", 1, "h200", ("fa2", "flashinfer", "flashinfer-tc", "vllm-paged", "fa3")),
     ("llama3-70b", 8, "h200", ("fa2", "flashinfer", "vllm-paged")),
     ("deepseek-v3", 8, "h200", ("flashmla",)),
     ("llama3-8b", 1, "mi300x", ("vllm-rocm", "aiter"))],
)
def test_keyed_paths_match_full_plans(model, tp, gpu, names):
    # lengths straddle every block / page / partition boundary the keys use (16, 64, 128, 256, 512, 8192)
    lens = (1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 600, 8191, 8192, 8193, 131073)
    g = resolve_gpu(gpu)
    r = run_sweep(spec(model, tp, policies=names, batches=(1, 5, 40), lens=lens, gpu=g))
    for grid in r.grids:
        assert grid.applicable, grid.reason
        for i, b in enumerate(grid.batches):
            for j, L in enumerate(grid.seq_lens):
                p = pol.evaluate(grid.policy, make_workload(MODELS[model], tp=tp, batch=b, seq_len=L), g).plan
                if grid.values["region"][i][j] == "n/a":  # e.g. ROCm custom paged attention beyond 128 K keys
                    assert p is None and grid.reason and "not served" in grid.reason
                    continue
                got = tuple(grid.values[m][i][j] for m in ("splits", "nonempty_splits", "tokens_per_split",
                                                           "programs", "working_programs"))
                assert got == (p.splits[0], p.nonempty_splits[0], p.tokens_per_split[0], p.main.programs,
                               p.main.working_programs), (grid.policy, b, L)
