"""Hostile inputs (issue 11, "The worst inputs"): every option of every command, and bad files.

The promise under test, for every command: the exit code is 0, 1 or 2; no traceback; an error is
one line starting ``Error:`` (exit 1) or typer's usage error (exit 2); limits are stated in the
error; no input takes more than a few seconds; no file is left behind. The limits themselves
live in :mod:`decodecalc.limits`.
"""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import typer.main
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from helpers import vllm_scrape
from decodecalc import limits
from decodecalc.cli import app
from decodecalc.workload import _divisors

RUNNER = CliRunner()
COMMANDS = typer.main.get_command(app).commands  # name -> click command
H200_PROFILE = Path(__file__).resolve().parent.parent / "decodecalc" / "profiles" / "h200.yaml"
#: no GPU run and no user profile leak in from the machine running the tests
ENV = {"TRITON_INTERPRET": None, "XDG_CONFIG_HOME": None, "DECODECALC_MODEL_DIR": None, "COLUMNS": "100"}
#: seconds one in-process invocation may take (the limits keep every command to a few)
SECONDS = 8


class Hang(Exception):
    pass


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Turn a hang into a test failure instead of a stuck suite."""

    def _raise(*_: object) -> None:
        raise Hang(f"took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run(args: list[str], env: dict | None = None, cwd: Path | None = None):
    """Invoke the CLI in-process (in ``cwd``, a scratch folder by default) and check the promise."""
    with tempfile.TemporaryDirectory() as scratch:
        here = os.getcwd()
        os.chdir(cwd or scratch)
        start = time.monotonic()
        try:
            with deadline(SECONDS * 2):
                result = RUNNER.invoke(app, args, env={**ENV, **(env or {})})
        finally:
            os.chdir(here)
        elapsed = time.monotonic() - start
        leftovers = sorted(p.name for p in Path(scratch).iterdir() if ".tmp" in p.name)
    check_clean(result, args, elapsed, leftovers)
    return result


def check_clean(result, args: list[str], elapsed: float, leftovers: list[str]) -> None:
    shown = " ".join(args)[:300]
    assert not isinstance(result.exception, Hang), f"hang: decodecalc {shown}"
    assert result.exit_code in (0, 1, 2), f"exit {result.exit_code} for decodecalc {shown}: {result.exception!r}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"decodecalc {shown} raised {result.exception!r}") from result.exception
    text = result.stdout + result.stderr
    assert "Traceback" not in text, f"traceback for decodecalc {shown}"
    assert elapsed < SECONDS, f"decodecalc {shown} took {elapsed:.1f} s"
    assert not leftovers, f"decodecalc {shown} left temp files {leftovers}"
    if result.exit_code == 1:
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("Error:")]
        assert len(errors) == 1 and lines[-1] == errors[0], f"decodecalc {shown}: not one Error: line: {lines}"
    if result.exit_code == 2:
        assert "Usage:" in result.stderr or "Usage:" in result.stdout, f"decodecalc {shown}: exit 2 without usage"


# ---------------------------------------------------------------------------------------------
# every option of every command, hostile values

NUMBERS = ["0", "-1", "1", "2", "3", "7", "64", "65537", "2147483648", "1000000000000", "9" * 40, "-9" * 20,
           "1e9", "nan", "inf", "-inf", "1.5", "0x10", " 8 "]
TEXTS = ["", " ", ",", ",,", "1,,1", "1,2,3", "4,1", "abc", "all", "none", "[bold red]x[/]", "µ", "x" * 300,
         "1:2", "0:5", "10:1", "1:99999999", "1:2:0", "1:4:x1", "1:2:x2", "1K:2K", "1:65536", "vllm", "sglang",
         "vllm=1,4", "sglang=0", "h200", "h100", "mi300x", "llama3-8b", "gemma-2-9b", "deepseek-v3", "auto", "fp8",
         "bfloat16", "int3", "NONE", "FULL", "v1", "0.9", "global", "sliding", "csv", "json", "xml", "region",
         "mean", "p99", "5%", "-5%"]
PATHS = ["/nonexistent/x.json", "/proc/x.json", "/sys/p.png", "out.json", "out.csv", "plot.png", ".", "/",
         "<binary>", "<laughs>", "<deep>", "<dir>"]
POOL = NUMBERS + TEXTS + PATHS
#: options whose value must stay small for the command to be quick (a default here would be a big run)
ALWAYS = {"sweep": ("--batch", "--seq-len")}
SMALL_RANGES = ["1", "2", "1:2", "64", "1,2,3", "128:256:128", "0:5", "10:1", "1:99999999", "1:65536", "", ",",
                "1:2:x1", "2147483648", "abc", "1K:2K"]


def _value_options(command) -> list:
    return [p for p in command.params if getattr(p, "param_type_name", "") == "option" and not p.is_flag
            and p.opts[0] not in ("--help", "-h")]


def _flags(command) -> list:
    return [p for p in command.params if getattr(p, "param_type_name", "") == "option" and p.is_flag
            and p.opts[0] not in ("--help", "-h", "--version")]


@st.composite
def invocations(draw, name: str) -> list[str]:
    command = COMMANDS[name]
    values, flags = _value_options(command), _flags(command)
    args = [name]
    for opt in ALWAYS.get(name, ()):
        args += [opt, draw(st.sampled_from(SMALL_RANGES))]
    chosen = draw(st.lists(st.sampled_from(values), max_size=4, unique_by=lambda p: p.name)) if values else []
    for p in chosen:
        if p.opts[0] in ALWAYS.get(name, ()):
            continue
        spelling = draw(st.sampled_from(p.opts))
        args += [spelling, draw(st.sampled_from(POOL))]
    for p in draw(st.lists(st.sampled_from(flags), max_size=2, unique_by=lambda p: p.name)) if flags else []:
        args.append(draw(st.sampled_from([*p.opts, *p.secondary_opts])))
    return args


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """The path placeholders of POOL: hostile files every option may be given."""
    d = tmp_path_factory.mktemp("hostile")
    (d / "binary.yaml").write_bytes(bytes(range(256)) * 8)
    (d / "laughs.yaml").write_text(LAUGHS)
    (d / "deep.json").write_text("[" * 50_000 + "]" * 50_000)
    (d / "adir").mkdir()
    return {"<binary>": str(d / "binary.yaml"), "<laughs>": str(d / "laughs.yaml"), "<deep>": str(d / "deep.json"),
            "<dir>": str(d / "adir")}


def _fill(args: list[str], files: dict[str, str]) -> list[str]:
    return [files.get(a, a) for a in args]


# verify and calibrate import torch (seconds, once) and need a GPU; tune reads workload files
FAST = [n for n in COMMANDS if n not in ("verify", "calibrate")]


@pytest.mark.parametrize("name", FAST)
@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_option_of_every_command(name: str, data, files) -> None:
    run(_fill(data.draw(invocations(name)), files))


@pytest.mark.parametrize("name", ["verify", "calibrate"])
@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_gpu_commands_fail_cleanly_without_a_gpu(name: str, data, files) -> None:
    r = run(_fill(data.draw(invocations(name)), files))
    assert r.exit_code in (1, 2)  # no GPU here (and TRITON_INTERPRET unset): never a run


# ---------------------------------------------------------------------------------------------
# the examples: each rejected before work, with the limit in the message

LIMIT_CASES = [
    (["grid", "--batch", "2147483648"], "--batch 2147483648 is over the supported 65,536"),
    (["grid", "--tp", "-1", "--batch", "2147483648"], "--tp must be a positive integer, got -1"),
    (["grid", "--batch", "100000000"], "over the supported 65,536"),
    (["compare", "--batch", "200000"], "over the supported 65,536"),
    (["recommend", "--batch", "100001"], "over the supported 65,536"),
    (["determinism", "--seq-len", "2147483648"], "--seq-len 2147483648 is over the supported 16,777,216"),
    (["determinism", "--others", "1000000000000"], "--others 1000000000000 is over the supported 16,777,216"),
    (["determinism", "--batches", "65536,65535,65534"], "over the supported 131,072"),
    (["determinism", "--batches", ",".join(map(str, range(1, 400)))], "over the supported 256"),
    (["explain", "--seq-len", "1000000000", "--query-lens", "1000000000"], "over the supported 16,777,216"),
    (["grid", "--seq-len", "1000000", "--query-lens", "1000000", "--batch", "8"], "over the supported 1,048,576"),
    (["cudagraphs", "--sglang-cuda-graph-max-bs", "1000000000000"], "over the supported 65,536"),
    (["sweep", "-b", "1:48000", "-p", "vllm", "-q", "--format", "csv", "-o", "big.csv"], "over the supported 1,048,576"),
    (["sweep", "-b", "1:64", "-s", "128:131072:128", "-p", "fa2", "-q"], "16,384"),
    (["sweep", "-b", "1", "-s", "1:16777216", "-q"], "more than the supported 1,048,576 points"),
    (["sweep", "-b", "1:65536", "-s", "1", "-q"], "over the supported 2,097,152; narrow --batch"),
    (["grid", "--kernel-block-size", "0"], "--kernel-block-size must be a positive integer"),
    (["grid", "--kernel-block-size", "3"], "must divide --block-size 16"),
    (["compare", "-p", ""], "--policies '' is empty"),
    (["sweep", "-p", " , ", "-b", "1", "-s", "128"], "is empty"),
    (["recommend", "--candidates", ""], "--candidates '' is empty"),
    (["recommend", "--candidates", "1000000000"], "over the supported 65,536"),
    (["grid", "--query-lens", "1,,1"], "has an empty item"),
    (["grid", "--batch", "64", "--max-num-seqs", "1"], "--max-num-seqs 1"),
    (["grid", "--batch", "64", "--max-num-batched-tokens", "1"], "--max-num-batched-tokens 1"),
    (["grid", "--context-len", "1"], "--context-len 1 is shorter than the longest sequence"),
    (["grid", "--sms", "100000"], "--sms 100000 is over the supported 4,096"),
    (["grid", "--bandwidth", "nan"], "--bandwidth nan"),
    (["grid", "--num-speculative-tokens", "100000"], "over the supported 1,024"),
    (["grid", "--seq-lens", "5,0,5"], "must be a positive integer"),
    (["tune", "-w", "chat", "--concurrency", "1000000000"], "over the supported 256"),
    (["tune", "-w", "chat", "--max-regression", "nan"], "--max-regression must be a finite number"),
]


@pytest.mark.parametrize("args, message", LIMIT_CASES, ids=[" ".join(a)[:60] for a, _ in LIMIT_CASES])
def test_stated_limits(args: list[str], message: str) -> None:
    r = run(args)
    assert r.exit_code == 1, r.stdout + r.stderr
    assert message in r.stderr, r.stderr


def test_limits_are_quick_at_the_limit() -> None:
    """At the largest accepted batch and length the commands still finish in seconds."""
    for cmd in ("compare", "recommend"):  # the two slowest (docs/limits.md has every command's figure)
        r = run([cmd, "--batch", str(limits.MAX_BATCH), "--seq-len", str(limits.MAX_SEQ_LEN)])
        assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("sms", ["1", "4"])
def test_time_model_cost_does_not_grow_with_programs_per_sm(sms: str) -> None:
    """Few SMs and many programs (the batch limit): the time model's scheduling must not walk the programs
    slot by slot (found by this file's fuzzing: minutes at --sms 1)."""
    r = run(["recommend", "--sms", sms, "--batch", str(limits.MAX_BATCH), "-m", "gemma-3-27b", "--batch-invariant"])
    assert r.exit_code == 0, r.stderr


def test_an_option_given_twice_is_a_usage_error() -> None:
    r = run(["sweep", "--format", "xml", "-b", "1", "-s", "128", "--format", "csv"])
    assert r.exit_code == 2 and "given more than once" in r.stderr and "--format xml" in r.stderr
    r = run(["grid", "--tp", "1", "-m", "llama3-8b", "--tp=2"])
    assert r.exit_code == 2 and "given more than once" in r.stderr
    assert run(["grid", "--tp", "-1"]).exit_code == 1  # a value starting with '-' is a value, not a repeat


def test_divisor_hint_is_not_counted_one_by_one() -> None:
    start = time.monotonic()
    divs = _divisors(10**12)
    assert time.monotonic() - start < 1.0
    assert len(divs) == 169 and divs[:4] == [1, 2, 4, 5] and divs[-1] == 10**12
    assert all(10**12 % d == 0 for d in divs) and divs == sorted(set(divs))


# ---------------------------------------------------------------------------------------------
# bad files: model YAML, HF config.json, time profiles (with --profile and in the config dir)

LAUGHS = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
MODEL = "name: x\nnum_layers: 2\nnum_attention_heads: 8\nnum_key_value_heads: 8\nhead_dim: 64\n"
HF = {"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8, "hidden_size": 512}


def _profile(**changes: object) -> str:
    data = yaml.safe_load(H200_PROFILE.read_text())
    data.update(changes)
    return yaml.safe_dump(data)


def _family_change(**changes: object) -> str:
    data = yaml.safe_load(H200_PROFILE.read_text())
    data["families"]["vllm_2d"].update(changes)
    return yaml.safe_dump(data)


def _residuals_change(**changes: object) -> str:
    data = yaml.safe_load(H200_PROFILE.read_text())
    data["residuals"].update(changes)
    return yaml.safe_dump(data)


BAD_FILES: list[tuple[str, str | bytes, str]] = [  # (file name, content, what the error must say)
    ("bigint.yaml", MODEL.replace("num_layers: 2", "num_layers: " + "9" * 5000), "unreadable value"),
    ("bigint2.yaml", MODEL.replace("num_layers: 2", "num_layers: " + "9" * 400), "field 'num_layers'"),
    ("bigint.json", json.dumps(HF).replace('"num_hidden_layers": 2', '"num_hidden_layers": ' + "9" * 5000),
     "unreadable value"),
    ("huge_float.json", json.dumps(HF).replace('"hidden_size": 512', '"hidden_size": 1e400'), "field 'hidden_size'"),
    ("intkey.yaml", MODEL + "7: 8\n", "unknown field(s) 7"),
    ("boolkey.yaml", MODEL + "yes: 8\n", "keys must be text or integers"),
    ("binary.yaml", bytes(range(256)) * 8, "binary file"),
    ("latin1.yaml", MODEL.encode() + "# caf\u00e9\n".encode("latin-1"), "not UTF-8 text"),
    ("deep.json", "[" * 100_000 + "]" * 100_000, "nested deeper than the supported 32"),
    ("deep2.json", json.dumps(HF | {"x": json.loads("[" * 40 + "]" * 40)}), "nested deeper than the supported 32"),
    ("list.yaml", "- 1\n- 2\n", "expected a mapping of fields, got list"),
    ("layer_types.json", json.dumps(HF | {"sliding_window": 64, "layer_types": {"a": 1}}), "field 'layer_types'"),
    ("text_config.json", json.dumps({"text_config": [1, 2]}), "field 'text_config'"),
    ("model_type.json", json.dumps(HF | {"model_type": ["x"]}), "field 'model_type'"),
    ("laughs.yaml", LAUGHS, "more than the supported 100,000 values"),
    ("recursive.yaml", "a: &a [*a]\n", "refers to itself"),
    ("big.yaml", "name: x\nl:\n" + "- 1\n" * 70_000, f"over the supported {limits.MAX_YAML_BYTES:,} bytes"),
    ("big.json", json.dumps({"l": [1] * 400_000}), f"over the supported {limits.MAX_FILE_BYTES:,} bytes"),
    ("many.json", json.dumps({"l": [1] * 150_000}), f"more than the supported {limits.MAX_FILE_VALUES:,} values"),
    ("tags.yaml", MODEL + "when: 2001-12-14\n", "not supported"),
    ("layers.json", json.dumps(HF | {"num_hidden_layers": 10**12, "sliding_window": 4096,
                                     "sliding_window_pattern": 6}), "over the supported 100,000"),
    ("heads.json", json.dumps(HF | {"num_attention_heads": 10**12, "num_key_value_heads": 10**12,
                                    "hidden_size": 64 * 10**12}), "over the supported 65,536"),
]


@pytest.mark.parametrize("name, content, message", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_model_files(tmp_path: Path, name: str, content: str | bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    r = run(["grid", "-m", str(path)])
    assert r.exit_code == 1 and message in r.stderr and str(path) in r.stderr, r.stderr


def test_binary_config_json_in_a_checkpoint_folder(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes(b"\xff\xfe" + bytes(range(1, 256)) * 4)
    r = run(["grid", "-m", str(tmp_path)])
    assert r.exit_code == 1 and "not UTF-8 text" in r.stderr and "config.json" in r.stderr, r.stderr


def test_a_fifo_is_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "model.yaml"
    os.mkfifo(fifo)
    r = run(["grid", "-m", str(fifo)])  # would block forever if opened
    assert r.exit_code == 1 and "not a regular file" in r.stderr


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8)),
                    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(
                        st.one_of(st.text(max_size=6), st.integers(-3, 3)), kids, max_size=4)), max_leaves=12),
       st.sampled_from(["yaml", "json"]))
def test_generated_model_files(data: object, kind: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"model.{kind}"
        try:
            text = yaml.safe_dump(data) if kind == "yaml" else json.dumps(data)
        except (ValueError, TypeError):  # json cannot write integer-and-text keys mixed: not a case
            return
        path.write_text(text)
        r = run(["grid", "-m", str(path)])
        assert r.exit_code == 1 and str(path) in r.stderr, r.stderr  # never a model, always a clean error


PROFILE_CASES = [
    ("strfam.yaml", _profile(families="oops"), "'families' must be a non-empty mapping"),
    ("strfit.yaml", _profile(fit="oops"), "'fit' must be a mapping"),
    ("negative.yaml", _profile(launch_overhead_s=-1.0), "field 'launch_overhead_s' is -1.0"),
    ("nan.yaml", _profile(launch_overhead_s=float("nan")), "launch_overhead_s"),
    ("empty.yaml", "", "expected a mapping at the top level"),
    ("other.yaml", _profile(gpu="h100-sxm"), "measured on 'h100-sxm', not on 'h200'"),
    ("laughs.yaml", LAUGHS, "more than the supported 100,000 values"),
    ("binary.yaml", bytes(range(256)) * 8, "binary file"),
    # issue 19's second campaign: tiny, zero and absurd numbers, and an integer where a list belongs
    ("tiny.yaml", _family_change(latency_s=1e-320), "family 'vllm_2d': latency_s must be between 1e-12 and 1"),
    ("zerobw.yaml", _family_change(sm_bandwidth_bytes_per_s=0.0), "sm_bandwidth_bytes_per_s must be a positive"),
    ("hbmtiny.yaml", _profile(hbm_bandwidth_bytes_per_s=1e-300), "hbm_bandwidth_bytes_per_s must be between 1000"),
    ("famhbm.yaml", _family_change(hbm_bandwidth_bytes_per_s=1e-300), "family 'vllm_2d': hbm_bandwidth_bytes_per_s"),
    ("absurdhbm.yaml", _profile(hbm_bandwidth_bytes_per_s=1e30), "hbm_bandwidth_bytes_per_s"),
    ("launch.yaml", _profile(launch_overhead_s=1e9), "launch_overhead_s must be between 0 and 1"),
    ("uncalint.yaml", _profile(fit={"uncalibrated_families": 7}), "'fit.uncalibrated_families' must be a list"),
    ("occint.yaml", _family_change(occupancy_by_head_dim=7), "vllm_2d.occupancy_by_head_dim must be a mapping"),
    ("cellsint.yaml", _residuals_change(cells=7), "'residuals.cells' must be a mapping"),
    ("bins.yaml", _residuals_change(bin_octaves=[1]), "residuals.bin_octaves must be 0.25"),
]


@pytest.mark.parametrize("name, content, message", PROFILE_CASES, ids=[c[0] for c in PROFILE_CASES])
def test_bad_profiles(tmp_path: Path, name: str, content: str | bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    r = run(["recommend", "--profile", str(path)])
    assert r.exit_code == 1 and message in r.stderr and str(path) in r.stderr, r.stderr
    # the same file as the user's calibrated profile: recommend says so, grid and compare keep their
    # tables and state why there is no predicted time (never a silently missing row)
    cfg = tmp_path / "cfg"
    (cfg / "decodecalc" / "profiles").mkdir(parents=True)
    (cfg / "decodecalc" / "profiles" / "h200.yaml").write_bytes(path.read_bytes())
    env = {"XDG_CONFIG_HOME": str(cfg), "COLUMNS": "250"}
    r = run(["recommend"], env=env)
    assert r.exit_code == 1 and message in r.stderr, r.stderr
    for cmd in ("grid", "compare"):
        r = run([cmd], env=env)
        assert r.exit_code == 0, r.stderr
        flat = " ".join(r.stdout.split())
        assert "no predicted time" in flat and message in flat, flat[-600:]


# ---------------------------------------------------------------------------------------------
# files written, and the environment


def test_sweep_plot_into_a_directory_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    r = run(["sweep", "-b", "1:4", "-s", "128:1024:128", "--plot", "adir", "-q"], cwd=tmp_path)
    assert r.exit_code == 1 and "adir" in r.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["adir"]


@pytest.mark.parametrize("target, message", [("/sys/p.png", "/sys/p.png"), ("missing/p.png", "does not exist"),
                                             ("/proc/p.png", "/proc/p.png")])
def test_failed_plot_leaves_no_csv(tmp_path: Path, target: str, message: str) -> None:
    r = run(["sweep", "-b", "1:4", "-s", "128:1024:128", "-o", "x.csv", "--plot", target, "-q"], cwd=tmp_path)
    assert r.exit_code == 1 and message in r.stderr and ".tmp" not in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("target", ["/nonexistent/x.json", "/proc/x.json", "."])
def test_output_into_a_bad_place_is_a_clean_error(tmp_path: Path, target: str) -> None:
    for cmd in (["grid"], ["compare", "--json"], ["recommend"], ["sweep", "-b", "1", "-s", "128"]):
        r = run([*cmd, "-o", target], cwd=tmp_path)
        assert r.exit_code == 1 and ".tmp" not in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_write_errors_name_the_requested_path(tmp_path: Path) -> None:
    from decodecalc.commands.output import write_files
    from decodecalc.errors import ConfigError

    def broken(_: Path) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(ConfigError, match=r"cannot write .*b\.png: No space left on device"):
        write_files([(tmp_path / "a.csv", "x"), (tmp_path / "b.png", broken)])
    assert list(tmp_path.iterdir()) == []  # all or nothing, no temp file


def _cli(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "XDG_CONFIG_HOME")}
    return subprocess.run([sys.executable, "-m", "decodecalc", *args], env={**full_env, **(env or {})},
                          capture_output=True, text=True, timeout=60, **kw)


def test_ascii_terminal_does_not_crash_on_micro() -> None:
    r = _cli("compare", env={"PYTHONIOENCODING": "ascii"})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert " us" in r.stdout and "\u00b5" not in r.stdout


def test_sigint_exits_130_and_leaves_no_file(tmp_path: Path) -> None:
    p = subprocess.Popen([sys.executable, "-m", "decodecalc", "sweep", "-b", "1:512", "-o", "big.csv", "--plot",
                          "big.png"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(2.0)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130 and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_closed_pipe_gives_no_traceback() -> None:
    p = subprocess.Popen([sys.executable, "-m", "decodecalc", "compare", "--batch", "4096", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None
    p.stdout.read(10)
    p.stdout.close()  # like `| head -c 10`
    err = p.stderr.read().decode() if p.stderr is not None else ""
    p.wait(timeout=30)
    assert "Traceback" not in err and p.returncode in (0, 1, 120, -signal.SIGPIPE), err


def test_a_broken_user_profile_names_itself_and_the_way_out(tmp_path, monkeypatch):
    """A calibrated profile of absurd constants (bandwidths of 1e-300 B/s) is one error naming the file and how to
    get back to the packaged profile; a command that times nothing still runs (issue 19, hostile profiles)."""
    import copy
    import subprocess
    import sys

    import yaml

    root = Path(__file__).resolve().parents[1]
    data = yaml.safe_load((root / "decodecalc" / "profiles" / "h200.yaml").read_text())
    bad = copy.deepcopy(data)
    for fam in bad["families"].values():
        fam["program_bandwidth_bytes_per_s"] = 1e-300
    folder = tmp_path / "decodecalc" / "profiles"
    folder.mkdir(parents=True)
    (folder / "h200.yaml").write_text(yaml.safe_dump(bad))
    env = {"XDG_CONFIG_HOME": str(tmp_path), "COLUMNS": "80", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "decodecalc", *args], capture_output=True, text=True, env=env,
                              cwd=root, timeout=120)

    r = run("tune", "-w", "chat", "--heuristics", "none", "--engine", "sglang")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    line = r.stderr.strip()
    assert line.startswith("Error:") and "\n" not in line
    assert "program_bandwidth_bytes_per_s must be between" in line and f"remove {folder / 'h200.yaml'}" in line
    assert run("grid", "-m", "llama3-8b").returncode == 0


def test_outputs_to_devices_and_twice_to_one_file(tmp_path):
    """Issue 19 hostile outputs: `-o /dev/full` exited 0 (and, as root, replaced the device with a file);
    `-o a.csv --plot a.csv` overwrote its own output. A device is written into and a failed write is an error; two
    outputs naming one file are refused and nothing is written."""
    import stat

    root = Path(__file__).resolve().parents[1]
    env = {"COLUMNS": "80", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "decodecalc", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)

    if Path("/dev/full").exists() and stat.S_ISCHR(os.stat("/dev/full").st_mode):
        r = run("grid", "-m", "llama3-8b", "-o", "/dev/full")
        assert r.returncode == 1 and "cannot write /dev/full: No space left on device" in r.stderr
        assert stat.S_ISCHR(os.stat("/dev/full").st_mode)  # still the device
    r = run("grid", "-m", "llama3-8b", "-o", "/dev/null")
    assert r.returncode == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    r = run("sweep", "-b", "1:2", "-s", "1K:2K:x2", "-q", "-o", "a.csv", "--plot", "a.csv")
    assert r.returncode == 1 and "named for two outputs" in r.stderr and not (tmp_path / "a.csv").exists()


@pytest.mark.parametrize("body, needle", [
    ("import sys\ndef splits(step):\n    sys.exit(0)\n", "raised SystemExit: 0"),
    ("import sys\nsys.exit(0)\ndef splits(step):\n    return [1] * step.batch\n", "cannot load it: SystemExit"),
    ("def splits(step):\n    return [2**63] * step.batch\n", "expected integers from 1 to 65,535"),
    ("def segments(step):\n    return 10**30\n", "expected integers from 1 to 65,535"),
])
def test_a_rule_that_exits_or_asks_for_absurd_counts_is_an_error(tmp_path, body, needle):
    """Issue 19: a --rule calling sys.exit(0) ended tune with status 0 and no output; one returning 2^63 splits
    reached an OverflowError."""
    rule = tmp_path / "rule.py"
    rule.write_text(body)
    r = CliRunner().invoke(app, ["tune", "-w", "chat", "--rule", str(rule), "--heuristics", "none"],
                           env={"COLUMNS": "200"})
    assert r.exit_code == 1 and r.output.startswith("Error:") and needle in r.output, r.output
    assert "Traceback" not in r.output


# every text file decodecalc reads refuses a binary and a non-UTF-8 file by one rule (decodecalc/textfiles.py)
TEXT_READERS = [  # (what the file is, the command reading it; FILE is replaced by its path, its own valid first line)
    ("a model file", ["grid", "-m", "FILE"], b"name: x\n", "YAML or JSON text"),
    ("a time profile", ["recommend", "--profile", "FILE"], b"schema: 1\n", "YAML or JSON text"),
    ("a step trace", ["tune", "-m", "llama3-8b", "--steps", "FILE"], b'{"seq_lens": [5]}\n', "a step trace"),
    ("a request trace", ["tune", "-m", "llama3-8b", "--requests", "FILE"], b"prompt_tokens,output_tokens\n5,3\n",
     "a text request trace"),
    ("a /metrics scrape", ["tune", "-m", "llama3-8b", "--metrics", "FILE"], b"# HELP x y\n", "a /metrics scrape"),
]


@pytest.mark.parametrize("what, args, first, kind", TEXT_READERS, ids=[t[0] for t in TEXT_READERS])
@pytest.mark.parametrize("bad, message", [(b"a\x00b\n", "a binary file (a NUL byte), not "),
                                          (b"caf\xe9\n", "not UTF-8 text, so not ")])
def test_one_rule_for_binary_and_non_utf8_text(tmp_path, what, args, first, kind, bad, message) -> None:
    path = tmp_path / ("f.yaml" if "YAML" in kind else "f.txt")
    path.write_bytes(first + bad)
    r = run([str(path) if a == "FILE" else a for a in args])
    assert r.exit_code == 1 and message + kind in r.stderr and str(path) in r.stderr, r.stderr
    assert re.search(r"(line|byte) \d", r.stderr), r.stderr  # where in the file


# ---------------------------------------------------------------------------------------------
# the third campaign (tools/hostile_campaign.py, issue 19 re-run): one test per class it found


@pytest.mark.parametrize("args, fragment", [
    (["tune", "-m", "llama3-8b", "--requests", "a\nb"], "Error: a\\nb: no such file"),
    (["recommend", "--profile", "bad\r\nname.yaml"], "Error: cannot read time profile bad\\nname.yaml:"),
    (["tune", "-w", "chat", "--rule", "x\u2028y.py"], "Error: --rule x\\ny.py: no such file"),
])
def test_a_line_break_in_a_value_stays_on_the_error_line(args: list[str], fragment: str) -> None:
    """A file name holding a line break printed the error over two lines (the second not starting 'Error:')."""
    r = run(args)
    assert r.exit_code == 1 and r.stderr.startswith(fragment) and r.stderr.count("\n") == 1, r.stderr


def test_a_rule_raising_a_multi_line_or_huge_message_is_one_error_line(tmp_path: Path) -> None:
    rule = tmp_path / "rule.py"
    rule.write_text("def segments(step):\n    raise ValueError('line one\\nline two\\n' + 'x' * 100000)\n")
    r = run(["tune", "-w", "chat", "--heuristics", "none", "--engine", "vllm", "--rule", str(rule)])
    assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.stderr[:300]
    assert "raised ValueError: line one\\nline two\\nxxx" in r.stderr and "more characters)" in r.stderr
    assert len(r.stderr) < 2300


@pytest.mark.parametrize("body, needle", [
    ("class B(BaseException):\n    pass\ndef segments(step):\n    raise B('custom base')\n",
     "segments(step) raised B: custom base on the step at"),
    ("def segments(step):\n    raise GeneratorExit('x')\n", "segments(step) raised GeneratorExit: x on the step"),
    ("class E(Exception):\n    def __str__(self):\n        raise RuntimeError('no str')\ndef segments(step):\n"
     "    raise E()\n", "segments(step) raised E: (its message cannot be printed)"),
    ("def segments(step):\n    return 10 ** 5000\n", "returned an integer of over 4,300 digits for the step"),
    ("class B(BaseException):\n    pass\nraise B('at import')\n", "cannot load it: B: at import"),
])
def test_a_rule_failing_in_any_way_is_one_error(tmp_path: Path, body: str, needle: str) -> None:
    """Issue 19, third campaign: a --rule raising a BaseException subclass (GeneratorExit, its own), an exception
    whose __str__ raises, or returning an integer too long to print reached a traceback."""
    rule = tmp_path / "rule.py"
    rule.write_text(body)
    r = run(["tune", "-w", "chat", "--heuristics", "none", "--engine", "vllm", "--rule", str(rule)])
    assert r.exit_code == 1 and needle in r.stderr, r.stderr


def test_a_huge_rule_file_is_refused_before_reading(tmp_path: Path) -> None:
    rule = tmp_path / "rule.py"
    with open(rule, "wb") as f:
        f.truncate(3 * 2**30)  # sparse: no disk, but compiling it would take 3 GB
    r = run(["tune", "-w", "chat", "--rule", str(rule)])
    assert r.exit_code == 1 and "3,221,225,472 bytes, over the supported 1,048,576 for a rule file" in r.stderr


@pytest.mark.parametrize("content, message", [
    ('{"seq_lens": [9223372036854775808]}\n', "line 1, field 'seq_lens': 9,223,372,036,854,775,808 tokens is over "
                                                "the supported 16,777,216"),
    ('{"seq_lens": [16777216], "query_lens": [16777216]}\n', "line 1, field 'query_lens': 16,777,216 query tokens "
                                                             "in one step, over the supported 1,048,576"),
    ('{"seq_lens": [100], "weight": 5000000000000000}\n{"seq_lens": [200], "weight": 5000000000000000}\n',
     "line 2, field 'weight': the weights add up to 10,000,000,000,000,000 steps, over the supported "
     "9,007,199,254,740,992"),
    ('{"seq_lens": [100], "weight": 9223372036854775808}\n', "field 'weight': 9,223,372,036,854,775,808 is over"),
])
def test_step_files_past_the_limits(tmp_path: Path, content: str, message: str) -> None:
    """Issue 19, third campaign: a KV length past int64 reached an OverflowError, 16M query tokens in one step a
    MemoryError (over 2 GB), and weights adding up past int64 printed a workload of '-2 steps'."""
    steps = tmp_path / "steps.jsonl"
    steps.write_text(content)
    r = run(["tune", "--heuristics", "none", "--engine", "vllm", "--steps", str(steps)])
    assert r.exit_code == 1 and message in r.stderr, r.stderr


@pytest.mark.parametrize("name, content, message", [
    ("late.csv", "prompt_tokens,output_tokens,arrival_s\n100,20,0\n100,20,1e300\n",
     "late.csv, line 3: arrives 1e+300 s after the first request, more than the supported 315,360,000 s"),
    ("vllm.json", json.dumps({"endpoint_type": "openai", "input_lens": [100] * 5, "output_lens": [20] * 5,
                              "request_rate": 1e-300}), "vllm.json, request 5: arrives 4e+300 s after the first"),
    ("sglang.jsonl", json.dumps({"dataset_name": "sharegpt", "input_lens": [100, 100], "output_lens": [20, 20],
                                 "request_rate": 1e-300}) + "\n", "sglang.jsonl, request 2: arrives 1e+300 s"),
    ("denormal.json", json.dumps({"endpoint_type": "openai", "input_lens": [100] * 2, "output_lens": [20] * 2,
                                  "request_rate": 5e-324}), "field 'request_rate': 5e-324 req/s puts request 2 at an "
                                                            "infinite time"),
])
def test_request_traces_arriving_too_late(tmp_path: Path, name: str, content: str, message: str) -> None:
    """Issue 19, third campaign: an arrival 1e300 s after the first (or a request_rate of 1e-300 req/s) reached an
    OverflowError in the batching model's int64 step counts."""
    trace = tmp_path / name
    trace.write_text(content)
    r = run(["tune", "--heuristics", "none", "--engine", "vllm", "--requests", str(trace)])
    assert r.exit_code == 1 and message in r.stderr, r.stderr


_SCRAPE = vllm_scrape("LE")


@pytest.mark.parametrize("edge, code", [("NaN", 1), ("1e300", 1), ("2147483649", 1), ("1000.0", 0)])
def test_metrics_bucket_edges_past_any_token_count(tmp_path: Path, edge: str, code: int) -> None:
    """Issue 19, third campaign: a histogram bucket le="NaN" reached a ValueError, le="1e300" an OverflowError in
    the length fit (tune --metrics)."""
    scrape = tmp_path / "metrics.txt"
    scrape.write_text(_SCRAPE.replace("LE", edge))
    r = run(["tune", "--heuristics", "none", "--engine", "vllm", "--metrics", str(scrape)])
    assert r.exit_code == code, r.stderr
    if code:
        assert (f"a vllm:request_prompt_tokens_bucket sample with le='{edge}'; a bucket edge is a token count up to "
                "2,147,483,648") in r.stderr, r.stderr


def _cli_2gb(*args: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in a child process limited to 2 GB of address space (what would take more fails there, not here)."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    root = Path(__file__).resolve().parents[1]
    full = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "COLUMNS": "100", "HOME": str(cwd), **env}
    return subprocess.run([sys.executable, "-m", "decodecalc", *args], env=full, capture_output=True, text=True,
                          timeout=60, cwd=cwd, preexec_fn=limit)


def _hub_repo(home: Path, repo: str) -> Path:
    folder = home / "hub" / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "snapshots" / "abc").mkdir(parents=True)
    return folder


def test_hub_cache_refs_main_is_read_a_few_bytes_at_most(tmp_path: Path) -> None:
    """Issue 19, third campaign: a 3 GB refs/main in $HF_HOME (sparse here) was read whole by grid -m org/name
    (MemoryError past 2 GB), and tune's tokenizer lookup followed a non-UTF-8 one into a UnicodeDecodeError."""
    repo = _hub_repo(tmp_path, "org/name")
    (repo / "snapshots" / "abc" / "config.json").write_text(json.dumps(HF))
    with open(repo / "refs" / "main", "wb") as f:
        f.truncate(3 << 30)
    r = _cli_2gb("grid", "-m", "org/name", "--json", env={"HF_HOME": str(tmp_path)}, cwd=tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-500:]
    assert json.loads(r.stdout)["model"]["name"] == "org/name"  # the snapshot, found without refs/main
    llama = _hub_repo(tmp_path, "meta-llama/Meta-Llama-3-8B")
    (llama / "refs" / "main").write_bytes(b"caf\xe9")
    trace = tmp_path / "sharegpt.json"
    trace.write_text(json.dumps([{"id": "a", "conversations": [{"from": "human", "value": "hi there"},
                                                                {"from": "gpt", "value": "hello"}]}]))
    r = run(["tune", "--heuristics", "none", "--engine", "vllm", "--requests", str(trace)],
            env={"HF_HOME": str(tmp_path), "HF_HUB_CACHE": None})
    assert r.exit_code == 0 and "token counts estimated" in " ".join(r.stdout.split()), r.stdout[-400:]


def test_a_huge_tokenizer_file_is_refused_before_reading(tmp_path: Path) -> None:
    tok = tmp_path / "tokenizer.json"
    with open(tok, "wb") as f:
        f.truncate(3 << 30)
    trace = tmp_path / "sharegpt.json"
    trace.write_text(json.dumps([{"id": "a", "conversations": [{"from": "human", "value": "hi"},
                                                                {"from": "gpt", "value": "hello"}]}]))
    r = _cli_2gb("tune", "--heuristics", "none", "--engine", "vllm", "--requests", str(trace), "--tokenizer", str(tok),
                 env={}, cwd=tmp_path)
    assert r.returncode == 1 and "3,221,225,472 bytes, over the supported 67,108,864 for a tokenizer.json" in r.stderr


def test_output_into_a_fifo(tmp_path: Path) -> None:
    """Issue 19, third campaign: -o into a FIFO that nothing reads from hung forever (open for writing waits for a
    reader); it is now an error after a few seconds, and a FIFO with a reader gets the JSON."""
    import threading

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    r = run(["grid", "-o", str(fifo)])  # run() fails on a hang (16 s)
    assert r.exit_code == 1 and f"cannot write {fifo}: a FIFO that nothing reads from (waited 5 s" in r.stderr
    assert 5 <= time.monotonic() - start < 10
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    r = run(["grid", "--json", "-o", str(fifo)])
    reader.join(10)
    assert r.exit_code == 0 and json.loads(got[0])["model"]["name"] == "llama3-8b"


def test_output_to_a_link_to_stdout_writes_into_it(tmp_path: Path) -> None:
    """Issue 19, third campaign: with stdout redirected to a file, `-o /dev/stdout` replaced the /dev/stdout link
    itself with a plain file (as root; it leads to a regular file, so it was staged and os.replace'd). Tested on a
    link of our own to /proc/self/fd/1, never on /dev/stdout: a path through a descriptor is written into."""
    root = Path(__file__).resolve().parents[1]
    link = tmp_path / "stdout-link"
    os.symlink("/proc/self/fd/1", link)
    out = tmp_path / "out.txt"
    for args in (["grid", "--json", "-o", str(link)], ["sweep", "-b", "1:2", "-s", "128:256:128", "-q", "-o", str(link)]):
        with open(out, "w") as f:
            r = subprocess.run([sys.executable, "-m", "decodecalc", *args], stdout=f, stderr=subprocess.PIPE,
                               text=True, timeout=60, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})
        assert r.returncode == 0, r.stderr
        assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
        text = out.read_text()
        if args[0] == "grid":  # the file, then --json's copy on stdout: twice the same document
            first, end = json.JSONDecoder().raw_decode(text)
            assert json.loads(text[end:]) == first
        else:
            assert text.startswith("model,tp,gpu,policy,batch,seq_len")
    r = run(["grid", "-o", "/dev/fd/97"])
    assert r.exit_code == 1 and "cannot write /dev/fd/97: Bad file descriptor" in r.stderr, r.stderr


@pytest.mark.parametrize("args", [["grid"], ["gpus"], ["sweep", "-b", "1:2", "-s", "128:256:128", "-q"],
                                  ["tune", "-w", "chat", "--engine", "vllm", "--heuristics", "none"]])
def test_standard_output_that_cannot_be_written(tmp_path: Path, args: list[str]) -> None:
    """Issue 19, third campaign: with stdout closed (`>&-`) every command printed nothing and exited 0; into
    /dev/full it printed 'Error: No space left on device', then Python's 'Exception ignored' lines, exit 120."""
    import stat

    root = Path(__file__).resolve().parents[1]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "COLUMNS": "100"}
    cmd = [sys.executable, "-m", "decodecalc", *args]
    r = subprocess.run(cmd, stderr=subprocess.PIPE, text=True, timeout=60, cwd=tmp_path, env=env,
                       preexec_fn=lambda: os.close(1))
    assert r.returncode == 1 and r.stderr == ("Error: cannot write standard output: it is closed (give it a file, "
                                              "or /dev/null)\n"), r.stderr
    if Path("/dev/full").exists() and stat.S_ISCHR(os.stat("/dev/full").st_mode):
        with open("/dev/full", "w") as full:
            r = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60, cwd=tmp_path, env=env)
        assert r.returncode == 1 and r.stderr == "Error: cannot write standard output: No space left on device\n"
    r = subprocess.run([*cmd, "-o", "x.out"] if args[0] == "sweep" else ["true"], stderr=subprocess.PIPE, text=True,
                       timeout=60, cwd=tmp_path, env=env, preexec_fn=lambda: os.close(1))
    assert r.returncode == 0 and r.stderr == ""  # sweep -q -o prints nothing: a closed stdout is no error


def test_an_unknown_mplbackend_does_not_stop_a_plot(tmp_path: Path) -> None:
    """Issue 19, third campaign: MPLBACKEND=nonexistent made importing matplotlib raise, a traceback in sweep --plot
    and tune --plot; the PNG is drawn with Agg whatever the variable says."""
    root = Path(__file__).resolve().parents[1]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "MPLBACKEND": "nonexistent", "HOME": str(tmp_path),
           "MPLCONFIGDIR": str(tmp_path / "mpl")}
    r = subprocess.run([sys.executable, "-m", "decodecalc", "sweep", "-b", "1:4", "-s", "128:1024:128", "-q", "--plot",
                        "p.png"], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-600:]
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args", [["grid", "--json"], ["compare", "--json"], ["recommend"],
                                  ["tune", "-w", "chat", "--engine", "vllm", "--heuristics", "none"]])
def test_a_vanishing_bandwidth_is_refused(args: list[str]) -> None:
    """Issue 19, third campaign: --bandwidth 1e-320 (positive, so accepted) made every roofline and predicted time
    inf, and grid --json printed 'Infinity', which is not JSON."""
    r = run([*args, "--bandwidth", "1e-320"])
    assert r.exit_code == 1 and "--bandwidth 1e-320 GB/s is outside the supported 1 to 1,000,000" in r.stderr
    r = run([*args, "--bandwidth", "1"])
    assert r.exit_code == 0 and "Infinity" not in r.stdout, r.stderr


def test_tune_plot_when_the_pick_is_the_default(tmp_path: Path) -> None:
    """Issue 19, third campaign: when every engine's pick was its default, tune --plot drew no line at all and
    matplotlib printed 'UserWarning: No artists with labels found to put in legend' under the table."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = run(["tune", "-w", "mix:prompt=64,output=16,steps=20", "--engine", "vllm", "--heuristics", "none", "--plot",
                 "t.png", "--json"], cwd=tmp_path)
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["engines"]["vllm"]["best"] == data["engines"]["vllm"]["default"]  # the case: the pick is the default
    assert not [w for w in caught if "legend" in str(w.message)], [str(w.message) for w in caught]
