"""Checks of the committed records that run no decodecalc code, and the leave-out tables rendered from their rows.

Each check reads benchmarks/results/ and docs/lab/ only: a record is complete, its parts agree with each other, and a report written
from it is what its rows give. They were test functions that recomputed committed arithmetic; ``benchmarks.tables``
runs them with the tables, so one test (tests/test_benchmarks_tables.py) checks every document and record at once.
A check raises ``RecordError`` saying what differs.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
LAB = ROOT / "docs" / "lab"


class RecordError(Exception):
    """A committed record, or a report of it, is not what its own data give."""


def need(ok: bool, what: str) -> None:
    if not ok:
        raise RecordError(what)


def _json(name: str) -> Any:
    path = RESULTS / name
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)


# ---- the leave-out folds of the Triton time model (benchmarks/leaveout_timemodel.py) -------------------------------
# Statistics of its own, not the script's, so that the script's report is checked against an independent computation.

LEAVEOUT_JSON = "leaveout-timemodel-h200.json"
LEAVEOUT_MD = "leaveout-timemodel-h200.md"
#: the row table's column holding each fold kind's group key
GROUP_COLUMN = {"layout": "layout", "preset": "preset", "model": "workload_model"}
MAIN_HEADER = ("| left out | rows | phys median | phys p90 | phys worst | phys within 5% | map median | map p90 | "
               "map worst | map within 5% | train rows | train phys median | train phys p90 | train phys within 5% | "
               "train map median | train map p90 | train map within 5% | map moved |")
SAME_HEADER = ("| left out | rows | out of sample: phys median | phys p90 | map median | map p90 | in sample, fold | "
               "phys median | phys p90 | map median | map p90 |")


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _stats(meas: list[float], pred: list[float]) -> dict[str, float]:
    e = [abs(p / m - 1.0) for m, p in zip(meas, pred)]
    return {"rows": len(e), "median": _percentile(e, 0.5), "p90": _percentile(e, 0.9), "worst": max(e),
            "within": sum(x <= 0.05 for x in e) / len(e)}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _label(fold: dict[str, Any]) -> str:
    return str(fold["value"]) if fold["kind"] == "layout" else f"{fold['kind']} {fold['value']}"


def _kernel(k: str) -> str:
    return "reference" if k.startswith("reference") else k


def _sides(res: dict[str, Any], fold: dict[str, Any]) -> tuple[list[int], list[int]]:
    left = set(fold["left_out"])
    return sorted(left), [i for i in range(len(res["rows"]["measured_us"])) if i not in left]


def _fold_cells(res: dict[str, Any], fold: dict[str, Any]) -> list[str]:
    meas = res["rows"]["measured_us"]
    left, train = _sides(res, fold)
    st = {(side, model): _stats([meas[i] for i in idx], [fold[f"{model}_us"][i] for i in idx])
          for side, idx in (("left", left), ("train", train)) for model in ("physics", "map")}
    cells = [_label(fold), str(len(left))]
    for model in ("physics", "map"):
        cells += [_pct(st["left", model][q]) for q in ("median", "p90", "worst", "within")]
    cells.append(str(len(train)))
    for model in ("physics", "map"):
        cells += [_pct(st["train", model][q]) for q in ("median", "p90", "within")]
    moved = sum(abs(fold["map_us"][i] / fold["physics_us"][i] - 1.0) > 0.005 for i in left) / len(left)
    return [*cells, _pct(moved)]


def _kernel_cells(res: dict[str, Any], fold: dict[str, Any]) -> dict[str, list[str]]:
    meas, kernels = res["rows"]["measured_us"], res["rows"]["kernel"]
    left, train = _sides(res, fold)
    out = {}
    for k in ("vllm", "sglang", "reference"):
        lk = [i for i in left if _kernel(kernels[i]) == k]
        tk = [i for i in train if _kernel(kernels[i]) == k]
        if not lk:
            continue
        cells = [_label(fold), k, str(len(lk))]
        for model in ("physics", "map"):
            s = _stats([meas[i] for i in lk], [fold[f"{model}_us"][i] for i in lk])
            cells += [_pct(s[q]) for q in ("median", "p90", "worst", "within")]
        t = _stats([meas[i] for i in tk], [fold["map_us"][i] for i in tk])
        out[k] = [*cells, _pct(t["median"]), _pct(t["p90"])]
    return out


def _in_sample_fold(res: dict[str, Any], fold: dict[str, Any]) -> dict[str, Any] | None:
    # the first other fold (in run order) that trained on every one of this fold's left-out rows
    left = set(fold["left_out"])
    return next((f for f in res["folds"].values() if f is not fold and not left & set(f["left_out"])), None)


def _same_rows_cells(res: dict[str, Any], fold: dict[str, Any]) -> list[str]:
    meas = res["rows"]["measured_us"]
    left = fold["left_out"]

    def four(f: dict[str, Any]) -> list[str]:
        return [_pct(_stats([meas[i] for i in left], [f[f"{model}_us"][i] for i in left])[q])
                for model in ("physics", "map") for q in ("median", "p90")]

    ref = _in_sample_fold(res, fold)
    return [_label(fold), str(len(left)), *four(fold), *([_label(ref), *four(ref)] if ref else ["n/a"] * 5)]


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _ordered_folds(res: dict[str, Any]) -> list[dict[str, Any]]:
    folds = list(res["folds"].values())
    return [f for f in folds if f["kind"] == "layout"] + [f for f in folds if f["kind"] != "layout"]


def leaveout_table(kinds: tuple[str, ...]) -> str:
    """The fold table of the left-out groups of ``kinds`` (layout; preset and model), recomputed from the rows."""
    res = _json(LEAVEOUT_JSON)
    rows = [_line(_fold_cells(res, f)) for f in _ordered_folds(res) if f["kind"] in kinds]
    return "\n".join([MAIN_HEADER, "|---" * 18 + "|", *rows])


def leaveout_same_rows_table() -> str:
    """Each fold's left-out rows scored out of sample and by a fold that trained on them, from the rows."""
    res = _json(LEAVEOUT_JSON)
    rows = [_line(_same_rows_cells(res, f)) for f in _ordered_folds(res)]
    return "\n".join([SAME_HEADER, "|---" * 11 + "|", *rows])


def leaveout_report_is_its_rows() -> None:
    """results/leaveout-timemodel-h200.md (the script's full report): every row of its fold, by-kernel and same-rows
    tables is this module's recomputation from the JSON's rows, and every fold is in it."""
    res = _json(LEAVEOUT_JSON)
    md = (RESULTS / LEAVEOUT_MD).read_text(encoding="utf-8")
    head, same = md.split("## The same rows", 1)
    got: dict[tuple[str, ...], str] = {}
    for line in head.splitlines():
        if line.startswith("| ") and not line.startswith("| left out"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            key: tuple[str, ...] = (cells[0], cells[1]) if cells[1] in ("vllm", "sglang", "reference") else (cells[0],)
            need(key not in got, f"{LEAVEOUT_MD}: row {key} appears twice")
            got[key] = _line(cells)
    want: dict[tuple[str, ...], str] = {}
    for fold in res["folds"].values():
        need(len(fold["physics_us"]) == len(fold["map_us"]) == len(res["rows"]["measured_us"]), _label(fold))
        want[(_label(fold),)] = _line(_fold_cells(res, fold))
        want.update({(_label(fold), k): _line(c) for k, c in _kernel_cells(res, fold).items()})
    for key in sorted(set(got) | set(want)):
        need(got.get(key) == want.get(key), f"{LEAVEOUT_MD}, row {key}: {got.get(key)} against the rows' {want.get(key)}")
    same_got = sorted(line.strip() for line in same.splitlines()
                      if line.startswith("| ") and not line.startswith("| left out"))
    same_want = sorted(_line(_same_rows_cells(res, f)) for f in res["folds"].values())
    need(same_got == same_want, f"{LEAVEOUT_MD}: the same-rows table is not its rows'")


def leaveout_folds_are_whole_groups() -> None:
    """Each fold's left-out rows are exactly the rows of its group, and its training rows hold none of that group."""
    res = _json(LEAVEOUT_JSON)
    rows = res["rows"]
    need(bool(res["folds"]), "no fold in the record")
    for name, fold in res["folds"].items():
        col = rows[GROUP_COLUMN[fold["kind"]]]
        left, train = _sides(res, fold)
        need(bool(left and train), f"{name}: a side is empty")
        need({col[i] for i in left} == {fold["value"]}, f"{name}: left-out rows of another group")
        need(fold["value"] not in {col[i] for i in train}, f"{name}: its group is in the training rows")
        need(fold["kind"] == "layout" or all(rows["step"][i] for i in left), f"{name}: a workload fold left out a shape")
        need(fold["left_out_rows"] == len(left) and fold["train_rows"] == len(train), f"{name}: row counts")


def leaveout_stored_statistics() -> None:
    """The JSON's own statistics (what the script printed) agree with the rows it stores."""
    res = _json(LEAVEOUT_JSON)
    meas = res["rows"]["measured_us"]
    for name, fold in res["folds"].items():
        left, train = _sides(res, fold)
        for side, idx in (("left_out", left), ("train", train)):
            for model in ("physics", "map"):
                got = fold["stats"][side][model]["all"]
                s = _stats([meas[i] for i in idx], [fold[f"{model}_us"][i] for i in idx])
                need(got["rows"] == s["rows"], f"{name} {side} {model}: rows")
                for a, b in (("median_abs_err", "median"), ("p90_abs_err", "p90"), ("max_abs_err", "worst"),
                             ("within_5pct", "within")):
                    need(abs(got[a] - s[b]) <= 1e-12, f"{name} {side} {model}: {a} {got[a]} against {s[b]}")


# ---- the KV-format runs on the H200 (benchmarks/measure_kv_formats_h200.py) -----------------------------------------


def _kv_base(cases: list[dict[str, Any]]) -> dict[tuple[Any, ...], float]:
    return {(r["model"], r["batch"], r["seq_len"], r["variant"]): r["t_us"] for r in cases
            if r["kv_cache_dtype"] == "bfloat16" and r["block_size"] == 16}


def kv_formats_run_is_complete_and_paired() -> None:
    """Six layouts x five batches: every vLLM variant in four formats, every SGLang one in two, all timed."""
    cases = _json("kv-formats-h200.json")["cases"]
    need(all(r["status"] == "ok" and r["t_us"] > 0 for r in cases), "a case failed or has no time")
    count: dict[tuple[str, str, int], int] = defaultdict(int)
    for r in cases:
        count[(r["variant"].split("-")[0], r["kv_cache_dtype"], r["block_size"])] += 1
    want = {("vllm", kv, b): 180 for kv in ("bfloat16", "fp8") for b in (16, 32)}
    want.update({("sglang", kv, 16): 150 for kv in ("bfloat16", "fp8")})
    need(dict(count) == want, f"cases per (engine, KV, block): {dict(count)}")
    need(len({r["model"] for r in cases}) == 6, "not six layouts")


def kv_formats_block_32_moves_vllms_2d_kernel_only() -> None:
    """The domain's reason to keep block 32 outside (decodecalc.timemodel.domain): vLLM's 3D launches take the time
    they take at block 16, as the model (which has no block-size term) says, but its 2D kernel does not."""
    cases = _json("kv-formats-h200.json")["cases"]
    base = _kv_base(cases)
    by: dict[bool, list[float]] = defaultdict(list)
    for r in cases:
        if r["kv_cache_dtype"] == "bfloat16" and r["block_size"] == 32:
            by[r["variant"] == "vllm-2d"].append(r["t_us"] / base[(r["model"], r["batch"], r["seq_len"], r["variant"])])
    need(bool(by[False] and by[True]), "both kernels timed at block 32")
    need(sum(abs(x - 1) <= 0.05 for x in by[False]) >= 0.99 * len(by[False]), "3D at block 32 is not block 16's time")
    need(min(by[True]) < 0.85 and max(by[True]) > 1.03, "2D at block 32 is not faster on some layouts, slower on others")


def kv_formats_short_and_workload_runs_are_complete() -> None:
    """measure_kv_formats_h200.py --short: 12 fitted layouts x 4 short batches x (8 static + 2 adaptive SGLang
    launches), fp8; validate_tune_h200.py --kv-cache-dtype fp8: five models' chat workloads, none failed."""
    short = _json("kv-formats-h200-short.json")["cases"]
    need(len(short) == 12 * 4 * 10 and all(r["status"] == "ok" and r["kv_cache_dtype"] == "fp8" for r in short),
         "the short-context run is not 480 fp8 timings")
    need({r["model"] for r in short} == set(_json("leaveout-fp8-h200.json")["layouts"]),
         "the short-context layouts are not the fp8 fit's")
    wl = _json("validate-tune-fp8-h200.json")["cases"]
    need(len(wl) == 5 and all("entries" in c and c["kv_cache_dtype"] == "fp8" for c in wl), "fp8 workloads")
    unseen = {r["model"] for r in _json("kv-formats-h200-unseen.json")["cases"]}
    need({"28:4-d128", "32:8-d64", "12:1-d128"} <= unseen, "three workload layouts are not among the unseen ones")


# ---- the backends' captures and the one command on the H200 --------------------------------------------------------


def captured_default_times_are_graph_timed() -> None:
    recs = [json.loads(x) for x in (RESULTS / "capture-backends-h200.jsonl").read_text(encoding="utf-8").splitlines()]
    need(sum((r.get("timing") or {}).get("timer") == "graph" for r in recs) >= 600,
         "capture-backends-h200.jsonl: fewer than 600 CUDA-graph timings")


def one_command_h200_calls_are_the_notes() -> None:
    """The two device calls of the one command on the H200: the first saved its Triton timings before the backends and
    was cut; the second timed the backends alone; the lab note's times are the records'."""
    first = _json("calibrate-grid-map-h200-measurements.json.gz")
    second = _json("calibrate-grid-map-h200-backends-measurements.json.gz")
    only = _json("calibrate-grid-map-h200-backends-only-measurements.json.gz")
    need(first["device_name"] == second["device_name"] == "NVIDIA H200", "not both on an H200")
    need(first["pending"] == ["backends"] and "backend_cases" not in first, "the first call was not cut at the backends")
    need(len(first["cases"]) == 509 and sum(len(r["rows"]) for r in first["map_steps"]) == 1488, "the first call's plan")
    need(only["cases"] == [] and only["backend_cases"] == second["backend_cases"] and len(second["backend_cases"]) == 2244,
         "the backends-only file is not the second call's runs")
    need({k: v for k, v in only.items() if k not in ("cases", "note")} == {k: v for k, v in second.items() if k != "cases"},
         "the backends-only file changed more than its shapes")
    el = first["elapsed"]
    log = (RESULTS / "calibrate-grid-map-h200-backends.log").read_text(encoding="utf-8")
    took = re.search(r"took (\d+) s: the Triton kernels \d+ s, the backends (\d+) s", log)
    if took is None:
        raise RecordError("calibrate's timing line is missing from calibrate-grid-map-h200-backends.log")
    backends_s = int(took.group(2))
    need(round(second["elapsed"]["backends_s"]) == backends_s == 198, "the backends' time")
    note = (LAB / "2026-12-04-calibrate-h200.md").read_text(encoding="utf-8")
    text = f"**the plan's kernels {el['triton_s']:.0f} s, the map steps {el['map_s']:.0f} s**"
    need(text in note and f"**the backends {backends_s} s**" in note, "the lab note's times")
    need(el["triton_s"] + el["map_s"] + second["elapsed"]["backends_s"] > 0.9 * 600, "not over ten minutes")


# ---- the calibrate lab notes' sentences and tables, as the scripts recorded them ------------------------------------


def _note(name: str) -> str:
    return (LAB / f"{name}.md").read_text(encoding="utf-8")


def _pct1(x: float) -> str:
    return f"{x:.1%}"


def calibrate_validation_cells_are_the_re_predictions() -> None:
    """The calibrate profiles' cells of the six validations (docs/lab/2026-12-04-calibrate-h200.md) are their committed
    re-predictions (validate_tune_h200.py --repredict --profile)."""
    note = _note("2026-12-04-calibrate-h200")
    columns = {"calibrate-h200": 3, "calibrate-h200-from-scratch": 4, "calibrate-h200-thorough": 5,
               "calibrate-backends-h200": 6, "calibrate-grid-h200": 7}
    for name, col in columns.items():
        for v in ("heldout", "range", "fresh5", "layouts", "layouts2", "layouts3"):
            line = next((ln for ln in note.splitlines() if ln.startswith(f"| `{v}`:")), None)
            if line is None:
                raise RecordError(f"the note has no row of `{v}`")
            d = _json(f"{name}-repredict-{v}.json")
            want = (f"{d['within_5pct']} / {_pct1(d['median_abs_error'])} / {_pct1(d['max_abs_error'])}; "
                    f"{d['picks_within_3pct']}/{d['engines']}")
            need(line.split(" | ")[col].strip(" |") == want, f"{name} on `{v}`: the note has not {want}")


def steps_in_sequence_table_is_its_timings() -> None:
    """docs/lab/2026-12-02-steps-in-sequence.md: every row recomputed from the committed per-step and workload timings
    (benchmarks/steps_in_sequence.py's arithmetic), and the transfer table as the script recorded it."""
    from benchmarks.steps_in_sequence import PER_STEP, SEQUENCE, compare

    note = _note("2026-12-02-steps-in-sequence")
    table = note[note.index("<!-- steps-in-sequence -->"):note.index("<!-- /steps-in-sequence -->")]
    shown = [ln.split(" | ") for ln in table.splitlines() if ln.startswith(("| gemma", "| llama"))]
    sequence = _json(SEQUENCE)
    rows = [r for name in PER_STEP for r in compare(_json(name), sequence)]
    need(len(shown) == len(rows) == 8, "not eight rows")
    for cells, r in zip(shown, rows):
        need(cells[0] == f"| {r['model']}" and cells[2] == r["engine"] and cells[3] == str(r["settings"]), str(cells))
        need(cells[4] == (f"{r['alone_vs_sequence_median']:+.1%} ({r['alone_vs_sequence_min']:+.1%} to "
                          f"{r['alone_vs_sequence_max']:+.1%})"), f"{cells}: steps alone / in sequence")
        need((cells[5], cells[6].rstrip(" |")) == (f"{r['predicted_vs_alone_median']:+.1%}",
                                                     f"{r['predicted_vs_sequence_median']:+.1%}"), f"{cells}: predicted")
    need(all(abs(r["alone_vs_sequence_median"]) < 0.02 for r in rows), "the regime's effect is not small")
    recorded = _json("steps-in-sequence-h200.json")
    need(recorded["rows"] == rows, "steps-in-sequence-h200.json's rows are not the timings'")
    for t in recorded["transfer"]:
        line = next((ln for ln in note.splitlines() if ln.startswith(f"| {t['model']} |")
                     and f"({t['step_timings']:,} step timings)" in ln), "")
        need(line.endswith(f"| {t['shipped']['within_5pct']} / {t['shipped']['median_abs_error']:.1%} | "
                           f"{t['with_cells']['within_5pct']} / {t['with_cells']['median_abs_error']:.1%} |"),
             f"the transfer row of {t['model']} ({t['step_timings']} step timings)")


def steps_in_sequence_sentences_are_the_record() -> None:
    """The same note's "sample of a user's own traffic" table and its sentences on sampled steps, as
    steps_in_sequence.py --next / --sampled recorded them (the re-predictions take minutes)."""
    note = _note("2026-12-02-steps-in-sequence")
    flat = " ".join(note.split())
    rec = _json("steps-in-sequence-h200.json")
    nxt = rec["next"]
    need(len(nxt) == 4, "not four next-steps rows")
    for t in nxt:
        wl = "chat" if t["workload"] == "chat" else "mix (prompt 6,000, output 400)"
        a, b = t["shipped"], t["with_cells"]
        need(f"| {t['model']} | {wl} | {a['within_5pct']}/{a['totals']} / {a['median_abs_error']:.1%} | "
             f"{b['within_5pct']}/{b['totals']} / {b['median_abs_error']:.1%} |" in note, f"next steps of {t['model']}")
    before, after = (sum(t[k]["within_5pct"] for t in nxt) for k in ("shipped", "with_cells"))
    total = sum(t["shipped"]["totals"] for t in nxt)
    need(f"{before} of {total} totals within 5% before, **{after} after**" in flat and after > before, "next total")
    sampled = rec["sampled"]
    s_before = {k: sum(t["shipped"]["within_5pct"] for t in rows) for k, rows in sampled.items()}
    s_after = {k: sum(t["with_cells"]["within_5pct"] for t in rows) for k, rows in sampled.items()}
    s_total = sum(t["shipped"]["totals"] for t in sampled["12"])
    need(f"**{s_before['12']} -> {s_after['12']} of {s_total}**" in flat, "the sampled calibrate sentence")
    need(f"24 steps the same {s_after['24']}" in flat and s_after["24"] == s_after["12"], "24 sampled steps")
    eng = rec["sampled_engine_launches"]
    e_after = {k: sum(t["with_cells"]["within_5pct"] for t in rows) for k, rows in eng.items()}
    e_before = sum(t["shipped"]["within_5pct"] for t in eng["6"])
    e_total = sum(t["shipped"]["totals"] for t in eng["6"])
    need(f"give **{e_before} -> {e_after['6']} of {e_total}**, and on 12 steps {e_after['12']}" in flat,
         "the sampled engine launches sentence")


def calibrate_workload_note_is_the_record() -> None:
    """docs/lab/2026-12-02-calibrate-workload.md: every row and total from results/calibrate-workload-h200.json (the
    re-predictions take minutes), whose in-sample figures are the committed profiles' own fit records."""
    from decodecalc.yamlio import safe_load  # the package's safe loader (libyaml's when present: ten profiles)

    doc = _json("calibrate-workload-h200.json")
    note = _note("2026-12-02-calibrate-workload")
    table = note[note.index("<!-- calibrate-workload -->"):note.index("<!-- /calibrate-workload -->")]
    need(len(doc["cases"]) == 10 and table.count("\n| ") == 1 + 10, "not ten cases")

    def wl(w: str) -> str:
        return "chat" if w == "chat" else "mix (prompt 6,000, output 400)" if w.startswith("mix") else "Azure code trace"

    def cell(x: dict[str, Any]) -> str:
        a, o, b = x["shipped"], x["offset_only"], x["calibrated"]
        return (f"{a['within_5pct']} -> {o['within_5pct']} -> {b['within_5pct']} of {a['totals']} (worst "
                f"{a['max_abs_error']:.1%} -> {b['max_abs_error']:.1%})")

    for r in doc["cases"]:
        fit = safe_load((ROOT / r["profile"]).read_text(encoding="utf-8"))["fit"]["workload"]
        need(fit == r["calibrate"] and fit["model"] == r["model"], f"{r['profile']}: its fit record")
        other = cell(r["other_workload"]) if "other_workload" in r else "-"
        need(f"| {r['model']} | {wl(r['cells_from'])} | {fit['timings']} | {fit['median_abs_err_before']:.1%} -> "
             f"{fit['median_abs_err_after']:.1%} | {cell(r['next_steps'])} | {other} |" in table, f"row {r['model']}")
    flat = " ".join(note.split())
    whos = ("shipped", "offset_only", "calibrated")
    for kind in ("next_steps", "other_workload"):
        rows = [r[kind] for r in doc["cases"] if kind in r]
        t = doc["totals"][kind]
        need([t[w] for w in whos] == [sum(x[w]["within_5pct"] for x in rows) for w in whos], f"{kind} totals")
        need(t["of"] == sum(x["shipped"]["totals"] for x in rows), f"{kind} count")
    n, o = doc["totals"]["next_steps"], doc["totals"]["other_workload"]
    need(f"**{n['shipped']} -> {n['offset_only']} -> {n['calibrated']} of {n['of']} totals within 5%**" in flat, "next")
    nxt = [r["next_steps"] for r in doc["cases"]]
    w10 = [sum(x[w]["within_10pct"] for x in nxt) for w in whos]
    worst = [max(x[w]["max_abs_error"] for x in nxt) for w in whos]
    need(f"(within 10%: {w10[0]} -> {w10[1]} -> {w10[2]}; worst {worst[0]:.1%} -> {worst[1]:.1%} -> "
         f"{worst[2]:.1%})" in flat, "within 10% and worst")
    need("22 of 219 beyond 10%" in flat and n["of"] - w10[2] == 22, "22 of 219 beyond 10%")
    # BENCHMARKS.md's restatement of the same record
    bench = " ".join((ROOT / "BENCHMARKS.md").read_text(encoding="utf-8").split())
    need(f"go from {n['shipped']} to {n['calibrated']} of {n['of']} totals within 5%" in bench
         and f"{n['of'] - w10[2]} of the {n['of']} are beyond 10%" in bench
         and f"({o['shipped']} -> {o['calibrated']} of {o['of']};" in bench, "BENCHMARKS.md's calibrate --workload claim")
    # the prior was chosen on two models' rows; the other four are reported apart
    chosen_on = ("gemma-2-9b", "llama3-405b")
    sel = [sum(r["next_steps"][w]["within_5pct"] for r in doc["cases"] if r["model"] in chosen_on) for w in whos]
    held = [sum(r["next_steps"][w]["within_5pct"] for r in doc["cases"] if r["model"] not in chosen_on) for w in whos]
    held_of = sum(r["next_steps"]["shipped"]["totals"] for r in doc["cases"] if r["model"] not in chosen_on)
    need(f"prior 1: {sel[0]} shipped -> {sel[1]} offset only -> {sel[2]} of 87)" in flat, "the prior's rows")
    need(f"**{held[0]} -> {held[1]} -> {held[2]} of {held_of}** ({held[2] / held_of:.0%})" in flat, "the other four")
    need(f"On the other kind of traffic: {o['shipped']} -> {o['offset_only']} -> {o['calibrated']} of {o['of']}" in flat,
         "the other kind of traffic")
    need(n["calibrated"] > n["offset_only"] > n["shipped"], "the cells do not improve the next steps")
    st = doc["settings_totals"]["next_steps"]
    need(st["of"] == sum(r["next_steps"]["shipped"]["settings"]["totals"] for r in doc["cases"]) == 159, "159 settings")
    need(f"go {st['shipped']} -> {st['offset_only']} -> {st['calibrated']} of {st['of']}**" in flat, "the settings")
    s10 = [sum(r["next_steps"][w]["settings"]["within_10pct"] for r in doc["cases"]) for w in whos]
    s_worst = [max(r["next_steps"][w]["settings"]["max_abs_error"] for r in doc["cases"]) for w in whos]
    need(f"({st['calibrated'] / st['of']:.0%}; within 10%: {s10[0]} -> {s10[1]} -> {s10[2]}; worst {s_worst[0]:.1%} "
         f"-> {s_worst[1]:.1%} -> {s_worst[2]:.1%})" in flat and f"({st['of'] - s10[2]} of the {st['of']} settings)" in flat,
         "the settings' within 10% and worst")


CHECKS: dict[str, Callable[[], None]] = {
    "leaveout report": leaveout_report_is_its_rows,
    "leaveout folds": leaveout_folds_are_whole_groups,
    "leaveout statistics": leaveout_stored_statistics,
    "kv-formats run": kv_formats_run_is_complete_and_paired,
    "kv-formats block 32": kv_formats_block_32_moves_vllms_2d_kernel_only,
    "kv-formats short and workload runs": kv_formats_short_and_workload_runs_are_complete,
    "backend captures": captured_default_times_are_graph_timed,
    "one command on the H200": one_command_h200_calls_are_the_notes,
    "calibrate validation cells": calibrate_validation_cells_are_the_re_predictions,
    "steps in sequence": steps_in_sequence_table_is_its_timings,
    "steps in sequence, sentences": steps_in_sequence_sentences_are_the_record,
    "calibrate --workload": calibrate_workload_note_is_the_record,
}


def run() -> list[str]:
    """Every check's failure, one line each (a missing or unreadable record is a failure too)."""
    problems = []
    for name, check in CHECKS.items():
        try:
            check()
        except (RecordError, OSError, KeyError, ValueError) as e:
            problems.append(f"record check '{name}': {type(e).__name__}: {e}")
    return problems

