"""The other backends' workload totals on an H200 (issue 18: "every backend's workload total within 5%, and the
fastest backend picked on every workload").

For each case (model, TP, workload of ``--steps`` steps, as ``benchmarks/validate_tune_h200.py`` replays them), every
step is run through FlashInfer's CUDA-core and tensor-core decode (a CUDA-graph plan per step, as vLLM and SGLang run
it) and vLLM's FA3 (``num_splits`` 32, vLLM's bound under full CUDA graphs), all steps in order in one CUDA graph
(the regime of validate_tune_h200.py's totals), each step on its own KV cache. The engines' Triton defaults on the
same steps come from a validate_tune_h200.py run of the same cases (``--top 0``).

Device half (JSON)::

    PYTHONPATH=.:<flashinfer> DECODECALC_FA3_LIB=<so> python3 -m benchmarks.validate_backends_workload_h200 --run \\
        --out $OUT/backends-workload.json

CPU half: ``--compare JSON --triton JSON [JSON ...]`` prints per case each backend's predicted and measured total
and whether the fastest is picked, and writes results/validate-backends-workload-h200-summary.json::

    python -m benchmarks.validate_backends_workload_h200 --compare benchmarks/results/validate-backends-workload-h200.json \
        --triton benchmarks/results/validate_tune_h200_in_graph.json benchmarks/results/validate_tune_h200_top0_chat.json \
        benchmarks/results/validate_tune_h200_top0_405b.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from decodecalc.launchers.flashinfer import engine_uses_tensor_cores
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.timemodel import packaged_profile
from decodecalc.workload import make_workload

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
#: models no fit saw (Llama-3.1-8B excepted: the fitted reference) x the chat preset, and two long-prompt mixes
CASES = [("gemma-2-9b", 1, "chat"), ("llama3-405b", 8, "chat"), ("llama3.1-8b", 1, "chat"), ("mistral-7b", 1, "chat"),
         ("llama3.1-70b", 8, "chat"), ("mixtral-8x7b", 2, "chat"), ("llama3-405b", 8, "mix:prompt=6000,output=400")]
#: (each step holds its own KV cache: a long-prompt mix fits only with one KV head per rank, 12 GB for 100 steps)
PATHS = ("flashinfer", "flashinfer-tc", "fa3")
WORKSPACE = 32 << 20


def case_steps(model: str, tp: int, wl: str, steps: int, profile: Any = None,
               kv_cache_dtype: str = "auto") -> tuple[Any, list[list[int]]]:
    """tune's exact context of the case (under ``profile``, default the shipped one; on a KV cache of
    ``kv_cache_dtype``) and its steps' KV lengths (validate_tune_h200.py's replay)."""
    from benchmarks.validate_tune_h200 import exact_context, step_lens, workload_trace

    gpu = resolve_gpu("h200")
    work = make_workload(resolve_model(model), tp=tp, kv_cache_dtype=kv_cache_dtype)
    ctx = exact_context(workload_trace(wl, steps), work, gpu, profile or packaged_profile("h200"))
    return ctx, [step_lens(ctx, i) for i in range(ctx.steps.num_steps)]


def run(args: argparse.Namespace) -> int:
    import torch

    from benchmarks.validate_tune_h200 import time_sequence
    from decodecalc.verify import backend_steps as S
    from decodecalc.verify import profiler as P

    t0 = time.time()
    out = Path(args.out)
    info: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                            "steps_per_workload": args.steps, "cases": []}
    cases = CASES if not args.cases else [(m, int(tp), wl) for m, tp, wl in (c.split(":", 2) for c in args.cases.split(";"))]
    for model, tp, wl in cases:
        if time.time() - t0 > args.budget_s:
            break
        _, lens = case_steps(model, tp, wl, args.steps, kv_cache_dtype=args.kv_cache_dtype)
        case: dict[str, Any] = {"model": model, "tp": tp, "workload": wl, "steps": len(lens), "seq_lens": lens,
                                "kv_cache_dtype": args.kv_cache_dtype, "measured_total_s": {}}
        for path in args.paths.split(","):
            if P.missing_backend(path):
                case["measured_total_s"][path] = None
                continue
            try:
                steps = []
                for ls in lens:
                    w = make_workload(resolve_model(model), tp=tp, seq_lens=tuple(ls), block_size=16,
                                      kv_cache_dtype=args.kv_cache_dtype)
                    if path == "fa3":
                        steps.append(S.fa3_step(w, num_splits=32, copies=1))
                    else:
                        steps.append(S.flashinfer_step(w, tensor_cores=path == "flashinfer-tc", cuda_graph=True,
                                                       copies=1, workspace_bytes=WORKSPACE))
                m = time_sequence(torch, [lambda s=s: s.run(0) for s in steps], replays=args.replays, on_gpu=True)
                case["measured_total_s"][path] = m["total_s"]
            except Exception as exc:  # noqa: BLE001 - one failing path must not end the run
                case.setdefault("errors", {})[path] = f"{type(exc).__name__}: {str(exc)[:300]}"
            del steps
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            print(f"{time.time() - t0:6.0f}s {model} TP{tp} {wl} {path}: {case['measured_total_s'].get(path)} "
                  f"{case.get('errors', {}).get(path, '')}", flush=True)
        info["cases"].append(case)
        out.write_text(json.dumps(info) + "\n")
    return 0


def predicted_totals(case: dict[str, Any], profile: Any = None) -> dict[str, float]:
    """Each path's total over the case's steps under ``profile`` (default the shipped one; tune's timer, every step
    exact)."""
    from decodecalc.reports.tune_backends import engine_planner

    ctx, lens = case_steps(case["model"], case["tp"], case["workload"], case["steps"], profile,
                           case.get("kv_cache_dtype", "auto"))
    assert [list(x) for x in lens] == case["seq_lens"], "the workload's steps changed since the run"
    from decodecalc.errors import UnsupportedError

    out = {}
    for path in PATHS:
        try:
            out[path] = float(ctx.timer.backend(path, "vllm", engine_planner(path, "vllm")).time.sum())
        except UnsupportedError:  # not compiled for the case (FlashInfer's CUDA cores at group 7 or 12): not run either
            continue
    return out


def kv_key(kv_cache_dtype: str | None) -> str:
    """A run's KV-cache dtype as the cases are matched on: "auto" for the model's own bf16 cache however a run wrote
    it (validate_tune_h200.py writes "bfloat16" since it records the dtype)."""
    return "auto" if kv_cache_dtype in (None, "auto", "bfloat16", "bf16") else kv_cache_dtype


def triton_defaults(paths: list[Path]) -> dict[tuple, dict[str, tuple[float, float]]]:
    """(model, workload, KV dtype) -> engine -> (predicted, measured) default total, from validate_tune_h200.py
    runs."""
    out: dict[tuple, dict[str, tuple[float, float]]] = {}
    for p in paths:
        for c in json.loads(p.read_text())["cases"]:
            for e in c["entries"]:
                if e["kind"] == "default":
                    out.setdefault((c["model"], c["workload"], kv_key(c.get("kv_cache_dtype"))), {})[e["engine"]] = (e["predicted_total_s"],
                                                                                   e["measured_total_s"])
    return out


def paths_of(path: Path | list[Path]) -> list[Path]:
    return list(path) if isinstance(path, (list, tuple)) else [path]


def compare(path: Path | list[Path], triton: list[Path], write: bool = False, profile: Any = None) -> dict[str, Any]:
    """Each case's backend totals (under ``profile``, default the shipped one) against the measured ones, and per
    engine whether the fastest of its options is picked."""
    data = {"cases": [c for p in paths_of(path) for c in json.loads(p.read_text())["cases"]]}
    tri = triton_defaults(triton)
    rows = []
    for case in data["cases"]:
        pred = predicted_totals(case, profile)
        meas = {k: v for k, v in case["measured_total_s"].items() if v}
        both = {k: (pred[k], meas[k]) for k in meas}
        kv = kv_key(case.get("kv_cache_dtype"))
        for engine, pm in tri.get((case["model"], case["workload"], kv), {}).items():
            both[f"{engine} (Triton default)"] = pm
        row = {"model": case["model"], "tp": case["tp"], "workload": case["workload"], "kv_cache_dtype": kv,
               "totals": {k: {"predicted_s": p, "measured_s": m, "error": p / m - 1} for k, (p, m) in both.items()},
               "picks": {}}
        # per engine, what tune compares: its Triton default, FlashInfer on the path the engine runs, FA3
        w = make_workload(resolve_model(case["model"]), tp=case["tp"], kv_cache_dtype=kv)
        for engine in ("vllm", "sglang"):
            fi_path = "flashinfer-tc" if engine_uses_tensor_cores(engine, w) else "flashinfer"
            opts = {k: both[k] for k in (f"{engine} (Triton default)", fi_path, "fa3") if k in both}
            if len(opts) < 3:
                continue
            fp, fm = min(opts, key=lambda k: opts[k][0]), min(opts, key=lambda k: opts[k][1])
            row["picks"][engine] = {"options": list(opts), "fastest_predicted": fp, "fastest_measured": fm,
                                    "excess": opts[fp][1] / opts[fm][1] - 1}
        rows.append(row)
        print(f"{case['model']} TP{case['tp']} {case['workload']}: "
              + ", ".join(f"{k} {v['error']:+.1%}" for k, v in row["totals"].items())
              + "; " + "; ".join(f"{e}: fastest predicted {p['fastest_predicted']}, measured {p['fastest_measured']} "
                                 f"({p['excess']:+.1%})" for e, p in row["picks"].items()))
    errs = [abs(v["error"]) for r in rows for k, v in r["totals"].items() if "Triton" not in k]
    picks = [p for r in rows for p in r["picks"].values()]
    summary = {"backend_totals": len(errs), "within_5pct": sum(e <= 0.05 for e in errs),
               "fastest_picked": sum(p["fastest_predicted"] == p["fastest_measured"] for p in picks),
               "picks": len(picks), "cases": len(rows), "rows": rows}
    print(f"backend totals within 5%: {summary['within_5pct']} of {summary['backend_totals']}; fastest backend picked "
          f"in {summary['fastest_picked']} of {summary['picks']} (workload, engine) pairs")
    if write:
        stem = Path(paths_of(path)[0]).stem  # validate-backends-workload-h200[-run2|-fp8] -> its -summary.json
        (RESULTS / f"{stem}-summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def table(summary: dict[str, Any]) -> str:
    """BENCHMARKS.md's table (tests/test_backends_workload.py recomputes it): per case, each total's error and,
    per engine, the fastest of what tune compares for it (Triton default, FlashInfer on the engine's path, FA3)."""
    names = list(dict.fromkeys(k for r in summary["rows"] for k in r["totals"]))
    lines = ["| model (TP), workload | " + " | ".join(names) + " | vLLM's fastest: predicted / measured (excess) "
             "| SGLang's |", "|---" * (3 + len(names)) + "|"]
    for r in summary["rows"]:
        cells = [f"{r['totals'][k]['error']:+.1%}" if k in r["totals"] else "-" for k in names]
        picks = [f"{p['fastest_predicted']} / {p['fastest_measured']} ({p['excess']:+.1%})" if (p := r["picks"].get(e))
                 else "-" for e in ("vllm", "sglang")]
        kv = "" if r.get("kv_cache_dtype", "auto") == "auto" else f", {r['kv_cache_dtype']} KV"
        lines.append(f"| {r['model']} ({r['tp']}), {r['workload']}{kv} | " + " | ".join(cells + picks) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="store_true")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "backends-workload.json"))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--paths", default=",".join(PATHS), help="which of " + ", ".join(PATHS))
    ap.add_argument("--cases", default="", help="MODEL:TP:WORKLOAD;... instead of CASES")
    ap.add_argument("--replays", type=int, default=3)
    ap.add_argument("--kv-cache-dtype", default="auto", help="auto (bf16) or fp8: the KV cache every step runs on")
    ap.add_argument("--budget-s", type=float, default=400.0)
    ap.add_argument("--compare", metavar="JSON")
    ap.add_argument("--triton", nargs="*", default=[], metavar="JSON",
                    help="validate_tune_h200.py runs of the same cases (their defaults)")
    args = ap.parse_args()
    if args.run:
        return run(args)
    if args.compare:
        print(table(compare(Path(args.compare), [Path(p) for p in args.triton], write=True)))
        return 0
    ap.error("give --run or --compare")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
