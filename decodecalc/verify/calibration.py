"""Measure the time model's calibration microbenchmarks on the local GPU (``decodecalc calibrate``).

The real upstream kernels (loaded by :mod:`decodecalc.verify.upstream`) are timed under CUDA graphs
(:func:`decodecalc.verify.timing.graph_seconds`), then :func:`decodecalc.timemodel.calibration_fit.fit_calibration_rows`
fits the profile.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

from decodecalc.derived import next_power_of_2
from decodecalc.errors import DecodecalcError
from decodecalc.extras import install_hint
from decodecalc.timemodel import TimeProfile
from decodecalc.timemodel.calibration_fit import calibration_plan, fit_calibration_rows
from decodecalc.verify import engine
from decodecalc.verify.timing import graph_seconds


def cuda_or_error() -> Any:
    from decodecalc.verify import missing_requirements

    missing = missing_requirements()
    if missing:
        raise DecodecalcError(f"calibrate needs {' and '.join(missing)}: {install_hint('verify')} on a machine "
                              "with a CUDA GPU")
    import torch

    if not torch.cuda.is_available():
        raise DecodecalcError("calibrate needs a CUDA GPU, and torch sees none (torch.cuda.is_available() is False); "
                              "predictions without one use the packaged or datasheet profile")
    return torch


class ShapeBench:
    """Random bf16 paged KV cache (several disjoint copies, :mod:`decodecalc.verify.kv_cache`) and the
    step functions of every calibration variant (:mod:`decodecalc.verify.engine`)."""

    MAX_COPIES = 256

    def __init__(self, torch: Any, vk: Any, sk: Any, h: int, h_kv: int, d: int, lens: tuple[int, ...],
                 sms: int, seed: int, *, device: str = "cuda", dtype: Any = None) -> None:
        from decodecalc.verify.kv_cache import build_paged_kv, kv_bytes
        from decodecalc.verify.timing import copies_for

        self.torch, self.vk, self.sk = torch, vk, sk
        self.h, self.h_kv, self.d, self.lens, self.sms = h, h_kv, d, lens, sms
        dev, dt = device, dtype or torch.bfloat16
        self.device = dev
        B = len(lens)
        self.kv_bytes = kv_bytes(lens, h_kv, d, 2)
        self.copies = copies_for(self.kv_bytes, max_copies=self.MAX_COPIES)
        gen = torch.Generator(device=dev)
        gen.manual_seed(seed)
        self.kv = build_paged_kv(gen, seq_lens=lens, num_kv_heads=h_kv, head_size=d, block_size=16, dtype=dt,
                                 device=dev, copies=self.copies)
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
        torch, B, h, d, kv, dev = self.torch, len(self.lens), self.h, self.d, self.kv, self.device
        if variant.startswith("vllm-"):
            S = 16 if variant == "vllm-2d" else int(variant.removeprefix("vllm-3d-S"))
            thr = 0 if variant == "vllm-2d" else 1 << 20
            so = torch.empty((B, h, S, self.d_pad), device=dev, dtype=torch.float32)
            sm_ = torch.empty((B, h, S), device=dev, dtype=torch.float32)
            ss = torch.empty((B, h, S), device=dev, dtype=torch.float32)

            def vstep(c: int) -> None:
                engine.vllm_unified_attention(
                    self.vk, q=self.q, k=kv.k_cache, v=kv.v_cache, out=self.out, cu_seqlens_q=self.cu_q,
                    max_seqlen_q=1, seqused_k=self.seq_lens, max_seqlen_k=max(self.lens),
                    block_table=kv.block_tables[c], softmax_scale=self.scale, seq_threshold_3D=thr,
                    num_par_softmax_segments=S, softmax_segm_output=so, softmax_segm_max=sm_, softmax_segm_expsum=ss)
            return vstep
        S = int(variant.removeprefix("sglang-static-S"))
        po = torch.empty((B, h, S, d), device=dev, dtype=torch.float32)
        pl = torch.empty((B, h, S), device=dev, dtype=torch.float32)
        ns = torch.full((B,), S, dtype=torch.int32, device=dev)

        def sstep(c: int) -> None:
            engine.sglang_decode_attention(
                self.sk, q=self.q, k_buffer=kv.k_buffer, v_buffer=kv.v_buffer, o=self.out, kv_indptr=self.indptr,
                kv_indices=kv.kv_indices[c], attn_logits=po, attn_lse=pl, num_kv_splits=ns, max_kv_splits=S,
                sm_scale=self.scale, use_pdl=dev == "cuda")
        return sstep


def check_device_is(device_name: str, gpu: Any) -> None:
    """Refuse to write ``gpu``'s profile from another GPU: an H200 and an H100 SXM both have 132 SMs, so the SM
    count alone let an H200 calibrate as ``--gpu h100-sxm``. A device name the GPU table does not know is taken at
    the user's word (a new part, a renamed SKU)."""
    from decodecalc.errors import UnknownNameError
    from decodecalc.specs.gpus import resolve_gpu

    try:
        local = resolve_gpu(device_name)
    except UnknownNameError:
        return
    if local.name != gpu.name and gpu.name not in getattr(local, "aliases", ()):
        raise DecodecalcError(f"the local GPU is {device_name} ({local.name}), not --gpu {gpu.name}; valid: "
                              f"--gpu {local.name}")


def run_calibration(gpu: Any, *, base: TimeProfile, quick: bool = False, vllm_src: str | os.PathLike[str] | None = None,
                    sglang_src: str | os.PathLike[str] | None = None,
                    progress: Callable[[int, int, str], None] | None = None,
                    start_note: str = "the starting profile's", thorough: bool = False,
                    measured: Callable[[dict[str, Any]], None] | None = None,
                    layouts: Sequence[tuple[int, int, int]] = (),
                    keep_physics: bool = False, cold: bool = False) -> tuple[TimeProfile, list[dict[str, Any]]]:
    """Time the calibration microbenchmarks on the local GPU with the real upstream kernels (loaded by
    decodecalc.verify.upstream), fit the model and return (profile for ``gpu``, raw rows). ``measured``: called
    with the timings (and the launch overhead) before the fit starts, so that they are kept whatever the fit does.
    ``layouts``: the user's own head layouts per rank, timed too; ``keep_physics``: those alone, and no fit
    (:func:`decodecalc.timemodel.calibration_fit.fit_calibration_rows`)."""
    torch = cuda_or_error()
    from decodecalc.verify.upstream import load_sglang, load_vllm

    props = torch.cuda.get_device_properties(0)
    check_device_is(str(props.name), gpu)
    sms = int(props.multi_processor_count)
    if sms != gpu.num_sms:
        raise DecodecalcError(f"the local GPU ({props.name}) has {sms} SMs but --gpu {gpu.name} has {gpu.num_sms}: "
                              "pass the --gpu that is installed (calibrate has no --sms: a MIG slice cannot be calibrated)")
    x = torch.zeros(1, device="cuda")  # per-kernel overhead of a graph replay: tiny kernels back to back
    launch_s = graph_seconds(lambda c: x.add_(1.0), 1)
    vk = load_vllm(vllm_src, capability=tuple(torch.cuda.get_device_capability(0)), interpret=False)
    sk = load_sglang(sglang_src, interpret=False)
    plan = calibration_plan(quick, thorough, layouts, layouts_only=keep_physics)
    total = sum(len(variants) for _, variants in plan)
    rows: list[dict[str, Any]] = []
    done = 0
    for si, ((h, h_kv, d, lens), variants) in enumerate(plan):
        bench = ShapeBench(torch, vk, sk, h, h_kv, d, lens, sms, seed=si)
        for variant in variants:
            row: dict[str, Any] = {"variant": variant, "num_q_heads": h, "num_kv_heads": h_kv, "head_dim": d,
                                   "batch": len(lens), "seq_len": max(lens), "kv_bytes": bench.kv_bytes,
                                   "model": f"{h}:{h_kv}-d{d}"}
            if len(set(lens)) > 1:
                row["seq_lens"] = list(lens)
            try:
                t = graph_seconds(bench.step(variant), bench.copies)
                row.update({"t_us": t * 1e6, "status": "ok"})
            except Exception as exc:  # noqa: BLE001 - one failing variant must not stop the calibration
                row.update({"status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]})
            rows.append(row)
            done += 1
            if progress:
                progress(done, total, f"{h}:{h_kv} d{d} B{len(lens)} L{max(lens)} {variant}")
        del bench
        torch.cuda.empty_cache()
    versions = f"vLLM {vk.source.version} and SGLang {sk.source.version}"
    if measured is not None:
        measured({"num_sms": sms, "launch_overhead_s": launch_s, "device_name": str(props.name), "versions": versions,
                  **({"layouts": [list(x) for x in dict.fromkeys(layouts)]} if layouts else {}), "cases": rows})
    prof = fit_calibration_rows(rows, gpu=gpu, base=base, num_sms=sms, launch_overhead_s=launch_s,
                                device_name=str(props.name),
                                versions=versions,
                                search_occupancy=not quick,  # three shapes are too few to choose occupancies
                                start_note=start_note, keep_physics=keep_physics, layouts=layouts, cold=cold)
    return prof, rows
