"""The exit-status table of the README ("Development"), through the real entry point (``python -m decodecalc``):
0 on success and when the reader closes the pipe early, 1 for a value that cannot be, 2 for a usage error, each
error one ``Error:`` line and never a traceback or a boxed panel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "decodecalc", *args], capture_output=True, text=True, cwd=ROOT,
                          env={"COLUMNS": "80", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, timeout=120)


@pytest.mark.parametrize("args, status, needle", [
    (["grid", "--system", "foo"], 2, "'foo' is not one of"),
    (["grid", "--bogus"], 2, "No such option: --bogus"),
    (["tune", "-w", "chat", "--objective", "p50"], 2, "--objective 'p50'; valid: mean, p99"),
    (["tune", "-w", "chat", "--engine", "foo"], 2, "--engine 'foo'"),
    (["grid", "-b", "0"], 1, "--batch must be a positive integer, got 0"),
    (["tune"], 1, "give exactly one workload"),
    (["tune", "-w", "chat", "--requests", "x.csv"], 1, "got --requests, --workload"),
])
def test_errors_are_one_line_with_the_rules_status(args, status, needle):
    r = run(args)
    assert r.returncode == status, r.stderr
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr and "╭" not in r.stderr


def test_usage_errors_point_at_the_commands_help():
    assert "(see decodecalc grid -h)" in run(["grid", "--bogus"]).stderr


@pytest.mark.parametrize("args", [["grid", "-m", "llama3-8b"], ["gpus"], ["grid", "-m", "llama3-8b", "--json"],
                                  ["recommend", "-m", "llama3.1-70b", "--tp", "8", "-b", "1", "-s", "131072"],
                                  ["grid", "-h"]])
def test_a_reader_that_stops_early_is_success(args):
    cmd = " ".join([sys.executable, "-m", "decodecalc", *args]) + " | head -n 1 > /dev/null"
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, cwd=ROOT,
                       env={"COLUMNS": "80", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""


def test_no_command_is_a_usage_error_with_the_help():
    r = run([])
    assert r.returncode == 2 and "Usage: " in r.stdout and "COMMAND" in r.stdout
