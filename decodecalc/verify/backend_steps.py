"""One decode step of each compiled backend, ready to run on the GPU (FlashInfer's two decode paths, vLLM's FA3 and
FlashMLA builds, flash-attn's FA2), called the way the engines call them, with its KV cache in disjoint copies
(:mod:`decodecalc.verify.timing`). Where the libraries come from, and how a step's launches are captured and
compared: :mod:`decodecalc.verify.profiler`; :func:`run_case` does both for one shape. torch and the backends are
imported inside functions only."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from decodecalc.errors import UnsupportedError
from decodecalc.launchers.details import XqaDetails
from decodecalc.verify.profiler import (compare_launches, default_result, fa3_splits_check, knob_plan, load_fa2,
                                       load_ops, missing_backend, predict_and_compare, profile_launches,
                                       trtllm_xqa_knobs)
from decodecalc.workload import Workload



@dataclass
class Step:
    """One decode step ready to run: ``run(copy)`` launches it on KV-cache copy ``copy``."""

    run: Callable[[int], Any]
    copies: int
    kv_bytes: int
    info: dict[str, Any] = field(default_factory=dict)
    readback: Callable[[], dict[str, Any]] | None = None


def _pages(w: Workload, page: int) -> list[int]:
    return [math.ceil(L / page) for L in w.seq_lens]


def _kv_bytes(w: Workload) -> int:
    per_tok = w.num_kv_heads * (w.head_size + (0 if w.model.is_mla else w.head_size_v)) * w.kv_bytes_per_element
    return sum(w.seq_lens) * per_tok


def kv_torch_dtype(w: Workload) -> Any:
    """The torch dtype of ``w``'s KV cache: the query dtype, or the fp8 format its ``kv_cache_dtype`` names (``fp8`` is
    e4m3, as in vLLM and SGLang)."""
    import torch

    kv = w.kv_cache_dtype
    if kv.startswith("fp8"):
        return torch.float8_e5m2 if kv == "fp8_e5m2" else torch.float8_e4m3fn
    return torch.float16 if kv == "float16" else torch.bfloat16


def _random_cache(shape: tuple[int, ...], dtype: Any, g: Any) -> Any:
    """A KV cache of ``shape`` in ``dtype``, drawn in bf16 (torch draws no fp8 values) and cast."""
    import torch

    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g).to(dtype)


def _copies(w: Workload, copies: int | None) -> int:
    from decodecalc.verify.timing import copies_for

    return copies if copies is not None else copies_for(_kv_bytes(w))


def _paged(w: Workload, seed: int) -> tuple[Any, Any, int, list[int], int]:
    """What a paged-cache runner starts from: (the KV dtype, a seeded CUDA generator, the page size, pages per
    sequence, pages in all)."""
    import torch

    page = w.block_size
    pages = _pages(w, page)
    return kv_torch_dtype(w), torch.Generator(device="cuda").manual_seed(seed), page, pages, sum(pages)


def flashinfer_step(w: Workload, *, tensor_cores: bool, cuda_graph: bool = False, copies: int | None = None,
                    seed: int = 0, fixed_split_size: int | None = None, disable_split_kv: bool = False,
                    workspace_bytes: int = 256 << 20) -> Step:
    """``BatchDecodeWithPagedKVCacheWrapper`` (NHD, page size w.block_size), planned once, run per copy
    (``workspace_bytes``: its float workspace; a workload replay holding a wrapper per step asks for less). An fp8
    KV cache is planned with ``kv_data_type`` fp8 and a bf16 query, as SGLang and vLLM call it (scales 1)."""
    import flashinfer
    import torch

    dev, dt = "cuda", torch.bfloat16
    kv_dt, g, page, pages, n_pages = _paged(w, seed)
    B = w.batch
    c = _copies(w, copies)
    caches = [_random_cache((n_pages, 2, page, w.num_kv_heads, w.head_size), kv_dt, g) for _ in range(c)]
    indptr = torch.tensor([0, *itertools_acc(pages)], dtype=torch.int32, device=dev)
    indices = torch.randperm(n_pages, device=dev, generator=g).to(torch.int32)
    last = torch.tensor([L - (p - 1) * page for L, p in zip(w.seq_lens, pages)], dtype=torch.int32, device=dev)
    q = torch.randn(B, w.num_heads, w.head_size, device=dev, dtype=dt, generator=g)
    out = torch.empty_like(q)
    ws = torch.zeros(workspace_bytes, dtype=torch.uint8, device=dev)
    kw: dict[str, Any] = {}
    if cuda_graph:
        kw = {"paged_kv_indptr_buffer": indptr.clone(), "paged_kv_indices_buffer": indices.clone(),
              "paged_kv_last_page_len_buffer": last.clone()}
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_cuda_graph=cuda_graph,
                                                            use_tensor_cores=tensor_cores, **kw)
    knobs: dict[str, Any] = {}
    if fixed_split_size is not None or disable_split_kv:  # tensor-core plan only (flashinfer decode.py L1696)
        knobs = {"fixed_split_size": fixed_split_size, "disable_split_kv": disable_split_kv}
    wrapper.plan(indptr, indices, last, w.num_heads, w.num_kv_heads, w.head_size, page,
                 q_data_type=dt, kv_data_type=kv_dt, **knobs)

    def run(i: int) -> None:
        wrapper.run(q, caches[i % c], out=out)

    return Step(run=run, copies=c, kv_bytes=_kv_bytes(w),
                info={"flashinfer_version": flashinfer.__version__, "cuda_graph_plan": cuda_graph,
                      "backend": getattr(wrapper, "_backend", None), "kv_data_type": str(kv_dt)})


def itertools_acc(xs: list[int]) -> list[int]:
    out, s = [], 0
    for x in xs:
        s += x
        out.append(s)
    return out


def _block_table(w: Workload, page: int, dev: str, g: Any, width: int | None = None) -> tuple[Any, int]:
    """A block table of ``width`` pages per request (default: the longest request's), the pages in random order, the
    unused slots at page 0; and the number of pages."""
    import torch

    pages = _pages(w, page)
    n_pages = sum(pages)
    perm = torch.randperm(n_pages, device=dev, generator=g).to(torch.int32)
    bt = torch.zeros(w.batch, width or max(pages), dtype=torch.int32, device=dev)
    o = 0
    for b, p in enumerate(pages):
        bt[b, :p] = perm[o:o + p]
        o += p
    return bt, n_pages


def fa3_step(w: Workload, *, num_splits: int = 0, copies: int | None = None, seed: int = 0) -> Step:
    """vLLM's FA3 decode call: varlen q (one token per request), paged KV, ``seqused_k``, causal, with the
    scheduler metadata vLLM precomputes (``get_scheduler_metadata``); ``num_splits`` 0 = heuristic,
    32 = vLLM's bound under full CUDA graphs. An fp8 KV cache runs as vLLM 0.33.0 runs FA3 on it
    (vllm/v1/attention/backends/flash_attn.py): the query quantized to the cache's fp8 dtype, the scheduler
    metadata for that dtype, q/k/v descales of shape (num_seqs, num_kv_heads) (1 here), a bf16 output."""
    import torch

    ops = load_ops("fa3")
    dev, dt = "cuda", torch.bfloat16
    kv_dt = kv_torch_dtype(w)
    fp8 = w.kv_cache_dtype.startswith("fp8")
    g = torch.Generator(device=dev).manual_seed(seed)
    page, B = w.block_size, w.batch
    bt, n_pages = _block_table(w, page, dev, g)
    c = _copies(w, copies)
    ks = [_random_cache((n_pages, page, w.num_kv_heads, w.head_size), kv_dt, g) for _ in range(c)]
    vs = [_random_cache((n_pages, page, w.num_kv_heads, w.head_size_v), kv_dt, g) for _ in range(c)]
    q = _random_cache((w.num_tokens, w.num_heads, w.head_size), kv_dt if fp8 else dt, g)
    out = torch.empty(w.num_tokens, w.num_heads, w.head_size_v, device=dev, dtype=dt)
    descale = torch.ones(B, w.num_kv_heads, device=dev, dtype=torch.float32) if fp8 else None
    cu_q = torch.tensor([0, *itertools_acc(list(w.query_lens))], dtype=torch.int32, device=dev)
    seqused = torch.tensor(w.seq_lens, dtype=torch.int32, device=dev)
    maxq, maxk = w.max_seqlen_q, w.max_seqlen_k
    md = ops.get_scheduler_metadata(B, maxq, maxk, w.num_heads, w.num_kv_heads, w.head_size, w.head_size_v,
                                    kv_dt if fp8 else dt,
                                    seqused, cu_q, None, None, None, None, page, 0, True, -1, -1, False,
                                    num_splits, None, 0)
    scale = w.head_size ** -0.5

    def run(i: int) -> None:
        ops.fwd(q, ks[i % c], vs[i % c], None, None, None, out, cu_q, None, None, None, seqused, maxq, maxk, bt,
                None, None, None, None, None, descale, descale, descale, scale, True, -1, -1, 0.0, True, md,
                num_splits, None, 0, None, 1, 0, None)

    def readback() -> dict[str, Any]:
        return {"scheduler_metadata": md.tolist()[:4 * B + 8] if md is not None else None}

    return Step(run=run, copies=c, kv_bytes=_kv_bytes(w), info={"num_splits_arg": num_splits, "kv_data_type": str(kv_dt)},
                readback=readback)


def xqa_step(w: Workload, *, max_seq_len: int, sm_count: int | None = None, copies: int | None = None,
             seed: int = 0) -> Step:
    """FlashInfer's XQA as the engines call it (``flashinfer.xqa.xqa``, NHD, page size w.block_size): a block table
    ``max_seq_len`` tokens wide (the kernel's maxSeqLen, xqa.py L361-363), its unused slots pointing at page 0; an fp8
    cache is e4m3 with a bf16 query (the Hopper kernel, mha_sm90.cu); ``sm_count``: the SM count passed to the
    launcher (None: the device's), how decodecalc times TensorRT-LLM's multi-block count on this kernel."""
    import importlib

    import flashinfer
    import torch

    xqa_fn = importlib.import_module("flashinfer.xqa").xqa  # the package's own ``xqa`` attribute is this function

    dev, dt = "cuda", torch.bfloat16
    kv_dt, g, page, pages, n_pages = _paged(w, seed)
    B = w.batch
    width = -(-max_seq_len // page)
    if width < max(pages):
        raise UnsupportedError(f"xqa: a block table of {max_seq_len} tokens cannot hold {w.max_seqlen_k}")
    c = _copies(w, copies)
    ks = [_random_cache((n_pages, page, w.num_kv_heads, w.head_size), kv_dt, g) for _ in range(c)]
    vs = [_random_cache((n_pages, page, w.num_kv_heads, w.head_size_v), kv_dt, g) for _ in range(c)]
    bt, _ = _block_table(w, page, dev, g, width)
    q = torch.randn(B, 1, w.num_heads, w.head_size, device=dev, dtype=dt, generator=g)
    out = torch.empty_like(q)
    seq = torch.tensor(w.seq_lens, dtype=torch.uint32, device=dev).unsqueeze(1)
    ws = torch.zeros(256 << 20, dtype=torch.uint8, device=dev)
    sem, scratch = ws[: 8 << 20], ws[8 << 20:]  # flashinfer decode.py L4738-4740
    sms = sm_count or torch.cuda.get_device_properties(0).multi_processor_count

    def run(i: int) -> None:
        xqa_fn(q, ks[i % c], vs[i % c], bt, seq, out, scratch, sem, w.num_kv_heads, page,
               q_scale=1.0, sm_count=sms)  # bmm1_scale / kv_scale * sqrt(d) = 1

    return Step(run=run, copies=c, kv_bytes=_kv_bytes(w),
                info={"flashinfer_version": flashinfer.__version__, "max_seq_len": width * page, "sm_count": sms,
                      "kv_data_type": str(kv_dt)})


def flashmla_step(w: Workload, *, copies: int | None = None, seed: int = 0) -> Step:
    """vLLM's FlashMLA dense decode (``dense_decode_fwd``), bf16 KV, page size 64; the scheduler metadata
    (per-request split counts) is computed on the first call and reused, as vLLM does per step."""
    import torch

    ops = load_ops("flashmla")
    dev, dt = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(seed)
    page, B, s_q = w.block_size, w.batch, w.max_seqlen_q
    bt, n_pages = _block_table(w, page, dev, g)
    c = _copies(w, copies)
    ks = [torch.randn(n_pages, page, w.num_kv_heads, w.head_size, device=dev, dtype=dt, generator=g) for _ in range(c)]
    q = torch.randn(B, s_q, w.num_heads, w.head_size, device=dev, dtype=dt, generator=g)
    seqlens = torch.tensor(w.seq_lens, dtype=torch.int32, device=dev)
    scale = w.head_size ** -0.5
    state: dict[str, Any] = {"md": None, "ns": None}
    o, _, md, ns = ops.dense_decode_fwd(q, ks[0], w.head_size_v, seqlens, bt, scale, True, None, None, None)
    state["md"], state["ns"] = md, ns
    out = torch.empty_like(o)

    def run(i: int) -> None:
        ops.dense_decode_fwd(q, ks[i % c], w.head_size_v, seqlens, bt, scale, True, state["md"], state["ns"], out)

    def readback() -> dict[str, Any]:
        ns_l = state["ns"].tolist() if state["ns"] is not None else None
        splits = [ns_l[b + 1] - ns_l[b] for b in range(B)] if ns_l and len(ns_l) == B + 1 else None
        return {"num_splits_prefix": ns_l, "splits": splits,
                "tile_scheduler_metadata_rows": int(state["md"].shape[0]) if state["md"] is not None else None}

    return Step(run=run, copies=c, kv_bytes=_kv_bytes(w), readback=readback)


def fa2_step(w: Workload, *, num_splits: int = 0, copies: int | None = None, seed: int = 0) -> Step:
    """flash-attn's ``flash_attn_with_kvcache`` decode call (``fwd_kvcache`` with the arguments
    flash_attn_interface.py passes, causal as decode does): a paged cache when the block size is a
    multiple of 256 (FA2's rule, flash_api.cpp L1264), else a contiguous one with ``cache_seqlens``."""
    import torch

    if len(set(w.query_lens)) != 1:
        raise UnsupportedError("fa2: flash_attn_with_kvcache takes one query length for the whole batch")
    mod, dev, dt = load_fa2(), "cuda", torch.float16 if w.dtype == "float16" else torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(seed)
    page, paged = w.block_size, w.block_size % 256 == 0
    bt, n_pages = _block_table(w, page, dev, g) if paged else (None, w.batch)
    shape = (n_pages, page if paged else w.max_seqlen_k, w.num_kv_heads, w.head_size)
    c = _copies(w, copies)
    ks = [torch.randn(*shape, device=dev, dtype=dt, generator=g) for _ in range(c)]
    vs = [torch.randn(*shape, device=dev, dtype=dt, generator=g) for _ in range(c)]
    q = torch.randn(w.batch, w.max_seqlen_q, w.num_heads, w.head_size, device=dev, dtype=dt, generator=g)
    seqlens, scale = torch.tensor(w.seq_lens, dtype=torch.int32, device=dev), w.head_size ** -0.5

    def run(i: int) -> None:
        mod.fwd_kvcache(q, ks[i % c], vs[i % c], None, None, seqlens, None, None, None, None, bt, None, None,
                        scale, True, -1, -1, 0.0, False, num_splits)

    return Step(run=run, copies=c, kv_bytes=_kv_bytes(w),
                info={"paged_kv": paged, "page_block_size": page if paged else None, "num_splits_arg": num_splits})


def build_step(backend: str, w: Workload, *, cuda_graph: bool = False, copies: int | None = None,
               seed: int = 0, knobs: dict[str, Any] | None = None) -> Step:
    """One decode step of ``backend``; ``knobs``: fixed_split_size / disable_split_kv (flashinfer-tc),
    num_splits (fa3; default 0, or vLLM's 32 under CUDA graphs)."""
    why = missing_backend(backend)
    if why:
        raise UnsupportedError(why)
    kn = dict(knobs or {})
    if backend in ("flashinfer", "flashinfer-tc"):
        return flashinfer_step(w, tensor_cores=backend == "flashinfer-tc", cuda_graph=cuda_graph, copies=copies,
                               seed=seed, fixed_split_size=kn.get("fixed_split_size"),
                               disable_split_kv=bool(kn.get("disable_split_kv", False)))
    if backend == "fa3":
        return fa3_step(w, num_splits=int(kn.get("num_splits", 32 if cuda_graph else 0)), copies=copies, seed=seed)
    if backend == "flashmla":
        return flashmla_step(w, copies=copies, seed=seed)
    if backend in ("xqa", "xqa-fp8", "trtllm-xqa"):
        return xqa_step(w, max_seq_len=int(kn.get("max_seq_len") or w.max_seqlen_k), sm_count=kn.get("sm_count"),
                        copies=copies, seed=seed)
    if backend == "fa2":
        return fa2_step(w, num_splits=int(kn.get("num_splits", 0)), copies=copies, seed=seed)
    raise UnsupportedError(f"--system {backend}: no runner in this build of decodecalc")


def run_case(backend: str, w: Workload, gpu: Any, *, cuda_graph: bool = False, time_it: bool = True,
             replays: int = 5, occupancy: int | None = None, knobs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build, profile, time and compare one shape; the JSON record of the capture."""
    from decodecalc.verify.timing import not_timed, time_calls

    if backend == "trtllm-xqa" and not knobs:
        knobs = trtllm_xqa_knobs(w, gpu)
    elif backend in ("xqa", "xqa-fp8") and not knobs:  # the block table the plan assumes (max_model_len's width)
        plan = default_result(backend, w, gpu, cuda_graph=cuda_graph).plan
        knobs = {"max_seq_len": plan.details_as(XqaDetails).maxSeqLen} if plan is not None else {}
    step = build_step(backend, w, cuda_graph=cuda_graph, knobs=knobs)
    step.run(0)  # first call: JIT / module load / metadata outside the profile
    launches = profile_launches(lambda: step.run(0), backend)
    rec: dict[str, Any] = {"backend": backend, "cuda_graph": cuda_graph, "info": step.info,
                           "launches": [x.to_json() for x in launches]}
    if step.readback is not None:
        rec["readback"] = step.readback()
    rec["timing"] = (time_calls(step.run, step.copies, replays=replays) if time_it else not_timed("--no-time")).to_json()
    if knobs:
        rec["knobs"] = dict(knobs)
        plan = knob_plan(backend, w, gpu, knobs)
        rec.update({"prediction": {"grid": list(plan.grid), "splits": list(plan.splits)},
                    **compare_launches(plan, launches)})
    else:
        res = default_result(backend, w, gpu, cuda_graph=cuda_graph, occupancy=occupancy)
        rec.update(predict_and_compare(backend, w, gpu, launches, cuda_graph=cuda_graph, result=res))
        plan = res.plan
    if backend == "fa3" and rec.get("match") is not None:
        check = fa3_splits_check(plan, rec.get("readback"))
        if check is not None:
            rec["splits_check"] = check
            rec["match"] = bool(rec["match"]) and check["match"]
    return rec
