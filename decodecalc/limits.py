"""Every input limit decodecalc states, in one place.

Each limit keeps one command within a few seconds and a few hundred MB on a laptop core
(measured figures: docs/limits.md) while staying far above any real deployment: the largest
served batch is a few thousand sequences, the longest context a few million tokens.
Errors quote the limit: "--batch 100000000 is over the supported 65,536".
"""

from __future__ import annotations

from decodecalc.errors import ConfigError

# --- files (model YAML, HF config.json, time-model profiles) ---------------------------------
#: bytes read from one model or profile file; a real config.json is under 20 kB
MAX_FILE_BYTES = 1 << 20
#: nesting of mappings and lists in one file (HF configs nest 3 deep)
MAX_FILE_DEPTH = 32
#: values in one file, counting every use of a YAML alias (no "billion laughs")
MAX_FILE_VALUES = 100_000
#: integers and floats in files: exact in a float64
MAX_FILE_NUMBER = 2**53

# --- model shape fields (any source) ---------------------------------------------------------
MAX_LAYERS = 100_000
MAX_HEADS = 65_536
MAX_HEAD_DIM = 65_536

# --- one decode step ---------------------------------------------------------------------------
#: sequences in one step (--batch, --seq-lens entries, determinism/cudagraphs --batches)
MAX_BATCH = 65_536
#: KV length of one sequence (Llama-4 Scout serves 10M)
MAX_SEQ_LEN = 16 * 1024 * 1024
#: query tokens in one step (sum of --query-lens; spec-decode and chunked prefill)
MAX_TOKENS = 1 << 20
#: tensor-parallel degree
MAX_TP = 4096
#: SMs / CUs of a GPU (--sms)
MAX_SMS = 4096
#: HBM bandwidth override, GB/s
MAX_BANDWIDTH_GB_S = 1_000_000.0
#: KV block size, kernel block size, vLLM scheduler sizes, SGLang splits and capture sizes
MAX_BLOCK_SIZE = 1 << 20
MAX_KV_SPLITS = 65_536
MAX_SPECULATIVE_TOKENS = 1024
#: comma lists of sizes (--batches, --candidates)
MAX_LIST_ITEMS = 256
#: FlashInfer CTAs per SM
MAX_OCCUPANCY = 64


def check_int(value: int | None, option: str, maximum: int, *, minimum: int = 1) -> None:
    """ConfigError quoting the limit when ``value`` is outside ``minimum..maximum``; None passes."""
    if value is None:
        return
    if value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum:,}"
        raise ConfigError(f"{option} must be {what}, got {value}")
    if value > maximum:
        raise ConfigError(f"{option} {value} is over the supported {maximum:,}")
