#!/usr/bin/env python
"""Record what the real upstream launchers launch, for tests/test_upstream_recorded.py.

Runs on a CPU under the Triton interpreter (TRITON_INTERPRET=1):

* vLLM 0.33.0 (or ``--vllm-version``, e.g. 0.34.0) ``unified_attention`` -- called with
  the arguments ``TritonAttentionImpl.forward`` passes; every launch is intercepted (the
  attention kernels do not run: the launcher's grid and constexprs depend only on shapes,
  dtypes and host scalars);
* SGLang 0.5.23 -- its split-count kernel ``get_num_kv_splits_triton`` *executes*
  (under the interpreter: it is one tiny program), then ``decode_attention_fwd`` is
  called and its stage-1 / stage-2 launches are intercepted.

Writes tests/data/upstream/vllm-<version>-grids.json and
tests/data/upstream/sglang-0.5.23-splits.json.

    tools/fetch_upstream.sh
    TRITON_INTERPRET=1 .venv/bin/python -m tools.record_upstream_grids
    VLLM_VERSION=0.34.0 tools/fetch_upstream.sh vllm
    TRITON_INTERPRET=1 .venv/bin/python -m tools.record_upstream_grids --only vllm --vllm-version 0.34.0

Options: --vllm PATH / --sglang PATH (sources; default ./upstream/<name>-<version>),
--vllm-version V (default 0.33.0: which ./upstream/vllm-V to read and which
vllm-V-grids.json to write or check; the sources must be that version), --out DIR,
--only vllm|sglang, --seed N.  Every vLLM version records the same inputs (same seed).

The inputs stand in for what ``TritonAttentionMetadataBuilder.__init__`` fixes
(``seq_threshold_3D = 128 // num_heads_kv``, 16 segments, scratch rows
``min(seq_threshold_3D, max_num_seqs) * max_query_len_3d``); no builder is constructed.
0.34.0 reads ``num_heads_kv`` / head size from the KV-cache spec instead of the model
config and ``parallel_drafting`` from ``speculative_config.speculator_config``: the same
values for the single-shape layers recorded here, so the inputs are unchanged.

--check re-runs the inputs of every recorded record on this machine (``--device cuda``
on a GPU: compiled kernels, the split-count kernel executed on the GPU) and compares
the launches and split counts with the JSON instead of writing it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

def _wants_cuda(argv: list[str]) -> bool:
    for k, a in enumerate(argv):
        if a == "--device" and k + 1 < len(argv):
            return argv[k + 1] == "cuda"
        if a.startswith("--device="):
            return a.split("=", 1)[1] == "cuda"
    return False


if not _wants_cuda(sys.argv[1:]):
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

# after the environment above: these import triton, which reads TRITON_INTERPRET once
from decodecalc.verify import locate, recording, upstream  # noqa: E402
from decodecalc.verify.capture import RecordedLaunch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

VLLM_KEYS = {
    "kernel_unified_attention": (
        "BLOCK_M", "BLOCK_Q", "TILE_SIZE", "IS_3D", "NUM_SEGMENTS_PER_SEQ",
        "HEAD_SIZE", "HEAD_SIZE_PADDED", "BLOCK_SIZE", "SLIDING_WINDOW", "Q_IS_FP8", "KV_QUANT_MODE",
    ),
    "reduce_segments": ("TILE_SIZE", "BLOCK_Q", "NUM_SEGMENTS_PER_SEQ", "HEAD_SIZE_PADDED"),
}
SGLANG_KEYS = {
    "get_num_kv_splits_triton": ("MAX_NUM_SEQ",),
    "_fwd_kernel_stage1": ("kv_group_num", "BLOCK_N", "BLOCK_DMODEL", "BLOCK_DV", "MIN_BLOCK_KV"),
    "_fwd_grouped_kernel_stage1": (
        "kv_group_num", "q_head_num", "BLOCK_H", "BLOCK_N", "BLOCK_DMODEL", "BLOCK_DPE", "BLOCK_DV", "MIN_BLOCK_KV",
    ),
    "_fwd_kernel_stage2": ("MAX_KV_SPLITS", "MIN_BLOCK_KV", "BLOCK_DV", "FORCED_KV_SPLITS"),
}

DTYPE_BYTES = {"fp8": 1, "fp16": 2, "bf16": 2, "fp32": 4}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _launch_json(launch: RecordedLaunch, keys: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    return launch.to_json(keys.get(launch.name, ()))


# ----------------------------------------------------------------------------- vLLM cases

VLLM_HEADS = [  # (h, h_kv)
    (32, 8), (8, 1), (64, 8), (16, 1), (32, 32), (28, 4), (40, 8), (12, 2), (96, 8), (20, 4),
    (128, 128), (16, 16), (64, 2), (48, 1), (128, 2), (4, 4), (56, 8), (24, 3),
]


def _seq_lens(rng: random.Random, query_lens: list[int], style: str) -> list[int]:
    out = []
    for i, q in enumerate(query_lens):
        if style == "short":
            ctx = rng.randint(0, 200)
        elif style == "skewed":
            ctx = rng.randint(60000, 131072) if i == 0 else rng.randint(1, 512)
        elif style == "uniform":
            ctx = rng.randint(3000, 3500)
        else:  # ragged
            ctx = int(2 ** rng.uniform(0, 17))
        out.append(ctx + q)
    return out


def vllm_cases(rng: random.Random) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    styles = ["ragged", "skewed", "uniform", "short"]

    def add(h: int, hkv: int, d: int, qlens: list[int], *, q_dtype: str = "bf16", kv_dtype: str | None = None,
            threshold: int | None | str = "default", rows: int | None | str = "default", segments: int | None = 16,
            batch_invariant: bool = False, sliding_window: int | None = None, capability: tuple[int, int] = (9, 0),
            style: str | None = None, block_size: int = 16, max_num_seqs: int = 1024, qlen3d: int = 1,
            pad_to: int | None = None) -> None:
        t = 128 // hkv if threshold == "default" else threshold
        if rows == "default":
            rows = None if t is None else min(t, max_num_seqs) * qlen3d
        seq_lens = _seq_lens(rng, qlens, style or rng.choice(styles))
        num_tokens = sum(qlens)
        if pad_to is not None:  # FULL CUDA-graph replay: padded requests have q = 0, seq_len = 0
            q = qlens[0]
            qlens = qlens + [0] * (pad_to - len(qlens))
            seq_lens = seq_lens + [0] * (pad_to - len(seq_lens))
            num_tokens = pad_to * q
        cases.append(dict(
            num_heads=h, num_kv_heads=hkv, head_size=d, q_dtype=q_dtype,
            kv_dtype=kv_dtype or ("fp8" if q_dtype == "fp8" else q_dtype),
            query_lens=qlens, seq_lens=seq_lens, num_tokens=num_tokens,
            seq_threshold_3D=t, num_segments=segments if t is not None else None,
            scratch_rows=rows if t is not None else None, batch_invariant=batch_invariant,
            sliding_window=sliding_window, capability=list(capability), block_size=block_size,
        ))

    # A. every head config, batches around the threshold, pure decode.
    for h, hkv in VLLM_HEADS:
        t = 128 // hkv
        for d in (128, rng.choice((64, 96, 256))):
            for B in sorted({1, 2, max(1, t - 1), t, t + 1, 2 * t + 3}):
                add(h, hkv, d, [1] * B)
    # B. dtypes x head sizes around the threshold.
    for h, hkv in ((32, 8), (8, 1), (40, 8), (28, 4)):
        t = 128 // hkv
        for d in (64, 96, 128, 256):
            for qd in ("fp16", "bf16", "fp32", "fp8"):
                for B in (1, t, t + 1):
                    add(h, hkv, d, [1] * B, q_dtype=qd)
    # C. speculative decode: every sequence has 1+k query tokens, k = 1..8.
    for h, hkv in ((32, 8), (8, 1), (16, 1), (64, 8), (32, 32), (28, 4), (64, 2)):
        t = 128 // hkv
        qpk = h // hkv
        block_m = 16 if qpk <= 16 else 1 << (qpk - 1).bit_length()
        block_q = block_m // qpk
        for q in range(2, 10):
            per = _cdiv(q, block_q)
            bstar = max(1, t // per)
            qlen3d = min(q, 8)
            for B in sorted({1, bstar, bstar + 1}):
                add(h, hkv, 128, [q] * B, qlen3d=qlen3d)
            # scratch sized without speculative decoding (qlen3d = 1): too few rows -> 2D
            add(h, hkv, 128, [q] * max(1, min(bstar, t)), qlen3d=1)
    # D. mixed prefill / ragged query lengths.
    for h, hkv in ((32, 8), (8, 1), (16, 1), (64, 8), (32, 32)):
        for qlens in ([1, 1, 17], [1, 9], [3, 64], [128], [1] * 3 + [8], [2, 5, 8], [9], [8],
                      [1, 2, 3, 4], [1] * 5 + [33], [4] * 3 + [1] * 2):
            add(h, hkv, 128, list(qlens))
    # E. batch invariance on (and the same shapes off, in A/C).
    for h, hkv in ((32, 8), (8, 1), (16, 1), (64, 8), (32, 32), (28, 4)):
        for qlens in ([1], [1] * 4, [1] * (128 // hkv), [1] * (128 // hkv + 1), [3] * 2, [1, 17]):
            add(h, hkv, 128, list(qlens), batch_invariant=True)
    # F. sliding windows (Gemma-3 signature 1024 with d 128/256 -> TILE 32).
    for sw in (1024, 4096, 2047, 512):
        for d in (64, 128, 256):
            for h, hkv in ((32, 16), (8, 4), (16, 8), (32, 8)):
                t = 128 // hkv
                for qlens in ([1], [1] * t, [1] * (t + 1), [2] * 2, [1, 12]):
                    add(h, hkv, d, list(qlens), sliding_window=sw, q_dtype=rng.choice(("bf16", "fp16", "fp8")))
    # G. no split-K scratch / threshold (2D always), other thresholds, short scratch.
    for h, hkv in ((32, 8), (8, 1), (32, 32)):
        for B in (1, 4, 16):
            add(h, hkv, 128, [1] * B, threshold=None)
        for thr in (8, 24, 4, 1):
            for B in (thr, thr + 1):
                add(h, hkv, 128, [1] * B, threshold=thr)
        for mns in (1, 4, 8):  # max_num_seqs below the threshold: rows < tokens -> 2D
            for B in (mns, mns + 1):
                add(h, hkv, 128, [1] * B, max_num_seqs=mns)
    # H. SM100 (compute capability 10.0): tuned large-head path for d = 256, max_q > 1.
    for h, hkv in ((32, 8), (8, 1), (16, 16), (64, 2)):
        for d in (128, 256):
            for qlens in ([1], [1] * 2, [2] * 2, [4], [1, 20]):
                add(h, hkv, d, list(qlens), capability=(10, 0))
    # J. FULL CUDA-graph replays: B real uniform-decode requests padded to B_pad requests and
    #    B_pad * q tokens (capture sizes 1, 2, 4, 8, 16, 24, ... for k = 0).
    for h, hkv in ((32, 8), (8, 1), (16, 1), (32, 32)):
        t = 128 // hkv
        for q in (1, 2, 4):
            for B in sorted({1, 3, 13, 14, t - 1, t + 1, 17, 21, 41, 42}):
                caps = [1, 2, 4] + list(range(8, 257, 8))
                T = B * q
                tpad = next((c for c in caps if c >= T and c % q == 0), None)
                if tpad is None or tpad // q == B:
                    continue
                add(h, hkv, 128, [q] * B, pad_to=tpad // q, qlen3d=min(q, 8))
    # The reference's example of a launch that changes path only because of padding
    # (16:1 heads, V2 capture sizes n*(1+k)): 3D unpadded, 2D as replayed.
    for q, B, bpad in ((3, 41, 43), (3, 42, 43), (5, 25, 26), (6, 21, 22)):
        add(16, 1, 128, [q] * B, qlen3d=q)
        add(16, 1, 128, [q] * B, pad_to=bpad, qlen3d=q)
    # I. other KV block sizes (grid does not depend on it; constexpr BLOCK_SIZE does).
    for bs in (32, 64):
        add(32, 8, 128, [1] * 4, block_size=bs)
        add(8, 1, 128, [2] * 3, block_size=bs)
    return cases


DEFAULT_VLLM_VERSION = "0.33.0"


def vllm_source(src_path: str | None, version: str) -> locate.UpstreamSource:
    """The vLLM sources of ``version``: ``src_path``, else ./upstream/vllm-<version> (the current
    directory, then this repository), else an installed vllm.  Their version must be ``version``."""
    candidates = [Path(src_path)] if src_path else list(dict.fromkeys(
        (base / "upstream" / f"vllm-{version}").resolve() for base in (Path.cwd(), ROOT)
    ))
    src = None
    for cand in candidates:
        if src_path or cand.is_dir():
            with warnings.catch_warnings():  # checked against ``version`` below instead of 0.33.0
                warnings.simplefilter("ignore", locate.UpstreamVersionWarning)
                src = locate.locate("vllm", cand)
            if not src_path:
                src = replace(src, origin="default")
            break
    if src is None:  # an installed vllm package, if it is that version
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", locate.UpstreamVersionWarning)
            try:
                src = locate.locate("vllm", None)
            except Exception:
                src = None
        if src is None or src.origin != "installed" or src.version != version:
            tried = ", ".join(str(c) for c in candidates)
            raise SystemExit(f"no vLLM {version} sources (tried {tried} and an installed vllm): run "
                             f"VLLM_VERSION={version} tools/fetch_upstream.sh vllm, or pass --vllm PATH")
    if src.version != version:
        raise SystemExit(f"vLLM sources at {src.root} are version {src.version}, not --vllm-version {version}")
    return src


def load_vllm_kernels(src: locate.UpstreamSource, *, batch_invariant: bool, capability: tuple[int, int],
                      interpret: bool) -> upstream.VllmKernels:
    kernels = upstream.load_vllm(source=src, batch_invariant=batch_invariant, capability=capability,
                                 interpret=interpret)
    # 0.34.0+: ROCm RDNA launch tuning, gated by module-level flags that are set only on ROCm
    # (the platform shim reports CUDA); the NVIDIA launch must not see them.
    for flag in ("is_gfx1201", "is_gfx1100"):
        if getattr(kernels.module, flag, False):
            raise SystemExit(f"vLLM {src.version}: {flag} is {getattr(kernels.module, flag)!r} on this host")
    return kernels


def record_vllm(src_path: str | None, seed: int, version: str = DEFAULT_VLLM_VERSION) -> dict[str, Any]:
    src = vllm_source(src_path, version)
    rng = random.Random(seed)
    cases = vllm_cases(rng)
    records = []
    t0 = time.perf_counter()
    for case in cases:
        kernels = load_vllm_kernels(
            src, batch_invariant=case["batch_invariant"], capability=tuple(case["capability"]), interpret=True
        )
        call = recording.call_vllm_unified(
            kernels,
            num_heads=case["num_heads"], num_kv_heads=case["num_kv_heads"], head_size=case["head_size"],
            seq_lens=tuple(case["seq_lens"]), query_lens=tuple(case["query_lens"]),
            q_dtype=case["q_dtype"], kv_dtype=case["kv_dtype"], sliding_window=case["sliding_window"],
            seq_threshold_3D=case["seq_threshold_3D"], num_par_softmax_segments=case["num_segments"],
            scratch_rows=case["scratch_rows"], block_size=case["block_size"], execute=False,
            num_tokens=case["num_tokens"],
        )
        inputs = dict(case, q_dtype_bytes=DTYPE_BYTES[case["q_dtype"]])
        records.append({"inputs": inputs, "launches": [_launch_json(la, VLLM_KEYS) for la in call.launches]})
    elapsed = time.perf_counter() - t0
    return {
        "meta": _meta("vllm", src, elapsed, len(records), {
            "called": "vllm/v1/attention/ops/triton_unified_attention.py:unified_attention",
            "mode": "TRITON_INTERPRET=1, every launch intercepted (not executed)",
            "kv_cache": "paged [num_blocks, block_size, h_kv, d] views of a (blocks, h_kv, block_size, 2d) buffer "
                        "transposed (dims 1,2) and split, as TritonAttentionImpl.forward does",
            "scratch": "softmax_segm_output [rows, h, S, np2(d)] fp32, softmax_segm_max / _expsum [rows, h, S]; "
                       "rows = min(seq_threshold_3D, max_num_seqs) * qlen3d",
            "fp8": "q_dtype fp8 means fp8 query + fp8 KV cache (kv_quant_mode FP8_PER_TENSOR), output fp16",
            "capability": "what the vllm.platforms shim reports (only is_device_capability_family(100) is read; "
                          "is_rocm() is False, so 0.34.0's is_gfx1201 / is_gfx1100 RDNA flags stay False)",
        }),
        "records": records,
    }


# ----------------------------------------------------------------------------- SGLang cases

SGLANG_HEADS = [  # (h, h_kv)
    (32, 32), (16, 16), (40, 40), (64, 64), (8, 8), (32, 8), (8, 1), (64, 8), (28, 4), (16, 1),
    (12, 2), (96, 8), (64, 4), (128, 4), (40, 8), (20, 4), (16, 2), (6, 1), (48, 2),
]
CORES = (132, 78, 108, 304)
SPLITS = (4, 8, 16)


def _sglang_lens(rng: random.Random, B: int, style: str) -> list[int]:
    if style == "uniform":  # max < 1.25 min: "uniform enough"
        base = int(2 ** rng.uniform(5, 17))
        return [rng.randint(base, max(base, int(base * 1.24))) for _ in range(B)]
    if style == "skewed":
        lens = [rng.randint(1, 300) for _ in range(B)]
        lens[rng.randrange(B)] = rng.randint(8192, 131072)
        return lens
    if style == "equal":
        v = int(2 ** rng.uniform(0, 17))
        return [v] * B
    if style == "edge":  # right around Lmax*8 vs Lmin*10
        lmin = rng.randint(100, 20000)
        lmax = (lmin * 10) // 8 + rng.choice((-1, 0, 1))
        lens = [rng.randint(lmin, lmax) for _ in range(B)]
        lens[0], lens[-1] = lmin, lmax
        return lens
    return [int(2 ** rng.uniform(0, 17)) for _ in range(B)]  # ragged, log-uniform 1..128K


def sglang_cases(rng: random.Random) -> list[dict[str, Any]]:
    cases = []
    batches = [1, 2, 3, 4, 5, 8, 13, 16, 31, 32, 33, 64, 100, 127, 128, 129, 200, 255, 256, 257, 300]
    styles = ["uniform", "skewed", "equal", "edge", "ragged"]
    for h, hkv in SGLANG_HEADS:
        for _ in range(20):
            B = rng.choice(batches)
            style = rng.choice(styles) if B > 1 else rng.choice(("equal", "ragged"))
            cases.append(dict(
                seq_lens=_sglang_lens(rng, B, style), style=style, num_head=h, num_kv_head=hkv,
                device_core_count=rng.choice(CORES), max_kv_splits=rng.choice(SPLITS),
                head_dim=rng.choice((64, 128, 128, 256)), num_group=1,
            ))
    # Full cross product on a few fixed batches (every core count x split cap).
    for (h, hkv), lens in (((32, 8), [2560]), ((8, 1), [2560]), ((32, 32), [700, 30000, 5]),
                           ((64, 8), [4096] * 13), ((16, 1), [100] * 3 + [65536])):
        for cores in CORES:
            for ms in SPLITS:
                cases.append(dict(seq_lens=list(lens), style="fixed", num_head=h, num_kv_head=hkv,
                                  device_core_count=cores, max_kv_splits=ms, head_dim=128, num_group=1))
    # Speculative top-k (num_group > 1): split counts only (decode kernels not called).
    for g in (2, 4):
        for h, hkv in ((32, 8), (32, 32), (8, 1)):
            for B in (1, 7, 64):
                cases.append(dict(seq_lens=_sglang_lens(rng, B, "ragged"), style="ragged", num_head=h,
                                  num_kv_head=hkv, device_core_count=132, max_kv_splits=8, head_dim=128,
                                  num_group=g))
    return cases


def record_sglang(src_path: str | None, seed: int) -> dict[str, Any]:
    rng = random.Random(seed + 1)
    kernels = upstream.load_sglang(src_path, interpret=True)
    records = []
    t0 = time.perf_counter()
    for case in sglang_cases(rng):
        call = recording.call_sglang_decode(
            kernels, seq_lens=tuple(case["seq_lens"]), num_head=case["num_head"], num_kv_head=case["num_kv_head"],
            device_core_count=case["device_core_count"], max_kv_splits=case["max_kv_splits"],
            head_dim=case["head_dim"], num_group=case["num_group"],
        )
        launches = [_launch_json(la, SGLANG_KEYS) for la in call.launches]
        stage1 = next((la for la in launches if "stage1" in la["kernel"]), None)
        stage2 = next((la for la in launches if la["kernel"] == "_fwd_kernel_stage2"), None)
        records.append({
            "inputs": case,
            "num_kv_splits": list(call.num_kv_splits),
            "uneven_batch": call.uneven_batch,
            "stage1": stage1,
            "stage2": stage2,
            "launches": [la for la in launches if la is not stage1 and la is not stage2],
        })
    elapsed = time.perf_counter() - t0
    return {
        "meta": _meta("sglang", kernels.source, elapsed, len(records), {
            "called": "sglang/kernels/ops/attention/metadata.py:get_num_kv_splits_triton (executed), then "
                      "sglang/kernels/ops/attention/decode_attention.py:decode_attention_fwd (launches intercepted)",
            "mode": "TRITON_INTERPRET=1; split-count kernel executed, stage-1/stage-2 intercepted",
            "host_wrapper": "as TritonAttnBackend.get_num_kv_splits (SG23): grid (1,), MAX_NUM_SEQ = max(256, np2(B)), "
                            "seq_lens int64, num_kv_splits int32 [B * num_group], uneven_batch int32 [1]",
            "buffers": "attn_logits [B, h, max_kv_splits, d_v] fp32, attn_lse [B, h, max_kv_splits] fp32; "
                       "k/v buffers [slots, h_kv, d] fp16, page_size 1",
            "num_group": "records with num_group > 1 have only the split-count launch (stage1/stage2 null)",
        }),
        "records": records,
    }


def _meta(name: str, src: locate.UpstreamSource, elapsed: float, n: int, extra: dict[str, Any]) -> dict[str, Any]:
    import torch
    import triton

    return {
        "upstream": name,
        "version": src.version,
        "source_origin": src.origin,
        "records": n,
        "triton": triton.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "elapsed_s": round(elapsed, 1),
        "generator": "tools/record_upstream_grids.py",
        **extra,
    }


def _dump(obj: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # one record per line: diffable and compact
    lines = ["{", f' "meta": {json.dumps(obj["meta"], sort_keys=True)},', ' "records": [']
    recs = obj["records"]
    for i, r in enumerate(recs):
        lines.append("  " + json.dumps(r, separators=(",", ":")) + ("," if i < len(recs) - 1 else ""))
    lines += [" ]", "}"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def check(out: Path, only: str | None, device: str, vllm_src: str | None, sglang_src: str | None,
          vllm_version: str = DEFAULT_VLLM_VERSION) -> int:
    """Re-run every recorded input here and count differences from the recording."""
    interp = device == "cpu"
    bad_total = 0
    if only in (None, "vllm"):
        data = json.loads((out / f"vllm-{vllm_version}-grids.json").read_text())
        src = vllm_source(vllm_src, vllm_version)
        t, bad = time.perf_counter(), 0
        for rec in data["records"]:
            i = rec["inputs"]
            k = load_vllm_kernels(src, batch_invariant=i["batch_invariant"],
                                  capability=tuple(i["capability"]), interpret=interp)
            call = recording.call_vllm_unified(
                k, num_heads=i["num_heads"], num_kv_heads=i["num_kv_heads"], head_size=i["head_size"],
                seq_lens=tuple(i["seq_lens"]), query_lens=tuple(i["query_lens"]), q_dtype=i["q_dtype"],
                kv_dtype=i["kv_dtype"], sliding_window=i["sliding_window"],
                seq_threshold_3D=i["seq_threshold_3D"], num_par_softmax_segments=i["num_segments"],
                scratch_rows=i["scratch_rows"], block_size=i["block_size"], execute=False, device=device,
                num_tokens=i["num_tokens"])
            if [_launch_json(la, VLLM_KEYS) for la in call.launches] != rec["launches"]:
                bad += 1
                print("vllm DIFF", i)
        print(f"vllm {vllm_version} check on {device}: {len(data['records'])} records, {bad} differ "
              f"({time.perf_counter() - t:.1f} s)")
        bad_total += bad
    if only in (None, "sglang"):
        data = json.loads((out / "sglang-0.5.23-splits.json").read_text())
        k = upstream.load_sglang(sglang_src, interpret=interp)
        t, bad = time.perf_counter(), 0
        for rec in data["records"]:
            i = rec["inputs"]
            call = recording.call_sglang_decode(
                k, seq_lens=tuple(i["seq_lens"]), num_head=i["num_head"], num_kv_head=i["num_kv_head"],
                device_core_count=i["device_core_count"], max_kv_splits=i["max_kv_splits"],
                head_dim=i["head_dim"], num_group=i["num_group"], device=device)
            grids = {la.name: list(la.grid) for la in call.launches}
            ok = (list(call.num_kv_splits) == rec["num_kv_splits"] and call.uneven_batch == rec["uneven_batch"]
                  and (rec["stage1"] is None or grids.get(rec["stage1"]["kernel"]) == rec["stage1"]["grid"]))
            if not ok:
                bad += 1
                print("sglang DIFF", {k2: v for k2, v in i.items() if k2 != "seq_lens"},
                      call.num_kv_splits[:8], rec["num_kv_splits"][:8])
        print(f"sglang check on {device}: {len(data['records'])} records, {bad} differ "
              f"({time.perf_counter() - t:.1f} s)")
        bad_total += bad
    return 1 if bad_total else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", help="vLLM sources (checkout / unpacked wheel); default ./upstream/vllm-<--vllm-version>")
    ap.add_argument("--vllm-version", default=DEFAULT_VLLM_VERSION,
                    help="vLLM release to record / check (sources must be this version; "
                         "writes vllm-<version>-grids.json); default %(default)s")
    ap.add_argument("--sglang", help="SGLang sources; default ./upstream/sglang-0.5.23")
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "upstream"))
    ap.add_argument("--only", choices=("vllm", "sglang"))
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--check", action="store_true", help="compare a re-run with the recordings in --out")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="for --check")
    args = ap.parse_args(argv)
    out = Path(args.out)
    warnings.simplefilter("always", locate.UpstreamVersionWarning)
    if args.check:
        return check(out, args.only, args.device, args.vllm, args.sglang, args.vllm_version)
    if args.only in (None, "vllm"):
        t = time.perf_counter()
        data = record_vllm(args.vllm, args.seed, args.vllm_version)
        path = out / f"vllm-{data['meta']['version']}-grids.json"
        _dump(data, path)
        print(f"vllm: {len(data['records'])} records -> {path} "
              f"({path.stat().st_size / 1024:.0f} KiB, {time.perf_counter() - t:.1f} s)")
    if args.only in (None, "sglang"):
        t = time.perf_counter()
        data = record_sglang(args.sglang, args.seed)
        path = out / f"sglang-{data['meta']['version']}-splits.json"
        _dump(data, path)
        print(f"sglang: {len(data['records'])} records -> {path} "
              f"({path.stat().st_size / 1024:.0f} KiB, {time.perf_counter() - t:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
