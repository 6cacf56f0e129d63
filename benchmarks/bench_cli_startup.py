"""`decodecalc grid --model llama3-8b --tp 8`, end to end, against a minimal typer command.

Target (issue 11, item 10): the grid command costs at most 1.25x the CPU time (user + system) of
a minimal typer command that reads a small YAML and prints one rich table: the least any CLI
built on the same three libraries pays for the same job. Both run as fresh processes,
alternating so that load on the machine hits both alike; the figures are medians. Also lists the
heavy modules (torch, triton, numpy, matplotlib, pydantic) that `--help` and `grid` import.

    python -m benchmarks.bench_cli_startup [--repeats 21]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

GRID = ["grid", "--model", "llama3-8b", "--tp", "8"]
TARGET = 1.25

# The baseline: a typer command with one argument and one option that reads a model YAML and
# prints it as one rich table. No decodecalc code.
BASELINE = """
import typer, yaml
from rich.console import Console
from rich.table import Table

app = typer.Typer()


@app.command()
def main(path: str, tp: int = typer.Option(1, "--tp")) -> None:
    data = yaml.safe_load(open(path).read())
    t = Table(title=f"{path} (TP={tp})")
    t.add_column("key")
    t.add_column("value")
    for k, v in data.items():
        t.add_row(str(k), str(v))
    Console().print(t)


app()
"""

HEAVY = ("torch", "triton", "numpy", "matplotlib", "pydantic")


def run(cmd: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``cmd`` in a fresh process."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), wall


def heavy_imports(args: list[str]) -> list[str]:
    code = ("import sys, io, contextlib; sys.argv=['decodecalc', *%r]\nfrom decodecalc.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main()\n    except SystemExit:\n        pass\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & set(%r)), file=sys.stderr)" % (args, HEAVY))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return json.loads(r.stderr.strip().splitlines()[-1].replace("'", '"'))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=21)
    a = ap.parse_args()
    exe = shutil.which("decodecalc", path=os.path.dirname(sys.executable)) or shutil.which("decodecalc")
    grid_cmd = [exe, *GRID] if exe else [sys.executable, "-m", "decodecalc", *GRID]
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    model_yaml = os.path.join(root, "model_configs", "llama3-8b.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "baseline.py")
        with open(script, "w") as f:
            f.write(BASELINE)
        base_cmd = [sys.executable, script, model_yaml, "--tp", "8"]
        run(grid_cmd), run(base_cmd)  # warm the page cache and bytecode
        grid, base = [], []
        for _ in range(a.repeats):
            grid.append(run(grid_cmd))
            base.append(run(base_cmd))
    gc, bc = statistics.median(c for c, _ in grid), statistics.median(c for c, _ in base)
    gw, bw = statistics.median(w for _, w in grid), statistics.median(w for _, w in base)
    import typer

    print(f"conditions: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, Python {sys.version.split()[0]}, "
          f"typer {typer.__version__}, {a.repeats} alternating runs, medians")
    print(f"baseline  typer command: read one YAML, print one rich table   CPU {bc * 1e3:6.1f} ms   wall {bw * 1e3:6.1f} ms")
    print(f"grid      {' '.join(['decodecalc', *GRID]):48s}  CPU {gc * 1e3:6.1f} ms   wall {gw * 1e3:6.1f} ms")
    print(f"ratio     CPU {gc / bc:.2f}x (target <= {TARGET}x), wall {gw / bw:.2f}x")
    for args in (["--help"], GRID):
        print(f"heavy modules imported by `decodecalc {' '.join(args)}`: {heavy_imports(args) or 'none'}")


if __name__ == "__main__":
    main()
