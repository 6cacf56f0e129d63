"""What ``calibrate --workload`` times: a few sampled steps of the user's traffic, each under every distinct launch
the engines make for it (vLLM: the 2D kernel or the 3D kernel with a segment count, on the batch the FULL CUDA graph
replays; SGLang: the per-sequence split counts, computed on the device by the engine's own split-count kernel where
the rule is adaptive) with the settings that decide tune's pick: each engine's default, the pick and the next best
candidates (global layers; a sliding-window model's window layers are not sampled).

Why these launches and not calibrate's static shapes: layout cells from sampled steps under the engines' own
launches predict the same traffic's later totals better than cells from static launches (simulated on H200 per-step
timings by ``benchmarks/steps_in_sequence.py --sampled``; measured by ``benchmarks/calibrate_workload_h200.py``,
``benchmarks/results/calibrate-workload-h200.json``). The launches come from the launcher modules
(:func:`~decodecalc.launchers.vllm_unified.plan_vllm`, :func:`~decodecalc.launchers.sglang_triton.plan_sglang`); this
module only reads their plans.

A launch is a JSON-ready mapping (the ``launch`` of a per-step timing row, as
``benchmarks/validate_tune_h200.py --per-step`` and ``calibrate --save-measurements`` store it):

* vLLM: ``{"engine": "vllm", "use_3d", "segments" (1 on 2D), "batch_run", "tokens_run"}``;
* SGLang: ``{"engine": "sglang", "splits" (per sequence), "max_kv_splits", "adaptive"}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from decodecalc.launchers.base import KernelKind
from decodecalc.launchers.sglang_triton import plan_sglang
from decodecalc.launchers.vllm_unified import plan_vllm
from decodecalc.reports.tune_space import engine_settings
from decodecalc.timemodel.step_rows import StepLaunch, WorkloadSample

#: steps calibrate --workload samples by default: twelve did little better (benchmarks/steps_in_sequence.py --sampled)
DEFAULT_SAMPLE_STEPS = 6
#: per engine, the leading candidates timed besides the default and the pick: the settings whose times decide the
#: pick (the simulation's data timed the same: validate_tune_h200.py --top 6). The whole range would add kernels of
#: thousands of segments and splits, each a Triton compile of its own (minutes on the H200 for one long workload).
DEFAULT_LEADING = 6


def sample_steps(num_steps: int, k: int) -> list[int]:
    """``k`` step indices evenly spaced over ``num_steps`` steps, first and last included (all when fewer)."""
    if num_steps <= k:
        return list(range(num_steps))
    if k == 1:
        return [num_steps // 2]
    return sorted({round(j * (num_steps - 1) / (k - 1)) for j in range(k)})


def vllm_launch(plan: Any) -> dict[str, Any]:
    """The launch of a :class:`~decodecalc.launchers.vllm_unified.VllmPlan` as it runs: under a FULL-graph replay, the
    padded batch and the kernel the gate picks for it; else the batch as given."""
    running = plan.replay.plan if plan.replay is not None else plan.plan
    use_3d = any(k.kind is KernelKind.VLLM_UNIFIED_3D for k in running.kernels)
    if plan.replay is not None:
        batch, tokens = plan.replay.num_reqs_padded, plan.replay.num_tokens_padded
    else:
        batch = tokens = len(plan.plan.splits)
    return {"engine": "vllm", "use_3d": use_3d, "segments": plan.backend.num_par_softmax_segments if use_3d else 1,
            "batch_run": batch, "tokens_run": tokens}


def sglang_launch(plan: Any) -> dict[str, Any]:
    """The launch of a :class:`~decodecalc.launchers.sglang_triton.SglangPlan`: per-sequence split counts."""
    return {"engine": "sglang", "splits": list(plan.num_kv_splits), "max_kv_splits": plan.max_kv_splits,
            "adaptive": plan.mode == "adaptive"}


def step_launch(ctx: Any, engine: str, settings: Any, work: Any) -> dict[str, Any]:
    """The launch ``engine`` makes for one step's workload under ``settings``."""
    if engine == "vllm":
        return vllm_launch(plan_vllm(work, ctx.gpu, settings))
    return sglang_launch(plan_sglang(work, ctx.gpu, settings))


def step_lens_of(steps: Any, idx: Sequence[int]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(KV lengths, query lengths) of steps ``idx`` of a workload's steps (StepArrays, or a request trace's runs,
    whose steps are expanded only for these)."""
    if hasattr(steps, "step_lens"):
        return [steps.step_lens(i) for i in idx]
    sub = steps.take(list(idx))  # batch.runs.RunSteps: the arrays stay in batch/
    return [sub.step_lens(j) for j in range(len(idx))]


def timed_candidates(engine_tune: Any, objective: str, leading: int) -> list[Any]:
    """An engine's default, its pick and its ``leading`` best other candidates (settings with equal statistics
    once); ``leading`` < 0: every candidate of the search."""
    from decodecalc.reports.tune_search import leading_candidates

    if leading < 0:
        return list(engine_tune.candidates)
    out = [engine_tune.default, engine_tune.best]
    for c in leading_candidates(engine_tune.candidates, objective, leading + 2):
        if len(out) >= leading + 2:
            break
        if all(c.stats != o.stats for o in out):
            out.append(c)
    return list({id(c): c for c in out}.values())


def candidate_step_launches(result: Any, steps: Sequence[int], leading: int = DEFAULT_LEADING) -> list[StepLaunch]:
    """Every distinct launch tune's candidates (:func:`timed_candidates`, per engine) make for each of ``steps`` of
    ``result``'s workload (a :class:`~decodecalc.reports.tune.TuneResult`), in step order."""
    ctx = result.ctx
    out: list[StepLaunch] = []
    for i, (seq, q) in zip(steps, step_lens_of(ctx.steps, steps)):
        work = dataclasses.replace(ctx.work, seq_lens=tuple(seq), query_lens=tuple(q))
        seen: dict[tuple[str, str], StepLaunch] = {}
        for engine, e in result.engines.items():
            for c in timed_candidates(e, result.objective, leading):
                launch = step_launch(ctx, engine, engine_settings(ctx, engine, c.setting), work)
                key = (engine, repr(sorted(launch.items())))
                got = seen.get(key)
                if got is None:
                    seen[key] = StepLaunch(step=i, seq_lens=tuple(int(x) for x in seq), engine=engine, launch=launch,
                                           engine_split_kernel=bool(launch.get("adaptive", False)),
                                           settings=(c.label,))
                else:
                    seen[key] = dataclasses.replace(got, settings=got.settings + (c.label,))
        out.extend(seen.values())
    return out


def workload_sample(result: Any, k: int, *, model: str, tp: int, source: str,
                    leading: int = DEFAULT_LEADING) -> WorkloadSample:
    """``k`` evenly spaced steps of ``result``'s workload (a TuneResult) under every launch its timed candidates
    (:func:`timed_candidates`) make."""
    ctx = result.ctx
    launches = candidate_step_launches(result, sample_steps(ctx.steps.num_steps, k), leading)
    w = ctx.work
    return WorkloadSample(model=model, tp=tp, source=source, num_heads=w.num_heads, num_kv_heads=w.num_kv_heads,
                          head_size=w.head_size, head_size_v=w.head_size_v, num_steps=int(ctx.steps.num_steps),
                          launches=tuple(launches))


def reference_samples(gpu: Any, profile: Any, k: int, *, leading: int = DEFAULT_LEADING,
                      progress: Any = None) -> list[WorkloadSample]:
    """calibrate's map steps: ``k`` evenly spaced steps of each reference workload (the presets
    :data:`~decodecalc.timemodel.calibration_fit.MAP_WORKLOADS` on :data:`~decodecalc.timemodel.calibration_fit.
    MAP_MODELS`, :data:`~decodecalc.timemodel.calibration_fit.MAP_WORKLOAD_STEPS` steps each, seeded), each under the
    launches of tune's candidates ranked by ``profile`` (the calibration's starting profile: which launches are timed
    depends on it, not what they measure)."""
    from decodecalc.reports.tune import make_context, tune
    from decodecalc.specs.models import resolve_model
    from decodecalc.timemodel.calibration_fit import MAP_MODELS, MAP_WORKLOAD_STEPS, MAP_WORKLOADS
    from decodecalc.traffic import PRESETS, generate
    from decodecalc.workload import make_workload

    out = []
    for model, tp in MAP_MODELS:
        work = make_workload(resolve_model(model), tp=tp)
        for name in MAP_WORKLOADS:
            if progress:
                progress(f"map steps: {model} TP{tp} {name}")
            ctx = make_context(generate(PRESETS[name], steps=MAP_WORKLOAD_STEPS), work, gpu, profile)
            out.append(workload_sample(tune(ctx, objective="mean", backends=False), k, model=model, tp=tp, source=name,
                                       leading=leading))
    return out
