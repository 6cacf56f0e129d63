"""Every input limit decodecalc states, in one place.

Each limit keeps one command within a few seconds and a few hundred MB on a laptop core
(measured figures: docs/limits.md) while staying far above any real deployment: the largest
served batch is a few thousand sequences, the longest context a few million tokens.
Errors quote the limit: "--batch 100000000 is over the supported 65,536".
"""

from __future__ import annotations

from decodecalc.errors import ConfigError

# --- files (model YAML, HF config.json, time-model profiles) ---------------------------------
#: bytes read from one config.json (a real one is under 20 kB; JSON parses at about 3 MB/s)
MAX_FILE_BYTES = 1 << 20
#: bytes read from one YAML file (a model is under 1 kB, a profile 4 kB; YAML parses at about 0.4 MB/s)
MAX_YAML_BYTES = 1 << 18
#: a calibration's saved timings (calibrate --save-measurements; the compiled backends' 2,300 runs take about 2 MB
#: and 400,000 values), read by calibrate --from-measurements
MAX_MEASUREMENTS_BYTES = 16 << 20
MAX_MEASUREMENTS_VALUES = 2_000_000
#: timings one calibrate --from-measurements fit takes (cases, backend runs, workload and map-step rows): the fit costs
#: about 20 ms of CPU a timing (1,200 Triton timings 30 s, 4,800 83 s; the H100 one-command calibration's 4,241 45 s),
#: so 80,000 ran 40 minutes; this limit fits in about 4 minutes, with a progress line, and the largest calibration
#: (--grid --map-steps with the backends) saves about 4,300
MAX_MEASUREMENT_TIMINGS = 10_000
#: nesting of mappings and lists in one file (HF configs nest 3 deep)
MAX_FILE_DEPTH = 32
#: values in one file, counting every use of a YAML alias (no "billion laughs")
MAX_FILE_VALUES = 100_000
#: integers and floats in files: exact in a float64
MAX_FILE_NUMBER = 2**53
#: bytes read from one Prometheus /metrics scrape (tune --metrics; a vLLM server's is 50-500 kB, and
#: prometheus_client parses about 4 MB/s, so the limit parses in about 4 s)
MAX_METRICS_BYTES = 16 << 20

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
#: HBM bandwidth override, GB/s (at the minimum, 1 GB/s, a step's bytes still take a finite time; any GPU has
#: hundreds: --bandwidth 1e-320 made every time inf, and JSON of Infinity)
MIN_BANDWIDTH_GB_S = 1.0
MAX_BANDWIDTH_GB_S = 1_000_000.0
#: KV block size, kernel block size, vLLM scheduler sizes, SGLang splits and capture sizes
MAX_BLOCK_SIZE = 1 << 20
MAX_KV_SPLITS = 65_536
MAX_SPECULATIVE_TOKENS = 1024
#: comma lists of sizes (--batches, --candidates)
MAX_LIST_ITEMS = 256
#: sequences over all of determinism's / cudagraphs' --batches (each size is one step per policy)
MAX_BATCHES_TOTAL = 2 * MAX_BATCH
#: tune --concurrency: sequences decoded together in a generated workload (256: ~6 s CPU, 1,024: ~15 s)
MAX_CONCURRENCY = 256
#: FlashInfer CTAs per SM
MAX_OCCUPANCY = 64


def split_items(text: str, option: str, example: str) -> list[str]:
    """The items of a comma list, stripped. ConfigError for an empty list or an empty item (``-p vllm,,sglang``,
    ``--heuristics ,``, a trailing comma): docs/limits.md calls them errors, and an item dropped in silence hides a
    typo. The one rule of every comma-list option (policies, heuristics, candidates, sweep's models, TPs, GPUs)."""
    items = [t.strip() for t in text.split(",")]
    if not any(items):
        raise ConfigError(f"{option} {text!r} is empty; give a comma list, e.g. {example}")
    if not all(items):
        raise ConfigError(f"{option} {text!r} has an empty item; give a comma list, e.g. {example}")
    return items


def check_int(value: int | None, option: str, maximum: int, *, minimum: int = 1) -> None:
    """ConfigError quoting the limit when ``value`` is outside ``minimum..maximum``; None passes."""
    if value is None:
        return
    if value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum:,}"
        raise ConfigError(f"{option} must be {what}, got {value}")
    if value > maximum:
        raise ConfigError(f"{option} {value} is over the supported {maximum:,}")


#: the shared workload options: parameter name -> (flag, minimum, maximum)
OPTION_LIMITS: dict[str, tuple[str, int, int]] = {
    "tp": ("--tp", 1, MAX_TP),
    "batch": ("--batch", 1, MAX_BATCH),
    "seq_len": ("--seq-len", 1, MAX_SEQ_LEN),
    "sms": ("--sms", 1, MAX_SMS),
    "block_size": ("--block-size", 1, MAX_BLOCK_SIZE),
    "kernel_block_size": ("--kernel-block-size", 1, MAX_BLOCK_SIZE),
    "max_num_seqs": ("--max-num-seqs", 1, MAX_BATCH),
    "max_num_batched_tokens": ("--max-num-batched-tokens", 1, MAX_TOKENS),
    "max_kv_splits": ("--max-kv-splits", 1, MAX_KV_SPLITS),
    "num_speculative_tokens": ("--num-speculative-tokens", 0, MAX_SPECULATIVE_TOKENS),
    "seq_threshold_3d": ("--seq-threshold-3d", 0, MAX_BATCH),
    "context_len": ("--context-len", 1, MAX_SEQ_LEN),
}

#: vLLM's scheduler defaults as the CLI states them (decodecalc.launchers.vllm_unified.VllmSettings)
_VLLM_DEFAULTS = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}


def check_options(**values: object) -> None:
    """Check the shared scalar options against their stated limits, before any work starts.

    ``values`` are the build_inputs keyword arguments; names not in OPTION_LIMITS are ignored,
    except ``bandwidth`` (GB/s, a float) and the kernel block size, which must divide the block size.
    """
    for name, (flag, low, high) in OPTION_LIMITS.items():
        value = values.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{flag} must be an integer, got {value!r}")
        check_int(value, flag, high, minimum=low)
    bandwidth = values.get("bandwidth")
    if bandwidth is not None:
        if isinstance(bandwidth, bool) or not isinstance(bandwidth, int | float):
            raise ConfigError(f"--bandwidth must be a number of GB/s, got {bandwidth!r}")
        if not MIN_BANDWIDTH_GB_S <= bandwidth <= MAX_BANDWIDTH_GB_S:  # also rejects NaN
            raise ConfigError(f"--bandwidth {bandwidth} GB/s is outside the supported {MIN_BANDWIDTH_GB_S:,.0f} to "
                              f"{MAX_BANDWIDTH_GB_S:,.0f}")
    kbs, block = values.get("kernel_block_size"), values.get("block_size")
    if isinstance(kbs, int) and isinstance(block, int) and block % kbs:
        raise ConfigError(f"--kernel-block-size {kbs} must divide --block-size {block} evenly")


def check_step(*, batch: int, tokens: int, max_seqlen_k: int, max_num_seqs: int | None = None,
               max_num_batched_tokens: int | None = None, context_len: int | None = None) -> None:
    """Options that contradict the step itself: a step vLLM's scheduler cannot form (checked when the
    user changed its default), or a context shorter than a sequence."""
    if max_num_seqs is not None and max_num_seqs != _VLLM_DEFAULTS["max_num_seqs"] and batch > max_num_seqs:
        raise ConfigError(f"--max-num-seqs {max_num_seqs}: vLLM schedules at most that many sequences per step, "
                          f"and this step has {batch:,}")
    if (max_num_batched_tokens is not None and max_num_batched_tokens != _VLLM_DEFAULTS["max_num_batched_tokens"]
            and tokens > max_num_batched_tokens):
        raise ConfigError(f"--max-num-batched-tokens {max_num_batched_tokens}: vLLM schedules at most that many "
                          f"tokens per step, and this step has {tokens:,}")
    if context_len is not None and context_len < max_seqlen_k:
        raise ConfigError(f"--context-len {context_len} is shorter than the longest sequence ({max_seqlen_k:,} keys)")


def check_list(values: tuple[int, ...], option: str, maximum: int, *, max_items: int = MAX_LIST_ITEMS,
               max_total: int | None = None) -> None:
    """A comma list of sizes: at most ``max_items`` items, each 1..maximum, summing to at most ``max_total``."""
    if len(values) > max_items:
        raise ConfigError(f"{option} has {len(values):,} values, over the supported {max_items:,}")
    for v in values:
        check_int(v, option, maximum)
    if max_total is not None and sum(values) > max_total:
        raise ConfigError(f"{option} adds up to {sum(values):,} sequences, over the supported {max_total:,}")
