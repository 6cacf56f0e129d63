"""Request-trace readers (decodecalc.traffic.traces): every format from its example file, detection,
--columns, the bad inputs (exact message parts), sorting, limit, ShareGPT token counts, a round-trip
property and the bounded memory of streamed reading."""

from __future__ import annotations

import json
import math
import os
import tracemalloc
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decodecalc.errors import ConfigError, UnknownNameError
from decodecalc.traffic.traces import FORMATS, RequestTable, read_requests
from decodecalc.traffic.traces.detect import detect
from decodecalc.traffic.traces.tokens import estimate_tokens

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "traces"


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")
    return p


def rows(t: RequestTable) -> list[tuple[float, int, int, int]]:
    return list(t.rows())


def error(path: Path, **kw) -> str:
    with pytest.raises(ConfigError) as e:
        read_requests(path, **kw)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# ------------------------------------------------------------------------ the example files

# file, format, requests, first (arrival, prompt, output, record), last, has_arrivals
CASES = [
    ("azure-code-2023.csv", "azure", 40, (0.0, 2533, 10, 2), (9.4993006, 2446, 12, 41), True),
    ("burstgpt.csv", "burstgpt", 30, (0.0, 104, 208, 2), (150.0, 767, 67, 33), True),
    ("mooncake.jsonl", "mooncake", 30, (0.0, 7535, 168, 1), (27.0, 49846, 772, 30), True),
    ("native.csv", "native", 24, (0.0, 716, 195, 2), (3.764, 314, 298, 25), True),
    ("vllm-bench-result.json", "vllm-bench", 19, (0.0, 253, 205, 1), (4.605918, 207, 107, 20), True),
    ("sglang-bench.jsonl", "sglang-bench", 15, (0.0, 167, 117, 1), (1.875, 553, 447, 16), True),
    ("sharegpt.json", "sharegpt", 8, (0.0, 17, 80, 1), (0.0, 15, 14, 10), False),
]


@pytest.mark.parametrize("name,fmt,n,first,last,arrivals", CASES, ids=[c[1] for c in CASES])
def test_example_file(name, fmt, n, first, last, arrivals):
    t = read_requests(EXAMPLES / name)
    assert (t.format, len(t), t.has_arrivals) == (fmt, n, arrivals)
    got = rows(t)
    assert got[0][0] == first[0] and got[0][1:] == first[1:]
    assert got[-1][0] == pytest.approx(last[0], abs=1e-9) and got[-1][1:] == last[1:]
    assert all(isinstance(c, array) for c in (t.arrival_s, t.prompt_tokens, t.output_tokens, t.records))
    assert (t.arrival_s.typecode, t.prompt_tokens.typecode, t.records.typecode) == ("d", "q", "q")
    assert list(t.arrival_s) == sorted(t.arrival_s)
    assert t.tokens_estimated == (fmt == "sharegpt")
    assert read_requests(EXAMPLES / name, fmt=fmt) == t  # the forced format reads the same


def test_example_notes():
    burst = read_requests(EXAMPLES / "burstgpt.csv")
    assert "ignored fields: Model, Total tokens, Log Type" in burst.notes
    assert "skipped 2 requests (0 Response tokens: failed requests), the first at line 11" in burst.notes
    assert "ignored field: hash_ids" in read_requests(EXAMPLES / "mooncake.jsonl").notes
    azure = read_requests(EXAMPLES / "azure-code-2023.csv")
    assert any("date-times" in n for n in azure.notes)
    vllm = read_requests(EXAMPLES / "vllm-bench-result.json")
    assert any(n.startswith("arrivals from start_times") for n in vllm.notes)
    assert 7 not in vllm.records  # request 7 failed
    assert any("failed" in n and "request 7" in n for n in vllm.notes)
    sgl = read_requests(EXAMPLES / "sglang-bench.jsonl")
    assert any("request_rate 8 req/s" in n for n in sgl.notes)
    assert sgl.arrival_s[1] == 0.125  # request 2 at 1/8 s


def test_formats_tuple():
    assert FORMATS == ("native", "azure", "azure-lmm", "burstgpt", "mooncake", "qwen-bailian", "copilot-agent",
                       "vllm-bench", "sglang-bench", "sharegpt")


# ------------------------------------------------------------------------ detection

@pytest.mark.parametrize("name,fmt", [(c[0], c[1]) for c in CASES], ids=[c[1] for c in CASES])
def test_detection_ignores_the_file_name(tmp_path, name, fmt):
    p = write(tmp_path, "trace.txt", (EXAMPLES / name).read_bytes())
    assert detect(p).format == fmt
    assert read_requests(p).format == fmt


def test_detection_reads_only_the_beginning(tmp_path):
    # a vLLM result names its tool first: what follows (here broken JSON 3 MB on) is not read to detect it
    p = write(tmp_path, "r.json", '{"date": "x", "endpoint_type": "openai", "pad": "' + "x" * (3 * 2**20) + '", oops')
    assert detect(p).format == "vllm-bench"
    assert "not valid JSON" in error(p)
    c = write(tmp_path, "c.csv", NATIVE_HEAD + "5,3,0\n" * 20_000 + "\x00 binary tail\n")
    assert detect(c).format == "native"
    assert "a binary file" in error(c)


def test_crlf_jsonl_and_bom_json(tmp_path):
    jl = write(tmp_path, "a.jsonl", '\ufeff{"timestamp": 0, "input_length": 5, "output_length": 2}\r\n\r\n'
                                    '{"timestamp": 500, "input_length": 6, "output_length": 3}\r\n')
    assert rows(read_requests(jl)) == [(0.0, 5, 2, 1), (0.5, 6, 3, 3)]
    sg = write(tmp_path, "s.json", "\ufeff" + (EXAMPLES / "sharegpt.json").read_text(encoding="utf-8"))
    assert read_requests(sg).format == "sharegpt"


def test_detection_of_record_formats_in_other_containers(tmp_path):
    assert read_requests(write(tmp_path, "a.jsonl", '{"TIMESTAMP": "2024-05-10 00:00:00+00:00", '
                                                    '"ContextTokens": 5, "GeneratedTokens": 2}\n')).format == "azure"
    arr = write(tmp_path, "a.json", '[{"prompt_tokens": 3, "output_tokens": 2}, {"prompt_tokens": 4, "output_tokens": 5}]')
    t = read_requests(arr)
    assert (t.format, rows(t)) == ("native", [(0.0, 3, 2, 1), (0.0, 4, 5, 2)])
    mc = write(tmp_path, "m.csv", "timestamp,input_length,output_length\n1000,5,3\n3000,6,2\n")
    assert rows(read_requests(mc)) == [(0.0, 5, 3, 2), (2.0, 6, 2, 3)]


def test_detection_of_bench_results_without_details(tmp_path):
    p = write(tmp_path, "r.jsonl", '{"backend": "sglang", "dataset_name": "random", "request_rate": Infinity}\n')
    assert detect(p).format == "sglang-bench"
    assert "no per-request lengths (input_lens, output_lens) in its 1 result; run python -m sglang.bench_serving " \
           "with --output-details" in error(p)
    v = write(tmp_path, "v.json", '{"date": "20250101-000000", "endpoint_type": "openai", "completed": 3}')
    assert "run vllm bench serve --save-result with --save-detailed" in error(v)


@pytest.mark.parametrize("text,closest", [
    ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,5\n", "closest is azure (has TIMESTAMP, ContextTokens, "
                                                                 "lacks GeneratedTokens)"),
    ("a,b,c\n1,2,3\n", "closest is native (lacks prompt_tokens, output_tokens)"),
    ('{"input_length": 5, "output_length": 3}\n', "closest is mooncake (has input_length, output_length, lacks timestamp)"),
    ('[{"text": "hi"}]', "closest is native (lacks prompt_tokens, output_tokens)"),
])
def test_unknown_format_names_the_closest(tmp_path, text, closest):
    p = write(tmp_path, "trace.csv", text)
    msg = error(p)
    assert msg.startswith(f"{p}: not a known request-trace format; {closest}; give --format NAME or --columns "
                          "prompt=COL,output=COL[,arrival=COL]")


def test_unknown_format_name():
    with pytest.raises(UnknownNameError, match="unknown trace format 'azur'. Did you mean 'azure'"):
        read_requests(EXAMPLES / "native.csv", fmt="azur")


def test_forced_format_on_the_wrong_file(tmp_path):
    assert error(EXAMPLES / "native.csv", fmt="azure").startswith(
        f"{EXAMPLES / 'native.csv'}, line 1: the header lacks 'ContextTokens', 'GeneratedTokens', 'TIMESTAMP' "
        "(the azure format has ContextTokens, GeneratedTokens, TIMESTAMP;")
    assert "not a vllm-bench result (expected a JSON object" in error(EXAMPLES / "native.csv", fmt="vllm-bench")
    assert "not a ShareGPT file (expected a JSON array" in error(EXAMPLES / "mooncake.jsonl", fmt="sharegpt")
    assert "line 1, field 'timestamp': missing" in error(
        write(tmp_path, "m.jsonl", '{"input_length": 5, "output_length": 3}\n'), fmt="mooncake")


# ------------------------------------------------------------------------ --columns

def test_columns_on_csv_jsonl_and_json_array(tmp_path):
    csv_p = write(tmp_path, "t.csv", "id,in tok,out tok,t\nx,10,5,2.5\ny,20,6,1.0\n")
    t = read_requests(csv_p, columns="prompt=in tok, output=out tok, arrival=t")
    assert (t.format, rows(t)) == ("columns", [(0.0, 20, 6, 3), (1.5, 10, 5, 2)])
    assert "ignored field: id" in t.notes
    assert any("out of arrival order" in n for n in t.notes)
    jl = write(tmp_path, "t.jsonl", '{"p": 7, "o": 3, "ts": 1500}\n{"p": 8, "o": 4, "ts": 2500}\n')
    assert rows(read_requests(jl, columns={"prompt": "p", "output": "o", "arrival": "ts", "unit": "ms"})) == [
        (0.0, 7, 3, 1), (1.0, 8, 4, 2)]
    arr = write(tmp_path, "t.json", '[{"p": 7, "o": 3, "when": "2024-05-10 00:00:01+00:00"},'
                                    ' {"p": 8, "o": 4, "when": "2024-05-10 02:00:00.5+02:00"}]')
    t = read_requests(arr, columns="prompt=p,output=o,arrival=when")
    assert rows(t) == [(0.0, 8, 4, 2), (0.5, 7, 3, 1)]
    nt = read_requests(jl, columns="prompt=p,output=o")
    assert not nt.has_arrivals and "no arrival times in the file: every request arrives at t=0" in nt.notes


@pytest.mark.parametrize("spec,part", [
    ("prompt=a,outptu=b", "unknown key 'outptu'; valid keys: prompt, output, arrival, unit"),
    ("prompt=a", "output missing"),
    ("prompt=a,output", "'output' is not KEY=COLUMN"),
    ("prompt=a,output=b,arrival=c,unit=h", "unit 'h' is not one of s, ms, us, ns"),
    ("prompt=a,output=a", "prompt and output name the same column 'a'"),
    ("prompt=a,prompt=b,output=c", "'prompt' given twice"),
])
def test_bad_columns_spec(spec, part):
    msg = error(EXAMPLES / "native.csv", columns=spec)
    assert msg.startswith("--columns: ") and part in msg


def test_columns_with_format_and_missing_column(tmp_path):
    assert "give a format or columns, not both" in error(EXAMPLES / "native.csv", fmt="native", columns="prompt=a,output=b")
    assert "line 1: the header lacks 'x'" in error(EXAMPLES / "native.csv", columns="prompt=x,output=output_tokens")


# ------------------------------------------------------------------------ bad inputs

NATIVE_HEAD = "prompt_tokens,output_tokens,arrival_s\n"


@pytest.mark.parametrize("row,part", [
    ("5,,0", "line 2, field 'output_tokens': missing"),
    ("-5,3,0", "line 2, field 'prompt_tokens': must be >= 1, got -5"),
    ("0,3,0", "line 2, field 'prompt_tokens': must be >= 1, got 0"),
    ("five,3,0", "line 2, field 'prompt_tokens': expected an integer, got 'five'"),
    ("5.5,3,0", "line 2, field 'prompt_tokens': expected an integer, got '5.5'"),
    ("5,3,nan", "line 2, field 'arrival_s': expected a number of seconds >= 0, got 'nan'"),
    ("5,3,inf", "line 2, field 'arrival_s': expected a number of seconds >= 0, got 'inf'"),
    ("5,3,-1", "line 2, field 'arrival_s': expected a number of seconds >= 0, got '-1'"),
    ("5,3000000000,0", "line 2, field 'output_tokens': 3000000000 tokens is over 2**31, not a real request"),
    ("5," + "9" * 5000 + ",0", "line 2, field 'output_tokens': '99999999999999999999... tokens is over 2**31"),
    ("5,3", "line 2: 2 cells for 3 columns"),
])
def test_bad_native_csv_rows(tmp_path, row, part):
    p = write(tmp_path, "t.csv", NATIVE_HEAD + row + "\n")
    msg = error(p)
    assert msg.startswith(str(p)) and part in msg


@pytest.mark.parametrize("line,part", [
    ('{"prompt_tokens": 5, "output_tokens": true}', "field 'output_tokens': expected an integer, got True"),
    ('{"prompt_tokens": 5, "output_tokens": 2.0}', "field 'output_tokens': expected an integer, got 2.0"),
    ('{"prompt_tokens": "5", "output_tokens": [2]}', "field 'output_tokens': expected an integer, got [2]"),
    ('{"prompt_tokens": 5, "output_tokens": 2, "arrival_s": NaN}', "field 'arrival_s': expected a number of seconds >= 0"),
    ('{"prompt_tokens": 5, "output_tokens": 2, "arrival_s": 1e400}', "field 'arrival_s': expected a number of seconds"),
    ('{"prompt_tokens": 5, "output_tokens": 2', ": not valid JSON (Expecting ',' delimiter at column 40)"),
    ('{"prompt_tokens": 5, "output_tokens": 1' + "0" * 5000 + "}", ": unreadable JSON value"),
    ('[1, 2]', ": expected a JSON object per line, got list"),
    ('{"prompt_tokens": 5}', "field 'output_tokens': missing"),
])
def test_bad_native_jsonl_lines(tmp_path, line, part):
    p = write(tmp_path, "t.jsonl", '{"prompt_tokens": 1, "output_tokens": 1}\n' + line + "\n")
    msg = error(p)
    assert f"{p}, line 2{part}" in msg if part.startswith(":") else f"{p}, line 2, {part}" in msg


def test_empty_header_only_and_blank_files(tmp_path):
    assert error(write(tmp_path, "e.csv", "")) .endswith("e.csv: no requests (the file is empty)")
    assert error(write(tmp_path, "w.csv", "\n \n")).endswith("no requests (the file is empty)")
    assert error(write(tmp_path, "h.csv", NATIVE_HEAD + "\n\n")).endswith("h.csv: no requests (a header and no rows)")
    assert error(write(tmp_path, "a.json", "[ ]")).endswith("no requests (an empty JSON array)")
    assert error(write(tmp_path, "b.csv", "Timestamp,Model,Request tokens,Response tokens\n1,m,5,0\n")).endswith(
        "no requests (every one was skipped: skipped 1 request (0 Response tokens: failed requests), the first at line 2)")


def test_binary_non_utf8_and_long_lines(tmp_path):
    kind = "a text request trace (a UTF-8 CSV, JSON Lines or JSON file)"
    assert error(write(tmp_path, "b.csv", b"\x89PNG\r\n\x1a\n\x00\x00")).endswith(
        f"b.csv, byte 9: a binary file (a NUL byte), not {kind}")
    latin1 = write(tmp_path, "l.csv", NATIVE_HEAD.encode() + b"5,3,0\n5,3,0\xe9\n")
    assert error(latin1, fmt="native").endswith(f"l.csv, line 3: not UTF-8 text, so not {kind}")
    late = write(tmp_path, "late.csv", NATIVE_HEAD.encode() + b"5,3,0\n" * 20_000 + b"5,3,0\xe9\n")
    assert error(late, fmt="native").endswith(f"late.csv, line 20002, byte 6: not UTF-8 text, so not {kind}")
    assert "not UTF-8 text" in error(write(tmp_path, "l2.csv", b"prompt_tokens,output\xff_tokens\n"))
    long = write(tmp_path, "long.csv", NATIVE_HEAD + "5,3," + "1" * (5 * 2**20) + "\n")
    assert "long.csv, line 2: longer than 4 MiB" in error(long)
    assert "no such file" in error(tmp_path / "missing.csv")
    locked = write(tmp_path, "locked.csv", NATIVE_HEAD + "5,3,0\n")
    locked.chmod(0)
    try:
        if not os.access(locked, os.R_OK):  # root reads anyway
            assert "locked.csv: cannot read the file (Permission denied)" in error(locked)
    finally:
        locked.chmod(0o644)
    assert "not a regular file" in error(tmp_path)


def test_csv_robustness(tmp_path):
    text = ('\ufeffTIMESTAMP,ContextTokens,GeneratedTokens,note\r\n'
            '2023-11-16 18:15:46.6805900,374,44,"a, quoted\r\nfield"\r\n'
            '2023-11-16 18:15:50.9951690,396,109,""\r\n\r\n\r\n')
    t = read_requests(write(tmp_path, "a.csv", text))
    assert t.format == "azure" and rows(t) == [(0.0, 374, 44, 2), (pytest.approx(4.314579), 396, 109, 4)]
    assert "ignored field: note" in t.notes
    assert "line 2: not valid CSV" in error(write(tmp_path, "q.csv", NATIVE_HEAD + '5,3,"0"x\n'))


def test_azure_timestamps(tmp_path):
    head = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    t = read_requests(write(tmp_path, "a.csv", head + "2024-05-12 00:00:00.001163+00:00,1452,3\n"
                                                      "2024-05-12 00:00:00+00:00,584,3\n2024-05-12 02:00:01+02:00,9,9\n"))
    assert rows(t) == [(0.0, 584, 3, 3), (pytest.approx(0.001163), 1452, 3, 2), (1.0, 9, 9, 4)]
    assert "b.csv, line 2, field 'TIMESTAMP': '2023-02-30 00:00:00' is not a calendar date" in error(
        write(tmp_path, "b.csv", head + "2023-02-30 00:00:00,5,5\n"))
    assert "line 3, field 'TIMESTAMP': expected a date-time such as 2023-11-16 18:15:46.6805900, got 'yesterday'" in \
        error(write(tmp_path, "c.csv", head + "2023-11-16 18:15:46.6805900,5,5\nyesterday,5,5\n"))
    z = read_requests(write(tmp_path, "z.csv", head + "2023-11-16 18:15:46.6805900,5,0\n2023-11-16 18:15:47,5,5\n"))
    assert len(z) == 1 and "skipped 1 request (0 GeneratedTokens), the first at line 2" in z.notes


def test_bench_results_errors(tmp_path):
    p = write(tmp_path, "r.json", json.dumps({"date": "x", "input_lens": [5, 6], "output_lens": [3]}))
    assert "line 1, field 'output_lens': 1 values for 2 input_lens" in error(p)
    p = write(tmp_path, "s.json", json.dumps({"date": "x", "input_lens": [5, "six"], "output_lens": [3, 4]}))
    assert "line 1, field 'input_lens[1]': expected an integer, got 'six'" in error(p)
    p = write(tmp_path, "t.json", '{"date": "x", "input_lens": [5, 6], "output_lens": [3, 4')
    assert "line 1: not valid JSON (" in error(p)
    p = write(tmp_path, "u.json", json.dumps({"date": "x", "input_lens": 5, "output_lens": [3]}))
    assert "field 'input_lens': expected a list of token counts, got 5" in error(p)


def test_bench_start_times_of_failed_requests(tmp_path):
    res = {"date": "x", "input_lens": [5, 6, 7], "output_lens": [3, 0, 2], "start_times": [10.5, None, 11.0],
           "errors": ["", "timeout", ""]}
    assert rows(read_requests(write(tmp_path, "r.json", json.dumps(res)))) == [(0.0, 5, 3, 1), (0.5, 7, 2, 3)]
    res["errors"][1], res["output_lens"][1] = "", 4
    assert "field 'start_times[1]': expected a number of seconds for a request that did not fail" in error(
        write(tmp_path, "s.json", json.dumps(res)))


def test_bench_appended_runs_and_rates(tmp_path):
    runs = [{"backend": "sglang", "dataset_name": "random", "request_rate": 2.0},
            {"backend": "sglang", "dataset_name": "random", "request_rate": float("inf"), "max_concurrency": 4,
             "input_lens": [5, 6, 7], "output_lens": [3, 0, 2], "errors": ["", "boom", ""]},
            {"backend": "sglang", "dataset_name": "random", "request_rate": 1.0, "input_lens": [1], "output_lens": [1]}]
    p = write(tmp_path, "r.jsonl", "".join(json.dumps(r) + "\n" for r in runs))
    t = read_requests(p)
    assert rows(t) == [(0.0, 5, 3, 1), (0.0, 7, 2, 3)] and not t.has_arrivals
    assert any("read the result on line 2" in n for n in t.notes)
    assert any("request_rate inf" in n and "concurrency at 4" in n for n in t.notes)
    v = write(tmp_path, "v.json", json.dumps({"date": "x", "request_rate": 4, "burstiness": 0.5,
                                              "input_lens": [5, 6, 7], "output_lens": [3, 4, 2]}, indent=2))
    t = read_requests(v)
    assert list(t.arrival_s) == [0.0, 0.25, 0.5] and any("burstiness 0.5" in n for n in t.notes)


def test_sharegpt_errors_and_skips(tmp_path):
    p = write(tmp_path, "s.json", json.dumps([{"conversations": [{"from": "human", "value": 5}, {"value": "x"}]}]))
    assert error(p).endswith("s.json, record 1, field 'conversations[0].value': expected a string, got 5")
    p = write(tmp_path, "s2.json", json.dumps([{"id": 1}, {"conversations": "hi"}]))
    assert "s2.json, record 2, field 'conversations': expected a list of turns" in error(p, fmt="sharegpt")
    p = write(tmp_path, "s3.json", '[{"conversations": [{"value": "a"}, {"value": "b"}]}, 7]')
    assert "s3.json, record 2: expected an object with 'conversations', got 7" in error(p, fmt="sharegpt")
    p = write(tmp_path, "s4.json", '[{"conversations": [{"value": "a"}, {"value": "b"}]}, {"conversations": [')
    assert "s4.json, line 1: not valid JSON" in error(p)
    t = read_requests(write(tmp_path, "s5.json", json.dumps([{"conversations": [{"value": ""}, {"value": "b"}]},
                                                             {"conversations": [{"value": "abcde"}, {"value": "b"}]}])))
    assert rows(t) == [(0.0, 2, 1, 2)] and any("an empty first or second turn" in n for n in t.notes)


# ------------------------------------------------------------------------ sorting and limit

def test_out_of_order_file_is_sorted_stably(tmp_path):
    p = write(tmp_path, "t.csv", NATIVE_HEAD + "1,1,5\n2,2,3\n3,3,5\n4,4,3\n5,5,4\n")
    t = read_requests(p)
    assert rows(t) == [(0.0, 2, 2, 3), (0.0, 4, 4, 5), (1.0, 5, 5, 6), (2.0, 1, 1, 2), (2.0, 3, 3, 4)]
    assert ("the file is out of arrival order (line 3 arrives before line 2): requests were sorted by arrival, "
            "stably") in t.notes


def test_sorting_a_large_file_uses_the_block_merge():
    from decodecalc.traffic.traces.table import stable_order

    keys = array("d", ((i * 7919) % 1000 for i in range((1 << 20) + 5000)))
    order = stable_order(keys)
    expected = sorted(range(len(keys)), key=keys.__getitem__)
    assert list(order) == expected


def test_limit_keeps_the_first_requests_and_stops_reading(tmp_path):
    p = write(tmp_path, "t.csv", NATIVE_HEAD + "1,1,9\n2,2,8\n3,3,7\nthis row is never read\n")
    t = read_requests(p, limit=2)
    assert rows(t) == [(0.0, 2, 2, 3), (1.0, 1, 1, 2)]
    assert "limit 2: kept the first 2 requests in file order and stopped reading" in t.notes
    assert "line 5" in error(p)  # without the limit the bad row is reached
    assert len(read_requests(EXAMPLES / "sharegpt.json", limit=3)) == 3
    assert list(read_requests(EXAMPLES / "vllm-bench-result.json", limit=7).records) == [1, 2, 3, 4, 5, 6, 8]
    assert "limit must be a positive integer" in error(p, limit=0)


# ------------------------------------------------------------------------ ShareGPT token counts

def test_estimate_rule():
    assert [estimate_tokens(s) for s in ("", "abcd", "abcde", "長城", "KTX로", "é")] == [0, 1, 2, 2, 2, 1]
    t = read_requests(EXAMPLES / "sharegpt.json")
    assert t.tokens_estimated
    prompt = "Summarize the main differences between TCP and UDP in a short table."
    assert t.prompt_tokens[0] == math.ceil(len(prompt) / 4) == 17
    korean = "서울에서 부산까지 KTX로 얼마나 걸리나요?"
    ascii_chars = sum(c.isascii() for c in korean)
    assert t.prompt_tokens[2] == math.ceil(ascii_chars / 4) + len(korean) - ascii_chars
    assert any(n.startswith("token counts estimated from text (no tokenizer given)") for n in t.notes)


def _word_tokenizer(folder: Path) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    tok = tokenizers.Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json"


def test_sharegpt_with_a_tokenizer_file(tmp_path):
    file = _word_tokenizer(tmp_path / "tok")
    p = write(tmp_path, "s.json", json.dumps([{"conversations": [{"value": "hello big world"}, {"value": "hello"}]}]))
    t = read_requests(p, tokenizer=str(file))
    assert rows(t) == [(0.0, 3, 1, 1)] and not t.tokens_estimated
    assert f"tokens counted with {file}" in t.notes
    assert read_requests(p, tokenizer=str(tmp_path / "tok")) == t  # a folder with a tokenizer.json
    assert "no such tokenizer file" in error(p, tokenizer=str(tmp_path / "nope.json"))
    bad = write(tmp_path, "bad.json", "{}")
    assert "not a readable tokenizer.json" in error(p, tokenizer=str(bad))


def test_sharegpt_with_a_cached_model(tmp_path, monkeypatch):
    snap = tmp_path / "hf" / "hub" / "models--acme--tiny" / "snapshots" / "abc123"
    _word_tokenizer(snap)
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text("abc123")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    p = write(tmp_path, "s.json", json.dumps([{"conversations": [{"value": "hello world"}, {"value": "a b c d e"}]}]))
    t = read_requests(p, model_hint="acme/tiny")
    assert rows(t) == [(0.0, 2, 5, 1)] and not t.tokens_estimated
    other = read_requests(p, model_hint="acme/other")
    assert other.tokens_estimated and rows(other) == [(0.0, 3, 3, 1)]
    assert any("no tokenizer.json for acme/other in the Hugging Face cache" in n for n in other.notes)


def test_sharegpt_text_the_tokenizer_cannot_encode(tmp_path):
    file = _word_tokenizer(tmp_path / "tok")
    p = write(tmp_path, "s.json", '[{"conversations": [{"value": "hello \\ud800"}, {"value": "hello"}]}]')
    assert "s.json, record 1, field 'conversations[0].value': the tokenizer cannot encode it" in error(
        p, tokenizer=str(file))
    assert rows(read_requests(p)) == [(0.0, 3, 2, 1)]  # the estimate counts the lone surrogate as one


def test_tokenizer_is_noted_unused_for_counted_formats():
    t = read_requests(EXAMPLES / "native.csv", tokenizer="x.json")
    assert t.notes[-1] == "--tokenizer not used: the native trace holds token counts"
    # the model's name goes with every read (in case the file is ShareGPT): no note where it is not needed
    assert not any("tokenizer" in n for n in read_requests(EXAMPLES / "native.csv", model_hint="a/b").notes)


# ------------------------------------------------------------------------ round trip

requests_strategy = st.lists(st.tuples(st.integers(1, 2**31), st.integers(1, 2**31),
                                       st.floats(0, 1e6, allow_nan=False, allow_infinity=False)),
                             min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(reqs=requests_strategy, as_jsonl=st.booleans())
def test_written_requests_read_back(tmp_path_factory, reqs, as_jsonl):
    folder = tmp_path_factory.mktemp("rt")
    if as_jsonl:
        p = write(folder, "t.jsonl", "".join(json.dumps({"prompt_tokens": a, "output_tokens": b, "arrival_s": t}) + "\n"
                                             for a, b, t in reqs))
    else:
        p = write(folder, "t.csv", NATIVE_HEAD + "".join(f"{a},{b},{t!r}\n" for a, b, t in reqs))
    table = read_requests(p)
    first_line = 1 if as_jsonl else 2
    earliest = min(t for _, _, t in reqs)
    expected = sorted(((t - earliest, a, b, i + first_line) for i, (a, b, t) in enumerate(reqs)),
                      key=lambda r: (r[0], r[3]))
    assert rows(table) == expected
    assert table.arrival_s[0] == 0.0


# ------------------------------------------------------------------------ bounded memory

def _peak_mib(fn) -> tuple[object, float]:
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def test_streamed_reading_keeps_memory_bounded(tmp_path):
    # a benchmark result of ~160 MB whose generated texts must all be skipped to reach the lists after them
    text = json.dumps("x" * 200_000)
    n = 800
    p = tmp_path / "big.json"
    with open(p, "w", encoding="utf-8") as f:
        f.write('{"date": "x", "request_rate": "inf", "generated_texts": [')
        f.write(",".join([text] * n))
        f.write('], "input_lens": [' + ",".join(["100"] * n) + '], "output_lens": [' + ",".join(["20"] * n) + "]}")
    size_mib = p.stat().st_size / 2**20
    assert size_mib > 150
    table, peak = _peak_mib(lambda: read_requests(p))
    assert len(table) == n and peak < 24, (size_mib, peak)
    # a ShareGPT array of the same size read with a small limit stops early
    conv = json.dumps({"id": "a", "conversations": [{"from": "human", "value": "x" * 100_000},
                                                    {"from": "gpt", "value": "y" * 100_000}]})
    s = tmp_path / "big_sharegpt.json"
    with open(s, "w", encoding="utf-8") as f:
        f.write("[" + ",".join([conv] * n) + "]")
    table, peak = _peak_mib(lambda: read_requests(s, limit=5))
    assert list(table.prompt_tokens) == [25_000] * 5 and peak < 24
    # and a CSV: line by line
    c = tmp_path / "big.csv"
    with open(c, "w", encoding="utf-8") as f:
        f.write(NATIVE_HEAD + "1000,200,0.5\n" * 4_000_000)
    table, peak = _peak_mib(lambda: read_requests(c, limit=1000))
    assert len(table) == 1000 and peak < 8


def test_a_trace_too_large_to_hold_stops_early_with_one_error(tmp_path, monkeypatch):
    """Issue 17, bad input: a huge trace (a 2 GB file holds ~50 million rows) is read as a stream and stops at
    MAX_REQUESTS with an error naming the line, and a batching that would hold too many KV lengths stops too
    (measured: a 438 MB Azure CSV took 14 GB and over 5 minutes before; now 13 s and 99 MB)."""
    from decodecalc.errors import ConfigError
    from decodecalc.traffic import requests as R
    from decodecalc.traffic.traces import read_requests
    from decodecalc.traffic.traces import table as T

    path = tmp_path / "big.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    + "".join(f"2023-11-16 18:15:{i % 60:02d}.0,{100 + i},{10 + i % 7}\n" for i in range(50)))
    monkeypatch.setattr(T, "MAX_REQUESTS", 20)
    with pytest.raises(ConfigError, match=r"big.csv, line 22: more than 20 requests; tune a part of the trace"):
        read_requests(path)
    assert len(read_requests(path, limit=20)) == 20  # --max-requests within the cap reads
    monkeypatch.setattr(R, "RUN_LENGTHS_PER_STEP", 1)
    # 60 requests arriving every 20 ms: 82 decode steps, their runs holding 416 lengths
    args = ([100] * 60, [10] * 60, [i * 0.02 for i in range(60)], R.BatchingLimits(max_num_seqs=8))
    with pytest.raises(ConfigError, match="the batching holds more than 100 sequence lengths"):
        R.batching_runs(*args, max_steps=100)
    monkeypatch.setattr(R, "RUN_LENGTHS_PER_STEP", 8)
    assert R.batching_runs(*args, max_steps=100).decode_steps == 82
