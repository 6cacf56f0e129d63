"""Record every Triton kernel launch: kernel name, grid, constexprs.

Triton launches a ``@triton.jit`` kernel as ``kernel[grid](*args, **kwargs)``;
``__getitem__`` returns a proxy that calls ``kernel.run(*args, grid=grid,
warmup=False, **kwargs)``.  :class:`LaunchRecorder` wraps ``run`` on the two
classes that implement it in Triton 3.x:

* ``triton.runtime.jit.JITFunction`` (compiled launches on a GPU), and
* ``triton.runtime.interpreter.InterpretedFunction`` (``TRITON_INTERPRET=1``,
  the CPU interpreter).

Autotuned or heuristics-wrapped kernels end in one of those ``run`` methods too,
so they are seen with their final configuration.

Triton's own launch hook (``triton.knobs.runtime.launch_enter_hook``, Triton
3.6) is called only for compiled launches and is handed just the kernel name,
function handle and stream, not the grid, and the interpreter never calls it.
The ``run`` wrapper is therefore the primary record in both modes; on a GPU the
recorder also registers the launch hook and counts the compiled launches it
sees (``hook_names``), to confirm that the recorded launches really ran.

Two modes:

* ``execute=False`` -- intercept: record the launch and return without running
  the kernel (fast; enough for grids and constexprs).
* ``execute=True`` -- record, then run the kernel as usual.
* ``execute=<callable(name) -> bool>`` -- choose per kernel name (for example,
  run SGLang's tiny split-count kernel but intercept the attention kernels).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from decodecalc.errors import DecodecalcError

__all__ = ["KernelLaunch", "LaunchRecorder", "record_launches"]

_LOCK = threading.RLock()
_ACTIVE: list["LaunchRecorder"] = []
_ORIGINALS: dict[type, Callable[..., Any]] = {}


@dataclass(frozen=True)
class KernelLaunch:
    """One ``kernel[grid](...)`` call as the launcher issued it."""

    name: str
    grid: tuple[int, ...]
    constexprs: dict[str, Any]
    num_warps: int | None = None
    num_stages: int | None = None
    executed: bool = False

    def to_json(self, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
        cx = self.constexprs if keys is None else {k: self.constexprs[k] for k in keys if k in self.constexprs}
        out: dict[str, Any] = {"kernel": self.name, "grid": list(self.grid), "constexprs": cx}
        if self.num_warps is not None:
            out["num_warps"] = self.num_warps
        if self.num_stages is not None:
            out["num_stages"] = self.num_stages
        return out


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "value") and isinstance(getattr(value, "value"), (bool, int, float, str)):
        return value.value  # tl.constexpr wrapper, IntEnum
    return repr(value)


def _is_constexpr_annotation(ann: Any) -> bool:
    if ann is inspect.Parameter.empty:
        return False
    if isinstance(ann, str):
        return ann.split(".")[-1] == "constexpr"
    try:
        import triton.language as tl

        return ann is tl.constexpr or (isinstance(ann, type) and issubclass(ann, tl.constexpr))
    except Exception:  # pragma: no cover - defensive
        return False


def _kernel_fn(kernel: Any) -> Callable[..., Any]:
    return getattr(kernel, "fn", kernel)


def _kernel_name(kernel: Any) -> str:
    fn = _kernel_fn(kernel)
    return getattr(fn, "__name__", type(kernel).__name__)


def _describe(kernel: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]) -> KernelLaunch:
    fn = _kernel_fn(kernel)
    sig = inspect.signature(fn)
    params = sig.parameters
    call_kwargs = {k: v for k, v in kwargs.items() if k in params}
    options = {k: v for k, v in kwargs.items() if k not in params}
    bound = sig.bind_partial(*args, **call_kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    if callable(grid):
        grid = grid(arguments | options)
    grid_t = tuple(int(g) for g in grid)
    constexprs = {
        name: _jsonable(arguments.get(name))
        for name, p in params.items()
        if _is_constexpr_annotation(p.annotation)
    }
    nw = options.get("num_warps")
    ns = options.get("num_stages")
    return KernelLaunch(
        name=_kernel_name(kernel),
        grid=grid_t,
        constexprs=constexprs,
        num_warps=int(nw) if nw is not None else None,
        num_stages=int(ns) if ns is not None else None,
    )


def _make_wrapper(cls: type) -> Callable[..., Any]:
    original = _ORIGINALS[cls]

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        recorder = _ACTIVE[-1] if _ACTIVE else None
        if recorder is None or warmup:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        launch = _describe(self, args, grid, kwargs)
        run_it = recorder.should_execute(launch.name)
        if run_it:
            launch = KernelLaunch(**{**launch.__dict__, "executed": True})
        recorder.launches.append(launch)
        if not run_it:
            return None
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    run.__wrapped__ = original  # type: ignore[attr-defined]
    return run


def _patch_classes() -> None:
    try:
        from triton.runtime.jit import JITFunction
    except ImportError as exc:  # pragma: no cover - caller checks availability first
        raise DecodecalcError(
            "decodecalc verify needs triton: pip install 'decodecalc[verify]'"
        ) from exc
    classes: list[type] = [JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except ImportError:  # pragma: no cover - very old triton
        pass
    for cls in classes:
        if cls not in _ORIGINALS:
            _ORIGINALS[cls] = cls.__dict__["run"]
            cls.run = _make_wrapper(cls)  # type: ignore[attr-defined]  # triton JITFunction/InterpretedFunction.run


def _unpatch_classes() -> None:
    for cls, original in list(_ORIGINALS.items()):
        cls.run = original  # type: ignore[attr-defined]  # restores the triton method saved above
        del _ORIGINALS[cls]


@dataclass
class LaunchRecorder:
    """Context manager that records (and optionally suppresses) Triton launches.

    >>> with LaunchRecorder(execute=False) as rec:   # doctest: +SKIP
    ...     unified_attention(...)
    >>> rec.launches[0].grid
    """

    execute: bool | Callable[[str], bool] = False
    launches: list[KernelLaunch] = field(default_factory=list)
    hook_names: list[str] = field(default_factory=list)
    use_launch_hook: bool = True
    _hook: Callable[..., Any] | None = field(default=None, repr=False)

    def should_execute(self, name: str) -> bool:
        if callable(self.execute):
            return bool(self.execute(name))
        return bool(self.execute)

    def _launch_hook(self, metadata: Any) -> None:
        data = metadata.get() if hasattr(metadata, "get") else metadata
        try:
            self.hook_names.append(str(data["name"]))
        except Exception:  # pragma: no cover - metadata layout differs
            self.hook_names.append(repr(data))

    def __enter__(self) -> "LaunchRecorder":
        with _LOCK:
            _patch_classes()
            _ACTIVE.append(self)
            if self.use_launch_hook:
                try:
                    from triton import knobs

                    chain = knobs.runtime.launch_enter_hook
                    if hasattr(chain, "add"):
                        self._hook = self._launch_hook
                        chain.add(self._hook)
                except (ImportError, AttributeError):  # older triton: no knobs
                    self._hook = None
        return self

    def __exit__(self, *exc: Any) -> None:
        with _LOCK:
            if self._hook is not None:
                from triton import knobs

                knobs.runtime.launch_enter_hook.remove(self._hook)
                self._hook = None
            _ACTIVE.remove(self)
            if not _ACTIVE:
                _unpatch_classes()

    def by_name(self, name: str) -> list[KernelLaunch]:
        return [launch for launch in self.launches if launch.name == name]


def record_launches(
    fn: Callable[..., Any], *args: Any, execute: bool | Callable[[str], bool] = False, **kwargs: Any
) -> tuple[Any, list[KernelLaunch]]:
    """Call ``fn(*args, **kwargs)`` under a :class:`LaunchRecorder`; return ``(result, launches)``."""
    with LaunchRecorder(execute=execute) as rec:
        result = fn(*args, **kwargs)
    return result, rec.launches


# ----------------------------------------------------------------------------- engine calls
#
# The helpers below call the upstream wrappers with the arguments the engines
# pass (vLLM: TritonAttentionImpl.forward in vllm/v1/attention/backends/triton_attn.py;
# SGLang: TritonAttnBackend in sglang/srt/layers/attention/triton_backend.py).
# When a kernel is intercepted its tensors are never read, so the KV pool is
# kept small (block / slot ids wrap around ``pool_blocks``): the launchers read
# only shapes, strides, dtypes and host scalars.


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _np2(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


_DTYPES = {
    "fp16": "float16",
    "float16": "float16",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp32": "float32",
    "float32": "float32",
    "fp8": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "float8_e4m3fn": "float8_e4m3fn",
}


def torch_dtype(name: str) -> Any:
    import torch

    try:
        return getattr(torch, _DTYPES[name])
    except KeyError as exc:
        raise DecodecalcError(f"unknown dtype {name!r}; known: {', '.join(sorted(_DTYPES))}") from exc


def vllm_scratch_rows(seq_threshold_3D: int, max_num_seqs: int, max_query_len_3d: int = 1) -> int:
    """Rows of the split-K scratch as ``TritonAttentionMetadataBuilder.__init__`` (V33) sizes it:
    ``min(seq_threshold_3D, max_num_seqs) * qlen3d`` (16-segment mode; SM 12.0 64-segment
    sizing not modelled)."""
    return min(seq_threshold_3D, max_num_seqs) * max_query_len_3d


@dataclass
class VllmCall:
    """Result of one ``unified_attention`` call."""

    launches: list[KernelLaunch]
    output: Any = None  # the ``out`` tensor (meaningful only when the kernels executed)
    tensors: dict[str, Any] = field(default_factory=dict)


def call_vllm_unified(
    kernels: Any,
    *,
    num_heads: int,
    num_kv_heads: int,
    head_size: int,
    seq_lens: tuple[int, ...],
    query_lens: tuple[int, ...],
    q_dtype: str = "fp16",
    kv_dtype: str | None = None,
    sliding_window: int | None = None,
    seq_threshold_3D: int | None = None,
    num_par_softmax_segments: int | None = 16,
    scratch_rows: int | None = None,
    block_size: int = 16,
    execute: bool | Callable[[str], bool] = False,
    pool_blocks: int | None = 64,
    seed: int = 0,
    device: str = "cpu",
    num_tokens: int | None = None,
) -> VllmCall:
    """Call vLLM's ``unified_attention`` as ``TritonAttentionImpl.forward`` does and record launches.

    ``kernels`` is a :class:`decodecalc.verify.upstream.VllmKernels`.  ``kv_dtype`` defaults to
    the query dtype, except an fp8 query (which vLLM uses only with an fp8 KV cache, whose
    per-tensor scales then fold into the score) gets an fp8 KV cache.  ``seq_threshold_3D=None``
    passes no split-K scratch at all (then vLLM always takes the 2D path).
    ``pool_blocks=None`` allocates every KV block for real (needed when executing).
    ``num_tokens`` (default ``sum(query_lens)``) is ``q.shape[0]``; a larger value models a
    FULL CUDA-graph replay, whose padded requests have query length 0 and sequence length 0
    and whose padded tokens follow the real ones.
    """
    import torch

    if len(seq_lens) != len(query_lens):
        raise DecodecalcError("seq_lens and query_lens must have the same length")
    if any(q > s for q, s in zip(query_lens, seq_lens)):
        raise DecodecalcError("a query length exceeds its sequence length")
    gen = torch.Generator().manual_seed(seed)
    qd = torch_dtype(q_dtype)
    q_is_fp8 = qd.itemsize == 1
    kvd = torch_dtype(kv_dtype) if kv_dtype else (torch_dtype("fp8") if q_is_fp8 else qd)
    kv_is_fp8 = kvd.itemsize == 1
    out_dtype = torch.float16 if q_is_fp8 else qd  # fp8 query: output in the model dtype

    B = len(seq_lens)
    T = sum(query_lens) if num_tokens is None else num_tokens
    if T < sum(query_lens):
        raise DecodecalcError("num_tokens is smaller than the sum of the query lengths")
    d = head_size
    blocks_per_seq = [_cdiv(s, block_size) for s in seq_lens]
    max_blocks = max(blocks_per_seq) if blocks_per_seq else 1
    need = sum(blocks_per_seq) + 1
    n_blocks = need if pool_blocks is None else max(1, min(need, pool_blocks))

    def rand(shape: tuple[int, ...], dtype: Any) -> Any:
        x = torch.randn(shape, generator=gen, dtype=torch.float32) * 0.5
        return x.to(dtype).to(device)

    q = rand((T, num_heads, d), qd)
    # vLLM's KV cache arrives as (blocks, kv_heads, block_size, 2*d); forward() transposes
    # dims 1 and 2 and splits the last one (non-contiguous K and V views).
    kv_cache = rand((n_blocks, num_kv_heads, block_size, 2 * d), kvd if not kv_is_fp8 else torch.float16)
    if kv_is_fp8:
        kv_cache = kv_cache.to(kvd)
    kv_cache = kv_cache.transpose(1, 2)
    key_cache, value_cache = kv_cache.split(d, dim=-1)
    out = torch.empty((T, num_heads, d), dtype=out_dtype, device=device)

    block_table = torch.zeros((B, max_blocks), dtype=torch.int32)
    nxt = 1  # block 0 left unused, as in vLLM (null block)
    for i, nb in enumerate(blocks_per_seq):
        ids = torch.arange(nxt, nxt + nb, dtype=torch.int32)
        block_table[i, :nb] = ids if pool_blocks is None else ids % n_blocks
        nxt += nb
    block_table = block_table.to(device)
    cu = [0]
    for ql in query_lens:
        cu.append(cu[-1] + ql)
    cu_seqlens_q = torch.tensor(cu, dtype=torch.int32, device=device)
    seqused_k = torch.tensor(seq_lens, dtype=torch.int32, device=device)

    KVQuantMode = kernels.KVQuantMode
    kv_quant_mode = KVQuantMode.FP8_PER_TENSOR if kv_is_fp8 else KVQuantMode.NONE
    one = torch.ones((), dtype=torch.float32, device=device)
    descale_shape = (B, num_kv_heads)
    q_descale = one.reshape(1) if (kv_is_fp8 and q_is_fp8) else None
    k_descale = one.reshape(1).expand(descale_shape)
    v_descale = one.reshape(1).expand(descale_shape)

    if sliding_window is None:
        window_size = (-1, -1)
    else:  # decoder attention: TritonAttentionImpl.__init__
        window_size = (sliding_window - 1, 0)

    tensors: dict[str, Any] = {}
    if seq_threshold_3D is None or num_par_softmax_segments is None:
        segm_out = segm_max = segm_sum = None
    else:
        rows = scratch_rows if scratch_rows is not None else vllm_scratch_rows(seq_threshold_3D, 1024)
        S = num_par_softmax_segments
        segm_out = torch.empty((rows, num_heads, S, _np2(d)), dtype=torch.float32, device=device)
        segm_max = torch.empty((rows, num_heads, S), dtype=torch.float32, device=device)
        segm_sum = torch.empty((rows, num_heads, S), dtype=torch.float32, device=device)
    tensors.update(q=q, key_cache=key_cache, value_cache=value_cache, block_table=block_table,
                   cu_seqlens_q=cu_seqlens_q, seqused_k=seqused_k)

    with LaunchRecorder(execute=execute) as rec:
        kernels.unified_attention(
            q=q,
            k=key_cache,
            v=value_cache,
            out=out,
            cu_seqlens_q=cu_seqlens_q,
            max_seqlen_q=max(query_lens),
            seqused_k=seqused_k,
            max_seqlen_k=max(seq_lens),
            softmax_scale=float(d) ** -0.5,
            causal=True,
            alibi_slopes=None,
            use_alibi_sqrt=False,
            window_size=window_size,
            block_table=block_table,
            softcap=0,
            q_descale=q_descale,
            k_descale=k_descale,
            v_descale=v_descale,
            seq_threshold_3D=seq_threshold_3D,
            num_par_softmax_segments=num_par_softmax_segments,
            softmax_segm_output=segm_out,
            softmax_segm_max=segm_max,
            softmax_segm_expsum=segm_sum,
            sinks=None,
            output_scale=None,
            mm_prefix_range=None,
            rswa_prefix_lens=None,
            rswa_window=None,
            kv_quant_mode=kv_quant_mode,
            k_scale_cache=None,
            v_scale_cache=None,
            chunk_lookback=-1,
            use_td=False,
            mm_prefix_clamp_sliding_window=False,
        )
    return VllmCall(launches=list(rec.launches), output=out, tensors=tensors)


@dataclass
class SglangCall:
    """Result of one SGLang decode step: split counts and the launches."""

    num_kv_splits: tuple[int, ...]
    uneven_batch: int
    launches: list[KernelLaunch]
    output: Any = None
    tensors: dict[str, Any] = field(default_factory=dict)


def sglang_schedule_seq(num_seq: int) -> int:
    """``MAX_NUM_SEQ`` as ``TritonAttnBackend.get_num_kv_splits`` (SG23) picks it."""
    return 256 if num_seq < 256 else _np2(num_seq)


def call_sglang_decode(
    kernels: Any,
    *,
    seq_lens: tuple[int, ...],
    num_head: int,
    num_kv_head: int,
    device_core_count: int,
    max_kv_splits: int = 8,
    head_dim: int = 128,
    v_head_dim: int | None = None,
    dtype: str = "fp16",
    num_group: int = 1,
    execute: bool | Callable[[str], bool] | None = None,
    pool_slots: int | None = 4096,
    seed: int = 0,
    device: str = "cpu",
    run_decode: bool | None = None,
) -> SglangCall:
    """One SGLang Triton decode step, as ``TritonAttnBackend`` (SG23) runs it.

    1. ``init_forward_metadata`` (decode): ``attn_logits [B, h, max_kv_splits, d_v]``,
       ``attn_lse [B, h, max_kv_splits]`` (fp32), ``num_kv_splits [B]`` int32,
       ``uneven_batch [1]`` int32, then ``get_num_kv_splits``: the Triton kernel
       ``get_num_kv_splits_triton[(1,)]`` with ``MAX_NUM_SEQ = max(256, np2(B))``;
    2. ``forward_decode``: ``decode_attention_fwd(q, k_buffer, v_buffer, o, kv_indptr,
       kv_indices, attn_logits, attn_lse, num_kv_splits, max_kv_splits, sm_scale,
       k_scale, v_scale, uneven_batch=...)``.

    ``execute`` defaults to running only the split-count kernel (it must run: its result
    is the split count); pass ``True`` to run the attention kernels too (then use
    ``pool_slots=None`` so every KV slot is real).  With ``num_group > 1`` (speculative
    top-k: ``num_kv_splits`` has ``B * num_group`` entries) only the split count is computed
    unless ``run_decode=True``.
    """
    import torch

    if execute is None:
        execute = lambda name: name == "get_num_kv_splits_triton"  # noqa: E731
    gen = torch.Generator().manual_seed(seed)
    dt = torch_dtype(dtype)
    dv = v_head_dim or head_dim
    B = len(seq_lens)
    num_token = B * num_group

    seq_lens_t = torch.tensor(seq_lens, dtype=torch.int64, device=device)  # forward_batch.seq_lens
    num_kv_splits = torch.empty((num_token,), dtype=torch.int32, device=device)
    uneven_batch = torch.zeros((1,), dtype=torch.int32, device=device)
    attn_logits = torch.empty((B, num_head, max_kv_splits, dv), dtype=torch.float32, device=device)
    attn_lse = torch.empty((B, num_head, max_kv_splits), dtype=torch.float32, device=device)

    total = sum(seq_lens)
    n_slots = total if pool_slots is None else max(1, min(total, pool_slots))

    def rand(shape: tuple[int, ...]) -> Any:
        return (torch.randn(shape, generator=gen, dtype=torch.float32) * 0.5).to(dt).to(device)

    q = rand((B, num_head, head_dim))
    k_buffer = rand((n_slots, num_kv_head, head_dim))
    v_buffer = rand((n_slots, num_kv_head, dv))
    o = torch.empty((B, num_head, dv), dtype=dt, device=device)
    indptr = [0]
    for s in seq_lens:
        indptr.append(indptr[-1] + s)
    kv_indptr = torch.tensor(indptr, dtype=torch.int32, device=device)
    idx = torch.arange(total, dtype=torch.int64)
    kv_indices = (idx if pool_slots is None else idx % n_slots).to(device)

    with LaunchRecorder(execute=execute) as rec:
        kernels.get_num_kv_splits_triton[(1,)](
            num_kv_splits,
            seq_lens_t,
            B,
            num_group,
            num_head,
            num_kv_head,
            max_kv_splits,
            device_core_count,
            MAX_NUM_SEQ=sglang_schedule_seq(B),
            uneven_batch_ptr=uneven_batch,
        )
        if run_decode is None:
            run_decode = num_group == 1
        if run_decode:
            kernels.decode_attention_fwd(
                q,
                k_buffer,
                v_buffer,
                o,
                kv_indptr,
                kv_indices,
                attn_logits,
                attn_lse,
                num_kv_splits,
                max_kv_splits,
                float(head_dim) ** -0.5,
                1.0,
                1.0,
                logit_cap=0.0,
                sinks=None,
                uneven_batch=uneven_batch,
            )
    splits = tuple(int(x) for x in num_kv_splits.cpu().tolist())
    return SglangCall(
        num_kv_splits=splits,
        uneven_batch=int(uneven_batch.cpu().item()),
        launches=list(rec.launches),
        output=o,
        tensors={"q": q, "k_buffer": k_buffer, "v_buffer": v_buffer, "kv_indptr": kv_indptr,
                 "kv_indices": kv_indices, "attn_logits": attn_logits, "attn_lse": attn_lse},
    )
