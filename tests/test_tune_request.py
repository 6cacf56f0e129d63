"""tune's request, plan and runner without the CLI (issue 44, item 6): a TuneRequest refuses each bad or conflicting
option with the message the command prints, plan_for resolves the model, GPU and engine options, and the runner reads
the workload, searches it and writes the outputs, reporting its progress to a list."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import decodecalc
from decodecalc.api import load_workload
from decodecalc.commands.tune_run import TuneRun, prepare, run_tune, write_outputs
from decodecalc.errors import ChoiceError, ConfigError, DecodecalcError, UnknownNameError
from decodecalc.reports.tune_request import (MeasureOptions, SearchOptions, ServingOptions, TuneRequest, TuneTraffic,
                                             plan_for)
from helpers import modules_loaded_by

RAMP = Path("examples/workloads/long-context-ramp.jsonl")
REQUESTS = Path("examples/workloads/requests.csv")
CHAT = TuneTraffic(workload="chat")
SMALL = TuneTraffic(workload="mix:prompt=3000,output=120,steps=60")
GIVE_ONE = "give exactly one workload: --steps FILE, --requests FILE, --workload NAME or --metrics FILE|URL"

# (request options, the error's type, the whole message): each check the command made inline, or made through
# load_workload and tune_for once the workload was read, in the words docs and tests quote
CONFLICTS = [
    (dict(traffic=CHAT, measure=MeasureOptions(measure=True, measured=Path("m.json"))), ConfigError,
     "--measure with --measured: either time on this GPU or read saved timings"),
    (dict(traffic=CHAT, measure=MeasureOptions(save=Path("t.json"))), ConfigError,
     "--save-measurements applies to --measure"),
    (dict(), ConfigError, GIVE_ONE),
    (dict(traffic=TuneTraffic(steps=RAMP, workload="chat")), ConfigError, GIVE_ONE + " (got --steps, --workload)"),
    (dict(traffic=TuneTraffic(requests=REQUESTS, metrics="m.txt")), ConfigError,
     GIVE_ONE + " (got --requests, --metrics)"),
    (dict(traffic=TuneTraffic(steps=RAMP, concurrency=8)), ConfigError,
     "--concurrency applies to --workload and --metrics only (a trace has its own batches)"),
    (dict(traffic=TuneTraffic(steps=RAMP, draft_acceptance_rate=0.6), serving=ServingOptions(num_speculative_tokens=2)),
     ConfigError, "--draft-acceptance-rate applies to --requests, --workload and --metrics (a step trace has its own "
                  "query_lens)"),
    (dict(traffic=TuneTraffic(workload="chat", draft_acceptance_rate=0.6)), ConfigError,
     "--draft-acceptance-rate needs --num-speculative-tokens k > 0"),
    (dict(traffic=TuneTraffic(workload="chat", trace_format="azure")), ConfigError,
     "--format applies to a --requests file only"),
    (dict(traffic=TuneTraffic(steps=RAMP, tokenizer=Path("tok.json"), max_requests=3)), ConfigError,
     "--tokenizer applies to a --requests file only"),
    (dict(traffic=TuneTraffic(workload="chat", rate=3.0)), ConfigError, "--rate applies to a --requests file only"),
    (dict(traffic=TuneTraffic(workload="chat", metrics_model="llama")), ConfigError,
     "--metrics-model applies to --metrics only"),
    (dict(traffic=CHAT, search=SearchOptions(objective="median")), ChoiceError,
     "--objective 'median'; valid: mean, p99"),
    (dict(traffic=CHAT, search=SearchOptions(engine="trt")), ChoiceError,
     "--engine 'trt'; valid: vllm, sglang, trtllm"),
    (dict(traffic=CHAT, search=SearchOptions(max_regression="lots")), ConfigError,
     "--max-regression 'lots': give a percentage such as 5% (or none)"),
    (dict(traffic=CHAT, search=SearchOptions(max_regression="5")), ConfigError,
     "--max-regression '5': as a fraction it must be <= 1; did you mean 5%?"),
    (dict(traffic=CHAT, search=SearchOptions(heuristics="none,")), ConfigError,
     "--heuristics 'none,' has an empty item; give a comma list, e.g. vllm-default or none"),
    (dict(traffic=CHAT, search=SearchOptions(max_shapes=0)), ConfigError,
     "--max-shapes must be a positive integer, got 0"),
]


@pytest.mark.parametrize("options, exc, message", CONFLICTS, ids=[c[2][:48] for c in CONFLICTS])
def test_each_conflict_is_refused_on_construction_with_its_message(options, exc, message):
    with pytest.raises(exc) as info:
        TuneRequest(**options)
    assert type(info.value) is exc and str(info.value) == message


def test_an_unknown_heuristic_is_refused_by_name():
    with pytest.raises(UnknownNameError, match="vllm-bogus"):
        TuneRequest(traffic=CHAT, search=SearchOptions(heuristics="vllm-default,vllm-bogus"))


def test_the_first_problem_is_the_error():
    # measurement before traffic before search: the order the command always checked them in
    with pytest.raises(ConfigError, match="^--save-measurements applies"):
        TuneRequest(measure=MeasureOptions(save=Path("t.json")), search=SearchOptions(objective="x"))
    with pytest.raises(ConfigError, match="^give exactly one workload"):
        TuneRequest(search=SearchOptions(objective="x"))


TRAFFIC = [c for c in CONFLICTS if set(c[0]) <= {"traffic", "serving"}]
SEARCH = [c for c in CONFLICTS if "search" in c[0]]


@pytest.mark.parametrize("options, exc, message", TRAFFIC, ids=[c[2][:48] for c in TRAFFIC])
def test_the_python_api_refuses_the_same_traffic_in_the_same_words(options, exc, message):
    t = options.get("traffic", TuneTraffic())
    k = options.get("serving", ServingOptions()).num_speculative_tokens
    with pytest.raises(exc) as info:
        load_workload(steps=t.steps, requests=t.requests, workload=t.workload, metrics=t.metrics,
                      concurrency=t.concurrency, draft_acceptance_rate=t.draft_acceptance_rate,
                      num_speculative_tokens=k, trace_format=t.trace_format, columns=t.columns,
                      tokenizer=str(t.tokenizer) if t.tokenizer else None, max_requests=t.max_requests,
                      arrival_rate=t.rate, metrics_model=t.metrics_model)
    assert str(info.value) == message


@pytest.mark.parametrize("options, exc, message", SEARCH, ids=[c[2][:48] for c in SEARCH])
def test_the_python_api_refuses_the_same_search_in_the_same_words(options, exc, message):
    s = options["search"]
    with pytest.raises(exc) as info:
        decodecalc.tune(steps=str(RAMP), objective=s.objective, max_regression=s.max_regression, engine=s.engine,
                        heuristics=s.heuristics, max_shapes=s.max_shapes)
    assert str(info.value) == message


def test_a_request_is_frozen_and_keyword_only():
    req = TuneRequest(traffic=CHAT)
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.json_out = True  # type: ignore[misc]
    with pytest.raises(TypeError):
        TuneRequest(CHAT)  # type: ignore[misc]
    # a replaced request is checked again
    with pytest.raises(ConfigError, match="--concurrency applies"):
        dataclasses.replace(req, traffic=TuneTraffic(steps=RAMP, concurrency=4))


def test_the_request_module_and_runner_import_no_presentation_library():
    code = "import decodecalc.reports.tune_request, decodecalc.commands.tune_run"
    assert modules_loaded_by(code, packages=("typer", "rich", "click", "torch", "matplotlib")) == []


# ---- the plan


def test_the_plan_resolves_the_model_gpu_and_engine_options():
    plan = plan_for(TuneRequest(traffic=CHAT, serving=ServingOptions(model="llama3-70b", tp=8, gpu="h100",
                                                                     num_speculative_tokens=3)))
    work = plan.inputs.work
    assert work.model.name == "llama3-70b" and work.num_kv_heads == 1  # 8 KV heads over TP 8
    assert plan.inputs.gpu.name == "h100-sxm"
    assert work.max_seqlen_q == 4  # the base shape: 1 + k tokens per sequence
    assert plan.context_len == work.model.context_length
    capped = plan_for(TuneRequest(traffic=CHAT, serving=ServingOptions(max_model_len=4096)))
    assert capped.context_len == 4096


def test_a_bad_model_fails_in_the_plan_not_the_request():
    req = TuneRequest(traffic=CHAT, serving=ServingOptions(model="no-such-model-xyz"))
    with pytest.raises(DecodecalcError, match="no-such-model-xyz"):
        plan_for(req)


# ---- the runner


def test_prepare_checks_the_measured_file_then_the_outputs(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(ConfigError, match=f"^--measured {missing}: no such file$"):
        prepare(TuneRequest(traffic=CHAT, measure=MeasureOptions(measured=missing),
                            output=tmp_path / "absent" / "out.json"))
    out = tmp_path / "absent" / "out.json"
    with pytest.raises(ConfigError, match=r"\(--output\): folder .* does not exist"):
        prepare(TuneRequest(traffic=CHAT, output=out))


def test_the_runner_carries_the_options_through_and_reports_progress():
    seen: list[str] = []
    search = SearchOptions(engine="sglang", objective="p99", heuristics="none", max_regression="none")
    run = run_tune(prepare(TuneRequest(traffic=SMALL, search=search)), progress=seen.append)
    assert seen[0] == "reading the workload" and len(seen) > 1
    data = run.to_dict()
    assert run.measured is None and "measured" not in data
    assert list(data["engines"]) == ["sglang"] and data["objective"] == "p99"
    # the same options through the public API give the same result
    api = decodecalc.tune(workload=SMALL.workload, engine="sglang", objective="p99", heuristics="none",
                          max_regression=None)
    assert data == api.to_dict()


def test_write_outputs_writes_the_json(tmp_path):
    req = TuneRequest(traffic=SMALL, search=SearchOptions(engine="vllm", heuristics="none"),
                      output=tmp_path / "t.json")
    run = run_tune(prepare(req))
    write_outputs(req, run, json.dumps(run.to_dict()))
    assert json.loads((tmp_path / "t.json").read_text()) == json.loads(json.dumps(run.to_dict()))
    assert isinstance(run, TuneRun)
