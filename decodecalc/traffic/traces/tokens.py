"""Token counts of text (ShareGPT): the model's own tokenizer when it is on disk, an estimate otherwise.

The tokenizer is a ``tokenizer.json`` read by the optional ``tokenizers`` library (imported here,
lazily, and nowhere else): the file given as ``tokenizer=`` (or a folder holding one), or the one
in the Hugging Face hub cache for the repo id given as ``model_hint=``
(``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; then
``models--ORG--NAME/snapshots/<refs/main>/tokenizer.json``, or the first snapshot by name that has
one). Nothing is ever downloaded. Counts include the special tokens the tokenizer adds (BOS), as
vLLM's ``tokenizer(prompt).input_ids`` does.

The estimate: ceil(ASCII characters / 4) + one token per non-ASCII character. Four characters a
token is OpenAI's rule of thumb for English ("What are tokens and how to count them",
help.openai.com/en/articles/4936856); a character of a non-Latin script (CJK, Korean, Cyrillic...,
common in ShareGPT) costs about one token or more in BPE vocabularies, not a quarter, so counting
it as one keeps those conversations from being undercounted fourfold.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

from decodecalc.errors import ConfigError

Counter = Callable[[str], int]


def estimate_tokens(text: str) -> int:
    """ceil(ASCII characters / 4) + non-ASCII characters (the module docstring says why)."""
    if text.isascii():
        return math.ceil(len(text) / 4)
    ascii_chars = len(text.encode("ascii", "ignore"))
    return math.ceil(ascii_chars / 4) + len(text) - ascii_chars


ESTIMATE_RULE = "ceil(ASCII characters / 4) + 1 per non-ASCII character"


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def cached_tokenizer_file(repo_id: str) -> Path | None:
    """tokenizer.json of ``repo_id`` (ORG/NAME) in the hub cache, or None."""
    if repo_id.count("/") != 1 or any(part in ("", ".", "..") for part in repo_id.split("/")):
        return None
    from decodecalc.specs.hf import cached_revision

    repo = hub_cache() / ("models--" + repo_id.replace("/", "--"))
    revision = cached_revision(repo)  # at most a few bytes of refs/main, any encoding
    try:
        if revision is not None:
            candidate = repo / "snapshots" / revision / "tokenizer.json"
            if candidate.is_file():
                return candidate
        snapshots = sorted(p for p in (repo / "snapshots").iterdir() if (p / "tokenizer.json").is_file())
    except OSError:
        return None
    return snapshots[0] / "tokenizer.json" if snapshots else None


#: the largest tokenizer.json read (the largest published ones, Gemma 3's and XLM-R's, are 17-34 MB; the
#: tokenizers library reads the whole file into memory)
MAX_TOKENIZER_BYTES = 64 << 20


def _load(file: Path) -> Counter:
    try:
        size = file.stat().st_size
    except OSError as e:
        raise ConfigError(f"{file}: cannot read it ({e.strerror or e})") from None
    if size > MAX_TOKENIZER_BYTES:
        raise ConfigError(f"{file}: {size:,} bytes, over the supported {MAX_TOKENIZER_BYTES:,} for a tokenizer.json")
    try:
        from tokenizers import Tokenizer  # optional dependency, only for exact ShareGPT counts
    except ImportError:
        raise ConfigError(f"{file}: counting tokens with a tokenizer needs the 'tokenizers' package "
                          "(pip install tokenizers); leave the tokenizer out to estimate") from None
    try:
        tok = Tokenizer.from_file(str(file))
    except Exception as e:  # the library raises its own exception types for a malformed file
        raise ConfigError(f"{file}: not a readable tokenizer.json ({str(e).splitlines()[0][:100]})") from None
    return lambda text: len(tok.encode(text).ids)


def make_counter(tokenizer: str | None, model_hint: str | None) -> tuple[Counter, bool, str]:
    """(count, estimated, note) for ``tokenizer`` (a tokenizer.json or its folder) or ``model_hint``
    (an HF repo id looked up in the cache); the estimate when neither gives a tokenizer."""
    if tokenizer is not None:
        file = Path(tokenizer)
        if file.is_dir():
            file = file / "tokenizer.json"
        if not file.is_file():
            raise ConfigError(f"{tokenizer}: no such tokenizer file (expected a tokenizer.json or a folder with one)")
        return _load(file), False, f"tokens counted with {file}"
    why = "no tokenizer given"
    if model_hint is not None:
        file_or_none = cached_tokenizer_file(model_hint)
        if file_or_none is None:
            why = f"no tokenizer.json for {model_hint} in the Hugging Face cache ({hub_cache()})"
        else:
            try:
                return _load(file_or_none), False, f"tokens counted with {model_hint}'s tokenizer ({file_or_none})"
            except ConfigError as e:
                why = f"{model_hint}'s cached tokenizer is unusable: {str(e).split(': ', 1)[-1].split(';')[0]}"
    return estimate_tokens, True, f"token counts estimated from text ({why}): {ESTIMATE_RULE}"
