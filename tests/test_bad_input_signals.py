"""Issue 43, "Bad input": ``sweep -o s.csv`` killed by SIGTERM (or SIGHUP) while it writes leaves no temp file behind
(it left 51 MB), and exits 128 + the signal, as a shell reports a killed command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_a_sweep_killed_while_writing_leaves_no_temp_file(tmp_path: Path, signame: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "XDG_CONFIG_HOME"}
    # 1,048,576 points: the CSV takes a second or two to stream into its temp file
    proc = subprocess.Popen([sys.executable, "-m", "decodecalc", "sweep", "-b", "1:512", "-q", "-o", "s.csv"],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not _temps(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if proc.poll() is not None:
            pytest.skip("the sweep finished before its temp file could be caught")
        assert _temps(tmp_path), "no temp file appeared"
        proc.send_signal(getattr(signal, signame))
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + getattr(signal, signame), err[-500:]
    assert b"Traceback" not in err
    assert _temps(tmp_path) == [] and not (tmp_path / "s.csv").exists(), sorted(os.listdir(tmp_path))
