"""GPU table: every row present and sourced, known figures, lookups and overrides."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decodecalc.errors import ConfigError, UnknownNameError
from decodecalc.specs.gpus import GPUS, GPUSpec, gpu_table, resolve_gpu

MiB = 1 << 20

NAMES = {
    "h100-sxm", "h100-pcie", "h200", "h20", "a100-40gb", "a100-80gb", "l40s", "l4", "a10g", "rtx-4090",
    "b200", "gb200", "mi300x", "mi325x", "mi355x",
}

# reference/peers-and-user-needs.md section 5; compute capability from NVIDIA's CUDA GPU list
EXPECTED = {
    # name: (SMs/CUs, bandwidth GB/s, dense BF16 TFLOP/s, compute capability or gfx arch)
    "a100-40gb": (108, 1555, 312, (8, 0)),
    "a100-80gb": (108, 2039, 312, (8, 0)),
    "h100-sxm": (132, 3350, 989, (9, 0)),
    "h100-pcie": (114, 2000, 756, (9, 0)),
    "h200": (132, 4800, 989, (9, 0)),
    "h20": (78, 4000, 148, (9, 0)),
    "l40s": (142, 864, 362, (8, 9)),
    "l4": (58, 300, 121, (8, 9)),
    "a10g": (80, 600, 70, (8, 6)),
    "rtx-4090": (128, 1008, 165.2, (8, 9)),
    "b200": (148, 8000, 2250, (10, 0)),
    "gb200": (148, 8000, 2500, (10, 0)),
    "mi300x": (304, 5300, 1307.4, "gfx942"),
    "mi325x": (304, 6000, 1307.4, "gfx942"),
    "mi355x": (256, 8000, 2516.6, "gfx950"),
}

L2_MIB = {"h100-sxm": 50, "h100-pcie": 50, "h200": 50, "h20": 60,  # h20: deviceQuery reports, unverified
          "a100-40gb": 40, "a100-80gb": 40, "l40s": 96, "l4": 48,
          "a10g": 6, "rtx-4090": 72, "b200": 126.5, "gb200": 126.5,
          # AMD: L2 only, 4 MiB per XCD x 8 XCDs; the 256 MiB Infinity Cache is not counted
          "mi300x": 32, "mi325x": 32, "mi355x": 32}


def test_all_fifteen_rows_present_and_unique() -> None:
    names = [g.name for g in GPUS]
    assert len(names) == len(set(names))
    assert NAMES <= set(names)


@pytest.mark.parametrize("gpu", GPUS, ids=[g.name for g in GPUS])
def test_every_row_is_complete_and_sourced(gpu: GPUSpec) -> None:
    assert gpu.name == gpu.name.lower()
    assert len(gpu.source) > 20, f"{gpu.name} has no real source text"
    assert gpu.num_sms > 0 and gpu.l2_bytes > 0 and gpu.memory_bytes >= 16 * 10**9
    assert gpu.bf16_dense_flops_per_s > 1e13 and gpu.hbm_bandwidth_bytes_per_s > 1e11
    if gpu.vendor == "nvidia":
        assert gpu.compute_capability is not None and gpu.gfx_arch is None and not gpu.is_rocm
    else:
        assert gpu.vendor == "amd" and gpu.is_rocm
        assert gpu.compute_capability is None and gpu.gfx_arch is not None


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_known_figures(name: str) -> None:
    sms, bw_gbs, tflops, arch = EXPECTED[name]
    gpu = resolve_gpu(name)
    assert gpu.num_sms == sms
    assert gpu.hbm_bandwidth_bytes_per_s == pytest.approx(bw_gbs * 1e9)
    assert gpu.bf16_dense_flops_per_s == pytest.approx(tflops * 1e12)
    assert (gpu.gfx_arch if isinstance(arch, str) else gpu.compute_capability) == arch
    assert gpu.l2_bytes == int(L2_MIB[name] * MiB)


def test_h100_ridge_point_matches_the_chapter() -> None:
    # decode-attention-chapter.txt: "Against the H100's ridge of I* = 295"
    assert resolve_gpu("h100-sxm").ridge_flop_per_byte == pytest.approx(295, abs=1)
    # and H20, the low-ridge part the reference warns about, is far below it
    assert resolve_gpu("h20").ridge_flop_per_byte < 40


@pytest.mark.parametrize(
    ("spelling", "name"),
    [("H100", "h100-sxm"), ("h100_sxm", "h100-sxm"), ("NVIDIA H100 SXM", "h100-sxm"), ("A100", "a100-80gb"),
     ("4090", "rtx-4090"), ("h200-sxm", "h200"), ("AMD Instinct MI300X", "mi300x"), ("B200", "b200")],
)
def test_aliases_and_spellings(spelling: str, name: str) -> None:
    assert resolve_gpu(spelling).name == name


def test_aliases_never_shadow_a_row_name() -> None:
    names = {g.name for g in GPUS}
    aliases = [a for g in GPUS for a in g.aliases]
    assert len(aliases) == len(set(aliases))
    assert not names & set(aliases)
    assert len(gpu_table()) == len(names) + len(aliases)


def test_unknown_gpu_suggests_close_names() -> None:
    with pytest.raises(UnknownNameError) as info:
        resolve_gpu("h100-sx")
    assert "h100-sxm" in info.value.suggestions
    assert "mi355x" in info.value.known


def test_overrides_replace_only_their_field() -> None:
    base = resolve_gpu("h100-sxm")
    mig = resolve_gpu("h100-sxm", sms=16, bandwidth_bytes_per_s=1.0e12)
    assert (mig.num_sms, mig.hbm_bandwidth_bytes_per_s) == (16, 1.0e12)
    assert mig.ridge_flop_per_byte == pytest.approx(989)
    assert dataclasses.replace(mig, num_sms=132, hbm_bandwidth_bytes_per_s=3350e9) == base
    assert resolve_gpu("h100-sxm").num_sms == 132  # the table row is untouched


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"sms": 0}, "--sms"), ({"sms": -4}, "--sms"), ({"bandwidth_bytes_per_s": 0.0}, "--bandwidth"),
     ({"bandwidth_bytes_per_s": -1e12}, "--bandwidth"), ({"bandwidth_bytes_per_s": math.nan}, "--bandwidth"),
     ({"bandwidth_bytes_per_s": math.inf}, "--bandwidth"), ({"sms": 4097}, "--sms 4097 is over the supported 4,096")],
)
def test_override_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_gpu("h200", **kwargs)


@given(name=st.sampled_from(sorted(NAMES)), sms=st.integers(1, 4096),
       bandwidth=st.floats(1e9, 1e14, allow_nan=False, allow_infinity=False))
def test_override_property(name: str, sms: int, bandwidth: float) -> None:
    gpu = resolve_gpu(name, sms=sms, bandwidth_bytes_per_s=bandwidth)
    row = resolve_gpu(name)
    assert (gpu.num_sms, gpu.hbm_bandwidth_bytes_per_s) == (sms, bandwidth)
    assert gpu.ridge_flop_per_byte == pytest.approx(row.bf16_dense_flops_per_s / bandwidth)
    assert (gpu.l2_bytes, gpu.compute_capability, gpu.source) == (row.l2_bytes, row.compute_capability, row.source)


def test_invalid_rows_are_rejected() -> None:
    row = resolve_gpu("l4")
    with pytest.raises(ConfigError, match="SM count"):
        dataclasses.replace(row, num_sms=0)
    with pytest.raises(ConfigError, match="vendor"):
        dataclasses.replace(row, vendor="intel")
