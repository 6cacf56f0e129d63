"""aiter's unified-attention launch: decodecalc's model vs aiter's own ``unified_attention``.

The package index has one aiter release, amd-aiter 0.1.7.post2.dev18 (2025-11); decodecalc's default
plan (``plan_aiter``) mirrors a newer repository commit (e4048607, 2026-08) that has no release, and
``plan_aiter_release`` mirrors the release. Here the release's aiter/ops/triton/unified_attention.py
is imported unmodified, its aiter imports answered by stand-ins (``get_num_sms`` is the CU count;
the three Triton kernels record the grid they are launched with; ``torch.empty`` only records
shapes), and ``unified_attention`` itself runs on shape-only tensors.

With ``DECODECALC_AITER_SRC`` pointing at a checkout of the repository at e4048607, the same check
runs the default plan against that file's selection functions (run by hand; CI reaches only PyPI).
"""

from __future__ import annotations

import dataclasses
import random
import types

import pytest
from helpers import H200, model
from oracle_helpers import exec_with_stubs, source

from decodecalc.launchers import aiter
from decodecalc.workload import make_workload

torch = pytest.importorskip("torch")


def _next_power_of_2(n: int) -> int:
    """triton.next_power_of_2, bit for bit (triton/__init__.py); triton itself is not imported here, since
    importing it before the verify tests set TRITON_INTERPRET=1 would fix its mode for the session."""
    n -= 1
    n |= n >> 1
    n |= n >> 2
    n |= n >> 4
    n |= n >> 8
    n |= n >> 16
    n |= n >> 32
    n += 1
    return n


triton = types.SimpleNamespace(next_power_of_2=_next_power_of_2, cdiv=lambda a, b: (a + b - 1) // b)

MI300 = dataclasses.replace(H200, name="mi300x", vendor="amd", num_sms=304, compute_capability=None, gfx_arch="gfx942")


class _Shape:
    """A tensor as unified_attention reads it: shape, element size, length."""

    def __init__(self, *shape: int, element_size: int = 2) -> None:
        self.shape = tuple(shape)
        self._es = element_size
        self.device = "meta"

    def element_size(self) -> int:
        return self._es

    def stride(self, i: int) -> int:
        return 0  # passed through to the (recording) kernel only

    def __len__(self) -> int:
        return self.shape[0]


class _Kernel:
    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def __getitem__(self, grid):
        return lambda *a, **kw: self.log.append((self.name, tuple(grid), kw))


@pytest.fixture(scope="module")
def release():
    path = source("amd_aiter-0.1.7.post2.dev18/aiter/ops/triton/unified_attention.py")
    log: list = []
    cus = {"n": 304}
    kernels = types.SimpleNamespace(**{n: _Kernel(n, log) for n in
                                       ("kernel_unified_attention_2d", "kernel_unified_attention_3d",
                                        "reduce_segments")})
    stubs = {name: types.ModuleType(name) for name in ("aiter", "aiter.ops", "aiter.ops.triton",
                                                         "aiter.ops.triton.utils", "aiter.ops.triton._triton_kernels")}
    stubs["aiter.ops.triton.utils.device_info"] = types.SimpleNamespace(get_num_sms=lambda: cus["n"])
    stubs["triton"] = triton  # type: ignore[assignment]
    stubs["aiter.ops.triton._triton_kernels.unified_attention"] = kernels
    mod = exec_with_stubs(path, "oracle_aiter_release_unified_attention", stubs)
    mod.torch = types.SimpleNamespace(float32=torch.float32, empty=lambda *shape, **kw: _Shape(*shape))
    return mod, log, cus


def _cases():
    rng = random.Random(17)
    out = []
    for _ in range(500):
        h_kv = rng.choice((1, 2, 4, 8))
        g = rng.choice((1, 2, 4, 5, 8, 16, 32))
        B = rng.choice((1, 2, 3, 8, 16, 64, 128, 256))
        q = rng.choice((1, 1, 1, 2, 4))
        out.append(dict(B=B, h=h_kv * g, hk=h_kv, d=rng.choice((64, 128, 256)), q=q,
                        L=rng.choice((1, 100, 512, 513, 1000, 4096, 32768, 131072)) + q,
                        block=rng.choice((16, 32, 64, 1, 128)), cus=rng.choice((304, 80, 256, 20)),
                        window=rng.choice((None, None, None, 4096))))
    return out


def test_release_launch_matches_upstream(release):
    mod, log, cus = release
    bad = []
    cases = _cases()
    for c in cases:
        B, q = c["B"], c["q"]
        T = B * q
        cus["n"] = c["cus"]
        log.clear()
        wl = c["window"] - 1 if c["window"] else -1  # vLLM's window_size = (W - 1, 0), (-1, -1) without
        mod.unified_attention(
            _Shape(T, c["h"], c["d"]), _Shape(1, c["block"], c["hk"], c["d"]), _Shape(1, c["block"], c["hk"], c["d"]),
            _Shape(T, c["h"], c["d"]), None, q, _Shape(B), c["L"], 1.0, True, (wl, 0 if c["window"] else -1),
            _Shape(B, 1), 0.0, None, None, None)
        w = make_workload(model(c["h"], c["hk"], d=c["d"], sliding_window=c["window"]), batch=B, seq_len=c["L"],
                          block_size=c["block"], num_speculative_tokens=q - 1)
        gpu = dataclasses.replace(MI300, num_sms=c["cus"])
        p = aiter.plan_aiter_release(w, gpu, layer="sliding" if c["window"] else "global")
        ours = [(k.name, tuple(k.grid)) for k in p.kernels]
        theirs = [(name, grid) for name, grid, _ in log]
        ok = ours == theirs
        if ok and p.details.path == "3D":
            kw = log[0][2]
            ok = kw["TILE_SIZE"] == p.details.TILE_SIZE and kw["NUM_SEGMENTS_PER_SEQ"] == p.details.NUM_SEGMENTS
        elif ok:
            kw = log[0][2]
            ok = kw["TILE_SIZE"] == p.kernels[0].constexprs["TILE_SIZE"] and kw["BLOCK_M"] == p.kernels[0].constexprs[
                "BLOCK_M"]
        if not ok:
            bad.append((c, theirs, ours))
    assert len(cases) == 500
    assert not bad, f"{len(bad)} of {len(cases)} disagree; first: {bad[:3]}"


# ------------------------------------------- the repository commit plan_aiter mirrors (run by hand)


def _commit_functions():
    import ast
    import math
    import os
    from pathlib import Path

    src = os.environ.get("DECODECALC_AITER_SRC")
    if not src or not Path(src).is_file():
        pytest.skip("set DECODECALC_AITER_SRC to aiter/ops/triton/attention/unified_attention.py at e4048607 "
                    "(a repository checkout; no release ships it)")
    text = Path(src).read_text()
    ns = {"math": math, "triton": triton, "torch": torch, "IS_DEVICE_ARCH_GFX12": False, "DEVICE_ARCH": "gfx942",
          "get_arch": lambda: types.SimpleNamespace(name="gfx942", is_rdna=False),
          "e4m3_dtype": torch.float8_e4m3fnuz}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name in ("use_2d_kernel", "select_3d_config"):
            exec(compile(ast.get_source_segment(text, node), src, "exec"), ns)  # verbatim
    return ns


def test_commit_decode_selection_matches_upstream():
    ns = _commit_functions()
    bad = []
    for c in _cases():
        if c["q"] != 1 or c["block"] not in (16, 32, 64, 128):
            continue
        w = make_workload(model(c["h"], c["hk"], d=c["d"], sliding_window=c["window"]), batch=c["B"], seq_len=c["L"],
                          block_size=c["block"])
        gpu = dataclasses.replace(MI300, num_sms=c["cus"])
        # unified_attention's own statements for an all-decode batch (e4048607 L400-406)
        target = c["cus"] * 4
        num_2d = c["B"] * c["hk"]
        sliding = c["window"] if c["window"] else 0  # SLIDING_WINDOW = 1 + window_size[0]
        use_2d = ns["use_2d_kernel"](c["d"], sliding, True, 1, c["L"], target, num_2d)
        p = aiter.plan_aiter(w, gpu, layer="sliding" if c["window"] else "global")
        if use_2d:
            ok = p.details.path == "2D"
        else:
            attn, _ = ns["select_3d_config"](c["d"], c["block"], c["L"], target, num_2d, torch.bfloat16,
                                             torch.bfloat16)
            ok = (p.details.path == "3D" and p.details.NUM_SEGMENTS == attn["NUM_SEGMENTS_PER_SEQ"]
                  and p.details.TILE_SIZE == attn["TILE_SIZE"] and p.grid == (c["B"], c["hk"], p.details.NUM_SEGMENTS))
        if not ok:
            bad.append((c, use_2d, p.details))
    assert not bad, f"{len(bad)} disagree; first: {bad[:3]}"
