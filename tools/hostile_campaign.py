#!/usr/bin/env python3
"""A hostile-inputs campaign over every decodecalc command (issue 19, re-run).

Generates a deterministic (seeded) set of hostile invocations - values for every option of every command
(enumerated from the typer app), option combinations, bad model / profile / step-trace / request-trace /
metrics / rule / tokenizer / measurement files, hostile environment variables (COLUMNS, XDG_CONFIG_HOME,
DECODECALC_MODEL_DIR, HF_HOME, ...), bad output targets (-o, --plot), closed and full standard output, and
signals - and runs each one as its own ``python -m decodecalc`` process in a fresh temp folder, one at a
time, with a wall-clock limit (20 s) and an address-space limit (2 GB, ``resource.setrlimit`` in the child).

Each run is classified:

=====================  =============================================================================
ok                     exit 0
clean-error            exit 1 with one ``Error:`` line (the last on stderr), or exit 2 with ``Error:``/usage
signal-ok              a signalled run that ended as documented (SIGINT 130, SIGTERM/SIGHUP by the signal)
traceback              'Traceback' in stdout or stderr
hang                   still running after the time limit (killed)
memory                 MemoryError / cannot allocate, or killed by SIGKILL/SIGSEGV/SIGABRT (the 2 GB limit)
left-behind            a failing (or signalled) run left a file in its temp folder
stray-file             a successful run left a file it was not asked to write (a temp file)
write-failed-exit-0    exit 0 although a requested output could not be written (or is missing / empty)
damaged-system         the run changed /dev/stdout, /dev/null... or made an entry in / or /dev (put back)
accepted-nonsense      exit 0 for an input the campaign knows to be invalid (an absurd value or file)
python-warning         a raw Python warning (``...Warning:``) on stderr
messy-error            exit 1/2 without one final ``Error:`` line (several lines, or none)
bad-exit               any other exit status
nan-in-output          exit 0 with a NaN / inf printed as a number (to review)
slow                   clean, but over half the time limit (to review)
=====================  =============================================================================

It prints a table by class (and by class x command) and writes the non-clean cases, with their exact
command lines and environment, to a JSON file.

Usage (one core, as the campaign was run)::

    taskset -c 1 python -m tools.hostile_campaign --out hostile.json
    taskset -c 1 python -m tools.hostile_campaign --root /tmp/snapshot --only tune --limit 50

``--root`` is the source tree to test (``PYTHONPATH`` of the children; default: this checkout); testing a
``git archive`` snapshot keeps the run apart from files being edited. A run of about 2,400 invocations takes
about 25 minutes on one free core.

Expected, by design, and left in the counts: a ``--rule`` file is the user's own Python, so a rule that loops
forever (hang), allocates without end (memory, reported as its MemoryError), raises KeyboardInterrupt (exit 130),
signals its own process, writes a file, warns, closes sys.stdout or lowers the recursion limit does what it
says. Run as root, a case that replaces a device or link (``/dev/stdout``) or creates an entry in ``/`` or
``/dev`` is classified damaged-system and put back at once. Peak RSS is wait4's, which starts from this
process's own at fork (it enumerates the options in a child to stay small).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import re
import resource
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 20.0
MEMORY_BYTES = 2 * 1024**3
SLOW_S = TIMEOUT_S / 2
CLEAN = ("ok", "clean-error", "signal-ok")
REVIEW = ("slow", "nan-in-output")


# ---------------------------------------------------------------------------------------------------------------
# cases


@dataclass
class Case:
    group: str  # value | combo | file:<kind> | env | output | stdout | signal
    command: str
    args: list[str]  # may hold "@fx/NAME" (a fixture) and "@run/NAME" (a path in the run's temp folder)
    env: dict[str, str | None] = field(default_factory=dict)  # None: unset; values may hold @fx/ and @run/
    setup: dict[str, str] = field(default_factory=dict)  # run-folder name -> fixture name, or "fifo:" / "dir:"
    outputs: list[str] = field(default_factory=list)  # output arguments as given (checked after exit 0)
    write_fails: bool = False  # an output target that cannot be written: exit 0 is a failed write
    expect_error: bool = False  # an input the campaign knows is invalid: exit 0 is accepted nonsense
    stdout: str = "file"  # file | closed | devfull | pipe-close
    signal: tuple[int, float] | None = None  # (signal, seconds after start)
    note: str = ""
    id: int = 0


NUMBERS = ["0", "-1", "1", "2", "3", "7", "64", "65537", "2147483648", "1000000000000", "9" * 40, "-" + "9" * 20,
           "1e9", "nan", "inf", "-inf", "1.5", "0x10", " 8 ", "", "1_000", "+5", "-0", "\u0663", "1e400", "5e-324"]
ABSURD = {"-1", "-" + "9" * 20, "nan", "inf", "-inf", "1e400", "9" * 40}
FLOATS = NUMBERS + ["1e-320", "1e308", "-0.0", "0.0", "1e-9", "100000000"]
TEXTS = ["", " ", ",", ",,", "1,,1", "1,2,3", "4,1", "abc", "all", "none", "[bold red]x[/]", "\u00b5", "x" * 300,
         "1:2", "0:5", "10:1", "1:99999999", "1:2:0", "1:4:x1", "1K:2K", "vllm", "sglang", "h200", "auto",
         "fp8", "NONE", "-5%", "a\nb", "\x1b[31mred", "\u202eevil", "%s%n", "{0}", "'; rm -rf /", "-", "--", "-h",
         "--help", "\x7f", "\ud800" if False else "\u00e9\u0301"]
LISTS = ["", ",", ",,", "1,,1", "0", "-1", "1,2,3", "4,1", "1 2", "1;2", "1,nan", "1,1e3", "1," * 300,
         ",".join(["65536"] * 300), "2147483648", "1,2147483648", "0x10", "abc", " 1 , 2 ", "1:4", "9" * 40,
         ",".join(str(i) for i in range(1, 257)), "65536,65536", "1.5", "inf", "8,-8", "16777216"]
RANGES = ["1", "2", "1:2", "64", "1,2,3", "128:256:128", "0:5", "10:1", "1:99999999", "1:65536", "", ",",
          "1:2:x1", "2147483648", "abc", "1K:2K", "1:4:0", "1:4:-1", "1:4:x0", "1:4:x1.5", "-4:-1", "1:4:nan",
          "1:1e9", "1:2:x2", "1K:1M:x2", "4:4", "1:16:x999999999", "0", "1:", ":4", "::", "1::2"]
NAMELISTS = ["", ",", "all", "none", "vllm", "sglang", "vllm,vllm", "VLLM", "fa2,fa3,flashinfer", "nonexistent",
             "vllm,,sglang", "x" * 300, "[red]x", "vllm-default,sglang-bound", "flashdecoding", "auto", "vllm;sglang",
             "triton", "flashmla", "aiter", "vllm-rocm", "flashinfer-tc", "none,vllm"]
MODELS = ["llama3-8b", "LLAMA3-8B", "gemma-2-9b", "deepseek-v3", "nonexistent", "", " ", "meta-llama/x", "a/b/c",
          "/", ".", "..", "../..", "~", "~nobody/x.yaml", "x.yaml", "x.json", "/dev/null", "/dev/zero", "/proc/self",
          "/nonexistent/x.yaml", "meta-llama/Meta-Llama-3-8B", "x" * 300, "[bold]x", "a\nb", "-m", "models--a--b",
          "@fx/model_dir", "@fx/empty_dir", "@fx/fifo.yaml", "@fx/urandom.yaml", "@fx/zero.json", "@fx/loop.yaml",
          "@fx/dangling.yaml", "@fx/m_binary.yaml"]
GPUS = ["h200", "H200", "h100", "mi300x", "a100", "nonexistent", "", " ", "NVIDIA H200", "x" * 300, "[red]x", "h200,h100",
        "all", "cpu", "b200", "l4", "a10", "rtx4090", "mi250x"]
WORKLOADS = ["chat", "CHAT", "long-doc-qa", "agentic", "code-completion", "", " ", "nonexistent", "mix:", "mix",
             "mix:prompt=64", "mix:prompt=0,output=16", "mix:prompt=-1,output=16", "mix:prompt=nan,output=16",
             "mix:prompt=64,output=16,steps=0", "mix:prompt=64,output=16,steps=1", "mix:prompt=64,output=16,steps=1.5",
             "mix:prompt=64,output=16,sigma=-1", "mix:prompt=64,output=16,sigma=3", "mix:prompt=64,output=16,sigma=0",
             "mix:prompt=64,output=16,foo=1", "mix:prompt=64,prompt=65,output=16", "mix:prompt=2147483648,output=16",
             "mix:prompt=1e30,output=1", "mix:prompt=64,output=16,steps=100000", "mix:prompt=2147483647,output=2147483647",
             "mix:prompt=64,output=16,,", "mix:prompt==64,output=16", "mix:prompt=64 output=16", "mix:prompt=1,output=1",
             "mix:prompt=1e-300,output=16", "mix:prompt=64,output=16,steps=1e5", "mix:prompt=64,output=16,sigma=1e-300"]
REGRESSIONS = ["5%", "0%", "-5%", "100%", "1000000%", "1e400%", "nan%", "inf%", "%", "none", "NONE", "5", "0.05", "5 %",
               "abc", "", " ", "5%%", "-0%", "1e-300%", "99999999999999999999%", "5e%"]
COLUMNS_SPECS = ["prompt=prompt_tokens,output=output_tokens", "", ",", "prompt=", "=", "prompt=a,output=b",
                 "prompt=prompt_tokens,output=output_tokens,unit=parsec", "prompt=x,prompt=y,output=z",
                 "prompt=prompt_tokens,output=output_tokens,arrival=arrival_s,unit=ms", "prompt", "output=a",
                 "prompt=prompt_tokens,output=prompt_tokens", "x" * 300, "prompt=prompt_tokens,output=output_tokens,foo=1",
                 "prompt=0,output=1", "prompt=prompt_tokens;output=output_tokens"]
METRICS_SOURCES = ["http://127.0.0.1:1/metrics", "https://127.0.0.1:1/metrics", "ftp://x/metrics", "file:///etc/passwd",
                   "http://[::1", "http://", "http://user:pw@127.0.0.1:1/metrics", "HTTP://127.0.0.1:1/", "/dev/zero",
                   "/dev/null", "/proc/self/environ", "", "nonexistent.txt", "@fx/fifo.txt", "@fx/empty_dir",
                   "http://127.0.0.1:0/", "http://256.256.256.256/", "http://localhost:99999/"]
OUTPUT_TARGETS = [  # (target, write_fails) - relative paths land in the run's temp folder
    ("/dev/full", True), ("/dev/null", False), ("@run/full_link", True), ("/proc/x.json", True), ("/sys/x.json", True),
    (".", True), ("/", True), ("nonexistent/x.json", True), ("@run/afile/x.json", True), ("x" * 300 + ".json", True),
    ("a\nb.json", False), ("", True), ("-", False), ("~/x.json", True), ("@run/adir", True), ("@run/fifo", None),
    ("@run/dangling", False), ("out.json", False), ("out.csv", False), ("p.svg", False), ("p.pdf", False),
    ("p.xyz", None), ("p", None), (".png", False), ("sub/../out.json", True), ("/dev/stdout", False),
    ("@run/dir_link/x.json", False), ("out.json/", False), ("\u00e9t\u00e9.json", False), ("a b.json", False),
]
HOSTILE_READ_PATHS = ["/nonexistent/x", "/dev/zero", "/dev/null", "/dev/urandom", "/proc/self/environ", "/", ".", "",
                      "@fx/fifo.txt", "@fx/empty_dir", "@fx/zero.json", "@fx/loop.yaml", "@fx/dangling.yaml",
                      "@fx/m_binary.yaml", "@fx/m_laughs.yaml", "@fx/deep.json", "@fx/empty.txt", "@fx/bigline.txt",
                      "@fx/latin1.txt", "a\nb", "x" * 300]


# ---------------------------------------------------------------------------------------------------------------
# fixtures: hostile files shared by the cases (read-only inputs; outputs go to each run's own folder)

MODEL = "name: x\nnum_layers: 2\nnum_attention_heads: 8\nnum_key_value_heads: 8\nhead_dim: 64\n"
HF = {"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8, "hidden_size": 512}
LAUGHS = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


def _m(**changes: Any) -> str:
    lines = dict(line.split(": ", 1) for line in MODEL.strip().splitlines())
    for k, v in changes.items():
        if v is None:
            lines.pop(k, None)
        else:
            lines[k] = v
    return "".join(f"{k}: {v}\n" for k, v in lines.items())


def _hf(**changes: Any) -> str:
    d = dict(HF)
    for k, v in changes.items():
        if v is None:
            d.pop(k, None)
        else:
            d[k] = v
    return json.dumps(d)


MODEL_FILES: dict[str, str | bytes] = {
    "m_valid.yaml": MODEL,
    "m_binary.yaml": bytes(range(256)) * 8,
    "m_laughs.yaml": LAUGHS,
    "m_empty.yaml": "",
    "m_bom.yaml": "\ufeff" + MODEL,
    "m_crlf.yaml": MODEL.replace("\n", "\r\n"),
    "m_nul.yaml": MODEL + "\0",
    "m_tabs.yaml": MODEL.replace(": ", ":\t"),
    "m_deep.yaml": "a: " + "[" * 5000 + "]" * 5000 + "\n",
    "m_deepmap.yaml": "a:" + "".join("\n" + " " * (i + 1) + "b:" for i in range(2000)) + " 1\n",
    "m_python_tag.yaml": MODEL + "x: !!python/object/apply:os.system ['true']\n",
    "m_multi_doc.yaml": MODEL + "---\n" + MODEL,
    "m_dupkey.yaml": MODEL + "num_layers: 3\n",
    "m_merge.yaml": "base: &b {num_layers: 2}\n" + MODEL + "<<: *b\n",
    "m_complex_key.yaml": MODEL + "? [a, b]\n: 1\n",
    "m_null_key.yaml": MODEL + "~: 1\n",
    "m_neg_heads.yaml": _m(num_attention_heads="-8"),
    "m_zero_layers.yaml": _m(num_layers="0"),
    "m_float_heads.yaml": _m(num_attention_heads="8.5"),
    "m_str_heads.yaml": _m(num_attention_heads='"8"'),
    "m_bool_heads.yaml": _m(num_attention_heads="true"),
    "m_nan_heads.yaml": _m(num_attention_heads=".nan"),
    "m_inf_layers.yaml": _m(num_layers=".inf"),
    "m_big_float.yaml": _m(head_dim="1e400"),
    "m_kv_not_div.yaml": _m(num_key_value_heads="3"),
    "m_kv_gt_heads.yaml": _m(num_key_value_heads="16"),
    "m_headdim_odd.yaml": _m(head_dim="7"),
    "m_headdim_1.yaml": _m(head_dim="1"),
    "m_headdim_max.yaml": _m(head_dim="65536"),
    "m_heads_max.yaml": _m(num_attention_heads="65536", num_key_value_heads="65536"),
    "m_layers_max.yaml": _m(num_layers="100000"),
    "m_sliding_0.yaml": MODEL + "sliding_window: 0\n",
    "m_sliding_1.yaml": MODEL + "sliding_window: 1\n",
    "m_sliding_huge.yaml": MODEL + "sliding_window: 2147483647\nsliding_window_pattern: 2\n",
    "m_pattern_0.yaml": MODEL + "sliding_window: 64\nsliding_window_pattern: 0\n",
    "m_pattern_huge.yaml": MODEL + "sliding_window: 64\nsliding_window_pattern: 100000\n",
    "m_mla_missing.yaml": MODEL + "attention: mla\n",
    "m_mla_tiny.yaml": MODEL + "attention: mla\nkv_lora_rank: 1\nqk_rope_head_dim: 1\n",
    "m_mla_huge.yaml": MODEL + "attention: mla\nkv_lora_rank: 65536\nqk_rope_head_dim: 65536\n",
    "m_mla_mha_heads.yaml": _m(num_attention_heads="128", num_key_value_heads="1") + "attention: mla\nkv_lora_rank: 512\nqk_rope_head_dim: 64\n",
    "m_attention_bad.yaml": MODEL + "attention: linear\n",
    "m_context_1.yaml": MODEL + "context_length: 1\n",
    "m_context_0.yaml": MODEL + "context_length: 0\n",
    "m_dtype_bad.yaml": MODEL + "dtype: int3\n",
    "m_dtype_list.yaml": MODEL + "dtype: [bfloat16]\n",
    "m_dtype_fp32.yaml": MODEL + "dtype: float32\n",
    "m_vhead_0.yaml": MODEL + "v_head_dim: 0\n",
    "m_vhead_huge.yaml": MODEL + "v_head_dim: 65536\n",
    "m_name_int.yaml": _m(name="123"),
    "m_name_empty.yaml": _m(name='""'),
    "m_name_markup.yaml": _m(name='"[bold red]x[/]"'),
    "m_name_newline.yaml": _m(name='"a\\nb"'),
    "m_name_long.yaml": _m(name="x" * 500),
    "m_name_ansi.yaml": _m(name='"\\e[31mred"'),
    "m_hf_id_int.yaml": MODEL + "hf_id: 123\n",
    "m_hf_id_list.yaml": MODEL + "hf_id: [a, b]\n",
    "m_hf_id_map.yaml": MODEL + "hf_id: {a: 1}\n",
    "m_source_list.yaml": MODEL + "source: [a, b]\n",
    "m_source_map.yaml": MODEL + "source: {a: 1}\n",
    "m_unknown.yaml": MODEL + "rope_theta: 10000\n",
    "m_missing.yaml": _m(head_dim=None),
    "m_scalar.yaml": "42\n",
    "m_string.yaml": "just a string\n",
    "m_list.yaml": "- 1\n- 2\n",
    "m_date.yaml": MODEL + "when: 2001-12-14\n",
    "m_bigint.yaml": _m(num_layers="9" * 5000),
    "m_hex.yaml": _m(num_layers="0x10"),
    "m_octal.yaml": _m(num_layers="0o10"),
    "m_sexagesimal.yaml": _m(num_layers="1:30"),
    "m_underscore.yaml": _m(num_layers="1_0"),
    "m_latin1.yaml": (MODEL + "# caf\u00e9\n").encode("latin-1"),
    "m_utf16.yaml": MODEL.encode("utf-16"),
    "hf_valid.json": _hf(),
    "hf_zero_hidden.json": _hf(hidden_size=0),
    "hf_indivisible.json": _hf(hidden_size=500),
    "hf_head_dim_0.json": _hf(head_dim=0),
    "hf_neg_layers.json": _hf(num_hidden_layers=-2),
    "hf_float_heads.json": _hf(num_attention_heads=8.0),
    "hf_str_heads.json": _hf(num_attention_heads="8"),
    "hf_no_kv.json": _hf(num_key_value_heads=None),
    "hf_kv_zero.json": _hf(num_key_value_heads=0),
    "hf_text_config_list.json": _hf(text_config=[1, 2]),
    "hf_text_config_empty.json": _hf(text_config={}),
    "hf_text_config_null.json": json.dumps({"text_config": None, **HF}),
    "hf_model_type_int.json": _hf(model_type=5),
    "hf_model_type_gemma3.json": json.dumps({"model_type": "gemma3_text"}),
    "hf_model_type_deepseek.json": _hf(model_type="deepseek_v3"),
    "hf_rope_garbage.json": _hf(rope_scaling="yes", max_position_embeddings=4096),
    "hf_rope_factor_nan.json": _hf(rope_scaling={"factor": "nan", "rope_type": "linear"}, max_position_embeddings=4096),
    "hf_rope_factor_huge.json": _hf(rope_scaling={"factor": 1e15, "rope_type": "linear"}, max_position_embeddings=4096),
    "hf_rope_factor_neg.json": _hf(rope_scaling={"factor": -2, "rope_type": "linear"}, max_position_embeddings=4096),
    "hf_rope_factor_zero.json": _hf(rope_scaling={"factor": 0, "rope_type": "linear"}, max_position_embeddings=4096),
    "hf_rope_factor_str.json": _hf(rope_scaling={"factor": "2"}, max_position_embeddings=4096),
    "hf_rope_list.json": _hf(rope_scaling=[1, 2], max_position_embeddings=4096),
    "hf_maxpos_neg.json": _hf(max_position_embeddings=-1),
    "hf_maxpos_float.json": _hf(max_position_embeddings=4096.5),
    "hf_maxpos_huge.json": _hf(max_position_embeddings=2**52),
    "hf_maxpos_str.json": _hf(max_position_embeddings="4096"),
    "hf_sliding_str.json": _hf(sliding_window="4096"),
    "hf_sliding_neg.json": _hf(sliding_window=-1),
    "hf_sliding_bool.json": _hf(sliding_window=True),
    "hf_use_sliding_str.json": _hf(sliding_window=64, use_sliding_window="yes"),
    "hf_layer_types_short.json": _hf(sliding_window=64, layer_types=["sliding_attention"]),
    "hf_layer_types_bad.json": _hf(sliding_window=64, layer_types=["banana", "full_attention"]),
    "hf_layer_types_ints.json": _hf(sliding_window=64, layer_types=[1, 2]),
    "hf_max_window_layers.json": _hf(sliding_window=64, use_sliding_window=True, max_window_layers=-5),
    "hf_pattern_str.json": _hf(sliding_window=64, sliding_window_pattern="6"),
    "hf_dtype_bad.json": _hf(torch_dtype="int3"),
    "hf_dtype_list.json": _hf(torch_dtype=["bfloat16"]),
    "hf_dtype_fp8.json": _hf(torch_dtype="float8_e4m3fn"),
    "hf_quant_garbage.json": _hf(quantization_config="fp8"),
    "hf_kv_lora_0.json": _hf(kv_lora_rank=0, qk_rope_head_dim=64),
    "hf_kv_lora_only.json": _hf(kv_lora_rank=512),
    "hf_mla_neg_rope.json": _hf(kv_lora_rank=512, qk_rope_head_dim=-64),
    "hf_array.json": "[1, 2]",
    "hf_null.json": "null",
    "hf_nan.json": _hf().replace("512", "NaN"),
    "hf_trailing.json": _hf() + "garbage",
    "hf_dup.json": _hf()[:-1] + ', "hidden_size": 0}',
    "hf_bom.json": "\ufeff" + _hf(),
    "hf_empty.json": "",
    "hf_huge_exp.json": _hf().replace("512", "1e999999"),
    "hf_bigint.json": _hf().replace("512", "9" * 5000),
}

PROFILE_VALUES = [-1, 0, float("nan"), float("inf"), 1e308, 1e-308, 5e-324, "abc", [], {}, None, True, 2**70, -1e300,
                  1e18, 1e-18, [1, 2], "1e-6"]


def profile_mutations(base: dict, rng: random.Random) -> dict[str, Any]:
    """name -> the profile data with one hostile change (leaves replaced, keys dropped, structures broken)."""
    out: dict[str, Any] = {}
    leaves: list[tuple[str, ...]] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if path[:1] == ("residuals",) and len(path) >= 2:  # cells: a few below
                    continue
                if path[:1] == ("fit",) and len(path) >= 1 and k not in ("uncalibrated_families",):
                    continue
                walk(v, (*path, k))
        else:
            leaves.append(path)

    walk(base, ())
    rng.shuffle(leaves)
    families = list(base.get("families", {}))
    for i, path in enumerate(leaves[:60]):
        value = PROFILE_VALUES[i % len(PROFILE_VALUES)]
        data = copy.deepcopy(base)
        node = data
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        out["p_" + "_".join(str(p) for p in path)[-60:] + f"_{i}.yaml"] = data
    for k in ["schema", "gpu", "num_sms", "families", "residuals", "launch_overhead_s", "hbm_bandwidth_bytes_per_s"]:
        data = copy.deepcopy(base)
        data.pop(k, None)
        out[f"p_drop_{k}.yaml"] = data
    for fam in families[:4]:
        for key in ("latency_s", "max_programs_per_sm", "occupancy_by_head_dim"):
            data = copy.deepcopy(base)
            data["families"][fam].pop(key, None)
            out[f"p_drop_{fam}_{key}.yaml"] = data
    cells = base.get("residuals", {}).get("cells", {})
    if isinstance(cells, dict) and cells:
        first = next(iter(cells))
        for j, row in enumerate([[0.0, 0.0, float("nan"), 1], [0.0, 0.0, 1e300, 1], [0.0, 0.0, 0.1, -5], [0, 0],
                                 "x", [[1e308, -1e308, 0.1, 1]], [[0.0, 0.0, 0.1, 10**15]], {}, None]):
            data = copy.deepcopy(base)
            data["residuals"]["cells"][first] = row if not isinstance(row, list) or not row or isinstance(row[0], list) \
                else [row]
            out[f"p_cells_{j}.yaml"] = data
        data = copy.deepcopy(base)
        data["residuals"]["cells"] = {"nonexistent/g1/d128": [[0.0, 0.0, 0.1, 1]]}
        out["p_cells_unknown.yaml"] = data
    for k, v in [("schema", 2), ("schema", 0), ("gpu", "h100"), ("gpu", "H200"), ("num_sms", 1), ("num_sms", 100000),
                 ("calibrated", "yes"), ("extra_key", 1), ("families", {}), ("families", {"vllm_2d": {}}),
                 ("families", {"unknown_family": base["families"][families[0]]} if families else {})]:
        data = copy.deepcopy(base)
        data[k] = v
        out[f"p_set_{k}_{str(v)[:10].replace('/', '_')}.yaml"] = data
    for fam in families[:3]:
        data = copy.deepcopy(base)
        data["families"][fam]["occupancy_by_head_dim"] = {0: 1, -64: 8, 128: 0}
        out[f"p_occ_{fam}.yaml"] = data
        data = copy.deepcopy(base)
        data["families"][fam]["occupancy_by_head_dim"] = {"x": 1}
        out[f"p_occkey_{fam}.yaml"] = data
    return out


STEP_FILES: dict[str, str | bytes] = {
    "s_valid.jsonl": '{"seq_lens": [100, 200]}\n{"seq_lens": [300], "weight": 3}\n',
    "s_valid.csv": 'seq_lens,query_lens,weight\n"100 200","1 1",2\n',
    "s_empty.jsonl": "",
    "s_blank.jsonl": "\n\n   \n",
    "s_seq_empty.jsonl": '{"seq_lens": []}\n',
    "s_seq_zero.jsonl": '{"seq_lens": [0]}\n',
    "s_seq_neg.jsonl": '{"seq_lens": [-5]}\n',
    "s_seq_huge.jsonl": '{"seq_lens": [1000000000000]}\n',
    "s_seq_2_63.jsonl": '{"seq_lens": [9223372036854775808]}\n',
    "s_seq_max.jsonl": '{"seq_lens": [16777216]}\n',
    "s_seq_over.jsonl": '{"seq_lens": [16777217]}\n',
    "s_seq_str.jsonl": '{"seq_lens": ["100"]}\n',
    "s_seq_float.jsonl": '{"seq_lens": [100.5]}\n',
    "s_seq_floatint.jsonl": '{"seq_lens": [100.0]}\n',
    "s_seq_nan.jsonl": '{"seq_lens": [NaN]}\n',
    "s_seq_inf.jsonl": '{"seq_lens": [Infinity]}\n',
    "s_seq_null.jsonl": '{"seq_lens": [null]}\n',
    "s_seq_bool.jsonl": '{"seq_lens": [true]}\n',
    "s_seq_nested.jsonl": '{"seq_lens": [[1]]}\n',
    "s_seq_scalar.jsonl": '{"seq_lens": 100}\n',
    "s_seq_bigint.jsonl": '{"seq_lens": [' + "9" * 5000 + "]}\n",
    "s_wide.jsonl": '{"seq_lens": [' + ",".join(["100"] * 70000) + "]}\n",
    "s_wide_max.jsonl": '{"seq_lens": [' + ",".join(["100"] * 65536) + "]}\n",
    "s_tokens_over.jsonl": '{"seq_lens": [' + ",".join(["100"] * 60000) + '], "query_lens": ['
                           + ",".join(["20"] * 60000) + "]}\n",
    "s_weight_0.jsonl": '{"seq_lens": [100], "weight": 0}\n',
    "s_weight_neg.jsonl": '{"seq_lens": [100], "weight": -1}\n',
    "s_weight_huge.jsonl": '{"seq_lens": [100], "weight": 1000000000000000}\n',
    "s_weight_2_63.jsonl": '{"seq_lens": [100], "weight": 9223372036854775807}\n',
    "s_weight_float.jsonl": '{"seq_lens": [100], "weight": 1.5}\n',
    "s_weight_nan.jsonl": '{"seq_lens": [100], "weight": NaN}\n',
    "s_weight_str.jsonl": '{"seq_lens": [100], "weight": "2"}\n',
    "s_weights_sum.jsonl": "".join('{"seq_lens": [100], "weight": 3000000}\n' for _ in range(3)),
    "s_weights_overflow.jsonl": '{"seq_lens": [100], "weight": 9223372036854775807}\n' * 2,
    "s_q_mismatch.jsonl": '{"seq_lens": [100, 200], "query_lens": [1]}\n',
    "s_q_zero.jsonl": '{"seq_lens": [100], "query_lens": [0]}\n',
    "s_q_gt.jsonl": '{"seq_lens": [100], "query_lens": [101]}\n',
    "s_q_huge.jsonl": '{"seq_lens": [16777216], "query_lens": [16777216]}\n',
    "s_unknown.jsonl": '{"seq_lens": [100], "foo": 1}\n',
    "s_array.jsonl": '[{"seq_lens": [100]}]\n',
    "s_scalar.jsonl": "42\n",
    "s_string.jsonl": '"x"\n',
    "s_trunc.jsonl": '{"seq_lens": [100\n',
    "s_deep.jsonl": '{"seq_lens": ' + "[" * 5000 + "]" * 5000 + "}\n",
    "s_bigline.jsonl": '{"seq_lens": [' + ",".join(["1"] * 2_500_000) + "]}\n",
    "s_many.jsonl": '{"seq_lens": [100]}\n' * 300_000,
    "s_bom.jsonl": "\ufeff" + '{"seq_lens": [100]}\n',
    "s_crlf.jsonl": '{"seq_lens": [100]}\r\n{"seq_lens": [200]}\r\n',
    "s_nul.jsonl": '{"seq_lens": [100]}\n\0\n',
    "s_latin1.jsonl": '{"seq_lens": [100], "c": "caf\xe9"}\n'.encode("latin-1"),
    "s_dupkey.jsonl": '{"seq_lens": [100], "seq_lens": [0]}\n',
    "s_header_only.csv": "seq_lens,query_lens,weight\n",
    "s_no_header.csv": '"100 200","1 1",2\n',
    "s_csv_comma.csv": 'seq_lens\n"100,200"\n',
    "s_csv_neg.csv": 'seq_lens\n"-100"\n',
    "s_csv_float.csv": 'seq_lens\n"1.5"\n',
    "s_csv_empty_cell.csv": 'seq_lens,weight\n,1\n',
    "s_csv_weight_bad.csv": 'seq_lens,weight\n100,x\n',
    "s_csv_weight_nan.csv": 'seq_lens,weight\n100,nan\n',
    "s_csv_dup_header.csv": 'seq_lens,seq_lens\n100,200\n',
    "s_csv_extra.csv": 'seq_lens,foo\n100,1\n',
    "s_csv_ragged.csv": 'seq_lens,weight\n100\n200,1,5\n',
    "s_csv_bigcell.csv": 'seq_lens\n"' + "1 " * 200_000 + '"\n',
    "s_csv_quote.csv": 'seq_lens\n"100\n',
    "s_csv_semicolon.csv": 'seq_lens;weight\n100;1\n',
    "s_csv_spaces.csv": ' seq_lens , weight \n 100 , 1 \n',
}

_NATIVE = "prompt_tokens,output_tokens,arrival_s\n"
REQUEST_FILES: dict[str, str | bytes] = {
    "r_valid.csv": _NATIVE + "100,20,0\n200,30,0.5\n",
    "r_header_only.csv": _NATIVE,
    "r_empty.csv": "",
    "r_prompt_0.csv": _NATIVE + "0,20,0\n",
    "r_output_0.csv": _NATIVE + "100,0,0\n",
    "r_neg.csv": _NATIVE + "-100,20,0\n",
    "r_float.csv": _NATIVE + "100.5,20,0\n",
    "r_nan.csv": _NATIVE + "nan,20,0\n",
    "r_inf.csv": _NATIVE + "100,inf,0\n",
    "r_huge.csv": _NATIVE + "2147483648,20,0\n",
    "r_max_tokens.csv": _NATIVE + "2147483647,2147483647,0\n",
    "r_out_huge.csv": _NATIVE + "100,1000000000,0\n",
    "r_out_big.csv": _NATIVE + "100,6000000,0\n",
    "r_many_out.csv": _NATIVE + "".join("100,2000000,0\n" for _ in range(4)),
    "r_2_63.csv": _NATIVE + "9223372036854775808,20,0\n",
    "r_arrival_neg.csv": _NATIVE + "100,20,-5\n",
    "r_arrival_nan.csv": _NATIVE + "100,20,nan\n",
    "r_arrival_inf.csv": _NATIVE + "100,20,inf\n",
    "r_arrival_huge.csv": _NATIVE + "100,20,0\n100,20,1e300\n",
    "r_arrival_spread.csv": _NATIVE + "".join(f"100,5,{i * 1e6}\n" for i in range(50)),
    "r_arrival_unsorted.csv": _NATIVE + "100,20,5\n100,20,0\n100,20,2.5\n",
    "r_arrival_text.csv": _NATIVE + "100,20,yesterday\n",
    "r_missing_col.csv": "prompt_tokens\n100\n",
    "r_extra_col.csv": "prompt_tokens,output_tokens,foo\n100,20,x\n",
    "r_ragged.csv": _NATIVE + "100\n200,30,0,9\n",
    "r_semicolon.csv": "prompt_tokens;output_tokens\n100;20\n",
    "r_bom.csv": "\ufeff" + _NATIVE + "100,20,0\n",
    "r_crlf.csv": (_NATIVE + "100,20,0\n").replace("\n", "\r\n"),
    "r_quoted.csv": '"prompt_tokens","output_tokens"\n"100","20"\n',
    "r_nul.csv": _NATIVE + "100,20,0\n\0",
    "r_latin1.csv": (_NATIVE + "100,20,0 # caf\xe9\n").encode("latin-1"),
    "r_bigcell.csv": _NATIVE + '"' + "1" * 200_000 + '",20,0\n',
    "r_bigline.csv": _NATIVE + "1," * 2_500_000 + "\n",
    "r_dup_header.csv": "prompt_tokens,prompt_tokens,output_tokens\n100,200,20\n",
    "r_many.csv": _NATIVE + "100,2,0\n" * 200_000,
    "r_native.jsonl": '{"prompt_tokens": 100, "output_tokens": 20}\n',
    "r_native_bad.jsonl": '{"prompt_tokens": "100", "output_tokens": [20]}\n',
    "r_native_null.jsonl": '{"prompt_tokens": null, "output_tokens": 20}\n',
    "r_native_array.json": '[{"prompt_tokens": 100, "output_tokens": 20}, 5, "x"]',
    "r_native_deep.json": "[" * 5000 + "]" * 5000,
    "r_azure_bad_ts.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-45 25:61:61.0,100,20\n",
    "r_azure_year0.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n0000-01-01 00:00:00,100,20\n",
    "r_azure_far.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n0001-01-01 00:00:00,100,20\n9999-12-31 23:59:59.9999999,100,20\n",
    "r_azure_tz.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.009930+99:00,100,20\n",
    "r_azure_num.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n1e300,100,20\n-1e300,100,20\n",
    "r_azure_digits.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46." + "9" * 400 + ",100,20\n",
    "r_burst_neg.csv": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n-5,x,100,20,120,API log\n",
    "r_burst_nan.csv": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\nnan,x,100,20,120,API log\n",
    "r_mooncake_str.jsonl": '{"timestamp": "x", "input_length": 100, "output_length": 20}\n',
    "r_mooncake_neg.jsonl": '{"timestamp": -1e308, "input_length": 100, "output_length": 20}\n',
    "r_mooncake_hash.jsonl": '{"timestamp": 0, "input_length": 100, "output_length": 20, "hash_ids": '
                             + "[" * 3000 + "]" * 3000 + "}\n",
    "r_vllm_mismatch.json": json.dumps({"endpoint_type": "openai", "input_lens": [100, 200], "output_lens": [20],
                                        "start_times": [0.0, 1.0]}),
    "r_vllm_rate0.json": json.dumps({"endpoint_type": "openai", "input_lens": [100], "output_lens": [20],
                                     "request_rate": 0}),
    "r_vllm_rate_neg.json": json.dumps({"endpoint_type": "openai", "input_lens": [100], "output_lens": [20],
                                        "request_rate": -4}),
    "r_vllm_rate_str.json": json.dumps({"endpoint_type": "openai", "input_lens": [100], "output_lens": [20],
                                        "request_rate": "fast"}),
    "r_vllm_rate_tiny.json": json.dumps({"endpoint_type": "openai", "input_lens": [100] * 5, "output_lens": [20] * 5,
                                         "request_rate": 1e-300}),
    "r_vllm_start_nan.json": '{"endpoint_type": "openai", "input_lens": [100], "output_lens": [20], "start_times": [NaN]}',
    "r_vllm_errors.json": json.dumps({"endpoint_type": "openai", "input_lens": [100], "output_lens": [20],
                                      "errors": ["", "x", "y"], "start_times": [0]}),
    "r_vllm_lens_str.json": json.dumps({"endpoint_type": "openai", "input_lens": "100", "output_lens": 20}),
    "r_vllm_nolens.json": json.dumps({"endpoint_type": "openai", "request_rate": 4}),
    "r_sglang_rate0.jsonl": json.dumps({"dataset_name": "sharegpt", "input_lens": [100, 100], "output_lens": [20, 20],
                                        "request_rate": 0}) + "\n",
    "r_sglang_rate_neg.jsonl": json.dumps({"dataset_name": "sharegpt", "input_lens": [100], "output_lens": [20],
                                           "request_rate": -1}) + "\n",
    "r_sglang_rate_tiny.jsonl": json.dumps({"dataset_name": "sharegpt", "input_lens": [100, 100],
                                            "output_lens": [20, 20], "request_rate": 1e-300}) + "\n",
    "r_sglang_rate_nan.jsonl": '{"dataset_name": "sharegpt", "input_lens": [100], "output_lens": [20], '
                               '"request_rate": NaN}\n',
    "r_sglang_rate_str.jsonl": json.dumps({"dataset_name": "sharegpt", "input_lens": [100], "output_lens": [20],
                                           "request_rate": "Infinity"}) + "\n",
    "r_sharegpt_valid.json": json.dumps([{"id": "a", "conversations": [{"from": "human", "value": "hi there"},
                                                                        {"from": "gpt", "value": "hello"}]}]),
    "r_sharegpt_int.json": json.dumps([{"id": "a", "conversations": [{"from": "human", "value": 5},
                                                                      {"from": "gpt", "value": None}]}]),
    "r_sharegpt_noconv.json": json.dumps([{"id": "a", "conversations": "x"}, {"conversations": []}]),
    "r_sharegpt_one.json": json.dumps([{"id": "a", "conversations": [{"from": "human", "value": "hi"}]}]),
    "r_sharegpt_empty_text.json": json.dumps([{"id": "a", "conversations": [{"from": "human", "value": ""},
                                                                             {"from": "gpt", "value": ""}]}]),
    "r_sharegpt_huge_text.json": json.dumps([{"id": "a", "conversations": [{"from": "human", "value": "x" * 3_000_000},
                                                                            {"from": "gpt", "value": "y"}]}]),
    "r_sharegpt_surrogate.json": '[{"id": "a", "conversations": [{"from": "human", "value": "\\ud800"}, '
                                 '{"from": "gpt", "value": "\\udfff"}]}]',
    "r_json_scalar.json": "42",
    "r_json_object.json": '{"a": 1}',
    "r_json_trunc.json": '[{"prompt_tokens": 100, "output_tokens": 20},',
    "r_unknown.csv": "a,b,c\n1,2,3\n",
}

_METRICS_HEAD = ('# TYPE vllm:request_prompt_tokens histogram\n'
                 'vllm:request_prompt_tokens_bucket{le="100.0",model_name="m"} 5.0\n'
                 'vllm:request_prompt_tokens_bucket{le="1000.0",model_name="m"} 10.0\n'
                 'vllm:request_prompt_tokens_bucket{le="+Inf",model_name="m"} 10.0\n'
                 'vllm:request_prompt_tokens_count{model_name="m"} 10.0\n'
                 'vllm:request_prompt_tokens_sum{model_name="m"} 3000.0\n')
_METRICS_GEN = ('# TYPE vllm:request_generation_tokens histogram\n'
                'vllm:request_generation_tokens_bucket{le="10.0",model_name="m"} 5.0\n'
                'vllm:request_generation_tokens_bucket{le="100.0",model_name="m"} 10.0\n'
                'vllm:request_generation_tokens_bucket{le="+Inf",model_name="m"} 10.0\n'
                'vllm:request_generation_tokens_count{model_name="m"} 10.0\n'
                'vllm:request_generation_tokens_sum{model_name="m"} 300.0\n')
_METRICS_RUN = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 8.0\n'
_METRICS = _METRICS_HEAD + _METRICS_GEN + _METRICS_RUN


def _mx(old: str, new: str) -> str:
    assert old in _METRICS, old
    return _METRICS.replace(old, new)


METRICS_FILES: dict[str, str | bytes] = {
    "x_valid.txt": _METRICS,
    "x_empty.txt": "",
    "x_help_only.txt": "# HELP x y\n# TYPE x counter\n",
    "x_no_gen.txt": _METRICS_HEAD + _METRICS_RUN,
    "x_le_bad.txt": _mx('le="100.0",model_name="m"} 5.0', 'le="abc",model_name="m"} 5.0'),
    "x_le_nan.txt": _mx('le="100.0",model_name="m"} 5.0', 'le="NaN",model_name="m"} 5.0'),
    "x_le_neg.txt": _mx('le="100.0",model_name="m"} 5.0', 'le="-100.0",model_name="m"} 5.0'),
    "x_le_zero.txt": _mx('le="100.0",model_name="m"} 5.0', 'le="0",model_name="m"} 5.0'),
    "x_le_huge.txt": _mx('le="1000.0",model_name="m"} 10.0', 'le="1e300",model_name="m"} 10.0'),
    "x_le_missing.txt": _mx('le="100.0",model_name="m"} 5.0', 'model_name="m"} 5.0'),
    "x_count_neg.txt": _mx('le="100.0",model_name="m"} 5.0', 'le="100.0",model_name="m"} -5.0'),
    "x_count_nan.txt": _mx('le="100.0",model_name="m"} 5.0', 'le="100.0",model_name="m"} NaN'),
    "x_count_inf.txt": _mx('le="+Inf",model_name="m"} 10.0\nvllm:request_prompt_tokens_count',
                           'le="+Inf",model_name="m"} +Inf\nvllm:request_prompt_tokens_count'),
    "x_count_huge.txt": _METRICS.replace("10.0", "1e300").replace("5.0", "5e299"),
    "x_count_frac.txt": _METRICS.replace("10.0", "0.5").replace("5.0", "0.25"),
    "x_decreasing.txt": _mx('le="1000.0",model_name="m"} 10.0', 'le="1000.0",model_name="m"} 1.0'),
    "x_zero.txt": re.sub(r"} [0-9.]+", "} 0.0", _METRICS),
    "x_no_inf.txt": _METRICS.replace('vllm:request_prompt_tokens_bucket{le="+Inf",model_name="m"} 10.0\n', ""),
    "x_sum_neg.txt": _mx("} 3000.0", "} -3000.0"),
    "x_sum_nan.txt": _mx("} 3000.0", "} NaN"),
    "x_running_nan.txt": _mx("running{model_name=\"m\"} 8.0", "running{model_name=\"m\"} NaN"),
    "x_running_neg.txt": _mx("running{model_name=\"m\"} 8.0", "running{model_name=\"m\"} -8.0"),
    "x_running_huge.txt": _mx("running{model_name=\"m\"} 8.0", "running{model_name=\"m\"} 1e12"),
    "x_running_zero.txt": _mx("running{model_name=\"m\"} 8.0", "running{model_name=\"m\"} 0"),
    "x_running_frac.txt": _mx("running{model_name=\"m\"} 8.0", "running{model_name=\"m\"} 0.001"),
    "x_dup.txt": _METRICS + _METRICS_HEAD,
    "x_type_wrong.txt": _METRICS.replace("# TYPE vllm:request_prompt_tokens histogram", "# TYPE vllm:request_prompt_tokens gauge"),
    "x_garbage_line.txt": _METRICS + "this is not { a metric\n",
    "x_label_escape.txt": _METRICS.replace('model_name="m"', 'model_name="a\\"b\\\\c\\n"'),
    "x_many_models.txt": "".join(_METRICS_HEAD.replace('"m"', f'"m{i}"') + _METRICS_GEN.replace('"m"', f'"m{i}"')
                                 for i in range(300)),
    "x_many_buckets.txt": "# TYPE vllm:request_prompt_tokens histogram\n" + "".join(
        f'vllm:request_prompt_tokens_bucket{{le="{i}.0",model_name="m"}} {i}.0\n' for i in range(1, 50001))
        + _METRICS_GEN + _METRICS_RUN,
    "x_gzip.txt": b"\x1f\x8b\x08\x00" + bytes(100),
    "x_binary.txt": bytes(range(256)) * 8,
    "x_latin1.txt": ("# HELP x caf\xe9\n" + _METRICS).encode("latin-1"),
    "x_bigline.txt": "# " + "x" * 5_000_000 + "\n" + _METRICS,
    "x_crlf.txt": _METRICS.replace("\n", "\r\n"),
    "x_timestamp.txt": _METRICS.replace("} 5.0", "} 5.0 1700000000000"),
    "x_exemplar.txt": _METRICS.replace("} 5.0", '} 5.0 # {trace_id="x"} 1.0'),
}

RULE_FILES: dict[str, str | bytes] = {
    "rule_valid.py": "def splits(step):\n    return [2] * step.batch\n\ndef segments(step):\n    return 4\n",
    "rule_syntax.py": "def splits(step)\n    return 1\n",
    "rule_nul.py": b"def splits(step):\n    return [1] * step.batch\n\0\n",
    "rule_latin1.py": "# caf\xe9\ndef splits(step):\n    return [1] * step.batch\n".encode("latin-1"),
    "rule_empty.py": "",
    "rule_none_defined.py": "x = 1\n",
    "rule_not_callable.py": "splits = 5\nsegments = 'x'\n",
    "rule_float.py": "def segments(step):\n    return 4.0\n",
    "rule_str.py": "def segments(step):\n    return '4'\n",
    "rule_none.py": "def segments(step):\n    return None\n",
    "rule_zero.py": "def segments(step):\n    return 0\n",
    "rule_neg.py": "def splits(step):\n    return [-1] * step.batch\n",
    "rule_bool.py": "def segments(step):\n    return True\n",
    "rule_nan.py": "def segments(step):\n    return float('nan')\n",
    "rule_max.py": "def splits(step):\n    return [65535] * step.batch\n\ndef segments(step):\n    return 65535\n",
    "rule_intsub.py": "class I(int):\n    def __index__(self):\n        raise RuntimeError('no')\n"
                      "def splits(step):\n    return [I(2)] * step.batch\n",
    "rule_short.py": "def splits(step):\n    return [1]\n",
    "rule_long.py": "def splits(step):\n    return [1] * (step.batch + 5)\n",
    "rule_generator.py": "def splits(step):\n    return (1 for _ in range(step.batch))\n",
    "rule_dict.py": "def splits(step):\n    return {i: 1 for i in range(step.batch)}\n",
    "rule_arity.py": "def splits(a, b):\n    return [1]\n",
    "rule_noargs.py": "segments = lambda: 1\n",
    "rule_raise.py": "def segments(step):\n    raise ValueError('bad step')\n",
    "rule_raise_multiline.py": "def segments(step):\n    raise ValueError('line one\\nline two\\nline three')\n",
    "rule_raise_long.py": "def segments(step):\n    raise ValueError('x' * 100000)\n",
    "rule_raise_badstr.py": "class E(Exception):\n    def __str__(self):\n        raise RuntimeError('no str')\n"
                            "def segments(step):\n    raise E()\n",
    "rule_raise_markup.py": "def segments(step):\n    raise ValueError('[bold red]boom[/] :smile:')\n",
    "rule_import_error.py": "import nonexistent_module_xyz\ndef segments(step):\n    return 1\n",
    "rule_import_raise_multiline.py": "raise RuntimeError('a\\nb')\n",
    "rule_keyboard.py": "def segments(step):\n    raise KeyboardInterrupt\n",
    "rule_recursion.py": "def segments(step):\n    return segments(step)\n",
    "rule_memory.py": "def segments(step):\n    return len('x' * (10 ** 12))\n",
    "rule_memory_list.py": "def splits(step):\n    return [1] * (10 ** 10)\n",
    "rule_exit0.py": "import sys\ndef segments(step):\n    sys.exit(0)\n",
    "rule_exit_str.py": "import sys\ndef segments(step):\n    sys.exit('bye\\nnow')\n",
    "rule_osexit.py": "import os\ndef segments(step):\n    os._exit(0)\n",
    "rule_baseexc.py": "class B(BaseException):\n    pass\ndef segments(step):\n    raise B('custom base')\n",
    "rule_generator_exit.py": "def segments(step):\n    raise GeneratorExit('x')\n",
    "rule_print.py": "def segments(step):\n    print('noise from the rule')\n    return 4\n",
    "rule_close_stdout.py": "import sys\ndef segments(step):\n    sys.stdout.close()\n    return 4\n",
    "rule_mutate.py": "def segments(step):\n    step.batch = 0\n    return 4\n",
    "rule_write_file.py": "def segments(step):\n    open('rule_was_here.txt', 'w').write('x')\n    return 4\n",
    "rule_loop.py": "def segments(step):\n    while True:\n        pass\n",
    "rule_sleep.py": "import time\ndef segments(step):\n    time.sleep(3600)\n",
    "rule_signal.py": "import os, signal\ndef segments(step):\n    os.kill(os.getpid(), signal.SIGTERM)\n    return 4\n",
    "rule_huge_int.py": "def segments(step):\n    return 10 ** 5000\n",
    "rule_numpy.py": "import numpy as np\ndef segments(step):\n    return np.int64(4)\n",
    "rule_numpy_list.py": "import numpy as np\ndef splits(step):\n    return np.ones(step.batch, dtype=np.int64)\n",
    "rule_tuple.py": "def splits(step):\n    return tuple([2] * step.batch)\n",
    "rule_setrecursion.py": "import sys\nsys.setrecursionlimit(50)\ndef segments(step):\n    return 4\n",
    "rule_warning.py": "import warnings\nwarnings.warn('from the rule')\ndef segments(step):\n    return 4\n",
    "rule_argv.py": "import sys\nsys.argv[:] = []\ndef segments(step):\n    return 4\n",
}

TOKENIZER_FILES: dict[str, str | bytes] = {
    "tok_binary.json": bytes(range(256)) * 8,
    "tok_empty.json": "",
    "tok_garbage.json": '{"model": 5}',
    "tok_deep.json": "[" * 5000 + "]" * 5000,
}

MEASUREMENT_FILES: dict[str, str | bytes] = {
    "meas_empty.json": "",
    "meas_list.json": "[1, 2]",
    "meas_obj.json": "{}",
    "meas_rows_str.json": '{"rows": "x"}',
    "meas_rows_bad.json": '{"rows": [{"family": "vllm_2d", "time_s": -1}]}',
    "meas_rows_nan.json": '{"rows": [{"family": "vllm_2d", "time_s": 1e308}], "launch_overhead_s": -5}',
    "meas_binary.json": bytes(range(256)) * 8,
    "meas_deep.json": "[" * 5000 + "]" * 5000,
    "meas_device.json": '{"device": 5, "rows": []}',
}


def write_fixtures(fx: Path, root: Path, rng: random.Random) -> dict[str, str]:
    """Create every fixture under ``fx``; returns name -> path."""
    import yaml

    fx.mkdir(parents=True, exist_ok=True)
    files: dict[str, str | bytes] = {}
    for table in (MODEL_FILES, STEP_FILES, REQUEST_FILES, METRICS_FILES, RULE_FILES, TOKENIZER_FILES, MEASUREMENT_FILES):
        files.update(table)
    files.update({
        "empty.txt": "",
        "bigline.txt": "x" * 6_000_000 + "\n",
        "latin1.txt": "caf\xe9\n".encode("latin-1"),
        "deep.json": "[" * 50_000 + "]" * 50_000,
    })
    base = yaml.safe_load((root / "decodecalc" / "profiles" / "h200.yaml").read_text())
    profiles = profile_mutations(base, rng)
    for name, data in profiles.items():
        try:
            files[name] = yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), allow_unicode=True)
        except Exception:  # noqa: BLE001 - a mutation yaml cannot write: not a case
            continue
    files["p_valid.yaml"] = yaml.dump(base, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
    for name, content in files.items():
        (fx / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    os.mkfifo(fx / "fifo.yaml")
    os.mkfifo(fx / "fifo.txt")
    os.mkfifo(fx / "fifo.json")
    os.symlink("/dev/urandom", fx / "urandom.yaml")
    os.symlink("/dev/zero", fx / "zero.json")
    os.symlink("/dev/zero", fx / "zero.txt")
    os.symlink("loop.yaml", fx / "loop.yaml")
    os.symlink("/nonexistent/target.yaml", fx / "dangling.yaml")
    (fx / "empty_dir").mkdir()
    md = fx / "model_dir"
    md.mkdir()
    (md / "config.json").write_text(_hf())
    (fx / "model_dir_confdir").mkdir()
    (fx / "model_dir_confdir" / "config.json").mkdir()
    (fx / "model_dir_fifo").mkdir()
    os.mkfifo(fx / "model_dir_fifo" / "config.json")
    # a sparse file larger than the memory limit (NUL bytes; costs no disk)
    with open(fx / "sparse.txt", "wb") as f:
        f.truncate(3 * 1024**3)
    os.symlink("sparse.txt", fx / "sparse.yaml")
    os.symlink("sparse.txt", fx / "sparse.jsonl")
    os.symlink("sparse.txt", fx / "sparse.csv")
    os.symlink("sparse.txt", fx / "sparse.json")
    os.symlink("sparse.txt", fx / "sparse.py")
    # configuration folders ($XDG_CONFIG_HOME), model folders ($DECODECALC_MODEL_DIR), HF caches ($HF_HOME)
    _config_homes(fx, files, profiles)
    _model_dirs(fx)
    _hf_homes(fx)
    return {p.name: str(p) for p in fx.iterdir()}


def _config_homes(fx: Path, files: dict[str, str | bytes], profiles: dict[str, Any]) -> None:
    def home(name: str) -> Path:
        d = fx / name / "decodecalc" / "profiles"
        d.mkdir(parents=True, exist_ok=True)
        return d

    for src in ["m_binary.yaml", "m_laughs.yaml", "m_empty.yaml", "p_set_gpu_h100.yaml", "p_drop_families.yaml",
                "p_set_num_sms_1.yaml", "p_cells_0.yaml", "p_set_schema_2.yaml"] + sorted(profiles)[:8]:
        if src not in files:
            continue
        d = home(f"xdg_{src.removesuffix('.yaml')}")
        (d / "h200.yaml").write_bytes(files[src] if isinstance(files[src], bytes) else files[src].encode())
    (home("xdg_fifo") / "h200.yaml").parent.mkdir(exist_ok=True)
    os.mkfifo(fx / "xdg_fifo" / "decodecalc" / "profiles" / "h200.yaml")
    (home("xdg_dir") / "h200.yaml").mkdir()
    os.symlink("/dev/zero", home("xdg_zero") / "h200.yaml")
    os.symlink(fx / "sparse.txt", home("xdg_sparse") / "h200.yaml")
    os.symlink("h200.yaml", home("xdg_loop") / "h200.yaml")
    (fx / "xdg_profiles_file" / "decodecalc").mkdir(parents=True)
    (fx / "xdg_profiles_file" / "decodecalc" / "profiles").write_text("x")
    (fx / "xdg_file").write_text("x")


def _model_dirs(fx: Path) -> None:
    def d(name: str) -> Path:
        p = fx / name
        p.mkdir()
        return p

    (d("mdir_binary") / "bad.yaml").write_bytes(bytes(range(256)) * 8)
    (d("mdir_shadow") / "llama3-8b.yaml").write_text(_m(name="llama3-8b", num_attention_heads="-8"))
    (d("mdir_shadow_ok") / "llama3-8b.yaml").write_text(_m(name="llama3-8b", num_layers="1"))
    (d("mdir_mismatch") / "foo.yaml").write_text(_m(name="bar"))
    os.mkfifo(d("mdir_fifo") / "llama3-8b.yaml")
    os.mkfifo(d("mdir_fifo_other") / "zzz.yaml")
    (d("mdir_subdir") / "x.yaml").mkdir()
    os.symlink("loop.yaml", d("mdir_loop") / "loop.yaml")
    os.symlink("/dev/zero", d("mdir_zero") / "zero.yaml")
    os.symlink("/nonexistent", d("mdir_dangling") / "gone.yaml")
    laughs = d("mdir_laughs")
    (laughs / "laughs.yaml").write_text(LAUGHS)
    many = d("mdir_many")
    for i in range(3000):
        (many / f"m{i:04d}.yaml").write_text(_m(name=f"m{i:04d}"))
    (d("mdir_names") / "UPPER.yaml").write_text(_m(name="UPPER"))
    (d("mdir_markup") / "[red]x[").mkdir()
    (fx / "mdir_markup" / "[red]x[.yaml").write_text(_m(name="[red]x["))
    (fx / "mdir_file").write_text("x")


def _hf_homes(fx: Path) -> None:
    """HF_HOME folders holding a cache entry models--org--name for -m org/name."""
    def repo(home: str) -> Path:
        r = fx / home / "hub" / "models--org--name"
        (r / "snapshots").mkdir(parents=True)
        (r / "refs").mkdir()
        return r

    r = repo("hf_ok")
    (r / "snapshots" / "abc").mkdir()
    (r / "snapshots" / "abc" / "config.json").write_text(_hf())
    (r / "refs" / "main").write_text("abc")
    r = repo("hf_binary")
    (r / "snapshots" / "abc").mkdir()
    (r / "snapshots" / "abc" / "config.json").write_bytes(bytes(range(256)) * 8)
    (r / "refs" / "main").write_text("abc")
    r = repo("hf_ref_escape")
    (r / "refs" / "main").write_text("../../../../../../../../etc")
    r = repo("hf_ref_huge")
    os.symlink(fx / "sparse.txt", r / "refs" / "main")
    r = repo("hf_ref_latin1")
    (r / "refs" / "main").write_bytes(b"caf\xe9")
    r = repo("hf_ref_fifo")
    os.mkfifo(r / "refs" / "main")
    r = repo("hf_ref_zero")
    os.symlink("/dev/zero", r / "refs" / "main")
    r = repo("hf_config_fifo")
    (r / "snapshots" / "abc").mkdir()
    os.mkfifo(r / "snapshots" / "abc" / "config.json")
    r = repo("hf_config_dir")
    (r / "snapshots" / "abc" / "config.json").mkdir(parents=True)
    r = repo("hf_config_zero")
    (r / "snapshots" / "abc").mkdir()
    os.symlink("/dev/zero", r / "snapshots" / "abc" / "config.json")
    r = repo("hf_config_sparse")
    (r / "snapshots" / "abc").mkdir()
    os.symlink(fx / "sparse.txt", r / "snapshots" / "abc" / "config.json")
    r = repo("hf_snapshots_file")
    shutil.rmtree(r / "snapshots")
    (r / "snapshots").write_text("x")
    r = repo("hf_many_snapshots")
    for i in range(2000):
        (r / "snapshots" / f"s{i:04d}").mkdir()
    (r / "snapshots" / "s1999" / "config.json").write_text(_hf())
    r = repo("hf_tokenizer_bad")
    (r / "snapshots" / "abc").mkdir()
    (r / "snapshots" / "abc" / "config.json").write_text(_hf())
    (r / "snapshots" / "abc" / "tokenizer.json").write_bytes(bytes(range(256)) * 8)
    (r / "refs" / "main").write_text("abc")
    (fx / "hf_home_file").write_text("x")
    for home, ref in [("hftok_latin1", b"caf\xe9"), ("hftok_escape", b"../../../../../../etc"), ("hftok_huge", None),
                      ("hftok_tokbin", b"abc")]:
        r = fx / home / "hub" / "models--meta-llama--Meta-Llama-3-8B"
        (r / "snapshots" / "abc").mkdir(parents=True)
        (r / "refs").mkdir()
        if ref is None:
            os.symlink(fx / "sparse.txt", r / "refs" / "main")
        else:
            (r / "refs" / "main").write_bytes(ref)
        tok = {"hftok_tokbin": bytes(range(256)) * 8}.get(home)
        if tok is not None:
            (r / "snapshots" / "abc" / "tokenizer.json").write_bytes(tok)
        else:
            os.symlink(fx / "sparse.txt", r / "snapshots" / "abc" / "tokenizer.json")


# ---------------------------------------------------------------------------------------------------------------
# the command table, from the typer app


@dataclass
class Option:
    name: str  # first long spelling
    spellings: list[str]
    kind: str  # int | float | enum | path_in | path_out | flag | str
    choices: list[str]
    secondary: list[str]


def load_commands(root: Path) -> dict[str, list[Option]]:
    """Every command's options, read from the typer app in a child process (this process stays small: a child's
    peak RSS, as wait4 reports it, starts from its parent's at fork)."""
    # PYTHONPATH puts the tested tree ahead of any installed copy; the child runs in this folder to import this file
    code = "import json, sys; import hostile_campaign as h; " \
           "print(json.dumps({k: [vars(o) for o in v] for k, v in h._options(sys.argv[1]).items()}))"
    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parent, env={**os.environ, "PYTHONPATH": str(root)})
    return {k: [Option(**o) for o in v] for k, v in json.loads(out.stdout).items()}


def _options(root: str) -> dict[str, list[Option]]:
    import typer.main

    from decodecalc.cli import app

    out: dict[str, list[Option]] = {}
    for name, cmd in typer.main.get_command(app).commands.items():
        opts: list[Option] = []
        for p in cmd.params:
            if getattr(p, "param_type_name", "") != "option" or p.opts[0] in ("--help", "-h"):
                continue
            long = next((o for o in p.opts if o.startswith("--")), p.opts[0])
            annotation = getattr(getattr(p, "type_descriptor", None), "annotation", None)
            choices: list[str] = []
            if p.is_flag:
                kind = "flag"
            elif isinstance(annotation, type) and issubclass(annotation, Enum):
                kind, choices = "enum", [str(m.value) for m in annotation]
            elif annotation is int:
                kind = "int"
            elif annotation is float:
                kind = "float"
            elif annotation is Path:
                kind = "path_out" if long in ("--output", "--plot", "--save-measurements") else "path_in"
            else:
                kind = "str"
            opts.append(Option(long, list(p.opts), kind, choices, list(p.secondary_opts)))
        out[name] = opts
    return out


#: cheap arguments each command runs with unless a case sets the same option
BASE: dict[str, list[str]] = {
    "sweep": ["-b", "1:4", "-s", "128:1024:128", "-q"],
    "tune": ["-w", "mix:prompt=64,output=16,steps=20", "--engine", "vllm", "--heuristics", "none"],
}
#: options that only mean something beside another: the case adds the context (and drops -w for a trace)
CONTEXT: dict[tuple[str, str], list[str]] = {
    ("tune", "--format"): ["--requests", "@fx/r_valid.csv"],
    ("tune", "--columns"): ["--requests", "@fx/r_valid.csv"],
    ("tune", "--tokenizer"): ["--requests", "@fx/r_sharegpt_valid.json"],
    ("tune", "--max-requests"): ["--requests", "@fx/r_valid.csv"],
    ("tune", "--metrics-model"): ["--metrics", "@fx/x_valid.txt"],
    ("tune", "--draft-acceptance-rate"): ["--num-speculative-tokens", "2"],
    ("tune", "--rule"): ["--engine", "vllm"],
}
WORKLOAD_OPTS = ("--steps", "--requests", "--metrics", "--workload")
SLOW_COMMANDS = ("verify", "calibrate")


def pool_for(command: str, opt: Option) -> list[str]:
    n = opt.name
    if opt.kind == "int":
        return NUMBERS
    if opt.kind == "float":
        return FLOATS
    if opt.kind == "enum":
        c = opt.choices
        return [*c, c[0].upper(), c[-1].swapcase(), "", " ", "nonexistent", c[0] + " ", "x" * 300, "[red]x", "-1",
                "\u00b5"]
    if opt.kind == "path_out":
        return [t for t, _ in OUTPUT_TARGETS]
    if opt.kind == "path_in":
        if n == "--steps":
            return [f"@fx/{k}" for k in STEP_FILES] + HOSTILE_READ_PATHS
        if n == "--requests":
            return [f"@fx/{k}" for k in REQUEST_FILES] + HOSTILE_READ_PATHS
        if n == "--rule":
            return [f"@fx/{k}" for k in RULE_FILES] + HOSTILE_READ_PATHS
        if n == "--profile":
            return HOSTILE_READ_PATHS + ["@fx/p_valid.yaml", "@fx/sparse.yaml", "@fx/urandom.yaml"]
        if n == "--tokenizer":
            return [f"@fx/{k}" for k in TOKENIZER_FILES] + HOSTILE_READ_PATHS
        if n == "--from-measurements":
            return [f"@fx/{k}" for k in MEASUREMENT_FILES] + HOSTILE_READ_PATHS
        return HOSTILE_READ_PATHS + ["@fx/model_dir", "@fx/sparse.py"]
    if n == "--model":
        return MODELS
    if n == "--gpu":
        return GPUS
    if command == "sweep" and n in ("--tp", "--batch", "--seq-len"):
        return RANGES
    if n in ("--seq-lens", "--query-lens", "--batches", "--candidates", "--others"):
        return LISTS
    if n in ("--policies", "--heuristics", "--kernels", "--kernel"):
        return NAMELISTS
    if n == "--workload":
        return WORKLOADS
    if n == "--metrics":
        return METRICS_SOURCES + [f"@fx/{k}" for k in METRICS_FILES]
    if n == "--columns":
        return COLUMNS_SPECS
    if n == "--max-regression":
        return REGRESSIONS
    if n in ("--objective", "--engine", "--system", "--format", "--metric"):
        return ["mean", "p99", "p50", "MEAN", "vllm", "sglang", "both", "VLLM", "native", "azure", "sharegpt",
                "csv", "json", "xml", "region", "splits", "", " ", "x" * 300, "[red]x", "-1", "none", "all"]
    return TEXTS


def is_absurd(opt: Option, value: str) -> bool:
    """A value no option of this kind should accept (an error expected)."""
    if opt.kind in ("int", "float"):
        return value.strip() in ABSURD or value == "1e400"
    return False


def compose(command: str, chosen: list[tuple[Option, str]], flags: list[str], rng: random.Random) -> list[str]:
    """The argument list: the base arguments the chosen options do not override, then the chosen ones."""
    names = {o.name for o, _ in chosen}
    extra: list[str] = []
    for o, _ in chosen:
        extra += CONTEXT.get((command, o.name), [])
    extra_names = set(extra[::2])
    base = BASE.get(command, [])
    kept: list[str] = []
    trace_given = bool(names & set(WORKLOAD_OPTS) - {"--workload"}) or bool(extra_names & set(WORKLOAD_OPTS))
    i = 0
    while i < len(base):
        opt, val = base[i], base[i + 1] if i + 1 < len(base) and not base[i + 1].startswith("-") else None
        step = 2 if val is not None else 1
        long = {"-b": "--batch", "-s": "--seq-len", "-w": "--workload", "-q": "--quiet"}.get(opt, opt)
        if long in names or long in extra_names or (long == "--workload" and trace_given):
            i += step
            continue
        kept += base[i:i + step]
        i += step
    args = [command, *kept, *extra]
    for o, v in chosen:
        spelling = rng.choice(o.spellings)
        if v.startswith("-") and rng.random() < 0.5 and spelling.startswith("--"):
            args.append(f"{spelling}={v}")
        else:
            args += [spelling, v]
    return args + flags


def value_cases(commands: dict[str, list[Option]], rng: random.Random, scale: float) -> list[Case]:
    cases: list[Case] = []
    seen: Counter[str] = Counter(o.name for opts in commands.values() for o in opts)
    for command, opts in commands.items():
        for opt in opts:
            if opt.kind == "flag":
                continue
            pool = pool_for(command, opt)
            shared = seen[opt.name] > 3
            k = 3 if shared else 10
            if command in SLOW_COMMANDS:
                k = 2 if shared else 6
            if command == "tune" and not shared:
                k = 8
            k = max(1, round(k * scale))
            values = rng.sample(pool, min(k, len(pool)))
            for v in values:
                args = compose(command, [(opt, v)], [], rng)
                targets = dict(OUTPUT_TARGETS)
                case = Case("value", command, args, expect_error=is_absurd(opt, v))
                if opt.kind == "path_out":
                    case.outputs = [v]
                    case.write_fails = bool(targets.get(v))
                    case.setup = _output_setup(v)
                cases.append(case)
        flags = [o for o in opts if o.kind == "flag"]
        for f in flags:  # each flag once, both spellings
            for spelling in [*f.spellings[:1], *f.secondary]:
                cases.append(Case("value", command, compose(command, [], [spelling], rng)))
    return cases


def combo_cases(commands: dict[str, list[Option]], rng: random.Random, scale: float) -> list[Case]:
    cases: list[Case] = []
    for command, opts in commands.items():
        values = [o for o in opts if o.kind not in ("flag", "path_out")]
        flags = [o for o in opts if o.kind == "flag"]
        if not values:
            continue
        n = {"tune": 10, "verify": 5, "calibrate": 5}.get(command, 20)
        for _ in range(max(1, round(n * scale))):
            chosen_opts = rng.sample(values, min(len(values), rng.randint(2, 4)))
            chosen = [(o, rng.choice(pool_for(command, o))) for o in chosen_opts]
            fl = [rng.choice([*f.spellings[:1], *f.secondary]) for f in rng.sample(flags, min(len(flags),
                                                                                                rng.randint(0, 2)))]
            cases.append(Case("combo", command, compose(command, chosen, fl, rng),
                              expect_error=any(is_absurd(o, v) for o, v in chosen)))
    return cases


def _output_setup(target: str) -> dict[str, str]:
    setup = {}
    if target.startswith("@run/"):
        name = target.removeprefix("@run/").split("/")[0]
        setup[name] = {"full_link": "link:/dev/full", "afile": "file:", "adir": "dir:", "fifo": "fifo:",
                       "dangling": "link:/nonexistent/dir/x", "dir_link": "dirlink:"}[name]
    return setup


def file_cases(fixtures: dict[str, str]) -> list[Case]:
    cases: list[Case] = []
    tune = ["tune", "--heuristics", "none", "--engine", "vllm"]
    for name in MODEL_FILES:
        cases.append(Case("file:model", "grid", ["grid", "-m", f"@fx/{name}"]))
    for name in list(MODEL_FILES)[::6]:
        cases.append(Case("file:model", "tune", [*tune, "-m", f"@fx/{name}", "-w", "mix:prompt=64,output=16,steps=20"]))
        cases.append(Case("file:model", "sweep", ["sweep", "-m", f"@fx/{name}", *BASE["sweep"]]))
    for special in ["model_dir", "model_dir_confdir", "model_dir_fifo", "empty_dir", "fifo.json", "fifo.yaml",
                    "sparse.yaml", "sparse.json", "zero.json", "urandom.yaml", "loop.yaml", "dangling.yaml"]:
        cases.append(Case("file:model", "grid", ["grid", "-m", f"@fx/{special}"]))
    profiles = sorted(n for n in fixtures if n.startswith("p_"))
    for name in profiles:
        cases.append(Case("file:profile", "recommend", ["recommend", "--profile", f"@fx/{name}"]))
    for name in profiles[::5]:
        cases.append(Case("file:profile", "tune", [*tune, "-w", "mix:prompt=64,output=16,steps=20", "--profile",
                                                   f"@fx/{name}"]))
    for special in ["fifo.yaml", "sparse.yaml", "urandom.yaml", "zero.json", "empty_dir", "m_laughs.yaml"]:
        cases.append(Case("file:profile", "recommend", ["recommend", "--profile", f"@fx/{special}"]))
    for name in STEP_FILES:
        cases.append(Case("file:steps", "tune", [*tune, "--steps", f"@fx/{name}"]))
    for special in ["fifo.txt", "sparse.jsonl", "sparse.csv", "zero.txt", "empty_dir", "dangling.yaml"]:
        cases.append(Case("file:steps", "tune", [*tune, "--steps", f"@fx/{special}"]))
    for name in REQUEST_FILES:
        cases.append(Case("file:requests", "tune", [*tune, "--requests", f"@fx/{name}"]))
    for name, fmt in [("r_valid.csv", "azure"), ("r_valid.csv", "sharegpt"), ("r_sharegpt_valid.json", "native"),
                      ("r_native.jsonl", "mooncake"), ("r_valid.csv", "vllm-bench"), ("r_valid.csv", "sglang-bench"),
                      ("r_valid.csv", "burstgpt"), ("r_valid.csv", "NATIVE"), ("r_valid.csv", "")]:
        cases.append(Case("file:requests", "tune", [*tune, "--requests", f"@fx/{name}", "--format", fmt]))
    for spec in COLUMNS_SPECS:
        cases.append(Case("file:requests", "tune", [*tune, "--requests", "@fx/r_valid.csv", "--columns", spec]))
    for special in ["fifo.txt", "sparse.csv", "zero.txt", "empty_dir", "dangling.yaml", "sparse.json"]:
        cases.append(Case("file:requests", "tune", [*tune, "--requests", f"@fx/{special}"]))
    for n in ["0", "-1", "1", "1000000000000", "2147483648"]:
        cases.append(Case("file:requests", "tune", [*tune, "--requests", "@fx/r_many.csv", "--max-requests", n]))
    for k, rate in [("2", "0"), ("2", "1"), ("2", "nan"), ("2", "-0.5"), ("2", "1.5"), ("1024", "1"), ("1024", "0.5"),
                    ("0", "0.7")]:
        cases.append(Case("file:requests", "tune", [*tune, "--requests", "@fx/r_valid.csv", "--num-speculative-tokens",
                                                    k, "--draft-acceptance-rate", rate],
                          expect_error=rate in ("nan", "-0.5", "1.5")))
    for name in METRICS_FILES:
        cases.append(Case("file:metrics", "tune", [*tune, "--metrics", f"@fx/{name}"]))
    for src in METRICS_SOURCES:
        cases.append(Case("file:metrics", "tune", [*tune, "--metrics", src]))
    for model in ["m", "nonexistent", "", "[red]x"]:
        cases.append(Case("file:metrics", "tune", [*tune, "--metrics", "@fx/x_valid.txt", "--metrics-model", model]))
    for c in ["1", "256", "257", "0"]:
        cases.append(Case("file:metrics", "tune", [*tune, "--metrics", "@fx/x_valid.txt", "-c", c]))
    for name in RULE_FILES:
        cases.append(Case("file:rule", "tune", ["tune", "--heuristics", "none", "-w", "mix:prompt=64,output=16,steps=20",
                                                "--rule", f"@fx/{name}"]))
    for special in ["fifo.txt", "sparse.py", "zero.txt", "empty_dir", "m_binary.yaml", "latin1.txt"]:
        cases.append(Case("file:rule", "tune", ["tune", "--heuristics", "none", "-w", "mix:prompt=64,output=16,steps=20",
                                                "--rule", f"@fx/{special}"]))
    for name in list(TOKENIZER_FILES) + ["fifo.json", "sparse.json", "empty_dir", "model_dir"]:
        cases.append(Case("file:tokenizer", "tune", [*tune, "--requests", "@fx/r_sharegpt_valid.json", "--tokenizer",
                                                     f"@fx/{name}"]))
    for name in list(MEASUREMENT_FILES) + ["fifo.json", "sparse.json", "empty_dir", "zero.json"]:
        cases.append(Case("file:measurements", "calibrate", ["calibrate", "--from-measurements", f"@fx/{name}", "-o",
                                                             "prof.yaml"]))
    for src in ["empty_dir", "fifo.txt", "m_binary.yaml", "sparse.py", "model_dir"]:
        cases.append(Case("file:source", "verify", ["verify", "--vllm-src", f"@fx/{src}"]))
        cases.append(Case("file:source", "calibrate", ["calibrate", "--sglang-src", f"@fx/{src}"]))
    return cases


def env_cases(rng: random.Random) -> list[Case]:
    cases: list[Case] = []
    quick = [["grid"], ["compare"], ["recommend"], ["explain"], ["gpus"], ["models"], ["determinism"], ["cudagraphs"],
             ["sweep", *BASE["sweep"]], ["tune", *BASE["tune"]], ["grid", "--help"], ["compare", "--explain"],
             ["grid", "--explain"], ["sweep", "-b", "1:4", "-s", "128:1024:128"]]
    for cols in ["0", "-1", "1", "5", "20", "100000", "2147483648", "abc", "", "nan"]:
        for args in rng.sample(quick, 2):
            cases.append(Case("env", args[0], list(args), env={"COLUMNS": cols}))
    for lines in ["0", "-1", "abc"]:
        cases.append(Case("env", "grid", ["grid"], env={"LINES": lines}))
    xdg = ["/nonexistent", "", "relative/cfg", "/proc", "/dev/null", "@fx/xdg_file", "@fx/xdg_profiles_file",
           "@fx/xdg_fifo", "@fx/xdg_dir", "@fx/xdg_zero", "@fx/xdg_sparse", "@fx/xdg_loop", "@fx/xdg_m_binary",
           "@fx/xdg_m_laughs", "@fx/xdg_m_empty", "@fx/xdg_p_set_gpu_h100", "@fx/xdg_p_drop_families",
           "@fx/xdg_p_set_num_sms_1", "@fx/xdg_p_cells_0", "@fx/xdg_p_set_schema_2"]
    for value in xdg:
        for args in (["grid"], ["recommend"], ["compare", "--json"], ["tune", *BASE["tune"]], ["gpus"]):
            cases.append(Case("env", args[0], list(args), env={"XDG_CONFIG_HOME": value}))
    for value in ["/nonexistent", "", "/", "/proc", "/dev", "@fx/mdir_file", "@fx/mdir_binary", "@fx/mdir_shadow",
                  "@fx/mdir_shadow_ok", "@fx/mdir_mismatch", "@fx/mdir_fifo", "@fx/mdir_fifo_other", "@fx/mdir_subdir",
                  "@fx/mdir_loop", "@fx/mdir_zero", "@fx/mdir_dangling", "@fx/mdir_laughs", "@fx/mdir_many",
                  "@fx/mdir_names", "@fx/mdir_markup"]:
        for args in (["grid"], ["models"], ["grid", "-m", "m0001"], ["grid", "-m", "nonexistent"]):
            cases.append(Case("env", args[0], list(args), env={"DECODECALC_MODEL_DIR": value}))
    for var in ("HF_HOME", "HF_HUB_CACHE"):
        for value in ["/nonexistent", "", "/proc", "@fx/hf_home_file", "@fx/hf_ok", "@fx/hf_binary",
                      "@fx/hf_ref_escape", "@fx/hf_ref_huge", "@fx/hf_ref_latin1", "@fx/hf_ref_fifo", "@fx/hf_ref_zero",
                      "@fx/hf_config_fifo", "@fx/hf_config_dir", "@fx/hf_config_zero", "@fx/hf_config_sparse",
                      "@fx/hf_snapshots_file", "@fx/hf_many_snapshots", "@fx/hf_tokenizer_bad"]:
            v = value if var == "HF_HOME" or not value.startswith("@fx/hf_") or value == "@fx/hf_home_file" \
                else value + "/hub"
            cases.append(Case("env", "grid", ["grid", "-m", "org/name"], env={var: v}))
            if var == "HF_HOME":
                cases.append(Case("env", "tune", ["tune", "--heuristics", "none", "--engine", "vllm", "-m", "org/name",
                                                  "--requests", "@fx/r_sharegpt_valid.json"], env={var: v}))
                cases.append(Case("env", "tune", ["tune", "--heuristics", "none", "--engine", "vllm", "--requests",
                                                  "@fx/r_sharegpt_valid.json", "-m", "@fx/m_hf_id_list.yaml"],
                                  env={var: v}))
    for home in ("hftok_latin1", "hftok_escape", "hftok_huge", "hftok_tokbin"):
        for var, v in (("HF_HOME", f"@fx/{home}"), ("HF_HUB_CACHE", f"@fx/{home}/hub")):
            cases.append(Case("env", "tune", ["tune", "--heuristics", "none", "--engine", "vllm", "--requests",
                                              "@fx/r_sharegpt_valid.json"], env={var: v}))
    for var, value in [("XDG_CACHE_HOME", "/nonexistent"), ("XDG_CACHE_HOME", "@fx/hf_ok"), ("HOME", "/nonexistent"),
                       ("HOME", None), ("HOME", ""), ("PYTHONIOENCODING", "ascii"), ("PYTHONIOENCODING", "latin-1"),
                       ("LANG", "C"),
                       ("LC_ALL", "C"), ("LC_ALL", "xx_XX.nonsense"), ("TERM", "dumb"), ("TERM", ""), ("NO_COLOR", "1"),
                       ("FORCE_COLOR", "1"), ("TTY_COMPATIBLE", "1"), ("TMPDIR", "/nonexistent"),
                       ("MPLCONFIGDIR", "/proc/mpl"), ("MPLCONFIGDIR", "@fx/xdg_file"), ("MPLBACKEND", "nonexistent"),
                       ("MPLBACKEND", "TkAgg"), ("PYTHONHASHSEED", "1"), ("TRITON_INTERPRET", "1"),
                       ("TRITON_INTERPRET", "yes"), ("CUDA_VISIBLE_DEVICES", "-1"), ("COLUMNS", None)]:
        variants = [["compare"], ["tune", *BASE["tune"]], ["sweep", *BASE["sweep"], "-o", "s.csv", "--plot", "s.png"],
                    ["tune", *BASE["tune"], "--plot", "t.png"], ["verify", "--batch", "2", "--seq-len", "64"]]
        for args in rng.sample(variants, 2):
            outs = [a for i, a in enumerate(args) if i and args[i - 1] in ("-o", "--plot")]
            cases.append(Case("env", args[0], list(args), env={var: value}, outputs=outs))
    return cases


def output_cases(commands: dict[str, list[Option]]) -> list[Case]:
    cases: list[Case] = []
    writers = [(["grid"], "-o"), (["compare", "--csv"], "-o"), (["recommend"], "-o"),
               (["sweep", *BASE["sweep"]], "-o"), (["sweep", *BASE["sweep"]], "--plot"), (["tune", *BASE["tune"]], "-o"),
               (["tune", *BASE["tune"]], "--plot"), (["calibrate", "--from-measurements", "@fx/meas_obj.json"], "-o")]
    for target, fails in OUTPUT_TARGETS:
        for base, opt in writers:
            if base[0] == "calibrate" and target not in ("/dev/full", ".", "nonexistent/x.json", "@run/fifo"):
                continue
            if opt == "--plot" and target in ("out.json", "out.csv"):
                continue
            cases.append(Case("output", base[0], [*base, opt, target], outputs=[target], write_fails=bool(fails),
                              setup=_output_setup(target)))
    for base in (["sweep", *BASE["sweep"]], ["tune", *BASE["tune"]]):
        for a, b in [("x.csv", "x.csv"), ("x.csv", "./x.csv"), ("x.png", "sub/../x.png"), ("/dev/null", "/dev/null"),
                     ("x.json", "@run/x_link"), ("/dev/full", "x.png"), ("x.json", "/dev/full")]:
            setup = {"x_link": "link:x.json"} if b == "@run/x_link" else {}
            cases.append(Case("output", base[0], [*base, "-o", a, "--plot", b], outputs=[a, b],
                              write_fails=("/dev/full" in (a, b)) or a == b or b in ("./x.csv", "sub/../x.png",
                                                                                    "@run/x_link"), setup=setup))
    for fmt in ["csv", "json", "xml", "CSV", ""]:
        cases.append(Case("output", "sweep", ["sweep", *BASE["sweep"], "--format", fmt, "-o", "s.out"],
                          outputs=["s.out"]))
        cases.append(Case("output", "sweep", ["sweep", *BASE["sweep"], "--format", fmt, "-o", "s.json"],
                          outputs=["s.json"]))
    for cmd in (["gpus"], ["models"], ["grid"], ["compare", "--csv"], ["sweep", *BASE["sweep"]],
                ["tune", *BASE["tune"]], ["recommend", "--json"], ["grid", "--json"], ["determinism"],
                ["grid", "--bad-option"]):
        for mode in ("closed", "devfull", "pipe-close"):
            cases.append(Case("stdout", cmd[0], list(cmd), stdout=mode, write_fails=mode != "pipe-close"))
    return cases


def signal_cases() -> list[Case]:
    cases: list[Case] = []
    long_runs = [
        (["sweep", "-b", "1:512", "-o", "big.csv", "--plot", "big.png"], ["big.csv", "big.png"]),
        (["sweep", "-b", "1:512", "-q", "-o", "big.json"], ["big.json"]),
        (["tune", "-w", "chat", "-o", "t.json", "--plot", "t.png"], ["t.json", "t.png"]),
        (["compare", "--batch", "65536", "--seq-len", "16777216", "-o", "c.json", "--json"], ["c.json"]),
    ]
    for args, outs in long_runs:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            for delay in (0.4, 1.2):
                cases.append(Case("signal", args[0], list(args), outputs=outs, signal=(int(sig), delay)))
    return cases


def nonsense_cases() -> list[Case]:
    """Inputs no command may accept (an exit 0 is accepted nonsense), whatever the random draws above cover."""
    tune = ["tune", "--heuristics", "none", "--engine", "vllm"]
    small = [*tune, "-w", "mix:prompt=64,output=16,steps=20"]
    cases = [Case("nonsense", a[0], a, expect_error=True) for a in [
        ["grid", "--bandwidth", "1e-320", "--json"], ["compare", "--bandwidth", "1e-300"],
        ["recommend", "--bandwidth", "5e-324"], [*small, "--bandwidth", "1e-320"], ["grid", "--sms", "0"],
        ["grid", "--tp", "3"], ["grid", "--block-size", "0"], ["grid", "--num-speculative-tokens", "-1"],
        ["grid", "--max-kv-splits", "0"], ["cudagraphs", "--sglang-cuda-graph-max-bs", "0"],
        ["compare", "--occupancy", "0"], ["determinism", "--others", "0"], ["sweep", "-b", "0:4", "-s", "128", "-q"],
        [*small, "--max-regression", "nan%"], [*small, "--concurrency", "0"],
        [*tune, "-w", "chat", "--num-speculative-tokens", "2", "--draft-acceptance-rate", "1.5"]]]
    for name in ["s_weights_overflow.jsonl", "s_weight_2_63.jsonl", "s_seq_zero.jsonl", "s_seq_neg.jsonl",
                 "s_seq_2_63.jsonl", "s_seq_nan.jsonl", "s_weight_0.jsonl", "s_weight_neg.jsonl", "s_q_gt.jsonl",
                 "s_q_huge.jsonl", "s_seq_empty.jsonl"]:
        cases.append(Case("nonsense", "tune", [*tune, "--steps", f"@fx/{name}"], expect_error=True))
    for name in ["r_prompt_0.csv", "r_neg.csv", "r_nan.csv", "r_inf.csv", "r_2_63.csv", "r_arrival_neg.csv",
                 "r_arrival_nan.csv", "r_arrival_inf.csv", "r_arrival_huge.csv", "r_vllm_rate_tiny.json"]:
        cases.append(Case("nonsense", "tune", [*tune, "--requests", f"@fx/{name}"], expect_error=True))
    for name in ["x_le_nan.txt", "x_le_huge.txt", "x_count_neg.txt", "x_count_nan.txt", "x_decreasing.txt"]:
        cases.append(Case("nonsense", "tune", [*tune, "--metrics", f"@fx/{name}"], expect_error=True))
    return cases


def all_cases(commands: dict[str, list[Option]], fixtures: dict[str, str], seed: int, scale: float) -> list[Case]:
    rng = random.Random(seed)
    cases = (value_cases(commands, rng, scale) + combo_cases(commands, rng, scale) + file_cases(fixtures)
             + env_cases(rng) + output_cases(commands) + signal_cases() + nonsense_cases())
    for i, c in enumerate(cases):
        c.id = i
    return cases


# ---------------------------------------------------------------------------------------------------------------
# running one case


@dataclass
class Result:
    case: Case
    rc: int | None
    seconds: float
    max_rss_mb: float
    stdout: str
    stderr: str
    left: list[str]
    classes: list[str]
    argv: list[str]
    env: dict[str, str | None]


def _subst(text: str, fx: Path, run_dir: Path) -> str:
    return text.replace("@fx/", f"{fx}/").replace("@run/", f"{run_dir}/")


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.setsid()


def _tree(folder: Path) -> set[str]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(folder):
        for n in dirnames + filenames:
            out.add(os.path.relpath(os.path.join(dirpath, n), folder))
    return out


#: paths outside the run folders that no case may change (as root, an output replaced /dev/stdout with a file)
GUARDED = ("/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/fd", "/dev/null", "/dev/full", "/dev/zero", "/dev/urandom")
#: folders where no case may create anything (as root, MPLCONFIGDIR=/nonexistent made /nonexistent)
WATCHED = ("/", "/dev")


def system_state() -> dict[str, Any]:
    state: dict[str, Any] = {}
    for p in GUARDED:
        try:
            st = os.lstat(p)
        except OSError:
            state[p] = None
            continue
        state[p] = (stat.S_IFMT(st.st_mode), st.st_mode, st.st_rdev,
                    os.readlink(p) if stat.S_ISLNK(st.st_mode) else None)
    for d in WATCHED:
        state[d + "/*"] = set(os.listdir(d))
    return state


def restore_system(before: dict[str, Any], after: dict[str, Any], argv_text: str) -> list[str]:
    """Put back what a case changed (a link or device replaced by a file; a new entry in / or /dev whose name
    the case's own arguments hold); returns what was changed."""
    changed = []
    for p in GUARDED:
        old, new = before[p], after[p]
        if old == new:
            continue
        changed.append(p)
        if old is None:
            continue
        fmt, mode, rdev, link = old
        if os.path.lexists(p):
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
        if link is not None:
            os.symlink(link, p)
        elif fmt == stat.S_IFCHR:
            os.mknod(p, mode, rdev)
    for d in WATCHED:
        for name in sorted(after[d + "/*"] - before[d + "/*"]):
            full = os.path.join(d, name)
            changed.append(full)
            if full in argv_text:  # what the case named: removed (its creator is known)
                shutil.rmtree(full, ignore_errors=True) if os.path.isdir(full) else os.unlink(full)
    return changed


def run_case(case: Case, python: str, root: Path, fx: Path, work: Path, base_env: dict[str, str]) -> Result:
    run_dir = Path(tempfile.mkdtemp(prefix=f"c{case.id:05d}-", dir=work / "runs"))
    for name, what in case.setup.items():
        p = run_dir / name
        if what == "fifo:":
            os.mkfifo(p)
        elif what == "dir:":
            p.mkdir()
        elif what == "file:":
            p.write_text("x")
        elif what == "dirlink:":
            (run_dir / "realdir").mkdir()
            os.symlink(run_dir / "realdir", p)
        elif what.startswith("link:"):
            os.symlink(what.removeprefix("link:"), p)
    before = _tree(run_dir)
    system = system_state()
    env = dict(base_env)
    for k, v in case.env.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = _subst(v, fx, run_dir)
    args = [_subst(a, fx, run_dir) for a in case.args]
    argv = [python, "-m", "decodecalc", *args]
    out_path, err_path = work / "io" / f"{case.id}.out", work / "io" / f"{case.id}.err"
    err_f = open(err_path, "wb")
    stdout: Any
    if case.stdout == "devfull":
        stdout = open("/dev/full", "wb")
    elif case.stdout == "pipe-close":
        stdout = subprocess.PIPE
    else:
        stdout = open(out_path, "wb")

    def preexec() -> None:
        _limits()
        if case.stdout == "closed":
            os.close(1)

    start = time.monotonic()
    p = subprocess.Popen(argv, cwd=run_dir, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=err_f,
                         preexec_fn=preexec)
    if case.stdout == "pipe-close":
        assert p.stdout is not None
        p.stdout.read(10)
        p.stdout.close()
    sent = False
    hang = False
    status, usage = 0, None
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        elapsed = time.monotonic() - start
        if case.signal and not sent and elapsed >= case.signal[1]:
            try:
                os.kill(p.pid, case.signal[0])
            except ProcessLookupError:
                pass
            sent = True
        if elapsed > TIMEOUT_S:
            hang = True
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            pid, status, usage = os.wait4(p.pid, 0)
            break
        time.sleep(0.01)
    seconds = time.monotonic() - start
    rc = os.waitstatus_to_exitcode(status)
    p.returncode = rc
    try:  # a grandchild still holding the group (none expected)
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for f in (stdout, err_f):
        if hasattr(f, "close"):
            f.close()
    out_text = out_path.read_bytes()[:200_000].decode("utf-8", "replace") if out_path.exists() else ""
    err_text = err_path.read_bytes()[:200_000].decode("utf-8", "replace")
    after = _tree(run_dir)
    new = sorted(after - before)
    damaged = restore_system(system, system_state(), " ".join(args) + " " + " ".join(map(str, env.values())))
    res = Result(case, None if hang else rc, seconds, (usage.ru_maxrss / 1024) if usage else 0.0, out_text, err_text,
                 new, [], args, case.env)
    res.classes = classify(res, hang, sent, run_dir)
    if damaged:
        res.classes = [k for k in res.classes if k not in CLEAN] + ["damaged-system"]
        res.left = res.left + [f"outside: {p}" for p in damaged]
    shutil.rmtree(run_dir, ignore_errors=True)
    out_path.unlink(missing_ok=True)
    err_path.unlink(missing_ok=True)
    return res


_WARNING = re.compile(r"\b[A-Z]\w*Warning: ")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NANINF = re.compile(r"(?<![\w.\-])-?(nan|inf)(?![\w])", re.I)
_MEMORY = re.compile(r"MemoryError|Cannot allocate memory|Unable to allocate|std::bad_alloc|out of memory")


def classify(r: Result, hang: bool, signalled: bool, run_dir: Path) -> list[str]:
    c = r.case
    r.stderr = _ANSI.sub("", r.stderr)  # FORCE_COLOR=1 colours the Error: line; the words are what is checked
    text = r.stdout + r.stderr
    classes: list[str] = []
    if hang:
        return ["hang"]
    rc = r.rc
    assert rc is not None
    expected_signal = {int(signal.SIGINT): (130, -2), int(signal.SIGTERM): (-15, 143),
                       int(signal.SIGHUP): (-1, 129)}.get(c.signal[0]) if c.signal else None
    if _MEMORY.search(r.stderr) or (rc in (-9, -11, -6) and not (expected_signal and rc in expected_signal)):
        classes.append("memory")
    if "Traceback (most recent call last)" in text:
        classes.append("traceback")
    if _WARNING.search(r.stderr):
        classes.append("python-warning")
    outputs_ok = set()
    for o in c.outputs:
        outputs_ok.add(os.path.normpath(_subst(o, Path("/fx"), Path("."))))
    stray = [p for p in r.left if os.path.normpath(p) not in outputs_ok and p.split("/")[0] != "realdir"]
    if rc != 0:
        if r.left and not (c.signal is None and set(r.left) <= {"rule_was_here.txt"}):
            classes.append("left-behind")
    elif stray:
        classes.append("stray-file")
    if rc == 0 and not (signalled and c.signal):
        missing = []
        for o in c.outputs:  # a plain file name in the run folder: it must be there, and not empty
            if o.startswith(("/", "@", "~")) or o in ("-", "") or "\n" in o or c.write_fails:
                continue
            q = run_dir / o
            if not q.is_file() or q.stat().st_size == 0:
                missing.append(o)
        if c.write_fails or missing:
            classes.append("write-failed-exit-0")
        if c.expect_error:
            classes.append("accepted-nonsense")
        if _NANINF.search(r.stdout):
            classes.append("nan-in-output")
    if c.signal and signalled:
        if rc in (expected_signal or ()) or rc == 0:
            if not classes:
                classes.append("signal-ok")
        elif "memory" not in classes:
            classes.append("bad-exit")
    elif rc == 1:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("Error:")]
        if not (len(errors) == 1 and lines and lines[-1] == errors[0]):
            classes.append("messy-error")
    elif rc == 2:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        if not any(ln.startswith("Error:") or ln.startswith("Usage:") for ln in lines):
            classes.append("messy-error")
    elif rc != 0 and "memory" not in classes:
        classes.append("bad-exit")
    if not classes:
        classes.append("ok" if rc == 0 else "clean-error")
        if r.seconds > SLOW_S:
            classes.append("slow")
    return classes


# ---------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="source tree to test (default: this checkout)")
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the per-option value counts")
    ap.add_argument("--only", default=None, help="comma list of commands or groups (value, combo, file, env, ...)")
    ap.add_argument("--limit", type=int, default=None, help="run only the first N cases (after --only)")
    ap.add_argument("--ids", default=None, help="comma list of case ids to run")
    ap.add_argument("--out", type=Path, default=Path("hostile_campaign.json"))
    ap.add_argument("--list", action="store_true", help="print the command lines and exit")
    ap.add_argument("--work", type=Path, default=None, help="folder for fixtures and runs (default: a temp folder)")
    opts = ap.parse_args(argv)

    root = opts.root.resolve()
    work = opts.work or Path(tempfile.mkdtemp(prefix="hostile-"))
    if work.exists() and any(work.iterdir()):
        shutil.rmtree(work)
    (work / "runs").mkdir(parents=True)
    (work / "io").mkdir()
    (work / "home").mkdir()
    (work / "mpl").mkdir()
    (work / "xdg").mkdir()
    fx = work / "fx"
    rng = random.Random(opts.seed)
    fixtures = write_fixtures(fx, root, rng)
    commands = load_commands(root)
    cases = all_cases(commands, fixtures, opts.seed, opts.scale)
    if opts.only:
        keep = set(opts.only.split(","))
        cases = [c for c in cases if c.command in keep or c.group.split(":")[0] in keep or c.group in keep]
    if opts.ids:
        ids = {int(x) for x in opts.ids.split(",")}
        cases = [c for c in cases if c.id in ids]
    if opts.limit:
        cases = cases[:opts.limit]
    if opts.list:
        for c in cases:
            print(c.id, c.group, shlex.join(c.args), c.env or "")
        return 0
    base_env = {"PATH": "/usr/bin:/bin", "HOME": str(work / "home"), "PYTHONPATH": str(root), "COLUMNS": "100",
                "LANG": "C.UTF-8", "MPLCONFIGDIR": str(work / "mpl"), "XDG_CONFIG_HOME": str(work / "xdg"),
                "HF_HOME": str(work / "home" / "hf"), "PYTHONDONTWRITEBYTECODE": "1"}
    print(f"{len(cases)} cases, root {root}, seed {opts.seed}, work {work}", flush=True)
    results: list[Result] = []
    start = time.monotonic()
    for i, case in enumerate(cases):
        r = run_case(case, sys.executable, root, fx, work, base_env)
        results.append(r)
        bad = [k for k in r.classes if k not in CLEAN and k not in REVIEW]
        if bad:
            print(f"  [{i + 1}/{len(cases)}] {','.join(r.classes)}: {shlex.join(r.argv)[:200]} "
                  f"{_env_text(r.env)}", flush=True)
        elif (i + 1) % 100 == 0:
            print(f"  [{i + 1}/{len(cases)}] {time.monotonic() - start:.0f} s", flush=True)
    total = time.monotonic() - start
    report(results, total, opts.out, root, opts.seed, fx)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _env_text(env: dict[str, str | None]) -> str:
    return " ".join(f"{k}={'<unset>' if v is None else shlex.quote(v)}" for k, v in env.items())


def report(results: list[Result], total: float, out: Path, root: Path, seed: int, fx: Path) -> None:
    by_class: Counter[str] = Counter()
    by_cmd: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        for k in r.classes:
            by_class[k] += 1
            by_cmd[k][r.case.command] += 1
    print(f"\n{len(results)} invocations in {total:.0f} s ({total / max(len(results), 1):.2f} s each), "
          f"max RSS {max((r.max_rss_mb for r in results), default=0):.0f} MB")
    print(f"{'class':<22}{'count':>7}  by command")
    order = ["ok", "clean-error", "signal-ok", "traceback", "hang", "memory", "damaged-system", "left-behind", "stray-file",
             "write-failed-exit-0", "accepted-nonsense", "python-warning", "messy-error", "bad-exit", "nan-in-output",
             "slow"]
    for k in order + sorted(set(by_class) - set(order)):
        if by_class[k] or k in order[:9]:
            detail = ", ".join(f"{c} {n}" for c, n in by_cmd[k].most_common()) if k not in CLEAN else ""
            print(f"{k:<22}{by_class[k]:>7}  {detail}")
    flagged = [r for r in results if any(k not in CLEAN for k in r.classes)]
    doc = {
        "invocations": len(results), "seconds": round(total, 1), "root": str(root), "seed": seed,
        "timeout_s": TIMEOUT_S, "memory_limit_bytes": MEMORY_BYTES, "counts": dict(by_class),
        "cases": [{
            "id": r.case.id, "classes": r.classes, "group": r.case.group, "command": r.case.command,
            "argv": ["decodecalc", *r.argv], "shell": "decodecalc " + shlex.join(r.argv),
            "env": {k: (None if v is None else _subst(v, fx, Path("RUN"))) for k, v in r.env.items()},
            "signal": r.case.signal, "stdout_mode": r.case.stdout, "rc": r.rc, "seconds": round(r.seconds, 2),
            "max_rss_mb": round(r.max_rss_mb, 1), "left": r.left, "stderr_tail": r.stderr[-1500:],
            "stdout_tail": r.stdout[-300:],
        } for r in flagged],
    }
    out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {len(flagged)} non-clean cases to {out}")


if __name__ == "__main__":
    sys.exit(main())
