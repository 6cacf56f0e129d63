"""The one paged-KV-cache builder (decodecalc/verify/kv_cache.py) and where verify looks for the
upstream sources (decodecalc/verify/locate.py). torch on the CPU only: no triton, no interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

from decodecalc.errors import ConfigError
from decodecalc.verify import locate

torch = pytest.importorskip("torch")


def _build(seq_lens, copies, **kw):
    from decodecalc.verify.kv_cache import build_paged_kv

    gen = torch.Generator().manual_seed(3)
    return build_paged_kv(gen, seq_lens=seq_lens, num_kv_heads=2, head_size=8, block_size=4, dtype=torch.float32,
                          device="cpu", copies=copies, **kw)


def test_copies_and_sequences_get_disjoint_blocks_and_block_0_stays_free():
    lens = (5, 12, 1)
    kv = _build(lens, copies=3, table_rows=5, extra_slots=2)
    nb = [2, 3, 1]
    assert kv.k_cache.shape == (3 * sum(nb) + 1, 4, 2, 8) and kv.block_tables.shape == (3, 5, 3)
    used = []
    for c in range(3):
        for i, n in enumerate(nb):
            row = kv.block_tables[c, i].tolist()
            used += row[:n]
            assert row[n:] == [0] * (3 - n)
        assert kv.block_tables[c, 3:].abs().sum() == 0  # padded rows point at block 0
    assert sorted(used) == list(range(1, 3 * sum(nb) + 1))  # every block once, block 0 never


def test_token_slots_are_the_block_tables_tokens():
    lens = (5, 12, 1)
    kv = _build(lens, copies=2, extra_slots=2)
    assert kv.kv_indices.dtype == torch.int64 and kv.kv_indices.shape == (2, sum(lens) + 2)
    for c in range(2):
        tok = 0
        for i, L in enumerate(lens):
            for t in range(L):
                block = int(kv.block_tables[c, i, t // 4])
                assert int(kv.kv_indices[c, tok + t]) == block * 4 + t % 4
                # SGLang's token-major view reads the same key as vLLM's paged view
                assert torch.equal(kv.k_buffer[block * 4 + t % 4], kv.k_cache[block, t % 4])
            tok += L
        assert kv.kv_indices[c, tok:].tolist() == [0, 0]


def test_same_seed_same_cache():
    a, b = _build((7, 3), copies=2), _build((7, 3), copies=2)
    assert torch.equal(a.k_cache, b.k_cache) and torch.equal(a.block_tables, b.block_tables)
    assert a.k_cache.abs().sum() > 0  # random data, never zeros


def test_each_default_source_path_is_named_once(tmp_path, monkeypatch):
    """Run from the repository, ./upstream and the repository's upstream/ are one place."""
    root = tmp_path.resolve()
    monkeypatch.chdir(root)
    monkeypatch.setattr(locate, "_REPO_ROOT", root)
    monkeypatch.setattr(locate.importlib.util, "find_spec", lambda name: None)
    assert locate.default_roots("vllm") == [root / "upstream" / "vllm-0.33.0"]
    with pytest.raises(ConfigError) as exc:
        locate.locate("vllm")
    msg = str(exc.value)
    assert msg.count(str(root / "upstream" / "vllm-0.33.0")) == 1
    assert "tools/fetch_upstream.sh vllm" in msg and "pip install vllm==0.33.0" in msg
    other = root / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    assert locate.default_roots("sglang") == [other / "upstream" / "sglang-0.5.23", root / "upstream" / "sglang-0.5.23"]
    assert all(isinstance(p, Path) for p in locate.default_roots("sglang"))
