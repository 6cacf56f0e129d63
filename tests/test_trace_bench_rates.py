"""vLLM and SGLang benchmark results without start times (issue 43, bad input): a request rate that gives no arrivals
(0, negative, NaN, a text, true, null) is one error line, not every request silently at t=0."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from decodecalc.cli import app
from helpers import trace_error as error
from decodecalc.traffic.traces import read_requests




@pytest.mark.parametrize("rate, shown", [(0, "0"), (-2.5, "-2.5"), (float("nan"), "nan"), ("fast", "'fast'"),
                                         (True, "True"), (None, "None")])
@pytest.mark.parametrize("tool", ["vllm", "sglang"])
def test_bench_result_with_no_usable_rate_and_no_start_times(tmp_path, rate, shown, tool):
    marker = {"endpoint_type": "openai"} if tool == "vllm" else {"dataset_name": "random"}
    p = tmp_path / "r.json"
    p.write_text(json.dumps({**marker, "request_rate": rate, "input_lens": [5, 6], "output_lens": [3, 4]}))
    assert error(p) == (f"{p}, line 1, field 'request_rate': {shown} is not a request rate (a number > 0, or inf) "
                        "and the result has no start_times, so when its requests arrived is unknown; read the trace "
                        "the run replayed, or rerun the benchmark with a rate")
    p.write_text(json.dumps({**marker, "request_rate": "trace", "input_lens": [5], "output_lens": [3]}))
    assert "field 'request_rate': 'trace': the run replayed a trace's timestamps" in error(p)
    # with start_times the rate is not needed; inf and a positive rate keep their documented arrivals
    p.write_text(json.dumps({**marker, "request_rate": 0, "input_lens": [5, 6], "output_lens": [3, 4],
                             "start_times": [1.0, 1.5]}))
    assert list(read_requests(p, fmt=f"{tool}-bench").arrival_s) == [0.0, 0.5]
    for ok, arrivals in (("inf", [0.0, 0.0]), (2, [0.0, 0.5])):
        p.write_text(json.dumps({**marker, "request_rate": ok, "input_lens": [5, 6], "output_lens": [3, 4]}))
        assert list(read_requests(p).arrival_s) == arrivals


def test_bench_rate_error_through_the_cli(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"dataset_name": "random", "request_rate": 0, "input_lens": [5], "output_lens": [3]}))
    r = CliRunner().invoke(app, ["tune", "-m", "llama3-8b", "--requests", str(p)], env={"COLUMNS": "100"})
    assert r.exit_code == 1 and r.output.startswith(f"Error: {p}, line 1, field 'request_rate': 0 is not a request")
    assert r.output.count("\n") == 1
