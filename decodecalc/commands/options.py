"""The options every analysis command shares (typer declarations, enums, help panels) and the one place
errors become ``Error: ...``.

:func:`with_workload_options` adds the shared options to a command and hands it an
:class:`~decodecalc.inputs.Inputs` built by :func:`decodecalc.inputs.build_inputs`, the pure function
the Python API (decodecalc/api.py) uses too. Parsing only: every check and formula lives in the core.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer


class Dtype(str, Enum):
    """--dtype (decodecalc.workload.DTYPE_BYTES; tests check the two agree)."""
    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"


class KvDtype(str, Enum):
    """--kv-cache-dtype: auto (the model's dtype) or a DTYPE_BYTES key."""
    auto = "auto"
    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"
    fp8 = "fp8"
    fp8_e4m3 = "fp8_e4m3"
    fp8_e5m2 = "fp8_e5m2"


class CudagraphMode(str, Enum):
    """--cudagraph-mode (launchers/vllm_cudagraphs.py CUDAGRAPH_MODES)."""
    NONE = "NONE"
    PIECEWISE = "PIECEWISE"
    FULL = "FULL"
    FULL_DECODE_ONLY = "FULL_DECODE_ONLY"
    FULL_AND_PIECEWISE = "FULL_AND_PIECEWISE"


class VllmVersion(str, Enum):
    """--vllm-version (launchers/vllm_unified.py VERSIONS)."""
    v0_34_0 = "0.34.0"
    v0_33_0 = "0.33.0"
    v0_14_0 = "0.14.0"
    v0_11_0 = "0.11.0"


class Cubins(str, Enum):
    """--cubins: whether XQA / trtllm-gen cubins are available (flashinfer-cubin installed or NVIDIA's repository
    reachable)."""
    yes = "yes"
    no = "no"


class ModelRunner(str, Enum):
    v1 = "v1"
    v2 = "v2"


class Layer(str, Enum):
    """--layer (decodecalc.inputs.LAYERS)."""
    global_ = "global"
    sliding = "sliding"


class System(str, Enum):
    """--system / --kernel (reports/grid.py SYSTEMS, reports/recommend.py KERNELS)."""
    vllm = "vllm"
    sglang = "sglang"


#: help panels: grid has about 40 options; these group the shared ones
WORKLOAD = "Model and workload"
GPU = "GPU"
VLLM = "vLLM settings"
SGLANG = "SGLang settings"
OUTPUT = "Output"


def one_of(cls: type[Enum]) -> str:
    """The choices of an enum option, for its help text (the metavar stays short so --help fits 80 columns)."""
    return "One of: " + ", ".join(str(m.value) for m in cls) + "."

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Model id (see `decodecalc models`), a model YAML, "
                                       "a Hugging Face config.json, or a repo id in the local HF cache.",
                                       rich_help_panel=WORKLOAD)]
TpOpt = Annotated[int, typer.Option("--tp", help="Tensor-parallel degree (heads are sharded as vLLM does).",
                                    rich_help_panel=WORKLOAD)]
BatchOpt = Annotated[Optional[int], typer.Option("--batch", "-b", help="Decode sequences in the step.",
                                                 rich_help_panel=WORKLOAD)]
SeqLenOpt = Annotated[Optional[int], typer.Option("--seq-len", "-s", help="KV length of every sequence "
                                                  "(including this step's token). Default 2560.",
                                                  rich_help_panel=WORKLOAD)]
SeqLensOpt = Annotated[Optional[str], typer.Option("--seq-lens", help="Ragged batch: comma-separated KV lengths.",
                                                   rich_help_panel=WORKLOAD)]
QueryLensOpt = Annotated[Optional[str], typer.Option("--query-lens", help="Query tokens per sequence, comma list "
                                                     "(spec decode / mixed prefill). Default 1 (+ speculative).",
                                                     rich_help_panel=WORKLOAD)]
GpuOpt = Annotated[str, typer.Option("--gpu", "-g", help="GPU name (see `decodecalc gpus`).", rich_help_panel=GPU)]
SmsOpt = Annotated[Optional[int], typer.Option("--sms", help="Override the SM (CU) count, e.g. for a MIG slice.",
                                               rich_help_panel=GPU)]
BandwidthOpt = Annotated[Optional[float], typer.Option("--bandwidth", help="Override HBM bandwidth in GB/s "
                                                       "(1e9 B/s).", rich_help_panel=GPU)]
DtypeOpt = Annotated[Optional[Dtype], typer.Option("--dtype", help="Activation/query dtype. Default: the model's. "
                                                   + one_of(Dtype), metavar="DTYPE", rich_help_panel=WORKLOAD)]
KvDtypeOpt = Annotated[KvDtype, typer.Option("--kv-cache-dtype", help="KV-cache dtype (auto: the model's). "
                                             + one_of(KvDtype), metavar="DTYPE", rich_help_panel=WORKLOAD)]
BlockSizeOpt = Annotated[int, typer.Option("--block-size", help="KV-cache block (page) size in tokens.",
                                           rich_help_panel=WORKLOAD)]
KernelBlockOpt = Annotated[Optional[int], typer.Option("--kernel-block-size", help="Kernel block size if the "
                                                       "allocator's blocks are subdivided (map_to_kernel_blocks).",
                                                       rich_help_panel=VLLM)]
BatchInvOpt = Annotated[bool, typer.Option("--batch-invariant", help="VLLM_BATCH_INVARIANT=1 (vLLM) / "
                                           "--enable-deterministic-inference (SGLang).", rich_help_panel=WORKLOAD)]
CudaGraphOpt = Annotated[bool, typer.Option("--cuda-graph/--no-cuda-graph", help="vLLM CUDA graphs "
                                            "(FULL_AND_PIECEWISE) or eager.", rich_help_panel=VLLM)]
CgModeOpt = Annotated[Optional[CudagraphMode], typer.Option("--cudagraph-mode", help="vLLM cudagraph_mode "
                                                            "(any case). " + one_of(CudagraphMode), metavar="MODE",
                                                            case_sensitive=False, rich_help_panel=VLLM)]
MaxSeqsOpt = Annotated[int, typer.Option("--max-num-seqs", help="vLLM max_num_seqs (sizes capture list and "
                                         "scratch).", rich_help_panel=VLLM)]
MaxTokensOpt = Annotated[int, typer.Option("--max-num-batched-tokens", help="vLLM max_num_batched_tokens.",
                                           rich_help_panel=VLLM)]
MaxSplitsOpt = Annotated[Optional[int], typer.Option("--max-kv-splits", help="SGLang --triton-attention-num-kv-"
                                                     "splits (default 8; 16 on AMD), before its MLA adjustment.",
                                                     rich_help_panel=SGLANG)]
SpecOpt = Annotated[int, typer.Option("--num-speculative-tokens", help="k: decode steps carry k+1 query tokens.",
                                      rich_help_panel=WORKLOAD)]
VllmVersionOpt = Annotated[VllmVersion, typer.Option("--vllm-version", help="vLLM release whose gate to model. "
                                                     + one_of(VllmVersion), metavar="X.Y.Z", rich_help_panel=VLLM)]
ModelRunnerOpt = Annotated[ModelRunner, typer.Option("--model-runner", help="vLLM model runner. "
                                                     + one_of(ModelRunner), metavar="V", case_sensitive=False,
                                                     rich_help_panel=VLLM)]
ThresholdOpt = Annotated[Optional[int], typer.Option("--seq-threshold-3d", help="Override vLLM's seq_threshold_3D.",
                                                     rich_help_panel=VLLM)]
StaticSplitsOpt = Annotated[bool, typer.Option("--static-kv-splits", help="SGLang's environment variable "
                                               "SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS set to 1.",
                                               rich_help_panel=SGLANG)]
ContextLenOpt = Annotated[Optional[int], typer.Option("--context-len", help="Model context length (SGLang sizes "
                                                      "max_kv_splits from it in deterministic and MLA modes).",
                                                      rich_help_panel=SGLANG)]
SystemOpt = Annotated[Optional[System], typer.Option("--system", help="Only one system (default both). "
                                                     + one_of(System), metavar="NAME", case_sensitive=False)]
VllmSrcOpt = Annotated[Optional[Path], typer.Option("--vllm-src", help="vLLM source checkout or unpacked wheel. "
                                                    "Default: installed vllm, else ./upstream/vllm-0.33.0.")]
SglangSrcOpt = Annotated[Optional[Path], typer.Option("--sglang-src", help="SGLang source checkout or unpacked "
                                                      "wheel. Default: installed sglang, else ./upstream/sglang-0.5.23.")]
CubinsOpt = Annotated[Cubins, typer.Option("--cubins", help="XQA / trtllm-gen cubins available (flashinfer-cubin "
                                           "installed or NVIDIA's cubin repository reachable: an ordinary server); "
                                           "vLLM's FlashInfer backend decodes with them. " + one_of(Cubins),
                                           metavar="yes|no", case_sensitive=False, rich_help_panel=VLLM)]
MaxModelLenOpt = Annotated[Optional[int], typer.Option("--max-model-len", help="The engine's max_model_len (default: "
                                                       "the model's context length): XQA's block table is this wide, "
                                                       "which sets its split count.", rich_help_panel=VLLM)]
LayerOpt = Annotated[Layer, typer.Option("--layer", help="Which attention layer (sliding: the model's sliding "
                                         "window). " + one_of(Layer), metavar="LAYER", rich_help_panel=WORKLOAD)]
#: the regimes of the time model's predictions (decodecalc.timemodel.profile.REGIMES; tests/test_in_graph.py checks)
REGIME_NAMES = ("back-to-back", "in-graph")
RegimeOpt = Annotated[str, typer.Option("--regime", help="What the predicted times are for: back-to-back (one system's "
                                        "decode call repeated in a CUDA graph, as the profile was measured) or "
                                        "in-graph (inside a decode layer's graph, between its GEMMs: a measured "
                                        "cost per launch added).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the JSON contract instead of tables.",
                                       rich_help_panel=OUTPUT)]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the JSON to this file (atomic).",
                                                   rich_help_panel=OUTPUT)]


def plain(value: Any) -> Any:
    """An enum member as its value (what the core takes); anything else unchanged."""
    return value.value if isinstance(value, Enum) else value


# The pure half (Inputs, build_inputs, parse_int_list) lives in decodecalc/inputs.py, shared with the
# Python API (decodecalc/api.py); validation of the built workload belongs there.
from decodecalc.inputs import Inputs, build_inputs, context_warning, parse_int_list  # noqa: E402,F401


# --------------------------------------------------------------------------------------------
# Injecting the shared options into a command, and the one place errors become `Error: ...`

import contextlib  # noqa: E402
import functools  # noqa: E402
import inspect  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402

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
    "kv_cache_dtype": (KvDtypeOpt, KvDtype.auto),
    "block_size": (BlockSizeOpt, 16),
    "kernel_block_size": (KernelBlockOpt, None),
    "batch_invariant": (BatchInvOpt, False),
    "cuda_graph": (CudaGraphOpt, True),
    "cudagraph_mode": (CgModeOpt, None),
    "max_num_seqs": (MaxSeqsOpt, 1024),
    "max_num_batched_tokens": (MaxTokensOpt, 8192),
    "max_kv_splits": (MaxSplitsOpt, None),
    "num_speculative_tokens": (SpecOpt, 0),
    "vllm_version": (VllmVersionOpt, VllmVersion.v0_34_0),
    "model_runner": (ModelRunnerOpt, ModelRunner.v2),
    "seq_threshold_3d": (ThresholdOpt, None),
    "static_kv_splits": (StaticSplitsOpt, False),
    "context_len": (ContextLenOpt, None),
    "layer": (LayerOpt, Layer.global_),
    "cubins": (CubinsOpt, Cubins.yes),
    "max_model_len": (MaxModelLenOpt, None),
}


#: the longest error message printed whole (a user's exception text can be any size)
MAX_ERROR_CHARS = 2000


def error_line(message: str) -> str:
    """``message`` as one line: each line break in it (a file name or a user rule's exception text may hold them)
    written as the two characters ``\\n``, and at most MAX_ERROR_CHARS characters."""
    text = "\\n".join(message.splitlines())
    if len(text) > MAX_ERROR_CHARS:
        text = f"{text[:MAX_ERROR_CHARS]}... ({len(text) - MAX_ERROR_CHARS:,} more characters)"
    return text


def print_error(message: str) -> None:
    """The one-line ``Error: ...`` on stderr (domain errors and usage errors alike)."""
    from rich.console import Console
    from rich.text import Text

    # a Text, not markup: "[...]" and emoji codes such as ":b:" in the message print as written
    Console(stderr=True, highlight=False, soft_wrap=True, emoji=False).print(
        Text.assemble(("Error:", "bold red"), " ", error_line(message)))


def quiet_broken_pipe() -> int:
    """The reader of stdout went away (``| head``): exit 0 with nothing more written (stdout now discards, so the
    interpreter's last flush cannot fail again)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0


def print_warning(message: str) -> None:
    """One ``warning: ...`` line on stderr (the output on stdout stays what it is)."""
    from rich.console import Console
    from rich.text import Text

    # wrapped at the terminal's width (80 in a pipe), unlike the one-line errors a script may parse
    Console(stderr=True, highlight=False, emoji=False).print(Text.assemble(("warning:", "yellow"), " ", message))


def fail(message: str, code: int = 1) -> None:
    """Print the one-line error to stderr and exit non-zero (no traceback)."""
    print_error(message)
    raise typer.Exit(code)


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn domain errors (and unreadable/unwritable files) into `Error: ...` and exit code 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from decodecalc.commands.output import clamp_columns, make_streams_encoding_safe, refuse_outputs_naming_inputs

        clamp_columns()  # COLUMNS=0: rich printed nothing, errors included (also in cli.main, for help and usage)
        make_streams_encoding_safe()
        try:
            refuse_outputs_naming_inputs(kwargs)  # every command, every output option: before anything is written
            return func(*args, **kwargs)
        except BrokenPipeError:  # `| head`: the reader has what it wanted
            raise typer.Exit(quiet_broken_pipe()) from None
        except DecodecalcError as exc:
            fail(str(exc), exc.exit_code)
        except OSError as exc:
            from decodecalc.commands.output import STDOUT_ERRNOS, discard_stdout, stdout_failure

            # printing the results failed (>/dev/full, >&-): files decodecalc writes are named in their errors
            if exc.filename is None and (exc.errno in STDOUT_ERRNOS or stdout_failure() is not None):
                discard_stdout()
                fail(f"cannot write standard output: {exc.strerror or exc}")
            fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            raise typer.Exit(130) from None

    return wrapper


#: a run that is still busy after this long shows its progress on stderr
PROGRESS_AFTER_S = 1.0


@contextlib.contextmanager
def progress_on_stderr(*, enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A function to report what a long run is doing: after PROGRESS_AFTER_S, a transient progress line on stderr
    (a pulsing bar, the step and the elapsed time). Nothing when stderr is not a terminal (a pipe, a file, CI) or
    not ``enabled`` (``--json``)."""
    import threading

    if not enabled or not sys.stderr.isatty():
        yield lambda what: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    state: dict[str, Any] = {"n": 0}
    bar = Progress(TextColumn("[dim]tune[/]"), BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                   console=Console(stderr=True), transient=True)
    task = bar.add_task("", total=None)
    # started by a timer, not by the next report: a phase that reports nothing for a while (reading a large trace)
    # still shows its line and its elapsed time from PROGRESS_AFTER_S on (rich refreshes it from its own thread)
    timer = threading.Timer(PROGRESS_AFTER_S, bar.start)
    timer.daemon = True

    def report(what: str) -> None:
        state["n"] += 1
        bar.update(task, description=f"{what} ({state['n']})")

    timer.start()
    try:
        yield report
    finally:
        timer.cancel()
        timer.join()
        if bar.live.is_started:
            bar.stop()


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
        shared_values = {name: plain(kwargs.pop(name)) for name in SHARED_OPTIONS}
        inputs = build_inputs(**shared_values)
        warning = context_warning(inputs)
        if warning is not None:
            print_warning(warning)
        return func(inputs=inputs, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]  # type: ignore[attr-defined]  # inspect.signature reads it
                                        + shared)
    return handle_errors(wrapper)


# --------------------------------------------------------------------------------------------
# An option given twice is an error, not "the last one wins"


def _repeated_option(command: Any, args: list[str]) -> tuple[Any, str, str] | None:
    """(param, first spelling, second spelling) of the first single-valued option given twice in ``args``."""
    by_name: dict[str, Any] = {}
    for p in command.params:
        if getattr(p, "param_type_name", "") == "option" and not getattr(p, "multiple", False) \
                and not getattr(p, "count", False):
            for name in (*p.opts, *p.secondary_opts):
                by_name[name] = p
    seen: dict[str, str] = {}
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if token == "--":
            break
        if not token.startswith("-") or token == "-":
            continue
        name = token.split("=", 1)[0] if token.startswith("--") else token[:2]
        p = by_name.get(name)
        if p is None:
            continue
        attached = "=" in token if token.startswith("--") else len(token) > 2
        shown = token
        if not getattr(p, "is_flag", False) and not attached:
            if i < len(args):
                shown = f"{token} {args[i]}"
            i += 1  # the option's value, even when it starts with '-' (--tp -1)
        if p.name in seen:
            return p, seen[p.name], shown
        seen[p.name] = shown
    return None


def strict_command_class() -> type:
    """typer's command class, refusing an option given more than once (``--format xml ... --format
    csv`` would otherwise silently use csv and never validate xml)."""
    import typer.core

    class StrictCommand(typer.core.TyperCommand):
        def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
            repeated = _repeated_option(self, list(args))
            if repeated is not None:
                param, first, second = repeated
                raise typer.BadParameter(f"given more than once ({first} ... {second}); give it once",
                                         ctx=ctx, param=param)
            return super().parse_args(ctx, args)

    return StrictCommand
