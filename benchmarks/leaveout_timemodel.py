"""Accuracy of the H200 time model on data no fit saw: leave WHOLE groups out of the fit.

benchmarks/fit_timemodel.py holds shapes out by a hash of the shape key (a random split), so every head layout and
every workload sits on both sides of its split and its held-out figures flatter the model. Here each *fold* leaves
one whole group out of the fit, fits the physics (decodecalc.timemodel.recipe.fit_physics, with fit_timemodel.py's
options) and the residual map (fit_timemodel.with_residuals) on the rest only, and predicts the left-out rows:

* ``layout``: one head layout per rank, ``num_heads:num_kv_heads d<head dim>`` (12 in the data, e.g. ``8:1 d128``):
  its grid / sweep rows and its workload-step rows (validate_tune_h200_steps.json) all leave the fit;
* ``preset``: one workload preset (chat, long-doc-qa, agentic): all its per-step rows, both models;
* ``model``: one model's (llama3.1-8b, llama3.1-70b) per-step workload rows, all presets. Its head layout stays in
  the fit through the grid rows (the layout fold of 32:8 d128 / 8:1 d128 is the stricter test).

For every fold it reports, on the left-out rows and on the fold's own training rows, median / p90 / worst |error|
and the fraction within 5%, for the physics alone and for physics x residual map, overall and by kernel (vllm,
sglang, reference; the map covers vllm and sglang only, so reference rows read the same both ways). Error is
``|predicted / measured - 1|`` as decodecalc.timemodel.fit.error_summary has it.

Neutral start. fit_timemodel.py starts from the shipped profile (decodecalc/profiles/h200.yaml), which was fitted on
all of this data, so a left-out fold may not start there. Every fold starts from the same neutral profile
(:func:`neutral_start`, calibrate --from-scratch's): each Triton family gets the fit's own starting values for a family it has never seen
(decodecalc.timemodel.fit.DEFAULT_FAMILY: 1 us latency, 20 GB/s per program, 60 GB/s per SM, 1 us overhead), its
resident programs per SM from the compiled kernels' registers / shared memory (measured, not timed; the occupancy
search then picks them per family and head dim), no per-head-dim occupancy table, no idle cost or saturation gap of its
own (the fit starts those at the GPU's idle cost and at 0.5 programs), the GPU's HBM bandwidth at TimeProfile's
default 4.0 TB/s and its idle-program cost at 10 ns. The launch overhead is the measured CUDA-graph replay of the data
files (as fit_timemodel.py fixes it). Only the profile's skeleton (GPU name, SM count, the backend families no row
here uses) comes from the shipped file. A family no training row runs (SGLang's MHA stage 1, run by 32:32 only) borrows
its parent's fitted numbers after the fit, as the package does for a profile without it (FAMILY_FALLBACKS).

Budget. fit_timemodel.py's 2 restarts x 2500 evaluations converge fast from the shipped profile but run to their limit
from a neutral start (~15-20 min a fold on one core); the defaults here are 1 restart x 600 evaluations (4-11 min a
fold). The committed results: ``--time-budget 4200`` (the six PRIORITY layouts and the three presets, 75 min), then
``--folds model:llama3.1-8b model:llama3.1-70b`` (13 min); the six other layouts did not run.

Run (one core; results are written after every fold, so an interrupted run keeps the
folds it finished and a rerun skips them unless ``--redo``)::

    taskset -c 1 python -m benchmarks.leaveout_timemodel                 # every fold, in priority order
    taskset -c 1 python -m benchmarks.leaveout_timemodel --folds "layout:8:1 d128" preset:chat
    taskset -c 1 python -m benchmarks.leaveout_timemodel --time-budget 4500   # stop starting folds after 75 min
    python -m benchmarks.leaveout_timemodel --report                     # only rewrite the .md from the JSON
    python -m benchmarks.leaveout_timemodel --report --reading-file R.md # ... storing R.md as its closing paragraph
    python -m benchmarks.leaveout_timemodel --list                       # the folds and their row counts

Outputs: benchmarks/results/leaveout-timemodel-h200.json (the row table once, then per fold its definition, the
left-out row indices, every row's physics-only and with-map prediction, the fitted physics and the statistics) and
benchmarks/results/leaveout-timemodel-h200.md (the tables; benchmarks/record_checks.py recomputes them). Besides the
fold tables the report scores each fold's left-out rows once more *in sample*, with the fit of another fold that trained
on them: training-row figures mix in other rows (grid and sweep rows err more than workload steps), this does not.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

from benchmarks import fit_timemodel as ft
from decodecalc.timemodel import (
    FAMILY_FALLBACKS,
    TimeProfile,
    packaged_profile,
)
from decodecalc.timemodel import calibration_fit
from decodecalc.timemodel.fit import Measurement, families_in, percentile
from decodecalc.timemodel.recipe import SHIPPED, fit_physics
from decodecalc.timemodel.predict import launch_time_s, model_launch_time_s

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
OUT_JSON = RESULTS / "leaveout-timemodel-h200.json"
OUT_MD = RESULTS / "leaveout-timemodel-h200.md"
STEPS_DEFAULT = RESULTS / "validate_tune_h200_steps.json"
SCHEMA = 1


#: the folds in the order they run: first the head layouts that differ most from the others (head dim, group size),
#: then the workload folds, then the remaining layouts (a time budget cuts from the end)
PRIORITY = ("layout:8:1 d128", "layout:32:8 d128", "layout:20:4 d64", "layout:16:2 d256", "layout:32:32 d128",
            "layout:96:8 d128", "preset:chat", "preset:long-doc-qa", "preset:agentic", "model:llama3.1-8b",
            "model:llama3.1-70b")
WITHIN = 0.05  # "within 5%"


# --------------------------------------------------------------------------------------------
# rows and their groups


@dataclasses.dataclass(frozen=True)
class Row:
    m: Measurement
    source: str  # the data file it came from
    step: bool  # a per-step workload timing (validate_tune_h200_steps*.json)

    @property
    def layout(self) -> str:
        s = self.m.shape
        return f"{s.num_heads}:{s.num_kv_heads} d{s.head_size}"

    @property
    def workload_model(self) -> str:  # "llama3.1-8b" for a step row, "" otherwise
        return self.m.model.split()[0] if self.step else ""

    @property
    def preset(self) -> str:  # "chat" for a step row, "" otherwise
        return self.m.model.split()[1] if self.step else ""

    def group(self, kind: str) -> str:
        return {"layout": self.layout, "preset": self.preset, "model": self.workload_model}[kind]


def kernel_class(kernel: str) -> str:
    """vllm | sglang | reference (decodecalc's own kernels of either layout)."""
    return "reference" if kernel.startswith("reference") else kernel


def load_rows(step_paths: list[Path]) -> tuple[list[Row], list[Path]]:
    """The data fit_timemodel.py fits (its own loaders): the shared grid, every timemodel-h200-*.json and the
    per-step workload timings."""
    paths = ft.shape_files()
    rows: list[Row] = []
    for p in paths:  # one file at a time, so every row knows its file (ft's origin is keyed by shape)
        ms, _ = ft.load([p])
        rows += [Row(m, ft.data_name(p), False) for m in ms]
    for p in step_paths:
        ms, _ = ft.load_steps([p])
        rows += [Row(m, p.name, True) for m in ms]
    return rows, paths + step_paths


def all_folds(rows: list[Row]) -> list[str]:
    """Every fold name (``kind:value``), PRIORITY first."""
    layouts = sorted({r.layout for r in rows})
    presets = sorted({r.preset for r in rows if r.step})
    models = sorted({r.workload_model for r in rows if r.step})
    names = [f"layout:{v}" for v in layouts] + [f"preset:{v}" for v in presets] + [f"model:{v}" for v in models]
    return [f for f in PRIORITY if f in names] + [f for f in names if f not in PRIORITY]


def split_fold(name: str) -> tuple[str, str]:
    kind, value = name.split(":", 1)
    return kind, value


def is_left_out(row: Row, fold: str) -> bool:
    kind, value = split_fold(fold)
    return row.group(kind) == value


DEFINITION = {
    "layout": "every row of head layout {v} (grid, sweeps and workload steps) left out of the physics fit and the map",
    "preset": "every per-step workload row of preset {v} (both models) left out of the physics fit and the map",
    "model": "every per-step workload row of model {v} (all presets) left out; its layout's grid rows stay in the fit",
}


# --------------------------------------------------------------------------------------------
# the fit of one fold


def neutral_start(launch_overhead_s: float | None, occupancy: dict[str, int]) -> TimeProfile:
    """The starting profile of every fold (module docstring): calibrate --from-scratch's cold start
    (decodecalc.timemodel.calibration_fit.neutral_start) with each Triton family's resident programs per SM from the
    compiled kernels and the measured launch overhead; nothing in it was fitted to any timing."""
    shipped = packaged_profile("h200")
    assert shipped is not None
    cold = calibration_fit.neutral_start(shipped)
    fams = {f: dataclasses.replace(p, max_programs_per_sm=occupancy[f]) if f in occupancy and
            f.startswith(calibration_fit.TRITON_PREFIXES) else p for f, p in cold.families.items()}
    return dataclasses.replace(cold, families=fams, launch_overhead_s=launch_overhead_s or shipped.launch_overhead_s,
                               source="leave-out neutral start")


def fit_options(args: argparse.Namespace, paths: list[Path], launch: float | None) -> dict[str, Any]:
    """The shipped recipe (decodecalc.timemodel.recipe.SHIPPED, as fit_timemodel.py fits), with this script's
    restarts and evaluations."""
    recipe = dataclasses.replace(SHIPPED, search_occupancy=not args.no_occupancy_search, max_evals=args.max_evals,
                                 restarts=args.restarts,
                                 run_kernels=tuple(k for k in args.run_kernels.split(",") if k))
    return dict(recipe=recipe, launch_overhead_s=launch, fixed_occupancy=ft.compiled_occupancy(paths))


def run_fold(fold: str, rows: list[Row], start: TimeProfile, occ: dict[str, int],
             options: dict[str, Any]) -> dict[str, Any]:
    left = [i for i, r in enumerate(rows) if is_left_out(r, fold)]
    left_set = set(left)
    train = [r.m for i, r in enumerate(rows) if i not in left_set]
    t0 = time.time()
    physics = fit_physics(train, start, occupancy=occ or None, **options,
                          progress=lambda s: print(f"  [{fold}] {s}", flush=True))
    fit_s = time.time() - t0
    # a family no training row ran (SGLang's MHA stage 1 runs 32:32 only) keeps the neutral start; the package's own
    # rule for a profile without a family (FAMILY_FALLBACKS) borrows its parent's numbers, and so does this fold
    seen, needed = set(families_in(train)), set(families_in([r.m for r in rows]))
    borrowed = {f: parent for f, parent in FAMILY_FALLBACKS.items() if f in needed - seen and parent in seen}
    if borrowed:
        physics = dataclasses.replace(physics, families={**physics.families, **{
            f: physics.families[parent] for f, parent in borrowed.items()}})
    mapped = ft.with_residuals(physics, train, f"training rows of leave-out fold {fold}")
    # rounded as stored: every statistic below is computed from exactly the numbers the JSON keeps
    phys_us = [round(model_launch_time_s(r.m.work, physics) * 1e6, 4) for r in rows]
    map_us = [round(launch_time_s(r.m.work, mapped) * 1e6, 4) for r in rows]
    kind, value = split_fold(fold)
    left_shapes = {rows[i].m.shape.key for i in left}
    shared = sorted(left_shapes & {r.m.shape.key for i, r in enumerate(rows) if i not in left_set})
    return {"kind": kind, "value": value, "definition": DEFINITION[kind].format(v=value),
            "left_out_rows": len(left), "train_rows": len(train), "borrowed_families": borrowed, "left_out_shapes": len(left_shapes),
            "shape_keys_also_in_training": shared, "fit_seconds": round(fit_s, 1),
            "left_out": left, "physics_us": phys_us, "map_us": map_us,
            "physics_profile": physics.to_mapping()}


# --------------------------------------------------------------------------------------------
# statistics (from the stored numbers only: --report and the test recompute them the same way)


def error_stats(measured: list[float], predicted: list[float]) -> dict[str, float]:
    e = [abs(p / m - 1.0) for m, p in zip(measured, predicted)]
    signed = [p / m - 1.0 for m, p in zip(measured, predicted)]
    return {"rows": len(e), "median_abs_err": percentile(e, 0.5), "p90_abs_err": percentile(e, 0.9),
            "max_abs_err": max(e) if e else float("nan"),
            "within_5pct": sum(x <= WITHIN for x in e) / len(e) if e else float("nan"),
            "median_signed_err": percentile(signed, 0.5)}


def fold_stats(fold: dict[str, Any], table: dict[str, list]) -> dict[str, Any]:
    """{left_out|train: {physics|map: {all|vllm|sglang|reference: stats}}}."""
    left = set(fold["left_out"])
    meas = table["measured_us"]
    out: dict[str, Any] = {}
    for side in ("left_out", "train"):
        idx = [i for i in range(len(meas)) if (i in left) == (side == "left_out")]
        out[side] = {}
        for model, pred in (("physics", fold["physics_us"]), ("map", fold["map_us"])):
            groups = {"all": idx}
            for k in ("vllm", "sglang", "reference"):
                sub = [i for i in idx if kernel_class(table["kernel"][i]) == k]
                if sub:
                    groups[k] = sub
            out[side][model] = {g: error_stats([meas[i] for i in ix], [pred[i] for i in ix])
                                for g, ix in groups.items()}
    return out


def row_table(rows: list[Row]) -> dict[str, list]:
    """Column-wise row table (index i is row i of every fold's arrays)."""
    return {"shape": [r.m.shape.key for r in rows], "layout": [r.layout for r in rows],
            "kernel": [r.m.kernel for r in rows], "variant": [r.m.variant for r in rows],
            "model": [r.m.model for r in rows], "preset": [r.preset for r in rows],
            "workload_model": [r.workload_model for r in rows], "step": [r.step for r in rows],
            "source": [r.source for r in rows], "measured_us": [round(r.m.time_s * 1e6, 4) for r in rows]}


# --------------------------------------------------------------------------------------------
# the report


def pct(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def fold_label(name: str) -> str:
    kind, value = split_fold(name)
    return value if kind == "layout" else f"{kind} {value}"


MAIN_HEADER = ("| left out | rows | phys median | phys p90 | phys worst | phys within 5% | map median | map p90 | "
               "map worst | map within 5% | train rows | train phys median | train phys p90 | train phys within 5% | "
               "train map median | train map p90 | train map within 5% | map moved |")
#: "map moved": the share of left-out rows whose prediction the residual map changed by more than this
MOVED = 0.005


def map_moved(fold: dict[str, Any]) -> float:
    left = fold["left_out"]
    return sum(abs(fold["map_us"][i] / fold["physics_us"][i] - 1.0) > MOVED for i in left) / len(left)


def main_row(name: str, st: dict[str, Any], moved: float) -> str:
    lp, lm = st["left_out"]["physics"]["all"], st["left_out"]["map"]["all"]
    tp, tm = st["train"]["physics"]["all"], st["train"]["map"]["all"]
    cells = [fold_label(name), str(lp["rows"]),
             *(pct(s[k]) for s in (lp, lm) for k in ("median_abs_err", "p90_abs_err", "max_abs_err", "within_5pct")),
             str(tp["rows"]),
             *(pct(s[k]) for s in (tp, tm) for k in ("median_abs_err", "p90_abs_err", "within_5pct")), pct(moved)]
    return "| " + " | ".join(cells) + " |"


KERNEL_HEADER = ("| left out | kernel | rows | phys median | phys p90 | phys worst | phys within 5% | map median | "
                 "map p90 | map worst | map within 5% | train map median | train map p90 |")


def kernel_rows(name: str, st: dict[str, Any]) -> list[str]:
    out = []
    for k in ("vllm", "sglang", "reference"):
        if k not in st["left_out"]["physics"]:
            continue
        lp, lm = st["left_out"]["physics"][k], st["left_out"]["map"][k]
        tm = st["train"]["map"].get(k)
        cells = [fold_label(name), k, str(lp["rows"]),
                 *(pct(s[q]) for s in (lp, lm) for q in ("median_abs_err", "p90_abs_err", "max_abs_err", "within_5pct")),
                 pct(tm["median_abs_err"]) if tm else "n/a", pct(tm["p90_abs_err"]) if tm else "n/a"]
        out.append("| " + " | ".join(cells) + " |")
    return out


def random_split_context(path: Path = RESULTS / "timemodel-fit-h200.json") -> str:
    """fit_timemodel.py's own figures (its random hash split of shapes), as its committed result has them."""
    try:
        h = json.loads(path.read_text())["holdout_fit"]
        ho, hp, tr = h["holdout"]["all"], h["holdout_physics"]["all"], h["train"]["all"]
    except (OSError, KeyError, ValueError):
        return ""
    return (f"the committed random split ({path.name}: shapes held out by a hash of their key, shipped start, "
            f"restarts 2, max_evals 2500, map rebuilt on {ho['rows'] + tr['rows']} rows incl. "
            f"validate_tune_h200_steps2.json): held out {ho['rows']} rows, physics median {pct(hp['median_abs_err'])} "
            f"/ p90 {pct(hp['p90_abs_err'])}, with map {pct(ho['median_abs_err'])} / {pct(ho['p90_abs_err'])}; "
            f"training rows with map {pct(tr['median_abs_err'])} / {pct(tr['p90_abs_err'])}.")


def in_sample_reference(name: str, folds: dict[str, Any]) -> str | None:
    """The fold that scores ``name``'s left-out rows in sample: the first other fold (in run order) that trained on all
    of them (its own left-out rows are disjoint from them)."""
    left = set(folds[name]["left_out"])
    return next((m for m, f in folds.items() if m != name and not left & set(f["left_out"])), None)


SAME_HEADER = ("| left out | rows | out of sample: phys median | phys p90 | map median | map p90 | in sample, fold | "
               "phys median | phys p90 | map median | map p90 |")


def same_rows_row(name: str, folds: dict[str, Any], meas: list[float]) -> str:
    left = folds[name]["left_out"]
    ref = in_sample_reference(name, folds)

    def four(fold: dict[str, Any]) -> list[str]:  # physics median, p90; map median, p90 on the left-out rows
        return [pct(error_stats([meas[i] for i in left], [fold[key][i] for i in left])[q])
                for key in ("physics_us", "map_us") for q in ("median_abs_err", "p90_abs_err")]

    cells = [fold_label(name), str(len(left)), *four(folds[name]),
             *([fold_label(ref), *four(folds[ref])] if ref else ["n/a"] * 5)]
    return "| " + " | ".join(cells) + " |"


def render_markdown(res: dict[str, Any]) -> str:
    table = res["rows"]
    folds = res["folds"]
    stats = {n: fold_stats(f, table) for n, f in folds.items()}
    s = res["settings"]
    layout_folds = [n for n in folds if folds[n]["kind"] == "layout"]
    work_folds = [n for n in folds if folds[n]["kind"] != "layout"]
    known = ([f"layout:{v}" for v in sorted(set(table["layout"]))]
             + [f"preset:{v}" for v in sorted({p for p in table["preset"] if p})]
             + [f"model:{v}" for v in sorted({m for m in table["workload_model"] if m})])
    missing = [n for n in known if n not in folds]
    total_fit = sum(f["fit_seconds"] for f in folds.values())
    lines = [
        "# Time model accuracy on left-out groups (H200)",
        "",
        "Written by `benchmarks/leaveout_timemodel.py` (`--report` rewrites this file from "
        "`leaveout-timemodel-h200.json`; `benchmarks/record_checks.py` recomputes every number below from the "
        "per-row data there). Error: |predicted / measured - 1| per row (one launch or one workload step). "
        "*phys*: the fold's physics fit alone; *map*: physics x the residual map built from the fold's training rows "
        "only. *train*: the same fold's fit scored on its own training rows (in sample). *map moved*: the share of "
        f"left-out rows whose prediction the map changed by more than {100 * MOVED:.1f}% (the map is exactly 1 in a "
        "cell (kernel family, query heads per KV head, padded head dim) no training row measured).",
        "",
        "## Conditions",
        "",
        f"- Data: {', '.join(res['data'])}: {len(table['measured_us'])} rows, "
        f"{len(set(table['shape']))} shapes, {len(set(table['layout']))} head layouts.",
        f"- Machine: {res['machine']['cpu']} ({res['machine']['python']}), one core (`taskset -c "
        f"{res['machine']['affinity']}`), pure Python. Fit time: {total_fit / 60:.0f} min over {len(folds)} folds "
        f"({min(f['fit_seconds'] for f in folds.values()):.0f}-{max(f['fit_seconds'] for f in folds.values()):.0f} s "
        f"each)." if folds else "- No fold has run yet.",
        f"- Fit: decodecalc.timemodel.fit.fit_profile with fit_timemodel.py's options (occupancy search "
        f"{'on' if s['search_occupancy'] else 'off'}, own idle cost and saturation gap for vllm and sglang, vLLM's "
        f"compiled 3D occupancy fixed, measured launch overhead) but restarts={s['restarts']}, "
        f"max_evals={s['max_evals']} (fit_timemodel.py: 2 and 2500; `decodecalc calibrate`: 1 and 1500), from a "
        f"neutral start (no parameter fitted to any timing: fit.DEFAULT_FAMILY per family, HBM "
        f"{s['neutral_hbm_bytes_per_s'] / 1e12:.1f} TB/s, idle program {s['neutral_idle_program_s'] * 1e9:.0f} ns; "
        f"the script's docstring). The residual map: fit_timemodel.with_residuals (vllm and sglang rows; reference "
        f"rows get no map, so their two columns agree).",
    ]
    if folds:
        lines.append("- Folds run (fit seconds): " + ", ".join(f"{fold_label(n)} ({f['fit_seconds']:.0f})"
                                                             for n, f in folds.items()) + ".")
    if missing:
        lines.append(f"- Not run (time budget; PRIORITY in the script): {', '.join(fold_label(n) for n in missing)}.")
    borrowed = {n: f["borrowed_families"] for n, f in folds.items() if f.get("borrowed_families")}
    for n, b in borrowed.items():
        lines.append(f"- {fold_label(n)}: no training row ran " + ", ".join(f"{f} (it borrows {p}'s fitted numbers, "
                     "as a profile without the family does: FAMILY_FALLBACKS)" for f, p in b.items()) + ".")
    ctx = random_split_context()
    if ctx:
        lines.append(f"- For comparison, {ctx}")
    lines += ["", "## Left out by head layout (per rank)", "",
              "Each fold leaves every row of one layout out: its grid and sweep rows and, for 8:1 d128 "
              "(Llama-3.1-70B at TP8) and 32:8 d128 (Llama-3.1-8B), its workload-step rows.", "",
              MAIN_HEADER, "|" + "---|" * 18]
    lines += [main_row(n, stats[n], map_moved(folds[n])) for n in layout_folds]
    lines += ["", "## Left out by workload preset / model (per-step workload timings)", "",
              "A preset fold leaves out all step rows of that preset (both models); a model fold all step rows of "
              "that model (every preset), while its layout's grid rows stay in the fit.", "",
              MAIN_HEADER, "|" + "---|" * 18]
    lines += [main_row(n, stats[n], map_moved(folds[n])) for n in work_folds]
    lines += ["", "## By kernel (left-out rows; train: the fold's training rows of that kernel, with map)", "",
              KERNEL_HEADER, "|" + "---|" * 13]
    for n in layout_folds + work_folds:
        lines += kernel_rows(n, stats[n])
    lines += ["", "## The same rows in sample and out of sample", "",
              "Training-row figures mix other rows (the grid and sweeps err more than workload steps); here the "
              "left-out rows themselves are scored again by a fold that trained on them (the first other fold whose "
              "left-out rows are disjoint from them), same fit settings.", "",
              SAME_HEADER, "|" + "---|" * 11]
    lines += [same_rows_row(n, folds, table["measured_us"]) for n in layout_folds + work_folds]
    shared = {n: len(f["shape_keys_also_in_training"]) for n, f in folds.items() if f["shape_keys_also_in_training"]}
    if shared:
        lines += ["", "Shape keys of left-out rows that also occur among training rows (same batch of sequence lengths "
                  "timed under another group): " + ", ".join(f"{fold_label(n)}: {k}" for n, k in shared.items()) + "."]
    if res.get("reading"):
        lines += ["", "## Reading", "", res["reading"]]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# driver


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    aff = ",".join(map(str, sorted(os.sched_getaffinity(0)))) if hasattr(os, "sched_getaffinity") else "?"
    return {"cpu": cpu, "python": f"Python {platform.python_version()}", "affinity": aff, "host": platform.node()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folds", nargs="*", help="fold names kind:value (default: all, PRIORITY first; see --list)")
    ap.add_argument("--list", action="store_true", help="list the folds and their row counts, then exit")
    ap.add_argument("--report", action="store_true", help="no fit: rewrite the .md from the JSON")
    ap.add_argument("--reading-file", type=Path, help="with --report: store this text as the JSON's 'reading' "
                    "(the Markdown's closing paragraph) first")
    ap.add_argument("--redo", action="store_true", help="refit folds the JSON already has")
    ap.add_argument("--time-budget", type=float, default=None, metavar="S",
                    help="start no new fold once this many seconds have passed")
    ap.add_argument("--restarts", type=int, default=1, help="Nelder-Mead runs per kernel group (fit_timemodel.py: 2)")
    ap.add_argument("--max-evals", type=int, default=600, help="loss evaluations per Nelder-Mead run (fit_timemodel.py: "
                    "2500; a fold takes 4-11 min on one core at 600)")
    ap.add_argument("--fresh", action="store_true", help="discard an --out JSON written with other data or settings "
                    "(otherwise that is an error: its folds would not compare)")
    ap.add_argument("--no-occupancy-search", action="store_true")
    ap.add_argument("--run-kernels", default=ft.RUN_KERNELS, help="as fit_timemodel.py's (empty: the physics before "
                    "the run cost)")
    ap.add_argument("--steps-data", type=Path, nargs="*", default=[STEPS_DEFAULT],
                    help="per-step workload timings (default: validate_tune_h200_steps.json, the committed fit's)")
    ap.add_argument("--out", type=Path, default=OUT_JSON)
    ap.add_argument("--md", type=Path, default=OUT_MD)
    args = ap.parse_args()

    if args.report:
        res = json.loads(args.out.read_text())
        if args.reading_file:
            res["reading"] = args.reading_file.read_text().strip()
            write_json_atomic(args.out, res)
        args.md.write_text(render_markdown(res))
        print(f"wrote {args.md}")
        return 0

    rows, paths = load_rows(args.steps_data)
    folds = all_folds(rows)
    if args.list:
        for f in folds:
            n = sum(is_left_out(r, f) for r in rows)
            print(f"{f:28s} {n:5d} left out, {len(rows) - n:5d} train")
        return 0
    chosen = args.folds or folds
    unknown = [f for f in chosen if f not in folds]
    if unknown:
        ap.error(f"unknown folds {unknown}; known: {folds}")

    settings = {"restarts": args.restarts, "max_evals": args.max_evals, "search_occupancy": not args.no_occupancy_search,
                "neutral_hbm_bytes_per_s": calibration_fit.NEUTRAL_HBM_BYTES_PER_S,
                "neutral_idle_program_s": calibration_fit.NEUTRAL_IDLE_PROGRAM_S,
                "start": "neutral (leaveout_timemodel.neutral_start)"}
    if args.run_kernels:  # the physics with a run cost (an older JSON, written before it, has no such key)
        settings["run_kernels"] = args.run_kernels
    table = row_table(rows)
    res: dict[str, Any] = {}
    if args.out.exists():
        res = json.loads(args.out.read_text())
        if res.get("rows") != table or res.get("settings") != settings:
            if not args.fresh:
                ap.error(f"{args.out} was written with other rows or settings ({res.get('settings')}); "
                         "--fresh starts it afresh, --out writes elsewhere")
            res = {}
    res.update({"schema": SCHEMA, "data": [ft.data_name(p) for p in paths], "settings": settings, "machine": machine(),
                "rows": table, "planned_folds": list(dict.fromkeys([*res.get("planned_folds", []), *chosen]))})
    res.setdefault("folds", {})
    res.setdefault("reading", "")

    launch = sum(ft.LAUNCH_US) / len(ft.LAUNCH_US) * 1e-6 if ft.LAUNCH_US else None
    occ = ft.measured_occupancy()
    options = fit_options(args, paths, launch)
    start = neutral_start(launch, occ)
    print(f"{len(rows)} rows; folds: {', '.join(chosen)}; launch overhead {launch and launch * 1e6:.3f} us; "
          f"occupancy {occ}; fixed {options['fixed_occupancy']}", flush=True)
    t_all = time.time()
    for fold in chosen:
        if fold in res["folds"] and not args.redo:
            print(f"{fold}: in {args.out} already (--redo refits)", flush=True)
            continue
        if args.time_budget is not None and time.time() - t_all > args.time_budget:
            print(f"time budget spent: {fold} not started", flush=True)
            continue
        print(f"{fold}: fitting", flush=True)
        out = run_fold(fold, rows, start, occ, options)
        res["folds"][fold] = out
        st = fold_stats(out, table)
        res["folds"][fold]["stats"] = st
        write_json_atomic(args.out, res)
        args.md.write_text(render_markdown(res))
        lo, tr = st["left_out"], st["train"]
        print(f"{fold}: {out['fit_seconds']:.0f} s; left out {out['left_out_rows']} rows: physics median "
              f"{pct(lo['physics']['all']['median_abs_err'])} p90 {pct(lo['physics']['all']['p90_abs_err'])}, map "
              f"median {pct(lo['map']['all']['median_abs_err'])} p90 {pct(lo['map']['all']['p90_abs_err'])}; train map "
              f"median {pct(tr['map']['all']['median_abs_err'])} p90 {pct(tr['map']['all']['p90_abs_err'])}", flush=True)
    ran = [f for f in chosen if f in res["folds"]]
    print(f"done in {time.time() - t_all:.0f} s; {args.out} holds {len(res['folds'])} folds ({len(ran)} of those asked)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
