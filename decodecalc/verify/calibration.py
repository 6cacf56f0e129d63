"""Measure the time model's calibration microbenchmarks on the local GPU (``decodecalc calibrate``).

The real upstream kernels (loaded by :mod:`decodecalc.verify.upstream`) are timed under CUDA graphs
(:func:`decodecalc.verify.timing.graph_seconds`), then :func:`decodecalc.timemodel.calibration_fit.fit_calibration_rows`
fits the profile.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from decodecalc.derived import next_power_of_2
from decodecalc.errors import DecodecalcError
from decodecalc.extras import install_hint
from decodecalc.timemodel import TimeProfile
from decodecalc.timemodel.calibration_fit import calibration_plan, fit_calibration_rows
from decodecalc.verify import engine
from decodecalc.verify.timing import graph_seconds

if TYPE_CHECKING:
    from decodecalc.timemodel.step_rows import WorkloadSample


def cuda_or_error(what: str = "calibrate") -> Any:
    from decodecalc.verify import missing_requirements

    missing = missing_requirements()
    if missing:
        raise DecodecalcError(f"{what} needs {' and '.join(missing)}: {install_hint('verify')} on a machine "
                              "with a CUDA GPU")
    import torch

    if not torch.cuda.is_available():
        raise DecodecalcError(f"{what} needs a CUDA GPU, and torch sees none (torch.cuda.is_available() is False); "
                              "predictions without one use the packaged or datasheet profile")
    return torch


class ShapeBench:
    """Random paged KV cache (several disjoint copies, :mod:`decodecalc.verify.kv_cache`; bf16 unless told) and the
    step functions of every calibration variant (:mod:`decodecalc.verify.engine`).

    ``kv_dtype`` (default: ``dtype``) may be an fp8 dtype: then vLLM's launch gets the query quantized to fp8 with
    per-tensor descales of one, as ``Attention.forward`` quantizes it on CUDA (0.33.0 attention.py L470-488), and
    SGLang's the fp8 buffers with ``k_scale = v_scale = 1`` (its grouped stage 1 casts the query to the buffer's
    dtype, decode_attention.py 0.5.23 L661). ``block_size`` is vLLM's KV block (SGLang reads token slots, page size
    1, of the same cache). ``kv``: a prebuilt cache instead of a new one (a step's view of a workload's pool,
    :func:`decodecalc.verify.kv_cache.prefix_view`: map steps share one pool per workload)."""

    MAX_COPIES = 256

    def __init__(self, torch: Any, vk: Any, sk: Any, h: int, h_kv: int, d: int, lens: tuple[int, ...],
                 sms: int, seed: int, *, device: str = "cuda", dtype: Any = None, kv_dtype: Any = None,
                 block_size: int = 16, kv: Any = None) -> None:
        from decodecalc.verify.kv_cache import build_paged_kv, kv_bytes
        from decodecalc.verify.timing import copies_for

        self.torch, self.vk, self.sk = torch, vk, sk
        self.h, self.h_kv, self.d, self.lens, self.sms = h, h_kv, d, lens, sms
        dev, dt = device, dtype or torch.bfloat16
        kvd = kv_dtype or dt
        self.device = dev
        self.fp8 = torch.empty((), dtype=kvd).element_size() == 1
        self.block_size = block_size
        B = len(lens)
        self.kv_bytes = kv_bytes(lens, h_kv, d, torch.empty((), dtype=kvd).element_size())
        gen = torch.Generator(device=dev)
        gen.manual_seed(seed)
        if kv is not None:  # a step's view of a workload's pool (kv_cache.prefix_view): its copies are the pool's
            self.kv, self.copies = kv, int(kv.copies)
        else:
            self.copies = copies_for(self.kv_bytes, max_copies=self.MAX_COPIES)
            self.kv = build_paged_kv(gen, seq_lens=lens, num_kv_heads=h_kv, head_size=d, block_size=block_size,
                                     dtype=kvd, device=dev, copies=self.copies)
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
        """The step function of one calibration variant: its launch (:func:`variant_launch`) on this shape."""
        return self.launch(variant_launch(variant, len(self.lens)))

    def launch(self, launch: dict[str, Any], engine_split_kernel: bool = False) -> Callable[[int], None]:
        """The step function of an engine's own launch of this step (:mod:`decodecalc.reports.step_launches`): vLLM's
        2D or 3D kernel on the batch the FULL CUDA graph replays (padding rows of length 0), SGLang's kernel with
        per-sequence split counts, written on the device by the engine's split-count kernel when
        ``engine_split_kernel`` (adaptive), else fixed."""
        torch, B, h, h_kv, d, kv, dev = self.torch, len(self.lens), self.h, self.h_kv, self.d, self.kv, self.device
        if launch["engine"] == "vllm":
            b_run, t_run = max(int(launch["batch_run"]), B), max(int(launch["tokens_run"]), B)
            S = int(launch["segments"])
            thr = 1 << 20 if launch["use_3d"] else 0  # the gate's decision, taken as the launch says
            q, out = self.q, self.out
            if t_run > B:  # the padded rows' queries are never read (their length is 0); the real rows are the bench's
                q = torch.cat([self.q, torch.zeros((t_run - B, h, d), device=dev, dtype=self.q.dtype)])
                out = torch.empty_like(q)
            quant: dict[str, Any] = {}
            if self.fp8:
                q, quant = vllm_fp8_query(torch, self.vk, q, kv.k_cache.dtype, b_run, h_kv)
            seq_lens = torch.tensor(list(self.lens) + [0] * (b_run - B), dtype=torch.int32, device=dev)
            cu_q = torch.tensor(list(range(B + 1)) + [B] * (b_run - B), dtype=torch.int32, device=dev)
            tables = kv.block_tables
            if b_run > B:  # the replay's padding rows: block tables of zeros
                tables = torch.zeros((kv.block_tables.shape[0], b_run, kv.block_tables.shape[2]), dtype=torch.int32,
                                     device=dev)
                tables[:, :B] = kv.block_tables
            so = torch.empty((t_run, h, S, self.d_pad), device=dev, dtype=torch.float32)
            sm_ = torch.empty((t_run, h, S), device=dev, dtype=torch.float32)
            ss = torch.empty((t_run, h, S), device=dev, dtype=torch.float32)

            def vstep(c: int) -> None:
                engine.vllm_unified_attention(
                    self.vk, q=q, k=kv.k_cache, v=kv.v_cache, out=out, cu_seqlens_q=cu_q, max_seqlen_q=1,
                    seqused_k=seq_lens, max_seqlen_k=max(self.lens), block_table=tables[c], softmax_scale=self.scale,
                    seq_threshold_3D=thr, num_par_softmax_segments=S, softmax_segm_output=so, softmax_segm_max=sm_,
                    softmax_segm_expsum=ss, **quant)
            vstep.out = out  # type: ignore[attr-defined]  # the step's output rows (the first B are the batch's)
            return vstep
        maxs = int(launch["max_kv_splits"])
        po = torch.empty((B, h, maxs, d), device=dev, dtype=torch.float32)
        pl = torch.empty((B, h, maxs), device=dev, dtype=torch.float32)
        ns = torch.tensor([int(x) for x in launch["splits"]], dtype=torch.int32, device=dev)
        adaptive = bool(launch["adaptive"]) and engine_split_kernel

        def sstep(c: int) -> None:
            if adaptive:  # the engine computes the counts on the device before every step (triton_backend.py)
                engine.sglang_num_kv_splits(self.sk, num_kv_splits=ns, seq_lens=self.seq_lens, num_seq=B, num_group=1,
                                            num_head=h, num_kv_head=h_kv, max_kv_splits=maxs,
                                            device_core_count=self.sms)
            engine.sglang_decode_attention(
                self.sk, q=self.q, k_buffer=kv.k_buffer, v_buffer=kv.v_buffer, o=self.out, kv_indptr=self.indptr,
                kv_indices=kv.kv_indices[c], attn_logits=po, attn_lse=pl, num_kv_splits=ns, max_kv_splits=maxs,
                sm_scale=self.scale, use_pdl=dev == "cuda")
        sstep.out = self.out  # type: ignore[attr-defined]  # what the step writes, read by the caller
        sstep.num_kv_splits = ns  # type: ignore[attr-defined]  # as vstep.out above
        return sstep


def vllm_fp8_query(torch: Any, vk: Any, q: Any, kv_dtype: Any, rows: int, h_kv: int) -> tuple[Any, dict[str, Any]]:
    """vLLM's attention layer on an fp8 KV cache (CUDA): the query quantized to the cache's dtype, and the kernel's
    per-tensor descales (all ones: the benches draw their data unscaled) for ``rows`` sequences of ``h_kv`` KV heads,
    with ``KVQuantMode.FP8_PER_TENSOR``. Returns (query, keyword arguments of unified_attention)."""
    one = torch.ones((), dtype=torch.float32, device=q.device).reshape(1)
    return q.to(kv_dtype), dict(q_descale=one, k_descale=one.expand((rows, h_kv)), v_descale=one.expand((rows, h_kv)),
                                kv_quant_mode=vk.KVQuantMode.FP8_PER_TENSOR)


def bench_device(torch: Any) -> tuple[Any, int, float, Any, Any]:
    """What the H200 measurement scripts (benchmarks/measure_*_h200.py) start from on the local CUDA GPU: its
    properties, SM count, a tiny kernel's CUDA-graph replay time (the launch overhead), and the upstream vLLM and
    SGLang kernels (found as ``decodecalc verify`` finds them)."""
    from decodecalc.verify.upstream import load_sglang, load_vllm

    props = torch.cuda.get_device_properties(0)
    x = torch.zeros(1, device="cuda")
    launch_s = graph_seconds(lambda c: x.add_(1.0), 1)
    vk = load_vllm(None, capability=tuple(torch.cuda.get_device_capability(0)), interpret=False)
    return props, int(props.multi_processor_count), launch_s, vk, load_sglang(None, interpret=False)


def timed_row(bench: ShapeBench, variant: str, *, launch: dict[str, Any] | None = None, engine_split_kernel: bool = False,
              **fields: Any) -> dict[str, Any]:
    """One row of calibrate's --save-measurements form (plus ``fields``) for ``variant`` on ``bench``: its time, or
    the error that stopped it (a measurement script times on past one failing variant). ``launch``: time this launch
    (:meth:`ShapeBench.launch`'s form, e.g. SGLang's adaptive split counts behind the engine's split-count kernel when
    ``engine_split_kernel``) instead of the calibration variant's."""
    lens = bench.lens
    row: dict[str, Any] = {"variant": variant, "num_q_heads": bench.h, "num_kv_heads": bench.h_kv, "head_dim": bench.d,
                           "batch": len(lens), "seq_len": max(lens), "kv_bytes": bench.kv_bytes,
                           "model": f"{bench.h}:{bench.h_kv}-d{bench.d}", **fields}
    if len(set(lens)) > 1:
        row["seq_lens"] = list(lens)
    try:
        step = bench.launch(launch, engine_split_kernel) if launch is not None else bench.step(variant)
        row.update({"t_us": graph_seconds(step, bench.copies) * 1e6, "status": "ok"})
    except Exception as exc:  # noqa: BLE001 - one failing variant must not stop the run
        row.update({"status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]})
    return row


def variant_launch(variant: str, batch: int) -> dict[str, Any]:
    """A calibration variant's launch (:mod:`decodecalc.reports.step_launches`' form) for a batch of ``batch``
    sequences: vLLM 2D (its scratch sized for 16 segments, the kernel ignores it), vLLM 3D with S segments, or
    SGLang with S splits for every sequence."""
    if variant.startswith("vllm-"):
        use_3d = variant != "vllm-2d"
        return {"engine": "vllm", "use_3d": use_3d, "segments": int(variant.removeprefix("vllm-3d-S")) if use_3d else 16,
                "batch_run": batch, "tokens_run": batch}
    S = int(variant.removeprefix("sglang-static-S"))
    return {"engine": "sglang", "splits": [S] * batch, "max_kv_splits": S, "adaptive": False}


def local_gpu(torch: Any, gpu: Any, why_no_sms: str) -> tuple[Any, int]:
    """The local GPU's properties and SM count, checked against ``gpu`` (the name, then the SMs: ``why_no_sms`` says
    why the command cannot take another count)."""
    props = torch.cuda.get_device_properties(0)
    check_device_is(str(props.name), gpu)
    sms = int(props.multi_processor_count)
    if sms != gpu.num_sms:
        raise DecodecalcError(f"the local GPU ({props.name}) has {sms} SMs but --gpu {gpu.name} has {gpu.num_sms}: "
                              f"pass the --gpu that is installed ({why_no_sms})")
    return props, sms


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
                    start_note: str = "the starting profile's", thorough: bool = False, grid: bool = False,
                    measured: Callable[[dict[str, Any]], None] | None = None,
                    layouts: Sequence[tuple[int, int, int]] = (),
                    keep_physics: bool = False, cold: bool = False,
                    workload: WorkloadSample | None = None,
                    backends: Sequence[str] = (),
                    map_samples: Sequence[WorkloadSample] = (),
                    fit_progress: Callable[[str], None] | None = None,
                    left_out_folds: int = 0) -> tuple[TimeProfile, list[dict[str, Any]]]:
    """Time the calibration microbenchmarks on the local GPU with the real upstream kernels (loaded by
    decodecalc.verify.upstream), fit the model and return (profile for ``gpu``, raw rows). ``measured``: called
    with the timings (and the launch overhead) before the fit starts, so that they are kept whatever the fit does;
    with ``backends``, first also before they run, without them (``pending: ["backends"]``), so that the Triton
    timings are kept whatever the backends do.
    ``layouts``: the user's own head layouts per rank, timed too; ``keep_physics``: those alone, and no fit
    (:func:`decodecalc.timemodel.calibration_fit.fit_calibration_rows`). ``workload``: sampled steps of the user's
    traffic under the engines' own launches (``calibrate --workload``), timed after the plan; their rows are the
    layout cells' data. ``backends``: the compiled backends to time too (FlashInfer's paths, FA3:
    :func:`decodecalc.verify.backend_calibration.run_backend_calibration`), their families then fitted over the new
    physics; ``map_samples``: steps of the reference workloads (``calibrate --map-steps``,
    :func:`decodecalc.reports.step_launches.reference_samples`), timed after the plan on one KV pool each
    (:func:`time_map_samples`): the residual map's data besides the plan's timings; ``fit_progress``: a line per fitted
    group of them."""
    torch = cuda_or_error()
    from decodecalc.verify.upstream import load_sglang, load_vllm

    t0 = time.monotonic()

    props, sms = local_gpu(torch, gpu, "calibrate has no --sms: a MIG slice cannot be calibrated")
    x = torch.zeros(1, device="cuda")  # per-kernel overhead of a graph replay: tiny kernels back to back
    launch_s = graph_seconds(lambda c: x.add_(1.0), 1)
    vk = load_vllm(vllm_src, capability=tuple(torch.cuda.get_device_capability(0)), interpret=False)
    sk = load_sglang(sglang_src, interpret=False)
    plan = calibration_plan(quick, thorough, layouts, layouts_only=keep_physics, grid=grid)
    launches = workload.launches if workload is not None else ()
    total = sum(len(variants) for _, variants in plan) + len(launches) + sum(len(s.launches) for s in map_samples)
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
    step_rows = time_step_launches(torch, vk, sk, workload, sms, progress, done, total) if workload else []
    done += len(launches)
    elapsed = {"triton_s": round(time.monotonic() - t0, 1)}  # the Triton kernels' (and the steps') timing
    t_map = time.monotonic()
    map_rows = time_map_samples(torch, vk, sk, map_samples, sms, progress, done, total) if map_samples else []
    map_docs = [s.saved(r) for s, r in zip(map_samples, map_rows)]
    if map_samples:
        elapsed["map_s"] = round(time.monotonic() - t_map, 1)
    versions = f"vLLM {vk.source.version} and SGLang {sk.source.version}"
    steps_doc = workload.saved(step_rows) if workload else None

    def saved(backend_rows: list[dict[str, Any]] | None, pending: bool = False) -> dict[str, Any]:
        # pending: the backends are still to run; what is saved so far fits without them
        return {"num_sms": sms, "launch_overhead_s": launch_s, "device_name": str(props.name), "versions": versions,
                **({"layouts": [list(x) for x in dict.fromkeys(layouts)]} if layouts else {}), "cases": rows,
                **({"workload": steps_doc} if steps_doc else {}),
                **({"map_steps": map_docs} if map_docs else {}),
                **({"backend_cases": backend_rows} if backend_rows is not None else {}),
                **({"pending": ["backends"]} if pending else {}),
                "elapsed": dict(elapsed)}

    backend_rows: list[dict[str, Any]] = []
    if backends:
        if measured is not None:  # the Triton timings survive a backend run that never ends (a killed job, a hang)
            measured(saved(None, pending=True))
        from decodecalc.verify.backend_calibration import run_backend_calibration

        t1 = time.monotonic()
        backend_rows = run_backend_calibration(gpu, backends, progress=progress)
        elapsed["backends_s"] = round(time.monotonic() - t1, 1)  # their JIT compile included
    if measured is not None:
        measured(saved(backend_rows if backends else None))
    prof = fit_calibration_rows(rows, gpu=gpu, base=base, num_sms=sms, launch_overhead_s=launch_s,
                                device_name=str(props.name),
                                versions=versions,
                                search_occupancy=not quick,  # three shapes are too few to choose occupancies
                                start_note=start_note, keep_physics=keep_physics, layouts=layouts, cold=cold,
                                workload=steps_doc, backend_records=backend_rows, progress=fit_progress,
                                map_steps=map_docs, left_out_folds=left_out_folds,
                                measure_backends=lambda recs: _backend_measurements(recs, gpu))
    return prof, rows


def _backend_measurements(records: Sequence[Mapping[str, Any]], gpu: Any) -> list[Any]:
    from decodecalc.verify.backend_calibration import record_measurements

    return record_measurements(records, gpu)


def time_step_launches(torch: Any, vk: Any, sk: Any, workload: WorkloadSample, sms: int,
                       progress: Callable[[int, int, str], None] | None, done: int, total: int) -> list[dict[str, Any]]:
    """Each sampled step of ``workload`` under each of its launches: one CUDA graph of the step cycling over KV copies
    (:func:`decodecalc.verify.timing.graph_seconds`, as calibrate's shapes). Rows as
    :meth:`decodecalc.timemodel.step_rows.StepLaunch.row`, with ``t_us`` (or ``status: error``)."""
    h, h_kv, d = workload.num_heads, workload.num_kv_heads, workload.head_size
    rows: list[dict[str, Any]] = []
    by_step: dict[int, list[Any]] = {}
    for x in workload.launches:
        by_step.setdefault(x.step, []).append(x)
    for k, (step, launches) in enumerate(by_step.items()):
        bench = ShapeBench(torch, vk, sk, h, h_kv, d, launches[0].seq_lens, sms, seed=1000 + k)
        for x in launches:
            row = x.row()
            try:
                t = graph_seconds(bench.launch(dict(x.launch), x.engine_split_kernel), bench.copies,
                                  what="calibrate --workload")
                row.update({"t_us": t * 1e6, "status": "ok"})
            except Exception as exc:  # noqa: BLE001 - one failing launch must not stop the calibration
                row.update({"status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]})
            rows.append(row)
            done += 1
            if progress:
                what = (f"step {step + 1}: {x.engine} " + (f"3D S={x.launch['segments']}" if x.launch.get("use_3d")
                        else "2D" if x.engine == "vllm" else f"max {x.launch['max_kv_splits']}"
                        + (" adaptive" if x.launch["adaptive"] else " static")))
                progress(done, total, what)
        del bench
        torch.cuda.empty_cache()
    return rows


#: a map sample's KV pool: rotate over at least this much (several times an H200's or H100's L2), with at most this
#: many copies and bytes (benchmarks/validate_tune_h200.py --per-step timed the shipped map's steps the same way)
POOL_ROTATE_BYTES = 256 << 20
POOL_MAX_COPIES = 16
POOL_MAX_BYTES = 24 << 30


def pool_copies(rows: int, length: int, min_step_bytes: int, h_kv: int, d: int, element_bytes: int,
                free_bytes: int, block_size: int = 16) -> int:
    """KV copies of a map sample's pool (``rows`` sequences of ``length`` tokens): enough for the smallest step to
    rotate over :data:`POOL_ROTATE_BYTES`, at most :data:`POOL_MAX_COPIES`, within :data:`POOL_MAX_BYTES` and 80% of
    the free memory less 1 GiB; at least one, or a DecodecalcError saying what one copy needs."""
    per_copy = rows * -(-length // block_size) * block_size * h_kv * d * 2 * element_bytes
    budget = min(POOL_MAX_BYTES, int(free_bytes * 0.8) - (1 << 30))
    if per_copy > budget:
        raise DecodecalcError(f"out of GPU memory: a map sample's KV pool ({rows} sequences of {length:,} tokens) "
                              f"needs {per_copy / 2**30:.1f} GiB, {budget / 2**30:.1f} GiB available")
    want = -(-POOL_ROTATE_BYTES // max(min_step_bytes, 1))
    return max(1, min(want, POOL_MAX_COPIES, budget // per_copy))


def time_map_samples(torch: Any, vk: Any, sk: Any, samples: Sequence[WorkloadSample], sms: int,
                     progress: Callable[[int, int, str], None] | None, done: int, total: int, *,
                     device: str = "cuda", dtype: Any = None) -> list[list[dict[str, Any]]]:
    """calibrate's map steps: each sample's steps under each of their launches, on one KV pool per sample (rows of
    its longest step, :func:`decodecalc.verify.kv_cache.prefix_view` per step), each launch one CUDA graph cycling
    over the pool's copies (:func:`decodecalc.verify.timing.graph_seconds`, as the shapes). Rows per sample as
    :meth:`decodecalc.timemodel.step_rows.StepLaunch.row`, with ``t_us`` (or ``status: error``)."""
    from decodecalc.verify.kv_cache import build_paged_kv, kv_bytes, prefix_view

    dt = dtype or torch.bfloat16
    out: list[list[dict[str, Any]]] = []
    for n, sample in enumerate(samples):
        h, h_kv, d = sample.num_heads, sample.num_kv_heads, sample.head_size
        steps = sorted({x.step: x.seq_lens for x in sample.launches}.items())
        rows_n = max(len(lens) for _, lens in steps)
        length = max(max(lens) for _, lens in steps)
        elt = torch.empty((), dtype=dt).element_size()
        min_bytes = min(kv_bytes(lens, h_kv, d, elt) for _, lens in steps)
        free = torch.cuda.mem_get_info()[0] if device == "cuda" else POOL_MAX_BYTES * 2
        copies = pool_copies(rows_n, length, min_bytes, h_kv, d, elt, free)
        gen = torch.Generator(device=device)
        gen.manual_seed(2000 + n)
        pool = build_paged_kv(gen, seq_lens=[length] * rows_n, num_kv_heads=h_kv, head_size=d, block_size=16,
                              dtype=dt, device=device, copies=copies)
        rows: list[dict[str, Any]] = []
        by_step: dict[int, list[Any]] = {}
        for x in sample.launches:
            by_step.setdefault(x.step, []).append(x)
        for k, (step, launches) in enumerate(sorted(by_step.items())):
            bench = ShapeBench(torch, vk, sk, h, h_kv, d, launches[0].seq_lens, sms, seed=3000 + k, device=device,
                               dtype=dt, kv=prefix_view(pool, launches[0].seq_lens, 16))
            for x in launches:
                row = x.row()
                try:
                    t = graph_seconds(bench.launch(dict(x.launch), x.engine_split_kernel), bench.copies,
                                      what="calibrate's map steps")
                    row.update({"t_us": t * 1e6, "status": "ok"})
                except Exception as exc:  # noqa: BLE001 - one failing launch must not stop the calibration
                    row.update({"status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]})
                rows.append(row)
                done += 1
                if progress:
                    progress(done, total, f"map: {sample.model} {sample.source} step {step + 1}")
            del bench
        out.append(rows)
        del pool
        if device == "cuda":
            torch.cuda.empty_cache()
    return out
