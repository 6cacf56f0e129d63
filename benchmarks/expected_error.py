"""The expected error of every predicted time: per kernel, the shipped H200 profile's measured error on launches no
fit saw, split by whether the fit measured the launch's head layout; written into the profile as
``fit.expected_error`` (decodecalc.timemodel.accuracy reads it; grid and compare print it as ``predicted_error``).

    python -m benchmarks.expected_error                 # print the table
    python -m benchmarks.expected_error --write          # also write the profile block, the JSON and the markdown

Nothing is timed or fitted here: every figure comes from committed measurements and fits.

* vLLM and SGLang's Triton kernels (bf16 KV):
  - *fitted layout*: fit_timemodel.py's random held-out quarter (shapes by hash; that fit's physics and map never saw
    them), ``timemodel-fit-h200.json`` (its record ``holdout_fit.holdout`` per kernel, with the map; the rows'
    ``holdout_pred_us`` are the physics alone);
  - *new layout*: leaveout_timemodel.py's layout folds, each head layout left out whole (physics and map refitted
    without it), their left-out rows pooled, with the map (``leaveout-timemodel-h200.json``).
* FlashInfer (both paths), FA3, FlashMLA, FA2 (bf16 KV), scored with the shipped profile:
  - the layouts fit_backends_h200.py fitted on (its DATA) are the *fitted layouts*; its held-out quarter (the shapes the
    shipped families were not fitted on) plus the validation captures' runs of those layouts give the *fitted layout*
    figure;
  - the validation captures' runs of other layouts give the *new layout* figure. Validation captures: runs no fit used
    (VALIDATION); the CUDA-core kernel's step rule (timemodel.backends.cuda_core_step_factor) was chosen with
    ``flashinfer-ctas-h200.jsonl.gz`` in view, so that file is named in the evidence.
* In a decode layer's graph (``--regime in-graph``): in_graph_h200.py's runs (six layouts, every system), each
  predicted as in_graph_compare's held-out column has it (the back-to-back prediction plus the system's in-graph cost
  fitted on the other half of the layouts), split by the kernel's fitted layouts as above.
* The backends' whole workloads (``workload_totals`` of flashinfer, flashinfer-tc, fa3 and their ``/fp8``):
  validate_backends_workload_h200.py's runs (BACKEND_WORKLOAD_FILES) under the current profile, by fitted or new
  layout of the kernel's record.
* FlashInfer and FA3 on an fp8 KV cache (``<kernel>/fp8``): fit_backends_fp8_h200.py's fp8 runs of its UNSEEN_LAYOUTS
  (*new layout*); no out-of-sample figure for its fitted layouts (every fp8 run of those was fitted), so none is given.

Each kernel's training figure (its fit on its own rows, in sample) is reported beside them in the table and the JSON,
never used as an expected error.

Outputs (``--write``): ``fit.expected_error`` of decodecalc/profiles/h200.yaml (and its parsed copy),
benchmarks/results/expected-error-h200.json (the figures by source file too) and the table between the
``<!-- expected-error -->`` markers of BENCHMARKS.md; tests/test_expected_error.py recomputes all three.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from decodecalc.timemodel import packaged_profile
from decodecalc.timemodel.accuracy import GOAL_MEDIAN, GOAL_P90, check_block, class_of_key, layout_key
from decodecalc.timemodel.fit import Measurement, error_summary, percentile
from decodecalc.timemodel.predict import launch_time_s

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
PROFILE = ROOT / "decodecalc" / "profiles" / "h200.yaml"
OUT_JSON = RESULTS / "expected-error-h200.json"
BENCHMARKS_MD = ROOT / "BENCHMARKS.md"
MARK = "<!-- expected-error -->"
TRITON_FIT = RESULTS / "timemodel-fit-h200.json"
TRITON_LEAVEOUT = RESULTS / "leaveout-timemodel-h200.json"
IN_GRAPH = RESULTS / "in-graph-h200.jsonl"
#: captures of the default backends that no fit used (their runs of fitted layouts join the held-out quarter)
VALIDATION = ("validate-backends-h200.jsonl", "capture-flashinfer-short-tiles-h200.jsonl",
              "backend-steps-alone-h200.jsonl.gz", "flashinfer-ctas-h200.jsonl.gz")
TRITON_KERNELS = ("vllm", "sglang")
#: tune validations on the H200 whose workloads no map sampled (the presets' own steps on Llama-3.1-8B / 70B are the
#: map's: validate_tune_h200_fresh*.json stay out), compared with the current profile by --repredict
WORKLOAD_FILES = ("validate_tune_h200_heldout_compare.json", "validate_tune_h200_range_compare.json",
                  "validate_tune_h200_layouts_compare.json", "validate_tune_h200_layouts2_compare.json",
                  "validate_tune_h200_layouts3_compare.json", "validate_tune_h200_layouts_range_compare.json")
TUNE_KINDS = ("default", "tuned", "candidate")
#: the default backends' whole workloads on the H200 (validate_backends_workload_h200.py; compared under the current
#: profile by its own ``compare``)
MIN_BACKEND_TOTALS = 3
BACKEND_WORKLOAD_FILES = ("validate-backends-workload-h200.json", "validate-backends-workload-h200-run2.json",
                          "validate-backends-workload-h200-run3.json", "validate-backends-workload-h200-fp8.json",
                          "validate-backends-workload-h200-fp8-run2.json")
BACKENDS = ("flashinfer", "flashinfer-tc", "fa3", "flashmla", "fa2")


def _figure(errors: Sequence[float], layouts: Iterable[str], evidence: str) -> dict[str, Any] | None:
    lays = sorted(set(layouts))
    if not errors:
        return None
    return {"rows": len(errors), "layouts": len(lays), "median_abs_err": round(percentile(errors, 0.5), 4),
            "p90_abs_err": round(percentile(errors, 0.9), 4), "evidence": evidence, "layout_list": lays}


def totals_figure(rows: Sequence[tuple[float, str, str]], evidence: str) -> dict[str, Any] | None:
    """A figure of whole workloads' totals from (|error|, layout, model) rows: the launch figure plus the share within
    5%, the worst and the models behind it."""
    errs = [e for e, _, _ in rows]
    fig = _figure(errs, [lay for _, lay, _ in rows], evidence)
    if fig:
        fig["within_5pct"] = round(sum(e <= 0.05 for e in errs) / len(errs), 4)
        fig["max_abs_err"] = round(max(errs), 4)
        fig["models"] = sorted({m for _, _, m in rows})
    return fig


def triton_records() -> dict[str, dict[str, Any]]:
    fit = json.loads(TRITON_FIT.read_text())
    lo = json.loads(TRITON_LEAVEOUT.read_text())
    out: dict[str, dict[str, Any]] = {}
    rows = fit["rows_detail"]
    table = lo["rows"]
    layout_folds = {name: f for name, f in lo["folds"].items() if f["kind"] == "layout"}
    for k in TRITON_KERNELS:
        mine = [r for r in rows if r["kernel"] == k]
        held = [r for r in mine if r["held_out"]]
        rec = fit["holdout_fit"]["holdout"][k]  # with the map built on the other rows (rows_detail has the physics)
        assert rec["rows"] == len(held)
        fitted = {"rows": rec["rows"], "layouts": len({" ".join(r["shape"].split()[:2]) for r in held}),
                  "median_abs_err": round(rec["median_abs_err"], 4), "p90_abs_err": round(rec["p90_abs_err"], 4),
                  "evidence": "random held-out quarter of benchmarks/fit_timemodel.py (shapes by hash; physics and "
                              "map fitted without them): timemodel-fit-h200.json, holdout_fit.holdout",
                  "layout_list": sorted({" ".join(r["shape"].split()[:2]) for r in held})}
        errs: list[float] = []
        lays: list[str] = []
        for f in layout_folds.values():
            for i in f["left_out"]:
                if table["kernel"][i] == k:
                    errs.append(abs(f["map_us"][i] / table["measured_us"][i] - 1))
                    lays.append(table["layout"][i])
        new = _figure(errs, lays, f"benchmarks/leaveout_timemodel.py, {len(layout_folds)} head layouts each left out "
                                  "whole (physics and map refitted without it): leaveout-timemodel-h200.json")
        train = fit["holdout_fit"]["train"][k]  # the same fit on its own rows, with its map: in sample
        out[k] = {"fitted_layouts": sorted({" ".join(r["shape"].split()[:2]) for r in mine}),
                  "fitted_layout": fitted, "new_layout": new, "training": _in_sample(train)}
    return out


def _in_sample(rec: dict[str, Any]) -> dict[str, Any]:
    """A fit's figure on its own training rows (reported beside the left-out ones, never used as an expected error)."""
    return {"rows": rec["rows"], "median_abs_err": round(rec["median_abs_err"], 4),
            "p90_abs_err": round(rec["p90_abs_err"], 4)}


def _layout(m: Measurement) -> str:
    return layout_key(m.shape.num_heads, m.shape.num_kv_heads, m.shape.head_size)


def _err(m: Measurement, prof: Any) -> float:
    return abs(launch_time_s(m.work, prof) / m.time_s - 1)


def backend_records(prof: Any) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The bf16 backends' records and, per kernel and source file, the same figures (the JSON's detail)."""
    from benchmarks import fit_backends_h200 as fb

    train_data = [m for m in fb.measurements() if m.shape.kv_bytes_per_element != 1]
    val = {name: [m for m in fb.measurements_from([RESULTS / name]) if m.shape.kv_bytes_per_element != 1]
           for name in VALIDATION}
    out: dict[str, dict[str, Any]] = {}
    detail: dict[str, Any] = {}
    for k in BACKENDS:
        fitted_lays = sorted({_layout(m) for m in train_data if m.kernel == k})
        held = [m for m in train_data if m.kernel == k and fb.held_out(m.shape.key)]
        trained = [m for m in train_data if m.kernel == k and not fb.held_out(m.shape.key)]
        seen = [(src, m) for src, ms in val.items() for m in ms if m.kernel == k and _layout(m) in fitted_lays]
        new = [(src, m) for src, ms in val.items() for m in ms if m.kernel == k and _layout(m) not in fitted_lays]
        srcs_seen = sorted({s for s, _ in seen})
        srcs_new = sorted({s for s, _ in new})
        fitted = _figure([_err(m, prof) for m in held] + [_err(m, prof) for _, m in seen],
                         [_layout(m) for m in held] + [_layout(m) for _, m in seen],
                         "benchmarks/fit_backends_h200.py's held-out quarter (shapes by hash)"
                         + (f" and validation captures {', '.join(srcs_seen)}" if srcs_seen else ""))
        newfig = _figure([_err(m, prof) for _, m in new], [_layout(m) for _, m in new],
                         f"validation captures of head layouts no fit saw: {', '.join(srcs_new)}"
                         + ("; the CUDA-core step rule was chosen with flashinfer-ctas-h200.jsonl.gz in view"
                            if "flashinfer-ctas-h200.jsonl.gz" in srcs_new else ""))
        out[k] = {"fitted_layouts": fitted_lays, "fitted_layout": fitted, "new_layout": newfig,
                  "training": _in_sample(error_summary(prof, trained))}
        detail[k] = {"held_out_quarter": _figure([_err(m, prof) for m in held], map(_layout, held), "")}
        for src in VALIDATION:
            for side, pairs in (("fitted_layout", seen), ("new_layout", new)):
                fig = _figure([_err(m, prof) for s, m in pairs if s == src], [_layout(m) for s, m in pairs if s == src],
                              "")
                if fig:
                    detail[k][f"{src} ({side})"] = fig
    return out, detail


def fp8_records(prof: Any) -> dict[str, dict[str, Any]]:
    from benchmarks import fit_backends_fp8_h200 as f8
    from decodecalc.timemodel.backend_fit import layout_of

    ms = [m for m in f8.measurements_from(f8.DATA) if m.shape.kv_bytes_per_element == 1]
    short = [m for m in f8.measurements_from(f8.SHORT_DATA) if m.shape.kv_bytes_per_element == 1]
    out: dict[str, dict[str, Any]] = {}
    for k in f8.FP8_FAMILIES:
        fitted_lays = sorted({_layout(m) for m in ms + short if m.kernel == k and layout_of(m) in f8.FIT_LAYOUTS})
        unseen = [m for m in ms if m.kernel == k and layout_of(m) in f8.UNSEEN_LAYOUTS]
        trained = [m for m in ms + short if m.kernel == k and layout_of(m) in f8.FIT_LAYOUTS]
        out[f"{k}/fp8"] = {"fitted_layouts": fitted_lays, "new_layout": _figure(
            [_err(m, prof) for m in unseen], map(_layout, unseen),
            "benchmarks/fit_backends_fp8_h200.py's fp8 runs of its UNSEEN_LAYOUTS (whole head layouts left out): "
            "fp8-backends-flashinfer-h200.jsonl.gz, fp8-backends-fa3-h200.jsonl.gz"),
            "training": _in_sample(error_summary(prof, trained))}
    return out


def model_layout(model: str, tp: int) -> str:
    from decodecalc.specs.models import resolve_model
    from decodecalc.workload import make_workload

    w = make_workload(resolve_model(model), tp=tp, batch=1, seq_len=1)
    return layout_key(w.num_heads, w.num_kv_heads, w.head_size)


def workload_records(fitted_layouts: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """Per engine, tune's predicted totals against the measured ones of the validation workloads
    (validate_tune_h200.py --repredict: the committed *_compare.json, the current profile's predictions), split by
    whether the model's per-rank layout is among the engine's fitted layouts; tune's own settings only (default,
    candidates, pick), each (workload, setting) once (the first file's where two runs measured it)."""
    out: dict[str, dict[str, Any]] = {}
    for k in TRITON_KERNELS:
        sides: dict[str, list[tuple[float, str, str]]] = {"fitted_layout": [], "new_layout": []}
        srcs: dict[str, set[str]] = {"fitted_layout": set(), "new_layout": set()}
        seen = set()  # a (workload, setting) measured by two runs (heldout's and range's mix) counts once
        for name in WORKLOAD_FILES:
            doc = json.loads((RESULTS / name).read_text())
            for r in doc["rows"]:
                key = (r["model"], r["tp"], r["workload"], r["engine"], r["setting"])
                if r["engine"] != k or r["kind"] not in TUNE_KINDS or key in seen:
                    continue
                seen.add(key)
                lay = model_layout(r["model"], int(r["tp"]))
                side = "fitted_layout" if lay in fitted_layouts[k] else "new_layout"
                sides[side].append((abs(r["error"]), lay, f"{r['model']} TP{r['tp']}"))
                srcs[side].add(name)
        rec: dict[str, Any] = {}
        for side, rows in sides.items():
            fig = totals_figure(rows, f"validate_tune_h200.py --repredict of {', '.join(sorted(srcs[side]))}: "
                                       "tune's totals of every measured setting against their H200 replays")
            if fig:
                rec[side] = fig
        out[k] = rec
    return out


def in_graph_records(prof: Any, fitted_layouts: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """Per system of in_graph_h200.py's runs: the in-graph prediction (back to back plus the regime's cost fitted on the
    other half of the layouts, in_graph_compare's held-out column) against the in-graph time, by fitted or new layout."""
    from benchmarks import in_graph_compare as ig

    rs = ig.rows(IN_GRAPH, prof)
    ig.add_in_graph_predictions(rs)
    out: dict[str, dict[str, Any]] = {}
    for k in sorted({r["backend"] for r in rs}):
        rec: dict[str, Any] = {}
        for side in ("fitted_layout", "new_layout"):
            sel = [r for r in rs if r["backend"] == k
                   and (model_layout(r["model"], int(r["tp"])) in fitted_layouts.get(k, ())) == (side == "fitted_layout")]
            fig = _figure([abs(r["in_graph_heldout_us"] / r["in_graph_us"] - 1) for r in sel],
                          [model_layout(r["model"], int(r["tp"])) for r in sel],
                          "benchmarks/in_graph_h200.py's runs between a decode layer's kernels (in-graph-h200.jsonl): "
                          "back-to-back prediction plus the in-graph cost fitted on the other half of the layouts")
            if fig:
                rec[side] = fig
        out[k] = rec
    return out


def backend_workload_records(kernels: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per backend kernel (and ``/fp8``): validate_backends_workload_h200.py's whole workloads, each path's total under
    the current profile (its ``compare``, tune's timer) against the H200 replay, by fitted or new layout of the
    kernel's record."""
    import contextlib
    import io

    from benchmarks import validate_backends_workload_h200 as vbw

    from decodecalc.timemodel.accuracy import kernel_key

    sides: dict[str, dict[str, list[tuple[float, str, str]]]] = {}
    for name in BACKEND_WORKLOAD_FILES:
        with contextlib.redirect_stdout(io.StringIO()):
            got = vbw.compare(RESULTS / name, [])
        for row in got["rows"]:
            kvb = 1 if str(row["kv_cache_dtype"]).startswith("fp8") else 2
            lay = model_layout(row["model"], int(row["tp"]))
            for path, t in row["totals"].items():
                if "Triton" in path:
                    continue
                key = kernel_key(path, kvb)
                side = "fitted_layout" if lay in kernels.get(key, {}).get("fitted_layouts", ()) else "new_layout"
                sides.setdefault(key, {}).setdefault(side, []).append(
                    (abs(t["error"]), lay, f"{row['model']} TP{row['tp']}"))
    out: dict[str, dict[str, Any]] = {}
    for key, by_side in sides.items():
        rec: dict[str, Any] = {}
        for side in ("fitted_layout", "new_layout"):
            rows = by_side.get(side, [])
            if len(rows) < MIN_BACKEND_TOTALS:  # a median and p90 of one or two totals say nothing
                continue
            rec[side] = totals_figure(
                rows, f"benchmarks/validate_backends_workload_h200.py ({', '.join(BACKEND_WORKLOAD_FILES)}): each "
                      "path's total over 100 chat or long-prompt steps replayed in one CUDA graph on the H200 (FA3 as "
                      "vLLM runs it, num_splits 32)")
        out[key] = rec
    return out


def compute() -> dict[str, Any]:
    prof = packaged_profile("h200")
    assert prof is not None
    backends, detail = backend_records(prof)
    kernels = {**triton_records(), **backends, **fp8_records(prof)}
    totals = workload_records({k: kernels[k]["fitted_layouts"] for k in TRITON_KERNELS})
    for k, rec in totals.items():
        kernels[k]["workload_totals"] = rec
    for k, rec in backend_workload_records(kernels).items():
        if k in kernels:
            kernels[k]["workload_totals"] = rec
    for k, rec in in_graph_records(prof, {k: r["fitted_layouts"] for k, r in kernels.items()}).items():
        if k in kernels and rec:
            kernels[k]["in_graph"] = rec
    return {"kernels": kernels, "detail": detail}


def profile_figure(side: str, fig: dict[str, Any]) -> dict[str, Any]:
    """A figure as the profile holds it: without its layout and model lists; a new-layout figure names the layout
    classes it covers (timemodel.accuracy: a layout of another class gets no expected error)."""
    out = {key: v for key, v in fig.items() if key not in ("layout_list", "models")}
    if side == "new_layout":
        out["layout_classes"] = sorted({class_of_key(x) for x in fig["layout_list"]})
    return out


def profile_block(doc: dict[str, Any]) -> dict[str, Any]:
    """The profile's ``fit.expected_error`` (the figures without their layout lists)."""
    kernels = {}
    for k, rec in doc["kernels"].items():
        kernels[k] = {"fitted_layouts": rec["fitted_layouts"]}
        for fig in ("fitted_layout", "new_layout"):
            if rec.get(fig):
                kernels[k][fig] = profile_figure(fig, rec[fig])
        for sub in ("workload_totals", "in_graph"):
            if rec.get(sub):
                kernels[k][sub] = {fig: profile_figure(fig, f) for fig, f in rec[sub].items()}
    block = {"source": "benchmarks/expected_error.py (committed H200 measurements; benchmarks/results/"
                       "expected-error-h200.json)",
             "goals": {"median": GOAL_MEDIAN, "p90": GOAL_P90}, "kernels": kernels}
    check_block(block)
    return block


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def markdown(doc: dict[str, Any]) -> str:
    lines = ["| kernel | layouts the fit measured | training (in sample): median / p90 | fitted layout: rows "
             "(layouts) | median | p90 | new layout: rows (layouts) | median | p90 | new layouts behind the figure |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for k, rec in doc["kernels"].items():
        tr = rec["training"]
        cells = [k, str(len(rec["fitted_layouts"])), f"{pct(tr['median_abs_err'])} / {pct(tr['p90_abs_err'])}"]
        for fig in ("fitted_layout", "new_layout"):
            f = rec.get(fig)
            cells += ([f"{f['rows']} ({f['layouts']})", pct(f["median_abs_err"]), pct(f["p90_abs_err"])] if f
                      else ["none", "-", "-"])
        nf = rec.get("new_layout")
        cells.append(", ".join(nf["layout_list"]) if nf else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Whole workloads' totals (tune's: for vLLM and SGLang every measured setting of its search; for the "
              "backends each path's total on the backend workloads):", "",
              "| engine | side | totals (layouts) | median | p90 | within 5% | worst | models |", "|---|---|---|---|---|---|---|---|"]
    for k, rec in doc["kernels"].items():
        for side, f in (rec.get("workload_totals") or {}).items():
            lines.append(f"| {k} | {side.replace('_', ' ')} | {f['rows']} ({f['layouts']}) | {pct(f['median_abs_err'])} | "
                         f"{pct(f['p90_abs_err'])} | {pct(f['within_5pct'])} | {pct(f['max_abs_err'])} | "
                         f"{', '.join(f['models'])} |")
    lines += ["", "In a decode layer's graph (`--regime in-graph`; each system's in-graph cost fitted on the other half "
              "of the layouts):", "", "| kernel | side | launches (layouts) | median | p90 | layouts |", "|---|---|---|---|---|---|"]
    for k, rec in doc["kernels"].items():
        for side, f in (rec.get("in_graph") or {}).items():
            lines.append(f"| {k} | {side.replace('_', ' ')} | {f['rows']} ({f['layouts']}) | {pct(f['median_abs_err'])} | "
                         f"{pct(f['p90_abs_err'])} | {', '.join(f['layout_list'])} |")
    return "\n".join(lines)


def replace_between(text: str, body: str) -> str:
    start, end = MARK, MARK.replace("<!-- ", "<!-- /")
    if start not in text or end not in text:
        raise SystemExit(f"BENCHMARKS.md lacks the {start} ... {end} markers")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def write_profile(block: dict[str, Any]) -> None:
    import dataclasses

    from tools.update_profile_cache import as_written, write

    on_disk = as_written(PROFILE)  # the families the loader borrows for an older profile stay borrowed, not written
    write(PROFILE, dataclasses.replace(on_disk, fit={**on_disk.fit, "expected_error": block}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the profile block, the JSON and BENCHMARKS.md's table")
    args = ap.parse_args()
    doc = compute()
    table = markdown(doc)
    print(table)
    if args.write:
        block = profile_block(doc)
        tmp = OUT_JSON.with_suffix(".tmp")
        tmp.write_text(json.dumps({"schema": 1, "profile_block": block, **doc}, indent=1) + "\n")
        tmp.replace(OUT_JSON)
        BENCHMARKS_MD.write_text(replace_between(BENCHMARKS_MD.read_text(), table))
        write_profile(block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
