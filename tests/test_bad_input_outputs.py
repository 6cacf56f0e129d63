"""Issue 43, "Bad input", data loss: an output option that names a file an input option reads is refused before
anything is read or written (exit 1, one ``Error:`` line), for every command and every output option, with the paths
compared as the system resolves them (a symbolic link, a hard link, ``dir/..``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from test_hostile_inputs import H200_PROFILE, MODEL, run

QUICK_ROWS = Path(__file__).resolve().parent / "data" / "calibrate_h200_quick_rows.json"
CONTENT = {"t.csv": "prompt_tokens,output_tokens,arrival_s\n100,20,0\n200,30,0.5\n",
           "s.jsonl": '{"seq_lens": [100, 200], "weight": 1}\n',
           "m.txt": "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 8.0\n",
           "m.yaml": MODEL, "r.py": "def splits(step):\n    return 4\n", "tok.json": "{}\n",
           "p.yaml": H200_PROFILE.read_text(), "m.json": QUICK_ROWS.read_text()}

# (arguments with FILE for the input, the input file, the output option)
CASES = [
    (["tune", "--requests", "FILE"], "t.csv", "--plot"),
    (["tune", "--requests", "FILE"], "t.csv", "-o"),
    (["tune", "--steps", "FILE"], "s.jsonl", "-o"),
    (["tune", "--metrics", "FILE"], "m.txt", "--output"),
    (["tune", "-w", "chat", "--profile", "FILE"], "p.yaml", "-o"),
    (["tune", "-w", "chat", "--rule", "FILE"], "r.py", "--plot"),
    (["tune", "-w", "chat", "-m", "FILE"], "m.yaml", "-o"),
    (["tune", "--requests", "t.csv", "--format", "sharegpt", "--tokenizer", "FILE"], "tok.json", "-o"),
    (["tune", "-w", "chat", "--measured", "FILE"], "m.json", "-o"),
    (["grid", "-m", "FILE"], "m.yaml", "-o"),
    (["compare", "-m", "FILE"], "m.yaml", "--output"),
    (["recommend", "--profile", "FILE"], "p.yaml", "-o"),
    (["recommend", "-m", "FILE"], "m.yaml", "-o"),
    (["calibrate", "--from-measurements", "FILE"], "m.json", "-o"),
    (["calibrate", "--model", "FILE", "--quick"], "m.yaml", "--save-measurements"),
    (["sweep", "-b", "1", "-s", "128", "-m", "llama3-8b,FILE"], "m.yaml", "-o"),
    (["sweep", "-b", "1", "-s", "128", "-m", "FILE"], "m.yaml", "--plot"),
    (["verify", "-m", "FILE"], "m.yaml", "-o"),
]


def _files(folder: Path) -> None:
    for name, text in CONTENT.items():
        (folder / name).write_text(text)


@pytest.mark.parametrize("args, name, out", CASES, ids=[f"{c[0][0]}-{c[1]}-{c[2]}" for c in CASES])
def test_an_output_naming_an_input_is_refused_and_the_input_kept(tmp_path: Path, args: list[str], name: str,
                                                                 out: str) -> None:
    _files(tmp_path)
    before = (tmp_path / name).read_bytes()
    r = run([*(a.replace("FILE", name) for a in args), out, name], cwd=tmp_path)
    assert r.exit_code == 1, r.stdout[-300:] + r.stderr
    option = args[next(i for i, a in enumerate(args) if "FILE" in a) - 1]
    option = {"-m": "--model"}.get(option, option)
    assert f"is the file {option} reads ({name}): writing it would destroy that input" in r.stderr, r.stderr
    assert (tmp_path / name).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(CONTENT)  # nothing else written


@pytest.mark.parametrize("how", ["symlink", "hardlink", "dotdot", "absolute"])
def test_the_same_file_by_another_name_is_refused(tmp_path: Path, how: str) -> None:
    _files(tmp_path)
    (tmp_path / "sub").mkdir()
    other = {"symlink": "link.yaml", "hardlink": "hard.yaml", "dotdot": "sub/../m.yaml",
             "absolute": str(tmp_path / "m.yaml")}[how]
    if how == "symlink":
        os.symlink("m.yaml", tmp_path / "link.yaml")
    elif how == "hardlink":
        os.link(tmp_path / "m.yaml", tmp_path / "hard.yaml")
    r = run(["grid", "-m", "m.yaml", "-o", other], cwd=tmp_path)
    assert r.exit_code == 1 and "is the file --model reads (m.yaml)" in r.stderr, r.stderr
    assert (tmp_path / "m.yaml").read_text() == MODEL


def test_a_checkpoint_folders_config_is_an_input_too(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8, '
                                      '"hidden_size": 512}')
    before = (ckpt / "config.json").read_bytes()
    r = run(["grid", "-m", str(ckpt), "-o", str(ckpt / "config.json")])
    assert r.exit_code == 1 and "is the file --model reads" in r.stderr, r.stderr
    assert (ckpt / "config.json").read_bytes() == before


def test_outputs_apart_from_the_inputs_are_written(tmp_path: Path) -> None:
    _files(tmp_path)
    r = run(["grid", "-m", "m.yaml", "-o", "out.json"], cwd=tmp_path)
    assert r.exit_code == 0 and (tmp_path / "out.json").is_file(), r.stderr
    # a model id that is not a file loses nothing, whatever the output is called
    r = run(["grid", "-o", "llama3-8b"], cwd=tmp_path)
    assert r.exit_code == 0 and (tmp_path / "llama3-8b").is_file(), r.stderr


def test_every_path_option_is_an_input_or_an_output() -> None:
    """A new option taking a file is classified, so the check above covers it (source folders are read-only inputs
    that no output can name as a file)."""
    from decodecalc.commands.output import INPUT_OPTIONS, OUTPUT_OPTIONS
    from test_hostile_inputs import COMMANDS

    folders = {"vllm_src", "sglang_src"}
    for name, command in COMMANDS.items():
        for p in command.params:
            if "Path" in str(p.bare_type()):
                assert p.name in INPUT_OPTIONS or p.name in OUTPUT_OPTIONS or p.name in folders, (name, p.name)
