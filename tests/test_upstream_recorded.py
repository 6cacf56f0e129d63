"""Our pure launcher models against launches recorded from the real upstream code.

The JSON files were written by tools/record_upstream_grids.py, which ran vLLM 0.33.0's and
0.34.0's ``unified_attention`` (``--vllm-version``; the same inputs for both) and SGLang
0.5.23's split-count kernel + ``decode_attention_fwd`` under the Triton interpreter and
recorded every kernel launch (see docs/upstream-recordings.md).  These tests need only the
JSON and our models: no torch, no triton, no upstream sources.  A recording that is absent
skips the tests that read it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from decodecalc.launchers.sglang_triton import get_num_kv_splits, stage1_grid
from decodecalc.launchers.vllm_triton_backend import VllmSettings
from decodecalc.launchers.vllm_unified import unified_attention_grid

DATA = Path(__file__).parent / "data" / "upstream"
VLLM_VERSIONS = ("0.33.0", "0.34.0")
VLLM_FILES = {v: DATA / f"vllm-{v}-grids.json" for v in VLLM_VERSIONS}
SGLANG_FILE = DATA / "sglang-0.5.23-splits.json"


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


VLLM = {v: _load(path) for v, path in VLLM_FILES.items()}
SGLANG = _load(SGLANG_FILE)


def _missing(path: Path) -> str:
    return f"{path.relative_to(DATA.parents[2])} not recorded (tools/record_upstream_grids.py)"


def _need(data: dict | None, path: Path) -> dict:
    if data is None:
        pytest.skip(_missing(path))
    return data


def _vllm_id(rec: dict) -> str:
    i = rec["inputs"]
    q = i["query_lens"]
    ql = f"q{q[0]}x{len(q)}" if len(set(q)) == 1 else "q" + "-".join(map(str, q[:6]))
    return (f"h{i['num_heads']}:{i['num_kv_heads']}-d{i['head_size']}-{i['q_dtype']}-{ql}"
            f"-t{i['seq_threshold_3D']}-r{i['scratch_rows']}-bi{int(i['batch_invariant'])}"
            f"-sw{i['sliding_window']}-cc{i['capability'][0]}{i['capability'][1]}")


def _sglang_id(rec: dict) -> str:
    i = rec["inputs"]
    return (f"h{i['num_head']}:{i['num_kv_head']}-B{len(i['seq_lens'])}-{i['style']}"
            f"-sm{i['device_core_count']}-S{i['max_kv_splits']}-g{i['num_group']}")


def _params(records: list[dict], ident, prefix: tuple = ()) -> list:
    seen: Counter[str] = Counter()
    out = []
    head = "".join(f"{p}-" for p in prefix)
    for idx, rec in enumerate(records):
        base = ident(rec)
        seen[base] += 1
        out.append(pytest.param(*prefix, rec,
                                id=f"{head}{idx:04d}-{base}" + (f"#{seen[base]}" if seen[base] > 1 else "")))
    return out


def _vllm_params() -> list:
    """(version, record) for every recorded vLLM version; one skipped param for an absent file."""
    out = []
    for v in VLLM_VERSIONS:
        if VLLM[v] is None:
            out.append(pytest.param(v, None, id=f"{v}-absent", marks=pytest.mark.skip(reason=_missing(VLLM_FILES[v]))))
        else:
            out += _params(VLLM[v]["records"], _vllm_id, (v,))
    return out


def _sglang_params() -> list:
    if SGLANG is None:
        return [pytest.param(None, id="absent", marks=pytest.mark.skip(reason=_missing(SGLANG_FILE)))]
    return _params(SGLANG["records"], _sglang_id)


# ----------------------------------------------------------------------------- the files


@pytest.mark.parametrize("version", VLLM_VERSIONS)
def test_vllm_recording_is_pinned_version_and_small(version):
    data = _need(VLLM[version], VLLM_FILES[version])
    assert data["meta"]["upstream"] == "vllm" and data["meta"]["version"] == version
    assert data["meta"]["records"] == len(data["records"]) >= 500
    assert VLLM_FILES[version].stat().st_size < 2 * 1024 * 1024


def test_sglang_recording_is_pinned_version_and_small():
    data = _need(SGLANG, SGLANG_FILE)
    assert data["meta"]["upstream"] == "sglang" and data["meta"]["version"] == "0.5.23"
    assert data["meta"]["records"] == len(data["records"]) >= 300
    assert SGLANG_FILE.stat().st_size < 2 * 1024 * 1024


def test_vllm_recordings_share_their_inputs():
    """Every vLLM version is recorded on the same input set (same seed), so they compare record by record."""
    present = [v for v in VLLM_VERSIONS if VLLM[v] is not None]
    if len(present) < 2:
        pytest.skip("fewer than two vLLM recordings present")
    first = [r["inputs"] for r in VLLM[present[0]]["records"]]
    for v in present[1:]:
        assert [r["inputs"] for r in VLLM[v]["records"]] == first, v


@pytest.mark.parametrize("version", VLLM_VERSIONS)
def test_vllm_recording_covers_both_paths_and_the_interesting_cases(version):
    data = _need(VLLM[version], VLLM_FILES[version])
    main = [r["launches"][0] for r in data["records"]]
    tiles = Counter((m["constexprs"]["IS_3D"], m["constexprs"]["TILE_SIZE"]) for m in main)
    assert tiles[(True, 16)] and tiles[(True, 32)] and tiles[(False, 32)] and tiles[(False, 128)]
    inputs = [r["inputs"] for r in data["records"]]
    assert any(i["batch_invariant"] for i in inputs)
    assert any(i["sliding_window"] == 1024 and i["head_size"] in (128, 256) for i in inputs)
    assert any(max(i["query_lens"]) > 8 for i in inputs)
    assert {max(i["query_lens"]) for i in inputs} >= set(range(1, 10))
    assert {i["q_dtype"] for i in inputs} == {"fp16", "bf16", "fp32", "fp8"}


def test_sglang_recording_covers_the_interesting_cases():
    sg = [r["inputs"] for r in _need(SGLANG, SGLANG_FILE)["records"]]
    assert {i["device_core_count"] for i in sg} == {132, 78, 108, 304}
    assert {i["max_kv_splits"] for i in sg} == {4, 8, 16}
    assert any(i["num_head"] == i["num_kv_head"] for i in sg) and any(i["num_head"] > i["num_kv_head"] for i in sg)
    assert max(len(i["seq_lens"]) for i in sg) >= 300


# ----------------------------------------------------------------------------- vLLM


@pytest.mark.parametrize("version,rec", _vllm_params())
def test_vllm_unified_attention_grid_matches_upstream(version, rec):
    settings = VllmSettings(version=version)  # the recorded release must be one decodecalc models
    i = rec["inputs"]
    launches = rec["launches"]
    main = launches[0]
    assert main["kernel"] == "kernel_unified_attention"
    cx = main["constexprs"]
    got = unified_attention_grid(
        num_tokens=i["num_tokens"],
        seq_lens=tuple(i["seq_lens"]),
        query_lens=tuple(i["query_lens"]),
        num_heads=i["num_heads"],
        num_kv_heads=i["num_kv_heads"],
        head_size=i["head_size"],
        q_dtype_bytes=i["q_dtype_bytes"],
        sliding_window=i["sliding_window"],
        seq_threshold_3D=i["seq_threshold_3D"],
        num_par_softmax_segments=i["num_segments"],
        scratch_rows=i["scratch_rows"],
        batch_invariant=i["batch_invariant"],
        version=settings.version,
        is_sm100=tuple(i["capability"]) == (10, 0),
    )
    upstream = {
        "use_3d": cx["IS_3D"],
        "grid": tuple(main["grid"]),
        "block_m": cx["BLOCK_M"],
        "block_q": cx["BLOCK_Q"],
        "tile_size": cx["TILE_SIZE"],
        "reduce_grid": tuple(launches[1]["grid"]) if len(launches) > 1 else None,
    }
    model = {
        "use_3d": got.use_3d,
        "grid": tuple(got.grid),
        "block_m": got.block_m,
        "block_q": got.block_q,
        "tile_size": got.tile_size,
        "reduce_grid": tuple(got.reduce_grid) if got.reduce_grid is not None else None,
    }
    assert model == upstream
    if cx["IS_3D"]:
        assert cx["NUM_SEGMENTS_PER_SEQ"] == i["num_segments"] == got.grid[2]
        assert launches[1]["kernel"] == "reduce_segments"
        assert launches[1]["constexprs"]["NUM_SEGMENTS_PER_SEQ"] == i["num_segments"]
        assert not got.reasons_2d
    else:
        assert len(launches) == 1 and cx["NUM_SEGMENTS_PER_SEQ"] == 1
        assert got.reasons_2d, "a 2D launch should say why it is not split"


# ----------------------------------------------------------------------------- SGLang


@pytest.mark.parametrize("rec", _sglang_params())
def test_sglang_splits_and_grids_match_upstream(rec):
    i = rec["inputs"]
    lens = tuple(i["seq_lens"])
    g = i["num_group"]
    got = get_num_kv_splits(
        lens,
        num_head=i["num_head"],
        num_kv_head=i["num_kv_head"],
        device_core_count=i["device_core_count"],
        max_kv_splits=i["max_kv_splits"],
        num_group=g,
    )
    recorded = rec["num_kv_splits"]
    assert len(recorded) == len(lens) * g
    # upstream stores sequence j's count at j*num_group + k for every k < num_group
    per_seq = recorded[::g]
    assert all(recorded[j * g + k] == per_seq[j] for j in range(len(lens)) for k in range(g))
    assert tuple(got) == tuple(per_seq)

    split_launch = [la for la in rec["launches"] if la["kernel"] == "get_num_kv_splits_triton"]
    assert len(split_launch) == 1 and split_launch[0]["grid"] == [1]

    if rec["stage1"] is None:  # num_group > 1: split counts only
        assert g > 1
        return
    B, h, hkv, S = len(lens), i["num_head"], i["num_kv_head"], i["max_kv_splits"]
    assert tuple(rec["stage1"]["grid"]) == stage1_grid(B, h, hkv, S)
    expected_kernel = "_fwd_kernel_stage1" if h == hkv else "_fwd_grouped_kernel_stage1"
    assert rec["stage1"]["kernel"] == expected_kernel
    assert rec["stage2"]["kernel"] == "_fwd_kernel_stage2"
    assert tuple(rec["stage2"]["grid"]) == (B, h)
    assert rec["stage2"]["constexprs"]["MAX_KV_SPLITS"] == S
