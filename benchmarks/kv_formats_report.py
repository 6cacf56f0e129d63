"""The fp8-KV and 32-token-block timings (benchmarks/measure_kv_formats_h200.py) against the packaged H200 profile.

    python -m benchmarks.kv_formats_report [--data benchmarks/results/kv-formats-h200.json]
        [--out benchmarks/results/kv-formats-h200.md]

Every figure here is out of sample: the predictions come from the packaged profile with its fp8 families replaced by
the bf16 families they fall back to (``unfitted_profile``: the model no fp8 timing went into; SGLang's fp8 family was
fitted on these rows afterwards, benchmarks/leaveout_fp8.py, and is validated on other layouts by
benchmarks/validate_fp8.py). Each row is paired with the bf16, block-16 timing of
the same shape and variant from the same run, so a layout's own error (which the bf16 rows carry too) cancels in
the *ratio* columns: measured t(format) / t(bf16, 16) against predicted. The *error* columns compare the predicted
time with the measured one directly (with the residual map: what a user reads). A last table tries one hypothesis
for fp8 (the SM's load path carries an fp8 element at the bf16 element's cost, HBM moves the real bytes), which is
not in the model. tests/test_kv_formats.py recomputes this file from the data.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from decodecalc.timemodel.domain import profile_domain
from decodecalc.timemodel.fit import measurements_from_rows
from decodecalc.timemodel.profile import FAMILY_FALLBACKS
from decodecalc.timemodel.predict import launch_time_s
from decodecalc.timemodel.profile_sources import packaged_profile

ROOT = Path(__file__).resolve().parents[1]

DATA = ROOT / "benchmarks" / "results" / "kv-formats-h200.json"
OUT = ROOT / "benchmarks" / "results" / "kv-formats-h200.md"
#: the KV-streaming kernels (the hypothesis changes their bytes; the reduce / stage-2 kernels read fp32 partials)
KV_FAMILIES = ("_2d", "_3d", "stage1")


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return r["model"], r["batch"], r["seq_len"], r["variant"]


def _q(v: list[float], p: float) -> float:
    s = sorted(v)
    return s[min(len(s) - 1, int(p * len(s)))]


def _pct(x: float, sign: bool = False) -> str:
    return f"{100 * x:+.1f}%" if sign else f"{100 * x:.1f}%"


def element_rate_work(work: Any) -> Any:
    """The hypothesis: an fp8 KV element costs the SM's load path what a bf16 one does (bytes_per_iter doubled), HBM
    moves the fp8 bytes (hbm_bytes_per_iter kept)."""
    ks = []
    for k in work.kernels:
        if k.family.removesuffix("_fp8").endswith(KV_FAMILIES):
            b = k.bytes_per_iter
            k = dataclasses.replace(k, bytes_per_iter=2 * b, hbm_bytes_per_iter=b if k.hbm_bytes_per_iter is None
                                    else k.hbm_bytes_per_iter)
        ks.append(k)
    return dataclasses.replace(work, kernels=tuple(ks))


def unfitted_profile() -> Any:
    """The packaged H200 profile as it was before any fp8 timing: each ``*_fp8`` family predicted as the bf16 family it
    falls back to (decodecalc.timemodel.profile.FAMILY_FALLBACKS), with that family's map cells."""
    prof = packaged_profile("h200")
    for name in FAMILY_FALLBACKS:
        if name.endswith("_fp8"):
            prof = prof.borrowing(name)
    return prof


def paired_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ok row with its measured and predicted time (:func:`unfitted_profile`) and those of its bf16, block-16
    pair."""
    prof = unfitted_profile()
    rows = [r for r in data["cases"] if r.get("status") == "ok"]
    ms = measurements_from_rows(rows, num_sms=int(data.get("num_sms", 132)))
    out = []
    for r, m in zip(rows, ms):
        rec = {"engine": r["variant"].split("-")[0], "kv": r["kv_cache_dtype"], "block": int(r["block_size"]),
               "layout": r["model"], "key": _key(r), "meas": m.time_s, "pred": launch_time_s(m.work, prof)}
        if rec["kv"] == "fp8":
            rec["pred_h"] = launch_time_s(element_rate_work(m.work), prof)
        out.append(rec)
    base = {x["key"]: x for x in out if x["kv"] == "bfloat16" and x["block"] == 16}
    for x in out:
        b = base[x["key"]]
        x["meas_ratio"], x["pred_ratio"] = x["meas"] / b["meas"], x["pred"] / b["pred"]
        x["ratio_err"] = x["pred_ratio"] / x["meas_ratio"] - 1
        if "pred_h" in x:
            x["ratio_err_h"] = (x["pred_h"] / b["pred"]) / x["meas_ratio"] - 1
    return out


def outside_domain(data: dict[str, Any]) -> dict[str, Any]:
    """The profile's ``fit.outside_domain`` record of this run (decodecalc.timemodel.domain reads it): per format
    outside the domain and engine, the paired ratio error's rows, median, p10, p90 and the largest in size (fractions,
    4 decimals), and the GPU they were timed on. An engine whose kernel domain takes the format in (SGLang's fp8,
    with its own family) has no record: no prediction of it is outside for that reason."""
    prof = packaged_profile("h200")
    rows = [x for x in paired_rows(data) if x["kv"] == "bfloat16" or x["kv"] not in profile_domain(prof, x["engine"]).kv_cache_dtypes]
    out: dict[str, Any] = {"gpu": str(data.get("gpu", "h200")), "source": "benchmarks/measure_kv_formats_h200.py on an H200 (kv-formats-h200.json), "
                                     "benchmarks/kv_formats_report.py: predicted / measured t(format) / t(bf16, block "
                                     "16) - 1 of the same shapes", "kv_cache_dtype": {}, "block_size": {}}
    for kind, pick in (("kv_cache_dtype", lambda x: x["kv"] == "fp8" and x["block"] == 16),
                       ("block_size", lambda x: x["kv"] == "bfloat16" and x["block"] == 32)):
        for x in rows:
            if pick(x):
                name = "fp8" if kind == "kv_cache_dtype" else x["block"]
                out[kind].setdefault(name, {}).setdefault(x["engine"], []).append(x["ratio_err"])
        for per in out[kind].values():
            for eng, v in per.items():
                per[eng] = {"rows": len(v), "median": round(statistics.median(v), 4), "p10": round(_q(v, .1), 4),
                            "p90": round(_q(v, .9), 4), "worst": round(max(v, key=abs), 4)}
    return out


def report(data: dict[str, Any]) -> str:
    rows = paired_rows(data)
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for x in rows:
        groups[(x["engine"], x["kv"], x["block"])].append(x)
    lines = ["# fp8 KV cache and 32-token blocks on the H200, against the packaged profile's bf16 families", "",
             f"{len(rows)} timings ({data.get('versions', '')}, {data.get('device_name', '')}); every row out of "
             "sample. Ratio: t(format) / t(bf16, block 16) of the same shape and variant, measured and predicted "
             "(median, p10 to p90); ratio error: predicted ratio / measured ratio - 1; error: predicted time / measured "
             "time - 1, with the residual map.", "",
             "## By engine and format", "",
             "| engine | KV | block | rows | measured ratio | predicted ratio | ratio error median | ratio error p10 "
             "to p90 | error median | error p90 | within 5% |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (eng, kv, block), v in sorted(groups.items()):
        mr, pr, re_ = [x["meas_ratio"] for x in v], [x["pred_ratio"] for x in v], [x["ratio_err"] for x in v]
        err = [abs(x["pred"] / x["meas"] - 1) for x in v]
        lines.append(f"| {eng} | {kv} | {block} | {len(v)} | {statistics.median(mr):.2f} ({_q(mr, .1):.2f} to "
                     f"{_q(mr, .9):.2f}) | {statistics.median(pr):.2f} | {_pct(statistics.median(re_), True)} | "
                     f"{_pct(_q(re_, .1), True)} to {_pct(_q(re_, .9), True)} | {_pct(statistics.median(err))} | "
                     f"{_pct(_q(err, .9))} | {sum(e <= 0.05 for e in err)} / {len(v)} |")
    lines += ["", "## fp8, block 16, by head layout", "",
              "| engine | layout | rows | measured ratio | predicted ratio | ratio error median | error median | "
              "hypothesis: ratio error median | hypothesis: ratio error p90 (abs) |",
              "|---|---|---|---|---|---|---|---|---|"]
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for x in rows:
        if x["kv"] == "fp8" and x["block"] == 16:
            by[(x["engine"], x["layout"])].append(x)
    for (eng, lay), v in sorted(by.items()):
        err = [abs(x["pred"] / x["meas"] - 1) for x in v]
        h = [x["ratio_err_h"] for x in v]
        lines.append(f"| {eng} | {lay} | {len(v)} | {statistics.median(x['meas_ratio'] for x in v):.2f} | "
                     f"{statistics.median(x['pred_ratio'] for x in v):.2f} | "
                     f"{_pct(statistics.median(x['ratio_err'] for x in v), True)} | {_pct(statistics.median(err))} | "
                     f"{_pct(statistics.median(h), True)} | {_pct(_q([abs(e) for e in h], .9))} |")
    lines += ["", "## vLLM at block 32, by head layout and kernel", "",
              "| layout | 2D rows | 2D measured ratio, median (min to max) | 3D rows | 3D measured ratio, median (min to max) |",
              "|---|---|---|---|---|"]
    b32: dict[str, dict[bool, list[float]]] = defaultdict(lambda: defaultdict(list))
    for x in rows:
        if x["kv"] == "bfloat16" and x["block"] == 32:
            b32[x["layout"]][x["key"][3] == "vllm-2d"].append(x["meas_ratio"])
    for lay, v in sorted(b32.items()):
        cells = [f"{len(v[p])} | {statistics.median(v[p]):.2f} ({min(v[p]):.2f} to {max(v[p]):.2f})"
                 for p in (True, False)]
        lines.append(f"| {lay} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    write_report(args.out, report(json.loads(args.data.read_text())))
    return 0


def write_report(out: Path, text: str) -> None:
    """``text`` to ``out`` atomically (a temporary file renamed over it), and to stdout."""
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    print(text)


if __name__ == "__main__":
    raise SystemExit(main())
