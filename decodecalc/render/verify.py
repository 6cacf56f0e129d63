"""`verify`: the warnings and progress bar on stderr, then one section row per run (its splits, error, time and
status) and one row per kernel launch, predicted against observed; fits 80 columns under the interpreter."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from decodecalc.formatting import fmt_count_list, fmt_grid_x

if TYPE_CHECKING:
    from decodecalc.verify.environment import Environment
    from decodecalc.verify.results import RunResult
    from decodecalc.workload import Workload


def stderr() -> Console:
    """verify's stderr console: warnings and the progress bar (soft-wrapped, no highlighting)."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_warning(err: Console, text: str) -> None:
    err.print(f"[yellow]Warning:[/] {escape(text)}")


def print_fallback(err: Console, system: str, why: str) -> None:
    """``system`` runs decodecalc's reference kernels (auto mode: no upstream sources found)."""
    err.print(f"[yellow]Note:[/] {system}: running decodecalc's reference kernels: {escape(why)}")


def print_skipped(err: Console, system: str, why: str) -> None:
    err.print(f"[yellow]Skipped {system}:[/] {escape(why)}")


@contextmanager
def progress_bar(err: Console, total: int, *, disable: bool) -> Iterator[Callable[[str, int], None]]:
    """A transient bar on stderr; yields ``update(label, runs_done)``; completes the bar when the block ends."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=err, transient=True, disable=disable) as prog:
        task = prog.add_task("verify", total=total)

        def update(label: str, done: int) -> None:
            prog.update(task, description=f"running {label}", completed=done)

        yield update
        prog.update(task, completed=total)


def _pair(predicted: str, observed: str) -> str:
    """One value when prediction and observation agree, else both, in red."""
    return predicted if predicted == observed else f"[red]{predicted} != {observed}[/]"


def _splits(xs: Sequence[int]) -> str:
    return fmt_count_list(xs, width=24)


def _styled(text: str, style: str) -> str:
    return f"[{style}]{text}[/]" if style else text


STATUS = {"ok": "[green]ok[/]", "mismatch": "[bold red]MISMATCH[/]", "error": "[bold red]ERROR[/]"}


def _header(console: Console, work: Workload, env: Environment, ran: Mapping[str, Sequence[str]],
            fallback: Mapping[str, str], notes: Sequence[str]) -> None:
    dev = f"{env.gpu_name} ({env.sm_count} SMs)" if env.device == "cuda" else "CPU (Triton interpreter)"
    console.print(f"[bold]verify[/] {work.model.name} tp={work.tp}: B={work.batch}, h={work.num_heads}, "
                  f"h_kv={work.num_kv_heads}, d={work.head_size}, {work.dtype}, block {work.block_size}", highlight=False)
    console.print(f"  on {dev}; torch {env.torch}, triton {env.triton}", highlight=False, markup=False)
    for k, sources in ran.items():
        what = " + ".join(f"upstream {env.versions.get(k, '?')}" if r == "upstream"
                          else "reference kernels" if len(sources) > 1 else "decodecalc's reference kernels"
                          for r in sources)
        why = " (no upstream sources found)" if k in fallback else ""
        console.print(f"  {k}: {what}{why}", highlight=False, markup=False)
    for n in notes:
        console.print(f"  note: {n}", highlight=False, markup=False)


def _table(results: Sequence[RunResult], timed: bool) -> Table:
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold")
    cols = ["run / kernel", "grid", "working", "splits (live)", "max err"]
    if timed:
        cols += ["us", "GB/s (%HBM)", "roofline us"]
    cols.append("status")
    for col in cols:
        t.add_column(col, overflow="fold", no_wrap=col not in ("splits (live)", "status"))
    for r in results:
        sp = _pair(_splits(r.splits_predicted), _splits(r.splits_observed))
        if r.nonempty_predicted or r.nonempty_observed:
            sp += " (" + _pair(_splits(r.nonempty_predicted), _splits(r.nonempty_observed)) + ")"
        e = r.error.get("max_err_vs_max") if r.error else None
        es = "-" if e is None else _styled(f"{e:.1e}", "" if r.error_ok else "red")
        status = STATUS[r.status]
        if r.status == "error":
            status += f" {escape(r.message)}"
        label = f"{r.system} {r.version}" if r.source == "upstream" else f"{r.system} ref"
        row = [f"[bold]{escape(label)}[/]", "", "", sp, es]
        if timed:
            tu = r.timing.get("t_us") if r.timing else None
            row += ["-" if tu is None else f"{tu:.1f}",
                    "-" if r.gbps is None else f"{r.gbps:.0f} ({100 * (r.bandwidth_fraction or 0):.0f}%)",
                    "-" if r.roofline_us is None else f"{r.roofline_us:.1f}"]
        t.add_row(*row, status)
        for c in r.launches:
            t.add_row(f" {escape(c.kernel)}", _pair(fmt_grid_x(c.predicted_grid), fmt_grid_x(c.observed_grid)),
                      _pair(str(c.predicted_working), str(c.observed_working)), *[""] * (len(cols) - 3))
    return t


def print_verify(results: Sequence[RunResult], work: Workload, env: Environment, *,
                 ran: Mapping[str, Sequence[str]], fallback: Mapping[str, str], notes: Sequence[str] = (),
                 predicted: Mapping[str, float] | None = None, console: Console | None = None) -> None:
    """The runs of one decode step (on a default rich console unless one is given)."""
    console = console or Console()
    _header(console, work, env, ran, fallback, notes)
    timed = any(r.timing and r.timing.get("t_us") for r in results)
    console.print(_table(results, timed))
    if predicted:
        console.print("predicted time (decodecalc time model): "
                      + ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in predicted.items()), highlight=False)
    if not timed and results:
        console.print("not timed (" + (results[0].timing or {}).get("note", "") + ")", highlight=False)
    ok = all(r.ok for r in results)
    console.print("[green]all launches match the prediction[/]" if ok else
                  "[bold red]mismatch or failed run: see the red cells (predicted != observed)[/]")


def _head(xs: Any, n: int = 8) -> str:
    xs = list(xs)
    return "[" + ", ".join(map(str, xs[:n])) + (f", ... ({len(xs)})" if len(xs) > n else "") + "]"


def print_profiled(backend: str, env: Environment, rec: Mapping[str, Any], ok: bool,
                   console: Console | None = None) -> None:
    """``--system flashinfer|fa3|...``: the launches the CUDA profiler captured, one line each."""
    console = console or Console()
    console.print(f"[bold]verify[/] {escape(backend)} on {escape(env.gpu_name)} (CUDA profiler)", highlight=False)
    for row in rec.get("kernels", []):
        console.print("  " + ", ".join(f"{k}: {v}" for k, v in row.items()), highlight=False, markup=False)
    check = rec.get("splits_check")
    if check:  # FA3's persistent grid hides the split counts: its prepare kernel's are read back
        console.print(f"  splits per request (scheduler metadata): predicted {_head(check['predicted'])}, measured "
                      f"{_head(check['measured'])}, match: {check['match']}", highlight=False, markup=False)
    console.print("[green]all launches match the prediction[/]" if ok else
                  "[bold red]mismatch or no prediction: see --json[/]")
