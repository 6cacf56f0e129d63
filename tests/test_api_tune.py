"""decodecalc.tune(...) returns what `decodecalc tune ... --json` prints; in-memory workloads; errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import decodecalc
from decodecalc.cli import app
from decodecalc.errors import ConfigError, UnknownNameError
from decodecalc.traffic import DecodeStep, Request

runner = CliRunner()
RAMP = "examples/workloads/long-context-ramp.jsonl"
REQUESTS = "examples/workloads/requests.csv"
SPEC = "examples/workloads/spec-decode-steps.csv"


def cli_json(*args: str) -> dict:
    r = runner.invoke(app, ["tune", *args, "--json"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


# (CLI arguments, the same call in Python)
TUNE = [
    (["--workload", "code-completion", "--engine", "sglang", "--heuristics", "sglang-pr35801"],
     dict(workload="code-completion", engine="sglang", heuristics=["sglang-pr35801"])),
    (["--workload", "chat", "-c", "16", "--model", "qwen3-8b", "--objective", "p99", "--heuristics", "none"],
     dict(workload="chat", concurrency=16, model="qwen3-8b", objective="p99", heuristics="none")),
    (["--steps", RAMP, "--max-regression", "none", "--tp", "2", "--model", "llama3-70b"],
     dict(steps=RAMP, max_regression=None, tp=2, model="llama3-70b")),
    (["--requests", REQUESTS, "--max-num-seqs", "8", "--max-num-batched-tokens", "4096", "--engine", "vllm",
      "--max-regression", "10%"],
     dict(requests=REQUESTS, max_num_seqs=8, max_num_batched_tokens=4096, engine="vllm", max_regression=0.10)),
    (["--steps", SPEC, "--num-speculative-tokens", "3", "--heuristics", "none", "--no-cuda-graph"],
     dict(steps=SPEC, num_speculative_tokens=3, heuristics=[], cuda_graph=False)),
    (["--requests", REQUESTS, "--num-speculative-tokens", "3", "--draft-acceptance-rate", "0.6", "--engine", "vllm"],
     dict(requests=REQUESTS, num_speculative_tokens=3, draft_acceptance_rate=0.6, engine="vllm")),
    (["--workload", "long-doc-qa", "--num-speculative-tokens", "2", "--heuristics", "vllm-bound"],
     dict(workload="long-doc-qa", num_speculative_tokens=2, heuristics="vllm-bound")),
]


@pytest.mark.parametrize("args, kwargs", TUNE)
def test_tune_to_dict_equals_json(args, kwargs):
    got = decodecalc.tune(**kwargs)
    assert got.to_dict() == cli_json(*args)
    for name, e in got.engines.items():  # typed: the same numbers as the dict
        d = got.to_dict()["engines"][name]
        assert e.best.stats.mean_step_s == d["best"]["mean_step_s"] and e.best.label == d["best"]["label"]


def test_tune_with_a_rule_file(tmp_path):
    rule = tmp_path / "rule.py"
    rule.write_text("def splits(step):\n    return [max(1, min(16, L // 4096)) for L in step.seq_lens]\n")
    got = decodecalc.tune(steps=RAMP, engine="sglang", heuristics="sglang-bound", rule=rule).to_dict()
    assert got == cli_json("--steps", RAMP, "--engine", "sglang", "--heuristics", "sglang-bound", "--rule", str(rule))
    assert [h["name"] for h in got["heuristics"]] == ["sglang-bound", "user-splits"]


def test_in_memory_steps_equal_the_file():
    """A list of steps (lists of KV lengths, mappings, DecodeSteps) tunes as the same steps in a file do."""
    lines = [json.loads(x) for x in open(RAMP) if x.strip()]
    from_file = decodecalc.tune(steps=RAMP, heuristics="none").to_dict()
    mixed = [rec if i % 3 == 0 else (rec["seq_lens"] if "weight" not in rec else
                                     DecodeStep(seq_lens=tuple(rec["seq_lens"]), query_lens=(1,) * len(rec["seq_lens"]),
                                                weight=rec["weight"]))
             for i, rec in enumerate(lines)]
    from_list = decodecalc.tune(steps=mixed, heuristics="none").to_dict()
    assert from_list["workload"]["source"] == "steps"
    from_file["workload"]["source"] = from_list["workload"]["source"] = None
    drop = ("example",)  # where the most-changed step came from: "file, line n" against "steps[i]"
    for d in (from_file, from_list):
        for e in d["engines"].values():
            for k in ("biggest_gain", "biggest_loss"):
                if e["steps"][k]:
                    for x in drop:
                        e["steps"][k].pop(x)
    assert from_list == from_file


def test_in_memory_requests_equal_the_file(tmp_path):
    reqs = [{"prompt_tokens": 3000, "output_tokens": 40, "arrival_s": 0.0},
            Request(prompt_tokens=8000, output_tokens=30, arrival_s=0.1),  # within llama3-8b's 8,192: a file's
            {"prompt_tokens": 500, "output_tokens": 60}]                  # longer requests are skipped (the engine's rule)
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(json.dumps(r if isinstance(r, dict) else {"prompt_tokens": r.prompt_tokens,
                                                                       "output_tokens": r.output_tokens,
                                                                       "arrival_s": r.arrival_s}) for r in reqs))
    a = decodecalc.tune(requests=reqs, heuristics="none", engine="vllm").to_dict()
    b = decodecalc.tune(requests=f, heuristics="none", engine="vllm").to_dict()
    assert a["workload"]["source"] == "requests" and b["workload"]["source"] == str(f)
    assert a["workload"]["generated_tokens"] == (40 - 1) + (30 - 1) + (60 - 1)  # O - 1 decode steps each
    a["workload"]["source"] = b["workload"]["source"] = None
    a["workload"]["notes"] = b["workload"]["notes"] = None
    for d in (a, b):
        for k in ("biggest_gain", "biggest_loss"):
            if d["engines"]["vllm"]["steps"][k]:
                d["engines"]["vllm"]["steps"][k].pop("example")
    assert a == b


@pytest.mark.parametrize("kwargs, exc, needle", [
    (dict(), ConfigError, "exactly one workload"),
    (dict(steps=RAMP, workload="chat"), ConfigError, "exactly one workload"),
    (dict(workload="chatty"), UnknownNameError, "chatty"),
    (dict(steps=[[10, 20], [5, 0]]), ConfigError, "steps[1], field 'seq_lens': lengths must be >= 1"),
    (dict(steps=[]), ConfigError, "empty"),
    (dict(steps=[{"seq_lens": [10], "weight": 0}]), ConfigError, "steps[0], field 'weight'"),
    (dict(requests=[{"prompt_tokens": 10}]), ConfigError, "requests[0], field 'output_tokens': missing"),
    (dict(steps="x.jsonl"), ConfigError, "x.jsonl: no such file"),
    (dict(steps=RAMP, heuristics=["nope"]), UnknownNameError, "nope"),
    (dict(steps=RAMP, objective="median"), ConfigError, "--objective"),
    (dict(steps=RAMP, engine="trt"), ConfigError, "--engine"),
    (dict(steps=RAMP, max_regression="lots"), ConfigError, "--max-regression"),
])
def test_tune_errors_are_domain_exceptions(kwargs, exc, needle):
    with pytest.raises(exc) as info:
        decodecalc.tune(**kwargs)
    assert needle in str(info.value)


def test_tune_rejects_step_options():
    with pytest.raises(TypeError):
        decodecalc.tune(steps=RAMP, batch=4)  # type: ignore[call-arg]  # the workload gives the batches
