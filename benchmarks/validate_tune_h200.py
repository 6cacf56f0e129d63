#!/usr/bin/env python3
"""Validate ``decodecalc tune`` on a GPU: replay decode workloads through vLLM's and SGLang's real Triton
kernels under CUDA graphs and compare the measured totals with tune's predictions.

For each model and workload (>= 200 steps of a preset) this runs, per engine, the default setting, the
setting tune picks, the next best predicted candidates and every heuristic (engine rules, the PR models,
the per-step bound), each as one CUDA graph holding every step of the workload (step k on KV-cache copy
k % copies, so that L2 cannot carry data between steps), and records the median replay time: the
measured decode-attention time of the whole workload for one layer. The launch of each step is what
decodecalc's launcher modules say the engine launches (vLLM: the 2D/3D gate and segment count, the
padded FULL-graph replay batch; SGLang: the per-sequence split counts and the split-count kernel of the
adaptive rule); the upstream wrappers make the launch from those inputs themselves.

Run on the device from the repository root (the upstream kernel sources under ./upstream):

    python3 -m benchmarks.validate_tune_h200 --out $OUT/validate_tune_h200.json

CPU check of the plumbing (interpreter, fp16, tiny sizes; times are meaningless):

    TRITON_INTERPRET=1 python3 -m benchmarks.validate_tune_h200 --smoke --out /tmp/v.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

from decodecalc.derived import cdiv, next_power_of_2
from decodecalc.launchers.sglang_triton import plan_sglang
from decodecalc.launchers.vllm_unified import plan_vllm
from decodecalc.batch.launches import VllmForcedRecipe
from decodecalc.reports.heuristics import (
    HEURISTICS,
    PR27786_CAP,
    bound_sglang_splits,
    bound_vllm_segments,
    pr27786_splits,
    pr35801_splits,
    pr47520_threshold,
    score_heuristics,
    select_heuristics,
)
from decodecalc.reports.step_launches import vllm_launch
from decodecalc.reports.tune import make_context, tune
from decodecalc.reports.tune_space import engine_settings
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.timemodel import resolve_profile
from decodecalc.timemodel.work import COPY_KERNEL, SPLIT_COUNT_KERNEL, sglang_work
from decodecalc.traffic import PRESETS, generate
from decodecalc.verify.timing import graph_replay_seconds
from decodecalc.workload import make_workload

MODELS = (("llama3.1-8b", 1), ("llama3.1-70b", 8))
WORKLOADS = ("chat", "long-doc-qa", "agentic")
ROTATE_BYTES = 256 << 20  # cycle over at least this much KV (several times the H200's L2)
POOL_BUDGET_BYTES = 24 << 30


# ------------------------------------------------------------------------------------------------
# what to run: per engine, named launch sequences (one launch spec per shape) with their predictions


class VllmSpec(NamedTuple):
    """One vLLM step as the engine runs it: the gate's inputs, the padded batch, and what the gate decided."""

    kind: str  # "vllm"
    threshold: int  # seq_threshold_3D
    segments: int  # num_par_softmax_segments
    batch_run: int
    tokens_run: int
    use_3d: bool


def vllm_spec(plan_result: Any) -> VllmSpec:
    """The launch of one step as the engine runs it (decodecalc.reports.step_launches.vllm_launch: the padded batch
    and the kernel the gate picks for it) with the gate's inputs."""
    be, launch = plan_result.backend, vllm_launch(plan_result)
    return VllmSpec("vllm", be.seq_threshold_3D, be.num_par_softmax_segments, launch["batch_run"],
                    launch["tokens_run"], launch["use_3d"])


def launch_recipe(spec: tuple) -> dict[str, Any]:
    """What the time model needs to rebuild one step's launch work from a launch spec (stored with the per-step
    timings so a refit can recompute their work with the work functions of its day): vLLM's kernel (2D/3D) and
    segments as the gate decides them for the batch that runs, SGLang's per-sequence splits."""
    if isinstance(spec, VllmSpec):
        return {"engine": "vllm", "use_3d": spec.use_3d, "segments": spec.segments if spec.use_3d else 1,
                "batch_run": spec.batch_run, "tokens_run": spec.tokens_run}
    _, splits, maxs, adaptive = spec
    return {"engine": "sglang", "splits": list(splits), "max_kv_splits": maxs, "adaptive": adaptive}


def vllm_forced(segments: int, batch: int) -> VllmSpec:
    return VllmSpec("vllm", 0 if segments <= 1 else 1 << 20, max(segments, 1), batch, batch, segments > 1)


def uses_engine_rule(entry: dict[str, Any]) -> bool:
    """Whether an SGLang entry's adaptive launches get their split counts from the engine's own split-count kernel
    (the search's settings, and PR #21775, which keeps the rule); the other heuristics write theirs with a copy."""
    return entry["engine"] == "sglang" and (entry["kind"] in ("default", "tuned", "candidate")
                                            or entry["name"] == "sglang-pr21775")


def sglang_spec(splits: tuple[int, ...], max_kv_splits: int, adaptive: bool) -> tuple:
    return ("sglang", tuple(splits), max_kv_splits, adaptive)


def exact_context(trace: Any, work: Any, gpu: Any, profile: Any) -> Any:
    """tune's context with every step timed by the scalar model (the replays time every step)."""
    return make_context(trace, work, gpu, profile, max_anchors=0)


def step_work(ctx: Any, i: int) -> Any:
    return ctx.timer.exact_timer.work(i)


def step_lens(ctx: Any, i: int) -> list[int]:
    return list(ctx.steps.step_lens(i)[0])


def forced_time_s(ctx: Any, i: int, segments: int) -> float:
    """Step i on vLLM's 2D kernel (segments 1) or its 3D kernel with ``segments``, whatever the gate says."""
    return float(ctx.timer.exact_timer.times(VllmForcedRecipe(ctx.work, segments), i, all_points=False)[0])


def splits_time_s(ctx: Any, i: int, splits: tuple[int, ...], max_kv_splits: int, *, adaptive: bool,
                  aux_kernel: str = SPLIT_COUNT_KERNEL) -> float:
    """Step i on SGLang's kernel with these per-sequence split counts (behind a split-count kernel or a copy)."""
    lw = sglang_work(step_work(ctx, i), splits=tuple(splits), max_kv_splits=max_kv_splits, adaptive=adaptive,
                     aux_kernel=aux_kernel)
    return ctx.timer.exact_timer.launch_time_s(lw, 0)


def plan_entries(ctx: Any, result: Any, scores: dict[str, Any], top: int) -> list[dict[str, Any]]:
    """Every launch sequence to measure: {engine, name, kind, setting, specs (per step), predicted (per step)}."""
    n = ctx.steps.num_steps
    entries: list[dict[str, Any]] = []
    vspecs: dict[tuple, VllmSpec] = {}

    def vspec(i: int, st: Any) -> VllmSpec:
        # the gate, the graph padding and the segments depend on the batch's query lengths only
        w = step_work(ctx, i)
        key = (w.query_lens, st)
        got = vspecs.get(key)
        if got is None:
            got = vspecs[key] = vllm_spec(plan_vllm(w, ctx.gpu, st))
        return got
    for engine, e in result.engines.items():
        if top < 0:  # every candidate of the search
            picked = list(e.candidates)
        else:
            ranked = sorted(e.candidates, key=lambda c: (c.stats.mean_step_s, c.stats.total_s))
            picked = [e.default, e.best]
            for c in ranked:
                if len(picked) >= 2 + top:
                    break
                if all(list(c.times) != list(p.times) for p in picked):
                    picked.append(c)
        for c in picked:
            kind = "default" if c is e.default else "tuned" if c is e.best else "candidate"
            st = engine_settings(ctx, engine, c.setting)
            if engine == "vllm":
                specs = [vspec(i, st) for i in range(n)]
            else:
                specs = []
                for i in range(n):
                    sp = plan_sglang(step_work(ctx, i), ctx.gpu, st)
                    specs.append(sglang_spec(sp.num_kv_splits, sp.max_kv_splits, sp.mode == "adaptive"))
            entries.append({"engine": engine, "name": c.label, "kind": kind, "setting": c.setting.to_dict(),
                            "specs": specs, "predicted": list(c.times)})
    # heuristics (their launches rebuilt from the same functions the scores used)
    for name, s in scores.items():
        if s.kind in ("engine", "tuned") or s.engine not in result.engines:
            continue
        specs = []
        for i in range(n):
            w = step_work(ctx, i)
            if name == "vllm-pr47520":
                t = pr47520_threshold(ctx.gpu.num_sms, w.num_kv_heads, ctx.work.model.context_length or max(w.seq_lens))
                st = dataclasses.replace(ctx.vllm, min_launch_grid_size_2d=t * w.num_kv_heads)
                specs.append(vspec(i, st))
            elif name == "sglang-pr21775":
                cap = max(ctx.sglang.max_kv_splits or 8, next_power_of_2(ctx.gpu.num_sms // 4))
                sp = plan_sglang(w, ctx.gpu, dataclasses.replace(ctx.sglang, max_kv_splits=cap, static_kv_splits=False))
                specs.append(sglang_spec(sp.num_kv_splits, sp.max_kv_splits, True))
            elif name == "sglang-pr27786":
                base = ctx.sglang.max_kv_splits or 8
                specs.append(sglang_spec(pr27786_splits(w.seq_lens, num_heads=w.num_heads, num_kv_heads=w.num_kv_heads,
                                                        num_sms=ctx.gpu.num_sms, max_kv_splits=base),
                                         max(base, PR27786_CAP), True))
            elif name == "sglang-pr35801":
                base = ctx.sglang.max_kv_splits or 8
                specs.append(sglang_spec(pr35801_splits(w.seq_lens, num_heads=w.num_heads, num_kv_heads=w.num_kv_heads,
                                                        num_sms=ctx.gpu.num_sms, max_kv_splits=base), base, True))
            elif name.endswith("-bound"):
                specs.append(None)  # filled below from the argmin
            else:
                specs.append(None)
        if name.endswith("-bound"):
            best = bound_best(ctx, s.engine, entries)
            specs, pred = [b[1] for b in best], [b[0] for b in best]
        elif any(sp is None for sp in specs):
            continue
        else:
            pred = list(s.times)
        entry = {"engine": s.engine, "name": name, "kind": s.kind, "setting": None, "specs": specs, "predicted": pred}
        if s.engine == "sglang" and not uses_engine_rule(entry):  # predicted as it runs here: counts by a copy
            entry["predicted"] = [recipe_time_s(ctx, [], "sglang", i, launch_recipe(sp), engine_rule=False)
                                  for i, sp in enumerate(specs)]
        entries.append(entry)
    return entries


def bound_best(ctx: Any, engine: str, entries: list[dict[str, Any]]) -> list[tuple[float, tuple]]:
    """Per step the fastest predicted launch among the bound's search space and every entry so far."""
    out = []
    for i in range(ctx.steps.num_steps):
        b = len(step_lens(ctx, i))
        opts: list[tuple[float, tuple]] = []
        if engine == "vllm":
            opts += [(forced_time_s(ctx, i, S), vllm_forced(S, b)) for S in bound_vllm_segments(ctx)]
        else:
            opts += [(splits_time_s(ctx, i, (S,) * b, S, adaptive=False), sglang_spec((S,) * b, S, False))
                     for S in bound_sglang_splits(ctx)]
        opts += [(e["predicted"][i], e["specs"][i]) for e in entries if e["engine"] == engine]
        out.append(min(opts, key=lambda o: o[0]))
    return out


# ------------------------------------------------------------------------------------------------
# the kernels


class Pool:
    """A paged KV pool: ``rows`` sequences of ``length`` tokens, ``copies`` disjoint copies; a step's
    sequence j reads the first L_j tokens of row j."""

    def __init__(self, torch: Any, *, rows: int, length: int, h_kv: int, d: int, dtype: Any, device: str,
                 copies: int, seed: int) -> None:  # dtype: the KV cache's (fp8 drawn in fp16, then cast)
        from decodecalc.verify.kv_cache import build_paged_kv

        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        self.kv = build_paged_kv(gen, seq_lens=[length] * rows, num_kv_heads=h_kv, head_size=d, block_size=16,
                                 dtype=dtype, device=device, copies=copies)
        self.torch, self.copies, self.device = torch, copies, device

    def slots(self, lens: list[int], copy: int) -> Any:
        """SGLang token slots of a step's sequences (prefix of each row), concatenated."""
        torch = self.torch
        lt = torch.tensor(lens, device=self.device)
        seq = torch.repeat_interleave(torch.arange(len(lens), device=self.device), lt)
        starts = torch.cumsum(lt, 0) - lt
        tok = torch.arange(int(lt.sum()), device=self.device) - starts[seq]
        tab = self.kv.block_tables[copy]
        return (tab[seq, tok // 16].long() * 16 + tok % 16).contiguous()


def build_calls(torch: Any, vk: Any, sk: Any, pool: Pool, ctx: Any, entry: dict[str, Any], steps: list[int],
                dtype: Any, device: str, num_sms: int, use_pdl: bool) -> list[Any]:
    """One callable per workload step (in order), with every tensor allocated up front."""
    from decodecalc.verify import engine

    h, h_kv, d = ctx.work.num_heads, ctx.work.num_kv_heads, ctx.work.head_size
    d_pad = next_power_of_2(d)
    scale = 1.0 / math.sqrt(d)
    gen = torch.Generator(device=device)
    gen.manual_seed(1)
    calls = []
    shared: dict[tuple, Any] = {}
    for k, i in enumerate(steps):
        lens = step_lens(ctx, i)
        b = len(lens)
        c = k % pool.copies
        spec = entry["specs"][i]
        fp8 = pool.kv.k_cache.element_size() == 1
        if isinstance(spec, VllmSpec):
            _, thr, S, b_run, t_run, _3d = spec
            key = ("v", i, c, spec)
            if key not in shared:
                q = torch.randn((t_run, h, d), generator=gen, device=device, dtype=dtype)
                out = torch.empty_like(q)
                sl = torch.tensor(lens + [0] * (b_run - b), dtype=torch.int32, device=device)
                cu = torch.tensor(list(range(b + 1)) + [b] * (b_run - b), dtype=torch.int32, device=device)
                tab = pool.kv.block_tables[c][:b_run] if b_run <= pool.kv.block_tables.shape[1] else None
                if tab is None:
                    tab = torch.zeros((b_run, pool.kv.block_tables.shape[2]), dtype=torch.int32, device=device)
                    tab[:b] = pool.kv.block_tables[c][:b]
                rows = max(t_run, 1)
                # the split-K scratch is one buffer the engine reuses for every step (as triton_attn.py allocates it)
                skey = ("v-scratch", rows, S)
                if skey not in shared:
                    shared[skey] = (torch.empty((rows, h, S, d_pad), device=device, dtype=torch.float32),
                                    torch.empty((rows, h, S), device=device, dtype=torch.float32),
                                    torch.empty((rows, h, S), device=device, dtype=torch.float32))
                so, sm, se = shared[skey]
                shared[key] = (q, out, sl, cu, tab.contiguous(), so, sm, se, max(lens), thr, S)
            q, out, sl, cu, tab, so, sm, se, lmax, thr, S = shared[key]
            quant: dict[str, Any] = {}
            if fp8:  # the layer's fp8 query and per-tensor descales, as calibrate's bench quantizes them
                from decodecalc.verify.calibration import vllm_fp8_query

                q, quant = vllm_fp8_query(torch, vk, q, pool.kv.k_cache.dtype, tab.shape[0], h_kv)

            def vcall(q=q, out=out, sl=sl, cu=cu, tab=tab, so=so, sm=sm, se=se, lmax=lmax, thr=thr, S=S,
                      quant=quant) -> None:
                engine.vllm_unified_attention(
                    vk, q=q, k=pool.kv.k_cache, v=pool.kv.v_cache, out=out, cu_seqlens_q=cu, max_seqlen_q=1,
                    seqused_k=sl, max_seqlen_k=lmax, block_table=tab, softmax_scale=scale, seq_threshold_3D=thr,
                    num_par_softmax_segments=S, softmax_segm_output=so, softmax_segm_max=sm, softmax_segm_expsum=se,
                    **quant)
            calls.append(vcall)
        else:
            _, splits, maxs, adaptive = spec
            key = ("s", i, c, spec)
            if key not in shared:
                q = torch.randn((b, h, d), generator=gen, device=device, dtype=dtype)
                o = torch.empty_like(q)
                indptr = [0]
                for L in lens:
                    indptr.append(indptr[-1] + L)
                ip = torch.tensor(indptr, dtype=torch.int32, device=device)
                idx = pool.slots(lens, c)
                skey = ("s-scratch", b, maxs)  # attn_logits / attn_lse: one buffer reused (triton_backend.py)
                if skey not in shared:
                    shared[skey] = (torch.empty((b, h, maxs, d), device=device, dtype=torch.float32),
                                    torch.empty((b, h, maxs), device=device, dtype=torch.float32))
                logits, lse = shared[skey]
                ns = torch.tensor(splits, dtype=torch.int32, device=device)
                want = ns.clone()
                sl = torch.tensor(lens, dtype=torch.int32, device=device)
                shared[key] = (q, o, ip, idx, logits, lse, ns, want, sl, maxs)
            q, o, ip, idx, logits, lse, ns, want, sl, maxs = shared[key]
            default_adaptive = adaptive and uses_engine_rule(entry)

            def scall(q=q, o=o, ip=ip, idx=idx, logits=logits, lse=lse, ns=ns, want=want, sl=sl, maxs=maxs,
                      b=b, adaptive=adaptive, engine_rule=default_adaptive) -> None:
                if engine_rule:  # the engine's own split-count kernel computes the counts on the device
                    engine.sglang_num_kv_splits(sk, num_kv_splits=ns, seq_lens=sl, num_seq=b, num_group=1, num_head=h,
                                                num_kv_head=h_kv, max_kv_splits=maxs, device_core_count=num_sms)
                elif adaptive:  # a proposed rule: one small kernel writes its counts
                    ns.copy_(want)
                engine.sglang_decode_attention(
                    sk, q=q, k_buffer=pool.kv.k_buffer, v_buffer=pool.kv.v_buffer, o=o, kv_indptr=ip, kv_indices=idx,
                    attn_logits=logits, attn_lse=lse, num_kv_splits=ns, max_kv_splits=maxs, sm_scale=scale,
                    use_pdl=use_pdl)
            calls.append(scall)
    return calls


def time_sequence(torch: Any, calls: list[Any], *, replays: int, on_gpu: bool) -> dict[str, Any]:
    """Median seconds of one pass over ``calls`` (all steps) replayed from one CUDA graph."""
    for f in calls:  # warm-up: compile every specialization, first touch
        f()
    if not on_gpu:
        t0 = time.perf_counter()
        for f in calls:
            f()
        return {"total_s": time.perf_counter() - t0, "timer": "cpu-interpreter", "replays": 1}
    torch.cuda.synchronize()
    times = graph_replay_seconds(calls, replays)  # one graph holding every step in order
    med = statistics.median(times)
    return {"total_s": med, "timer": "graph", "replays": replays, "spread": (max(times) - min(times)) / med}


# ------------------------------------------------------------------------------------------------


#: per-step timing: a graph of one step repeated over the KV copies holds at least this much kernel time
PER_STEP_TARGET_S = 400e-6


def time_steps(torch: Any, vk: Any, sk: Any, pool: Pool, ctx: Any, entries: list[dict[str, Any]], shape_ids: list[int],
               dtype: Any, device: str, num_sms: int, replays: int) -> list[dict[str, Any]]:
    """Each sampled shape alone under every distinct launch the entries make for it: one CUDA graph of that
    step on every KV copy in turn (repeated up to PER_STEP_TARGET_S), median of ``replays`` replays per step."""
    rows = []
    for i in shape_ids:
        seen: dict[tuple, dict[str, Any]] = {}
        for e in entries:
            spec = e["specs"][i]
            # the launch that runs (vLLM: kernel, segments (3D only), padded batch; SGLang: splits) and whether the
            # engine's split-count kernel runs before it
            recipe = launch_recipe(spec)
            key = (json.dumps(recipe, sort_keys=True), recipe.get("adaptive", False) and uses_engine_rule(e))
            if key in seen:
                seen[key]["entries"].append(e["name"])
                continue
            calls = build_calls(torch, vk, sk, pool, ctx, e, [i] * pool.copies, dtype, device, num_sms,
                                use_pdl=device == "cuda")
            reps = max(1, math.ceil(PER_STEP_TARGET_S / max(e["predicted"][i] * len(calls), 1e-9)))
            m = time_sequence(torch, calls * reps, replays=replays, on_gpu=device == "cuda")
            lens = step_lens(ctx, i)
            row = {"shape_index": i, "seq_lens": lens, "engine": e["engine"], "launch": recipe,
                   "engine_split_kernel": key[1], "t_us": m["total_s"] / (len(calls) * reps) * 1e6,
                   "predicted_us": e["predicted"][i] * 1e6, "spread": m.get("spread"), "entries": [e["name"]]}
            seen[key] = row
            rows.append(row)
            del calls
    return rows


def in_graph_sequence(torch: Any, calls: list[Any], work: Any, batch: int, *, replays: int) -> dict[str, Any]:
    """The steps' total inside decode layers' graphs (benchmarks/in_graph_h200.py's regime): one graph of every step
    between a layer's GEMMs and KV write, less the same graph without attention."""
    from benchmarks.in_graph_h200 import Layer

    layer = Layer(torch, dataclasses.replace(work, seq_lens=(1,) * batch, query_lens=(1,) * batch))
    with_calls, without_calls = [], []
    for k, f in enumerate(calls):
        with_calls += [lambda k=k: layer.before(k), f, lambda k=k: layer.after(k)]
        without_calls += [lambda k=k: layer.before(k), lambda k=k: layer.after(k)]
    a = time_sequence(torch, with_calls, replays=replays, on_gpu=True)
    b = time_sequence(torch, without_calls, replays=replays, on_gpu=True)
    return {"total_s": a["total_s"] - b["total_s"], "timer": "graph, in-graph", "replays": replays,
            "with_s": a["total_s"], "without_s": b["total_s"], "spread": a.get("spread")}


def run_case(torch: Any, vk: Any, sk: Any, model_name: str, tp: int, wl: str, *, steps: int, top: int,
             device: str, dtype: Any, gpu: Any, profile: Any, replays: int, smoke: bool,
             per_step: int = 0, skip: int = 0, in_graph: bool = False, kv_cache_dtype: str = "auto") -> dict[str, Any]:
    model = resolve_model(model_name)
    work = make_workload(model, tp=tp, dtype="float16" if smoke else None, kv_cache_dtype=kv_cache_dtype)
    if smoke:
        from decodecalc.traffic import parse_mix
        preset, _ = parse_mix("mix:prompt=40,output=6,sigma=0.3")
        trace = generate(dataclasses.replace(preset, concurrency=3), steps=steps)
    else:
        trace = workload_trace(wl, steps, skip)
    ctx = exact_context(trace, work, gpu, profile)
    result = tune(ctx, objective="mean", max_regression=0.05)
    scores = {s.name: s for s in score_heuristics(ctx, result, select_heuristics(None, None))}
    entries = plan_entries(ctx, result, scores, top)
    order = list(range(ctx.steps.num_steps))
    lmax = int(ctx.steps.seq_lens.max())
    bmax = int(ctx.steps.batch.max())
    bpad = max(spec.batch_run for e in entries for spec in e["specs"] if isinstance(spec, VllmSpec)) if any(
        e["engine"] == "vllm" for e in entries) else bmax
    rows = max(bmax, bpad)
    elt = work.kv_bytes_per_element
    kv_dtype = torch.float8_e4m3fn if elt == 1 else dtype
    per_copy = rows * (cdiv(lmax, 16) * 16) * work.num_kv_heads * work.head_size * 2 * elt
    min_step = int(ctx.steps.per_step_sum(ctx.steps.seq_lens).min()) * work.num_kv_heads * work.head_size * 2 * elt
    copies = 1 if smoke else max(1, min(math.ceil(ROTATE_BYTES / max(min_step, 1)), POOL_BUDGET_BYTES // per_copy,
                                        16))
    pool = Pool(torch, rows=rows, length=lmax, h_kv=work.num_kv_heads, d=work.head_size, dtype=kv_dtype,
                device=device, copies=copies, seed=7)
    if per_step:  # per-step timings of a sample of the shapes instead of workload totals
        n = ctx.steps.num_steps
        ids = sorted({order[round(k * (len(order) - 1) / max(per_step - 1, 1))] for k in range(per_step)}) \
            if n > per_step else list(range(n))
        rows = time_steps(torch, vk, sk, pool, ctx, entries, ids, dtype, device, gpu.num_sms, replays)
        del pool
        if device == "cuda":
            torch.cuda.empty_cache()
        errs = sorted(abs(r["predicted_us"] / r["t_us"] - 1) for r in rows)
        print(f"  {model_name} {wl}: {len(rows)} step launches timed, median |error| {errs[len(errs) // 2]:.1%}",
              flush=True)
        return {"model": model_name, "tp": tp, "workload": wl, "steps": len(order), "kv_copies": copies, "skip_steps": skip,
                "per_step": rows}
    out_entries = []
    measured: dict[tuple, tuple[dict[str, Any], str]] = {}
    for e in entries:
        t0 = time.perf_counter()
        adaptive_kernel = uses_engine_rule(e)
        key = (e["engine"], adaptive_kernel, tuple(e["specs"]))
        same_as = None
        if key in measured:  # the same launches as a setting already measured (e.g. every threshold above the batch)
            m, same_as = measured[key]
        else:
            calls = build_calls(torch, vk, sk, pool, ctx, e, order, dtype, device, gpu.num_sms, use_pdl=not smoke)
            m = time_sequence(torch, calls, replays=replays, on_gpu=device == "cuda")
            if in_graph:  # the same steps between decode layers' kernels too
                m = {**m, "in_graph": in_graph_sequence(torch, calls, work, rows, replays=replays)}
            measured[key] = (m, e["name"])
            del calls
            if device == "cuda":  # the graph's pool and the scratch go back before the next setting
                import gc
                gc.collect()
                torch.cuda.empty_cache()
        pred = sum(e["predicted"][i] for i in order)
        out_entries.append({"engine": e["engine"], "name": e["name"], "kind": e["kind"], "setting": e["setting"],
                            "predicted_total_s": pred, "measured_total_s": m["total_s"],
                            "error": pred / m["total_s"] - 1.0, "timer": m["timer"], "spread": m.get("spread"),
                            **({"in_graph_measured_total_s": m["in_graph"]["total_s"]} if "in_graph" in m else {}),
                            "same_launches_as": same_as, "wall_s": time.perf_counter() - t0})
        if e["kind"] == "bound":  # the day's per-step argmin: stored so a later model re-predicts these launches
            out_entries[-1]["launches"] = [launch_recipe(sp) for sp in e["specs"]]
        if same_as is not None:
            continue
        print(f"  {model_name} {wl} {e['engine']:6s} {e['name'][:28]:28s} pred {pred * 1e3:9.3f} ms  meas "
              f"{m['total_s'] * 1e3:9.3f} ms  err {pred / m['total_s'] - 1:+.1%}", flush=True)
    del pool
    if device == "cuda":
        torch.cuda.empty_cache()
    summary = {}
    for engine in result.engines:
        mine = [x for x in out_entries if x["engine"] == engine and x["kind"] in ("default", "tuned", "candidate")]
        if not mine:
            continue
        default = next(x for x in mine if x["kind"] == "default")
        pick = next((x for x in mine if x["kind"] == "tuned"), default)
        best = min(mine, key=lambda x: x["measured_total_s"])
        summary[engine] = {"default": default["name"], "tune_pick": pick["name"], "best_measured": best["name"],
                           "pick_vs_best_measured": pick["measured_total_s"] / best["measured_total_s"] - 1.0,
                           "measured_saving_vs_default": 1.0 - pick["measured_total_s"] / default["measured_total_s"],
                           "predicted_saving_vs_default": 1.0 - pick["predicted_total_s"] / default["predicted_total_s"]}
    case = {"model": model_name, "tp": tp, "workload": wl, "kv_cache_dtype": work.kv_cache_dtype, "steps": len(order),
            "skip_steps": skip,
            "distinct_shapes": ctx.summary["distinct_shapes"], "kv_copies": copies, "entries": out_entries,
            "summary": summary, "workload_summary": ctx.summary}
    if wl.startswith("trace:"):  # the steps themselves: --repredict needs no trace file (it is not committed)
        case["replayed_steps"] = [list(ctx.steps.step_lens(i)[0]) for i in range(ctx.steps.num_steps)]
    return case


def workload_trace(wl: str, steps: int, skip: int = 0) -> Any:
    """A preset by name, a parametric ``mix:...`` workload (both seeded), or ``trace:PATH`` (a request trace in any
    format decodecalc reads, batched with the engine defaults): steps ``skip`` to ``skip + steps``."""
    from decodecalc.traffic import StepTrace

    if wl.startswith("trace:"):
        from decodecalc.api import load_workload
        from decodecalc.batch.steps import StepArrays

        full = load_workload(requests=wl.split(":", 1)[1])
        full = full.expand() if hasattr(full, "expand") else full
        assert isinstance(full, StepArrays)
        from decodecalc.traffic import DecodeStep

        picked = tuple(DecodeStep(seq_lens=full.step_lens(i)[0], query_lens=full.step_lens(i)[1],
                                  origin=full.origin(i)) for i in range(skip, min(skip + steps, full.num_steps)))
        return StepTrace(steps=picked, source=full.source, notes=full.notes)
    if wl.startswith("mix:"):
        from decodecalc.traffic import parse_mix
        preset, _ = parse_mix(wl)
    else:
        preset = PRESETS[wl]
    tr = generate(preset, steps=skip + steps)
    return tr if not skip else StepTrace(steps=tr.steps[skip:skip + steps], source=tr.source, notes=tr.notes)


def case_trace(case: dict[str, Any]) -> Any:
    """The workload a case replayed (presets are seeded: steps ``skip_steps`` to ``skip_steps + steps``)."""
    from decodecalc.traffic import DecodeStep, StepTrace

    if case.get("replayed_steps"):  # a trace's steps as replayed (the trace file itself is not committed)
        return StepTrace(steps=tuple(DecodeStep(seq_lens=tuple(lens), query_lens=(1,) * len(lens),
                                                origin=f"{case['workload']}, replayed step {k + 1}")
                                     for k, lens in enumerate(case["replayed_steps"])), source=case["workload"])
    skip = int(case.get("skip_steps", 0))
    tr = workload_trace(case["workload"], max(case["steps"], 200), skip)
    return StepTrace(steps=tr.steps[:case["steps"]], source=tr.source, notes=tr.notes)


def recipe_time_s(ctx: Any, entries: list[dict[str, Any]], engine: str, i: int, recipe: dict[str, Any], *,
                  engine_rule: bool = True) -> float:
    """Today's predicted time of step i under a stored launch (:func:`launch_recipe`) as this script runs it: an
    SGLang launch with per-sequence counts behind the engine's split-count kernel (``engine_rule``) or a copy
    (:func:`uses_engine_rule`); else that of a search candidate or heuristic making the same launch (its CUDA-graph
    padding included), else the launch forced as the bound forces it (vLLM: 2D or 3D with these segments)."""
    if engine == "sglang" and recipe["adaptive"]:
        return splits_time_s(ctx, i, tuple(recipe["splits"]), int(recipe["max_kv_splits"]), adaptive=True,
                             aux_kernel=SPLIT_COUNT_KERNEL if engine_rule else COPY_KERNEL)
    for e in entries:
        if e["engine"] == engine and launch_recipe(e["specs"][i]) == recipe:
            return float(e["predicted"][i])
    if engine == "vllm":
        return forced_time_s(ctx, i, int(recipe["segments"]))
    return splits_time_s(ctx, i, tuple(recipe["splits"]), int(recipe["max_kv_splits"]), adaptive=False)


def repredict(path: Path, profile_path: Path | None = None, profile: Any = None) -> dict[str, Any]:
    """The comparison from a measured JSON with the time model as it is now (CPU only): per (case, setting)
    predicted vs measured total, tune's pick now among the measured settings (a run of an older, smaller search
    measured only its own), the best measured candidate, the measured saving."""
    data = json.loads(Path(path).read_text())
    gpu = resolve_gpu(data.get("gpu", "h200"))  # the GPU the run measured (runs before --gpu: the H200)
    profile = profile if profile is not None else resolve_profile(gpu, profile_path=profile_path)
    rows, picks = [], []
    for case in data["cases"]:
        if "entries" not in case:
            continue
        model = resolve_model(case["model"])
        ctx = exact_context(case_trace(case), make_workload(model, tp=case["tp"], kv_cache_dtype=case.get("kv_cache_dtype", "auto")), gpu, profile)
        settings = {}
        for x in case["entries"]:
            if x["kind"] in ("default", "tuned", "candidate") and x.get("setting"):
                settings.setdefault(x["engine"], []).append(x["setting"])
        # the settings this run measured, compared as tune compares them (today's model; today's range is larger)
        result = tune(ctx, objective="mean", max_regression=0.05, engines=tuple(settings), only=settings,
                      backends=False)
        pred: dict[tuple[str, str], float] = {}
        for e in result.engines.values():
            for c in e.candidates:
                pred[(e.engine, c.label)] = c.stats.total_s
        heur = {name: SimpleNamespace(kind=h.kind, engine=h.engine, times=h.times(ctx, result))
                for name, h in HEURISTICS.items() if h.kind not in ("bound", "engine", "tuned")
                and h.engine in result.engines}
        now = plan_entries(ctx, result, heur, -1)
        order = list(range(ctx.steps.num_steps))
        for e in now:  # the heuristics as this script runs them (SGLang's proposed rules: counts by a copy)
            if e["kind"] not in ("default", "tuned", "candidate", "bound"):
                pred[(e["engine"], e["name"])] = sum(e["predicted"][i] for i in order)
        if any(x.get("launches") for x in case["entries"]):
            now = [e for e in now if e["kind"] != "bound"]
            for x in case["entries"]:
                if x.get("launches"):
                    pred[(x["engine"], x["name"])] = sum(recipe_time_s(ctx, now, x["engine"], i, x["launches"][i],
                                                                       engine_rule=uses_engine_rule(x)) for i in order)
        meas = {(x["engine"], x["name"]): x for x in case["entries"]}
        for x in case["entries"]:
            # a bound measured before its launches were stored keeps the prediction of its day
            p = pred.get((x["engine"], x["name"]), x["predicted_total_s"])
            rows.append({"model": case["model"], "tp": case["tp"], "workload": case["workload"], "engine": x["engine"],
                         "setting": x["name"], "kind": x["kind"], "predicted_total_s": p,
                         "measured_total_s": x["measured_total_s"], "error": p / x["measured_total_s"] - 1.0})
        for engine, e in result.engines.items():
            measured = {x["name"] for x in case["entries"] if x["engine"] == engine
                        and x["kind"] in ("default", "tuned", "candidate")}
            if not measured or (engine, e.default.label) not in meas:
                continue
            pick = e.best
            cands = [meas[(engine, n)] for n in sorted(measured)]  # sorted: ties (same launches) resolve alike
            best = min(cands, key=lambda x: x["measured_total_s"])
            got, default = meas[(engine, pick.label)], meas[(engine, e.default.label)]
            picks.append({"model": case["model"], "tp": case["tp"], "workload": case["workload"], "engine": engine,
                          "default": e.default.label, "pick": pick.label, "best_measured": best["name"],
                          "candidates_measured": len(cands), "candidates_searched": len(e.candidates),
                          "pick_vs_best_measured": got["measured_total_s"] / best["measured_total_s"] - 1.0,
                          "measured_saving_vs_default": 1.0 - got["measured_total_s"] / default["measured_total_s"],
                          "best_saving_vs_default": 1.0 - best["measured_total_s"] / default["measured_total_s"],
                          "predicted_saving_vs_default": 1.0 - pick.stats.total_s / e.default.stats.total_s})
    errs = [abs(r["error"]) for r in rows]
    return {"source": str(path), "profile": profile.path or "built-in", "rows": rows, "picks": picks,
            "settings": len(rows), "within_5pct": sum(e <= 0.05 for e in errs), "max_abs_error": max(errs),
            "median_abs_error": statistics.median(errs),
            "picks_within_3pct": sum(p["pick_vs_best_measured"] <= 0.03 for p in picks), "engines": len(picks)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--in-graph", action="store_true", help="also time each setting's steps inside decode layers' "
                    "graphs (benchmarks/in_graph_h200.py's regime): in_graph_measured_total_s")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--top", type=int, default=-1, help="predicted runners-up measured besides default and pick "
                    "(-1: every candidate of the search)")
    ap.add_argument("--replays", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new cases after this many seconds")
    ap.add_argument("--models", default=",".join(f"{m}:{tp}" for m, tp in MODELS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="presets or mix:... specs, separated by ',' "
                    "(by ';' when a mix: spec is among them)")
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter check: tiny sizes, fp16")
    ap.add_argument("--per-step", type=int, default=0, metavar="N", help="time N sampled steps of each workload "
                    "alone, under every distinct launch the settings and heuristics make for them (time-model "
                    "training data), instead of workload totals")
    ap.add_argument("--repredict", metavar="JSON", help="no GPU: compare a measured JSON with the current time model "
                    "and write the comparison to --out")
    ap.add_argument("--skip-steps", type=int, default=0, metavar="N", help="replay steps N to N + --steps of each "
                    "workload (steps no earlier run used)")
    ap.add_argument("--kv-cache-dtype", default="auto", help="the workloads' KV-cache dtype (fp8: e4m3, vLLM's query "
                    "quantized with per-tensor descales as calibrate's bench does)")
    ap.add_argument("--profile", metavar="YAML", help="with --repredict: this time profile instead of the one "
                    "decodecalc resolves for the run's GPU")
    ap.add_argument("--gpu", default="h200", help="the GPU this runs on (decodecalc gpus; its SM count must be the "
                    "device's): its profile predicts the settings and picks")
    args = ap.parse_args()
    if args.repredict:
        rep = repredict(Path(args.repredict), Path(args.profile) if args.profile else None)
        Path(args.out).write_text(json.dumps(rep, indent=1, default=lambda o: o.item() if hasattr(o, "item") else str(o)) + "\n")
        print(f"{rep['within_5pct']}/{rep['settings']} (workload, setting) totals within 5% (median |error| "
              f"{rep['median_abs_error']:.1%}, max {rep['max_abs_error']:.1%}); tune's pick within 3% of the best "
              f"measured candidate for {rep['picks_within_3pct']}/{rep['engines']} (case, engine)")
        for p in rep["picks"]:
            print(f"  {p['model']} TP{p['tp']} {p['workload']} {p['engine']}: pick {p['pick']} vs best measured "
                  f"{p['best_measured']} {p['pick_vs_best_measured']:+.1%}; measured saving over the default "
                  f"{p['measured_saving_vs_default']:.1%} (predicted {p['predicted_saving_vs_default']:.1%})")
        return 0
    import torch

    from decodecalc.verify.upstream import load_sglang, load_vllm

    on_gpu = torch.cuda.is_available() and not args.smoke
    device = "cuda" if on_gpu else "cpu"
    dtype = torch.bfloat16 if on_gpu else torch.float16
    cap = tuple(torch.cuda.get_device_capability(0)) if on_gpu else (9, 0)
    vk = load_vllm(None, capability=cap, interpret=not on_gpu)
    sk = load_sglang(None, interpret=not on_gpu)
    gpu = resolve_gpu(args.gpu)
    profile = resolve_profile(gpu)
    info: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if on_gpu else "cpu (TRITON_INTERPRET)",
                            "gpu": gpu.name,
                            "torch": torch.__version__, "vllm": vk.source.version, "sglang": sk.source.version,
                            "profile": profile.path or "built-in", "steps_per_workload": args.steps,
                            "method": "one CUDA graph per (workload, setting) holding every step; median of "
                                      f"{args.replays} replays; KV copies rotated per step",
                            "cases": []}
    if on_gpu:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        info["sms"] = sms
    start = time.perf_counter()
    out = Path(args.out)
    for spec in args.models.split(","):
        name, _, tp = spec.partition(":")
        # a mix: spec holds commas itself: then workloads are separated by ';' (one mix: spec alone is one workload)
        for wl in args.workloads.split(";" if ";" in args.workloads or "mix:" in args.workloads else ","):
            if time.perf_counter() - start > args.budget_s:
                info.setdefault("skipped", []).append(f"{name} {wl}: time budget")
                continue
            print(f"case {name} TP{tp or 1} {wl}", flush=True)
            try:
                case = run_case(torch, vk, sk, name, int(tp or 1), wl, steps=args.steps, top=args.top, device=device,
                                dtype=dtype, gpu=gpu, profile=profile, replays=args.replays, smoke=args.smoke,
                                per_step=args.per_step, skip=args.skip_steps, in_graph=args.in_graph,
                                kv_cache_dtype=args.kv_cache_dtype)
            except Exception as exc:  # noqa: BLE001 - record it and go on with the next case
                import traceback
                traceback.print_exc()
                case = {"model": name, "tp": int(tp or 1), "workload": wl, "error": f"{type(exc).__name__}: {exc}"}
            info["cases"].append(case)
            info["elapsed_s"] = time.perf_counter() - start
            out.write_text(json.dumps(info, indent=1) + "\n")  # after every case: a partial run still says something
    print(f"wrote {out} in {time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
