"""The workload inputs every analysis command and the Python API share, built from plain values.

Pure (no typer, no rich): ``decodecalc.api`` and the CLI (``decodecalc/commands``) both turn their
parameters into an :class:`Inputs` here, so the Python API and ``--json`` see the same workload.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from decodecalc.errors import ChoiceError, ConfigError
from decodecalc.limits import MAX_SEQ_LEN

if TYPE_CHECKING:  # the core is imported when inputs are built, not when the CLI starts
    from decodecalc.launchers.sglang_triton import SglangSettings
    from decodecalc.launchers.vllm_unified import VllmSettings
    from decodecalc.specs.gpus import GPUSpec
    from decodecalc.workload import Workload

#: the values ``--layer`` takes
LAYERS = ("global", "sliding")


def parse_int_list(text: str | Sequence[int] | None, option: str) -> tuple[int, ...] | None:
    """``"512,2048"`` (or, from Python, a sequence of ints) -> ``(512, 2048)``; None stays None."""
    if text is None:
        return None
    if not isinstance(text, str):
        vals = tuple(text)
        if not vals:
            raise ConfigError(f"{option} is empty; give positive integers, e.g. [512, 2048]")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            raise ConfigError(f"{option}: give integers, got {list(vals)!r}")
        return vals
    items = [t.strip() for t in text.split(",")]
    if not any(items):
        raise ConfigError(f"{option} is empty; give comma-separated positive integers, e.g. 512,2048")
    if not all(items):
        raise ConfigError(f"{option} {text!r} has an empty item; give comma-separated positive integers")
    values = []
    for t in items:
        try:
            values.append(int(t))
        except ValueError:
            raise ConfigError(f"{option}: {t!r} is not an integer; give comma-separated positive integers") from None
    return tuple(values)


@dataclass(frozen=True)
class Inputs:
    work: Workload
    gpu: GPUSpec
    vllm: VllmSettings
    sglang: SglangSettings
    kernel_block_size: int | None
    layer: str
    #: XQA / trtllm-gen cubins available (--cubins yes|no): vLLM's FlashInfer backend decodes with them when they are
    cubins: bool = True
    #: the engines' max_model_len (--max-model-len; None: the model's context length): sizes XQA's block table
    max_model_len: int | None = None

    def policy_options(self, **extra: Any) -> Any:
        """The launchers' PolicyOptions for these inputs (``extra``: occupancy, regime)."""
        from decodecalc.launchers.registry import PolicyOptions

        return PolicyOptions(vllm=self.vllm, sglang=self.sglang, layer=self.layer, cubins=self.cubins,
                             max_model_len=self.max_model_len, **extra)


def build_inputs(
    *,
    model: str,
    tp: int = 1,
    batch: int | None = None,
    seq_len: int | None = None,
    seq_lens: str | Sequence[int] | None = None,
    query_lens: str | Sequence[int] | None = None,
    gpu: str = "h200",
    sms: int | None = None,
    bandwidth: float | None = None,
    dtype: str | None = None,
    kv_cache_dtype: str = "auto",
    block_size: int = 16,
    kernel_block_size: int | None = None,
    batch_invariant: bool = False,
    cuda_graph: bool = True,
    cudagraph_mode: str | None = None,
    max_num_seqs: int = 1024,
    max_num_batched_tokens: int = 8192,
    max_kv_splits: int | None = None,
    num_speculative_tokens: int = 0,
    vllm_version: str = "0.34.0",
    model_runner: str = "v2",
    seq_threshold_3d: int | None = None,
    static_kv_splits: bool = False,
    context_len: int | None = None,
    layer: str = "global",
    cubins: str | bool = "yes",
    max_model_len: int | None = None,
) -> Inputs:
    from decodecalc.launchers.sglang_triton import SglangSettings
    from decodecalc.launchers.vllm_unified import VllmSettings
    from decodecalc.specs.gpus import resolve_gpu
    from decodecalc.specs.models import resolve_model
    from decodecalc.workload import make_workload

    from decodecalc.limits import check_options, check_step

    check_options(tp=tp, batch=batch, seq_len=seq_len, sms=sms, bandwidth=bandwidth, block_size=block_size,
                  kernel_block_size=kernel_block_size, max_num_seqs=max_num_seqs,
                  max_num_batched_tokens=max_num_batched_tokens, max_kv_splits=max_kv_splits,
                  num_speculative_tokens=num_speculative_tokens, seq_threshold_3d=seq_threshold_3d,
                  context_len=context_len)
    layer = str(getattr(layer, "value", layer))  # the CLI passes an enum member
    if layer not in LAYERS:
        raise ChoiceError(f"--layer {layer!r}; valid: {', '.join(LAYERS)}")
    cfg = resolve_model(model)
    if layer == "sliding" and not cfg.sliding_window:
        raise ConfigError(f"--layer sliding: {cfg.name} has no sliding-window layers")
    gpu_spec = resolve_gpu(gpu, sms=sms, bandwidth_bytes_per_s=bandwidth * 1e9 if bandwidth is not None else None)
    if seq_len is not None and seq_lens is not None:
        raise ConfigError("give either --seq-len or --seq-lens, not both")
    work = make_workload(
        cfg, tp=tp, batch=batch, seq_len=seq_len, seq_lens=parse_int_list(seq_lens, "--seq-lens"),
        query_lens=parse_int_list(query_lens, "--query-lens"), num_speculative_tokens=num_speculative_tokens,
        dtype=dtype, kv_cache_dtype=kv_cache_dtype, block_size=block_size,
    )
    check_step(batch=work.batch, tokens=work.num_tokens, max_seqlen_k=work.max_seqlen_k, max_num_seqs=max_num_seqs,
               max_num_batched_tokens=max_num_batched_tokens, context_len=context_len)
    mode = (cudagraph_mode or "FULL_AND_PIECEWISE").upper() if cuda_graph else "NONE"
    if cudagraph_mode is not None and not cuda_graph:
        raise ConfigError("--cudagraph-mode conflicts with --no-cuda-graph")
    vllm = VllmSettings(
        version=vllm_version, cudagraph_mode=mode, model_runner=model_runner.lower(), max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, num_speculative_tokens=num_speculative_tokens,
        batch_invariant=batch_invariant, seq_threshold_3d=seq_threshold_3d,
    )
    sglang = SglangSettings(max_kv_splits=max_kv_splits, deterministic=batch_invariant,
                            static_kv_splits=static_kv_splits, context_len=context_len)
    cubins = str(getattr(cubins, "value", cubins)).lower() if not isinstance(cubins, bool) else cubins
    if cubins not in (True, False, "yes", "no"):
        raise ChoiceError(f"--cubins {cubins!r}; valid: yes, no")
    if max_model_len is not None and (max_model_len < work.max_seqlen_k or max_model_len > MAX_SEQ_LEN):
        raise ConfigError(f"--max-model-len {max_model_len:,}: must hold the step's longest sequence "
                          f"({work.max_seqlen_k:,}) and be at most {MAX_SEQ_LEN:,}")
    return Inputs(work, gpu_spec, vllm, sglang, kernel_block_size, layer, cubins in (True, "yes"), max_model_len)


def context_warning(inputs: Inputs) -> str | None:
    """A warning when the step's longest KV length passes the model's context (an engine serving the model would
    refuse such a request: its max_model_len defaults to the context); None otherwise or when it is not known."""
    context = inputs.work.model.context_length
    longest = inputs.work.max_seqlen_k
    if context is None or longest <= context:
        return None
    return (f"KV length {longest:,} is past {inputs.work.model.name}'s context of {context:,} tokens; an engine "
            "serving it refuses such a request (max_model_len), so these figures describe no real launch")

