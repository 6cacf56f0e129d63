"""FlashAttention-2's split decision and grids: decodecalc's model vs flash-attn 2.8.3.post2's own host code.

The oracle (tests/oracles/fa2_driver.cpp) runs upstream's num_splits_heuristic, set_params_splitkv,
run_mha_fwd and mha_fwd_kvcache's statements verbatim (see tests/oracles/build.py). Cases: an
exhaustive sweep of the heuristic around its thresholds and float ties, and several hundred
flash_attn_with_kvcache decode calls (batch, heads, GQA ratio, head size, length, SM count, paged
or contiguous cache, sliding window).
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from helpers import H200, model
from oracle_helpers import oracle, run_lines

from decodecalc.derived import cdiv
from decodecalc.errors import UnsupportedError
from decodecalc.launchers import flash_attn2 as fa2
from decodecalc.workload import make_workload


def _heuristic_cases() -> list[tuple[int, int, int, int]]:
    cases = []
    for n_sm in (2 * 132, 2 * 108, 2 * 78, 2 * 16, 2):
        # around the 0.8 * num_SMs early return, and every work size below it for a few block counts
        edge = int(0.8 * n_sm)
        for a in sorted({1, 2, 3, 5, 7, 11, 24, 48, max(1, edge - 1), edge, edge + 1, n_sm // 2, n_sm - 1}):
            for nb in (1, 2, 3, 7, 8, 11, 12, 16, 33, 64, 100, 127, 128, 129, 300, 4096):
                cases.append((a, n_sm, nb, 128))
    rng = random.Random(2)
    for _ in range(1500):
        n_sm = 2 * rng.choice((132, 108, 78, 114, 16, 170))
        cases.append((rng.randint(1, n_sm), n_sm, rng.randint(1, 600), rng.choice((128, 64, 8, 1))))
    return cases


def test_num_splits_heuristic_matches_upstream():
    exe = oracle("fa2_oracle")
    cases = _heuristic_cases()
    out = run_lines(exe, [f"H {a} {n} {nb} {m}" for a, n, nb, m in cases])
    bad = [(c, int(o), fa2.num_splits_heuristic(*c)) for c, o in zip(cases, out)
           if int(o) != fa2.num_splits_heuristic(*c)]
    assert not bad, f"{len(bad)} of {len(cases)} disagree, first (a, SMs, blocks, max) -> upstream, model: {bad[:5]}"


HEADS = ((32, 8), (32, 32), (64, 8), (16, 8), (8, 1), (40, 8), (28, 4), (128, 128), (96, 8), (16, 16), (64, 4),
         (14, 2), (128, 8))
HEAD_SIZES = (64, 80, 96, 112, 128, 136, 160, 192, 200, 256, 72, 32)
LENS = (1, 17, 64, 255, 256, 257, 300, 1000, 2048, 4096, 8191, 16384, 32768, 131072)


def _kvcache_cases() -> list[dict]:
    rng = random.Random(7)
    cases = []
    for _ in range(600):
        h, hk = rng.choice(HEADS)
        cases.append(dict(B=rng.choice((1, 2, 3, 4, 7, 8, 16, 32, 64, 128, 256)), h=h, hk=hk,
                          d=rng.choice(HEAD_SIZES), L=rng.choice(LENS) + rng.choice((0, 0, 1, 37)),
                          sms=rng.choice((132, 108, 78, 16, 1)), paged=rng.random() < 0.4,
                          window=rng.choice((None, None, None, 4096, 1024))))
    # the early-return edge: B * h_k * 1 m-block against 0.8 * 2 * 132 = 211.2
    for B in (26, 27):
        cases.append(dict(B=B, h=64, hk=8, d=128, L=8192, sms=132, paged=False, window=None))
    return cases


def _model(c: dict):
    m = model(c["h"], c["hk"], d=c["d"], sliding_window=c["window"])
    w = make_workload(m, batch=c["B"], seq_len=c["L"], block_size=256 if c["paged"] else 16)
    gpu = dataclasses.replace(H200, num_sms=c["sms"])
    return w, fa2.plan_flash_attn2(w, gpu, entry="kvcache", layer="sliding" if c["window"] else "global",
                                   paged=c["paged"])


def _line(c: dict) -> str:
    page = 256 if c["paged"] else 1
    blocks = cdiv(c["L"], 256) if c["paged"] else 0  # block table as wide as the longest sequence needs
    wl, wr = (c["window"] - 1, 0) if c["window"] else (-1, -1)  # vLLM/FA window_size = (W - 1, 0)
    return (f"K {c['B']} 1 {c['h']} {c['hk']} {c['d']} {wl} {wr} {int(c['paged'])} {c['L']} {page} {blocks} "
            f"0 {c['sms']}")


def test_kvcache_decode_matches_upstream():
    exe = oracle("fa2_oracle")
    cases = _kvcache_cases()
    out = run_lines(exe, [_line(c) for c in cases])
    bad, checked = [], 0
    for c, o in zip(cases, out):
        try:
            w, p = _model(c)
        except UnsupportedError:
            continue  # head sizes FA2 does not compile (not a multiple of 8, or over 256)
        assert not o.startswith("error"), (c, o)
        sw, seqlen_k, d_round, S, split, hdim, block_n, gx, gy, gz, comb = map(int, o.split())
        want = {
            "swapped": bool(sw) == p.details.seqlenq_ngroups_swapped,
            "num_splits": S == p.splits[0],
            "kBlockN": not split or block_n == p.details.kBlockN,
            "kernel": (p.kernels[0].name == "flash_fwd_splitkv_kernel") == bool(split),
            "grid": (gy, gz) == tuple(p.kernels[0].grid[1:]) and (not split or gx == p.kernels[0].grid[0]),
            "combine": S <= 1 or (len(p.kernels) > 1 and comb == p.kernels[1].grid[0]),
            "partial_state": p.partial_state_bytes == (S * c["B"] * c["h"] * (4 * d_round + 4) if S > 1 else 0),
        }
        checked += 1
        if not all(want.values()):
            bad.append((c, o, [k for k, v in want.items() if not v]))
    assert checked >= 400
    assert not bad, f"{len(bad)} of {checked} disagree; first: {bad[:3]}"


@pytest.mark.parametrize("d,rounded", [(128, 128), (136, 192), (160, 192), (192, 192), (200, 256), (256, 256)])
def test_head_size_rounded(d, rounded):
    # flash_api.cpp 2.8.3.post2 L1324: round_multiple(head_size, head_size <= 128 ? 32 : 64)
    assert fa2.head_size_rounded(d) == rounded
