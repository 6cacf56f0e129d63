"""Time the real vLLM 0.33.0 and SGLang 0.5.23 decode kernels (and decodecalc's reference kernels)
at every candidate split count over many shapes, for fitting and checking decodecalc's time model.

    tools/fetch_upstream.sh                     # ./upstream/{vllm-0.33.0,sglang-0.5.23}
    python -m benchmarks.measure_splits_h200 --out benchmarks/results/timemodel-h200-extra.json

Needs a CUDA GPU, torch and triton. Kernels are imported from ./upstream by
decodecalc.verify.upstream (never through ``import vllm`` / ``import sglang``). Every variant is
timed as METHOD.md asks and as ../shared/data/h200-upstream-dev-grid.json was: a CUDA graph of
back-to-back calls cycling over enough disjoint copies of the KV cache (>= 256 MiB together, so L2
cannot hold it), replayed 5 times, median per call. Random bf16 data (never zeros). Output rows
have the same fields as the shared file's ``cases`` (model, variant, launches, t_us, kv_bytes, ...)
plus ``seq_lens`` for ragged batches and the compiled kernels' registers / shared memory.

Variants per shape: vllm-2d, vllm-3d-S{2..128}, vllm-default (3D with 16 segments when
B <= 128 // h_kv, else 2D), sglang-static-S{1..64} (every sequence gets S splits: what
``--triton-attention-num-kv-splits S`` with SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS=1 runs),
sglang-adaptive (SGLang's own split counts, max 8); on every ``--ref-every``-th shape also
decodecalc's reference kernels (reference-vllm-2d, reference-vllm-3d-S*, reference-sglang-S*).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

VLLM_SPLITS = (2, 4, 8, 16, 32, 64, 128)
SGLANG_SPLITS = (1, 2, 4, 8, 16, 32, 64)
REF_VLLM_SPLITS = (4, 16, 64)
REF_SGLANG_SPLITS = (1, 4, 16, 64)
MAX_COPIES = 256  # KV-cache copies cycled over (>= 256 MiB together: decodecalc.verify.timing.ROTATE_BYTES)
#: the kernels whose launches and compiled resources are recorded, by the module that defines them
VLLM_KERNELS = ("kernel_unified_attention", "reduce_segments")
SGLANG_KERNELS = ("_fwd_grouped_kernel_stage1", "_fwd_kernel_stage1", "_fwd_kernel_stage2")
SGLANG_META_KERNELS = ("get_num_kv_splits_triton",)
REF_KERNELS = ("ref_split_kv", "ref_reduce_segments", "ref_grouped_stage1", "ref_stage2", "ref_num_kv_splits")


# --------------------------------------------------------------------------------------------
# shapes: (name, h, h_kv, d, seq_lens)


def shapes(quick: bool = False) -> list[tuple[str, int, int, int, tuple[int, ...]]]:
    out: list[tuple[str, int, int, int, tuple[int, ...]]] = []

    def add(name: str, h: int, hkv: int, d: int, b: int, L: int | tuple[int, ...]) -> None:
        lens = tuple(L) if isinstance(L, tuple) else (L,) * b
        out.append((name, h, hkv, d, lens))

    # head configurations the shared 40 shapes do not cover
    add("40:8-d128", 40, 8, 128, 2, 4096)
    add("40:8-d128", 40, 8, 128, 8, 16384)
    add("40:8-d128", 40, 8, 128, 32, 1024)
    add("40:8-d128", 40, 8, 128, 128, 2048)
    add("40:8-d128", 40, 8, 128, 1, 65536)
    add("40:8-d128", 40, 8, 128, 24, 100000)
    add("12:2-d128", 12, 2, 128, 1, 100000)
    add("12:2-d128", 12, 2, 128, 2, 300)
    add("12:2-d128", 12, 2, 128, 8, 8192)
    add("12:2-d128", 12, 2, 128, 32, 32768)
    add("12:2-d128", 12, 2, 128, 256, 1024)
    add("12:2-d128", 12, 2, 128, 96, 6000)
    add("32:32-d128", 32, 32, 128, 1, 32768)
    add("32:32-d128", 32, 32, 128, 2, 1000)
    add("32:32-d128", 32, 32, 128, 8, 4096)
    add("32:32-d128", 32, 32, 128, 32, 16384)
    add("32:32-d128", 32, 32, 128, 64, 512)
    add("96:8-d128", 96, 8, 128, 1, 16384)
    add("96:8-d128", 96, 8, 128, 4, 100000)
    add("96:8-d128", 96, 8, 128, 16, 2048)
    add("96:8-d128", 96, 8, 128, 64, 8192)
    add("96:8-d128", 96, 8, 128, 3, 700)
    add("20:4-d64", 20, 4, 64, 1, 8192)
    add("20:4-d64", 20, 4, 64, 6, 50000)
    add("20:4-d64", 20, 4, 64, 16, 4096)
    add("20:4-d64", 20, 4, 64, 64, 32768)
    add("20:4-d64", 20, 4, 64, 200, 2048)
    add("20:4-d64", 20, 4, 64, 2, 400)
    add("8:1-d64", 8, 1, 64, 1, 100000)
    add("8:1-d64", 8, 1, 64, 32, 8192)
    add("8:1-d64", 8, 1, 64, 128, 512)
    add("16:2-d256", 16, 2, 256, 1, 32768)
    add("16:2-d256", 16, 2, 256, 4, 4096)
    add("16:2-d256", 16, 2, 256, 16, 16384)
    add("16:2-d256", 16, 2, 256, 64, 1024)
    add("16:2-d256", 16, 2, 256, 2, 100000)
    add("8:4-d256", 8, 4, 256, 8, 8192)
    add("8:4-d256", 8, 4, 256, 48, 2048)
    add("28:4-d128", 28, 4, 128, 1, 20000)
    add("28:4-d128", 28, 4, 128, 12, 5000)
    add("28:4-d128", 28, 4, 128, 40, 32768)
    add("28:4-d128", 28, 4, 128, 160, 600)
    add("32:8-d96", 32, 8, 96, 4, 12000)
    add("32:8-d96", 32, 8, 96, 24, 3000)
    add("32:8-d96", 32, 8, 96, 1, 60000)
    # the shared head configurations at batch / length combinations they skipped
    add("32:8-d128", 32, 8, 128, 2, 40000)
    add("32:8-d128", 32, 8, 128, 8, 3000)
    add("32:8-d128", 32, 8, 128, 32, 16384)
    add("32:8-d128", 32, 8, 128, 128, 1024)
    add("32:8-d128", 32, 8, 128, 256, 4096)
    add("32:8-d128", 32, 8, 128, 10, 100000)
    add("8:1-d128", 8, 1, 128, 2, 65536)
    add("8:1-d128", 8, 1, 128, 8, 20000)
    add("8:1-d128", 8, 1, 128, 32, 4096)
    add("8:1-d128", 8, 1, 128, 128, 16384)
    add("8:1-d128", 8, 1, 128, 256, 2048)
    add("8:1-d128", 8, 1, 128, 12, 700)
    # ragged batches
    add("32:8-d128-ragged", 32, 8, 128, 0, (100000, 2000, 500, 300))
    add("32:8-d128-ragged", 32, 8, 128, 0, tuple(512 * (i + 1) for i in range(16)))
    add("8:1-d128-ragged", 8, 1, 128, 0, (65536, 1024, 1024, 1024, 1024, 1024, 1024, 1024))
    add("8:1-d128-ragged", 8, 1, 128, 0, tuple(1000 + 3000 * (i % 7) for i in range(48)))
    add("40:8-d128-ragged", 40, 8, 128, 0, (30000, 8000, 8000, 400, 400, 12000))
    add("12:2-d128-ragged", 12, 2, 128, 0, tuple(300 + 700 * i for i in range(64)))
    add("20:4-d64-ragged", 20, 4, 64, 0, (90000, 45000, 100, 100))
    add("16:2-d256-ragged", 16, 2, 256, 0, tuple(2048 if i % 2 else 16384 for i in range(10)))
    if quick:
        return out[:3] + out[-2:]
    return out


def dry_shapes() -> list[tuple[str, int, int, int, tuple[int, ...]]]:
    return [("8:1-d64", 8, 1, 64, (300, 70)), ("32:32-d64", 4, 4, 64, (100,)), ("12:2-d64-ragged", 12, 2, 64, (33, 200, 64))]


# --------------------------------------------------------------------------------------------
# compiled-kernel resources (launches are recorded by decodecalc.verify.capture.LaunchRecorder and timed by
# decodecalc.verify.timing: a CUDA graph over rotating KV copies, median of replays, as METHOD.md asks)


def kernel_objects(modules_and_names: list[tuple[object, tuple[str, ...]]]) -> dict[str, object]:
    """The Triton JIT functions by kernel name, looked up in the modules that define them."""
    out: dict[str, object] = {}
    for module, names in modules_and_names:
        for n in names:
            fn = getattr(module, n, None)
            if fn is not None:
                out[n] = fn
    return out


def compiled_resources(fn) -> dict:  # type: ignore[no-untyped-def]
    """n_regs / shared / num_warps of every compiled specialization of a JIT function."""
    out: dict = {}
    caches = getattr(fn, "device_caches", None)
    if caches is None:
        return out
    for dev, entry in caches.items():
        kernel_cache = entry[0]
        for key, k in kernel_cache.items():
            try:
                k._init_handles()
            except Exception:  # noqa: BLE001
                pass
            md = k.metadata
            # the whole specialization key: head dim, segments, ... are in it
            out[str(key)] = {"n_regs": int(getattr(k, "n_regs", -1) or -1), "n_spills": int(getattr(k, "n_spills", -1) or -1),
                             "shared": int(md.shared), "num_warps": int(md.num_warps), "num_stages": int(getattr(md, "num_stages", 0))}
    return out


# --------------------------------------------------------------------------------------------


def measure_copy(env: dict, dev: str) -> None:
    import torch

    from decodecalc.verify.timing import graph_seconds

    # one tiny kernel per call, back to back in a CUDA graph: the per-kernel launch overhead of a replay
    x = torch.zeros(1, device=dev)
    env["graph_kernel_overhead_us"] = round(graph_seconds(lambda c: x.add_(1.0), 1, what="measure_splits") * 1e6, 3)

    # practical bandwidth ceiling: a large device-to-device copy (bytes read + written)
    a = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        b.copy_(a)
    e.record()
    e.synchronize()
    env["d2d_copy_tb_per_s"] = round(2 * (1 << 30) * 10 / (s.elapsed_time(e) * 1e-3) / 1e12, 3)
    del a, b


def drive(args: argparse.Namespace) -> int:
    """Run the shapes in child processes: a kernel fault (illegal address) poisons the CUDA context, so the
    shape that caused it is recorded as an error and a fresh process continues with the next one."""
    import subprocess

    t0 = time.time()
    all_shapes = dry_shapes() if args.dry else shapes(args.quick)
    n_total = len(all_shapes)
    i = args.first
    merged: dict = {"cases": [], "crashed_shapes": [], "kernel_resources": {}}
    part = args.out.with_suffix(".part.json")
    while i < n_total:
        left = args.budget_s - (time.time() - t0)
        if left < 20:
            break
        cmd = [sys.executable, __file__, "--child", "--out", str(part), "--first", str(i), "--budget-s", str(left),
               "--ref-every", str(args.ref_every)] + (["--quick"] if args.quick else []) + (["--dry"] if args.dry else [])
        if part.exists():
            part.unlink()
        rc = subprocess.call(cmd)
        done = 0
        if part.exists():
            d = json.loads(part.read_text())
            merged["env"] = d["env"]
            merged["cases"] += d["cases"]
            for k, v in d.get("kernel_resources", {}).items():
                merged["kernel_resources"].setdefault(k, {}).update(v)
            done = int(d["shapes_done"])
        i += done
        if rc != 0:
            name, h, hkv, d_, lens = all_shapes[i]
            print(f"child failed (rc {rc}) on shape {i} {name} B{len(lens)} L{max(lens)}: skipping it", flush=True)
            merged["crashed_shapes"].append({"index": i, "model": name, "batch": len(lens), "seq_len": max(lens), "rc": rc})
            i += 1
        elif done == 0 or i < n_total and time.time() - t0 > args.budget_s - 20:
            break
        merged["shapes_done_through"] = i
        merged["elapsed_s"] = round(time.time() - t0, 1)
        args.out.write_text(json.dumps(merged) + "\n")
    if part.exists():
        part.unlink()
    merged["shapes_done_through"] = i
    merged["shapes_planned"] = n_total
    merged["elapsed_s"] = round(time.time() - t0, 1)
    args.out.write_text(json.dumps(merged) + "\n")
    ok = sum(r.get("status") == "ok" for r in merged["cases"])
    print(f"wrote {args.out}: shapes {args.first}..{i - 1} of {n_total}, {ok} ok rows, "
          f"{len(merged['crashed_shapes'])} crashed shapes, {merged['elapsed_s']} s", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new shapes after this many seconds")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ref-every", type=int, default=3, help="measure the reference kernels on every n-th shape (0: never)")
    ap.add_argument("--first", type=int, default=0, help="start at this shape index")
    ap.add_argument("--child", action="store_true", help="(internal) run shapes in this process")
    ap.add_argument("--dry", action="store_true", help="CPU smoke test under TRITON_INTERPRET=1: tiny shapes, run once, no timing")
    args = ap.parse_args()
    if args.dry:
        os.environ["TRITON_INTERPRET"] = "1"
    if not args.child:
        return drive(args)

    import torch

    from decodecalc.launchers.vllm_triton_backend import MIN_LAUNCH_GRID_SIZE_2D
    from decodecalc.verify import engine
    from decodecalc.verify.capture import LaunchRecorder
    from decodecalc.verify.kv_cache import build_paged_kv, kv_bytes as kv_bytes_of
    from decodecalc.verify.timing import copies_for, time_calls
    from decodecalc.verify.upstream import load_sglang, load_vllm

    t_start = time.time()
    dev = "cpu" if args.dry else "cuda"
    sms = 132 if args.dry else torch.cuda.get_device_properties(0).multi_processor_count
    cap = (9, 0) if args.dry else torch.cuda.get_device_capability(0)
    vk = load_vllm(None, capability=cap, interpret=args.dry)
    sk = load_sglang(None, interpret=args.dry)
    modules: list[tuple[object, tuple[str, ...]]] = [(vk.module, VLLM_KERNELS), (sk.decode, SGLANG_KERNELS),
                                                     (sk.metadata, SGLANG_META_KERNELS)]
    ref_ok = False
    if args.ref_every:
        try:
            from decodecalc.verify import reference_grouped, reference_split_kv

            modules += [(reference_split_kv, REF_KERNELS), (reference_grouped, REF_KERNELS)]
            ref_ok = True
        except Exception as exc:  # noqa: BLE001
            print(f"reference kernels unavailable: {exc!r}", flush=True)
    kernels = kernel_objects(modules)
    resources: dict[str, dict] = {}
    env = {"device": dev, "gpu": "cpu-interpreter" if args.dry else torch.cuda.get_device_name(0), "sm_count": sms,
           "torch": torch.__version__, "triton": __import__("triton").__version__, "vllm_upstream": vk.source.version,
           "sglang_upstream": sk.source.version, "capability": list(cap), "cuda": torch.version.cuda}
    if not args.dry:
        measure_copy(env, dev)
    print(json.dumps(env), flush=True)

    def sync() -> None:
        if not args.dry:
            torch.cuda.synchronize()

    rows: list[dict] = []
    all_shapes = (dry_shapes() if args.dry else shapes(args.quick))[args.first:]
    done = 0

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"env": env, "args": {k: str(v) for k, v in vars(args).items()},
                                        "shapes_done": done, "shapes_planned": len(all_shapes),
                                        "kernel_resources": resources, "cases": rows,
                                        "elapsed_s": round(time.time() - t_start, 1)}) + "\n")

    dtype = torch.float32 if args.dry else torch.bfloat16
    for si, (name, h, hkv, d, lens) in enumerate(all_shapes):
        if time.time() - t_start > args.budget_s:
            print(f"budget reached after {done} shapes", flush=True)
            break
        t_shape = time.time()
        if os.environ.get("MEASURE_CRASH_AT") == str(si + args.first):  # test hook for the driver
            os._exit(3)
        B = len(lens)
        bs = 16
        kv_bytes = kv_bytes_of(lens, hkv, d, 2)  # as bf16 on the GPU
        copies = copies_for(kv_bytes, max_copies=MAX_COPIES)
        gen = torch.Generator(device=dev)
        gen.manual_seed(si)
        kv = build_paged_kv(gen, seq_lens=lens, num_kv_heads=hkv, head_size=d, block_size=bs, dtype=dtype,
                            device=dev, copies=copies)
        q = torch.randn((B, h, d), generator=gen, device=dev, dtype=dtype)
        out = torch.empty((B, h, d), device=dev, dtype=dtype)
        seq_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
        cu_q = torch.arange(B + 1, dtype=torch.int32, device=dev)
        indptr = torch.tensor([0] + list(__import__("itertools").accumulate(lens)), dtype=torch.int32, device=dev)
        scale = 1.0 / math.sqrt(d)
        d_pad = 1 << (d - 1).bit_length()
        gmax = max(SGLANG_SPLITS + (8,))
        part_out = torch.empty((B, h, gmax, d), device=dev, dtype=torch.float32)
        part_lse = torch.empty((B, h, gmax), device=dev, dtype=torch.float32)
        nsplit = torch.empty((B,), device=dev, dtype=torch.int32)
        default_thr = MIN_LAUNCH_GRID_SIZE_2D // hkv  # vLLM's raw seq_threshold_3D (triton_attn.py), unsnapped
        seg_cache: dict[int, tuple] = {}

        def _segm(S: int):  # type: ignore[no-untyped-def]
            if S not in seg_cache:
                seg_cache[S] = (torch.empty((B, h, S, d_pad), device=dev, dtype=torch.float32),
                                torch.empty((B, h, S), device=dev, dtype=torch.float32),
                                torch.empty((B, h, S), device=dev, dtype=torch.float32))
            return seg_cache[S]

        def vllm_step(thr: int, S: int):  # type: ignore[no-untyped-def]
            so, sm_, ss = _segm(S)

            def step(c: int) -> None:
                engine.vllm_unified_attention(
                    vk, q=q, k=kv.k_cache, v=kv.v_cache, out=out, cu_seqlens_q=cu_q, max_seqlen_q=1,
                    seqused_k=seq_lens, max_seqlen_k=max(lens), block_table=kv.block_tables[c], softmax_scale=scale,
                    seq_threshold_3D=thr, num_par_softmax_segments=S, softmax_segm_output=so, softmax_segm_max=sm_,
                    softmax_segm_expsum=ss)
            return step

        def sglang_step(S: int, adaptive: bool):  # type: ignore[no-untyped-def]
            mx = 8 if adaptive else S
            po, pl = part_out[:, :, :mx].contiguous(), part_lse[:, :, :mx].contiguous()
            # static: a constant split-count tensor, so the timed call has no extra fill kernel
            ns = nsplit if adaptive else torch.full((B,), S, dtype=torch.int32, device=dev)

            def step(c: int) -> None:
                if adaptive:
                    engine.sglang_num_kv_splits(sk, num_kv_splits=nsplit, seq_lens=seq_lens, num_seq=B, num_group=1,
                                                num_head=h, num_kv_head=hkv, max_kv_splits=mx, device_core_count=sms)
                engine.sglang_decode_attention(
                    sk, q=q, k_buffer=kv.k_buffer, v_buffer=kv.v_buffer, o=out, kv_indptr=indptr,
                    kv_indices=kv.kv_indices[c], attn_logits=po, attn_lse=pl, num_kv_splits=ns, max_kv_splits=mx,
                    sm_scale=scale, use_pdl=not args.dry)
            return step

        def ref_vllm_step(use_3d: bool, S: int):  # type: ignore[no-untyped-def]
            so, sm_, ss = _segm(S)

            def step(c: int) -> None:
                reference_split_kv.run_split_kv(
                    q=q, k_cache=kv.k_cache, v_cache=kv.v_cache, out=out, query_start=cu_q, seq_lens=seq_lens,
                    block_table=kv.block_tables[c], scale=scale, use_3d=use_3d, num_segments=S, segm_out=so,
                    segm_max=sm_, segm_sum=ss)
            return step

        def ref_sglang_step(S: int):  # type: ignore[no-untyped-def]
            po, pl = part_out[:, :, :S].contiguous(), part_lse[:, :, :S].contiguous()

            def step(c: int) -> None:
                reference_grouped.run_grouped(
                    q=q, k_buffer=kv.k_buffer, v_buffer=kv.v_buffer, out=out, kv_indptr=indptr,
                    kv_indices=kv.kv_indices[c], seq_lens=seq_lens, part_out=po, part_lse=pl, num_kv_splits=nsplit,
                    max_kv_splits=S, sm_count=1 << 20, scale=scale)
            return step

        variants: list[tuple[str, str, dict, object]] = []
        variants.append(("vllm-2d", "vllm", {"seq_threshold_3D": 0, "num_par_softmax_segments": 16}, vllm_step(0, 16)))
        for S in VLLM_SPLITS:
            variants.append((f"vllm-3d-S{S}", "vllm", {"seq_threshold_3D": 1 << 20, "num_par_softmax_segments": S},
                             vllm_step(1 << 20, S)))
        variants.append(("vllm-default", "vllm", {"seq_threshold_3D": default_thr, "num_par_softmax_segments": 16},
                         vllm_step(default_thr, 16)))
        for S in SGLANG_SPLITS:
            variants.append((f"sglang-static-S{S}", "sglang", {"max_kv_splits": S}, sglang_step(S, False)))
        variants.append(("sglang-adaptive", "sglang", {"max_kv_splits": 8, "device_core_count": sms}, sglang_step(8, True)))
        if ref_ok and si % args.ref_every == 0:
            variants.append(("reference-vllm-2d", "reference", {}, ref_vllm_step(False, 16)))
            for S in REF_VLLM_SPLITS:
                variants.append((f"reference-vllm-3d-S{S}", "reference", {"num_segments": S}, ref_vllm_step(True, S)))
            for S in REF_SGLANG_SPLITS:
                variants.append((f"reference-sglang-S{S}", "reference", {"max_kv_splits": S}, ref_sglang_step(S)))

        for vname, fw, extra, step in variants:
            row = {"model": name, "variant": vname, "framework": fw, **extra, "num_q_heads": h, "num_kv_heads": hkv,
                   "head_dim": d, "block_size": bs, "batch": B, "seq_len": max(lens), "kv_bytes": kv_bytes,
                   "kv_copies": copies}
            if len(set(lens)) > 1:
                row["seq_lens"] = list(lens)
            try:
                with LaunchRecorder(execute=True) as rec:
                    step(0)  # type: ignore[operator]
                    sync()
                row["launches"] = [la.to_json() for la in rec.launches]
                for la in rec.launches:
                    if la.name in kernels:
                        try:
                            resources.setdefault(la.name, {}).update(compiled_resources(kernels[la.name]))
                        except Exception as exc:  # noqa: BLE001
                            resources.setdefault(la.name, {})["error"] = repr(exc)
                if fw == "sglang" and "adaptive" in vname:
                    row["num_kv_splits"] = nsplit.cpu().tolist()
                if args.dry:
                    row["status"] = "ok-dry"
                    rows.append(row)
                    continue
                t = time_calls(step, copies)  # type: ignore[arg-type]
                if t.timer != "graph" or t.t_us is None:
                    raise RuntimeError(f"not timed under a CUDA graph: {t.note}")
                row.update({"t_us": t.t_us, "t_graph_spread": t.spread, "graph_calls": t.calls, "timer": "graph",
                            "status": "ok", "gbps": kv_bytes / (t.t_us * 1e-6) / 1e9})
            except Exception as exc:  # noqa: BLE001
                sync()
                row.update({"status": "error", "error": f"{type(exc).__name__}: {exc}"[:400]})
                traceback.print_exc(limit=2)
            rows.append(row)
        del kv, seg_cache
        if not args.dry:
            torch.cuda.empty_cache()
        done += 1
        ok = [r for r in rows[-len(variants):] if r.get("status") == "ok"]
        if args.dry:
            print(f"[{si}] {name}: " + ", ".join(f"{r['variant']}={r['status']}" for r in rows[-len(variants):]), flush=True)
        best = min(ok, key=lambda r: r["t_us"]) if ok else None
        print(f"[{si + args.first}] {name} B{B} L{max(lens)}{' ragged' if len(set(lens)) > 1 else ''}: "
              f"{len(ok)}/{len(variants)} ok, best {best['variant'] if best else '-'} "
              f"{best['t_us'] if best else float('nan'):.1f} us, {time.time() - t_shape:.1f} s "
              f"(total {time.time() - t_start:.0f} s)", flush=True)
        save()
    save()
    print(f"wrote {args.out}: {done} shapes, {len(rows)} rows, {time.time() - t_start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
