"""vLLM's legacy PagedAttention v1/v2: decodecalc's model vs vLLM 0.11.0's own code.

Python half: vllm/attention/ops/paged_attn.py from the 0.11.0 source archive is imported unmodified
(its vllm imports answered by stand-in modules: the platform is CUDA, ``ops.paged_attention_v1/v2``
record their arguments), and ``PagedAttention.forward_decode`` runs on meta tensors: which kernel it
calls and the partial-state buffers it allocates (tmp_output, exp_sums, max_logits).

C++ half: the launchers of csrc/attention/paged_attention_v{1,2}.cu (compiled from verbatim copies
by tests/oracles/build.py, kernel launches recorded instead of made) give grid, block, shared memory
and the head sizes and block sizes compiled.
"""

from __future__ import annotations

import dataclasses
import random
import types

import pytest
from helpers import H200, model
from oracle_helpers import exec_with_stubs, oracle, run_lines, source

from decodecalc.errors import UnsupportedError
from decodecalc.launchers import vllm_paged_attention as vpa
from decodecalc.workload import make_workload

torch = pytest.importorskip("torch")


class _Ops:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def paged_attention_v1(self, *args):
        self.calls.append(("v1", {}))

    def paged_attention_v2(self, out, exp_sums, max_logits, tmp_output, *rest):
        self.calls.append(("v2", {"tmp_output": tuple(tmp_output.shape), "tmp_dtype": tmp_output.dtype,
                                  "exp_sums": tuple(exp_sums.shape), "max_logits": tuple(max_logits.shape)}))


@pytest.fixture(scope="module")
def paged_attn():
    path = source("vllm-0.11.0/vllm/attention/ops/paged_attn.py")
    ops = _Ops()
    platform = types.SimpleNamespace(is_cuda_alike=lambda: True, is_xpu=lambda: False)
    stubs = {
        "vllm": types.ModuleType("vllm"),
        "vllm.platforms": types.SimpleNamespace(current_platform=platform),
        "vllm._custom_ops": ops,
        "vllm.triton_utils": types.SimpleNamespace(HAS_TRITON=False),
    }
    stubs["vllm"]._custom_ops = ops  # `from vllm import _custom_ops as ops`
    mod = exec_with_stubs(path, "oracle_vllm_0_11_paged_attn", stubs)
    return mod, ops


def _upstream_decode(mod, ops, B: int, h: int, h_kv: int, d: int, block: int, max_len: int, dtype):
    meta = "meta"
    q = torch.empty((B, h, d), dtype=dtype, device=meta)
    value_cache = torch.empty((1, h_kv, d, block), dtype=dtype, device=meta)
    ops.calls.clear()
    mod.PagedAttention.forward_decode(q, value_cache, value_cache, None, None, max_len, "auto", h_kv, 1.0, None,
                                      None, None)
    return ops.calls[-1]


def _cases() -> list[tuple[int, int, int, int, int, int]]:
    rng = random.Random(5)
    cases = []
    # the rule's edges: 8192 / 8193 tokens, one partition (512 / 513), num_seqs * num_heads = 512 / 513
    for L in (1, 511, 512, 513, 1024, 8191, 8192, 8193, 16384):
        for B, h in ((1, 32), (16, 32), (17, 32), (512, 1), (513, 1), (8, 64), (9, 64)):
            cases.append((B, h, 8 if h % 8 == 0 else 1, 128, 16, L))
    for _ in range(400):
        h = rng.choice((1, 8, 16, 32, 40, 64, 128))
        cases.append((rng.choice((1, 2, 4, 8, 15, 16, 17, 32, 64, 128, 256, 1024)), h, rng.choice([x for x in (1, 8) if
                      h % x == 0]), rng.choice((64, 80, 128, 256)), rng.choice((8, 16, 32)),
                      rng.choice((1, 100, 512, 513, 4096, 8192, 8193, 20000, 131072)) + rng.randint(0, 3)))
    return cases


def test_v1_v2_choice_and_buffers_match_upstream(paged_attn):
    mod, ops = paged_attn
    bad = []
    cases = _cases()
    for B, h, h_kv, d, block, L in cases:
        w = make_workload(model(h, h_kv, d=d), batch=B, seq_len=L, block_size=block)
        p = vpa.plan_vllm_paged_attention(w, H200)
        kind, bufs = _upstream_decode(mod, ops, B, h, h_kv, d, block, L, torch.bfloat16)
        ok = p.details.version == kind
        if kind == "v2":
            P = bufs["tmp_output"][2]
            ok = ok and p.splits == (P,) * B and bufs["tmp_output"] == (B, h, P, d)
            ok = ok and p.partial_state_bytes == B * h * P * (d * 2 + 4 + 4)  # bf16 tmp_output + 2 fp32 arrays
        if not ok:
            bad.append(((B, h, h_kv, d, block, L), kind, bufs, p.details.version, p.splits[:1]))
    assert len(cases) > 400
    assert not bad, f"{len(bad)} of {len(cases)} disagree; first: {bad[:3]}"


# ----------------------------------------------------------------------------------- C++ launchers


def _launch_lines(cases):
    return [f"{v} {B} {h} {h_kv} {d} {block} {L}" for v, B, h, h_kv, d, block, L in cases]


def test_launchers_match_upstream():
    exe = oracle("vllm_paged_oracle")
    rng = random.Random(9)
    cases = []
    for _ in range(400):
        h = rng.choice((8, 16, 32, 40, 64))
        cases.append((rng.choice(("v1", "v2")), rng.choice((1, 3, 16, 64)), h, rng.choice((1, 8)),
                      rng.choice((32, 64, 72, 80, 96, 112, 120, 128, 160, 192, 256)), rng.choice((8, 16, 32, 64, 1)),
                      rng.choice((1, 17, 512, 513, 4096, 8192, 20000))))
    out = run_lines(exe, _launch_lines(cases))
    bad = []
    for (v, B, h, h_kv, d, block, L), o in zip(cases, out):
        w = make_workload(model(h, h_kv, d=d), batch=B, seq_len=L, block_size=block)
        try:
            p = vpa.plan_vllm_paged_attention(dataclasses.replace(w), H200, version=v)
        except UnsupportedError:
            if v == "v1" and L > vpa.V1_MAX_SEQ_LEN and not o.startswith("error"):
                continue  # v1 forced past 8192: upstream launches (and runs out of shared memory); model refuses
            if not o.startswith("error"):
                bad.append(((v, B, h, h_kv, d, block, L), o, "model refuses"))
            continue
        if o.startswith("error"):
            bad.append(((v, B, h, h_kv, d, block, L), o, "upstream refuses"))
            continue
        gx, gy, gz, threads, smem, rx, ry, rsmem = map(int, o.split())
        main, *rest = p.kernels
        ok = (gx, gy, gz) == tuple(main.grid) and threads == vpa.NUM_THREADS
        if v == "v2":
            ok = ok and rest and (rx, ry) == tuple(rest[0].grid) and rsmem == rest[0].constexprs["reduce_smem_bytes"]
        if not ok:
            bad.append(((v, B, h, h_kv, d, block, L), o, [k.grid for k in p.kernels]))
    assert not bad, f"{len(bad)} of {len(cases)} disagree; first: {bad[:4]}"
