"""Hugging Face ``config.json`` files and the local HF cache, read with ``json`` only.

No transformers, no network: decodecalc must run where neither is available, and the
attention shape needs only a handful of keys. Every error names the file and the field.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.specs.model_config import ModelConfig
from decodecalc.yamlio import load_json_file

# torch dtype names (``torch_dtype`` in older files, ``dtype`` since transformers 4.56) -> ours.
# float32 checkpoints (google/gemma-2-9b ships one) are downcast to a 16-bit type by the
# engines' default ``--dtype auto``; bf16 and fp16 are both 2 bytes, so bfloat16 stands in.
_DTYPE_NAMES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "bfloat16",
    "fp32": "bfloat16",
    "float": "bfloat16",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "fp8": "fp8",
}

# Keys that transformers fills from the config class when a file omits them. Gemma-3's
# multimodal files leave them out of ``text_config`` (gemma-3-4b-it has no head counts),
# so these are Gemma3TextConfig's defaults.
_MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
        "max_position_embeddings": 131072,
    },
}

# sglang 0.5.23 python/sglang/srt/utils/hf_transformers/common.py L668-674 (CONTEXT_LENGTH_KEYS)
_CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length",
                        "max_position_embeddings")


def hf_cache_dir() -> Path:
    """The hub cache, resolved the way huggingface_hub does (without importing it)."""
    if hub := os.environ.get("HF_HUB_CACHE"):
        return Path(hub).expanduser()
    if home := os.environ.get("HF_HOME"):
        return Path(home).expanduser() / "hub"
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg).expanduser() / "huggingface" / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


#: bytes read from a cache entry's refs/main (a commit hash is 40 characters)
MAX_REF_BYTES = 256


def cached_revision(repo_dir: Path) -> str | None:
    """The revision ``refs/main`` names in a hub-cache repo folder, or None: absent, unreadable, longer than
    MAX_REF_BYTES or not a plain revision name (never a path out of the cache). Only that many bytes are read (a
    3 GB refs/main took 3 GB)."""
    ref = repo_dir / "refs" / "main"
    try:
        if not ref.is_file():  # a FIFO or device would block or never end
            return None
        with open(ref, "rb") as f:
            raw = f.read(MAX_REF_BYTES + 1)
    except OSError:
        return None
    revision = raw.decode("utf-8", "replace").strip()
    return revision if len(raw) <= MAX_REF_BYTES and revision.isalnum() else None


def find_in_hf_cache(repo_id: str) -> Path | None:
    """``config.json`` of ``repo_id`` in the local cache: the ``refs/main`` revision, else the newest snapshot."""
    repo_id = repo_id.strip("/")
    if not repo_id or ".." in repo_id.split("/"):
        return None
    repo_dir = hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return None
    revision = cached_revision(repo_dir)
    if revision is not None:
        candidate = snapshots / revision / "config.json"
        if candidate.is_file():  # is_file follows the snapshot -> blob symlink
            return candidate
    found = [p for p in snapshots.glob("*/config.json") if p.is_file()]
    if not found:
        return None
    # newest snapshot directory; the revision name breaks ties so the answer is deterministic
    return max(found, key=lambda p: (p.parent.stat().st_mtime, p.parent.name))


def load_hf_config(path: Path, name: str | None = None) -> ModelConfig:
    """Attention shape of a Hugging Face ``config.json``; ``name`` defaults to the repo id or folder."""
    path = Path(path)
    origin = str(path)
    data = load_json_file(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a JSON object, got {type(data).__name__}")

    cfg: dict[str, Any] = data
    prefix = ""
    text = data.get("text_config")
    if text is not None:
        # Multimodal wrappers (Gemma-3, Llava, Mistral-3...) keep the language model in
        # text_config; the dtype is often only at the top level.
        if not isinstance(text, dict):
            raise ConfigError(f"{origin}: field 'text_config' must be an object, got {type(text).__name__}")
        cfg = {k: data[k] for k in ("torch_dtype", "dtype") if k in data} | text
        prefix = "text_config."
    model_type = cfg.get("model_type") or (
        str(data.get("model_type", "")) + ("_text" if text is not None else "")
    )
    if not isinstance(model_type, str):
        raise ConfigError(f"{origin}: field {prefix + 'model_type'!r} must be a string, got {type(model_type).__name__}")
    cfg = _MODEL_TYPE_DEFAULTS.get(model_type, {}) | cfg

    def opt(key: str, minimum: int = 1) -> int | None:
        value = cfg.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < minimum):
            raise ConfigError(f"{origin}: field {prefix + key!r} must be an integer >= {minimum}, got {value!r}")
        return value

    def req(key: str, minimum: int = 1) -> int:
        value = opt(key, minimum)
        if value is None:
            raise ConfigError(f"{origin}: missing field {prefix + key!r}")
        return value

    num_layers = req("num_hidden_layers")
    heads = req("num_attention_heads")
    kv_heads = opt("num_key_value_heads")
    if kv_heads is None:
        kv_heads = heads  # absent or null: MHA (Llama-2-7B, GPT-NeoX)

    kwargs: dict[str, Any] = {}
    if opt("kv_lora_rank") is not None:
        # DeepSeek MLA: the un-absorbed q/k head is nope + rope wide; ModelConfig derives
        # the latent 512 + 64 the decode kernel sees from kv_lora_rank and qk_rope_head_dim.
        rope, nope = req("qk_rope_head_dim"), req("qk_nope_head_dim")
        head_dim = nope + rope
        kwargs |= {
            "attention": "mla",
            "kv_lora_rank": req("kv_lora_rank"),
            "qk_rope_head_dim": rope,
            "qk_nope_head_dim": nope,
            "v_head_dim": req("v_head_dim"),
        }
    else:
        explicit = opt("head_dim")
        if explicit is not None:  # Qwen3, Gemma: head_dim * heads != hidden_size
            head_dim = explicit
        else:
            hidden = req("hidden_size")
            if hidden % heads:
                raise ConfigError(
                    f"{origin}: field {prefix + 'hidden_size'!r} ({hidden}) is not a multiple of "
                    f"num_attention_heads ({heads}) and there is no head_dim"
                )
            head_dim = hidden // heads
        kwargs["attention"] = "mha" if kv_heads == heads else "gqa"

    window, pattern = _sliding_window(cfg, num_layers, origin, prefix, opt, req)
    repo_id = name if name and "/" in name else _repo_id_from_cache_path(path)
    try:
        return ModelConfig(
            name=name or repo_id or path.parent.name or path.stem,
            hf_id=repo_id,
            source=origin,
            num_layers=num_layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            sliding_window=window,
            sliding_window_pattern=pattern,
            dtype=_dtype(cfg, origin, prefix),
            context_length=_context_length(cfg),
            # gpt-oss's learned sinks (vLLM and SGLang detect them by architecture; config.json has no flag for them)
            attention_sinks=model_type == "gpt_oss" or bool(cfg.get("learnable_sink")),
            **kwargs,
        )
    except ConfigError as exc:
        raise ConfigError(f"{origin}: {exc}") from None


def _context_length(cfg: dict[str, Any]) -> int | None:
    """SGLang's ``get_context_length`` (common.py L677-694): the first context key, times the rope
    scaling factor unless rope_scaling names original_max_position_embeddings or is llama3."""
    rope = cfg.get("rope_scaling")
    factor: Any = 1
    if isinstance(rope, dict) and rope:
        factor = rope.get("factor", 1)
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1
    for key in _CONTEXT_LENGTH_KEYS:
        value = cfg.get(key)
        if value is not None:
            if not isinstance(value, int | float) or isinstance(value, bool) or not isinstance(factor, int | float):
                return None
            length = int(factor * value)
            return length if length > 0 else None
    return None  # SGLang falls back to 2048; decodecalc then sizes from the batch (see sglang_triton)


def _sliding_window(
    cfg: dict[str, Any], num_layers: int, origin: str, prefix: str,
    opt: Callable[..., int | None], req: Callable[..., int],
) -> tuple[int | None, int | None]:
    """(window, every n-th layer global) in ModelConfig's terms; (w, None) means every layer windowed."""
    if cfg.get("use_sliding_window") is False:
        return None, None  # Qwen2/Qwen3 carry a sliding_window value they do not use
    window = opt("sliding_window")
    if window is None:
        return None, None
    layer_types = cfg.get("layer_types")
    if layer_types is not None:  # transformers >= 4.54 spells the layout out per layer
        if not isinstance(layer_types, list) or len(layer_types) != num_layers:
            raise ConfigError(f"{origin}: field {prefix + 'layer_types'!r} must list one type per layer ({num_layers})")
        field = "layer_types"
        sliding = [t == "sliding_attention" for t in layer_types]  # bounded by the file size limit
    elif cfg.get("use_sliding_window") is True and "max_window_layers" in cfg:
        # Qwen2: layers from this index on use the window; closed form, no per-layer list
        first = req("max_window_layers", 0)
        if first >= num_layers:
            return None, None
        if first == 0:
            return window, None
        raise ConfigError(
            f"{origin}: field {prefix + 'max_window_layers'!r} ({first}) makes the first layers global and the "
            f"rest windowed, a layout decodecalc cannot represent (it models 'every n-th layer global')"
        )
    else:
        pattern = opt("sliding_window_pattern")
        if pattern is None and cfg.get("model_type") == "gemma2":
            pattern = 2  # transformers Gemma2: even layers windowed, odd layers global
        if pattern is None:
            return window, None  # Mistral-7B-v0.1, Phi-3: the window applies to every layer
        # layer i is windowed when (i + 1) % pattern != 0: closed form, whatever num_layers is
        if pattern == 1:
            return None, None
        if pattern > num_layers:
            return window, None
        return window, pattern
    if not any(sliding):
        return None, None
    if all(sliding):
        return window, None
    # ModelConfig stores one shape only: layer i is global exactly when (i + 1) % n == 0.
    n = sliding.index(False) + 1
    if any(s != ((i + 1) % n != 0) for i, s in enumerate(sliding)):
        raise ConfigError(
            f"{origin}: field {prefix + field!r} mixes windowed and global layers in a layout decodecalc "
            f"cannot represent (it models 'every n-th layer global')"
        )
    return window, n


def _dtype(cfg: dict[str, Any], origin: str, prefix: str) -> str:
    key = "dtype" if cfg.get("dtype") is not None else "torch_dtype"
    raw = cfg.get(key)
    if raw is None:
        return "bfloat16"  # absent in some hand-written configs; bf16 is what engines serve
    if not isinstance(raw, str) or raw.lower().removeprefix("torch.") not in _DTYPE_NAMES:
        raise ConfigError(f"{origin}: field {prefix + key!r} is {raw!r}; known: {', '.join(sorted(_DTYPE_NAMES))}")
    return _DTYPE_NAMES[raw.lower().removeprefix("torch.")]


def _repo_id_from_cache_path(path: Path) -> str | None:
    """``.../models--org--name/snapshots/<rev>/config.json`` -> ``org/name``."""
    parts = path.parts
    if len(parts) >= 4 and parts[-3] == "snapshots" and parts[-4].startswith("models--"):
        return parts[-4].removeprefix("models--").replace("--", "/")
    return None
