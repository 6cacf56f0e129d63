"""A trace's requests longer than the model's context (issue 43, bad input): an engine serving the model refuses them
(prompt + max tokens past max_model_len), so tune skips them with a count, and a trace of nothing else is one error."""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest
from typer.testing import CliRunner

from decodecalc.cli import app
from decodecalc.errors import ConfigError
from decodecalc.traffic.traces import RequestTable, read_requests, within_context


def table(rows: list[tuple[float, int, int]], fmt: str = "native") -> RequestTable:
    return RequestTable(arrival_s=array("d", [r[0] for r in rows]), prompt_tokens=array("q", [r[1] for r in rows]),
                        output_tokens=array("q", [r[2] for r in rows]), records=array("q", range(2, len(rows) + 2)),
                        path="t.csv", format=fmt, has_arrivals=True, tokens_estimated=False, notes=("a note",))


def test_requests_past_the_context_are_skipped_and_counted():
    t = table([(0.0, 8000, 192), (0.5, 8000, 193), (1.0, 100, 10), (2.0, 9000, 5000)])
    got = within_context(t, 8192)
    assert list(got.rows()) == [(0.0, 8000, 192, 2), (1.0, 100, 10, 4)]  # 8,192 exactly is served
    assert got.notes == ("a note", "skipped 2 requests longer than the context, 8,192 tokens (the model's context "
                                   "length, or --max-model-len): prompt + output up to 14,000, which an engine "
                                   "refuses; the first at line 3: 8,000 prompt + 193 output tokens")
    assert within_context(t, 14_000) is t  # nothing past it: the same table
    first_out = within_context(table([(0.0, 9000, 1), (1.5, 5, 5), (2.0, 6, 6)], fmt="vllm-bench"), 100)
    assert list(first_out.arrival_s) == [0.0, 0.5]  # the earliest kept request is the new t=0
    assert "the first at record 2: 9,000 prompt + 1 output tokens" in first_out.notes[-1]


def test_a_trace_of_only_such_requests_is_one_error():
    with pytest.raises(ConfigError) as e:
        within_context(table([(0.0, 9000, 10), (1.0, 8190, 3)]), 8192)
    assert str(e.value) == ("t.csv: every request is longer than the context, 8,192 tokens (the model's context "
                            "length, or --max-model-len); the first at line 2: 9,000 prompt + 10 output tokens; an "
                            "engine serving it refuses them all (give --max-model-len if it serves a longer context)")
    with pytest.raises(ConfigError, match="context must be an integer >= 2 tokens, got 0"):
        within_context(table([(0.0, 1, 1)]), 0)


def test_tune_skips_them_and_max_model_len_moves_the_bound(tmp_path: Path):
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_tokens,output_tokens,arrival_s\n" + "".join(f"{500 + 7 * i},{20 + i},{i * 0.1}\n"
                                                                         for i in range(30))
                     + "9000,50,1.0\n")
    assert len(read_requests(trace)) == 31
    runner = CliRunner()
    args = ["tune", "-m", "llama3-8b", "--requests", str(trace), "--engine", "vllm"]
    r = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "native trace: 30 requests" in r.output and "skipped 1 request longer than the context, 8,192" in r.output
    r = runner.invoke(app, [*args, "--max-model-len", "16384"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "longer than the context" not in r.output, r.output
    only = tmp_path / "long.csv"
    only.write_text("prompt_tokens,output_tokens\n9000,50\n8500,10\n")
    r = runner.invoke(app, ["tune", "-m", "llama3-8b", "--requests", str(only)], env={"COLUMNS": "200"})
    assert r.exit_code == 1 and r.output.startswith(f"Error: {only}: every request is longer than the context")
    assert r.output.count("\n") == 1
