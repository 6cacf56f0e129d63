"""The compiled backends' half of ``decodecalc calibrate`` (no GPU needed): what it times of FlashInfer's two decode
paths and vLLM's FA3 (the plan), the timed runs turned into measurements, and the fit of the backends' time-model
families (bf16 and fp8 KV) from them. The GPU half, which runs the plan with the real libraries, is
:mod:`decodecalc.verify.backend_calibration`; ``benchmarks/fit_backends_h200.py`` and ``fit_backends_fp8_h200.py``
(the shipped H200 families) fit through the same functions.

The plan is an experiment over head layouts, not the models at hand: twelve per-rank layouts spanning group sizes
2-16, 1-8 KV heads and head dims 64, 128 and 256, each at twelve batches (1-256 sequences, 512-32,768 tokens, two
ragged) on a bf16 and an fp8 (e4m3) KV cache back to back (so a session's drift cancels in their ratio), plus
twelve chat-like steps (8-96 sequences of 50-800 tokens) under the plans the engines' CUDA graphs use. It is the
plan of ``benchmarks/measure_backends_fp8_h200.py``, whose H200 runs are committed: ``calibrate --from-measurements``
on them is the H200 calibrated from scratch without a GPU (``benchmarks/calibrate_backends_h200.py
--build-measurements``; ``benchmarks/results/calibrate-backends-h200-committed-runs.yaml``).

Whether a fitted family is calibrated is decided on whole head layouts a fit left out (three folds of the plan's
layouts, each layout predicted by the fit that did not see it), never on a random split of shapes; the families
shipped are fitted on every layout.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.timemodel.fit import Measurement, error_summary, fit_families, fit_profile, log_loss
from decodecalc.timemodel.profile import (CALIBRATION_GOAL_MEDIAN, CALIBRATION_GOAL_P90, FAMILY_FALLBACKS, FamilyParams,
                                          TimeProfile)

#: the backends calibrate times (FlashMLA needs an MLA model and FA2 a build of its own: their families are kept)
CALIBRATED_BACKENDS = ("flashinfer", "flashinfer-tc", "fa3", "xqa")
#: the kernels XQA's families time: FlashInfer's two XQA kernels and TensorRT-LLM's split on the first
XQA_KERNELS = ("xqa", "xqa-fp8", "trtllm-xqa")
#: the library model whose other attributes a plan layout borrows, per head dim (full attention, one query token)
LAYOUT_BASE_MODEL = {128: "llama3-8b", 64: "llama3.2-1b", 256: "gemma-2-9b", 96: "phi-3-mini"}
#: (query heads, KV heads, head dim) per rank: group sizes 2-16, 1-8 KV heads, head dims 64 / 128 / 256
BACKEND_LAYOUTS: tuple[tuple[int, int, int], ...] = (
    (8, 1, 128), (32, 8, 128), (64, 8, 128), (16, 2, 128), (32, 4, 64), (16, 8, 256), (14, 2, 128),
    (16, 1, 128), (16, 2, 256), (32, 4, 128), (4, 1, 128), (8, 1, 64))
#: (batch, length), or a ragged batch's lengths
BACKEND_SHAPES: tuple[tuple[int, int] | tuple[int, ...], ...] = (
    (1, 512), (1, 8192), (1, 32768), (4, 2048), (4, 16384), (16, 1024), (16, 8192), (64, 512), (64, 4096),
    (256, 1024), tuple(256 + (i * 7919) % 8192 for i in range(24)), tuple(100 + (i * 6151) % 3000 for i in range(100)))
#: continuous batching's chat-like steps (batch 8-96 x contexts 50-800, uniform and ragged), timed under the plans the
#: engines' CUDA graphs use (FlashInfer's CUDA-graph plan, FA3's 32 splits): the regime chat workloads run in
BACKEND_SHORT_SHAPES: tuple[tuple[int, int] | tuple[int, ...], ...] = tuple(
    (b, L) for b in (8, 32, 96) for L in (50, 200, 800)) + (
    tuple(50 + (i * 389) % 750 for i in range(32)), tuple(50 + (i * 571) % 750 for i in range(96)), (64, 400))
KV_DTYPES = ("bfloat16", "fp8")
#: XQA's plan: the layouts of BACKEND_LAYOUTS plus the group sizes and head dims the engines' models add (g 1, 12, 16;
#: head dim 96, which the kernel pads to 128), each shape under two block tables: as wide as the batch's longest
#: sequence, and 131,072 tokens (vLLM's full-width table at Llama-3.1's max_model_len), which sets the sub-sequences
#: by B * Hkv alone
XQA_LAYOUTS: tuple[tuple[int, int, int], ...] = (
    (8, 1, 128), (32, 8, 128), (64, 8, 128), (16, 2, 128), (32, 4, 64), (16, 8, 256), (14, 2, 128), (16, 1, 128),
    (8, 8, 128), (12, 1, 128), (24, 2, 96), (16, 16, 64), (32, 4, 256))
XQA_SHAPES: tuple[tuple[int, int] | tuple[int, ...], ...] = (
    (1, 512), (1, 8192), (1, 32768), (4, 2048), (4, 16384), (16, 1024), (16, 8192), (64, 512), (64, 4096),
    (256, 1024), tuple(256 + (i * 7919) % 8192 for i in range(24)), (32, 200), (96, 800),
    tuple(50 + (i * 389) % 750 for i in range(32)))
XQA_WIDE_TABLE = 131_072

#: the neutral start of a family no fit has seen (``calibrate --from-scratch``): one loop iteration 1 us, 20 GB/s per
#: CTA, 60 GB/s per SM, 1 us prologue
NEUTRAL_BACKEND_FAMILY: dict[str, Any] = dict(latency_s=1e-6, program_bandwidth_bytes_per_s=20e9, sm_bandwidth_bytes_per_s=60e9,
                              program_overhead_s=1e-6)
#: CTAs/SM of the combine kernels (captured registers and shared memory: 46-48 registers x 256 threads -> 5) and of
#: FA2's kernels (capture-fa2-h200.jsonl: 247-255 registers x 128 threads and 64-80 KiB shared memory -> 2; the
#: combine kernel 52-58 registers x 128 threads -> 8)
BACKEND_OCCUPANCY = {"fa3_combine": 5, "flashmla_combine": 5, "fa2_fwd": 2, "fa2_fwd_plain": 2, "fa2_combine": 8,
                     # XQA's mha.cu: 142-183 KiB of shared memory, one CTA per SM (compiled for sm_90a); its merge runs
                     # in the last CTA; mha_sm90.cu: 384 threads, 35-63 KiB, about 44 registers -> 3
                     "xqa": 1, "xqa_wide": 1, "xqa_merge": 1, "xqa_sm90": 3, "xqa_sm90_merge": 1}
#: calibrate's simplex budget per family group, against the shipped fits' 1,500: chosen for the fit's time (26 s on the
#: H200's 16 host cores, 4 minutes on 2); the left-out figures it gives are the calibrate run's
#: (benchmarks/results/calibrate-backends-h200.log), not compared with a 1,500-evaluation fit of the same runs
CALIBRATE_MAX_EVALS = 600
#: FA3's persistent tiles: what a CTA's further tiles cost is chosen among these (us) by the fit's loss on its
#: training rows (benchmarks/fit_fa3_tiles.py chose 2.25 of 0-4.5 on the H200)
FA3_TILE_OVERHEAD_CHOICES_US = (0.0, 1.5, 2.25, 3.0)
BF16_FAMILIES = ("flashinfer_decode", "flashinfer_tc", "flashinfer_merge", "fa3_fwd", "fa3_combine")
FP8_FAMILIES = {"flashinfer": ("flashinfer_decode_fp8",), "flashinfer-tc": ("flashinfer_tc_fp8",),
                "fa3": ("fa3_fwd_fp8", "fa3_fwd_fp8_wide")}


def parse_backends(spec: str | None) -> list[str] | None:
    """``calibrate --backends``: None for ``auto`` (every installed one), [] for ``none``, else the named backends."""
    spec = (spec or "auto").strip()
    if spec in ("auto", "none"):
        return None if spec == "auto" else []
    from decodecalc.limits import split_items

    valid = f"fa3,flashinfer (valid: auto, none, or a comma list of {', '.join(CALIBRATED_BACKENDS)})"
    names = list(dict.fromkeys(split_items(spec, "--backends", valid)))  # fa3,,flashinfer: an error, not fa3,flashinfer
    bad = [x for x in names if x not in CALIBRATED_BACKENDS]
    if bad or not names:
        raise ConfigError(f"--backends {spec}: {bad[0] if bad else 'no backend named'}; valid: auto, none, or a "
                          f"comma-separated list of {', '.join(CALIBRATED_BACKENDS)}")
    return names


def layout_label(layout: Sequence[int]) -> str:
    h, h_kv, d = layout
    return f"{h}:{h_kv}-d{d}"


def plan_shape(layout: Sequence[int], sh: Sequence[int], kv: str, tag: str) -> dict[str, Any]:
    """A plan entry's shape record (the capture records' ``shape``): a library model with the layout's heads."""
    h, h_kv, d = layout
    lens = list(sh) if len(sh) != 2 else [int(sh[1])] * int(sh[0])
    return {"model": LAYOUT_BASE_MODEL[d], "tp": 1, "heads": [h, h_kv], "seq_lens": lens, "kv_cache_dtype": kv,
            "layout": layout_label(layout), "tag": tag}


def backend_plan(backends: Sequence[str], layouts: Sequence[tuple[int, int, int]] = BACKEND_LAYOUTS, *,
                 short: bool = True, long: bool = True, tag: str = "fit") -> list[tuple[str, dict[str, Any], bool]]:
    """(backend, shape, cuda_graph) of every run, the bf16 and fp8 runs of one case adjacent, the cases in a stable hash
    order (a time-out leaves a spread of layouts, shapes and backends). FlashInfer: an eager plan, and every other
    shape a CUDA-graph plan too; FA3: its heuristic split count (eager) and vLLM's 32 under CUDA graphs. ``short``:
    the chat-like steps too, CUDA-graph plans only (their shapes tagged ``<tag>-short``); ``long``: the batches of
    :data:`BACKEND_SHAPES`."""
    cases: list[tuple[str, list[dict[str, Any]], bool]] = []
    for lay in layouts:
        for i, sh in enumerate(BACKEND_SHAPES if long else ()):
            for b in backends:
                for cg in ((False, True) if b == "fa3" or i % 2 == 0 else (False,)):
                    cases.append((b, [plan_shape(lay, sh, kv, tag) for kv in KV_DTYPES], cg))
        for sh in BACKEND_SHORT_SHAPES if short else ():
            for b in backends:
                cases.append((b, [plan_shape(lay, sh, kv, f"{tag}-short") for kv in KV_DTYPES], True))
    cases.sort(key=lambda c: hashlib.sha256(json.dumps([c[0], c[1][0], c[2]]).encode()).hexdigest())
    return [(b, s, cg) for b, pair, cg in cases for s in pair]


def xqa_plan(layouts: Sequence[tuple[int, int, int]] = XQA_LAYOUTS,
             shapes: Sequence[Sequence[int]] = XQA_SHAPES, *, tag: str = "xqa") -> list[tuple[str, dict[str, Any], bool]]:
    """(backend, shape, cuda_graph) of XQA's runs: each shape on a bf16 cache (mha.cu) and an fp8 one (mha_sm90.cu on
    SM90) back to back, under a tight and a wide block table (``knobs.max_seq_len``); every third shape also with
    TensorRT-LLM's multi-block count (``knobs.sm_count``: the SM count that makes FlashInfer's launcher take it),
    in a stable hash order."""
    from decodecalc.launchers.trtllm import compute_multi_block_count

    cases: list[tuple[str, list[dict[str, Any]]]] = []
    for lay in layouts:
        for i, sh in enumerate(shapes):
            lens = list(sh) if len(sh) != 2 else [int(sh[1])] * int(sh[0])
            tight = -(-max(lens) // 256) * 256
            for width in dict.fromkeys((tight, max(XQA_WIDE_TABLE, tight))):
                pair = [dict(plan_shape(lay, sh, kv, tag), knobs={"max_seq_len": width}) for kv in KV_DTYPES]
                cases.append(("xqa", pair))
            if i % 3 == 0:
                m = compute_multi_block_count(batch_size=len(lens), num_kv_heads=lay[1], history_length=max(lens),
                                              multiprocessor_count=132)
                knobs = {"max_seq_len": max(XQA_WIDE_TABLE, tight), "sm_count": m * len(lens) * lay[1]}
                cases.append(("trtllm-xqa", [dict(plan_shape(lay, sh, "bfloat16", f"{tag}-trtllm"), knobs=knobs)]))
    cases.sort(key=lambda c: hashlib.sha256(json.dumps([c[0], c[1][0]]).encode()).hexdigest())
    return [("xqa-fp8" if s["kv_cache_dtype"] == "fp8" else b, s, True) for b, pair in cases for s in pair]


def shape_workload(shape: Mapping[str, Any], block_size: int) -> Any:
    """The :class:`~decodecalc.workload.Workload` of a capture record's ``shape`` (``heads``: a head layout no library
    model has, on the named model's other attributes)."""
    from decodecalc.specs.models import resolve_model
    from decodecalc.workload import make_workload

    model = resolve_model(shape["model"])
    if shape.get("heads"):
        h, h_kv = shape["heads"]
        # a layout experiment runs full attention: the base model's window (Phi-3-mini's on every layer) is dropped
        model = dataclasses.replace(model, name=f"{model.name}-{h}x{h_kv}", num_attention_heads=h,
                                    num_key_value_heads=h_kv, attention="mha" if h == h_kv else "gqa",
                                    sliding_window=None, sliding_window_pattern=None)
    return make_workload(model, tp=int(shape["tp"]), seq_lens=tuple(shape["seq_lens"]), block_size=block_size,
                         kv_cache_dtype=shape.get("kv_cache_dtype", "auto"))


def backend_failures(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per backend, the runs that failed (``error``) and the first one's message: what calibrate prints and records
    when a library does not build or load (its families then keep the starting profile's values, uncalibrated)."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        if isinstance(r, Mapping) and r.get("error"):
            rec = out.setdefault(str(r.get("backend")), {"runs": 0, "first_error": str(r["error"])})
            rec["runs"] += 1
    return out


def error_text(exc: BaseException, limit: int = 600) -> str:
    """A failed run's message for its record: the exception's type and text, its start and its end when it is long (a
    JIT build's compiler output ends with the line that says what went wrong)."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else f"{text[:limit // 4]} ... {text[-(limit - limit // 4):]}"


def layout_of(m: Measurement) -> tuple[int, int, int]:
    return m.shape.num_heads, m.shape.num_kv_heads, m.shape.head_size


def main_family(m: Measurement) -> str:
    return m.work.kernels[0].family


def hbm_ceilings(ms: Sequence[Measurement]) -> dict[str, float]:
    """Per family: the highest bytes/s one of its kernels reached alone (its main kernel's bytes over the run's
    time, which includes the other kernels: a lower bound), plus 2%."""
    best: dict[str, float] = {}
    for m in ms:
        k = m.work.kernels[0]
        best[k.family] = max(best.get(k.family, 0.0), k.hbm_bytes / m.time_s)
    return {f: round(v * 1.02, -8) for f, v in best.items()}


def _neutral(family: str, ceiling: float | None, base: FamilyParams | None) -> FamilyParams:
    occ = BACKEND_OCCUPANCY.get(family, 4)
    keep: dict[str, Any] = {} if base is None else {"occupancy_by_head_dim": base.occupancy_by_head_dim}
    return FamilyParams(**NEUTRAL_BACKEND_FAMILY, max_programs_per_sm=occ, **keep,
                        hbm_bandwidth_bytes_per_s=ceiling or (base.hbm_bandwidth_bytes_per_s if base else 0.0))


def start_families(rows: Sequence[Measurement], base: TimeProfile, *, cold: bool,
                   merges: Sequence[str] = ()) -> TimeProfile:
    """Where a backend fit starts: each main family of ``rows`` with the HBM ceiling its kernels reached
    (:func:`hbm_ceilings`), from :data:`NEUTRAL_BACKEND_FAMILY` when ``cold`` or new, else from ``base``'s values; the
    merge families named in ``merges`` (no HBM ceiling of their own) from the neutral start."""
    fams = dict(base.families)
    for f, bw in hbm_ceilings(rows).items():
        fams[f] = (_neutral(f, bw, fams.get(f)) if cold or f not in fams
                   else dataclasses.replace(fams[f], hbm_bandwidth_bytes_per_s=bw))
    for f in merges:
        fams[f] = _neutral(f, None, fams.get(f))
    return dataclasses.replace(base, families=fams)


def fit_bf16_families(ms: Sequence[Measurement], base: TimeProfile, *, cold: bool, max_evals: int = 1500,
                      restarts: int = 2, progress: Callable[[str], None] | None = None,
                      tile_overhead_choices_us: Sequence[float] | None = None) -> TimeProfile:
    """FlashInfer's (both paths and their shared merge kernel) and FA3's (and its combine kernel's) bf16 families fitted
    on the bf16 rows of ``ms``; the GPU-wide values and every other family held. ``cold``: each family starts from
    :data:`NEUTRAL_BACKEND_FAMILY` (nothing fitted to another timing), FA3's tile overhead then chosen among
    ``tile_overhead_choices_us`` (default :data:`FA3_TILE_OVERHEAD_CHOICES_US`); else from ``base``'s values. Every
    family's HBM ceiling is what its kernels reached in ``ms``."""
    rows = [m for m in ms if m.shape.kv_bytes_per_element != 1]
    if not rows:
        return base
    prof = start_families(rows, base, cold=cold, merges=("flashinfer_merge", "fa3_combine") if cold else ())
    residuals = base.residuals

    def fit(sub: Sequence[Measurement], start: TimeProfile) -> TimeProfile:
        got = fit_profile(sub, start, occupancy=BACKEND_OCCUPANCY, search_occupancy=False, fit_globals=False,
                          restarts=restarts, max_evals=max_evals, progress=progress)
        return dataclasses.replace(got, residuals=residuals)

    # FlashInfer's and FA3's families are fitted on separate rows (fit_profile fits one kernel's families at a time,
    # the GPU's values held), so FA3's tile-overhead choice below never refits FlashInfer
    flash = [m for m in rows if m.kernel.startswith("flashinfer")]
    if flash:
        # both FlashInfer paths run the same merge kernel: fit them as one group, so that its family is fitted once
        prof = fit([dataclasses.replace(m, kernel="flashinfer") for m in flash], prof)
        # then each main family alone on its own rows, the shared merge family held: the tensor-core rows do not
        # pull the CUDA-core kernel's numbers, nor the other way round
        for kernel, family in (("flashinfer-tc", "flashinfer_tc"), ("flashinfer", "flashinfer_decode")):
            sub = [m for m in flash if m.kernel == kernel]
            if sub:
                prof, _ = fit_families(sub, prof, families=[family], restarts=restarts, max_evals=max_evals)
    fa3 = [m for m in rows if m.kernel == "fa3"]
    if not fa3:
        return prof
    if not cold:
        return fit(fa3, prof)
    best: tuple[TimeProfile, float] | None = None
    for us in tile_overhead_choices_us if tile_overhead_choices_us is not None else FA3_TILE_OVERHEAD_CHOICES_US:
        f3 = dataclasses.replace(prof.families["fa3_fwd"], tile_overhead_s=us * 1e-6)
        got = fit(fa3, dataclasses.replace(prof, families={**prof.families, "fa3_fwd": f3}))
        loss = log_loss(got, fa3)
        if progress:
            progress(f"fa3_fwd tile overhead {us} us: loss {loss:.4f}")
        if best is None or loss < best[1]:
            best = (got, loss)
    assert best is not None
    return best[0]


def fp8_start(base: TimeProfile, rows: Sequence[Measurement]) -> TimeProfile:
    """``base`` with each fp8 family (:data:`FP8_FAMILIES`) set to its bf16 family's numbers (FAMILY_FALLBACKS) and the
    HBM ceiling its fp8 rows in ``rows`` reached: where the fp8 fit starts."""
    fams = dict(base.families)
    ceilings = hbm_ceilings([m for m in rows if m.shape.kv_bytes_per_element == 1])
    for fam_list in FP8_FAMILIES.values():
        for f in fam_list:
            parent = fams[FAMILY_FALLBACKS[f]]
            fams[f] = dataclasses.replace(parent, hbm_bandwidth_bytes_per_s=ceilings.get(f, parent.hbm_bandwidth_bytes_per_s))
    return dataclasses.replace(base, families=fams)


def fit_fp8_families(ms: Sequence[Measurement], base: TimeProfile, *, max_evals: int = 1500, restarts: int = 2,
                     progress: Callable[[str], None] | None = None) -> TimeProfile:
    """The families an fp8 KV cache runs (:data:`FP8_FAMILIES`), each started from its bf16 family (FAMILY_FALLBACKS)
    with the HBM ceiling its rows reached and fitted alone on its own fp8 rows of ``ms``; the merge and combine kernels
    (fp32 partials either way) and every other family held."""
    rows = [m for m in ms if m.shape.kv_bytes_per_element == 1]
    prof = fp8_start(base, rows)
    for kernel, fam_list in FP8_FAMILIES.items():
        for fam in fam_list:
            sub = [m for m in rows if m.kernel == kernel and main_family(m) == fam]
            if sub:
                prof, loss = fit_families(sub, prof, families=[fam], restarts=restarts, max_evals=max_evals)
                if progress:
                    progress(f"{fam}: {len(sub)} rows, loss {loss:.4f}")
    return prof


def fit_xqa_families(ms: Sequence[Measurement], base: TimeProfile, *, cold: bool, max_evals: int = 1500,
                     restarts: int = 2, progress: Callable[[str], None] | None = None) -> TimeProfile:
    """XQA's families on its rows of ``ms`` (FlashInfer's and TensorRT-LLM's runs of the same kernels): mha.cu's main
    family with the in-kernel merge on the bf16 rows, then the Hopper fp8 kernel's family alone on its rows, the merge
    held. ``cold``: each starts from :data:`NEUTRAL_BACKEND_FAMILY`; every family's HBM ceiling is what it reached."""
    rows = [m for m in ms if m.kernel in XQA_KERNELS]
    if not rows:
        return base
    prof = start_families(rows, base, cold=cold, merges=("xqa_merge", "xqa_sm90_merge"))
    for fam_list in (("xqa", "xqa_merge"), ("xqa_wide",), ("xqa_sm90", "xqa_sm90_merge")):
        sub = [m for m in rows if main_family(m) == fam_list[0]]
        if sub:
            prof, loss = fit_families(sub, prof, families=list(fam_list), restarts=restarts, max_evals=max_evals)
            if progress:
                progress(f"{', '.join(fam_list)}: {len(sub)} rows, loss {loss:.4f}")
    return prof


def fit_backends(ms: Sequence[Measurement], base: TimeProfile, *, cold: bool, max_evals: int = 1500,
                 restarts: int = 2, progress: Callable[[str], None] | None = None,
                 tile_overhead_choices_us: Sequence[float] | None = None) -> TimeProfile:
    """The bf16 families, then the fp8 families started from them (:func:`fit_bf16_families`, :func:`fit_fp8_families`),
    then XQA's (:func:`fit_xqa_families`)."""
    others = [m for m in ms if m.kernel not in XQA_KERNELS]
    prof = fit_bf16_families(others, base, cold=cold, max_evals=max_evals, restarts=restarts, progress=progress,
                             tile_overhead_choices_us=tile_overhead_choices_us)
    prof = fit_fp8_families(others, prof, max_evals=max_evals, restarts=restarts, progress=progress)
    return fit_xqa_families(ms, prof, cold=cold, max_evals=max_evals, restarts=restarts, progress=progress)


def layout_folds(layouts: Iterable[tuple[int, int, int]], folds: int = 3) -> list[list[tuple[int, int, int]]]:
    """``layouts`` dealt into ``folds`` groups, head dim by head dim in plan order (those the plan does not list, a
    user's own, after them in sorted order), the deal going on from one head dim to the next: each fold leaves out at
    most one of a head dim's layouts where it has at most ``folds``, so every fit keeps rows of every head dim (FA3's
    fp8 d-256 tiles are a family of their own, timed on two layouts)."""
    seen = set(layouts)
    order = [x for x in BACKEND_LAYOUTS if x in seen] + sorted(seen - set(BACKEND_LAYOUTS))
    out: list[list[tuple[int, int, int]]] = [[] for _ in range(min(folds, len(order)))]
    k = 0
    for d in sorted({x[2] for x in order}):
        for x in (y for y in order if y[2] == d):
            out[k % len(out)].append(x)
            k += 1
    return out


def family_rows(ms: Sequence[Measurement]) -> dict[str, list[Measurement]]:
    """The measurements by their main kernel's family (the family a calibrated / uncalibrated verdict is about)."""
    out: dict[str, list[Measurement]] = {}
    for m in ms:
        out.setdefault(main_family(m), []).append(m)
    return out


def _stats(prof: TimeProfile, ms: Sequence[Measurement]) -> dict[str, float]:
    if not ms:
        return {"rows": 0}
    return {k: round(v, 4) for k, v in error_summary(prof, ms).items()}


@dataclasses.dataclass(frozen=True)
class BackendFit:
    """What calibrating the backends gave: the profile (families fitted on every layout timed), and per family its
    record (rows, the deciding fit's errors on the layouts it left out, calibrated or not)."""

    profile: TimeProfile
    families: Mapping[str, Mapping[str, Any]]
    held_out_layouts: tuple[str, ...]
    #: per backend kernel, the shapes its timings cover (timemodel.domain keys): a prediction outside is uncalibrated
    domains: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    #: per backend kernel (and ``<kernel>/fp8``): the ``kernels`` entries of the profile's ``fit.expected_error``
    #: (timemodel.accuracy): the layouts timed and the out-of-fold error on them as the new-layout figure
    expected_error: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)

    @property
    def uncalibrated(self) -> list[str]:
        return sorted(f for f, r in self.families.items() if not r["calibrated"])

    def record(self) -> dict[str, Any]:
        return {"left_out_folds": list(self.held_out_layouts), "families": {f: dict(r) for f, r in self.families.items()},
                "goals": {"median": CALIBRATION_GOAL_MEDIAN, "p90": CALIBRATION_GOAL_P90},
                "map": "none (the backends' families have no residual map: physics only)"}


def _fold_fit(args: tuple[Any, ...]) -> TimeProfile:
    ms, base, cold, max_evals, restarts, tiles = args
    return fit_backends(ms, base, cold=cold, max_evals=max_evals, restarts=restarts, tile_overhead_choices_us=tiles)


def calibrate_backends(ms: Sequence[Measurement], base: TimeProfile, *, cold: bool, max_evals: int = 1500,
                       restarts: int = 2, folds: int = 3, workers: int | None = None,
                       progress: Callable[[str], None] | None = None) -> BackendFit:
    """Fit the backends' families on ``ms``: once per fold of whole head layouts left out (:func:`layout_folds`), each
    left-out layout predicted by the fit that never saw it (the verdict: a family whose median or 90th-percentile
    error over every layout, out of fold, misses CALIBRATION_GOAL_MEDIAN / _P90 is uncalibrated, as is one timed on
    a single layout), and once on every layout (what the profile ships). The fits run in ``workers`` processes
    (default: one per fit, up to the CPUs). ``max_evals``: each family group's simplex budget (the shipped fits 1,500;
    calibrate :data:`CALIBRATE_MAX_EVALS`)."""
    import os
    from concurrent.futures import ProcessPoolExecutor

    if not ms:
        raise ConfigError("no backend timing to fit (every run failed or none matched its plan)")
    groups = layout_folds({layout_of(m) for m in ms}, folds) if len({layout_of(m) for m in ms}) > 1 else []
    # FA3's tile overhead (cold) is chosen by each fit on its own training rows; the final fit chooses on all
    jobs = [([m for m in ms if layout_of(m) not in set(g)], base, cold, max_evals, restarts, None) for g in groups]
    jobs.append((list(ms), base, cold, max_evals, restarts, None))
    n = max(1, min(len(jobs), workers or (os.cpu_count() or 1)))
    if n == 1:
        fitted = [_fold_fit(j) for j in jobs]
    else:
        with ProcessPoolExecutor(max_workers=n) as pool:
            fitted = []
            for i, prof in enumerate(pool.map(_fold_fit, jobs)):
                fitted.append(prof)
                if progress:
                    progress(f"backends: fit {i + 1} of {len(jobs)} done")
    final = fitted[-1]
    out_of_fold: list[tuple[Measurement, TimeProfile]] = [
        (m, prof) for g, prof in zip(groups, fitted) for m in ms if layout_of(m) in set(g)]
    by_all = family_rows(ms)
    families: dict[str, dict[str, Any]] = {}
    for fam, rows in sorted(by_all.items()):
        oof = [(m, p) for m, p in out_of_fold if main_family(m) == fam]
        out = _oof_stats(oof)
        ok = bool(out.get("rows")) and out["median_abs_err"] <= CALIBRATION_GOAL_MEDIAN and \
            out["p90_abs_err"] <= CALIBRATION_GOAL_P90
        families[fam] = {"kernel": rows[0].kernel, "rows": len(rows), "layouts": len({layout_of(m) for m in rows}),
                         "training": _stats(final, rows), "left_out": out, "calibrated": ok}
    return BackendFit(profile=final, families=families,
                      held_out_layouts=tuple(", ".join(layout_label(x) for x in g) for g in groups),
                      domains=timed_domains(ms), expected_error=_expected_error_kernels(ms, out_of_fold, len(groups)))


def _expected_error_kernels(ms: Sequence[Measurement], out_of_fold: Sequence[tuple[Measurement, TimeProfile]],
                            folds: int) -> dict[str, dict[str, Any]]:
    """Per kernel entry (timemodel.accuracy.kernel_key): the layouts timed (the final fit saw them all) and, as the
    figure of a layout no fit saw, every layout's runs predicted by the fold fit that left it out. No figure for new
    shapes of a timed layout: every run of those was fitted."""
    from decodecalc.timemodel.accuracy import kernel_key, layout_key

    def lay(m: Measurement) -> str:
        return layout_key(m.shape.num_heads, m.shape.num_kv_heads, m.shape.head_size)

    out: dict[str, dict[str, Any]] = {}
    for key in sorted({kernel_key(m.kernel, m.shape.kv_bytes_per_element) for m in ms}):
        mine = [m for m in ms if kernel_key(m.kernel, m.shape.kv_bytes_per_element) == key]
        rec: dict[str, Any] = {"fitted_layouts": sorted({lay(m) for m in mine})}
        oof = [(m, p) for m, p in out_of_fold if kernel_key(m.kernel, m.shape.kv_bytes_per_element) == key]
        st = _oof_stats(oof)
        if st.get("rows"):
            rec["new_layout"] = {"rows": st["rows"], "layouts": len({lay(m) for m, _ in oof}),
                                 "median_abs_err": st["median_abs_err"], "p90_abs_err": st["p90_abs_err"],
                                 "evidence": f"decodecalc calibrate --backends: each timed layout predicted by the fit of "
                                             f"the {folds} folds of whole head layouts that left it out"}
        out[key] = rec
    return out


def _oof_stats(pairs: Sequence[tuple[Measurement, TimeProfile]]) -> dict[str, float]:
    """Median, 90th percentile and worst |predicted / measured - 1| of measurements each under its own profile."""
    from decodecalc.timemodel.fit import percentile
    from decodecalc.timemodel.predict import launch_time_s

    if not pairs:
        return {"rows": 0}
    errs = sorted(abs(launch_time_s(m.work, p) / m.time_s - 1.0) for m, p in pairs)
    return {"rows": len(errs), "median_abs_err": round(percentile(errs, 0.5), 4),
            "p90_abs_err": round(percentile(errs, 0.9), 4), "max_abs_err": round(errs[-1], 4)}


def timed_domains(ms: Sequence[Measurement]) -> dict[str, dict[str, Any]]:
    """Per backend kernel, what its timings cover: bf16 queries, the KV formats, head sizes, group sizes and block
    sizes timed (one query token, full attention)."""
    out: dict[str, dict[str, Any]] = {}
    for kernel in sorted({m.kernel for m in ms}):
        sub = [m for m in ms if m.kernel == kernel]
        kv = sorted({"fp8" if m.shape.kv_bytes_per_element == 1 else "bfloat16" for m in sub})
        out[kernel] = {"dtypes": ["bfloat16"], "kv_cache_dtypes": kv + (["fp8_e4m3"] if "fp8" in kv else []),
                       "head_sizes": sorted({m.shape.head_size for m in sub}),
                       "group_sizes": sorted({m.shape.num_heads // m.shape.num_kv_heads for m in sub}),
                       "block_sizes": sorted({m.shape.block_size for m in sub}), "mla": False}
    return out
