"""Time the real vLLM 0.33.0 and SGLang 0.5.23 decode kernels (and decodecalc's reference kernels)
at every candidate split count over many shapes, for fitting and checking decodecalc's time model.

    tools/fetch_upstream.sh                     # ./upstream/{vllm-0.33.0,sglang-0.5.23}
    python benchmarks/measure_splits_h200.py --out benchmarks/results/timemodel-h200-extra.json

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
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VLLM_SPLITS = (2, 4, 8, 16, 32, 64, 128)
SGLANG_SPLITS = (1, 2, 4, 8, 16, 32, 64)
REF_VLLM_SPLITS = (4, 16, 64)
REF_SGLANG_SPLITS = (1, 4, 16, 64)
ROTATE_BYTES = 256 << 20
MAX_COPIES = 256


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def np2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


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
# timing (METHOD.md: CUDA-graph replay over rotating KV copies, median of replays)


def time_calls(step, copies: int, *, target_ms: float = 3.0, max_calls: int = 2048, replays: int = 5):  # type: ignore[no-untyped-def]
    import torch

    torch.cuda.synchronize()
    for c in range(min(copies, 4)):
        step(c)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n_est = min(copies, 16)
    s.record()
    for c in range(n_est):
        step(c)
    e.record()
    e.synchronize()
    est_ms = max(s.elapsed_time(e) / n_est, 1e-3)
    calls = max(min(copies, 512), min(max_calls, math.ceil(target_ms / est_ms)))
    calls = max(1, min(calls, max(max_calls, copies)))
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step(0)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        for i in range(calls):
            step(i % copies)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1000.0 / calls)
    del graph
    med = statistics.median(times)
    return med, (max(times) - min(times)) / med, calls


# --------------------------------------------------------------------------------------------
# launch recording and compiled-kernel resources


class Recorder:
    """Wrap Triton JIT functions so each launch's name, grid and constexprs are recorded."""

    def __init__(self) -> None:
        self.launches: list[dict] = []
        self.on = False
        self.resources: dict[str, dict] = {}

    def wrap(self, module, names):  # type: ignore[no-untyped-def]
        for n in names:
            fn = getattr(module, n, None)
            if fn is None or not hasattr(fn, "__getitem__"):
                continue
            setattr(module, n, _Recorded(fn, self, n))


class _Recorded:
    def __init__(self, fn, rec: Recorder, name: str) -> None:  # type: ignore[no-untyped-def]
        self.fn, self.rec, self.name = fn, rec, name

    def __getattr__(self, k):  # type: ignore[no-untyped-def]
        return getattr(self.fn, k)

    def __getitem__(self, grid):  # type: ignore[no-untyped-def]
        launcher = self.fn[grid]
        rec, name, fn = self.rec, self.name, self.fn

        def run(*a, **kw):  # type: ignore[no-untyped-def]
            if rec.on:
                g = grid(kw) if callable(grid) else grid
                g = tuple(int(x) for x in (g if isinstance(g, (tuple, list)) else (g,)))
                cx = {k: v for k, v in kw.items() if isinstance(v, (bool, int, float, str)) and k.isupper() or k in (
                    "num_warps", "num_stages", "num_queries_per_kv", "kv_group_num")}
                rec.launches.append({"kernel": name, "grid": list(g), "constexprs": {k: v for k, v in cx.items() if isinstance(v, (bool, int, float, str))}})
            out = launcher(*a, **kw)
            if rec.on:
                try:
                    rec.resources.setdefault(name, {}).update(_resources(fn))
                except Exception as exc:  # noqa: BLE001
                    rec.resources.setdefault(name, {})["error"] = repr(exc)
            return out

        return run


def _resources(fn) -> dict:  # type: ignore[no-untyped-def]
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
            out[str(key)] = {  # the whole specialization key: head dim, segments, ... are in it"n_regs": int(getattr(k, "n_regs", -1) or -1), "n_spills": int(getattr(k, "n_spills", -1) or -1),
                                   "shared": int(md.shared), "num_warps": int(md.num_warps), "num_stages": int(getattr(md, "num_stages", 0))}
    return out


# --------------------------------------------------------------------------------------------


def measure_copy(env: dict, dev: str) -> None:
    import torch

    # one tiny kernel per call, back to back in a CUDA graph: the per-kernel launch overhead of a replay
    x = torch.zeros(1, device=dev)
    env["graph_kernel_overhead_us"] = round(time_calls(lambda c: x.add_(1.0), 1, target_ms=2.0)[0], 3)

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

    from decodecalc.verify.upstream import load_sglang, load_vllm

    t_start = time.time()
    dev = "cpu" if args.dry else "cuda"
    sms = 132 if args.dry else torch.cuda.get_device_properties(0).multi_processor_count
    cap = (9, 0) if args.dry else torch.cuda.get_device_capability(0)
    vk = load_vllm(None, capability=cap, interpret=args.dry)
    sk = load_sglang(None, interpret=args.dry)
    rec = Recorder()
    rec.wrap(vk.module, ["kernel_unified_attention", "reduce_segments"])
    rec.wrap(sk.decode, ["_fwd_grouped_kernel_stage1", "_fwd_kernel_stage1", "_fwd_kernel_stage2"])
    rec.wrap(sk.metadata, ["get_num_kv_splits_triton"])
    rk = None
    if args.ref_every:
        try:
            from decodecalc.verify import reference_kernels as rk  # type: ignore[no-redef]

            rec.wrap(rk, ["ref_split_kv", "ref_reduce_segments", "ref_grouped_stage1", "ref_stage2", "ref_num_kv_splits"])
        except Exception as exc:  # noqa: BLE001
            print(f"reference kernels unavailable: {exc!r}", flush=True)
            rk = None
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
    resources: dict = {}
    all_shapes = (dry_shapes() if args.dry else shapes(args.quick))[args.first:]
    done = 0

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"env": env, "args": {k: str(v) for k, v in vars(args).items()},
                                        "shapes_done": done, "shapes_planned": len(all_shapes),
                                        "kernel_resources": rec.resources, "cases": rows,
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
        g = h // hkv
        nb = [cdiv(L, bs) for L in lens]
        per_copy = sum(nb)
        kv_bytes = sum(lens) * hkv * d * 2 * 2
        copies = max(1, min(MAX_COPIES, math.ceil(ROTATE_BYTES / kv_bytes)))
        gen = torch.Generator(device=dev)
        gen.manual_seed(si)
        nblocks = copies * per_copy + 1
        k_cache = torch.randn((nblocks, bs, hkv, d), generator=gen, device=dev, dtype=dtype)  # never zeros (METHOD.md)
        v_cache = torch.randn((nblocks, bs, hkv, d), generator=gen, device=dev, dtype=dtype)
        perm = torch.randperm(nblocks - 1, generator=gen, device=dev).to(torch.int32) + 1
        max_nb = max(nb)
        tables = torch.zeros((copies, B, max_nb), dtype=torch.int32, device=dev)
        indices = torch.empty((copies, sum(lens)), dtype=torch.int64, device=dev)  # SGLang's kv_indices are int64
        ar = torch.arange(bs, device=dev, dtype=torch.int32)
        for c in range(copies):
            off, tok = c * per_copy, 0
            for i, n in enumerate(nb):
                blocks = perm[off:off + n]
                tables[c, i, :n] = blocks
                indices[c, tok:tok + lens[i]] = (blocks[:, None] * bs + ar[None, :]).reshape(-1)[:lens[i]].to(torch.int64)
                tok += lens[i]
                off += n
        q = torch.randn((B, h, d), generator=gen, device=dev, dtype=dtype)
        out = torch.empty((B, h, d), device=dev, dtype=dtype)
        seq_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
        cu_q = torch.arange(B + 1, dtype=torch.int32, device=dev)
        indptr = torch.tensor([0] + list(__import__("itertools").accumulate(lens)), dtype=torch.int32, device=dev)
        k_buf, v_buf = k_cache.view(-1, hkv, d), v_cache.view(-1, hkv, d)
        scale = 1.0 / math.sqrt(d)
        d_pad = np2(d)
        gmax = max(SGLANG_SPLITS + (8,))
        part_out = torch.empty((B, h, gmax, d), device=dev, dtype=torch.float32)
        part_lse = torch.empty((B, h, gmax), device=dev, dtype=torch.float32)
        nsplit = torch.empty((B,), device=dev, dtype=torch.int32)
        block_m = 16 if g <= 16 else np2(g)
        block_q = block_m // g
        default_thr = 128 // hkv

        def vllm_step(thr: int, S: int):  # type: ignore[no-untyped-def]
            def step(c: int) -> None:
                vk.unified_attention(q=q, k=k_cache, v=v_cache, out=out, cu_seqlens_q=cu_q, max_seqlen_q=1,
                                     seqused_k=seq_lens, max_seqlen_k=max(lens), softmax_scale=scale, causal=True,
                                     window_size=(-1, -1), block_table=tables[c], softcap=0, q_descale=None,
                                     k_descale=None, v_descale=None, seq_threshold_3D=thr,
                                     num_par_softmax_segments=S, softmax_segm_output=_segm(S)[0],
                                     softmax_segm_max=_segm(S)[1], softmax_segm_expsum=_segm(S)[2])
            return step

        seg_cache: dict[int, tuple] = {}

        def _segm(S: int):  # type: ignore[no-untyped-def]
            if S not in seg_cache:
                seg_cache[S] = (torch.empty((B, h, S, d_pad), device=dev, dtype=torch.float32),
                                torch.empty((B, h, S), device=dev, dtype=torch.float32),
                                torch.empty((B, h, S), device=dev, dtype=torch.float32))
            return seg_cache[S]

        def sglang_step(S: int, adaptive: bool):  # type: ignore[no-untyped-def]
            import triton

            mx = 8 if adaptive else S
            po, pl = part_out[:, :, :mx].contiguous(), part_lse[:, :, :mx].contiguous()
            # static: a constant split-count tensor, so the timed call has no extra fill kernel
            ns = nsplit if adaptive else torch.full((B,), S, dtype=torch.int32, device=dev)

            def step(c: int) -> None:
                if adaptive:
                    sk.get_num_kv_splits_triton[(1,)](nsplit, seq_lens, B, 1, h, hkv, mx, sms,
                                                      MAX_NUM_SEQ=max(256, triton.next_power_of_2(B)))
                sk.decode_attention_fwd(q, k_buf, v_buf, out, indptr, indices[c], po, pl, ns, mx, scale, 1.0, 1.0,
                                        use_pdl=not args.dry)
            return step

        def ref_vllm_step(use_3d: bool, S: int):  # type: ignore[no-untyped-def]
            so, sm_, ss = _segm(S)

            def step(c: int) -> None:
                rk.run_split_kv(q=q, k_cache=k_cache, v_cache=v_cache, out=out, query_start=cu_q, seq_lens=seq_lens,
                                block_table=tables[c], scale=scale, use_3d=use_3d, num_segments=S, segm_out=so,
                                segm_max=sm_, segm_sum=ss)
            return step

        def ref_sglang_step(S: int):  # type: ignore[no-untyped-def]
            po, pl = part_out[:, :, :S].contiguous(), part_lse[:, :, :S].contiguous()

            def step(c: int) -> None:
                rk.run_grouped(q=q, k_buffer=k_buf, v_buffer=v_buf, out=out, kv_indptr=indptr, kv_indices=indices[c],
                               seq_lens=seq_lens, part_out=po, part_lse=pl, num_kv_splits=nsplit, max_kv_splits=S,
                               sm_count=1 << 20, scale=scale)
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
        if rk is not None and args.ref_every and si % args.ref_every == 0:
            variants.append(("reference-vllm-2d", "reference", {}, ref_vllm_step(False, 16)))
            for S in REF_VLLM_SPLITS:
                variants.append((f"reference-vllm-3d-S{S}", "reference", {"num_segments": S}, ref_vllm_step(True, S)))
            for S in REF_SGLANG_SPLITS:
                variants.append((f"reference-sglang-S{S}", "reference", {"max_kv_splits": S}, ref_sglang_step(S)))

        model = f"{name}"
        for vname, fw, extra, step in variants:
            row = {"model": model, "variant": vname, "framework": fw, **extra, "num_q_heads": h, "num_kv_heads": hkv,
                   "head_dim": d, "block_size": bs, "batch": B, "seq_len": max(lens), "kv_bytes": kv_bytes,
                   "kv_copies": copies}
            if len(set(lens)) > 1:
                row["seq_lens"] = list(lens)
            try:
                rec.launches = []
                rec.on = True
                step(0)  # type: ignore[operator]
                sync()
                rec.on = False
                row["launches"] = rec.launches
                if fw == "sglang" and "adaptive" in vname:
                    row["num_kv_splits"] = nsplit.cpu().tolist()
                if args.dry:
                    row.update({"status": "ok-dry", "launches": rec.launches})
                    rows.append(row)
                    continue
                t_us, spread, calls = time_calls(step, copies)
                row.update({"t_us": t_us, "t_graph_spread": spread, "graph_calls": calls, "timer": "graph",
                            "status": "ok", "gbps": kv_bytes / (t_us * 1e-6) / 1e9})
            except Exception as exc:  # noqa: BLE001
                rec.on = False
                sync()
                row.update({"status": "error", "error": f"{type(exc).__name__}: {exc}"[:400]})
                traceback.print_exc(limit=2)
            rows.append(row)
        del k_cache, v_cache, k_buf, v_buf, tables, indices, seg_cache
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
