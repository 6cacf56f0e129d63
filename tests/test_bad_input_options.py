"""Issue 43, "Bad input": options accepted when they should not be. COLUMNS=0 made every command print nothing
(error lines included); compare took --occupancy 1,000,000 where cudagraphs refuses 65; empty items of a comma list
(``-p vllm,,sglang``, ``--candidates 1,,4``, ``--heuristics ,``) were dropped in silence."""

from __future__ import annotations

import pytest

from decodecalc.limits import MAX_OCCUPANCY
from test_hostile_inputs import _cli, run

# (arguments, exit status): one per command, fast, with and without an error
COMMANDS = [(["grid"], 0), (["grid", "--tp", "3"], 1), (["compare"], 0), (["recommend"], 0), (["models"], 0),
            (["gpus"], 0), (["explain"], 0), (["determinism", "--batches", "1,2"], 0), (["cudagraphs"], 0),
            (["sweep", "-b", "1:2", "-s", "128", "-q"], 0), (["tune", "-w", "chat", "--heuristics", "none"], 0),
            (["calibrate", "--quick"], 1), (["grid", "--no-such-option"], 2), (["grid", "-h"], 0)]


@pytest.mark.parametrize("columns", ["0", "1"])
@pytest.mark.parametrize("args, code", COMMANDS, ids=[" ".join(c[0]) for c in COMMANDS])
def test_a_zero_or_tiny_console_width_still_prints(columns: str, args: list[str], code: int) -> None:
    r = _cli(*args, env={"COLUMNS": columns})
    assert r.returncode == code, r.stderr[-500:]
    assert "Traceback" not in r.stderr
    if code == 0:
        assert len(r.stdout.strip()) > 40, repr(r.stdout[:200])  # a table (or the help), not nothing
        assert max(len(line) for line in r.stdout.splitlines()) <= 250
    else:
        assert r.stderr.strip().splitlines()[-1 if code == 1 else 0].startswith("Error:"), r.stderr[-500:]


@pytest.mark.parametrize("columns", ["-5", "abc", "39", "2147483648"])
def test_other_bad_widths_print_the_table(columns: str) -> None:
    """A huge width is held at 10,000 (2**31 took grid --explain past 24 GB); the child is limited to 2 GB."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    r = _cli("grid", "--explain", env={"COLUMNS": columns}, preexec_fn=limit)
    assert r.returncode == 0 and "vLLM" in r.stdout, (r.stdout[:300], r.stderr[-300:])
    assert max(len(line) for line in r.stdout.splitlines()) <= 10_000


@pytest.mark.parametrize("command", ["compare", "cudagraphs"])
@pytest.mark.parametrize("value, message", [
    (str(MAX_OCCUPANCY + 1), f"--occupancy {MAX_OCCUPANCY + 1} is over the supported {MAX_OCCUPANCY}"),
    ("1000000", f"--occupancy 1000000 is over the supported {MAX_OCCUPANCY}"),
    ("0", "--occupancy must be a positive integer, got 0")])
def test_one_occupancy_bound_with_one_message(command: str, value: str, message: str) -> None:
    r = run([command, "--occupancy", value])
    assert r.exit_code == 1 and message in r.stderr, r.stderr


@pytest.mark.parametrize("command", ["compare", "cudagraphs"])
def test_the_largest_occupancy_is_taken(command: str) -> None:
    assert run([command, "--occupancy", str(MAX_OCCUPANCY)]).exit_code == 0


EMPTY_ITEMS = [
    (["compare", "-p", "vllm,,sglang"], "--policies 'vllm,,sglang' has an empty item"),
    (["compare", "-p", "vllm,"], "--policies 'vllm,' has an empty item"),
    (["determinism", "-p", "vllm,,sglang"], "--policies 'vllm,,sglang' has an empty item"),
    (["recommend", "--candidates", "1,,4"], "--candidates '1,,4' has an empty item"),
    (["recommend", "--candidates", "vllm=1,,4"], "--candidates '1,,4' has an empty item"),
    (["tune", "-w", "chat", "--heuristics", ","], "--heuristics ',' is empty"),
    (["tune", "-w", "chat", "--heuristics", "none,"], "--heuristics 'none,' has an empty item"),
    (["sweep", "-b", "1", "-s", "128", "-p", "vllm,,sglang"], "--policies 'vllm,,sglang' has an empty item"),
    (["sweep", "-b", "1", "-s", "128", "-m", "llama3-8b,,qwen3-8b"], "--model 'llama3-8b,,qwen3-8b' has an empty item"),
    (["sweep", "-b", "1", "-s", "128", "-g", "h200,"], "--gpu 'h200,' has an empty item"),
    (["cudagraphs", "--batches", "1,,4"], "--batches '1,,4' has an empty item"),
    (["calibrate", "--backends", "fa3,,flashinfer"], "--backends 'fa3,,flashinfer' has an empty item"),
]


@pytest.mark.parametrize("args, message", EMPTY_ITEMS, ids=[" ".join(a) for a, _ in EMPTY_ITEMS])
def test_an_empty_list_item_is_one_error(args: list[str], message: str) -> None:
    r = run(args)
    assert r.exit_code == 1 and message in r.stderr, r.stderr


def test_lists_without_empty_items_still_work() -> None:
    for args in (["compare", "-p", "vllm, sglang"], ["recommend", "--candidates", "1,4"],
                 ["tune", "-w", "chat", "--heuristics", "none"],
                 ["sweep", "-b", "1", "-s", "128", "-m", "llama3-8b,qwen3-8b", "-q"]):
        r = run(args)
        assert r.exit_code == 0, (args, r.stderr)
