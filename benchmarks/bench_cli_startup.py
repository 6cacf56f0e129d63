"""`decodecalc grid --model llama3-8b --tp 8`, end to end, against `python -c "import typer, rich"`.

Target (issue 2): the grid command costs at most 1.5x the bare import of its CLI libraries,
measured in the same run. Runs alternate so load on the machine hits both alike; the
figure is the ratio of medians. Also checks that neither --help nor grid imports torch/triton.

    python benchmarks/bench_cli_startup.py [--repeats 21]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

GRID = ["grid", "--model", "llama3-8b", "--tp", "8"]
# What the three required libraries cost on their own for this job: import typer, parse one
# model YAML, and print a 16-row rich table. No decodecalc code; a floor for the grid command.
FLOOR = """
import sys, typer, yaml
from rich.console import Console
from rich.table import Table
yaml.safe_load(open(sys.argv[1]).read())
t = Table(title="floor")
t.add_column("a"); t.add_column("b"); t.add_column("c")
for i in range(16):
    t.add_row(f"row {i}", f"value {i} " * 4, f"value {i} " * 4)
Console().print(t)
"""


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def heavy_imports(args: list[str]) -> list[str]:
    code = ("import sys; sys.argv=['decodecalc', *%r]\nfrom decodecalc.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'triton', 'numpy', 'matplotlib') if m in sys.modules), file=sys.stderr)"
            % (args,))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return json.loads(r.stderr.strip().splitlines()[-1].replace("'", '"'))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=21)
    a = ap.parse_args()
    exe = shutil.which("decodecalc", path=os.path.dirname(sys.executable)) or shutil.which("decodecalc")
    grid_cmd = [exe, *GRID] if exe else [sys.executable, "-m", "decodecalc", *GRID]
    base_cmd = [sys.executable, "-c", "import typer, rich"]
    model_yaml = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model_configs", "llama3-8b.yaml")
    floor_cmd = [sys.executable, "-c", FLOOR, model_yaml]
    timed(grid_cmd), timed(base_cmd), timed(floor_cmd)  # warm the page cache and bytecode
    grid, base, floor = [], [], []
    for _ in range(a.repeats):
        grid.append(timed(grid_cmd))
        base.append(timed(base_cmd))
        floor.append(timed(floor_cmd))
    g, b, f = statistics.median(grid), statistics.median(base), statistics.median(floor)
    print(f"conditions: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, Python {sys.version.split()[0]}, "
          f"{a.repeats} alternating runs, medians")
    print(f"baseline  python -c 'import typer, rich'        {b * 1e3:7.1f} ms")
    print(f"grid      {' '.join(['decodecalc', *GRID]):34s} {g * 1e3:7.1f} ms")
    print(f"floor     typer + one YAML + a 16-row rich table   {f * 1e3:7.1f} ms  ({f / b:.2f}x the baseline)")
    print(f"ratio     {g / b:.2f}x   (target <= 1.5x); grid over the floor {g / f:.2f}x")
    for args in (["--help"], GRID):
        print(f"heavy modules imported by `decodecalc {' '.join(args)}`: {heavy_imports(args) or 'none'}")


if __name__ == "__main__":
    main()
