"""BENCHMARKS.md's and docs/lab/'s tables, generated from the committed results.

    python -m benchmarks.tables           rewrite every generated table in place
    python -m benchmarks.tables --check   exit 1, naming each table whose text differs (tests/test_benchmarks_tables.py)

A generated table sits between ``<!-- NAME -->`` and ``<!-- /NAME -->``, NAME a key of ``TABLES``. Each generator reads
committed records only (benchmarks/results/, the packaged profiles) and renders them with the markdown function of the
script that wrote the record: no timing, no fit, no re-prediction, so the whole check takes seconds. Whether a record is
still what today's code computes is each script's own test (named beside each entry below); this module checks that the
documents show the records. A marker whose name is not in ``TABLES`` is an error, and so is a table that no document
shows, so a table can neither drift nor vanish unnoticed. The same run performs benchmarks/record_checks.py's checks of
the records themselves (complete, consistent, their reports what their rows give).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import record_checks

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BENCHMARKS = ROOT / "BENCHMARKS.md"
LAB = ROOT / "docs" / "lab"

#: a generated block: the opening marker, the table, the closing marker naming the same table
BLOCK = re.compile(r"<!-- ([a-z0-9-]+) -->\n(.*?)\n<!-- /\1 -->", re.S)
OPENING = re.compile(r"^<!-- ([a-z0-9-]+) -->$", re.M)


def _record(name: str) -> Any:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def expected_error() -> str:
    # benchmarks/expected_error.py --write; tests/test_expected_error.py checks the record is what compute() gives
    from benchmarks import expected_error as ee

    return ee.markdown(_record(ee.OUT_JSON.name))


def h100_expected_error() -> str:
    # the two packaged profiles' fit.expected_error blocks (tests/test_calibrate_h100.py recomputes the H100's)
    from benchmarks.score_gpu_workloads import expected_error_markdown
    from decodecalc.timemodel import packaged_profile

    return expected_error_markdown(packaged_profile("h100-sxm"), packaged_profile("h200"))


def gpu_workloads_h100() -> str:
    # benchmarks/score_gpu_workloads.py; tests/test_calibrate_h100.py re-predicts a run of it
    from benchmarks.score_gpu_workloads import OUT, markdown

    return markdown(_record(OUT.name))


def _backend_workloads(run: str) -> Callable[[], str]:
    # benchmarks/validate_backends_workload_h200.py --write; tests/test_backends_workload.py checks each summary is
    # what compare() gives under the shipped profile
    def render() -> str:
        from benchmarks.validate_backends_workload_h200 import table

        return table(_record(f"{run}-summary.json"))

    return render


def _script_record(module: str) -> Callable[[], str]:
    # scripts whose record is their OUT and whose table is markdown(OUT): each script's test recomputes the record
    def render() -> str:
        import importlib

        mod = importlib.import_module(f"benchmarks.{module}")
        return str(mod.markdown(_record(mod.OUT.name)))

    return render


def in_graph() -> str:
    # benchmarks/in_graph_compare.py; tests/test_in_graph.py checks the summary is what summary_of() gives
    from benchmarks.in_graph_compare import table

    return table(_record("in-graph-h200-summary.json")["backends"])


#: the goals for tune on large workloads (issue 17: wall seconds and peak resident megabytes; issue 43: the day of a
#: million requests in CPU seconds and memory, 3,000 ShareGPT conversations in 10 s), per bench_tune case
BENCH_TUNE_GOALS = {"chat-distinct": "10 s, 1 GB", "long-context-distinct": "10 s, 1 GB", "requests-500": "5 s",
                    "sharegpt-3000": "10 s", "day-1m-requests": "60 s CPU, 2 GB"}


def bench_tune() -> str:
    # benchmarks/bench_tune.py's record (one run of every case; the day's sampled run against every step measured)
    doc = _record("bench_tune.json")
    lines = ["| case | steps (distinct) | settings searched | wall / CPU time | peak memory | goal | "
             "every step timed exactly (`--exact`), scaled |", "|---|---|---|---|---|---|---|"]
    for name, c in doc["cases"].items():
        lines.append(f"| {name} | {c['steps']:,} ({c['distinct_shapes']:,}) | {c['candidates']} | {c['wall_s']:.1f} / "
                     f"{c['cpu_s']:.1f} s | {c['peak_rss_mb']:,} MB | {BENCH_TUNE_GOALS.get(name, '-')} | "
                     f"{c['exact_s_scaled']:,} s |")
    day = doc["day_sampled_vs_every_step"]
    lines.append(f"| day of {day['requests']:,} requests, every step measured | {day['steps']:,} | "
                 f"{day['candidates_compared']} | {day['every_step']['wall_s']:.0f} / {day['every_step']['cpu_s']:.0f} s "
                 f"| {day['every_step']['peak_rss_mb']:,.0f} MB | the sampled run's totals within "
                 f"{100 * day['max_total_difference']:.2f}% of it, picks {'the same' if day['picks_agree'] else 'differ'} "
                 "| - |")
    return "\n".join(lines)


#: tune's validations on the H200 (benchmarks/validate_tune_h200.py), each as its committed re-prediction with the
#: shipped profile (--repredict RUN --out RUN_compare.json): (run, what it replayed, what no fit saw, date of its data)
TUNE_VALIDATIONS = (
    ("fresh5", "Llama-3.1-8B TP1 and 70B TP8 on the chat, long-doc-qa and agentic presets, steps 1200-1399, measured "
     "after every change and no choice made after seeing it", "the steps (the residual map was built from earlier steps "
     "of the same presets: in sample for it)", "2026-11-30"),
    ("heldout", "the same models on code completion and a long-prompt mix, and Qwen2.5-72B TP8", "the workloads",
     "2026-11-30"),
    ("range", "every setting of both engines' whole range (to 4,096 segments, 2,048 splits) on a long-context mix and the "
     "Azure 2023 conversation trace", "the workloads, and every setting above 64 splits", "2026-12-01"),
    ("layouts", "Qwen2.5-7B, Llama-3.2-1B and Gemma-3-27B TP2 on code completion", "the models' head layouts",
     "2026-12-01"),
    ("layouts2", "Qwen2.5-7B, Llama-3.2-1B, Gemma-3-27B TP2 and Qwen3-30B-A3B on chat and a long-prompt mix",
     "the models' head layouts", "2026-12-01"),
    ("layouts3", "Qwen3-32B, Llama-3-405B TP8, Mistral-Large TP8 and Gemma-2-9B on chat and a long-prompt mix",
     "the models' head layouts", "2026-12-02"),
)


def tune_validations() -> str:
    # the committed comparisons; tests/test_tune_validation.py checks they are today's re-predictions
    lines = ["| run | replayed | what no fit saw | totals within 5% | median / worst error | picks within 3% | data |",
             "|---|---|---|---|---|---|---|"]
    for run, what, unseen, date in TUNE_VALIDATIONS:
        c = _record(f"validate_tune_h200_{run}_compare.json")
        lines.append(f"| `{run}` | {what} | {unseen} | {c['within_5pct']} / {c['settings']} | "
                     f"{100 * c['median_abs_error']:.1f}% / {100 * c['max_abs_error']:.1f}% | "
                     f"{c['picks_within_3pct']} / {c['engines']} | {date} |")
    return "\n".join(lines)


def measure_tune() -> str:
    # benchmarks/measure_tune.py's committed runs of tune --measure (tests/test_tune_measure.py tests the summary)
    from benchmarks.measure_tune import markdown

    return markdown()


TABLES: dict[str, Callable[[], str]] = {
    "measure-tune-h100": measure_tune,
    "tune-validations": tune_validations,
    "bench-tune": bench_tune,
    "expected-error": expected_error,
    "h100-expected-error": h100_expected_error,
    "gpu-workloads-h100": gpu_workloads_h100,
    "backends-workload": _backend_workloads("validate-backends-workload-h200"),
    "backends-workload-2": _backend_workloads("validate-backends-workload-h200-run2"),
    "backends-workload-3": _backend_workloads("validate-backends-workload-h200-run3"),
    "backends-workload-fp8": _backend_workloads("validate-backends-workload-h200-fp8"),
    "backends-workload-fp8-2": _backend_workloads("validate-backends-workload-h200-fp8-run2"),
    "calibrate-map": _script_record("calibrate_map_experiment"),
    "calibrate-backends": _script_record("calibrate_backends_h200"),
    "spill-fit": _script_record("spill_fit_h100"),
    "flashinfer-ctas": _script_record("flashinfer_wide_ctas"),
    "cuda-core-step-rule": _script_record("cuda_core_step_rule"),
    "flashinfer-small-groups": _script_record("flashinfer_small_groups"),
    "backend-steps-alone": _script_record("backend_steps_alone_h200"),
    "fp8-backends": _script_record("fit_backends_fp8_h200"),
    "in-graph": in_graph,
    # recomputed from the rows by benchmarks/record_checks.py's own statistics (not the fitting script's)
    "leaveout-layouts": lambda: record_checks.leaveout_table(("layout",)),
    "leaveout-workloads": lambda: record_checks.leaveout_table(("preset", "model")),
    "leaveout-same-rows": record_checks.leaveout_same_rows_table,
}

#: blocks that predate this generator and are checked row by row by their own tests (no markdown function renders
#: them whole): left as they are here
CHECKED_ELSEWHERE = frozenset({"gpu-transfer-h100", "steps-in-sequence", "calibrate-workload"})


def documents() -> list[Path]:
    return [BENCHMARKS, *sorted(LAB.glob("*.md"))]


def regenerate(text: str, where: str, cache: dict[str, str | None]) -> tuple[str, list[str]]:
    """``text`` with every generated block rewritten, and what was wrong (unknown or unclosed markers, a table whose
    record cannot be read: that block is left as it is)."""
    problems = []
    for name in OPENING.findall(text):
        if name not in TABLES and name not in CHECKED_ELSEWHERE:
            problems.append(f"{where}: <!-- {name} --> names no table of benchmarks/tables.py")
        elif f"<!-- /{name} -->" not in text:
            problems.append(f"{where}: <!-- {name} --> is never closed")

    def body(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in TABLES:
            return m.group(0)
        if name not in cache:
            try:
                cache[name] = TABLES[name]().strip("\n")
            except (OSError, KeyError, ValueError) as e:  # a record missing or not of its script's form
                problems.append(f"table {name} cannot be rendered from its record: {type(e).__name__}: {e}")
                cache[name] = None
        body = cache[name]
        return m.group(0) if body is None else f"<!-- {name} -->\n{body}\n<!-- /{name} -->"

    return BLOCK.sub(body, text), problems


def run(check: bool, paths: Sequence[Path] | None = None) -> list[str]:
    """Rewrite (or, with ``check``, compare) every document's generated tables; returns the problems found, with those
    of benchmarks/record_checks.py's checks of the records when every document is read."""
    cache: dict[str, str | None] = {}
    problems: list[str] = []
    shown: set[str] = set()
    for path in paths if paths is not None else documents():
        text = path.read_text(encoding="utf-8")
        where = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        new, found = regenerate(text, where, cache)
        problems += found
        shown.update(m.group(1) for m in BLOCK.finditer(text))
        if new == text:
            continue
        if check:
            old = {m.group(1): m.group(2) for m in BLOCK.finditer(text)}
            stale = [n for n, b in old.items() if n in TABLES and cache[n] is not None and b != cache[n]]
            problems.append(f"{where}: stale table(s) {', '.join(stale)}: run python -m benchmarks.tables")
        elif found:
            continue  # an unknown marker or an unreadable record: write nothing until it is mended
        else:
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(new, encoding="utf-8")
            tmp.replace(path)  # atomic: a reader never sees half a document
    if paths is None:
        problems += [f"table {n} is shown by no document" for n in TABLES if n not in shown]
        problems += record_checks.run()
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs from its record")
    args = ap.parse_args(argv)
    problems = run(check=args.check)
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
