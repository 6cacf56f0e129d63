"""Decode attention in two regimes on an H200: back to back, and inside a decode layer's graph (issue 18, item 3).

The time model was fitted on the first regime: a CUDA graph of one backend's decode call back to back, cycling over
KV-cache copies (:mod:`decodecalc.verify.timing`). In an engine's decode graph the attention launch sits between
other kernels instead: the layer's QKV projection and the KV-cache write before it, the output projection after.
This script measures what attention adds there, on purpose:

* **back-to-back**: ``time_calls`` of the attention call alone (the fitted regime);
* **in-graph**: two CUDA graphs of ``layers`` decode layers each, cycling over KV copies and weight copies (so L2
  holds neither between layers): ``[QKV GEMM, KV write, attention, O GEMM]`` and the same without attention.
  Attention's in-graph cost is the difference of their replay times over the layers (replays alternate between the
  two graphs; medians). The GEMMs are ``torch.matmul`` of the rank's projections at hidden size ``h x d`` (the
  model's query width; Gemma-2-9B's real hidden size is 3,584 against 4,096 here), the KV write a copy of the new
  token's K and V rows: stand-ins for an engine's own kernels, which differ between engines.

Backends: vLLM's Triton unified attention and SGLang's Triton decode (their default launches, from
:mod:`decodecalc.reports.step_launches`), FlashInfer's CUDA-core and tensor-core decode (CUDA-graph plans, as vLLM
and SGLang run them), and vLLM's FA3 build when ``DECODECALC_FA3_LIB`` names it (``num_splits`` 32, vLLM's bound
under full CUDA graphs). Every backend is called as the engines call it, PDL included where the library enables it
by default (FlashInfer on sm_90; SGLang passes ``use_pdl``).

Device half (writes JSON lines)::

    python3 -m benchmarks.in_graph_h200 --run --out $OUT/in-graph.jsonl [--deadline-s 500]

CPU half (the shipped profile's predictions against both regimes; writes results/in-graph-h200-summary.json)::

    python -m benchmarks.in_graph_h200 --compare benchmarks/results/in-graph-h200.jsonl [--write-profile]

``--write-profile`` writes the per-system in-graph costs (fitted on every layout) into the packaged profile's
``in_graph`` block; the left-out figures use the costs of the other half of the layouts (in_graph_compare.HALVES).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.workload import make_workload

ROOT = Path(__file__).resolve().parents[1]

#: (model, tp): head layouts per rank 32:8 d128, 8:1 d128, 16:8 d256, 32:8 d64, 16:1 d128, 16:4 d128
LAYOUTS = [("llama3-8b", 1), ("llama3-70b", 8), ("gemma-2-9b", 1), ("llama3.2-1b", 1), ("llama3-405b", 8),
           ("mixtral-8x7b", 2)]
#: small launches first (the issue's FlashInfer goal is about them), then larger ones and one ragged batch
SHAPES = [(1, 512), (1, 2048), (2, 1024), (4, 512), (4, 4096), (8, 2048), (16, 1024), (1, 16384), (8, 16384),
          (32, 4096), (64, 2048), (128, 8192)]
RAGGED = tuple(256 + (i * 7919) % 8000 for i in range(13))
BACKENDS = ("flashinfer", "flashinfer-tc", "vllm", "sglang", "fa3")
#: weight bytes the layers cycle over (several times the H200's L2)
WEIGHT_ROTATE_BYTES = 256 << 20
TARGET_GRAPH_S = 4e-3
REPLAYS = 9


def cases() -> list[dict]:
    out = []
    for b, L in SHAPES + [(None, None)]:
        for model, tp in LAYOUTS:
            lens = list(RAGGED) if b is None else [L] * b
            out.append({"model": model, "tp": tp, "seq_lens": lens})
    return out


def attention_step(backend: str, w, gpu, torch, kernels):
    """(step(copy), copies, launch description) of one backend's default decode call for ``w``."""
    from decodecalc.verify import backend_steps as S

    if backend in ("flashinfer", "flashinfer-tc"):
        s = S.flashinfer_step(w, tensor_cores=backend == "flashinfer-tc", cuda_graph=True)
        return s.run, s.copies, {"cuda_graph_plan": True}
    if backend == "fa3":
        s = S.fa3_step(w, num_splits=32)
        return s.run, s.copies, {"num_splits": 32}
    from decodecalc.launchers.sglang_triton import plan_sglang
    from decodecalc.launchers.vllm_unified import plan_vllm
    from decodecalc.reports.step_launches import sglang_launch, vllm_launch
    from decodecalc.verify.calibration import ShapeBench

    vk, sk = kernels
    bench = ShapeBench(torch, vk, sk, w.num_heads, w.num_kv_heads, w.head_size, tuple(w.seq_lens), gpu.num_sms,
                       seed=7)
    launch = vllm_launch(plan_vllm(w, gpu)) if backend == "vllm" else sglang_launch(plan_sglang(w, gpu))
    adaptive = backend == "sglang" and bool(launch["adaptive"])
    return bench.launch(launch, engine_split_kernel=adaptive), bench.copies, {"launch": launch,
                                                                             "engine_split_kernel": adaptive}


class Layer:
    """The rank's QKV and O projections (bf16 weights, cycled over copies) and a KV-write stand-in, for batch B."""

    def __init__(self, torch, w) -> None:
        h, hkv, d, B = w.num_heads, w.num_kv_heads, w.head_size, w.batch
        hidden = w.model.num_attention_heads * d
        dt, dev = torch.bfloat16, "cuda"
        per = (hidden * (h + 2 * hkv) * d + h * d * hidden) * 2
        self.wcopies = max(1, min(16, -(-WEIGHT_ROTATE_BYTES // per)))
        self.w_qkv = [torch.randn(hidden, (h + 2 * hkv) * d, device=dev, dtype=dt) * 0.02 for _ in range(self.wcopies)]
        self.w_o = [torch.randn(h * d, hidden, device=dev, dtype=dt) * 0.02 for _ in range(self.wcopies)]
        self.x = torch.randn(B, hidden, device=dev, dtype=dt)
        self.qkv = torch.empty(B, (h + 2 * hkv) * d, device=dev, dtype=dt)
        self.attn_out = torch.randn(B, h * d, device=dev, dtype=dt)
        self.y = torch.empty(B, hidden, device=dev, dtype=dt)
        self.kv_new = torch.empty(B, 2 * hkv * d, device=dev, dtype=dt)
        self.q_end = h * d
        self.torch = torch

    def before(self, i: int) -> None:
        t = self.torch
        t.matmul(self.x, self.w_qkv[i % self.wcopies], out=self.qkv)
        self.kv_new.copy_(self.qkv[:, self.q_end:])

    def after(self, i: int) -> None:
        self.torch.matmul(self.attn_out, self.w_o[i % self.wcopies], out=self.y)


def in_graph(torch, layer: Layer, step, copies: int) -> dict:
    """Attention's cost inside the layer graph: (with - without) / layers, medians of alternating replays."""
    # size: one eager layer estimate
    for i in range(min(copies, 8)):
        layer.before(i), step(i), layer.after(i)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for i in range(16):
        layer.before(i), step(i % copies), layer.after(i)
    e.record()
    e.synchronize()
    per = max(s.elapsed_time(e) / 16 / 1000.0, 5e-6)
    layers = max(copies, min(1024, int(TARGET_GRAPH_S / per) + 1))
    with_calls, without_calls = [], []
    for i in range(layers):
        with_calls += [lambda i=i: layer.before(i), lambda i=i: step(i % copies), lambda i=i: layer.after(i)]
        without_calls += [lambda i=i: layer.before(i), lambda i=i: layer.after(i)]
    from decodecalc.verify.timing import capture_graph, replay_seconds

    g_with = capture_graph(with_calls)
    g_without = capture_graph(without_calls)
    a, b = [], []
    for _ in range(REPLAYS):
        a.append(replay_seconds(g_with))
        b.append(replay_seconds(g_without))
    del g_with, g_without
    ma, mb = statistics.median(a), statistics.median(b)
    return {"layers": layers, "with_us": ma * 1e6 / layers, "without_us": mb * 1e6 / layers,
            "t_us": (ma - mb) * 1e6 / layers, "spread_with": (max(a) - min(a)) / ma,
            "spread_without": (max(b) - min(b)) / mb}


def run(args) -> int:
    import torch

    from decodecalc.verify import profiler as P
    from decodecalc.verify.timing import time_calls
    from decodecalc.verify.upstream import load_sglang, load_vllm

    t0 = time.time()
    gpu = resolve_gpu("h200")
    backends = [b for b in args.backends.split(",") if b]
    missing = {b: P.missing_backend(b) for b in backends if b.startswith("flashinfer") or b == "fa3"}
    kernels = (load_vllm(None, capability=tuple(torch.cuda.get_device_capability(0)), interpret=False),
               load_sglang(None, interpret=False))
    print("environment", torch.__version__, torch.cuda.get_device_name(0), "missing:", missing, flush=True)
    if any(b.startswith("flashinfer") and not missing.get(b) for b in backends):
        from benchmarks.capture_backends_h200 import warm_flashinfer_jit

        warm_flashinfer_jit()  # the decode modules compiled in parallel processes first
        print(f"flashinfer JIT warm-up done at {time.time() - t0:.0f}s", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as fh:
        for case in cases():
            for backend in backends:
                if missing.get(backend):
                    continue
                if time.time() - t0 > args.deadline_s:
                    print("deadline reached", flush=True)
                    return 0
                w = make_workload(resolve_model(case["model"]), tp=case["tp"], seq_lens=tuple(case["seq_lens"]),
                                  block_size=16)
                rec = {**case, "backend": backend}
                try:
                    step, copies, info = attention_step(backend, w, gpu, torch, kernels)
                    rec.update(info)
                    rec["back_to_back"] = time_calls(step, copies, replays=5).to_json()
                    rec["in_graph"] = in_graph(torch, Layer(torch, w), step, copies)
                except Exception as exc:  # noqa: BLE001 - one failing case must not end the run
                    rec["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                fh.write(json.dumps(rec) + "\n")
                fh.flush()
                b2b = (rec.get("back_to_back") or {}).get("t_us")
                ig = (rec.get("in_graph") or {}).get("t_us")
                print(f"{time.time() - t0:6.0f}s {backend:13s} {case['model']:13s} tp{case['tp']} B{len(case['seq_lens'])} "
                      f"L{max(case['seq_lens'])} b2b={b2b and round(b2b, 2)} in-graph={ig and round(ig, 2)} "
                      f"{rec.get('error', '')[:200]}", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="store_true", help="the device half: measure and write JSON lines")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "in-graph.jsonl"))
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--deadline-s", type=float, default=500.0)
    ap.add_argument("--compare", metavar="JSONL", help="the CPU half: predictions against both regimes")
    ap.add_argument("--write-profile", action="store_true",
                    help="with --compare: write the fitted in-graph costs into decodecalc/profiles/h200.yaml")
    args = ap.parse_args()
    if args.run:
        return run(args)
    if args.compare:
        from benchmarks.in_graph_compare import compare

        return compare(Path(args.compare), write_profile=args.write_profile)
    ap.error("give --run or --compare")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
