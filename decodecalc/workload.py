"""One decode step of one attention layer on one tensor-parallel rank: what every launcher models.

Heads are sharded the way vLLM's QKVParallelLinear does it
(vllm/model_executor/layers/linear.py, v0.33.0): query heads divide by TP; KV heads divide
by TP, or, when TP exceeds them, are replicated so each rank holds exactly one (TP must then
be a multiple of the KV-head count). MLA keeps one latent "KV head" per rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from decodecalc.errors import ConfigError
from decodecalc.limits import (
    MAX_BATCH,
    MAX_BLOCK_SIZE,
    MAX_SEQ_LEN,
    MAX_SPECULATIVE_TOKENS,
    MAX_TOKENS,
    MAX_TP,
    check_int,
)
from decodecalc.specs.model_config import ModelConfig

#: bytes per element for the dtypes we accept (query/model dtype and KV-cache dtype)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32",
                 "auto": "auto", "fp8_e4m3fn": "fp8_e4m3"}


def normalize_dtype(value: str, *, option: str, allow_auto: bool = False) -> str:
    v = DTYPE_ALIASES.get(value.lower(), value.lower())
    if v == "auto" and allow_auto:
        return v
    if v not in DTYPE_BYTES:
        valid = sorted(set(DTYPE_BYTES) | ({"auto"} if allow_auto else set()))
        raise ConfigError(f"{option} {value!r} is not a known dtype; valid: {', '.join(valid)}")
    return v


def shard_heads(model: ModelConfig, tp: int) -> tuple[int, int]:
    """(query heads, KV heads) per rank, or ConfigError naming what does not divide."""
    check_int(tp, "--tp", MAX_TP)
    h, h_kv = model.num_attention_heads, model.num_key_value_heads
    if h % tp:
        raise ConfigError(f"{model.name} has {h} query heads, not divisible by --tp {tp}; "
                          f"valid TP degrees: {_divisor_list(h)}")
    if model.is_mla:
        return h // tp, 1
    if tp <= h_kv:
        if h_kv % tp:
            raise ConfigError(f"{model.name} has {h_kv} KV heads, not divisible by --tp {tp}")
        return h // tp, h_kv // tp
    if tp % h_kv:
        raise ConfigError(f"{model.name} has {h_kv} KV heads; --tp {tp} exceeds it but is not a multiple "
                          f"of it, so KV heads cannot be replicated one per rank")
    return h // tp, 1


def _divisor_list(n: int, shown: int = 16) -> str:
    divs = _divisors(n)
    return ", ".join(map(str, divs)) if len(divs) <= shown else f"{', '.join(map(str, divs[:shown]))}, ... ({len(divs)})"


def _divisors(n: int) -> list[int]:
    """Every divisor of ``n``, ascending, by trial division up to sqrt(n) (fast for any head count)."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """Per-rank decode step. ``seq_lens`` are KV lengths including this step's tokens."""

    model: ModelConfig
    tp: int
    num_heads: int  # query heads per rank
    num_kv_heads: int  # KV heads per rank
    seq_lens: tuple[int, ...]
    query_lens: tuple[int, ...]
    dtype: str  # query / activation dtype
    kv_cache_dtype: str  # resolved ("auto" -> dtype)
    block_size: int = 16

    @property
    def batch(self) -> int:
        return len(self.seq_lens)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def max_seqlen_q(self) -> int:
        return max(self.query_lens)

    @property
    def max_seqlen_k(self) -> int:
        return max(self.seq_lens)

    @property
    def group_size(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def head_size(self) -> int:
        return self.model.head_dim_k

    @property
    def head_size_v(self) -> int:
        return self.model.head_dim_v

    @property
    def q_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def kv_bytes_per_element(self) -> int:
        return DTYPE_BYTES[self.kv_cache_dtype]

    @property
    def is_uniform_decode(self) -> bool:
        return len(set(self.query_lens)) == 1


def make_workload(
    model: ModelConfig,
    *,
    tp: int = 1,
    batch: int | None = None,
    seq_len: int | None = None,
    seq_lens: tuple[int, ...] | None = None,
    query_lens: tuple[int, ...] | None = None,
    num_speculative_tokens: int = 0,
    dtype: str | None = None,
    kv_cache_dtype: str = "auto",
    block_size: int = 16,
) -> Workload:
    """Validate user-facing inputs (every limit in decodecalc.limits, scalars before any tuple is
    built) and build the per-rank Workload."""
    check_int(tp, "--tp", MAX_TP)
    check_int(batch, "--batch", MAX_BATCH)
    check_int(seq_len, "--seq-len", MAX_SEQ_LEN)
    check_int(num_speculative_tokens, "--num-speculative-tokens", MAX_SPECULATIVE_TOKENS, minimum=0)
    check_int(block_size, "--block-size", MAX_BLOCK_SIZE)
    for option, values in (("--seq-lens", seq_lens), ("--query-lens", query_lens)):
        if values is not None and len(values) > MAX_BATCH:
            raise ConfigError(f"{option} has {len(values):,} values, over the supported {MAX_BATCH:,} sequences")
    h, h_kv = shard_heads(model, tp)  # before any per-sequence work
    if seq_lens is not None:
        if batch is not None and batch != len(seq_lens) and len(seq_lens) != 1:
            raise ConfigError(f"--seq-lens has {len(seq_lens)} values but --batch is {batch}; give one length per sequence")
        if not seq_lens:
            raise ConfigError("--seq-lens is empty; give comma-separated positive integers")
        # the extremes decide (one pass each in C, not a check per sequence)
        check_int(min(seq_lens), "sequence length", MAX_SEQ_LEN)
        check_int(max(seq_lens), "sequence length", MAX_SEQ_LEN)
        if batch is not None and len(seq_lens) == 1:
            seq_lens = seq_lens * batch
    else:
        seq_lens = ((seq_len if seq_len is not None else 2560),) * (batch or 1)
    if query_lens is None:
        query_lens = (1 + num_speculative_tokens,) * len(seq_lens)
    elif len(query_lens) == 1 and len(seq_lens) > 1:
        query_lens = query_lens * len(seq_lens)
    if len(query_lens) != len(seq_lens):
        raise ConfigError(f"--query-lens has {len(query_lens)} values for {len(seq_lens)} sequences")
    for q, s in zip(query_lens, seq_lens):
        if q <= 0:
            raise ConfigError(f"query length must be a positive integer, got {q}")
        if q > s:
            raise ConfigError(f"query length {q} exceeds its sequence length {s} (lengths count the new tokens too)")
    tokens = sum(query_lens)
    if tokens > MAX_TOKENS:
        raise ConfigError(f"the step carries {tokens:,} query tokens, over the supported {MAX_TOKENS:,} "
                          "(sum of --query-lens, or batch x (1 + --num-speculative-tokens))")
    dt = normalize_dtype(dtype or model.dtype, option="--dtype")
    if dt.startswith("fp8"):
        raise ConfigError(f"--dtype {dtype!r}: the activation dtype must be float32, bfloat16 or float16 (fp8 belongs in --kv-cache-dtype)")
    kv = normalize_dtype(kv_cache_dtype, option="--kv-cache-dtype", allow_auto=True)
    if kv == "auto":
        kv = dt
    return Workload(
        model=model, tp=tp, num_heads=h, num_kv_heads=h_kv, seq_lens=tuple(seq_lens),
        query_lens=tuple(query_lens), dtype=dt, kv_cache_dtype=kv, block_size=block_size,
    )
