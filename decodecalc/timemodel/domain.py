"""The measured domain of a time-model profile, and what a prediction outside it is told.

A fitted profile is calibrated for the shapes it was fitted on, not for every workload: a KV
dtype, head size or query-group size the fit never saw, speculative decoding (more than one
query token), sliding-window layers, another GPU or a changed SM count / bandwidth all move the
prediction outside what was measured. :func:`domain_warnings` names each such difference, and
every command that prints a predicted time marks it uncalibrated when there is one (``grid``,
``compare``, ``recommend``; ``calibrated: false`` plus the warnings in the JSON).

The domain of the packaged H200 profile is the set of shapes ``benchmarks/fit_timemodel.py``
fitted it on: the project's shared H200 development grid (``shared/data/h200-upstream-dev-grid.json``; 40 shapes: llama3-8b
and llama3-70b TP8, d=128) and ``benchmarks/results/timemodel-h200-extra.json`` (65 more: head
sizes 64, 96, 128, 256; group sizes 1-8 and 12), all bfloat16 queries and KV, one query token,
block size 16, no sliding window, measured on the H200 (132 SMs). A profile may carry its own
domain under ``fit: {domain: {...}}`` with the same keys as :class:`Domain`.

Other block sizes stay outside, block 32 included: ``benchmarks/measure_kv_formats_h200.py`` timed vLLM's kernels
at block 32 beside block 16 on six head layouts (``benchmarks/results/kv-formats-h200.json``, 180 pairs). The 3D
launches take the same time (the model's prediction does not depend on the block size), but the 2D kernel at group
sizes 2-8 with several KV heads runs up to 18% faster at block 32 and at 32:8 d128 up to 5% slower, which the model
does not see. SGLang's Triton backend reads token slots (page size 1), so the block size never takes its prediction
outside. The same run timed an fp8 KV cache: it runs at 0.77-0.92x the bf16 time where the model predicts
0.61-0.76x, and stays outside (the same results file; benchmarks/kv_formats_report.py summarises it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from decodecalc.launchers.registry import BACKEND_SPECS
from decodecalc.workload import Workload


@dataclass(frozen=True, slots=True)
class Domain:
    """What a fit measured: every prediction for a workload inside it is calibrated."""

    gpu: str
    num_sms: int | None
    dtypes: tuple[str, ...]
    kv_cache_dtypes: tuple[str, ...]
    head_sizes: tuple[int, ...]
    group_sizes: tuple[int, ...]
    max_query_len: int = 1
    sliding_window: bool = False
    mla: bool = False
    block_sizes: tuple[int, ...] = (16,)
    #: (KV dtype, group sizes, head sizes): a KV dtype of ``kv_cache_dtypes`` named here is calibrated at these
    #: query-group and head sizes only (the shapes its own families were fitted and validated on)
    kv_cache_dtype_scopes: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = ()


#: the shapes benchmarks/fit_timemodel.py fitted the packaged profiles on (see the module docstring)
MEASURED_DTYPES = ("bfloat16",)
MEASURED_HEAD_SIZES = (64, 96, 128, 256)
MEASURED_GROUP_SIZES = (1, 2, 4, 5, 6, 7, 8, 12)
#: the fits' block size (block 32 was measured and left outside: see the module docstring)
MEASURED_BLOCK_SIZES = (16,)
#: kernels whose measured launches cover every block size: SGLang's Triton backend reads token slots (page size 1);
#: FlashMLA's schedule tiles by its own block_size_n (launchers/flashmla.py); FA2 runs paged at multiples of 256 and on
#: a contiguous cache otherwise, and both were captured (benchmarks/results/capture-fa2-h200*.jsonl)
BLOCKLESS_KERNELS = frozenset(s.name for s in BACKEND_SPECS.values() if s.blockless)


def profile_domain(profile: Any, kernel: str | None = None) -> Domain:
    """The domain of ``profile`` (a TimeProfile): its own ``fit.domain`` if it records one, else the
    shapes the packaged profiles are fitted on, measured on the profile's GPU. For a kernel with a domain of its own
    (``kernel``), that one: a default backend's (flashinfer, flashinfer-tc, fa3, flashmla) the shapes its families were
    fitted on (``fit.backend_families.domain.<kernel>``, benchmarks/fit_backends_h200.py), an engine kernel's
    (``fit.kernel_domains.<kernel>``: SGLang's, with its fp8 family, benchmarks/leaveout_fp8.py)."""
    fit: Mapping[str, Any] = getattr(profile, "fit", {}) or {}
    rec = fit.get("domain") if isinstance(fit, Mapping) else None
    rec = dict(rec) if isinstance(rec, Mapping) else {}
    backends = fit.get("backend_families") if kernel and isinstance(fit, Mapping) else None
    for per in (backends.get("domain") if isinstance(backends, Mapping) else None,
                fit.get("kernel_domains") if kernel and isinstance(fit, Mapping) else None):
        if isinstance(per, Mapping) and isinstance(per.get(kernel), Mapping):
            rec.update(per[kernel])  # a kernel's record overrides the profile's, key by key

    def ints(key: str, default: tuple[int, ...]) -> tuple[int, ...]:
        v = rec.get(key)
        return tuple(int(x) for x in v) if isinstance(v, (list, tuple)) and v else default

    def strs(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        v = rec.get(key)
        return tuple(str(x) for x in v) if isinstance(v, (list, tuple)) and v else default

    scopes_raw = rec.get("kv_cache_dtype_scopes")
    scopes = tuple((str(name), tuple(int(g) for g in sc.get("group_sizes") or ()),
                    tuple(int(x) for x in sc.get("head_sizes") or ()))
                   for name, sc in (scopes_raw.items() if isinstance(scopes_raw, Mapping) else ())
                   if isinstance(sc, Mapping))
    return Domain(gpu=str(profile.gpu), num_sms=getattr(profile, "num_sms", None),
                  dtypes=strs("dtypes", MEASURED_DTYPES), kv_cache_dtypes=strs("kv_cache_dtypes", MEASURED_DTYPES),
                  head_sizes=ints("head_sizes", MEASURED_HEAD_SIZES),
                  group_sizes=ints("group_sizes", MEASURED_GROUP_SIZES),
                  max_query_len=int(rec.get("max_query_len", 1) or 1),
                  sliding_window=bool(rec.get("sliding_window", False)), mla=bool(rec.get("mla", False)),
                  block_sizes=ints("block_sizes", MEASURED_BLOCK_SIZES), kv_cache_dtype_scopes=scopes)


def kv_dtype_name(kv_cache_dtype: str) -> str:
    """The measured format a KV dtype is: ``fp8_e4m3`` is ``fp8`` (the engines' default fp8 KV cache is e4m3)."""
    return kv_cache_dtype.removesuffix("_e4m3")


def _list(values: tuple[Any, ...]) -> str:
    return ", ".join(map(str, values))


def measured_miss(profile: Any, kind: str, value: Any, kernel: str | None, gpu_name: str) -> Mapping[str, Any] | None:
    """What timing ``kernel`` outside the domain measured, where the profile records it (``fit.outside_domain``, written
    by benchmarks/kv_formats_report.py): the paired error of its predictions (``rows``, ``median``, ``p10``, ``p90``,
    ``worst``: predicted / measured time ratio to the in-domain format of the same shapes, minus 1) for the KV dtype
    or block size ``value`` (``kind``: kv_cache_dtype, block_size), on the GPU it was timed on only."""
    fit = getattr(profile, "fit", {}) or {}
    rec = fit.get("outside_domain") if isinstance(fit, Mapping) else None
    if not isinstance(rec, Mapping) or rec.get("gpu") != gpu_name or kernel is None:
        return None
    per = rec.get(kind)
    per = per.get(value, per.get(str(value))) if isinstance(per, Mapping) else None
    miss = per.get(kernel) if isinstance(per, Mapping) else None
    return miss if isinstance(miss, Mapping) and {"rows", "median", "p10", "p90", "worst"} <= set(miss) else None


def _miss_text(miss: Mapping[str, Any] | None, gpu_name: str) -> str:
    if miss is None:
        return ""
    return (f"; timed on {gpu_name} ({miss['rows']} launches), predicted times erred by a median "
            f"{100 * miss['median']:+.1f}% (p10 {100 * miss['p10']:+.1f}%, p90 {100 * miss['p90']:+.1f}%, worst "
            f"{100 * miss['worst']:+.0f}%)")


def domain_warnings(work: Workload, gpu: Any, profile: Any, *, layer: str = "global",
                    kernel: str | None = None) -> tuple[str, ...]:
    """Why a prediction for ``work`` on ``gpu`` lies outside ``profile``'s measured domain (empty: inside;
    an uncalibrated profile is not itself listed: it is uncalibrated everywhere).

    ``gpu`` is the GPUSpec the prediction is for; ``layer`` is "global" or "sliding"; ``kernel`` the kernel
    the prediction is for (:func:`profile_domain`).
    """
    d = profile_domain(profile, kernel)
    mla = getattr(work.model, "is_mla", False)
    out: list[str] = []
    if not getattr(profile, "calibrated", False):
        pass  # a datasheet profile is uncalibrated everywhere; the caller says so
    elif gpu.name != d.gpu:
        out.append(f"the profile was measured on {d.gpu}, not {gpu.name}")
    else:
        from decodecalc.specs.gpus import resolve_gpu

        base = resolve_gpu(gpu.name)
        if base.num_sms != gpu.num_sms:
            out.append(f"--sms {gpu.num_sms}: the fit measured all {base.num_sms} SMs")
        if base.hbm_bandwidth_bytes_per_s != gpu.hbm_bandwidth_bytes_per_s:
            out.append("--bandwidth: the fit measured the datasheet part's HBM")
    if work.kv_cache_dtype not in d.kv_cache_dtypes:
        miss = measured_miss(profile, "kv_cache_dtype", kv_dtype_name(work.kv_cache_dtype), kernel, gpu.name)
        out.append(f"KV-cache dtype {work.kv_cache_dtype}: the fit measured {_list(d.kv_cache_dtypes)}"
                   + _miss_text(miss, gpu.name))
    for name, groups, heads in d.kv_cache_dtype_scopes:
        if kv_dtype_name(work.kv_cache_dtype) == name and (work.group_size not in groups or work.head_size not in heads):
            out.append(f"KV-cache dtype {work.kv_cache_dtype} at query-group size {work.group_size}, head size "
                       f"{work.head_size}: {kernel}'s {name} fit measured group sizes {_list(groups)} at head sizes "
                       f"{_list(heads)}")
    if work.dtype not in d.dtypes:
        out.append(f"dtype {work.dtype}: the fit measured {_list(d.dtypes)}")
    if work.head_size not in d.head_sizes or (work.head_size_v != work.head_size and not (mla and d.mla)):
        hs = str(work.head_size) if work.head_size_v == work.head_size else f"{work.head_size}/{work.head_size_v}"
        out.append(f"head size {hs}: the fit measured {_list(d.head_sizes)}")
    if work.group_size not in d.group_sizes:
        out.append(f"query-group size {work.group_size}: the fit measured {_list(d.group_sizes)}")
    if mla and not d.mla:
        out.append("MLA attention: the fit measured MHA/GQA kernels only")
    if work.max_seqlen_q > d.max_query_len:
        out.append(f"{work.max_seqlen_q} query tokens per sequence (speculative decoding or prefill): the fit "
                   f"measured {d.max_query_len}")
    if work.block_size not in d.block_sizes and kernel not in BLOCKLESS_KERNELS:
        miss = measured_miss(profile, "block_size", work.block_size, kernel, gpu.name)
        out.append(f"block size {work.block_size}: the fit measured {_list(d.block_sizes)}" + _miss_text(miss, gpu.name))
    if layer == "sliding" and not d.sliding_window:
        out.append("sliding-window layer: the fit measured full-attention layers only")
    return tuple(out)
