"""Measure the time model's calibration microbenchmarks on the local GPU (``decodecalc calibrate``).

The real upstream kernels (loaded by :mod:`decodecalc.verify.upstream`) are timed under CUDA graphs
(:mod:`decodecalc.verify.timing`), then :func:`decodecalc.timemodel.fit.fit_calibration_rows` fits the profile.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from decodecalc.timemodel.fit import CALIBRATION_SHAPES, CALIBRATION_VARIANTS, QUICK_SHAPES, fit_calibration_rows
from decodecalc.errors import DecodecalcError
from decodecalc.timemodel import TimeProfile


def cuda_or_error() -> Any:
    from decodecalc.verify import missing_requirements

    missing = missing_requirements()
    if missing:
        raise DecodecalcError(f"calibrate needs {' and '.join(missing)}: pip install 'decodecalc[verify]' on a machine "
                              "with a CUDA GPU")
    import torch

    if not torch.cuda.is_available():
        raise DecodecalcError("calibrate needs a CUDA GPU, and torch sees none (torch.cuda.is_available() is False); "
                              "predictions without one use the packaged or datasheet profile")
    return torch


class ShapeBench:
    """Random bf16 paged KV cache (several disjoint copies) and the step functions of every variant."""

    ROTATE_BYTES = 256 << 20

    def __init__(self, torch: Any, vk: Any, sk: Any, h: int, h_kv: int, d: int, lens: tuple[int, ...],
                 sms: int, seed: int) -> None:
        from decodecalc.derived import cdiv, next_power_of_2

        self.torch, self.vk, self.sk = torch, vk, sk
        self.h, self.h_kv, self.d, self.lens, self.sms = h, h_kv, d, lens, sms
        dev, dt, bs = "cuda", torch.bfloat16, 16
        B = len(lens)
        nb = [cdiv(L, bs) for L in lens]
        per_copy = sum(nb)
        self.kv_bytes = sum(lens) * h_kv * d * 2 * 2
        self.copies = max(1, min(256, cdiv(self.ROTATE_BYTES, self.kv_bytes)))
        gen = torch.Generator(device=dev)
        gen.manual_seed(seed)
        nblocks = self.copies * per_copy + 1
        self.k = torch.randn((nblocks, bs, h_kv, d), generator=gen, device=dev, dtype=dt)
        self.v = torch.randn((nblocks, bs, h_kv, d), generator=gen, device=dev, dtype=dt)
        perm = torch.randperm(nblocks - 1, generator=gen, device=dev).to(torch.int32) + 1
        self.tables = torch.zeros((self.copies, B, max(nb)), dtype=torch.int32, device=dev)
        self.indices = torch.empty((self.copies, sum(lens)), dtype=torch.int64, device=dev)  # as SGLang allocates them
        ar = torch.arange(bs, device=dev, dtype=torch.int32)
        for c in range(self.copies):
            off, tok = c * per_copy, 0
            for i, n in enumerate(nb):
                blocks = perm[off:off + n]
                self.tables[c, i, :n] = blocks
                self.indices[c, tok:tok + lens[i]] = (blocks[:, None] * bs + ar[None, :]).reshape(-1)[:lens[i]].to(torch.int64)
                tok += lens[i]
                off += n
        self.q = torch.randn((B, h, d), generator=gen, device=dev, dtype=dt)
        self.out = torch.empty((B, h, d), device=dev, dtype=dt)
        self.seq_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
        self.cu_q = torch.arange(B + 1, dtype=torch.int32, device=dev)
        indptr = [0]
        for L in lens:
            indptr.append(indptr[-1] + L)
        self.indptr = torch.tensor(indptr, dtype=torch.int32, device=dev)
        self.d_pad = next_power_of_2(d)
        self.scale = 1.0 / math.sqrt(d)

    def step(self, variant: str) -> Callable[[int], None]:
        torch, B, h, d = self.torch, len(self.lens), self.h, self.d
        if variant.startswith("vllm-"):
            S = 16 if variant == "vllm-2d" else int(variant.removeprefix("vllm-3d-S"))
            thr = 0 if variant == "vllm-2d" else 1 << 20
            so = torch.empty((B, h, S, self.d_pad), device="cuda", dtype=torch.float32)
            sm_ = torch.empty((B, h, S), device="cuda", dtype=torch.float32)
            ss = torch.empty((B, h, S), device="cuda", dtype=torch.float32)

            def vstep(c: int) -> None:
                self.vk.unified_attention(
                    q=self.q, k=self.k, v=self.v, out=self.out, cu_seqlens_q=self.cu_q, max_seqlen_q=1,
                    seqused_k=self.seq_lens, max_seqlen_k=max(self.lens), softmax_scale=self.scale, causal=True,
                    window_size=(-1, -1), block_table=self.tables[c], softcap=0, q_descale=None, k_descale=None,
                    v_descale=None, seq_threshold_3D=thr, num_par_softmax_segments=S, softmax_segm_output=so,
                    softmax_segm_max=sm_, softmax_segm_expsum=ss)
            return vstep
        S = int(variant.removeprefix("sglang-static-S"))
        po = torch.empty((B, h, S, d), device="cuda", dtype=torch.float32)
        pl = torch.empty((B, h, S), device="cuda", dtype=torch.float32)
        ns = torch.full((B,), S, dtype=torch.int32, device="cuda")
        kb, vb = self.k.view(-1, self.h_kv, d), self.v.view(-1, self.h_kv, d)

        def sstep(c: int) -> None:
            self.sk.decode_attention_fwd(self.q, kb, vb, self.out, self.indptr, self.indices[c], po, pl, ns, S,
                                         self.scale, 1.0, 1.0, use_pdl=True)
        return sstep


def time_graph(step: Callable[[int], None], copies: int) -> float:
    """Median seconds per call: CUDA-graph replay over rotating KV copies (verify.timing, METHOD.md)."""
    from decodecalc.verify.timing import time_calls

    timing = time_calls(step, copies, target_ms=2.0, replays=5)
    if timing.t_us is None or timing.timer != "graph":
        raise DecodecalcError(f"calibrate could not time with a CUDA graph: {timing.note}")
    return timing.t_us * 1e-6



def run_calibration(gpu: Any, *, base: TimeProfile, quick: bool = False, vllm_src: str | os.PathLike[str] | None = None,
                    sglang_src: str | os.PathLike[str] | None = None,
                    progress: Callable[[int, int, str], None] | None = None) -> tuple[TimeProfile, list[dict[str, Any]]]:
    """Time the calibration microbenchmarks on the local GPU with the real upstream kernels (loaded by
    decodecalc.verify.upstream), fit the model and return (profile for ``gpu``, raw rows)."""
    torch = cuda_or_error()
    from decodecalc.verify.upstream import load_sglang, load_vllm

    props = torch.cuda.get_device_properties(0)
    sms = int(props.multi_processor_count)
    if sms != gpu.num_sms:
        raise DecodecalcError(f"the local GPU ({props.name}) has {sms} SMs but --gpu {gpu.name} has {gpu.num_sms}: "
                              "pass the --gpu that is installed (or --sms for a MIG slice)")
    x = torch.zeros(1, device="cuda")  # per-kernel overhead of a graph replay: tiny kernels back to back
    launch_s = time_graph(lambda c: x.add_(1.0), 1)
    vk = load_vllm(vllm_src, capability=tuple(torch.cuda.get_device_capability(0)), interpret=False)
    sk = load_sglang(sglang_src, interpret=False)
    shapes = [CALIBRATION_SHAPES[i] for i in QUICK_SHAPES] if quick else list(CALIBRATION_SHAPES)
    total = len(shapes) * len(CALIBRATION_VARIANTS)
    rows: list[dict[str, Any]] = []
    done = 0
    for si, (h, h_kv, d, lens) in enumerate(shapes):
        bench = ShapeBench(torch, vk, sk, h, h_kv, d, lens, sms, seed=si)
        for variant in CALIBRATION_VARIANTS:
            row: dict[str, Any] = {"variant": variant, "num_q_heads": h, "num_kv_heads": h_kv, "head_dim": d,
                                   "batch": len(lens), "seq_len": max(lens), "kv_bytes": bench.kv_bytes,
                                   "model": f"{h}:{h_kv}-d{d}"}
            if len(set(lens)) > 1:
                row["seq_lens"] = list(lens)
            try:
                t = time_graph(bench.step(variant), bench.copies)
                row.update({"t_us": t * 1e6, "status": "ok"})
            except Exception as exc:  # noqa: BLE001 - one failing variant must not stop the calibration
                row.update({"status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]})
            rows.append(row)
            done += 1
            if progress:
                progress(done, total, f"{h}:{h_kv} d{d} B{len(lens)} L{max(lens)} {variant}")
        del bench
        torch.cuda.empty_cache()
    prof = fit_calibration_rows(rows, gpu=gpu, base=base, num_sms=sms, launch_overhead_s=launch_s,
                                device_name=str(props.name),
                                versions=f"vLLM {vk.source.version} and SGLang {sk.source.version}",
                                search_occupancy=not quick)  # three shapes are too few to choose occupancies
    return prof, rows
