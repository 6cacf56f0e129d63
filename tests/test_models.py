"""Model library (model_configs/*.yaml), HF config.json loading and the local HF cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decodecalc.errors import ConfigError, UnknownNameError
from decodecalc.specs import hf
from decodecalc.specs.models import load_model_file, model_library, resolve_model

ROOT = Path(__file__).resolve().parent.parent
MODEL_DIR = ROOT / "model_configs"
HF_DATA = Path(__file__).resolve().parent / "data" / "hf"
YAMLS = sorted(MODEL_DIR.glob("*.yaml"))

REQUIRED_IDS = {
    "llama3-8b", "llama3-70b", "llama3-405b", "mistral-7b", "mixtral-8x7b", "qwen2.5-7b", "qwen2.5-72b",
    "qwen3-8b", "qwen3-32b", "gemma-2-9b", "gemma-3-27b", "phi-3-mini", "gpt-oss-120b", "deepseek-v3",
}


@pytest.fixture
def fresh_library(monkeypatch: pytest.MonkeyPatch):
    """model_library() is cached per process; clear it around tests that change DECODECALC_MODEL_DIR."""
    model_library.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    model_library.cache_clear()


# --- the YAML library ------------------------------------------------------------------------


def test_library_has_every_required_id() -> None:
    assert REQUIRED_IDS <= set(model_library())


@pytest.mark.parametrize("path", YAMLS, ids=[p.stem for p in YAMLS])
def test_every_yaml_loads_with_name_equal_to_stem_and_a_source(path: Path) -> None:
    cfg = load_model_file(path)
    assert cfg.name == path.stem
    assert cfg.hf_id, f"{path.name} has no hf_id"
    assert cfg.source == f"https://huggingface.co/{cfg.hf_id}/blob/main/config.json"
    assert cfg.dtype == "bfloat16"
    # stored heads match the normalised attention kind (mha only when every head has its own KV)
    if not cfg.is_mla:
        assert cfg.attention == ("mha" if cfg.num_attention_heads == cfg.num_key_value_heads else "gqa")


# (layers, heads, kv heads, head_dim, sliding_window, pattern), each from the config.json named.
KNOWN = {
    # https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json (head_dim = 4096 / 32)
    "llama3-8b": (32, 32, 8, 128, None, None),
    # https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json
    "llama3-70b": (80, 64, 8, 128, None, None),
    # https://huggingface.co/meta-llama/Llama-3.1-405B/blob/main/config.json
    "llama3-405b": (126, 128, 8, 128, None, None),
    # https://huggingface.co/mistralai/Mistral-7B-Instruct-v0.3/blob/main/config.json (sliding_window null)
    "mistral-7b": (32, 32, 8, 128, None, None),
    # https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
    "mixtral-8x7b": (32, 32, 8, 128, None, None),
    # https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json (use_sliding_window false)
    "qwen2.5-7b": (28, 28, 4, 128, None, None),
    # https://huggingface.co/Qwen/Qwen2.5-72B/blob/main/config.json
    "qwen2.5-72b": (80, 64, 8, 128, None, None),
    # https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json
    "qwen3-8b": (36, 32, 8, 128, None, None),
    # https://huggingface.co/Qwen/Qwen3-32B/blob/main/config.json (head_dim 128 although hidden is 5120)
    "qwen3-32b": (64, 64, 8, 128, None, None),
    # https://huggingface.co/google/gemma-2-9b/blob/main/config.json
    "gemma-2-9b": (42, 16, 8, 256, 4096, 2),
    # https://huggingface.co/google/gemma-3-27b-it/blob/main/config.json (text_config)
    "gemma-3-27b": (62, 32, 16, 128, 1024, 6),
    # https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json (sliding_window 2047)
    "phi-3-mini": (32, 32, 32, 96, 2047, None),
    # https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json (layer_types alternate)
    "gpt-oss-120b": (36, 64, 8, 64, 128, 2),
}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_known_shapes(name: str) -> None:
    cfg = resolve_model(name)
    got = (cfg.num_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
           cfg.sliding_window, cfg.sliding_window_pattern)
    assert got == KNOWN[name]


def test_phi3_mini_is_mha() -> None:
    cfg = resolve_model("phi-3-mini")
    assert cfg.attention == "mha" and cfg.group_size == 1


def test_deepseek_v3_mla_fields() -> None:
    # https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json
    cfg = resolve_model("deepseek-v3")
    assert cfg.is_mla
    assert (cfg.num_layers, cfg.num_attention_heads) == (61, 128)
    assert (cfg.kv_lora_rank, cfg.qk_rope_head_dim, cfg.qk_nope_head_dim, cfg.v_head_dim) == (512, 64, 128, 128)
    # what the absorbed decode kernel sees: one latent head, K = 512 + 64, V = 512
    assert (cfg.head_dim_k, cfg.head_dim_v) == (576, 512)
    assert cfg.group_size == 128


def test_lookup_is_case_insensitive() -> None:
    assert resolve_model("Llama3-8B") is resolve_model("llama3-8b")


# --- YAML errors -------------------------------------------------------------------------------

LLAMA_YAML = "name: {name}\nnum_layers: 32\nnum_attention_heads: 32\nnum_key_value_heads: 8\nhead_dim: 128\n"


def test_unknown_model_suggests_close_names() -> None:
    with pytest.raises(UnknownNameError) as info:
        resolve_model("llama3-8")
    assert "llama3-8b" in info.value.suggestions
    assert "Did you mean" in str(info.value)


def test_malformed_yaml_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\nnum_layers: [32\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml: malformed YAML at line \d+"):
        resolve_model(str(bad))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: m\nnum_layers: 32\nnum_attention_heads: 32\nhead_dim: 128\n", "missing field 'num_key_value_heads'"),
        (LLAMA_YAML.format(name="m") + "colour: red\n", "unknown field(s) colour"),
        (LLAMA_YAML.format(name="m").replace("32\n", "'32'\n", 1), "'num_layers' must be a positive integer"),
        (LLAMA_YAML.format(name="m") + "sliding_window: 0\n", "'sliding_window' must be a positive integer"),
        (LLAMA_YAML.format(name="m").replace("num_key_value_heads: 8", "num_key_value_heads: 5"), "not a multiple"),
        (LLAMA_YAML.format(name="m") + "attention: mla\n", "MLA needs 'kv_lora_rank'"),
        (LLAMA_YAML.format(name="m") + "dtype: int4\n", "field 'dtype' is 'int4'"),
        ("- just\n- a list\n", "expected a mapping"),
    ],
)
def test_bad_yaml_field_errors_name_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_model_file(path)
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_library_rejects_name_that_differs_from_stem(tmp_path: Path, fresh_library: pytest.MonkeyPatch) -> None:
    (tmp_path / "alpha.yaml").write_text(LLAMA_YAML.format(name="beta"))
    fresh_library.setenv("DECODECALC_MODEL_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="must equal the file stem 'alpha'"):
        model_library()


def test_extra_model_dir_adds_to_the_library(tmp_path: Path, fresh_library: pytest.MonkeyPatch) -> None:
    (tmp_path / "my-model.yaml").write_text(LLAMA_YAML.format(name="my-model"))
    fresh_library.setenv("DECODECALC_MODEL_DIR", str(tmp_path))
    assert resolve_model("my-model").num_key_value_heads == 8
    assert "llama3-8b" in model_library()  # the shipped library is still there


# --- HF config.json ----------------------------------------------------------------------------


def test_hf_llama_style_matches_the_library_entry() -> None:
    cfg = hf.load_hf_config(HF_DATA / "llama-3-8b" / "config.json")
    lib = resolve_model("llama3-8b")
    assert cfg.name == "llama-3-8b"  # the folder, when not in an HF cache layout
    assert (cfg.num_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (
        lib.num_layers, lib.num_attention_heads, lib.num_key_value_heads, lib.head_dim)
    assert (cfg.attention, cfg.dtype, cfg.sliding_window) == ("gqa", "bfloat16", None)
    assert cfg.source == str(HF_DATA / "llama-3-8b" / "config.json")


def test_hf_gemma3_nested_text_config() -> None:
    cfg = hf.load_hf_config(HF_DATA / "gemma-3-27b-it" / "config.json", name="gemma3")
    # the LM, not the vision tower (which has 16 heads and 27 layers)
    assert (cfg.num_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (62, 32, 16, 128)
    assert (cfg.sliding_window, cfg.sliding_window_pattern) == (1024, 6)  # pattern: Gemma3TextConfig default
    assert cfg.dtype == "bfloat16"  # only at the top level
    assert cfg.name == "gemma3"


def test_hf_gemma3_small_text_config_uses_class_defaults(tmp_path: Path) -> None:
    # google/gemma-3-4b-it leaves the head counts out of text_config
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gemma3", "text_config": {
        "hidden_size": 2560, "num_hidden_layers": 34, "sliding_window": 1024}}))
    cfg = hf.load_hf_config(path)
    assert (cfg.num_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (34, 8, 4, 256)
    assert (cfg.sliding_window, cfg.sliding_window_pattern) == (1024, 6)


def test_hf_deepseek_mla() -> None:
    cfg = hf.load_hf_config(HF_DATA / "deepseek-v3" / "config.json")
    lib = resolve_model("deepseek-v3")
    assert cfg.attention == "mla"
    for field in ("num_layers", "num_attention_heads", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                  "v_head_dim", "head_dim", "head_dim_k", "head_dim_v"):
        assert getattr(cfg, field) == getattr(lib, field), field


def test_hf_mha_without_num_key_value_heads() -> None:
    cfg = hf.load_hf_config(HF_DATA / "mha-no-kv-heads" / "config.json")
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (32, 32, 80)  # 2560 / 32
    assert cfg.attention == "mha"
    assert cfg.dtype == "float16"


def test_hf_unused_sliding_window_is_dropped() -> None:
    # Qwen2.5 ships sliding_window 131072 with use_sliding_window false
    cfg = hf.load_hf_config(HF_DATA / "qwen2.5-7b" / "config.json")
    assert cfg.sliding_window is None
    assert (cfg.num_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (28, 28, 4, 128)


def test_hf_layer_types_alternating() -> None:
    cfg = hf.load_hf_config(HF_DATA / "gpt-oss-120b" / "config.json")
    lib = resolve_model("gpt-oss-120b")
    assert (cfg.sliding_window, cfg.sliding_window_pattern) == (lib.sliding_window, lib.sliding_window_pattern)


def _write(tmp_path: Path, data: object, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


BASE = {"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 512}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"sliding_window": None}, (None, None)),
        ({"sliding_window": 4096}, (4096, None)),  # Mistral-7B-v0.1: every layer windowed
        ({"sliding_window": 4096, "model_type": "gemma2"}, (4096, 2)),
        ({"sliding_window": 512, "sliding_window_pattern": 2}, (512, 2)),
        ({"sliding_window": 512, "layer_types": ["full_attention"] * 4}, (None, None)),
        ({"sliding_window": 512, "use_sliding_window": True, "max_window_layers": 0}, (512, None)),
    ],
)
def test_hf_sliding_window_variants(tmp_path: Path, extra: dict, expected: tuple) -> None:
    cfg = hf.load_hf_config(_write(tmp_path, BASE | extra))
    assert (cfg.sliding_window, cfg.sliding_window_pattern) == expected


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({k: v for k, v in BASE.items() if k != "num_hidden_layers"}, "missing field 'num_hidden_layers'"),
        ({k: v for k, v in BASE.items() if k != "hidden_size"}, "missing field 'hidden_size'"),
        (BASE | {"num_attention_heads": "8"}, "field 'num_attention_heads' must be an integer"),
        (BASE | {"num_attention_heads": True}, "field 'num_attention_heads' must be an integer"),
        (BASE | {"num_attention_heads": 0}, "field 'num_attention_heads' must be an integer >= 1"),
        (BASE | {"hidden_size": 500}, "field 'hidden_size' (500) is not a multiple"),
        (BASE | {"torch_dtype": "int8"}, "field 'torch_dtype' is 'int8'"),
        (BASE | {"kv_lora_rank": 512, "qk_rope_head_dim": 64}, "missing field 'qk_nope_head_dim'"),
        (BASE | {"num_key_value_heads": 3}, "not a multiple of num_key_value_heads 3"),
        (BASE | {"sliding_window": 8, "layer_types": ["sliding_attention"]}, "field 'layer_types' must list"),
        (BASE | {"sliding_window": 8, "layer_types": ["full_attention"] + ["sliding_attention"] * 3},
         "field 'layer_types' mixes windowed and global layers"),
        ({"text_config": {"num_attention_heads": 8}}, "missing field 'text_config.num_hidden_layers'"),
        ({"text_config": [1, 2]}, "field 'text_config' must be an object"),
        ([BASE], "expected a JSON object"),
    ],
)
def test_hf_errors_name_file_and_field(tmp_path: Path, data: object, field: str) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        hf.load_hf_config(path)
    assert str(path) in str(info.value)
    assert field in str(info.value)


def test_hf_malformed_json_names_file_and_line() -> None:
    path = HF_DATA / "malformed.json"
    with pytest.raises(ConfigError, match=r"malformed\.json: malformed JSON at line 4"):
        resolve_model(str(path))


def test_missing_json_path_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_model(str(tmp_path / "nope.json"))


def test_resolve_model_accepts_a_checkpoint_folder() -> None:
    assert resolve_model(str(HF_DATA / "deepseek-v3")).is_mla


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    layers=st.integers(1, 200),
    kv=st.integers(1, 16),
    group=st.integers(1, 16),
    head_dim=st.sampled_from([64, 80, 96, 128, 256]),
    with_head_dim=st.booleans(),
)
def test_hf_roundtrip_property(tmp_path: Path, layers: int, kv: int, group: int, head_dim: int,
                               with_head_dim: bool) -> None:
    heads = kv * group
    data: dict[str, object] = {"num_hidden_layers": layers, "num_attention_heads": heads,
                               "num_key_value_heads": kv, "torch_dtype": "bfloat16"}
    if with_head_dim:
        data |= {"head_dim": head_dim, "hidden_size": 7}  # explicit head_dim wins over hidden_size
    else:
        data["hidden_size"] = heads * head_dim
    cfg = hf.load_hf_config(_write(tmp_path, data))
    assert (cfg.num_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (
        layers, heads, kv, head_dim)
    assert cfg.group_size == group
    assert cfg.attention == ("mha" if group == 1 else "gqa")


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(pattern=st.integers(2, 8), repeats=st.integers(1, 10), tail=st.integers(0, 7))
def test_hf_layer_types_pattern_property(tmp_path: Path, pattern: int, repeats: int, tail: int) -> None:
    layers = pattern * repeats + min(tail, pattern - 1)
    types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)]
    cfg = hf.load_hf_config(_write(tmp_path, BASE | {"num_hidden_layers": layers, "layer_types": types,
                                                     "sliding_window": 256}))
    assert (cfg.sliding_window, cfg.sliding_window_pattern) == (256, pattern)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(layers=st.integers(1, 40), pattern=st.integers(1, 50))
def test_hf_sliding_window_pattern_agrees_with_the_per_layer_spelling(tmp_path: Path, layers: int,
                                                                      pattern: int) -> None:
    """sliding_window_pattern is read in closed form (no per-layer list, any layer count); it must
    mean exactly what the same layout spelled out layer by layer (layer_types) means."""
    window = {"sliding_window": 512}
    closed = hf.load_hf_config(_write(tmp_path, BASE | window | {"num_hidden_layers": layers,
                                                                  "sliding_window_pattern": pattern}))
    types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)]
    (tmp_path / "explicit").mkdir(exist_ok=True)
    explicit = hf.load_hf_config(_write(tmp_path / "explicit", BASE | window | {"num_hidden_layers": layers,
                                                                                 "layer_types": types}))
    assert (closed.sliding_window, closed.sliding_window_pattern) == (
        explicit.sliding_window, explicit.sliding_window_pattern)


def test_hf_huge_layer_count_with_a_pattern_is_refused_without_a_per_layer_list(tmp_path: Path) -> None:
    import tracemalloc

    tracemalloc.start()
    with pytest.raises(ConfigError, match="over the supported 100,000"):
        hf.load_hf_config(_write(tmp_path, BASE | {"num_hidden_layers": 10**12, "sliding_window": 4096,
                                                   "sliding_window_pattern": 6}))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 10_000_000


# --- the local HF cache ------------------------------------------------------------------------


def _snapshot(hub: Path, repo_id: str, revision: str, config: dict, mtime: float) -> Path:
    """Mimic huggingface_hub's layout: the snapshot file is a symlink into blobs/."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    blob = repo / "blobs" / f"blob-{revision}"
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_text(json.dumps(config))
    snap = repo / "snapshots" / revision
    snap.mkdir(parents=True)
    (snap / "config.json").symlink_to(blob)
    os.utime(snap, (mtime, mtime))
    return snap / "config.json"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    hub = tmp_path / "hub"
    hub.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    return hub


def test_cache_prefers_refs_main_over_newest(hub: Path) -> None:
    main = _snapshot(hub, "org/tiny", "aaaa", BASE, mtime=1_000)
    _snapshot(hub, "org/tiny", "bbbb", BASE | {"num_hidden_layers": 9}, mtime=2_000)
    (hub / "models--org--tiny" / "refs").mkdir()
    (hub / "models--org--tiny" / "refs" / "main").write_text("aaaa\n")
    assert hf.find_in_hf_cache("org/tiny") == main
    cfg = resolve_model("org/tiny")
    assert (cfg.name, cfg.hf_id, cfg.num_layers) == ("org/tiny", "org/tiny", 4)


def test_cache_without_refs_takes_newest_snapshot(hub: Path) -> None:
    _snapshot(hub, "org/tiny", "aaaa", BASE, mtime=2_000)
    newest = _snapshot(hub, "org/tiny", "bbbb", BASE | {"num_hidden_layers": 9}, mtime=3_000)
    assert hf.find_in_hf_cache("org/tiny") == newest
    assert resolve_model("org/tiny").num_layers == 9


def test_cache_stale_ref_falls_back_to_newest(hub: Path) -> None:
    only = _snapshot(hub, "org/tiny", "bbbb", BASE, mtime=3_000)
    (hub / "models--org--tiny" / "refs").mkdir()
    (hub / "models--org--tiny" / "refs" / "main").write_text("gone")
    assert hf.find_in_hf_cache("org/tiny") == only


def test_cache_path_gives_the_repo_id_as_name(hub: Path) -> None:
    path = _snapshot(hub, "Org/Some-Model", "cccc", BASE, mtime=1_000)
    assert hf.load_hf_config(path).name == "Org/Some-Model"


def test_repo_not_in_cache(hub: Path) -> None:
    assert hf.find_in_hf_cache("org/absent") is None
    with pytest.raises(ConfigError) as info:
        resolve_model("org/absent")
    assert str(hub) in str(info.value) and "local Hugging Face cache" in str(info.value)


def test_hf_cache_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert hf.hf_cache_dir() == tmp_path / "home" / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
    assert hf.hf_cache_dir() == tmp_path / "hfhome" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hubcache"))
    assert hf.hf_cache_dir() == tmp_path / "hubcache"


# --- purity ------------------------------------------------------------------------------------


def test_specs_do_not_import_cli_or_gpu_libraries() -> None:
    code = ("import sys, decodecalc.specs.models, decodecalc.specs.hf, decodecalc.specs.gpus; "
            "decodecalc.specs.models.resolve_model('llama3-8b'); "
            "print(sorted(m for m in ('typer', 'rich', 'torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_model_config_is_frozen() -> None:
    cfg = resolve_model("llama3-8b")
    with pytest.raises(AttributeError):
        cfg.num_layers = 1  # type: ignore[misc]
    assert cfg.num_layers == 32  # unchanged (model_configs/llama3-8b.yaml, from the HF config.json)
    assert resolve_model("llama3-8b").num_layers == 32
