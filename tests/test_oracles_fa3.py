"""FlashAttention-3's split decision: decodecalc's model vs the host code of vLLM's fork of FlashAttention.

vLLM builds FA3 from its fork, vllm-project/flash-attention; vLLM 0.33 pins fork commit b273a026, which is
not available, so the oracle runs 617264c1, the closest commit we have. FA3 (hopper/) ships in no release
archive on the package index, so CI skips this file; with the fork's files copied to
oracles/vllm-flash-attention-617264c1/hopper/ (docs/oracles.md), tests/oracles/build.py compiles
heuristics.h (use_one_mma_wg, should_pack_gqa, num_splits_heuristic), tile_size.h and flash.h unmodified
with the verbatim get_pagedkv_tma, get_pack_gqa, get_num_splits, mha_fwd's window/causal statements and
its split/PackGQA statements (pack_gqa |= d == d_v under vLLM's FLASHATTENTION_PACKGQA_ONLY; no split above
992 sequences) (tests/oracles/fa3_driver.cpp). The cases are varlen calls, as vLLM makes them (its build is
FLASHATTENTION_VARLEN_ONLY); they cover bf16 and fp8 (element size 1) caches, one- and multi-token queries
on both sides of the one-MMA-warp-group condition (seqlen_q * h / h_k <= 64 for hdim 64 and 128), and
batches over 992. The per-batch dynamic split count (prepare_varlen_num_blocks) runs on the GPU; the last test
checks it, and the tile, against every FA3 launch of vLLM 0.33.0's build captured on the H200 (that build's fork
commit, b273a026, is the one the oracle cannot run): the tile shape in the kernel's name and the split counts and
PackGQA rows read back from the scheduler metadata.
"""

from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path

import pytest
from capture_records import workload_of
from helpers import H200, model
from oracle_helpers import oracle, run_lines

from decodecalc.errors import UnsupportedError
from decodecalc.launchers import flash_attn3 as fa3
from decodecalc.verify import profiler as P
from decodecalc.workload import make_workload

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
CAPTURES = ("capture-backends-h200.jsonl", "sweep-backends-h200.jsonl", "fp8-backends-fa3-h200.jsonl.gz",
            "capture-fa3-short-tiles-h200.jsonl")
#: CollectiveMainloopFwdSm90<kStages, ClusterShape, TileShape_MNK = (kBlockM, kBlockN, kHeadDim), ...>
TILE = re.compile(r"CollectiveMainloopFwdSm90<\d+, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, "
                  r"cute::tuple<cute::C<(\d+)>, cute::C<(\d+)>, cute::C<\d+> >")


def _cases():
    rng = random.Random(23)
    out = []
    for _ in range(800):
        h_kv = rng.choice((1, 2, 4, 8, 16))
        g = rng.choice((1, 2, 4, 6, 8, 16, 32, 64, 128)) if h_kv <= 2 else rng.choice((1, 2, 4, 6, 8, 16))
        d = rng.choice((64, 64, 80, 96, 128, 128, 192, 256))
        out.append(dict(B=rng.choice((1, 2, 3, 8, 16, 64, 256, 1024)), h=h_kv * g, hk=h_kv, d=d,
                        L=rng.choice((1, 100, 512, 1000, 4096, 32768, 131072, 1 << 20)) + rng.randint(0, 3),
                        q=rng.choice((1, 1, 1, 1, 2, 4, 8)),
                        page=rng.choice((16, 64, 256, 0)), window=rng.choice((None, None, 4096, 1024, 128)),
                        fp8=rng.random() < 0.3, sms=rng.choice((132, 114, 78)), splits=rng.choice((0, 0, 0, 32))))
    return out


def _workload(c: dict):
    m = model(c["h"], c["hk"], d=c["d"], sliding_window=c["window"])
    return make_workload(m, batch=c["B"], seq_len=c["L"], query_lens=(min(c["q"], c["L"]),) * c["B"],
                         block_size=c["page"] or 16, kv_cache_dtype="fp8" if c["fp8"] else "auto")


def _line(c: dict, w) -> str:
    wl, wr = (c["window"] - 1, 0) if c["window"] else (-1, -1)  # vLLM: window_size = (W - 1, 0) or (-1, -1)
    return (f"{c['B']} {w.max_seqlen_q} {c['h']} {c['hk']} {c['d']} {c['d']} {w.max_seqlen_k} {c['page']} "
            f"{wl} {wr} 1 {int(c['fp8'])} {c['sms']} 1 {c['splits']}")


def test_split_decision_matches_upstream():
    exe = oracle("fa3_oracle", "FA3's hopper/ sources are in no PyPI archive; copy them from vLLM's fork "
                               "(docs/oracles.md) and run python tests/oracles/build.py")
    cases = _cases()
    works = [_workload(c) for c in cases]
    out = run_lines(exe, [_line(c, w) for c, w in zip(cases, works)])
    bad, checked = [], 0
    seen = {"fp8": 0, "one_wg": 0, "two_wg": 0, "no_split_992": 0}
    for c, w, o in zip(cases, works, out):
        gpu = dataclasses.replace(H200, num_sms=c["sms"])
        try:
            p = fa3.plan_flash_attn3(w, gpu, paged=c["page"] > 0, num_splits=c["splits"],
                                     layer="sliding" if c["window"] else "global")
        except UnsupportedError:
            continue
        d_r, dv_r, causal, local, tma, kM, kN, S, pack, one_wg, dyn = map(int, o.split())
        dt = p.details
        checks = {"pagedkv_tma": bool(tma) == dt.pagedkv_tma, "kBlockM": kM == dt.kBlockM,
                  "kBlockN": kN == dt.kBlockN, "num_splits": S == dt.num_splits_static,
                  "pack_gqa": bool(pack) == dt.pack_gqa, "use_one_mma_wg": bool(one_wg) == dt.use_one_mma_wg,
                  "dynamic_split": bool(dyn) == (dt.num_splits_static > 1),
                  "element_size": dt.element_size == (1 if c["fp8"] else 2)}
        checked += 1
        seen["fp8"] += c["fp8"]
        seen["one_wg" if one_wg else "two_wg"] += c["d"] in (64, 128)
        seen["no_split_992"] += c["B"] > 992 and c["splits"] > 1  # split 32 asked, none made (L1070)
        if not all(checks.values()):
            bad.append((c, o, [k for k, v in checks.items() if not v]))
    assert checked >= 600
    assert not bad, f"{len(bad)} of {checked} disagree; first: {bad[:3]}"
    assert min(seen.values()) >= 20, seen  # every branch the fork added is exercised


def test_non_varlen_calls_are_refused():
    # vLLM's build defines FLASHATTENTION_VARLEN_ONLY: VARLEN_SWITCH rejects a call without cu_seqlens / seqused
    w = make_workload(model(32, 8), batch=1, seq_len=2560)
    with pytest.raises(UnsupportedError, match="varlen"):
        fa3.plan_flash_attn3(w, H200, varlen=False)


def test_captured_tiles_and_dynamic_splits_match():
    """Every FA3 launch of vLLM 0.33.0's build captured on the H200 (bf16 and fp8 caches, hdim 64/128/256, eager
    and CUDA graphs, swept num_splits): the kernel's tile is the model's (one MMA warp group: 64 x 192 for hdim 64,
    64 x 128 for 128, fp8 64 x 96 and 64 x 128), and the scheduler metadata read back holds the model's rows per
    sequence (seqlen_q times g under PackGQA), its dynamic split counts (flash_prepare_scheduler.cu L142-164) and
    one more vector when causal (head swizzle), in the order of flash_api.cpp L1106."""
    n = {"tile": 0, "splits": 0, "fp8": 0}
    for name in CAPTURES:
        for r in P.read_capture_records(RESULTS / name):
            if r["backend"] != "fa3" or "error" in r:
                continue
            w = workload_of(r)
            arg = (r.get("knobs") or {}).get("num_splits", (r.get("info") or {}).get("num_splits_arg", 0))
            p = fa3.plan_flash_attn3(w, H200, num_splits=int(arg or 0))
            main = next(x["name"] for x in r["launches"] if "FlashAttnFwdSm90" in x["name"])
            tile = TILE.search(main)
            assert tile, main[:200]
            assert (int(tile[1]), int(tile[2])) == (p.details.kBlockM, p.details.kBlockN), (name, r["shape"])
            n["tile"] += 1
            n["fp8"] += p.details.element_size == 1
            meta = r["readback"]["scheduler_metadata"]
            b4 = -(-w.batch // 4) * 4
            split = p.details.num_splits_static > 1
            swizzle = any(e.name == "is_causal" and e.value for e in p.explain)
            assert len(meta) - b4 * (1 + split + swizzle) in (0, 1), (name, r["shape"], len(meta))  # (+ semaphore)
            g = w.group_size if p.details.pack_gqa else 1
            assert meta[:w.batch] == [q * g for q in w.query_lens], (name, r["shape"])
            if split:
                assert tuple(meta[b4:b4 + w.batch]) == p.splits, (name, r["shape"])
                n["splits"] += 1
    assert n["tile"] >= 1400 and n["splits"] >= 1300 and n["fp8"] >= 400, n
