"""Arrivals for a trace without them (issue 43, item 5): ShareGPT gets a seeded Poisson process at --rate, by default
the rate that keeps --max-num-seqs running (Little's law), and says so on screen and in the JSON."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from decodecalc.api import load_workload
from decodecalc.batch.intervals import IntervalSteps
from decodecalc.errors import ConfigError
from decodecalc.traffic.arrivals import RATE_SEED, arrivals_of, busy_rate, poisson_arrivals
from decodecalc.traffic.requests import BatchingLimits, batching_intervals

SHAREGPT = "examples/traces/sharegpt.json"


def test_busy_rate_is_littles_law():
    limits = BatchingLimits(max_num_seqs=64)
    assert busy_rate([100, 300], limits) == pytest.approx(64 / (200 * limits.step_interval_s))


def test_poisson_arrivals_are_seeded_and_at_the_rate():
    a = poisson_arrivals(20_000, 50.0)
    assert list(a) == list(poisson_arrivals(20_000, 50.0)) and a[0] == 0.0
    gaps = np.diff(np.asarray(a))
    assert (gaps >= 0).all() and abs(gaps.mean() * 50.0 - 1) < 0.03
    assert list(poisson_arrivals(100, 50.0, seed=RATE_SEED + 1)) != list(a[:100])


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True])
def test_a_bad_rate_is_one_error(bad):
    with pytest.raises(ConfigError, match="--rate must be a positive number"):
        poisson_arrivals(10, bad)


def test_the_default_rate_keeps_max_num_seqs_running():
    """Requests of 200 output tokens at the busy rate for 32 sequences: while they arrive, the batch holds about
    32 (it would hold every request at once, then drain to 1, with all of them at t=0)."""
    n, limits = 3000, BatchingLimits(max_num_seqs=32)
    table = SimpleNamespace(output_tokens=[200] * n, has_arrivals=False, arrival_s=[0.0] * n)
    arrival, block, notes = arrivals_of(table, limits, None)
    assert block["given"] is False and block["rate_per_s"] == pytest.approx(32 / (200 * 0.025))
    assert "holds --max-num-seqs busy" in notes[0] and "max_num_seqs 32 / (mean output 200.0 tokens" in notes[0]
    steps = IntervalSteps.of(batching_intervals([500] * n, [200] * n, arrival, limits), "t")
    batch = steps.batch[len(steps.batch) // 10: len(steps.batch) // 2]  # after the ramp, before the drain
    assert 0.8 * 32 <= batch.mean() <= 32


def test_sharegpt_gets_arrivals_and_says_so():
    got = load_workload(requests=SHAREGPT)
    s = got.summary() if hasattr(got, "summary") else None
    assert s is not None and s["arrivals"]["kind"] == "poisson" and s["arrivals"]["given"] is False
    assert not any(n.startswith("no arrival times in the file: every request") for n in s["notes"])
    assert any("the rate that holds --max-num-seqs busy" in n for n in s["notes"])
    given = load_workload(requests=SHAREGPT, arrival_rate=2.0).summary()
    assert given["arrivals"]["rate_per_s"] == 2.0 and given["arrivals"]["given"] is True


def test_a_trace_with_arrivals_keeps_them_unless_a_rate_is_given():
    own = load_workload(requests="examples/traces/azure-code-2023.csv").summary()
    assert "arrivals" not in own
    forced = load_workload(requests="examples/traces/azure-code-2023.csv", arrival_rate=5.0).summary()
    assert forced["arrivals"]["replaced_file_arrivals"] is True
    assert any("the file's own arrival times are not used" in n for n in forced["notes"])


def test_rate_applies_to_a_request_file_only():
    with pytest.raises(ConfigError, match="--rate applies to a --requests file only"):
        load_workload(workload="chat", arrival_rate=3.0)


def test_the_cli_says_so_in_the_json():
    from typer.testing import CliRunner

    from decodecalc.cli import app

    res = CliRunner().invoke(app, ["tune", "--requests", SHAREGPT, "--engine", "sglang", "--heuristics", "none",
                                   "--rate", "4", "--json"])
    assert res.exit_code == 0, res.output
    wl = json.loads(res.stdout)["workload"]
    assert wl["arrivals"] == {"kind": "poisson", "rate_per_s": 4.0, "seed": RATE_SEED, "given": True,
                              "replaced_file_arrivals": False, "formula": None}
    assert math.isfinite(wl["steps"]) and wl["steps"] > 0


@pytest.mark.parametrize("gpu,model,grid,mode,max_seqs", [
    ("h200", "llama3-8b", None, "FULL_AND_PIECEWISE", 1024),
    ("h200", "llama3-8b", 64, "FULL_AND_PIECEWISE", 300),
    ("h100-sxm", "llama3.1-70b", 8, "PIECEWISE", 256),
    ("l4", "llama3-8b", 512, "NONE", 256),
])
def test_the_decode_shapes_bisected_are_every_batch_planned(gpu, model, grid, mode, max_seqs):
    """VllmRecipe plans a few batches of one-token decodes and fills the sizes between two that plan alike: the same
    shape (2D or 3D, segments, tile) as planning every size up to max_num_seqs (what made 3,000 ShareGPT requests
    plan 11,000 wide batches)."""
    from decodecalc.batch.launches import VllmRecipe
    from decodecalc.launchers.vllm_unified import VllmSettings
    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.specs.models import resolve_model
    from decodecalc.workload import make_workload

    settings = VllmSettings(min_launch_grid_size_2d=grid, cudagraph_mode=mode, max_num_seqs=max_seqs)
    work, g = make_workload(resolve_model(model), tp=8 if "70b" in model else 1), resolve_gpu(gpu)
    fast, slow = VllmRecipe(work, g, settings), VllmRecipe(work, g, settings)
    got = [fast.shape_of((1,) * b) for b in range(1, max_seqs + 1)]
    want = [slow._planned_shape((1,) * b) for b in range(1, max_seqs + 1)]
    assert got == want
    assert len(fast._plans) < max_seqs // 4  # planned a few batches only
    assert len({s.use_3d for s in want}) == 2 or grid is None  # the gate switches inside the range
