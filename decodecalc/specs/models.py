"""Model attention shapes: the YAML library in model_configs/, HF config.json files, the HF cache.

YAML schema (one file per model, file stem == ``name``)::

    name: llama3-8b
    hf_id: meta-llama/Meta-Llama-3-8B
    source: https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json
    num_layers: 32
    num_attention_heads: 32
    num_key_value_heads: 8
    head_dim: 128
    dtype: bfloat16
    # optional
    v_head_dim: 128            # defaults to head_dim
    sliding_window: 4096       # window of the layers that use one
    sliding_window_pattern: 2  # every n-th layer is global (Gemma-2: 2, Gemma-3: 6); 1/absent: all windowed
    attention: mla             # mha/gqa are inferred; mla needs kv_lora_rank and qk_rope_head_dim
    kv_lora_rank: 512
    qk_rope_head_dim: 64
    qk_nope_head_dim: 128
    context_length: 131072     # SGLang's context_len (sizes its MLA max_kv_splits); see ModelConfig
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from decodecalc.errors import ConfigError, UnknownNameError
from decodecalc.specs import hf
from decodecalc.specs.model_config import DTYPES, ModelConfig, model_from_mapping
from decodecalc.yamlio import load_yaml_file

__all__ = ["DTYPES", "ModelConfig", "load_model_file", "model_from_mapping", "model_library", "resolve_model"]

def _config_dirs() -> tuple[Path, ...]:
    here = Path(__file__).resolve().parent.parent
    dirs = []
    extra = os.environ.get("DECODECALC_MODEL_DIR")
    if extra:
        dirs.append(Path(extra))
    dirs += [here / "model_configs", here.parent / "model_configs"]
    unique: dict[Path, Path] = {}
    for d in dirs:  # decodecalc/model_configs is a link to ./model_configs in a source checkout
        if d.is_dir():
            unique.setdefault(d.resolve(), d)
    return tuple(unique.values())


def load_model_file(path: Path) -> ModelConfig:
    return model_from_mapping(load_yaml_file(path), str(path))


@functools.cache
def _library_file(path: Path) -> ModelConfig:
    """One library YAML, loaded once per process and checked like the whole library is."""
    cfg = load_model_file(path)
    if cfg.name != path.stem:
        raise ConfigError(f"{path}: field 'name' is {cfg.name!r} but must equal the file stem {path.stem!r}")
    return cfg


@functools.cache
def model_library() -> dict[str, ModelConfig]:
    """Every model YAML found, by name (first directory wins)."""
    models: dict[str, ModelConfig] = {}
    for d in _config_dirs():
        for path in sorted(d.glob("*.yaml")):
            cfg = _library_file(path)
            models.setdefault(cfg.name, cfg)
    return models


def resolve_model(spec: str) -> ModelConfig:
    """``spec`` is a library id, a path to a YAML or HF config.json, or an HF repo id in the local cache."""
    # fast path: a library id is its file stem, so read one file rather than the whole library
    if "/" not in spec and not spec.endswith((".yaml", ".yml", ".json")):
        for d in _config_dirs():
            candidate = d / f"{spec.lower()}.yaml"
            if candidate.is_file():
                return _library_file(candidate)
    library = model_library()
    path = Path(spec).expanduser()
    if path.suffix in (".yaml", ".yml") and path.exists():
        return load_model_file(path)
    if path.is_dir() and (path / "config.json").is_file():
        return hf.load_hf_config(path / "config.json")
    if path.suffix == ".json":
        if not path.exists():
            raise ConfigError(f"config file {path} does not exist")
        return hf.load_hf_config(path)
    if "/" in spec:
        cached = hf.find_in_hf_cache(spec)
        if cached is not None:
            return hf.load_hf_config(cached, name=spec)
        # the library's own Hugging Face ids (a model's hf_id: meta-llama/Llama-3.1-70B), case as HF ignores it
        by_hf = {m.hf_id.lower(): m for m in library.values() if m.hf_id}
        if spec.lower() in by_hf:
            return by_hf[spec.lower()]
        raise ConfigError(
            f"model {spec!r} is neither a library id, an existing file, nor a repo id in the local "
            f"Hugging Face cache ({hf.hf_cache_dir()}); known ids: {', '.join(sorted(library))}"
        )
    raise UnknownNameError("model", spec, library)
