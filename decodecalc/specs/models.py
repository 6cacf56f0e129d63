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
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decodecalc.errors import ConfigError, UnknownNameError
from decodecalc.yamlio import load_yaml_file

DTYPES = ("float32", "bfloat16", "float16", "fp8")
_OPTIONAL_INTS = (
    "v_head_dim", "sliding_window", "sliding_window_pattern", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    name: str
    num_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    v_head_dim: int | None = None
    sliding_window: int | None = None
    sliding_window_pattern: int | None = None
    dtype: str = "bfloat16"
    attention: str = "gqa"  # "mha" | "gqa" | "mla" (mha/gqa normalised from the head counts)
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    hf_id: str | None = None
    source: str = ""

    def __post_init__(self) -> None:
        where = f"model {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"{where}: field 'name' must be a non-empty string")
        for field_name in ("num_layers", "num_attention_heads", "num_key_value_heads", "head_dim"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{where}: field {field_name!r} must be a positive integer, got {value!r}")
        # optional shape fields reach the same arithmetic, so they get the same check when set
        for field_name in _OPTIONAL_INTS:
            value = getattr(self, field_name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ConfigError(f"{where}: field {field_name!r} must be a positive integer, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"{where}: num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )
        if self.dtype not in DTYPES:
            raise ConfigError(f"{where}: field 'dtype' is {self.dtype!r}; valid: {', '.join(DTYPES)}")
        if self.attention not in ("mha", "gqa", "mla"):
            raise ConfigError(f"{where}: field 'attention' is {self.attention!r}; valid: mha, gqa, mla")
        if self.attention == "mla" and (self.kv_lora_rank is None or self.qk_rope_head_dim is None):
            raise ConfigError(f"{where}: MLA needs 'kv_lora_rank' and 'qk_rope_head_dim'")

    @property
    def is_mla(self) -> bool:
        return self.attention == "mla"

    @property
    def group_size(self) -> int:
        """Query heads per KV head. MLA decode shares one latent head among all query heads."""
        if self.is_mla:
            return self.num_attention_heads
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def head_dim_v(self) -> int:
        """Value head dim as the decode kernel sees it (MLA: the latent rank)."""
        if self.is_mla:
            assert self.kv_lora_rank is not None
            return self.kv_lora_rank
        return self.v_head_dim or self.head_dim

    @property
    def head_dim_k(self) -> int:
        """Key head dim as the decode kernel sees it (MLA: latent + rope, e.g. 512 + 64 = 576)."""
        if self.is_mla:
            assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
            return self.kv_lora_rank + self.qk_rope_head_dim
        return self.head_dim


_FIELDS = {f for f in ModelConfig.__dataclass_fields__}


def model_from_mapping(data: Any, origin: str) -> ModelConfig:
    """Build a ModelConfig from a YAML mapping; ``origin`` names the file for error messages."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping of fields, got {type(data).__name__}")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise ConfigError(f"{origin}: unknown field(s) {', '.join(unknown)}; valid: {', '.join(sorted(_FIELDS))}")
    for required in ("name", "num_layers", "num_attention_heads", "num_key_value_heads", "head_dim"):
        if required not in data:
            raise ConfigError(f"{origin}: missing field {required!r}")
    kwargs = dict(data)
    if kwargs.get("attention") in (None, "mha", "gqa"):
        kwargs["attention"] = "mha" if kwargs["num_attention_heads"] == kwargs["num_key_value_heads"] else "gqa"
    try:
        return ModelConfig(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    except TypeError as exc:  # wrong types reaching arithmetic in __post_init__
        raise ConfigError(f"{origin}: {exc}") from None


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
    from decodecalc.specs import hf  # local import: only needed for paths / repo ids

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
        raise ConfigError(
            f"model {spec!r} is neither a library id, an existing file, nor a repo id in the local "
            f"Hugging Face cache ({hf.hf_cache_dir()}); known ids: {', '.join(sorted(library))}"
        )
    raise UnknownNameError("model", spec, library)


def _json_load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: malformed JSON at line {exc.lineno}: {exc.msg}") from None
