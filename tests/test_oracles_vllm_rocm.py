"""vLLM's ROCm custom paged attention: decodecalc's model vs vLLM 0.33.0's own code.

Rule: ``use_rocm_custom_paged_attention`` is taken verbatim from vllm/platforms/rocm.py of the
0.33.0 source archive (its source text, located with ``ast``; the module itself imports half of
vLLM) and run with the platform answers (CDNA or RDNA) as inputs.
Launch: the CDNA and RDNA launchers of csrc/rocm/attention_kernels.cuh, compiled from verbatim copies
(tests/oracles/vllm_rocm_driver.cpp): kernel variant, grid, reduce grid and reduce loop count.
"""

from __future__ import annotations

import ast
import dataclasses
import random

import pytest
from helpers import H200, model
from oracle_helpers import oracle, run_lines, source

from decodecalc.errors import UnsupportedError
from decodecalc.launchers import vllm_rocm as vr
from decodecalc.workload import make_workload

torch = pytest.importorskip("torch")

MI300 = dataclasses.replace(H200, name="mi300x", vendor="amd", num_sms=304, compute_capability=None, gfx_arch="gfx942")
RDNA = dataclasses.replace(MI300, name="rx7900", num_sms=96, gfx_arch="gfx1100")


def _rule(on_cdna: bool):
    path = source("vllm-0.33.0/vllm/platforms/rocm.py")
    text = path.read_text()
    fn = next(n for n in ast.parse(text).body
              if isinstance(n, ast.FunctionDef) and n.name == "use_rocm_custom_paged_attention")
    code = ast.get_source_segment(text, fn)
    ns = {"torch": torch, "on_cdna": lambda: on_cdna, "_ON_GFX1X": not on_cdna}
    exec(compile(code, str(path), "exec"), ns)  # the upstream function, as written
    return ns["use_rocm_custom_paged_attention"]


def _cases():
    rng = random.Random(3)
    out = []
    for _ in range(600):
        h_kv = rng.choice((1, 2, 4, 8))
        g = rng.choice((1, 2, 3, 4, 5, 8, 12, 16, 17, 32))
        out.append(dict(cdna=rng.random() < 0.6, B=rng.choice((1, 2, 7, 32, 128)), h=h_kv * g, hk=h_kv,
                        d=rng.choice((64, 128, 96, 256)), block=rng.choice((16, 32, 8, 64)),
                        L=rng.choice((1, 255, 256, 257, 1000, 16384, 64 * 256, 64 * 256 + 1, 128 * 1024,
                                      128 * 1024 + 1)),
                        dtype=rng.choice(("bfloat16", "float16", "bfloat16", "float32")),
                        kv=rng.choice(("auto", "auto", "fp8")), window=rng.choice((None, None, 4096))))
    return out


def _workload(c):
    m = model(c["h"], c["hk"], d=c["d"], sliding_window=c["window"], dtype=c["dtype"])
    return make_workload(m, batch=c["B"], seq_len=c["L"], block_size=c["block"], kv_cache_dtype=c["kv"])


def test_applicability_rule_matches_upstream():
    rules = {True: _rule(True), False: _rule(False)}
    bad = []
    for c in _cases():
        w = _workload(c)
        qtype = {"bfloat16": torch.bfloat16, "float16": torch.half, "float32": torch.float32}[c["dtype"]]
        window = c["window"] if c["window"] else 0  # the caller passes the layer's window, 0 without one
        up = rules[c["cdna"]](qtype, c["d"], c["block"], c["h"] // c["hk"], c["L"], window, c["kv"])
        try:
            vr.check_applicable(w, MI300 if c["cdna"] else RDNA, "sliding" if c["window"] else "global")
            ours = True
        except UnsupportedError:
            ours = False
        if up != ours:
            bad.append((c, up, ours))
    assert not bad, f"{len(bad)} disagree; first: {bad[:3]}"


def _launch_cases():
    rng = random.Random(4)
    out = []
    for _ in range(500):
        h_kv, cdna = rng.choice((1, 2, 4, 8)), rng.random() < 0.6
        g = rng.randint(1, 16) if cdna else rng.randint(3, 16)
        out.append(dict(cdna=cdna, B=rng.choice((1, 2, 7, 32, 128)), h=h_kv * g, hk=h_kv,
                        d=rng.choice((64, 128)) if cdna else 128, block=rng.choice((16, 32)) if cdna else 16,
                        L=rng.choice((1, 255, 256, 257, 1000, 16384, 32 * 256, 32 * 256 + 1, 64 * 256,
                                      64 * 256 + 1, 128 * 1024)),
                        dtype=rng.choice(("bfloat16", "float16")), kv="auto", window=None))
    return out


def test_launch_matches_upstream():
    exe = oracle("vllm_rocm_oracle")
    cases = _launch_cases()
    out = run_lines(exe, [f"{int(not c['cdna'])} {c['B']} {c['h']} {c['hk']} {c['d']} {c['block']} {c['L']}"
                          for c in cases])
    bad, checked = [], 0
    for c, o in zip(cases, out):
        gpu = MI300 if c["cdna"] else RDNA
        try:
            p = vr.plan_vllm_rocm(_workload(c), gpu, layer="global")
        except UnsupportedError:
            continue  # outside the rule: vLLM runs Triton instead (checked above)
        checked += 1
        if o.startswith("error"):
            bad.append((c, o, "upstream launcher refuses"))
            continue
        kern, gx, gy, gz, threads, rx, ry, rthreads, npar = o.split()
        main = p.kernels[0]
        red = [k for k in p.kernels if "reduce" in k.name]
        ok = (main.name.endswith(f"_{kern}_kernel") and (int(gx), int(gy), int(gz)) == tuple(main.grid)
              and int(threads) == vr.NTHR and len(red) == 1 and tuple(red[0].grid) == (int(rx), int(ry))
              and red[0].constexprs["block"] == int(rthreads) and red[0].constexprs["NPAR_LOOPS"] == int(npar))
        if not ok:
            bad.append((c, o, [(k.name, k.grid, k.constexprs) for k in p.kernels]))
    assert checked >= 400
    assert not bad, f"{len(bad)} of {checked} disagree; first: {bad[:3]}"
