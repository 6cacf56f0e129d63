"""`decodecalc verify` on the CPU through Triton's interpreter: reference kernels, SGLang's real
kernels (when ./upstream/sglang-0.5.23 exists, from tools/fetch_upstream.sh), vLLM's (opt-in
marker ``vllm_wheel``), and the command's output, JSON, exit codes and errors.

Skips cleanly without the ``verify`` extra (torch, triton). Shapes are tiny: the whole file runs
in well under a minute on two cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton not installed: pip install '.[verify]'", allow_module_level=True)

from helpers import gpu as make_gpu  # noqa: E402
from helpers import model, work  # noqa: E402

pytestmark = [pytest.mark.interpreter,
              pytest.mark.filterwarnings("ignore::DeprecationWarning"),  # numpy, inside Triton's interpreter
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]  # NaN arithmetic in masked rows

H200 = make_gpu()


@pytest.fixture(scope="module", autouse=True)
def interpreter():
    """The interpreter must be chosen before triton decorates the kernels (process-wide)."""
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET", "0") in ("", "0") \
            and torch.cuda.is_available():
        pytest.skip("triton already imported for the GPU in this process")
    os.environ["TRITON_INTERPRET"] = "1"
    yield


def _runner():
    from decodecalc.verify import runner as R

    return R


def _env():
    from decodecalc.verify.environment import detect_environment

    return detect_environment()


def _calls(w, systems=("vllm", "sglang"), **vllm_kw):
    from decodecalc.launchers.sglang_triton import SglangSettings, plan_sglang
    from decodecalc.launchers.vllm_unified import VllmSettings, plan_vllm
    from decodecalc.verify.calls import sglang_call, vllm_call

    calls = []
    if "vllm" in systems:
        calls.append(vllm_call(plan_vllm(w, H200, VllmSettings(**vllm_kw))))
    if "sglang" in systems:
        calls.append(sglang_call(plan_sglang(w, H200, SglangSettings()), H200))
    return calls


def _sources_or_skip(name: str):
    from decodecalc.errors import ConfigError
    from decodecalc.verify import locate

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", locate.UpstreamVersionWarning)
            return locate.locate(name)
    except ConfigError as exc:
        pytest.skip(f"{name} sources not found (run tools/fetch_upstream.sh): {exc}")


# --------------------------------------------------------------------------------------------
# the reference kernels alone, against float32 torch


def _paged(h, h_kv, d, seq_lens, q_lens, bs=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    nb = [-(-L // bs) for L in seq_lens]
    total = sum(nb) + 1
    k = torch.randn(total, bs, h_kv, d, generator=g).half()
    v = torch.randn(total, bs, h_kv, d, generator=g).half()
    perm = (torch.randperm(total - 1, generator=g) + 1).int()
    bt = torch.zeros(len(seq_lens), max(nb), dtype=torch.int32)
    off = 0
    for i, n in enumerate(nb):
        bt[i, :n] = perm[off:off + n]
        off += n
    q = torch.randn(sum(q_lens), h, d, generator=g).half()
    qsl = torch.tensor([0] + [sum(q_lens[:i + 1]) for i in range(len(q_lens))], dtype=torch.int32)
    return q, k, v, bt, qsl, torch.tensor(seq_lens, dtype=torch.int32)


@pytest.mark.parametrize("h,h_kv,d,seq_lens,q_lens,use_3d,S", [
    (8, 2, 64, [77, 300, 16], [1, 1, 1], True, 16),   # segments of 2..16 tiles, one sequence of one tile
    (8, 2, 32, [77, 40], [2, 3], True, 4),            # speculative queries packed 4 heads x BLOCK_Q 4
    (6, 1, 32, [50, 129], [3, 1], False, 1),          # 2D; g = 6 does not divide BLOCK_M = 16
])
def test_reference_split_kv_matches_float32(h, h_kv, d, seq_lens, q_lens, use_3d, S):
    from decodecalc.verify import reference_split_kv as rk
    from decodecalc.verify.torch_ref import compare, reference_attention

    q, k, v, bt, qsl, sl = _paged(h, h_kv, d, seq_lens, q_lens)
    T = q.shape[0]
    out = torch.full_like(q, float("nan"))
    dp = 1 << (d - 1).bit_length()
    so = torch.full((T, h, S, dp), float("nan"))
    sm = torch.full((T, h, S), float("nan"))
    ss = torch.full((T, h, S), float("nan"))
    launches = rk.run_split_kv(q=q, k_cache=k, v_cache=v, out=out, query_start=qsl, seq_lens=sl, block_table=bt,
                               scale=d ** -0.5, use_3d=use_3d, num_segments=S, segm_out=so, segm_max=sm, segm_sum=ss)
    _, block_q = rk.vllm_block_shape(h, h_kv)
    assert launches[0].grid[:2] == (T // block_q + len(seq_lens), h_kv)
    err = compare(out, reference_attention(q, k, v, bt, seq_lens, q_lens, d ** -0.5), q_lens)
    assert err["nan_count"] == 0 and err["max_err_vs_max"] < 5e-3, err


def test_reference_grouped_matches_float32_and_splits():
    from decodecalc.launchers.sglang_triton import get_num_kv_splits, nonempty_splits
    from decodecalc.verify import reference_grouped as rk
    from decodecalc.verify.torch_ref import compare, reference_attention

    h, h_kv, d, seq_lens, S = 8, 2, 32, [77, 300, 16], 8
    q, k, v, bt, qsl, sl = _paged(h, h_kv, d, seq_lens, [1] * 3)
    bs = 16
    idx = torch.cat([(bt[i, :-(-L // bs)].long()[:, None] * bs + torch.arange(bs)[None]).reshape(-1)[:L]
                     for i, L in enumerate(seq_lens)])
    indptr = torch.tensor([0, 77, 377, 393], dtype=torch.int32)
    po = torch.full((3, h, S, d), float("nan"))
    pl = torch.full((3, h, S), float("nan"))
    nks = torch.full((3,), -1, dtype=torch.int32)
    out = torch.full_like(q, float("nan"))
    launches = rk.run_grouped(q=q, k_buffer=k.view(-1, h_kv, d), v_buffer=v.view(-1, h_kv, d), out=out,
                              kv_indptr=indptr, kv_indices=idx, seq_lens=sl, part_out=po, part_lse=pl,
                              num_kv_splits=nks, max_kv_splits=S, sm_count=132, scale=d ** -0.5)
    assert [la.grid for la in launches] == [(1,), (3, 2, S), (3, h)]
    want = get_num_kv_splits(tuple(seq_lens), num_head=h, num_kv_head=h_kv, device_core_count=132, max_kv_splits=S)
    assert tuple(nks.tolist()) == tuple(want)
    # empty splits store nothing; non-empty ones store every head
    written = (~pl.isnan()).any(1).sum(1).tolist()
    assert written == [nonempty_splits(L, n) for L, n in zip(seq_lens, want)]
    err = compare(out, reference_attention(q, k, v, bt, seq_lens, [1] * 3, d ** -0.5), [1] * 3)
    assert err["max_err_vs_max"] < 5e-3, err


# --------------------------------------------------------------------------------------------
# the runner: prediction vs observation


def test_verify_reference_kernels_match_prediction():
    R = _runner()
    env = _env()
    w = work(model(8, 1, 32), seq_lens=(40, 130, 17))  # g = 8: BLOCK_Q 2, 3D, ragged
    res = R.verify_workload(w, _calls(w), env, sources=("reference",), timing=False)
    assert [r.status for r in res.runs] == ["ok", "ok"], [r.message for r in res.runs]
    v, s = res.runs
    # a FULL CUDA-graph replay pads B = 3 to the capture size 4: T_pad // BLOCK_Q + B_pad = 4 // 2 + 4
    assert v.launches[0].observed_grid == [6, 1, 16]
    assert v.padded == [4, 4]
    assert s.splits_observed == s.splits_predicted and s.nonempty_observed == s.nonempty_predicted
    assert "bfloat16 run as float16" in res.notes[0]


def test_verify_reports_a_wrong_prediction():
    import dataclasses

    R = _runner()
    env = _env()
    w = work(model(4, 2, 32), seq_lens=(33,))
    call = _calls(w, systems=("vllm",), cudagraph_mode="NONE")[0]
    main = call.plan.kernels[0]
    wrong = dataclasses.replace(call.plan, kernels=(dataclasses.replace(main, grid=(9, 9, 9)),) + call.plan.kernels[1:])
    res = R.verify_workload(w, [dataclasses.replace(call, plan=wrong)], env, sources=("reference",), timing=False)
    r = res.runs[0]
    assert r.status == "mismatch" and "grid" in r.message and not res.ok
    assert r.launches[0].programs_ok and not r.launches[0].grid_ok


def test_verify_sglang_upstream_kernels():
    _sources_or_skip("sglang")
    R = _runner()
    env = _env()
    w = work(model(8, 2, 32), seq_lens=(64, 700))  # skewed: the short sequence gets the long one's splits
    res = R.verify_workload(w, _calls(w, systems=("sglang",)), env, timing=False)
    up, ref = res.runs
    assert up.source == "upstream" and up.version == "0.5.23" and up.status == "ok", up.message
    assert ref.status == "ok"
    assert up.splits_observed == ref.splits_observed == list(_calls(w, ("sglang",))[0].plan.splits)
    assert up.aux_launches[0]["kernel"] == "get_num_kv_splits_triton"


@pytest.mark.vllm_wheel
def test_verify_vllm_upstream_kernels():
    _sources_or_skip("vllm")
    R = _runner()
    env = _env()
    w = work(model(8, 2, 32), seq_lens=(40, 100), query_lens=(2, 1))
    res = R.verify_workload(w, _calls(w, systems=("vllm",)), env, timing=False)
    assert [r.status for r in res.runs] == ["ok", "ok"], [r.message for r in res.runs]
    assert res.runs[0].launches[0].observed_grid == res.runs[1].launches[0].observed_grid


# --------------------------------------------------------------------------------------------
# the command


TINY_YAML = "name: tiny-8x1\nnum_layers: 1\nnum_attention_heads: 8\nnum_key_value_heads: 1\nhead_dim: 32\n" \
            "dtype: bfloat16\n"


@pytest.fixture()
def tiny_model(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(TINY_YAML)
    return str(p)


def _invoke(*args, columns=200):
    from typer.testing import CliRunner

    from decodecalc.cli import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns), "NO_COLOR": "1", "TRITON_INTERPRET": "1"})


def test_cli_verify_reference_json(tiny_model, tmp_path):
    out = tmp_path / "v.json"
    r = _invoke("verify", "--model", tiny_model, "--seq-lens", "40,70", "--kernels", "reference", "-o", str(out),
                columns=80)
    assert r.exit_code == 0, r.output
    assert "vllm ref" in r.stdout and "sglang ref" in r.stdout and "all launches match" in r.stdout
    # the table fits 80 columns without folding a cell: one header line, kernel names whole
    assert any(ln.split() == ["run", "/", "kernel", "grid", "working", "splits", "(live)", "max", "err", "status"]
               for ln in r.stdout.splitlines()), r.stdout
    assert " ref_grouped_stage1 " in r.stdout and max(map(len, r.stdout.splitlines())) <= 80
    doc = json.loads(out.read_text())
    assert doc["ok"] and doc["complete"] and len(doc["runs"]) == 2
    assert doc["environment"]["interpret"] is True
    assert all(run["grids_ok"] and run["programs_ok"] and run["splits_ok"] for run in doc["runs"])


def test_cli_verify_mismatch_exits_1(tiny_model, monkeypatch):
    import dataclasses

    from decodecalc.verify import calls as C

    real = C.vllm_call

    def wrong(vplan):
        call = real(vplan)
        k = call.plan.kernels[0]
        plan = dataclasses.replace(call.plan, kernels=(dataclasses.replace(k, working_programs=k.working_programs + 1),)
                                   + call.plan.kernels[1:])
        return dataclasses.replace(call, plan=plan)

    monkeypatch.setattr(C, "vllm_call", wrong)
    r = _invoke("verify", "--model", tiny_model, "--seq-lens", "40", "--kernels", "reference", "--system", "vllm")
    assert r.exit_code == 1, r.output
    assert "MISMATCH" in r.stdout and "!=" in r.stdout


def test_cli_verify_sglang_upstream(tiny_model):
    _sources_or_skip("sglang")
    r = _invoke("verify", "--model", tiny_model, "--seq-lens", "50,20", "--system", "sglang", "--kernels", "both",
                "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [run["source"] for run in doc["runs"]] == ["upstream", "reference"]
    assert doc["kernels"] == {"mode": "both", "ran": {"sglang": ["upstream", "reference"]}, "fallback": {}}
    assert doc["environment"]["versions"]["sglang"].startswith("0.5.23")


def test_cli_verify_other_version_warns(tiny_model, tmp_path):
    import shutil

    src = _sources_or_skip("sglang")
    copy = tmp_path / "sglang-other"
    shutil.copytree(src.root, copy)
    vfile = copy / "sglang" / "_version.py"
    vfile.write_text(vfile.read_text().replace("'0.5.23'", "'0.5.99'"))
    r = _invoke("verify", "--model", tiny_model, "--seq-lens", "33", "--system", "sglang", "--kernels", "upstream",
                "--sglang-src", str(copy))
    assert r.exit_code == 0, r.output
    assert "Warning:" in r.output and "0.5.99" in r.output
    assert "sglang 0.5.99" in r.stdout


def test_grid_verify_hook(tiny_model):
    _sources_or_skip("sglang")
    r = _invoke("grid", "--model", tiny_model, "--seq-lens", "40", "--system", "sglang", "--verify")
    assert r.exit_code == 0, r.output
    assert "sglang 0.5.23" in r.stdout and "all launches match" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (("--kernels", "nope"), "--kernels 'nope'"),
    (("--vllm-src", "/nonexistent-dir"), "does not exist"),
    (("--kv-cache-dtype", "fp8"), "fp8"),
    (("--layer", "sliding"), "sliding"),
    (("--replays", "0"), "--replays"),
])
def test_cli_verify_bad_input(tiny_model, args, needle):
    r = _invoke("verify", "--model", tiny_model, "--seq-lens", "40", *args)
    assert r.exit_code == 1
    assert "Error:" in r.output and needle in r.output
    assert "Traceback" not in r.output


def test_cli_verify_batch_invariant_runs_2d(tiny_model, tmp_path):
    """--batch-invariant reaches the kernels (VLLM_BATCH_INVARIANT for vLLM's module, the same gate in
    ours): the 2D launch decodecalc predicts is the one that runs (found on the H200 when it did not)."""
    out = tmp_path / "v.json"
    r = _invoke("verify", "--model", tiny_model, "--seq-lens", "40,70", "--kernels", "reference", "--system", "vllm",
                "--batch-invariant", "-o", str(out))
    assert r.exit_code == 0, r.output
    run = json.loads(out.read_text())["runs"][0]
    assert run["status"] == "ok" and len(run["launches"][0]["observed_grid"]) == 2


def _only_sglang_fetched(tmp_path, monkeypatch):
    """A fresh clone after ``tools/fetch_upstream.sh sglang``: ./upstream holds SGLang only."""
    from decodecalc.verify import locate

    src = _sources_or_skip("sglang")
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here: its sources are always found")
    root = tmp_path.resolve()
    (root / "upstream").mkdir()
    (root / "upstream" / "sglang-0.5.23").symlink_to(src.root, target_is_directory=True)
    monkeypatch.chdir(root)
    monkeypatch.setattr(locate, "_REPO_ROOT", root)
    return root / "upstream" / "vllm-0.33.0"


def test_cli_verify_runs_what_it_finds(tiny_model, tmp_path, monkeypatch):
    """Issue 11: the default runs the upstream kernels where their sources are, the reference kernels
    otherwise, says which it ran (screen and JSON), and names each path it tried once."""
    tried = _only_sglang_fetched(tmp_path, monkeypatch)
    out = tmp_path / "v.json"
    r = _invoke("verify", "--model", tiny_model, "--seq-lens", "40,100,17", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert "vllm: decodecalc's reference kernels (no upstream sources found)" in r.stdout
    assert "sglang: upstream 0.5.23 (default: " in r.stdout
    assert "vllm ref" in r.stdout and "sglang 0.5.23" in r.stdout
    assert r.stderr.count(str(tried)) == 1 and "fetch_upstream.sh vllm" in r.stderr
    doc = json.loads(out.read_text())
    assert doc["kernels"]["mode"] == "auto"
    assert doc["kernels"]["ran"] == {"vllm": ["reference"], "sglang": ["upstream"]}
    assert doc["kernels"]["fallback"]["vllm"].count(str(tried)) == 1 and "sglang" not in doc["kernels"]["fallback"]
    assert [(run["system"], run["source"]) for run in doc["runs"]] == [("vllm", "reference"), ("sglang", "upstream")]
    assert doc["ok"]


def test_cli_verify_upstream_without_sources_names_what_to_install(tiny_model, tmp_path, monkeypatch):
    tried = _only_sglang_fetched(tmp_path, monkeypatch)
    r = _invoke("verify", "--model", tiny_model, "--seq-lens", "40", "--system", "vllm", "--kernels", "upstream")
    assert r.exit_code == 1
    assert r.output.startswith("Error:") and r.output.count("\n") == 1, r.output
    assert r.output.count(str(tried)) == 1 and "pip install vllm==0.33.0" in r.output
    assert "Traceback" not in r.output


def _calibration_bench(system: str, lens: list[int]):
    """calibrate's ShapeBench (8:2 heads, d32, fp16) on the CPU with ``system``'s upstream kernels (skips without
    their sources)."""
    from decodecalc.verify.calibration import ShapeBench
    from decodecalc.verify.locate import UpstreamVersionWarning
    from decodecalc.verify.upstream import load_sglang, load_vllm

    _sources_or_skip(system)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UpstreamVersionWarning)
        kernels = load_vllm(interpret=True) if system == "vllm" else load_sglang(interpret=True)
    return ShapeBench(torch, kernels, kernels, 8, 2, 32, tuple(lens), 132, seed=0, device="cpu", dtype=torch.float16)


@pytest.mark.parametrize("variant", ["sglang-static-S2", "vllm-3d-S4", "vllm-2d"])
def test_calibration_steps_compute_attention(variant):
    """calibrate's timed steps (verify/calibration.py) call the real kernels through verify/engine.py on
    the KV cache of verify/kv_cache.py: here, under the interpreter, their output is attention."""
    from decodecalc.verify.torch_ref import compare, reference_attention

    lens = [40, 70]
    bench = _calibration_bench(variant.split("-")[0], lens)
    assert bench.copies > 1
    bench.out.fill_(float("nan"))
    bench.step(variant)(1)  # the second KV-cache copy
    ref = reference_attention(bench.q, bench.kv.k_cache, bench.kv.v_cache, bench.kv.block_tables[1], lens, [1, 1],
                              bench.scale)
    err = compare(bench.out, ref, [1, 1])
    assert err["nan_count"] == 0 and err["max_err_vs_max"] < 5e-3, err


@pytest.mark.parametrize("variant, block", [("vllm-2d", 16), ("vllm-3d-S4", 32), ("sglang-static-S2", 16)])
def test_calibration_steps_with_an_fp8_cache_compute_attention(variant, block):
    """benchmarks/measure_kv_formats_h200.py's benches: an fp8 KV cache (vLLM's query quantized to fp8 with unit
    descales, SGLang's stage 1 casting it itself) and 32-token blocks. fp8 products round at e4m3's 3 mantissa bits,
    so the output is attention of the fp8-rounded inputs within fp8's error, and far from a wrong copy's."""
    from decodecalc.verify.calibration import ShapeBench
    from decodecalc.verify.locate import UpstreamVersionWarning
    from decodecalc.verify.torch_ref import compare, reference_attention
    from decodecalc.verify.upstream import load_sglang, load_vllm

    system = variant.split("-")[0]
    _sources_or_skip(system)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UpstreamVersionWarning)
        kernels = load_vllm(interpret=True) if system == "vllm" else load_sglang(interpret=True)
    lens = [40, 70]
    bench = ShapeBench(torch, kernels, kernels, 8, 2, 32, tuple(lens), 132, seed=0, device="cpu", dtype=torch.float16,
                       kv_dtype=torch.float8_e4m3fn, block_size=block)
    assert bench.fp8 and bench.kv.k_cache.dtype == torch.float8_e4m3fn and bench.kv.k_cache.shape[1] == block
    assert bench.kv_bytes == sum(lens) * 2 * 32 * 2  # one byte an element
    bench.out.fill_(float("nan"))
    bench.step(variant)(1)
    q = bench.q.to(torch.float8_e4m3fn).to(torch.float16)
    k, v = bench.kv.k_cache.to(torch.float16), bench.kv.v_cache.to(torch.float16)
    err = compare(bench.out, reference_attention(q, k, v, bench.kv.block_tables[1], lens, [1, 1], bench.scale), [1, 1])
    wrong = compare(bench.out, reference_attention(q, k, v, bench.kv.block_tables[0], lens, [1, 1], bench.scale), [1, 1])
    assert err["nan_count"] == 0 and err["rel_err_fro"] < 0.2, err
    assert wrong["rel_err_fro"] > 2 * err["rel_err_fro"], (err, wrong)


@pytest.mark.parametrize("launch, engine_kernel", [
    ({"engine": "vllm", "use_3d": True, "segments": 4, "batch_run": 4, "tokens_run": 4}, False),  # graph-padded
    ({"engine": "vllm", "use_3d": False, "segments": 1, "batch_run": 2, "tokens_run": 2}, False),
    ({"engine": "sglang", "splits": [1, 3], "max_kv_splits": 4, "adaptive": True}, True),  # counts on the device
    ({"engine": "sglang", "splits": [2, 2], "max_kv_splits": 2, "adaptive": False}, False),
])
def test_workload_step_launches_compute_attention(launch, engine_kernel):
    """calibrate --workload's timed launches (ShapeBench.launch: vLLM on the padded replay batch, SGLang with
    per-sequence split counts, written by the engine's own split-count kernel when adaptive) are attention."""
    from decodecalc.verify.torch_ref import compare, reference_attention

    lens = [40, 70]
    bench = _calibration_bench(launch["engine"], lens)
    step = bench.launch(launch, engine_kernel)
    step.out.fill_(float("nan"))
    step(1)
    ref = reference_attention(bench.q, bench.kv.k_cache, bench.kv.v_cache, bench.kv.block_tables[1], lens, [1, 1],
                              bench.scale)
    err = compare(step.out[:2], ref, [1, 1])
    assert err["nan_count"] == 0 and err["max_err_vs_max"] < 5e-3, err
    if engine_kernel:  # the engine's split-count kernel wrote the counts decodecalc's launcher module predicts
        from decodecalc.launchers.sglang_triton import get_num_kv_splits

        want = get_num_kv_splits(tuple(lens), num_head=8, num_kv_head=2, max_kv_splits=4, device_core_count=132)
        assert step.num_kv_splits.tolist() == list(want) != launch["splits"]


@pytest.mark.parametrize("launch, engine_kernel", [
    ({"engine": "vllm", "use_3d": True, "segments": 4, "batch_run": 4, "tokens_run": 4}, False),
    ({"engine": "vllm", "use_3d": False, "segments": 1, "batch_run": 2, "tokens_run": 2}, False),
    ({"engine": "sglang", "splits": [1, 3], "max_kv_splits": 4, "adaptive": True}, True),
    ({"engine": "sglang", "splits": [2, 2], "max_kv_splits": 2, "adaptive": False}, False),
])
def test_map_steps_on_a_shared_pool_compute_attention(launch, engine_kernel):
    """calibrate's map steps read one KV pool per workload (kv_cache.prefix_view: sequence j of a step reads the first
    L_j tokens of row j of each copy): a step's launch on that view is attention over exactly those tokens, and another
    copy's view is different data."""
    from decodecalc.verify.calibration import ShapeBench
    from decodecalc.verify.kv_cache import build_paged_kv, prefix_view
    from decodecalc.verify.locate import UpstreamVersionWarning
    from decodecalc.verify.torch_ref import compare, reference_attention
    from decodecalc.verify.upstream import load_sglang, load_vllm

    system = launch["engine"]
    _sources_or_skip(system)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UpstreamVersionWarning)
        kernels = load_vllm(interpret=True) if system == "vllm" else load_sglang(interpret=True)
    gen = torch.Generator()
    gen.manual_seed(5)
    pool = build_paged_kv(gen, seq_lens=[90] * 3, num_kv_heads=2, head_size=32, block_size=16, dtype=torch.float16,
                          device="cpu", copies=2)
    lens = [40, 70]
    view = prefix_view(pool, lens, 16)
    assert view.kv_indices.shape == (2, sum(lens)) and view.block_tables.shape == (2, 2, 6)
    bench = ShapeBench(torch, kernels, kernels, 8, 2, 32, tuple(lens), 132, seed=0, device="cpu", dtype=torch.float16,
                       kv=view)
    assert bench.copies == 2 and bench.kv is view
    step = bench.launch(launch, engine_kernel)
    step.out.fill_(float("nan"))
    step(1)
    ref = reference_attention(bench.q, pool.k_cache, pool.v_cache, pool.block_tables[1], lens, [1, 1], bench.scale)
    other = reference_attention(bench.q, pool.k_cache, pool.v_cache, pool.block_tables[0], lens, [1, 1], bench.scale)
    err = compare(step.out[:2], ref, [1, 1])
    assert err["nan_count"] == 0 and err["max_err_vs_max"] < 5e-3, err
    assert compare(step.out[:2], other, [1, 1])["max_err_vs_max"] > 0.05


def test_a_step_longer_than_its_pool_is_refused():
    from decodecalc.errors import DecodecalcError
    from decodecalc.verify.kv_cache import build_paged_kv, prefix_view

    gen = torch.Generator()
    gen.manual_seed(5)
    pool = build_paged_kv(gen, seq_lens=[32] * 2, num_kv_heads=1, head_size=8, block_size=16, dtype=torch.float16,
                          device="cpu", copies=1)
    with pytest.raises(DecodecalcError, match="does not fit a pool of 2 rows of 32 tokens"):
        prefix_view(pool, [33], 16)
    with pytest.raises(DecodecalcError, match="3 sequences"):
        prefix_view(pool, [1, 1, 1], 16)
