"""Workloads: step traces, the continuous-batching model (hand-checked examples) and the presets."""

from __future__ import annotations

import json

import pytest

from decodecalc.errors import ConfigError, UnknownNameError
from decodecalc.traffic import (
    PRESETS,
    BatchingLimits,
    Request,
    StepTrace,
    batch_requests,
    dump_steps_jsonl,
    load_requests,
    load_steps,
    parse_mix,
    steps_from_requests,
    weighted_percentile,
    workload,
)


def lens(result):
    return [list(s.seq_lens) for s in result.trace.steps]


def test_worked_example_from_the_docstring():
    # max_num_seqs 2, budget 8; A: P=3,O=3; B: P=4,O=2; C: P=2,O=2 (traffic/requests.py docstring, by hand):
    # step 0 prefills A and B; step 1 decodes A (3+1) and B (4+1), B done; step 2 decodes A (3+2) and
    # prefills C; step 3 decodes C (2+1).
    r = batch_requests([Request(3, 3), Request(4, 2), Request(2, 2)],
                       BatchingLimits(max_num_seqs=2, max_num_batched_tokens=8))
    assert lens(r) == [[4, 5], [5], [3]]
    assert r.engine_steps == 4


def test_chunked_prefill_over_the_token_budget():
    # P=10 with a 4-token budget: chunks 4, 4, 2 in steps 0-2; the first token comes with the last chunk;
    # decodes at KV 11 and 12 in steps 3 and 4 (O = 3 -> 2 decode steps).
    r = batch_requests([Request(10, 3)], BatchingLimits(max_num_seqs=4, max_num_batched_tokens=4))
    assert lens(r) == [[11], [12]]
    assert r.engine_steps == 5


def test_decodes_come_before_new_prefills_and_max_num_seqs_holds():
    # budget 3: step 0 prefills A (2 tokens) and admits B with the 1 token left; step 1: A decodes at KV 3
    # (1 token), B takes 2 more prompt tokens; step 2: A decodes at 4, B takes its last 2 -> first token;
    # step 3: A decodes at 5 and B at 6; both are done (A after 4 tokens, B after 2).
    r = batch_requests([Request(2, 4), Request(5, 2)], BatchingLimits(max_num_seqs=2, max_num_batched_tokens=3))
    assert lens(r) == [[3], [4], [5, 6]]
    big = batch_requests([Request(5, 50)] * 10, BatchingLimits(max_num_seqs=3, max_num_batched_tokens=8192))
    assert max(s.batch for s in big.trace.steps) == 3


def test_arrival_times_place_requests_on_steps():
    # step interval 0.5 s: A (P=2, O=3) at 0 decodes in steps 1-2 (KV 3, 4); B (P=2, O=2) arrives at 1.2 s,
    # joins at step 3 (1.5 s), prefills there and decodes in step 4 (KV 3); the idle step 3 records nothing.
    r = batch_requests([Request(2, 3, 0.0), Request(2, 2, 1.2)],
                       BatchingLimits(max_num_seqs=4, max_num_batched_tokens=64, step_interval_s=0.5))
    assert lens(r) == [[3], [4], [3]]


def test_idle_gap_jumps_to_the_next_arrival():
    r = batch_requests([Request(2, 2, 100.0)], BatchingLimits(step_interval_s=0.5))
    assert lens(r) == [[3]] and r.engine_steps == 202  # prefill at step 200, decode at 201


def test_one_token_outputs_make_no_decode_step(tmp_path):
    f = tmp_path / "r.jsonl"
    f.write_text('{"prompt_tokens": 10, "output_tokens": 1}\n')
    with pytest.raises(ConfigError, match="empty"):
        steps_from_requests(f)


def test_step_trace_round_trip_and_summary(tmp_path):
    f = tmp_path / "s.jsonl"
    f.write_text('{"seq_lens": [100, 200]}\n\n{"seq_lens": [300], "query_lens": [3], "weight": 3}\n')
    tr = load_steps(f)
    assert tr.num_steps == 4
    s = tr.summary()
    assert s["generated_tokens"] == 2 + 3 and s["query_tokens"] == 2 + 9
    assert s["batch"]["p50"] == 1 and s["batch"]["max"] == 2  # weights: batch 1 counts 3 times
    assert s["seq_len"]["p50"] == 300 and s["speculative"]
    g = tmp_path / "again.jsonl"
    g.write_text(dump_steps_jsonl(tr))
    assert [(x.seq_lens, x.query_lens, x.weight) for x in load_steps(g).steps] == \
        [(x.seq_lens, x.query_lens, x.weight) for x in tr.steps]


def test_csv_steps(tmp_path):
    f = tmp_path / "s.csv"
    f.write_text('seq_lens,query_lens,weight\n"100 200","1;1",2\n300,,\n')
    tr = load_steps(f)
    assert [s.seq_lens for s in tr.steps] == [(100, 200), (300,)] and tr.steps[0].weight == 2


@pytest.mark.parametrize("text, needle", [
    ('{"seq_lens": [10]}\n{"seq_lens": [10}\n', "line 2: not valid JSON"),
    ('{"seq_lens": [10, 0]}\n', "line 1, field 'seq_lens': lengths must be >= 1, got 0"),
    ('{"seq_lens": []}\n', "line 1, field 'seq_lens'"),
    ('{"seq_lens": [10, 20], "query_lens": [1]}\n', "field 'query_lens': 1 values for 2 sequences"),
    ('{"seq_lens": [3], "query_lens": [4]}\n', "field 'query_lens'"),
    ('{"seq_len": [3]}\n', "line 1, field 'seq_len': unknown field"),
    ('{"seq_lens": [3], "weight": 0}\n', "field 'weight'"),
    ('{"seq_lens": [3.5]}\n', "field 'seq_lens': 3.5 is not an integer"),
    ('[1, 2]\n', "line 1: expected a JSON object"),
    ('\n\n', "empty"),
])
def test_bad_step_files_name_file_line_and_field(tmp_path, text, needle):
    f = tmp_path / "bad.jsonl"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_steps(f)
    assert needle in str(e.value) and str(f) in str(e.value)


def test_bad_csv_and_request_files(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("seq_lens,colour\n10,red\n")
    with pytest.raises(ConfigError, match=r"line 1, field 'colour'"):
        load_steps(f)
    r = tmp_path / "r.jsonl"
    r.write_text('{"prompt_tokens": 10, "output_tokens": 5}\n{"prompt_tokens": 10}\n')
    with pytest.raises(ConfigError, match=r"line 2, field 'output_tokens': missing"):
        load_requests(r)
    r.write_text('{"prompt_tokens": 10, "output_tokens": 5, "arrival_s": -1}\n')
    with pytest.raises(ConfigError, match=r"line 1, field 'arrival_s'"):
        load_requests(r)


def test_weighted_percentile():
    pairs = [(1.0, 1), (2.0, 1), (3.0, 98)]
    assert weighted_percentile(pairs, 1) == 1.0
    assert weighted_percentile(pairs, 2) == 2.0
    assert weighted_percentile(pairs, 50) == 3.0
    assert weighted_percentile([(5.0, 1)], 99) == 5.0


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_steady_state_at_their_concurrency(name):
    tr = workload(name)
    p = PRESETS[name]
    assert 100 <= tr.num_steps <= 300
    batches = [s.batch for s in tr.steps]
    assert max(batches) == p.concurrency
    assert sorted(batches)[len(batches) // 2] >= p.concurrency * 0.7  # steady state, not a drain
    assert p.source and "source" in tr.notes[0]
    assert all(L <= p.max_prompt + p.max_output for s in tr.steps for L in s.seq_lens)


def test_concurrency_and_mix():
    tr = workload("chat", concurrency=8)
    assert max(s.batch for s in tr.steps) == 8
    preset, steps = parse_mix("mix:prompt=2048,output=64,sigma=0,steps=50")
    assert preset.prompt_median == 2048 and steps == 50
    tr = workload("mix:prompt=2048,output=64,sigma=0,steps=50", concurrency=4)
    # sigma 0: every request has P=2048, O=64, so KV lengths lie in 2049..2111
    assert all(2049 <= L <= 2048 + 63 for s in tr.steps for L in s.seq_lens)
    for bad in ("mix:prompt=10", "mix:prompt=1,output=x", "mix:prompt=1,output=1,colour=2"):
        with pytest.raises(ConfigError):
            workload(bad)
    with pytest.raises(UnknownNameError, match="chat"):
        workload("chatt")
    with pytest.raises(ConfigError, match="concurrency"):
        workload("chat", concurrency=0)


def test_step_trace_is_immutable_value():
    tr = StepTrace(steps=(), source="x")
    with pytest.raises(AttributeError):
        tr.source = "y"  # type: ignore[misc]
    assert json.dumps(tr.source) == '"x"'


# ---------------------------------------------------------------------------------------------- speculative decoding


def spec(k, alpha, **kw):
    return BatchingLimits(num_speculative_tokens=k, acceptance_rate=alpha, **kw)


def test_speculative_worked_example_from_the_docstring():
    # k = 2, alpha = 0.25 (alpha k = 1/2: the steps accept 0, 1, 0, 1 drafts); budget 16; A: P=10, O=6; B: P=4,
    # O=3 (traffic/requests.py docstring, by hand): step 0 prefills both (g = 1); step 1: A at 10+1+2 = 13,
    # B at 4+1+2 = 7, nothing accepted (g = 2, 2); step 2: A at 14, B at 8, one accepted (A g = 4; B done at 3);
    # step 3: A at 16 (g = 5); step 4: A at 17, one token left, done.
    r = batch_requests([Request(10, 6), Request(4, 3)], spec(2, 0.25, max_num_seqs=2, max_num_batched_tokens=16))
    assert lens(r) == [[13, 7], [14, 8], [16], [17]]
    assert all(s.query_lens == (3,) * s.batch for s in r.trace.steps)
    assert [s.generated_tokens for s in r.trace.steps] == [2, 3, 1, 1]
    assert sum(s.generated_tokens for s in r.trace.steps) == (6 - 1) + (3 - 1)
    plain = batch_requests([Request(10, 6), Request(4, 3)], BatchingLimits(max_num_seqs=2, max_num_batched_tokens=16))
    assert lens(plain) == [[11, 5], [12, 6], [13], [14], [15]]
    assert any("draft acceptance rate 0.25" in n for n in r.trace.notes)


@pytest.mark.parametrize("k, alpha", [(1, 0.5), (3, 0.7), (4, 0.3), (5, 1.0), (2, 0.0), (7, 0.123)])
def test_acceptance_is_deterministic_and_exact_on_average(k, alpha):
    lim = spec(k, alpha)
    got = [lim.accepted(n) for n in range(1000)]
    assert all(0 <= a <= k for a in got)
    from fractions import Fraction
    for n in (1, 7, 100, 1000):  # after n steps: floor(n alpha k) accepted, no float drift
        assert sum(got[:n]) == int(n * Fraction(str(alpha)) * k)
    # a request of O tokens takes about (O - 1) / (1 + alpha k) decode steps
    r = batch_requests([Request(100, 2001)], lim)
    assert len(r.trace.steps) == pytest.approx(2000 / (1 + alpha * k), abs=1.0)
    assert sum(s.generated_tokens for s in r.trace.steps) == 2000
    assert [s.seq_lens[0] for s in r.trace.steps] == sorted(s.seq_lens[0] for s in r.trace.steps)


def test_speculative_steps_take_their_query_tokens_from_the_budget():
    # k = 3 (4 tokens per decode) and a budget of 9: three requests decode-ready, only two fit (8 tokens); the
    # third waits a step. P=1 prompts all fit in step 0 (3 tokens).
    r = batch_requests([Request(1, 3)] * 3, spec(3, 0.0, max_num_seqs=3, max_num_batched_tokens=9))
    assert [s.batch for s in r.trace.steps] == [2, 2, 1, 1]
    with pytest.raises(ConfigError, match="below one speculative decode step"):
        spec(3, 0.5, max_num_batched_tokens=3)
    with pytest.raises(ConfigError, match="--draft-acceptance-rate"):
        spec(3, 1.5)
    with pytest.raises(ConfigError, match="--num-speculative-tokens"):
        spec(-1, 0.5)


def test_presets_with_speculative_decoding():
    t = workload("long-doc-qa", num_speculative_tokens=3, acceptance_rate=0.5)
    assert t.num_steps == 300 and all(q == 4 for s in t.steps for q in s.query_lens)
    assert t.summary()["speculative"] and t.summary()["generated_tokens"] > sum(s.batch for s in t.steps)
    assert workload("chat").summary()["speculative"] is False
