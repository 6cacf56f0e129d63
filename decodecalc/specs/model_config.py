"""A model's attention shape (:class:`ModelConfig`) and its validation, from any source.

The bottom of decodecalc.specs: it imports nothing from the package but errors and limits, so
:mod:`decodecalc.specs.hf` (config.json) and :mod:`decodecalc.specs.models` (the library and
name resolution) both build on it without importing each other in a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.limits import MAX_HEAD_DIM, MAX_HEADS, MAX_LAYERS

DTYPES = ("float32", "bfloat16", "float16", "fp8")
_OPTIONAL_INTS = (
    "v_head_dim", "sliding_window", "sliding_window_pattern", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
    "context_length",
)

#: largest value each shape field may take (decodecalc.limits); the windows and context fit an int32
_FIELD_LIMITS = {
    "num_layers": MAX_LAYERS, "num_attention_heads": MAX_HEADS, "num_key_value_heads": MAX_HEADS,
    "head_dim": MAX_HEAD_DIM, "v_head_dim": MAX_HEAD_DIM, "kv_lora_rank": MAX_HEAD_DIM,
    "qk_rope_head_dim": MAX_HEAD_DIM, "qk_nope_head_dim": MAX_HEAD_DIM, "sliding_window": 2**31 - 1,
    "sliding_window_pattern": MAX_LAYERS, "context_length": 2**31 - 1,
}


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
    # The model's context length as SGLang derives it from config.json (get_context_length,
    # sglang 0.5.23 python/sglang/srt/utils/hf_transformers/common.py L668-694): the first of
    # max_sequence_length, seq_length, max_seq_len, model_max_length, max_position_embeddings,
    # times rope_scaling.factor unless rope_scaling has original_max_position_embeddings or is llama3.
    context_length: int | None = None
    #: the attention layers add learned sinks to the softmax (gpt-oss): FA2 and the FlashInfer wrapper cannot run them,
    #: so the engines' defaults skip those (vLLM fa_utils.py L319-322, SGLang model_override_base.py L330-334)
    attention_sinks: bool = False

    def __post_init__(self) -> None:
        where = f"model {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"{where}: field 'name' must be a non-empty string")
        if len(self.name) > 200:
            raise ConfigError(f"model {self.name[:40]!r}...: field 'name' is over the supported 200 characters")
        for field_name in ("num_layers", "num_attention_heads", "num_key_value_heads", "head_dim"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{where}: field {field_name!r} must be a positive integer, got {value!r}")
        # optional shape fields reach the same arithmetic, so they get the same check when set
        for field_name in _OPTIONAL_INTS:
            value = getattr(self, field_name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ConfigError(f"{where}: field {field_name!r} must be a positive integer, got {value!r}")
        for field_name, limit in _FIELD_LIMITS.items():
            value = getattr(self, field_name)
            if value is not None and value > limit:
                raise ConfigError(f"{where}: field {field_name!r} is {value}, over the supported {limit:,}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"{where}: num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )
        if self.dtype not in DTYPES:
            raise ConfigError(f"{where}: field 'dtype' is {self.dtype!r}; valid: {', '.join(DTYPES)}")
        if not isinstance(self.attention_sinks, bool):
            raise ConfigError(f"{where}: field 'attention_sinks' must be true or false, got {self.attention_sinks!r}")
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
    unknown = sorted(str(k) for k in data if k not in _FIELDS)
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
