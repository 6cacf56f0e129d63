"""Re-run a few shapes through the real upstream code, live, under the Triton interpreter.

Needs torch + triton (``pip install '.[verify]'``; CPU torch==2.13.0) and the
unpacked sources (``tools/fetch_upstream.sh``); every test skips with the reason otherwise.
Marked ``interpreter``: ``pytest -m interpreter tests/test_upstream_live.py``.
"""

from __future__ import annotations

import math
import re
import warnings

import pytest

from decodecalc.errors import ConfigError, DecodecalcError
from decodecalc.launchers.sglang_triton import get_num_kv_splits, stage1_grid
from decodecalc.launchers.vllm_unified import unified_attention_grid
from decodecalc.verify import is_available, missing_requirements
from decodecalc.verify.locate import REQUIRED_FILES, UpstreamVersionWarning, locate

pytestmark = pytest.mark.interpreter


def _skip_unless_ready() -> None:
    if not is_available():
        pytest.skip(f"{' and '.join(missing_requirements())} not installed: pip install '.[verify]'")


@pytest.fixture(scope="module")
def sglang():
    _skip_unless_ready()
    from decodecalc.verify import upstream

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UpstreamVersionWarning)
            return upstream.load_sglang(interpret=True)
    except ConfigError as exc:
        pytest.skip(f"SGLang sources not found (run tools/fetch_upstream.sh): {exc}")
    except DecodecalcError as exc:  # e.g. triton already imported without TRITON_INTERPRET=1
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def vllm():
    _skip_unless_ready()
    from decodecalc.verify import upstream

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UpstreamVersionWarning)
            return upstream.load_vllm(interpret=True)
    except ConfigError as exc:
        pytest.skip(f"vLLM sources not found (run tools/fetch_upstream.sh): {exc}")
    except DecodecalcError as exc:  # e.g. triton already imported without TRITON_INTERPRET=1
        pytest.skip(str(exc))


SGLANG_SHAPES = [
    # seq_lens, h, h_kv, SM, max_kv_splits
    ((2560,), 32, 8, 132, 8),
    ((2560,), 8, 1, 132, 8),
    ((700, 30000, 5), 32, 32, 108, 16),
    ((4096,) * 13, 64, 8, 78, 8),
    ((100, 100, 100, 65536), 16, 1, 304, 4),
    ((1000, 1100, 1200, 1240) * 20, 28, 4, 132, 8),
    (tuple(range(1, 300)), 40, 8, 132, 16),
]


@pytest.mark.parametrize("lens,h,hkv,sm,ms", SGLANG_SHAPES)
def test_sglang_live_splits_and_grids(sglang, lens, h, hkv, sm, ms):
    from decodecalc.verify.recording import call_sglang_decode

    call = call_sglang_decode(sglang, seq_lens=lens, num_head=h, num_kv_head=hkv, device_core_count=sm,
                              max_kv_splits=ms, head_dim=128)
    assert call.num_kv_splits == get_num_kv_splits(lens, num_head=h, num_kv_head=hkv,
                                                   device_core_count=sm, max_kv_splits=ms)
    names = [la.name for la in call.launches]
    assert names[0] == "get_num_kv_splits_triton" and call.launches[0].executed
    stage1 = call.launches[1]
    assert stage1.name == ("_fwd_kernel_stage1" if h == hkv else "_fwd_grouped_kernel_stage1")
    assert not stage1.executed
    assert stage1.grid == stage1_grid(len(lens), h, hkv, ms)
    assert call.launches[2].name == "_fwd_kernel_stage2" and call.launches[2].grid == (len(lens), h)


def test_sglang_live_execute_matches_reference(sglang):
    """Execute both stages (fp16, tiny shapes): the output must be real attention."""
    import torch

    from decodecalc.verify.recording import call_sglang_decode

    lens, h, hkv, d = (37, 200, 64), 8, 2, 64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        call = call_sglang_decode(sglang, seq_lens=lens, num_head=h, num_kv_head=hkv, device_core_count=132,
                                  max_kv_splits=4, head_dim=d, execute=True, pool_slots=None)
    assert all(la.executed for la in call.launches)
    t = call.tensors
    g = h // hkv
    for i, L in enumerate(lens):
        idx = t["kv_indices"][t["kv_indptr"][i]: t["kv_indptr"][i] + L]
        k = t["k_buffer"][idx].float()  # [L, hkv, d]
        v = t["v_buffer"][idx].float()
        for hh in range(h):
            q = t["q"][i, hh].float()
            s = (k[:, hh // g] @ q) / math.sqrt(d)
            ref = torch.softmax(s, 0) @ v[:, hh // g]
            torch.testing.assert_close(call.output[i, hh].float(), ref, atol=2e-2, rtol=2e-2)


def test_vllm_live_grids_match_model(vllm):
    from decodecalc.verify.recording import call_vllm_unified

    for h, hkv, B, q in ((32, 8, 16, 1), (32, 8, 17, 1), (8, 1, 40, 3), (16, 1, 9, 9)):
        t = 128 // hkv
        call = call_vllm_unified(vllm, num_heads=h, num_kv_heads=hkv, head_size=128, seq_lens=(500,) * B,
                                 query_lens=(q,) * B, q_dtype="fp16", seq_threshold_3D=t,
                                 scratch_rows=t * min(q, 8))
        model = unified_attention_grid(num_tokens=B * q, seq_lens=(500,) * B, query_lens=(q,) * B,
                                       num_heads=h, num_kv_heads=hkv, head_size=128, q_dtype_bytes=2,
                                       sliding_window=None, seq_threshold_3D=t, num_par_softmax_segments=16,
                                       scratch_rows=t * min(q, 8), batch_invariant=False)
        main = call.launches[0]
        assert main.constexprs["IS_3D"] == model.use_3d
        assert main.grid == tuple(model.grid)
        assert main.constexprs["TILE_SIZE"] == model.tile_size


def test_vllm_live_execute_matches_reference(vllm):
    """Execute the 3D path and its reduce kernel (fp16: the interpreter's bf16 dot is wrong)."""
    import torch

    from decodecalc.verify.recording import call_vllm_unified

    h, hkv, d, bs = 4, 2, 64, 16
    seq_lens, query_lens = (40, 70), (1, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        call = call_vllm_unified(vllm, num_heads=h, num_kv_heads=hkv, head_size=d, seq_lens=seq_lens,
                                 query_lens=query_lens, q_dtype="fp16", seq_threshold_3D=64, scratch_rows=64,
                                 block_size=bs, execute=True, pool_blocks=None)
    assert [la.name for la in call.launches] == ["kernel_unified_attention", "reduce_segments"]
    assert call.launches[0].constexprs["IS_3D"]
    t = call.tensors
    g = h // hkv
    tok = 0
    for i, (L, ql) in enumerate(zip(seq_lens, query_lens)):
        blocks = t["block_table"][i, : -(-L // bs)].long()
        k = t["key_cache"][blocks].reshape(-1, hkv, d)[:L].float()
        v = t["value_cache"][blocks].reshape(-1, hkv, d)[:L].float()
        for j in range(ql):
            pos = L - ql + j  # causal: keys 0..pos
            for hh in range(h):
                q = t["q"][tok, hh].float()
                s = (k[: pos + 1, hh // g] @ q) / math.sqrt(d)
                ref = torch.softmax(s, 0) @ v[: pos + 1, hh // g]
                torch.testing.assert_close(call.output[tok, hh].float(), ref, atol=2e-2, rtol=2e-2)
            tok += 1


def test_missing_sources_raise_config_error_naming_the_file(tmp_path):
    (tmp_path / "sglang" / "kernels" / "ops" / "attention").mkdir(parents=True)
    with pytest.raises(ConfigError, match="decode_attention.py"):
        locate("sglang", tmp_path)


def test_other_version_warns_not_crashes(tmp_path):
    for rel in REQUIRED_FILES["sglang"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("# stub\n")
    (tmp_path / "sglang" / "_version.py").write_text("__version__ = version = '0.5.99'\n")
    with pytest.warns(UpstreamVersionWarning, match="0.5.99"):
        src = locate("sglang", tmp_path)
    assert src.version == "0.5.99" and not src.expected
    # a source checkout keeps the package under python/
    checkout = tmp_path / "checkout"
    (checkout / "python").mkdir(parents=True)
    (tmp_path / "sglang").rename(checkout / "python" / "sglang")
    with pytest.warns(UpstreamVersionWarning):
        src = locate("sglang", checkout)
    assert src.root == (checkout / "python").resolve()


def test_missing_torch_or_triton_names_the_extra(monkeypatch):
    import decodecalc.verify as verify
    from decodecalc.verify import upstream

    monkeypatch.setattr(verify, "missing_requirements", lambda: ["torch"])
    from decodecalc.extras import install_hint

    with pytest.raises(DecodecalcError, match=re.escape(install_hint("verify"))):
        upstream.load_sglang()
