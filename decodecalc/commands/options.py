"""The options every analysis command shares, and the one function that turns them into core inputs.

A command declares ``**`` the shared options by taking ``opts: WorkloadOptions = ...`` is not
possible with typer, so commands list the Annotated aliases below and pass them to
:func:`build_inputs`. Parsing only: every check and formula lives in the core.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from decodecalc.errors import ConfigError
from decodecalc.launchers.sglang_triton import SglangSettings
from decodecalc.launchers.vllm_unified import VllmSettings
from decodecalc.specs.gpus import GPUSpec, resolve_gpu
from decodecalc.specs.models import resolve_model
from decodecalc.workload import Workload, make_workload

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Model id (see `decodecalc models`), a model YAML, "
                                       "a Hugging Face config.json, or a repo id in the local HF cache.")]
TpOpt = Annotated[int, typer.Option("--tp", help="Tensor-parallel degree (heads are sharded as vLLM does).")]
BatchOpt = Annotated[Optional[int], typer.Option("--batch", "-b", help="Decode sequences in the step.")]
SeqLenOpt = Annotated[Optional[int], typer.Option("--seq-len", "-s", help="KV length of every sequence "
                                                  "(including this step's token). Default 2560.")]
SeqLensOpt = Annotated[Optional[str], typer.Option("--seq-lens", help="Ragged batch: comma-separated KV lengths.")]
QueryLensOpt = Annotated[Optional[str], typer.Option("--query-lens", help="Query tokens per sequence, comma list "
                                                     "(spec decode / mixed prefill). Default 1 (+ speculative).")]
GpuOpt = Annotated[str, typer.Option("--gpu", "-g", help="GPU name (see `decodecalc gpus`).")]
SmsOpt = Annotated[Optional[int], typer.Option("--sms", help="Override the SM (CU) count, e.g. for a MIG slice.")]
BandwidthOpt = Annotated[Optional[float], typer.Option("--bandwidth", help="Override HBM bandwidth in GB/s (1e9 B/s).")]
DtypeOpt = Annotated[Optional[str], typer.Option("--dtype", help="Activation/query dtype: bfloat16, float16, "
                                                 "float32. Default: the model's.")]
KvDtypeOpt = Annotated[str, typer.Option("--kv-cache-dtype", help="KV-cache dtype: auto, bfloat16, float16, "
                                         "float32, fp8 (fp8_e4m3, fp8_e5m2).")]
BlockSizeOpt = Annotated[int, typer.Option("--block-size", help="KV-cache block (page) size in tokens.")]
KernelBlockOpt = Annotated[Optional[int], typer.Option("--kernel-block-size", help="Kernel block size if the "
                                                       "allocator's blocks are subdivided (map_to_kernel_blocks).")]
BatchInvOpt = Annotated[bool, typer.Option("--batch-invariant", help="VLLM_BATCH_INVARIANT=1 (vLLM) / "
                                           "--enable-deterministic-inference (SGLang).")]
CudaGraphOpt = Annotated[bool, typer.Option("--cuda-graph/--no-cuda-graph", help="vLLM CUDA graphs "
                                            "(FULL_AND_PIECEWISE) or eager.")]
CgModeOpt = Annotated[Optional[str], typer.Option("--cudagraph-mode", help="vLLM cudagraph_mode: NONE, PIECEWISE, "
                                                  "FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE.")]
MaxSeqsOpt = Annotated[int, typer.Option("--max-num-seqs", help="vLLM max_num_seqs (sizes capture list and scratch).")]
MaxTokensOpt = Annotated[int, typer.Option("--max-num-batched-tokens", help="vLLM max_num_batched_tokens.")]
MaxSplitsOpt = Annotated[Optional[int], typer.Option("--max-kv-splits", help="SGLang --triton-attention-num-kv-"
                                                     "splits (default 8; 16 on AMD), before its MLA adjustment.")]
SpecOpt = Annotated[int, typer.Option("--num-speculative-tokens", help="k: decode steps carry k+1 query tokens.")]
VllmVersionOpt = Annotated[str, typer.Option("--vllm-version", help="vLLM release whose gate to model: 0.33.0, "
                                             "0.14.0, 0.11.0.")]
ModelRunnerOpt = Annotated[str, typer.Option("--model-runner", help="vLLM model runner: v2 (default) or v1.")]
ThresholdOpt = Annotated[Optional[int], typer.Option("--seq-threshold-3d", help="Override vLLM's seq_threshold_3D.")]
StaticSplitsOpt = Annotated[bool, typer.Option("--static-kv-splits", help="SGLang "
                                               "SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS=1.")]
ContextLenOpt = Annotated[Optional[int], typer.Option("--context-len", help="Model context length (SGLang sizes "
                                                      "max_kv_splits from it in deterministic and MLA modes).")]
SystemOpt = Annotated[Optional[str], typer.Option("--system", help="Only one system: vllm or sglang "
                                                  "(default both).")]
VllmSrcOpt = Annotated[Optional[Path], typer.Option("--vllm-src", help="vLLM source checkout or unpacked wheel. "
                                                    "Default: installed vllm, else ./upstream/vllm-0.33.0.")]
SglangSrcOpt = Annotated[Optional[Path], typer.Option("--sglang-src", help="SGLang source checkout or unpacked "
                                                      "wheel. Default: installed sglang, else ./upstream/sglang-0.5.23.")]
LayerOpt = Annotated[str, typer.Option("--layer", help="Which attention layer: global, or sliding (uses the "
                                       "model's sliding window).")]


def parse_int_list(text: str | None, option: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ConfigError(f"{option} is empty; give comma-separated positive integers, e.g. 512,2048")
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


def build_inputs(
    *,
    model: str,
    tp: int = 1,
    batch: int | None = None,
    seq_len: int | None = None,
    seq_lens: str | None = None,
    query_lens: str | None = None,
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
    vllm_version: str = "0.33.0",
    model_runner: str = "v2",
    seq_threshold_3d: int | None = None,
    static_kv_splits: bool = False,
    context_len: int | None = None,
    layer: str = "global",
) -> Inputs:
    if layer not in ("global", "sliding"):
        raise ConfigError(f"--layer {layer!r}; valid: global, sliding")
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
    return Inputs(work, gpu_spec, vllm, sglang, kernel_block_size, layer)


# --------------------------------------------------------------------------------------------
# Injecting the shared options into a command, and the one place errors become `Error: ...`

import functools  # noqa: E402
import inspect  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from decodecalc.errors import DecodecalcError  # noqa: E402

#: name -> (annotation, default) of every shared option, in --help order
SHARED_OPTIONS: dict[str, tuple[Any, Any]] = {
    "model": (ModelOpt, "llama3-8b"),
    "tp": (TpOpt, 1),
    "batch": (BatchOpt, None),
    "seq_len": (SeqLenOpt, None),
    "seq_lens": (SeqLensOpt, None),
    "query_lens": (QueryLensOpt, None),
    "gpu": (GpuOpt, "h200"),
    "sms": (SmsOpt, None),
    "bandwidth": (BandwidthOpt, None),
    "dtype": (DtypeOpt, None),
    "kv_cache_dtype": (KvDtypeOpt, "auto"),
    "block_size": (BlockSizeOpt, 16),
    "kernel_block_size": (KernelBlockOpt, None),
    "batch_invariant": (BatchInvOpt, False),
    "cuda_graph": (CudaGraphOpt, True),
    "cudagraph_mode": (CgModeOpt, None),
    "max_num_seqs": (MaxSeqsOpt, 1024),
    "max_num_batched_tokens": (MaxTokensOpt, 8192),
    "max_kv_splits": (MaxSplitsOpt, None),
    "num_speculative_tokens": (SpecOpt, 0),
    "vllm_version": (VllmVersionOpt, "0.33.0"),
    "model_runner": (ModelRunnerOpt, "v2"),
    "seq_threshold_3d": (ThresholdOpt, None),
    "static_kv_splits": (StaticSplitsOpt, False),
    "context_len": (ContextLenOpt, None),
    "layer": (LayerOpt, "global"),
}


def fail(message: str, code: int = 1) -> None:
    """Print the one-line error to stderr and exit non-zero (no traceback)."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]Error:[/] {escape(message)}", markup=True)
    raise typer.Exit(code)


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn domain errors (and unreadable/unwritable files) into `Error: ...` and exit code 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except DecodecalcError as exc:
            fail(str(exc), exc.exit_code)
        except OSError as exc:
            fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            raise typer.Exit(130) from None

    return wrapper


def with_workload_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the shared options to a command; the command receives ``inputs: Inputs``.

    The command's own parameters come first in --help, then the shared ones. Errors from
    building the inputs are reported by :func:`handle_errors` like any other.
    """
    import typing

    sig = inspect.signature(func)
    hints = typing.get_type_hints(func, include_extras=True)  # modules use `from __future__ import annotations`
    own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in sig.parameters.values()
           if p.name != "inputs"]
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
              for name, (annotation, default) in SHARED_OPTIONS.items()]

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        shared_values = {name: kwargs.pop(name) for name in SHARED_OPTIONS}
        return func(inputs=build_inputs(**shared_values), **kwargs)

    wrapper.__signature__ = sig.replace(parameters=[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]  # type: ignore[attr-defined]  # inspect.signature reads it
                                        + shared)
    return handle_errors(wrapper)
