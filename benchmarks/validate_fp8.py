"""The packaged profile's fp8 KV predictions on six head layouts no fit saw (benchmarks/measure_kv_formats_h200.py
--unseen: 780 H200 timings, bf16 and fp8 at block 16, both engines, SGLang's adaptive launch included), and on whole
workloads of five models (benchmarks/validate_tune_h200.py --kv-cache-dtype fp8: 200 chat steps each, every setting
tune compares and every heuristic, measured as one CUDA graph per setting; re-predicted here with today's model).

    python -m benchmarks.validate_fp8 [--data benchmarks/results/kv-formats-h200-unseen.json]
        [--workloads benchmarks/results/validate-tune-fp8-h200.json] [--out benchmarks/results/validate-fp8-h200.md]

Each timing is predicted twice: by the packaged profile (SGLang's grouped stage 1 with an fp8 KV cache runs on its own
family, ``sglang_stage1_fp8``, fitted by benchmarks/leaveout_fp8.py on twelve other layouts; it has no map cells, so
its figure is the physics alone) and by the same profile without that family (``unfitted``: the bf16 family with fp8
bytes and the bf16 map, what every release before it predicted). The bf16 rows of the same shapes show how the bf16
model itself does on these layouts, with and without its residual map. The profile's fp8 domain for SGLang
(``fit.kernel_domains.sglang``) comes from here: head size 256 missed and stays outside. tests/test_kv_formats.py
recomputes this file from the data.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.kv_formats_report import unfitted_profile, write_report

from decodecalc.timemodel.domain import profile_domain
from decodecalc.timemodel.fit import measurements_from_rows
from decodecalc.timemodel.predict import launch_time_s, model_launch_time_s
from decodecalc.timemodel.profile_sources import packaged_profile

ROOT = Path(__file__).resolve().parents[1]

DATA = ROOT / "benchmarks" / "results" / "kv-formats-h200-unseen.json"
WORKLOADS = ROOT / "benchmarks" / "results" / "validate-tune-fp8-h200.json"
OUT = ROOT / "benchmarks" / "results" / "validate-fp8-h200.md"


def scored_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ok row: engine, KV format, launch (static / adaptive), layout, and the signed errors (predicted /
    measured - 1) of the packaged profile, its physics alone, and the unfitted profile."""
    prof, bare = packaged_profile("h200"), unfitted_profile()
    rows = [r for r in data["cases"] if r.get("status") == "ok"]
    out = []
    for r, m in zip(rows, measurements_from_rows(rows, num_sms=int(data.get("num_sms", 132)))):
        out.append({"engine": r["variant"].split("-")[0], "kv": r["kv_cache_dtype"], "layout": r["model"],
                    "g": int(r["num_q_heads"]) // int(r["num_kv_heads"]), "d": int(r["head_dim"]),
                    "launch": "adaptive" if r["variant"] == "sglang-adaptive" else "static",
                    "packaged": launch_time_s(m.work, prof) / m.time_s - 1,
                    "physics": model_launch_time_s(m.work, prof) / m.time_s - 1,
                    "unfitted": launch_time_s(m.work, bare) / m.time_s - 1})
    return out


def training_errors() -> list[float]:
    """The packaged profile's errors on the SGLang fp8 rows its fp8 family was fitted on (leaveout_fp8.DATA)."""
    from benchmarks.leaveout_fp8 import DATA as FIT_DATA

    rows = [r for p in FIT_DATA if p.exists() for r in json.loads(p.read_text())["cases"] if r.get("status") == "ok"
            and r["kv_cache_dtype"] == "fp8" and r["block_size"] == 16 and r["variant"].startswith("sglang")]
    prof = packaged_profile("h200")
    return [launch_time_s(m.work, prof) / m.time_s - 1 for m in measurements_from_rows(rows)]


def stats(errs: list[float]) -> dict[str, float]:
    """rows, median and p90 of |error|, the share within 5%, the largest error in size (signed)."""
    a = sorted(abs(e) for e in errs)
    return {"rows": len(a), "median": statistics.median(a), "p90": a[min(len(a) - 1, int(0.9 * len(a)))],
            "within_5": sum(e <= 0.05 for e in a), "worst": max(errs, key=abs)}


def _cell(s: dict[str, float]) -> str:
    return (f"{100 * s['median']:.1f}% | {100 * s['p90']:.1f}% | {s['within_5']} / {s['rows']} | "
            f"{100 * s['worst']:+.0f}%")


def workload_rows(path: Path) -> dict[str, list[dict[str, Any]]]:
    """validate_tune_h200.repredict of the fp8 workloads, with the packaged profile and with the unfitted one
    (:func:`kv_formats_report.unfitted_profile`)."""
    from benchmarks.validate_tune_h200 import repredict

    now, before = repredict(path, profile=packaged_profile("h200")), repredict(path, profile=unfitted_profile())
    return {"packaged": now["rows"], "unfitted": before["rows"], "picks": now["picks"], "picks_unfitted": before["picks"]}


def workload_report(path: Path) -> list[str]:
    got = workload_rows(path)
    data = json.loads(path.read_text())
    lines = ["", "## Whole workloads (fp8 KV, chat, 200 steps)", "",
             ", ".join(f"{c['model']} (TP{c['tp']})" for c in data["cases"])
             + "; every (workload, setting) total: within 5% of the measured total, median and worst error.", "",
             "| model (TP) | engine | totals | packaged: within 5% | median | worst | unfitted: within 5% | median | worst |",
             "|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["model"], r["tp"], r["engine"]) for r in got["packaged"]}, key=lambda k: (k[2], k[0]))
    for model, tp, engine in keys + [("all", 0, "sglang"), ("all", 0, "vllm")]:
        cells = []
        for which in ("packaged", "unfitted"):
            errs = [r["error"] for r in got[which] if r["engine"] == engine and (model == "all" or
                                                                                 (r["model"], r["tp"]) == (model, tp))]
            a = [abs(e) for e in errs]
            cells.append(f"{sum(e <= 0.05 for e in a)} / {len(a)} | {100 * statistics.median(a):.1f}% | "
                         f"{100 * max(errs, key=abs):+.1f}%")
        lines.append(f"| {model if model == 'all' else f'{model} ({tp})'} | {engine} | {len(a)} | {cells[0]} | {cells[1]} |")
    lines += ["", "tune's pick among the measured settings, measured against the best of them (packaged / unfitted):", "",
              "| model (TP) | engine | pick | best measured | pick vs best | unfitted pick | unfitted pick vs best |",
              "|---|---|---|---|---|---|---|"]
    before = {(p["model"], p["tp"], p["engine"]): p for p in got["picks_unfitted"]}
    for p in sorted(got["picks"], key=lambda p: (p["engine"], p["model"])):
        b = before[(p["model"], p["tp"], p["engine"])]
        lines.append(f"| {p['model']} ({p['tp']}) | {p['engine']} | {p['pick']} | {p['best_measured']} | "
                     f"{100 * p['pick_vs_best_measured']:+.1f}% | {b['pick']} | {100 * b['pick_vs_best_measured']:+.1f}% |")
    return lines


def report(data: dict[str, Any], workloads: Path | None = WORKLOADS) -> str:
    rows = scored_rows(data)
    layouts = sorted({x["layout"] for x in rows})
    lines = ["# fp8 KV on six head layouts no fit saw (H200)", "",
             f"{len(rows)} timings ({data.get('versions', '')}, {data.get('device_name', '')}) of {', '.join(layouts)}; "
             "error: predicted / measured time - 1 (median and p90 of its size, within 5%, worst). Packaged: the "
             "shipped profile (SGLang fp8 on its own family, physics alone); physics: the same without the residual "
             "map; unfitted: the profile without the fp8 family (the bf16 family and map with fp8 bytes).", "",
             "## By engine, format and launch", "",
             "| engine | KV | launch | packaged: median | p90 | within 5% | worst | physics: median | p90 | within 5% | "
             "worst | unfitted: median | p90 | within 5% | worst |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for x in rows:
        groups[(x["engine"], x["kv"], x["launch"])].append(x)
    for (eng, kv, launch), v in sorted(groups.items()):
        lines.append(f"| {eng} | {kv} | {launch} | " + " | ".join(_cell(stats([x[k] for x in v]))
                                                              for k in ("packaged", "physics", "unfitted")) + " |")
    prof = packaged_profile("h200")
    scopes = {name: (g, hs) for name, g, hs in profile_domain(prof, "sglang").kv_cache_dtype_scopes}
    groups_in, heads_in = scopes.get("fp8", ((), ()))
    inside = [x for x in rows if x["engine"] == "sglang" and x["kv"] == "fp8" and x["g"] in groups_in
              and x["d"] in heads_in]
    fit_rows = training_errors()
    lines += ["", f"Beside it, the training figure: the shipped family on the {len(fit_rows)} SGLang fp8 timings it was "
              f"fitted on (twelve layouts, benchmarks/leaveout_fp8.py's data): {_cell(stats(fit_rows))}."]
    if inside:
        lines += ["", f"Inside SGLang's fp8 domain (fit.kernel_domains.sglang: group sizes {', '.join(map(str, groups_in))}"
                  f" at head sizes {', '.join(map(str, heads_in))}; {len({x['layout'] for x in inside})} of these "
                  f"layouts): packaged {_cell(stats([x['packaged'] for x in inside]))}; unfitted "
                  f"{_cell(stats([x['unfitted'] for x in inside]))} (median | p90 | within 5% | worst)."]
    lines += ["", "## SGLang fp8 by head layout (static and adaptive launches)", "",
              "| layout | packaged: median | p90 | within 5% | worst | unfitted: median | p90 | within 5% | worst | "
              "bf16, same shapes (packaged): median | p90 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for lay in layouts:
        v = [x for x in rows if x["engine"] == "sglang" and x["layout"] == lay]
        f8, b16 = [x for x in v if x["kv"] == "fp8"], stats([x["packaged"] for x in v if x["kv"] == "bfloat16"])
        lines.append(f"| {lay} | {_cell(stats([x['packaged'] for x in f8]))} | {_cell(stats([x['unfitted'] for x in f8]))}"
                     f" | {100 * b16['median']:.1f}% | {100 * b16['p90']:.1f}% |")
    if workloads is not None and workloads.exists():
        lines += workload_report(workloads)
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--workloads", type=Path, default=WORKLOADS)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    write_report(args.out, report(json.loads(args.data.read_text()), args.workloads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
