"""What a new user meets first (issue 19): the names they copy from Hugging Face and nvidia-smi are accepted, a
length past the model's context is said, and the worst mix specs are clean errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from decodecalc.errors import ConfigError
from decodecalc.specs.gpus import resolve_gpu
from decodecalc.specs.models import resolve_model

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "decodecalc", *args], capture_output=True, text=True, cwd=ROOT,
                          env={"COLUMNS": "80", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, timeout=120)


@pytest.mark.parametrize("spec, name", [("meta-llama/Llama-3.1-70B", "llama3.1-70b"),
                                        ("meta-llama/llama-3.1-8b", "llama3.1-8b")])
def test_a_models_own_hugging_face_id_names_it(spec, name):
    assert resolve_model(spec).name == name


@pytest.mark.parametrize("reported, row", [("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H200", "h200"),
                                           ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
                                           ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
                                           ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("NVIDIA H100 PCIe", "h100-pcie"),
                                           ("AMD Instinct MI300X", "mi300x")])
def test_the_names_nvidia_smi_and_torch_print_are_accepted(reported, row):
    assert resolve_gpu(reported).name == row


def test_a_length_past_the_models_context_is_a_warning_not_silence():
    past = cli("grid", "-m", "llama3-8b", "-s", "8193", "--json")
    assert past.returncode == 0 and past.stdout.startswith("{")  # the JSON stays clean
    assert "warning: KV length 8,193 is past llama3-8b's context of 8,192 tokens" in " ".join(past.stderr.split())
    assert cli("grid", "-m", "llama3-8b", "-s", "8192", "--json").stderr == ""


@pytest.mark.parametrize("spec, needle", [("mix:prompt=nan,output=10", "prompt=nan is not a finite number"),
                                          ("mix:prompt=10,output=inf", "output=inf is not a finite number"),
                                          ("mix:prompt=1e12,output=10", "prompt must be 1 to 2,147,483,648"),
                                          ("mix:prompt=10,output=10,steps=1e6", "from 1 to 100,000")])
def test_mix_specs_that_cannot_be_are_errors(spec, needle):
    from decodecalc.traffic import parse_mix

    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        parse_mix(spec)


def test_a_model_name_with_markup_prints_as_written(tmp_path):
    text = (ROOT / "model_configs" / "llama3-8b.yaml").read_text()
    lines = ['name: "[/red]"' if line.startswith("name:") else line for line in text.splitlines()]
    path = tmp_path / "red.yaml"
    path.write_text("\n".join(lines) + "\n")
    r = cli("tune", "-w", "chat", "-m", str(path), "--heuristics", "none", "--engine", "sglang")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("[/red] TP=1") and "Traceback" not in r.stderr
