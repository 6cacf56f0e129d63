"""FlashInfer's CUDA-core decode plan: decodecalc's model vs flashinfer-python 0.7.2.post1's own host code.

The oracle (tests/oracles/flashinfer_driver.cu) runs scheduler.cuh's DecodePlanImpl, the work
estimation, the binary search over pages per chunk and DecodeSplitKVIndptr unmodified; the SM count,
compute capability and cudaOccupancyMaxActiveBlocksPerMultiprocessor are inputs (the one number
that needs the GPU). It also reports the threads and shared memory the plan passes to the
occupancy query, which decodecalc's occupancy bound is computed from.
"""

from __future__ import annotations

import dataclasses
import random

from helpers import H200, model
from oracle_helpers import oracle, run_lines

from decodecalc.derived import cdiv
from decodecalc.launchers import flashinfer as fi
from decodecalc.workload import make_workload

HEADS = ((32, 8), (32, 32), (64, 8), (16, 8), (8, 1), (48, 8), (24, 4), (128, 8), (16, 16), (12, 2), (6, 1),
         (32, 2), (64, 64), (4, 4), (40, 8), (28, 4), (96, 8))  # the last three: groups 5, 7, 12 (not compiled)
LENS = (1, 2, 15, 16, 17, 127, 128, 129, 255, 1000, 2560, 4096, 8191, 32768, 131072)


def _cases() -> list[dict]:
    rng = random.Random(11)
    cases = []
    for _ in range(700):
        h, hk = rng.choice(HEADS)
        B = rng.choice((1, 2, 3, 4, 5, 8, 13, 16, 32, 64, 100, 128, 256))
        ragged = rng.random() < 0.4
        lens = tuple(rng.choice(LENS) + rng.randint(0, 3) for _ in range(B)) if ragged else \
            (rng.choice(LENS) + rng.choice((0, 1)),) * B
        cases.append(dict(h=h, hk=hk, d=rng.choice((64, 128, 256)), lens=lens, page=rng.choice((1, 16, 16, 32, 64)),
                          fp8=rng.random() < 0.2, graph=rng.random() < 0.3, sms=rng.choice((132, 108, 78, 16, 1)),
                          occ=rng.choice((1, 2, 3, 4, 8, 9, 12)), cc=rng.choice(((9, 0), (8, 0), (8, 9), (10, 0)))))
    # the no-split edge: batch * num_kv_heads against num_blocks_per_sm * num_sm
    for B in (65, 66, 67):
        cases.append(dict(h=32, hk=8, d=128, lens=(4096,) * B, page=16, fp8=False, graph=False, sms=132, occ=4,
                          cc=(9, 0)))
    return cases


def _line(c: dict) -> str:
    pages = [cdiv(L, c["page"]) for L in c["lens"]]
    return (f"D {c['d']} {c['h'] // c['hk']} {c['h']} {1 if c['fp8'] else 2} {c['page']} {int(c['graph'])} {c['sms']} "
            f"{c['occ']} {c['cc'][0]} {c['cc'][1]} {len(pages)} " + " ".join(map(str, pages)))


def test_decode_plan_matches_upstream():
    exe = oracle("flashinfer_oracle")
    cases = _cases()
    out = run_lines(exe, [_line(c) for c in cases])
    bad, checked = [], 0
    for c, o in zip(cases, out):
        m = model(c["h"], c["hk"], d=c["d"])
        w = make_workload(m, seq_lens=c["lens"], block_size=c["page"], kv_cache_dtype="fp8" if c["fp8"] else "auto")
        gpu = dataclasses.replace(H200, num_sms=c["sms"], compute_capability=c["cc"])
        g = c["h"] // c["hk"]
        if g not in fi.GROUP_SIZES:
            assert o.startswith("error"), (c, o)  # upstream rejects the group size too
            continue
        assert not o.startswith("error"), (c, o)
        vals = list(map(int, o.split()))
        split, max_grid, chunk, new_bs, padded, gdy, threads, smem = vals[:8]
        chunks = tuple(vals[8:])
        p = fi.plan_flashinfer(w, gpu, occupancy=c["occ"], cuda_graph=c["graph"])
        d = p.details
        want_threads, want_smem = fi.decode_kernel_resources(w, gpu.compute_capability)
        checks = {
            "split_kv": bool(split) == d.split_kv,
            "max_grid_size": max_grid == d.max_grid_size,
            "kv_chunk_size_in_pages": chunk == d.kv_chunk_size_in_pages,
            "padded_batch_size": padded == d.padded_batch_size,
            "new_batch_size": new_bs == d.new_batch_size,
            "grid": (padded, gdy) == tuple(p.kernels[0].grid),
            "chunks": (chunks if split else (1,) * len(chunks)) == p.splits,
            "threads": threads == want_threads,
            "smem": smem == want_smem,
        }
        checked += 1
        if not all(checks.values()):
            bad.append((c, o[:80], [k for k, v in checks.items() if not v]))
    assert checked >= 500
    assert not bad, f"{len(bad)} of {checked} disagree; first: {bad[:3]}"


# ------------------------------------------------------------------ tensor-core decode (the prefill plan)


def _tc_cases() -> list[dict]:
    rng = random.Random(13)
    cases = []
    for _ in range(500):
        h, hk = rng.choice(HEADS)
        B = rng.choice((1, 2, 3, 4, 8, 13, 16, 32, 64, 128))
        q = rng.choice((1, 1, 1, 2, 4, 8))
        ragged = rng.random() < 0.3
        lens = tuple(rng.choice(LENS) + rng.randint(q, q + 3) for _ in range(B)) if ragged else \
            (rng.choice(LENS) + q,) * B
        mode = rng.choice(("auto", "auto", "auto", "fixed", "disable"))
        cases.append(dict(h=h, hk=hk, d=rng.choice((64, 128, 256)), lens=lens, q=q, page=rng.choice((1, 16, 32, 64)),
                          graph=rng.random() < 0.3, sms=rng.choice((132, 108, 78, 16, 1)),
                          window=rng.choice((None, None, None, 4096, 1024, 128)),
                          fixed=rng.choice((1, 4, 16, 64)) if mode == "fixed" else None, disable=mode == "disable"))
    return cases


def _tc_line(c: dict) -> str:
    B = len(c["lens"])
    pages = [cdiv(L, c["page"]) for L in c["lens"]]
    uniform = c["q"] if c["q"] > 1 else 0  # decode.py passes uniform_q_len = q_len when q_len > 1
    wl = c["window"] - 1 if c["window"] else -1  # window_left = sliding_window - 1 (vLLM, SGLang)
    return (f"P {c['d']} {c['d']} {c['h']} {c['hk']} 2 {c['page']} {int(c['graph'])} {c['sms']} 9 0 232448 {wl} "
            f"{c['fixed'] or 0} {int(c['disable'])} {uniform} {B} " + " ".join([str(c["q"])] * B) + " "
            + " ".join(map(str, pages)))


def test_tensor_core_plan_matches_upstream():
    exe = oracle("flashinfer_oracle")
    cases = _tc_cases()
    out = run_lines(exe, [_tc_line(c) for c in cases])
    bad, checked = [], 0
    for c, o in zip(cases, out):
        m = model(c["h"], c["hk"], d=c["d"], sliding_window=c["window"])
        w = make_workload(m, seq_lens=c["lens"], query_lens=(c["q"],) * len(c["lens"]), block_size=c["page"])
        gpu = dataclasses.replace(H200, num_sms=c["sms"])
        try:
            p = fi.plan_flashinfer_tc(w, gpu, cuda_graph=c["graph"], fixed_split_size=c["fixed"],
                                      disable_split_kv=c["disable"], layer="sliding" if c["window"] else "global")
        except fi.UnsupportedError as exc:
            assert o.startswith("error"), (c, o, str(exc))  # both reject (fixed split under a CUDA graph)
            continue
        assert not o.startswith("error"), (c, o)
        vals = list(map(int, o.split()))
        split, padded, cta, chunk_tokens, new_bs = vals[:5]
        chunks = tuple(vals[5:])
        d = p.details
        checks = {
            "split_kv": bool(split) == d.split_kv,
            "padded_batch_size": padded == d.padded_batch_size,
            "cta_tile_q": cta == d.cta_tile_q,
            "new_batch_size": new_bs == d.new_batch_size,
            "chunk": c["disable"] or chunk_tokens == d.kv_chunk_size_in_pages * c["page"],
            "chunks": (chunks if split else (1,) * len(chunks)) == p.splits,
            "grid": tuple(p.kernels[0].grid) == (padded, 1, c["hk"]),
        }
        checked += 1
        if not all(checks.values()):
            bad.append((c, o[:80], [k for k, v in checks.items() if not v]))
    assert checked >= 400
    assert not bad, f"{len(bad)} of {checked} disagree; first: {bad[:3]}"


# ------------------------------------------------- the merge of partial states after a split (cascade.cuh)


def test_merge_launch_matches_upstream():
    exe = oracle("flashinfer_oracle")
    from decodecalc.derived import Explain

    rng = random.Random(19)
    cases = [(rng.choice((64, 128, 256)), rng.choice((1, 4, 8, 16, 32, 64, 128)), rng.choice((1, 2, 3, 16, 64, 512)),
              rng.choice((132, 108, 78, 16)), rng.choice((1, 2, 4, 8, 10, 12, 16))) for _ in range(300)]
    out = run_lines(exe, [f"M {d} {h} {B} {sms} {occ} 2" for d, h, B, sms, occ in cases])
    bad = []
    for (d, h, B, sms, occ), o in zip(cases, out):
        w = make_workload(model(h, 1, d=d), batch=B, seq_len=1000)
        gpu = dataclasses.replace(H200, num_sms=sms)
        k = fi._merge_kernel(w, gpu, occ, Explain())
        grid, bx, by, smem = map(int, o.split())
        if (grid,) != tuple(k.grid):
            bad.append(((d, h, B, sms, occ), o, k.grid))
    assert not bad, f"{len(bad)} of {len(cases)} disagree; first: {bad[:3]}"
