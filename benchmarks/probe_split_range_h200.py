"""Probe how far the split counts of vLLM's and SGLang's Triton decode kernels can go.

``decodecalc tune`` searches vLLM's ``NUM_PAR_SOFTMAX_SEGMENTS`` (module constant in
vllm/v1/attention/backends/triton_attn.py, default 16) and SGLang's ``--triton-attention-num-kv-splits``
(the decode kernels' ``max_kv_splits``, default 8, optionally with SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS).
This script launches the real upstream kernels (vLLM 0.33.0 / SGLang 0.5.23, imported from ./upstream by
:mod:`decodecalc.verify.upstream`, called through :mod:`decodecalc.verify.engine`) for one fixed decode batch
at large split counts, and records for every case:

* whether it compiled and ran, or the exception (type, first line, and the last line, which for a Triton
  ``CompilationError`` holds the cause, e.g. "arange's range must be a power of 2");
* whether the output matches a float32 torch reference (:mod:`decodecalc.verify.torch_ref`) within the
  tolerance ``decodecalc verify`` uses (:data:`decodecalc.verify.runner.TOLERANCE`);
* the launches (grid, constexprs: :class:`decodecalc.verify.capture.LaunchRecorder`) and, per compiled
  kernel, registers / spills / shared memory / warps (``n_regs``, ``n_spills`` of the Triton kernel object);
* the time per call (CUDA events around each call after warm-up; median and min of ``--repeats``), the first
  call's wall time (includes compilation) and the scratch bytes the case allocated.

    # on one H200 (run from the repository root; ./upstream/{vllm-0.33.0,sglang-0.5.23} present)
    python -m benchmarks.probe_split_range_h200 --out benchmarks/results/probe-split-range-h200.json
    python -m benchmarks.probe_split_range_h200 --extended --out ...   # also the predicted failure points
    python -m benchmarks.probe_split_range_h200 --only vllm --vllm-segments 4096,8192 --out ...
    # CPU smoke test (Triton interpreter, tiny shapes, no timing): checks only that the code paths run
    python -m benchmarks.probe_split_range_h200 --tiny

Default batch: Llama-3.1-8B per rank (h=32, h_kv=8, d=128), bf16, batch 4, seq_len 32768, block size 16.
vLLM cases force the 3D (split-K) path (``seq_threshold_3D`` = 2**20) with ``num_par_softmax_segments`` = S
and scratch of S segments, as ``TritonAttentionImpl.forward`` passes them. SGLang cases call
``decode_attention_fwd`` with ``max_kv_splits`` = S and attn_logits / attn_lse of S splits, ``static``: every
sequence gets S splits (what SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS=1 does, ``num_kv_splits.fill_``),
``dynamic``: the splits ``get_num_kv_splits_triton`` picks with max_kv_splits = S (recorded).

On a GPU every case runs in its own child process (``--no-isolate`` to turn off) with a time limit
(``--case-timeout``): a kernel fault poisons the CUDA context and a huge tile can take ptxas minutes, so a
crash or a hang is recorded for that case and the next one starts fresh. The JSON summary is printed and,
with ``--out``, written (rewritten after every case, so a run cut short keeps what it did).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

VLLM_SEGMENTS = (64, 128, 256, 512, 1024, 2048)
SGLANG_SPLITS = (64, 128, 256, 512, 1024)
SGLANG_MODES = ("static", "dynamic")
# --extended: where the source predicts a limit (Llama-3.1-8B d=128), see the report in the module's issue
#   vLLM: reduce_segments holds a (S, next_pow2(d)) fp32 tile -> S * 128 <= TRITON_MAX_TENSOR_NUMEL (2**20),
#         so 8192 is the last that can compile, 16384 must fail; non-powers of two fail tl.arange.
#   SGLang: stage 1's grid z is max_kv_splits -> CUDA's gridDim.z <= 65535; any integer below compiles.
VLLM_EXTENDED = (24, 96, 4096, 8192, 16384)
SGLANG_EXTENDED = (100, 1000, 2048, 4096, 8192, 65535, 65536)

TINY_SHAPE = {"batch": 2, "seq_len": 48, "num_heads": 4, "num_kv_heads": 2, "head_dim": 32, "block_size": 16}
TINY_VLLM = (8, 64, 24)  # 24: not a power of two -> reduce_segments must fail to compile
TINY_SGLANG = (8, 64, 100)
TINY_MODES = ("static", "dynamic")

VLLM_KERNELS = ("kernel_unified_attention", "reduce_segments")
SGLANG_KERNELS = ("_fwd_grouped_kernel_stage1", "_fwd_kernel_stage1", "_fwd_kernel_stage2")
SGLANG_META_KERNELS = ("get_num_kv_splits_triton",)
SHOWN_CONSTEXPRS = ("BLOCK_M", "BLOCK_Q", "TILE_SIZE", "NUM_SEGMENTS_PER_SEQ", "IS_3D", "BLOCK_N", "BLOCK_H",
                    "MAX_KV_SPLITS", "MIN_BLOCK_KV", "HEAD_SIZE_PADDED", "BLOCK_DV", "FORCED_KV_SPLITS")


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------------------------
# scratch bytes, from the engines' allocation code (no torch needed)


def vllm_scratch_bytes(rows: int, num_heads: int, segments: int, head_dim: int) -> int:
    """softmax_segm_output [rows, h, S, next_pow2(d)] + softmax_segm_max / _expsum [rows, h, S], all fp32
    (vllm/v1/attention/backends/triton_attn.py, TritonAttentionMetadataBuilder.__init__)."""
    return rows * num_heads * segments * (_next_pow2(head_dim) + 2) * 4


def vllm_scratch_rows(num_kv_heads: int, max_num_seqs: int, max_query_len_3d: int = 1,
                      capture_sizes: tuple[int, ...] | None = None) -> int:
    """max_num_tokens_3d = min(seq_threshold_3D, max_num_seqs) * max_query_len_3d, seq_threshold_3D =
    128 // h_kv snapped to the nearest CUDA-graph capture size when full graphs are on."""
    thr = 128 // num_kv_heads
    if capture_sizes:
        thr = min(capture_sizes, key=lambda x: abs(x - thr))
    return min(thr, max_num_seqs) * max_query_len_3d


def sglang_scratch_bytes(tokens: int, num_heads: int, splits: int, v_head_dim: int) -> int:
    """attn_logits [tokens, h, S, Lv] + attn_lse [tokens, h, S], fp32 (sglang/srt/layers/attention/triton_backend.py:
    init_cuda_graph_state for the CUDA-graph copy, init_forward_metadata per eager decode step)."""
    return tokens * num_heads * splits * (v_head_dim + 1) * 4


def scratch_formulas() -> dict[str, Any]:
    models = {"llama-3.1-70b-tp8": (8, 1, 128), "llama-3.1-8b-tp1": (32, 8, 128)}
    out: dict[str, Any] = {
        "vllm": "rows * h * S * (next_pow2(d) + 2) * 4 B; rows = min(seq_threshold_3D, max_num_seqs) * max_query_len_3d, "
                "seq_threshold_3D = 128 // h_kv (nearest CUDA-graph capture size with full graphs)",
        "sglang": "max_num_tokens * h * S * (Lv + 1) * 4 B (CUDA-graph buffer; eager: batch * h * S * (Lv + 1) * 4 per step)",
        "examples": {},
    }
    for name, (h, hkv, d) in models.items():
        rows = vllm_scratch_rows(hkv, 1024)
        ex = {"vllm_rows": rows}
        for S in (16, 64, 1024, 8192):
            ex[f"vllm_S{S}_bytes"] = vllm_scratch_bytes(rows, h, S, d)
        for S in (8, 64, 1024, 8192):
            ex[f"sglang_S{S}_bytes_1024_tokens"] = sglang_scratch_bytes(1024, h, S, d)
        out["examples"][name] = ex
    return out


# --------------------------------------------------------------------------------------------
# the cases


def plan_cases(args: argparse.Namespace) -> list[dict[str, Any]]:
    def ints(s: str | None, default: tuple[int, ...]) -> list[int]:
        return list(default) if s is None else [int(x) for x in s.split(",") if x.strip()]

    if args.tiny:
        vseg, sspl, modes = ints(args.vllm_segments, TINY_VLLM), ints(args.sglang_splits, TINY_SGLANG), TINY_MODES
    else:
        vseg = ints(args.vllm_segments, VLLM_SEGMENTS + (VLLM_EXTENDED if args.extended else ()))
        sspl = ints(args.sglang_splits, SGLANG_SPLITS + (SGLANG_EXTENDED if args.extended else ()))
        modes = SGLANG_MODES
    if args.sglang_modes is not None:
        modes = tuple(m for m in args.sglang_modes.split(",") if m)
        bad = [m for m in modes if m not in SGLANG_MODES]
        if bad:
            raise SystemExit(f"--sglang-modes: unknown {bad}; valid: {', '.join(SGLANG_MODES)}")
    cases: list[dict[str, Any]] = []
    if args.only in (None, "vllm"):
        cases += [{"engine": "vllm", "segments": S} for S in vseg]
    if args.only in (None, "sglang"):
        for S in sspl:
            cases += [{"engine": "sglang", "mode": m, "max_kv_splits": S} for m in modes]
    return cases


def case_name(c: dict[str, Any]) -> str:
    if c["engine"] == "vllm":
        return f"vllm-3d-S{c['segments']}"
    return f"sglang-{c['mode']}-S{c['max_kv_splits']}"


def shape_of(args: argparse.Namespace) -> dict[str, int]:
    if args.tiny:
        return dict(TINY_SHAPE)
    return {"batch": args.batch, "seq_len": args.seq_len, "num_heads": args.num_heads,
            "num_kv_heads": args.num_kv_heads, "head_dim": args.head_dim, "block_size": args.block_size}


def predicted(c: dict[str, Any], head_dim: int) -> str:
    """What the sources predict (see the module docstring's notes on limits)."""
    if c["engine"] == "vllm":
        S = c["segments"]
        if S < 1 or S & (S - 1):
            return "compile error in reduce_segments: tl.arange(0, NUM_SEGMENTS_PER_SEQ) needs a power of 2"
        if S * _next_pow2(head_dim) > 1 << 20:
            return ("compile error in reduce_segments: (NUM_SEGMENTS_PER_SEQ, HEAD_SIZE_PADDED) tile exceeds "
                    "TRITON_MAX_TENSOR_NUMEL = 1048576")
        if S > 65535:
            return "launch error: grid z > 65535"
        return "ok"
    S = c["max_kv_splits"]
    if S < 1:
        return "error: no splits"
    if S > 65535:
        return "launch error: stage-1 grid z = max_kv_splits > 65535 (CUDA invalid argument)"
    return "ok"


def useful_splits(c: dict[str, Any], seq_len: int, tile_size: int | None) -> int | None:
    """Splits that get any KV: the rest return at once (vLLM: triton_unified_attention.py kernel
    `if segm_idx * tiles_per_segment * TILE_SIZE >= seq_len: return`; SGLang: stage 1/2
    `if split_kv_end > split_kv_start`, kv_len_per_split rounded up to MIN_BLOCK_KV = 32)."""
    if c["engine"] == "vllm":
        if not tile_size:
            return None
        tps = _cdiv(seq_len, c["segments"] * tile_size)
        return _cdiv(seq_len, tps * tile_size)
    S = c["max_kv_splits"]
    if S <= 0:
        return None
    per = _cdiv(_cdiv(seq_len, S), 32) * 32
    return _cdiv(seq_len, per)


# --------------------------------------------------------------------------------------------
# running cases (in this process)


def _first_last(exc: BaseException) -> tuple[str, str]:
    text = f"{exc}".strip() or repr(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else repr(exc)
    last = lines[-1] if lines else first
    return first[:300], last[:300]


class Capture:
    """Keep the compiled kernel objects that JITFunction.run returns (n_regs / n_spills live on them).

    The wrapper is an instance attribute (``kernel[grid]`` calls ``self.run``) that calls the class's
    current ``run``, so :class:`LaunchRecorder`'s class-level wrapper still sees every launch."""

    def __init__(self, fns: dict[str, Any]) -> None:
        self.fns = fns
        self.compiled: dict[str, Any] = {}

    def __enter__(self) -> "Capture":
        for name, fn in self.fns.items():
            def run(*args: Any, _fn: Any = fn, _name: str = name, **kwargs: Any) -> Any:
                k = type(_fn).run(_fn, *args, **kwargs)
                if k is not None:
                    self.compiled[_name] = k
                return k
            try:
                fn.run = run
            except Exception:  # noqa: BLE001 - resources are optional
                pass
        return self

    def __exit__(self, *exc: Any) -> None:
        for fn in self.fns.values():
            try:
                if "run" in vars(fn):
                    del fn.run
            except Exception:  # noqa: BLE001
                pass

    def resources(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, k in self.compiled.items():
            r: dict[str, Any] = {}
            try:
                if getattr(k, "n_regs", None) is None and hasattr(k, "_init_handles"):
                    k._init_handles()
            except Exception as exc:  # noqa: BLE001
                r["init_error"] = _first_last(exc)[0]
            for attr in ("n_regs", "n_spills", "n_max_threads"):
                v = getattr(k, attr, None)
                if v is not None:
                    r[attr] = int(v)
            md = getattr(k, "metadata", None)
            for attr in ("shared", "num_warps", "num_stages"):
                v = getattr(md, attr, None)
                if v is not None:
                    r[attr] = int(v)
            out[name] = r
        return out


class Bench:
    """Tensors, kernels and reference for one shape, built once per process."""

    def __init__(self, shape: dict[str, int], tiny: bool) -> None:
        import torch

        from decodecalc.verify import torch_ref
        from decodecalc.verify.kv_cache import build_paged_kv, kv_bytes
        from decodecalc.verify.upstream import load_sglang, load_vllm

        self.tiny = tiny
        self.dev = "cpu" if tiny else "cuda"
        self.dtype = torch.float16 if tiny else torch.bfloat16
        self.sms = 132 if tiny else torch.cuda.get_device_properties(0).multi_processor_count
        cap = (9, 0) if tiny else tuple(torch.cuda.get_device_capability(0))
        self.vk = load_vllm(None, capability=cap, interpret=tiny)
        self.sk = load_sglang(None, interpret=tiny)
        B, L = shape["batch"], shape["seq_len"]
        h, hkv, d, bs = shape["num_heads"], shape["num_kv_heads"], shape["head_dim"], shape["block_size"]
        self.shape = shape
        self.lens = [L] * B
        gen = torch.Generator(device=self.dev)
        gen.manual_seed(0)
        self.kv = build_paged_kv(gen, seq_lens=self.lens, num_kv_heads=hkv, head_size=d, block_size=bs,
                                 dtype=self.dtype, device=self.dev, copies=1)
        self.q = torch.randn((B, h, d), generator=gen, device=self.dev, dtype=self.dtype)
        self.out = torch.empty((B, h, d), device=self.dev, dtype=self.dtype)
        self.seq_lens = torch.tensor(self.lens, dtype=torch.int32, device=self.dev)
        self.cu_q = torch.arange(B + 1, dtype=torch.int32, device=self.dev)
        self.indptr = torch.tensor([i * L for i in range(B + 1)], dtype=torch.int32, device=self.dev)
        self.scale = 1.0 / math.sqrt(d)
        self.kv_bytes = kv_bytes(self.lens, hkv, d, self.q.element_size())
        self.ref = torch_ref.reference_attention(self.q, self.kv.k_cache, self.kv.v_cache, self.kv.block_tables[0],
                                                 self.lens, [1] * B, self.scale)
        try:
            from decodecalc.verify.runner import TOLERANCE
        except Exception:  # noqa: BLE001
            TOLERANCE = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-3}  # noqa: N806
        self.tol = TOLERANCE.get(str(self.dtype).replace("torch.", ""), 2e-2)
        self.kernel_fns = {}
        for mod, names in ((self.vk.module, VLLM_KERNELS), (self.sk.decode, SGLANG_KERNELS),
                           (self.sk.metadata, SGLANG_META_KERNELS)):
            for n in names:
                fn = getattr(mod, n, None)
                if fn is not None:
                    self.kernel_fns[n] = fn
        self.env = {"device": self.dev, "gpu": "cpu-interpreter" if tiny else torch.cuda.get_device_name(0),
                    "sm_count": self.sms, "capability": list(cap), "torch": torch.__version__,
                    "triton": __import__("triton").__version__, "cuda": torch.version.cuda,
                    "vllm_upstream": self.vk.source.version, "sglang_upstream": self.sk.source.version,
                    "dtype": str(self.dtype).replace("torch.", ""), "tolerance_max_err_vs_max": self.tol}

    def sync(self) -> None:
        if not self.tiny:
            import torch

            torch.cuda.synchronize()

    def step_for(self, c: dict[str, Any]) -> tuple[Any, int, dict[str, Any]]:
        """(callable running one decode step of one layer, scratch bytes, extra fields)."""
        import torch

        from decodecalc.verify import engine

        B, h, hkv, d = self.shape["batch"], self.shape["num_heads"], self.shape["num_kv_heads"], self.shape["head_dim"]
        f32 = torch.float32
        if c["engine"] == "vllm":
            S = c["segments"]
            dp = _next_pow2(d)
            so = torch.empty((B, h, S, dp), device=self.dev, dtype=f32)
            sm = torch.empty((B, h, S), device=self.dev, dtype=f32)
            ss = torch.empty((B, h, S), device=self.dev, dtype=f32)

            def vstep() -> None:
                engine.vllm_unified_attention(
                    self.vk, q=self.q, k=self.kv.k_cache, v=self.kv.v_cache, out=self.out, cu_seqlens_q=self.cu_q,
                    max_seqlen_q=1, seqused_k=self.seq_lens, max_seqlen_k=max(self.lens),
                    block_table=self.kv.block_tables[0], softmax_scale=self.scale, seq_threshold_3D=1 << 20,
                    num_par_softmax_segments=S, softmax_segm_output=so, softmax_segm_max=sm, softmax_segm_expsum=ss)

            return vstep, vllm_scratch_bytes(B, h, S, d), {}

        S = c["max_kv_splits"]
        logits = torch.empty((B, h, S, d), device=self.dev, dtype=f32)
        lse = torch.empty((B, h, S), device=self.dev, dtype=f32)
        extra: dict[str, Any] = {}
        if c["mode"] == "static":
            ns = torch.full((B,), S, dtype=torch.int32, device=self.dev)
        else:
            ns = torch.empty((B,), dtype=torch.int32, device=self.dev)
            engine.sglang_num_kv_splits(self.sk, num_kv_splits=ns, seq_lens=self.seq_lens, num_seq=B, num_group=1,
                                        num_head=h, num_kv_head=hkv, max_kv_splits=S, device_core_count=self.sms)
            self.sync()
            extra["num_kv_splits"] = ns.cpu().tolist()

        def sstep() -> None:
            engine.sglang_decode_attention(
                self.sk, q=self.q, k_buffer=self.kv.k_buffer, v_buffer=self.kv.v_buffer, o=self.out,
                kv_indptr=self.indptr, kv_indices=self.kv.kv_indices[0], attn_logits=logits, attn_lse=lse,
                num_kv_splits=ns, max_kv_splits=S, sm_scale=self.scale, use_pdl=not self.tiny)

        return sstep, sglang_scratch_bytes(B, h, S, d), extra

    def kernel_times(self, step: Any, repeats: int) -> dict[str, float]:
        """Mean device time of each kernel of a step (CUPTI through torch.profiler), microseconds."""
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(repeats):
                step()
            self.sync()
        out: dict[str, float] = {}
        for ev in prof.key_averages():
            total = getattr(ev, "device_time_total", None)
            if total is None:
                total = getattr(ev, "cuda_time_total", 0.0)
            if total and ev.count:
                out[ev.key[:60]] = round(total / repeats, 2)
        return out

    def run_case(self, c: dict[str, Any], repeats: int, warmup: int) -> dict[str, Any]:
        import torch

        from decodecalc.verify import torch_ref
        from decodecalc.verify.capture import LaunchRecorder

        row: dict[str, Any] = {"case": case_name(c), **c, "predicted": predicted(c, self.shape["head_dim"]),
                               "status": "error"}
        t0 = time.time()
        phase = "setup"
        cap = Capture(self.kernel_fns)
        rec = LaunchRecorder(execute=True)
        try:
            step, scratch, extra = self.step_for(c)
            row["scratch_bytes"] = scratch
            row.update(extra)
            self.out.fill_(float("nan"))
            phase = "first call (compile + run)"
            with cap, rec:
                step()
                self.sync()
            row["first_call_s"] = round(time.time() - t0, 3)
            row["launches"] = [la.to_json(SHOWN_CONSTEXPRS) for la in rec.launches]
            row["kernels"] = cap.resources()
            tile = next((la.constexprs.get("TILE_SIZE") for la in rec.launches
                         if la.name == "kernel_unified_attention"), None)
            if c["engine"] == "vllm":
                row["path"] = "3d" if any(la.name == "reduce_segments" for la in rec.launches) else "2d"
            eff = dict(c)
            if c["engine"] == "sglang" and row.get("num_kv_splits"):  # dynamic: what the heuristic chose
                eff["max_kv_splits"] = min(c["max_kv_splits"], max(row["num_kv_splits"]))
            row["useful_splits"] = useful_splits(eff, max(self.lens), tile)
            phase = "check"
            err = torch_ref.compare(self.out, self.ref, [1] * len(self.lens))
            row["error_vs_reference"] = err
            row["correct"] = bool(err["nan_count"] == 0 and err["max_err_vs_max"] <= self.tol)
            row["status"] = "ok" if row["correct"] else "wrong"
            if not self.tiny:
                phase = "timing"
                for _ in range(warmup):
                    step()
                self.sync()
                ts = []
                for _ in range(repeats):
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    step()
                    e.record()
                    e.synchronize()
                    ts.append(s.elapsed_time(e) * 1e3)
                row["t_us"] = round(statistics.median(ts), 2)
                row["t_us_min"] = round(min(ts), 2)
                row["gbps"] = round(self.kv_bytes / (row["t_us"] * 1e-6) / 1e9, 1)
                phase = "per-kernel timing"
                row["kernel_us"] = self.kernel_times(step, repeats)
        except Exception as exc:  # noqa: BLE001 - every failure is a result
            first, last = _first_last(exc)
            row.update({"phase": phase, "error_type": type(exc).__name__, "error": first, "error_cause": last})
            if exc.__cause__ is not None:
                row["error_chained"] = _first_last(exc.__cause__)[1]
            row.setdefault("kernels", cap.resources())
            if rec.launches and "launches" not in row:  # what was launched before the failure
                row["launches"] = [la.to_json(SHOWN_CONSTEXPRS) for la in rec.launches]
            if not self.tiny:
                try:
                    torch.cuda.synchronize()
                except Exception as exc2:  # noqa: BLE001 - the context is gone
                    row["cuda_context_lost"] = _first_last(exc2)[0]
                    row["status"] = "cuda_fault"
            traceback.print_exc(limit=1)
        row["wall_s"] = round(time.time() - t0, 3)
        return row


# --------------------------------------------------------------------------------------------
# driver


def summary_line(r: dict[str, Any]) -> str:
    k = r.get("kernels", {})
    regs = ", ".join(f"{n}:{v.get('n_regs', '?')}r/{v.get('n_spills', '?')}sp" for n, v in k.items())
    t = f"{r['t_us']:.1f} us" if "t_us" in r else "-"
    why = f"  [{r.get('error_type', '')}: {r.get('error_cause', r.get('error', ''))}]" if r.get("error") else ""
    return f"{r['case']:<26} {r['status']:<10} t={t:<12} useful={r.get('useful_splits')}  {regs}{why}"


def write(out: Path | None, doc: dict[str, Any]) -> None:
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(out)


def run_isolated(args: argparse.Namespace, c: dict[str, Any], shape: dict[str, int]) -> tuple[dict[str, Any], dict | None]:
    with tempfile.TemporaryDirectory(prefix="probe-split-") as td:
        res = Path(td) / "case.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child-case", json.dumps(c), "--child-out", str(res),
               "--repeats", str(args.repeats), "--warmup", str(args.warmup), "--batch", str(shape["batch"]),
               "--seq-len", str(shape["seq_len"]), "--num-heads", str(shape["num_heads"]),
               "--num-kv-heads", str(shape["num_kv_heads"]), "--head-dim", str(shape["head_dim"]),
               "--block-size", str(shape["block_size"])] + (["--tiny"] if args.tiny else [])
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(ROOT),
                                start_new_session=True)
        try:
            log, _ = proc.communicate(timeout=args.case_timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the child we started, and what it started
            log, _ = proc.communicate()
            timed_out = True
        if res.exists():
            d = json.loads(res.read_text())
            return d["row"], d.get("env")
        row = {"case": case_name(c), **c, "predicted": predicted(c, shape["head_dim"]), "wall_s": round(time.time() - t0, 1),
               "status": "timeout" if timed_out else "crashed", "rc": proc.returncode,
               "error": (f"no result after {args.case_timeout} s (compile or run did not finish)" if timed_out
                         else f"child exited with rc {proc.returncode} and no result"),
               "log_tail": (log or "")[-1500:]}
        return row, None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write the JSON summary here (also printed)")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke test under TRITON_INTERPRET=1: tiny shapes, "
                                                        "fp16, no timing; checks only that the code paths run")
    ap.add_argument("--extended", action="store_true", help="also the predicted failure points "
                                                            f"(vLLM {VLLM_EXTENDED}, SGLang {SGLANG_EXTENDED})")
    ap.add_argument("--only", choices=("vllm", "sglang"), default=None)
    ap.add_argument("--vllm-segments", default=None, help=f"comma list (default {','.join(map(str, VLLM_SEGMENTS))})")
    ap.add_argument("--sglang-splits", default=None, help=f"comma list (default {','.join(map(str, SGLANG_SPLITS))})")
    ap.add_argument("--sglang-modes", default=None, help="static and/or dynamic (default both)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=32768)
    ap.add_argument("--num-heads", type=int, default=32)
    ap.add_argument("--num-kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=20, help="timed calls per case (CUDA events), median reported")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--isolate", dest="isolate", action="store_true", default=None,
                    help="one child process per case (default on a GPU)")
    ap.add_argument("--no-isolate", dest="isolate", action="store_false")
    ap.add_argument("--case-timeout", type=float, default=240.0, help="seconds per isolated case")
    ap.add_argument("--budget-s", type=float, default=540.0, help="start no new case after this many seconds")
    ap.add_argument("--child-case", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tiny:
        os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton
    shape = shape_of(args)

    if args.child_case is not None:  # one isolated case
        c = json.loads(args.child_case)
        bench = Bench(shape, args.tiny)
        row = bench.run_case(c, args.repeats, args.warmup)
        args.child_out.write_text(json.dumps({"row": row, "env": bench.env}) + "\n")
        return 0

    isolate = (not args.tiny) if args.isolate is None else args.isolate
    cases = plan_cases(args)
    t0 = time.time()
    doc: dict[str, Any] = {
        "what": "probe of the split-count range of vLLM 0.33.0 unified_attention (3D) and SGLang 0.5.23 "
                "decode_attention_fwd",
        "shape": shape, "tiny": args.tiny, "isolated": isolate, "env": None, "cases": [],
        "scratch_formulas": scratch_formulas(),
        "planned": [case_name(c) for c in cases],
    }
    bench: Bench | None = None
    for c in cases:
        if time.time() - t0 > args.budget_s:
            doc.setdefault("skipped_budget", []).append(case_name(c))
            continue
        print(f"--- {case_name(c)}", file=sys.stderr, flush=True)
        if isolate:
            row, env = run_isolated(args, c, shape)
            if env and not doc["env"]:
                doc["env"] = env
        else:
            if bench is None:
                bench = Bench(shape, args.tiny)
                doc["env"] = bench.env
            row = bench.run_case(c, args.repeats, args.warmup)
        doc["cases"].append(row)
        print(summary_line(row), file=sys.stderr, flush=True)
        doc["elapsed_s"] = round(time.time() - t0, 1)
        write(args.out, doc)
        if not isolate and row.get("status") == "cuda_fault":
            doc["stopped"] = "CUDA context lost in a non-isolated run; rerun the rest with --isolate"
            break
    doc["elapsed_s"] = round(time.time() - t0, 1)
    write(args.out, doc)
    print(json.dumps(doc, indent=1))
    print("\n".join(["", "summary:"] + [summary_line(r) for r in doc["cases"]]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
