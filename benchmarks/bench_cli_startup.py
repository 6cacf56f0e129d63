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
    exe = shutil.which("decodecalc")
    grid_cmd = [exe, *GRID] if exe else [sys.executable, "-m", "decodecalc", *GRID]
    base_cmd = [sys.executable, "-c", "import typer, rich"]
    timed(grid_cmd), timed(base_cmd)  # warm the page cache and bytecode
    grid, base = [], []
    for _ in range(a.repeats):
        grid.append(timed(grid_cmd))
        base.append(timed(base_cmd))
    g, b = statistics.median(grid), statistics.median(base)
    print(f"conditions: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, Python {sys.version.split()[0]}, "
          f"{a.repeats} alternating runs, medians")
    print(f"baseline  python -c 'import typer, rich'        {b * 1e3:7.1f} ms")
    print(f"grid      {' '.join(['decodecalc', *GRID]):34s} {g * 1e3:7.1f} ms")
    print(f"ratio     {g / b:.2f}x   (target <= 1.5x)")
    for args in (["--help"], GRID):
        print(f"heavy modules imported by `decodecalc {' '.join(args)}`: {heavy_imports(args) or 'none'}")


if __name__ == "__main__":
    main()
