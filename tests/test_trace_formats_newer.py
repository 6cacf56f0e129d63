"""The newer public traces (issue 43): Azure LMM 2025 (multimodal CSV, shipped gzip'd), Qwen-Bailian JSON Lines and the
GitHub Copilot coding agent 2026 shards (a file or a directory), each from small synthetic files written to the public
schemas: detected from the content, forced by --format, and their bad input refused with one line."""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from decodecalc.cli import app
from helpers import trace_error as error
from decodecalc.traffic.traces import read_requests
from decodecalc.traffic.traces.detect import detect




# -------------------------------------------------------------------------------------------- Azure LMM 2025

LMM = ("TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n"
       "2024-10-15T12:00:00.269Z,0,770,491\n"
       "2024-10-15T12:00:05.819Z,1,949,126\n"
       "2024-10-15T12:00:06.513Z,1,964,0\n"  # produced nothing: skipped
       "2024-10-15T12:00:07.566Z,16,4564,137\n")


def test_azure_lmm_gzip_is_detected_and_its_images_noted(tmp_path):
    p = tmp_path / "AzureLMMInferenceTrace_multimodal.csv.gz"
    p.write_bytes(gzip.compress(LMM.encode()))
    assert detect(p).format == "azure-lmm"
    t = read_requests(p)
    assert (t.format, t.has_arrivals) == ("azure-lmm", True)
    assert list(t.rows()) == [(0.0, 770, 491, 2), (pytest.approx(5.55), 949, 126, 3),
                              (pytest.approx(7.297), 4564, 137, 5)]
    assert ("2 of 3 requests carry images (17 images in all); their tokens are taken to be inside ContextTokens "
            "(the dataset does not say)") in t.notes
    assert "skipped 1 request (0 GeneratedTokens), the first at line 4" in t.notes
    azure = read_requests(p, fmt="azure")  # the older reader takes the same file and ignores the images
    assert list(azure.rows()) == list(t.rows()) and "ignored field: NumImages" in azure.notes
    bad = tmp_path / "bad.csv"
    bad.write_text(LMM.replace(",16,", ",many,"))
    assert error(bad).endswith("bad.csv, line 5, field 'NumImages': expected an integer, got 'many'")
    bad.write_text(LMM.replace(",16,", ",-1,"))
    assert "field 'NumImages': must be >= 0, got -1" in error(bad)
    no_images = tmp_path / "azure.csv"  # Azure 2023/2024 stays azure; a forced azure-lmm names the missing column
    no_images.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+00:00,5,2\n")
    assert read_requests(no_images).format == "azure"
    assert "the header lacks 'NumImages'" in error(no_images, fmt="azure-lmm")


# -------------------------------------------------------------------------------------------- Qwen-Bailian

def qwen_line(chat: int, parent: int, ts: float, inp: int, out: int, turn: int) -> str:
    return json.dumps({"chat_id": chat, "parent_chat_id": parent, "timestamp": ts, "input_length": inp,
                       "output_length": out, "type": "text", "turn": turn, "hash_ids": list(range(inp // 16))}) + "\n"


def test_qwen_bailian_is_not_taken_for_mooncake(tmp_path):
    p = tmp_path / "qwen_traceA_blksz_16.jsonl"
    p.write_text(qwen_line(0, -1, 0.0, 521, 132, 1) + qwen_line(1, -1, 1.5, 40, 0, 1)
                 + qwen_line(2, 0, 61.114, 700, 80, 2))
    assert detect(p).format == "qwen-bailian"
    t = read_requests(p)
    assert list(t.rows()) == [(0.0, 521, 132, 1), (61.114, 700, 80, 3)]  # seconds, not Mooncake's milliseconds
    assert "ignored fields: chat_id, parent_chat_id, type, turn, hash_ids" in t.notes
    assert "skipped 1 request (0 output_length), the first at line 2" in t.notes
    assert "arrivals from 'timestamp' read as seconds" in t.notes
    moon = tmp_path / "mooncake.jsonl"
    moon.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n'
                    '{"timestamp": 3000, "input_length": 6, "output_length": 3}\n')
    assert read_requests(moon).format == "mooncake" and list(read_requests(moon).arrival_s) == [0.0, 3.0]
    assert list(read_requests(moon, fmt="qwen-bailian").arrival_s) == [0.0, 3000.0]
    p.write_text(qwen_line(0, -1, float("nan"), 5, 5, 1).replace("NaN", '"NaN"'))
    assert "line 1, field 'timestamp': expected a number of seconds >= 0, got 'NaN'" in error(p)


# -------------------------------------------------------------------------------------------- Copilot agent 2026

def call(ts, prompt, completion, model="Model A", result="Success", cached=0):
    tokens = None if prompt is None else {"total": prompt + completion, "prompt": prompt, "completion": completion,
                                          "cached": cached, "cached_pct": cached / max(prompt, 1)}
    return {"message_id": "m", "timestamp": ts, "duration_ms": 812.5, "initiator_type": "agent", "model": model,
            "result": result, "status_code": "OK", "tokens": tokens,
            "message_metadata": [{"type": "System", "role": "system", "sequenceId": 0, "token_len": 9}]}


def session(sid: str, *turns: list) -> str:
    return json.dumps({"session_id": sid, "date": "2026-06-01",
                       "turns": [{"turn_id": f"t{i}", "llm_calls": calls, "tool_batches": []}
                                 for i, calls in enumerate(turns)]}) + "\n"


def test_copilot_sessions_one_request_per_llm_call(tmp_path):
    text = (session("s1", [call("2026-06-01T12:00:01.500Z", 9000, 120, cached=8000),
                           call("2026-06-01T12:00:03Z", 9300, 40, model="Model B")],
                    [call("2026-06-01T12:00:09+00:00", 9500, 0)])  # no output: skipped
            + session("s2", [call("2026-06-01T12:00:00Z", 3000, 200, result="UserCancel"),
                             call("2026-06-01T12:00:02Z", None, 0)]))  # no tokens: skipped
    p = tmp_path / "shard-0000.jsonl.gz"
    p.write_bytes(gzip.compress(text.encode()))
    assert detect(p).format == "copilot-agent"
    t = read_requests(p)
    assert (t.format, len(t)) == ("copilot-agent", 3)
    assert list(t.rows()) == [(0.0, 3000, 200, 2), (1.5, 9000, 120, 1), (3.0, 9300, 40, 1)]
    notes = " | ".join(t.notes)
    for part in ("skipped 1 request (0 completion tokens), the first at line 1",
                 "skipped 1 request (an llm_call with no tokens), the first at line 2",
                 "one request per llm_call: tokens.prompt (its cached tokens included) the prompt",
                 "llm_calls of 2 models (Model A 67%, Model B 33%), read as one model's traffic",
                 "1 kept llm_calls ended other than Success (UserCancel 1)",
                 "arrivals from 'timestamp' read as date-times"):
        assert part in notes, notes
    assert read_requests(p, fmt="copilot-agent") == t


@pytest.mark.parametrize("stamps, arrivals", [((1780315200, 1780315202.25), [0.0, 2.25]),
                                              ((1780315200000, 1780315202250), [0.0, 2.25])],
                         ids=["epoch-seconds", "epoch-milliseconds"])
def test_copilot_epoch_timestamps(tmp_path, stamps, arrivals):
    p = tmp_path / "s.jsonl"
    p.write_text(session("s", [call(stamps[0], 10, 5), call(stamps[1], 12, 5)]))
    assert list(read_requests(p).arrival_s) == arrivals


def test_copilot_directory_of_shards(tmp_path):
    root = tmp_path / "copilot"
    for day, shards in (("2026-06-02", 1), ("2026-06-01", 2)):
        for k in range(shards):
            d = root / f"date={day}"
            d.mkdir(parents=True, exist_ok=True)
            hour = 10 + k
            (d / f"shard-{k:04d}.jsonl.gz").write_bytes(gzip.compress(
                session(f"{day}-{k}", [call(f"{day}T{hour}:00:00Z", 100 + k, 10)]).encode()
                + b"\n" + session(f"{day}-{k}b", [call(f"{day}T{hour}:30:00Z", 200 + k, 10)]).encode()))
    (root / "README.md").write_text("not a shard\n")
    t = read_requests(root)
    # path order: 06-01 shard 0, shard 1, then 06-02; records count on through the shards (blank line 2 included)
    assert [(p, r) for _, p, _, r in t.rows()] == [(100, 1), (200, 3), (101, 4), (201, 6), (100, 7), (200, 9)]
    assert t.arrival_s[-1] == 86400 + 1800 and "read 3 shard files in path order" in " ".join(t.notes)
    assert len(read_requests(root, limit=3)) == 3
    assert error(root, fmt="azure").endswith("a directory; only copilot-agent shards are read from one "
                                             "(date=YYYY-MM-DD/shard-NNNN.jsonl.gz), --format azure reads a file")
    bad = root / "date=2026-06-03"
    bad.mkdir()
    (bad / "shard-0000.jsonl").write_text(session("x", [call("yesterday", 5, 5)]))
    msg = error(root)
    assert f"{bad / 'shard-0000.jsonl'}, line 1, turns[0].llm_calls[0], field 'timestamp': expected a date-time" in msg
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "not a regular file, and no shards under it" in error(empty)


@pytest.mark.parametrize("line, part", [
    ('{"session_id": "s", "turns": 5}\n', "line 1, field 'turns': expected a list, got 5"),
    ('{"session_id": "s", "turns": [{"llm_calls": [{"timestamp": "2026-06-01T00:00:00Z", '
     '"tokens": {"prompt": 5}}]}]}\n',
     "line 1, field 'turns[0].llm_calls[0].tokens.completion': missing"),
    ('{"session_id": "s", "turns": [{"llm_calls": [{"tokens": {"prompt": 5, "completion": 2}}]}]}\n',
     "field 'turns[0].llm_calls[0].timestamp': missing"),
    ('{"session_id": "s", "turns": [{"llm_calls": [{"timestamp": 5, "tokens": {"prompt": 1.5, "completion": 2}}]}]}\n',
     "field 'turns[0].llm_calls[0].tokens.prompt': expected an integer, got 1.5"),
])
def test_copilot_bad_sessions(tmp_path, line, part):
    p = tmp_path / "s.jsonl"
    p.write_text(line)
    assert part in error(p)
    mixed = tmp_path / "m.jsonl"
    mixed.write_text(session("s", [call("2026-06-01T00:00:00Z", 5, 5), call(1780315200, 5, 5)]))
    assert "field 'timestamp': expected a date-time" in error(mixed)
    no_turns = tmp_path / "n.jsonl"
    no_turns.write_text('{"session_id": "s", "turns": []}\n{"session_id": "t"}\n')
    assert "line 2, field 'turns': missing" in error(no_turns, fmt="copilot-agent")


def test_cli_reads_a_directory_of_shards(tmp_path):
    root = tmp_path / "copilot" / "date=2026-06-01"
    root.mkdir(parents=True)
    calls = [call(f"2026-06-01T12:00:{s:02d}Z", 2000 + 50 * s, 40 + s) for s in range(20)]
    (root / "shard-0000.jsonl.gz").write_bytes(gzip.compress(session("s", calls).encode()))
    r = CliRunner().invoke(app, ["tune", "-m", "llama3-8b", "--requests", str(root.parent), "--engine", "vllm"],
                           env={"COLUMNS": "100"})
    assert r.exit_code == 0 and "copilot-agent trace: 20 requests" in r.output, r.output
