"""FlashAttention-3's split decision: decodecalc's model vs hopper/flash_api.cpp's own host code.

FA3 (hopper/) ships in no release archive on the package index, so CI skips this file; with a
checkout of Dao-AILab/flash-attention at 0251105a copied to oracles/flash-attention-0251105a/hopper/
(docs/oracles.md), tests/oracles/build.py compiles heuristics.h, tile_size.h and flash.h unmodified
with the verbatim get_pagedkv_tma, get_pack_gqa, get_num_splits and mha_fwd's window/causal
statements (tests/oracles/fa3_driver.cpp). The per-batch dynamic splits (prepare_varlen_num_blocks)
run on the GPU and are not covered here.
"""

from __future__ import annotations

import dataclasses
import random

from helpers import H200, model
from oracle_helpers import oracle, run_lines

from decodecalc.errors import UnsupportedError
from decodecalc.launchers import flash_attn3 as fa3
from decodecalc.workload import make_workload


def _cases():
    rng = random.Random(23)
    out = []
    for _ in range(800):
        h_kv = rng.choice((1, 2, 4, 8, 16))
        g = rng.choice((1, 2, 4, 6, 8, 16))
        d = rng.choice((64, 80, 96, 128, 192, 256))
        out.append(dict(B=rng.choice((1, 2, 3, 8, 16, 64, 256)), h=h_kv * g, hk=h_kv, d=d,
                        L=rng.choice((1, 100, 512, 1000, 4096, 32768, 131072, 1 << 20)) + rng.randint(0, 3),
                        page=rng.choice((16, 64, 256, 0)), window=rng.choice((None, None, 4096, 1024, 128)),
                        fp8=rng.random() < 0.15, sms=rng.choice((132, 114, 78)), varlen=rng.random() < 0.8,
                        splits=rng.choice((0, 0, 0, 32))))
    return out


def _line(c: dict) -> str:
    wl, wr = (c["window"] - 1, 0) if c["window"] else (-1, -1)  # vLLM: window_size = (W - 1, 0) or (-1, -1)
    return (f"{c['B']} 1 {c['h']} {c['hk']} {c['d']} {c['d']} {c['L']} {c['page']} {wl} {wr} 1 {int(c['fp8'])} "
            f"{c['sms']} {int(c['varlen'])} {c['splits']}")


def test_split_decision_matches_upstream():
    exe = oracle("fa3_oracle", "FA3's hopper/ sources are in no PyPI archive; copy them from a checkout "
                               "(docs/oracles.md) and run python tests/oracles/build.py")
    cases = _cases()
    out = run_lines(exe, [_line(c) for c in cases])
    bad, checked = [], 0
    for c, o in zip(cases, out):
        m = model(c["h"], c["hk"], d=c["d"], sliding_window=c["window"])
        w = make_workload(m, batch=c["B"], seq_len=c["L"], block_size=c["page"] or 16,
                          kv_cache_dtype="fp8" if c["fp8"] else "auto")
        gpu = dataclasses.replace(H200, num_sms=c["sms"])
        try:
            p = fa3.plan_flash_attn3(w, gpu, varlen=c["varlen"], paged=c["page"] > 0, num_splits=c["splits"],
                                     layer="sliding" if c["window"] else "global")
        except UnsupportedError:
            continue
        d_r, dv_r, causal, local, tma, kM, kN, S, pack = map(int, o.split())
        dt = p.details
        checks = {"pagedkv_tma": bool(tma) == dt["pagedkv_tma"], "kBlockM": kM == dt["kBlockM"],
                  "kBlockN": kN == dt["kBlockN"], "num_splits": S == dt["num_splits_static"],
                  "pack_gqa": bool(pack) == dt["pack_gqa"]}
        checked += 1
        if not all(checks.values()):
            bad.append((c, o, [k for k, v in checks.items() if not v]))
    assert checked >= 600
    assert not bad, f"{len(bad)} of {checked} disagree; first: {bad[:3]}"
