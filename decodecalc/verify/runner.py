"""Run decode-attention kernels for a Workload and compare what they did with the prediction.

For one workload: build a random paged KV cache (several disjoint copies when timing, so L2
cannot hold it), block tables, queries; then, for every (system, kernel source) asked for:

1. fill the outputs and the split scratch with NaN (and SGLang's split counts with -1), run
   the kernels once under :class:`decodecalc.verify.capture.LaunchRecorder`, and count the
   programs that did work from the rows they wrote;
2. compare the output with a float32 torch reference (a few sequences of large batches);
3. time the step (:mod:`decodecalc.verify.timing`) on a GPU;
4. compare kernel names' roles, grids, working programs and per-sequence split counts with
   the predicted :class:`~decodecalc.launchers.base.LaunchPlan`.

torch and triton are imported inside functions only; importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from decodecalc.derived import cdiv, next_power_of_2
from decodecalc.errors import DecodecalcError, UnsupportedError
from decodecalc.launchers.base import LaunchPlan
from decodecalc.workload import Workload

SYSTEMS = ("vllm", "sglang")
SOURCES = ("upstream", "reference")
#: kernels that compute metadata, not attention: not part of a LaunchPlan's kernels
AUX_KERNELS = {"get_num_kv_splits_triton", "ref_num_kv_splits"}
ROLE_NAMES = {
    "kernel_unified_attention": "kernel_unified_attention",
    "ref_split_kv": "kernel_unified_attention",
    "reduce_segments": "reduce_segments",
    "ref_reduce_segments": "reduce_segments",
    "_fwd_grouped_kernel_stage1": "_fwd_grouped_kernel_stage1",
    "_fwd_kernel_stage1": "_fwd_kernel_stage1",
    "ref_grouped_stage1": "_fwd_grouped_kernel_stage1",
    "_fwd_kernel_stage2": "_fwd_kernel_stage2",
    "ref_stage2": "_fwd_kernel_stage2",
}
#: bf16 tolerance: max |err| relative to the output's largest magnitude (fp16 / fp32 are tighter)
TOLERANCE = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-3}


# --------------------------------------------------------------------------------------------
# What the engine is configured with (inputs to its launcher), and the result records


@dataclass(frozen=True)
class EngineCall:
    """How the engine calls its kernel for this step, and what decodecalc predicts it launches."""

    system: str  # "vllm" | "sglang"
    plan: LaunchPlan
    # vLLM backend state (TritonAttentionMetadataBuilder)
    seq_threshold_3d: int = 0
    num_segments: int = 16
    scratch_rows: int = 0
    batch_invariant: bool = False
    # a FULL CUDA-graph replay runs a padded batch: (requests, tokens, max_seqlen_q at capture)
    pad_reqs: int = 0
    pad_tokens: int = 0
    max_seqlen_q: int | None = None
    # SGLang backend state
    max_kv_splits: int = 8
    sm_count: int = 0
    pad_seq_len: int = 1  # SGLang fills padded CUDA-graph rows with seq_len 1
    split_mode: str = "adaptive"  # "adaptive" (get_num_kv_splits_triton), "static", "deterministic"
    split_tile_size: int = 0

    @property
    def label(self) -> str:
        return self.system


@dataclass
class LaunchCheck:
    role: str
    kernel: str
    predicted_grid: list[int] | None
    observed_grid: list[int] | None
    predicted_working: int | None
    observed_working: int | None
    programs: int
    constexprs: dict[str, Any] = field(default_factory=dict)

    @property
    def grid_ok(self) -> bool:
        return self.predicted_grid == self.observed_grid

    @property
    def programs_ok(self) -> bool:
        return self.predicted_working == self.observed_working

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["grid_ok"] = self.grid_ok
        d["programs_ok"] = self.programs_ok
        return d


@dataclass
class RunResult:
    system: str
    source: str  # "upstream" | "reference"
    version: str
    status: str = "ok"  # "ok" | "mismatch" | "error"
    message: str = ""
    launches: list[LaunchCheck] = field(default_factory=list)
    aux_launches: list[dict[str, Any]] = field(default_factory=list)
    splits_predicted: list[int] = field(default_factory=list)
    splits_observed: list[int] = field(default_factory=list)
    nonempty_predicted: list[int] = field(default_factory=list)
    nonempty_observed: list[int] = field(default_factory=list)
    error: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, Any] = field(default_factory=dict)
    kv_bytes: int = 0
    gbps: float | None = None
    bandwidth_fraction: float | None = None
    roofline_us: float | None = None
    padded: list[int] | None = None  # [requests, tokens] of a padded CUDA-graph replay

    @property
    def grids_ok(self) -> bool:
        return bool(self.launches) and all(c.grid_ok for c in self.launches)

    @property
    def programs_ok(self) -> bool:
        return bool(self.launches) and all(c.programs_ok for c in self.launches)

    @property
    def splits_ok(self) -> bool:
        return self.splits_predicted == self.splits_observed and self.nonempty_predicted == self.nonempty_observed

    @property
    def error_ok(self) -> bool:
        return bool(self.error) and bool(self.error.get("ok"))

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def finish(self) -> "RunResult":
        if self.status == "error":
            return self
        bad = []
        if not self.grids_ok:
            bad.append("grid")
        if not self.programs_ok:
            bad.append("working programs")
        if not self.splits_ok:
            bad.append("splits")
        if not self.error_ok:
            bad.append("output error")
        if bad:
            self.status = "mismatch"
            self.message = "mismatch: " + ", ".join(bad)
        return self

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "launches"}
        d["launches"] = [c.to_json() for c in self.launches]
        d.update(grids_ok=self.grids_ok, programs_ok=self.programs_ok, splits_ok=self.splits_ok,
                 error_ok=self.error_ok)
        return d


@dataclass
class Environment:
    device: str  # "cuda" | "cpu"
    interpret: bool
    torch: str
    triton: str
    gpu_name: str = ""
    sm_count: int = 0
    capability: tuple[int, int] | None = None
    total_mem_gib: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# Environment


def detect_environment() -> Environment:
    """torch/triton present, and a CUDA GPU or TRITON_INTERPRET=1; else a DecodecalcError."""
    from decodecalc.verify import missing_requirements

    missing = missing_requirements()
    if missing:
        raise DecodecalcError(
            f"{' and '.join(missing)} not installed; verify needs torch and triton: pip install 'decodecalc[verify]' "
            "(on a CPU-only machine install torch==2.13.0 first)")
    interpret = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    import torch
    import triton

    if interpret:
        return Environment(device="cpu", interpret=True, torch=torch.__version__, triton=triton.__version__)
    if not torch.cuda.is_available():
        raise DecodecalcError(
            "no CUDA GPU visible and TRITON_INTERPRET is not set: run on a GPU, or set TRITON_INTERPRET=1 "
            "to run tiny shapes on the CPU through Triton's interpreter")
    props = torch.cuda.get_device_properties(0)
    return Environment(
        device="cuda", interpret=False, torch=torch.__version__, triton=triton.__version__, gpu_name=props.name,
        sm_count=props.multi_processor_count, capability=(props.major, props.minor),
        total_mem_gib=round(props.total_memory / 2**30, 1),
    )


def torch_dtype(name: str, env: Environment) -> tuple[Any, str]:
    """The torch dtype to run ``name`` in, and a note when it had to change (interpreter: bf16 -> fp16)."""
    import torch

    table = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if name not in table:
        raise UnsupportedError(f"verify runs bfloat16, float16 or float32 KV caches, not {name}")
    if env.interpret and name == "bfloat16":
        return torch.float16, "interpreter: bfloat16 run as float16 (the interpreter computes bf16 tl.dot wrongly)"
    return table[name], ""


def check_workload(work: Workload) -> None:
    if work.kv_cache_dtype != work.dtype:
        raise UnsupportedError(
            f"verify builds the KV cache in the model dtype; --kv-cache-dtype {work.kv_cache_dtype} "
            f"(with --dtype {work.dtype}) is not supported")
    if work.model.is_mla or work.head_size != work.head_size_v:
        raise UnsupportedError(f"{work.model.name}: verify covers MHA/GQA with equal K/V head sizes only")
    if work.head_size < 32 or work.head_size > 256:
        raise UnsupportedError(f"head size {work.head_size}: verify's kernels take 32..256")


# --------------------------------------------------------------------------------------------
# Inputs


@dataclass
class Inputs:
    """Tensors for one workload (padded to the engine's launch where a graph replay pads)."""

    q: Any  # [T_run, h, d]
    k_cache: Any  # [NB, bs, h_kv, d]
    v_cache: Any
    block_tables: Any  # [copies, B_run, max_blocks] int32
    seq_lens: Any  # [B_run] int32 (padded requests 0)
    query_start: Any  # [B_run + 1] int32
    kv_indptr: Any  # [B + 1] int32 (SGLang, real requests)
    kv_indices: Any  # [copies, sum L] int64 token slots
    sg_seq_lens: Any  # [B_sg] int32 (CUDA-graph padded rows: seq_len 1)
    b_sg: int
    copies: int
    scale: float
    dtype: Any
    kv_bytes: int
    b_real: int
    t_real: int
    b_run: int
    t_run: int


def kv_bytes_of(work: Workload, elt: int) -> int:
    return sum(work.seq_lens) * work.num_kv_heads * work.head_size * 2 * elt


@contextlib.contextmanager
def _oom_as_error(what: str) -> Iterator[None]:
    import torch

    try:
        yield
    except torch.cuda.OutOfMemoryError as exc:
        torch.cuda.empty_cache()
        raise DecodecalcError(f"out of GPU memory while {what}: {str(exc).splitlines()[0]}") from None


def build_inputs(
    work: Workload, env: Environment, *, copies: int, seed: int = 0, pad_reqs: int = 0, pad_tokens: int = 0,
    sg_pad_reqs: int = 0,
) -> tuple[Inputs, str]:
    import torch

    dtype, note = torch_dtype(work.dtype, env)
    dev = env.device
    elt = torch.tensor([], dtype=dtype).element_size()
    bs = work.block_size
    B, T = work.batch, work.num_tokens
    h, h_kv, d = work.num_heads, work.num_kv_heads, work.head_size
    nb = [cdiv(L, bs) for L in work.seq_lens]
    per_copy = sum(nb)
    max_nb = max(nb)
    b_run = max(B, pad_reqs)
    t_run = max(T, pad_tokens)
    b_sg = max(B, sg_pad_reqs)
    if dev == "cuda":
        free, _ = torch.cuda.mem_get_info()
        need_one = 2 * per_copy * bs * h_kv * d * elt + per_copy * bs * 4
        budget = int(free * 0.8) - (1 << 30)
        if need_one > budget:
            raise DecodecalcError(
                f"out of GPU memory: the KV cache of this workload needs {need_one / 2**30:.1f} GiB, "
                f"{free / 2**30:.1f} GiB free")
        copies = max(1, min(copies, budget // need_one))
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    with _oom_as_error("building the KV cache"):
        num_blocks = copies * per_copy + 1
        k_cache = torch.randn((num_blocks, bs, h_kv, d), generator=gen, device=dev, dtype=dtype)
        v_cache = torch.randn((num_blocks, bs, h_kv, d), generator=gen, device=dev, dtype=dtype)
        perm = torch.randperm(num_blocks - 1, generator=gen, device=dev).to(torch.int32) + 1  # block 0 unused
        tables = torch.zeros((copies, b_run, max_nb), dtype=torch.int32, device=dev)
        # SGLang padded rows (seq_len 1) read slot 0 of block 0, which no real sequence uses
        # int64 like SGLang's own kv_indices (token slots pass 2**31 / stride on large pools)
        indices = torch.zeros((copies, sum(work.seq_lens) + (b_sg - B)), dtype=torch.int64, device=dev)
        ar = torch.arange(bs, device=dev, dtype=torch.int32)
        for c in range(copies):
            off = c * per_copy
            tok = 0
            for i, n in enumerate(nb):
                blocks = perm[off:off + n]
                tables[c, i, :n] = blocks
                L = work.seq_lens[i]
                indices[c, tok:tok + L] = (blocks[:, None].long() * bs + ar[None, :]).reshape(-1)[:L]
                tok += L
                off += n
        q = torch.randn((max(t_run, b_sg), h, d), generator=gen, device=dev, dtype=dtype)
    lens = list(work.seq_lens) + [0] * (b_run - B)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
    starts = [0]
    for ql in work.query_lens:
        starts.append(starts[-1] + ql)
    starts += [T] * (b_run - B)  # padded requests: query length 0
    query_start = torch.tensor(starts, dtype=torch.int32, device=dev)
    indptr = [0]
    sg_lens = list(work.seq_lens) + [1] * (b_sg - B)
    for L in sg_lens:
        indptr.append(indptr[-1] + L)
    inputs = Inputs(
        q=q, k_cache=k_cache, v_cache=v_cache, block_tables=tables, seq_lens=seq_lens, query_start=query_start,
        kv_indptr=torch.tensor(indptr, dtype=torch.int32, device=dev), kv_indices=indices,
        sg_seq_lens=torch.tensor(sg_lens, dtype=torch.int32, device=dev), b_sg=b_sg, copies=copies,
        scale=1.0 / math.sqrt(d), dtype=dtype, kv_bytes=kv_bytes_of(work, elt), b_real=B, t_real=T,
        b_run=b_run, t_run=t_run,
    )
    return inputs, note


def pick_check_seqs(work: Workload, limit: int) -> list[int]:
    """Sequences checked against the float32 reference: all, or first/last/longest/shortest + spread."""
    B = work.batch
    if limit <= 0 or B <= limit:
        return list(range(B))
    lens = work.seq_lens
    pick = {0, B - 1, max(range(B), key=lambda i: lens[i]), min(range(B), key=lambda i: lens[i])}
    step = max(1, B // limit)
    i = 0
    while len(pick) < limit and i < B:
        pick.add(i)
        i += step
    return sorted(pick)[:max(limit, 4)]


# --------------------------------------------------------------------------------------------
# Running one (system, source)


class _Runner:
    """Builds the per-copy call of one (system, source) and the sentinel-filled buffers it writes."""

    def __init__(self, work: Workload, inp: Inputs, call: EngineCall, source: str, env: Environment,
                 vllm_src: str | None, sglang_src: str | None) -> None:
        import torch

        self.torch = torch
        self.work, self.inp, self.call, self.source, self.env = work, inp, call, source, env
        self.version = "reference"
        self.mod: Any  # VllmKernels or SglangKernels, set below for the upstream source only
        dev = env.device
        h, d = work.num_heads, work.head_size
        d_pad = next_power_of_2(d)
        self.out = torch.empty((max(inp.t_run, inp.b_sg), h, d), device=dev, dtype=inp.dtype)
        if call.system == "vllm":
            rows = call.scratch_rows
            S = call.num_segments
            self.segm_out = torch.empty((rows, h, S, d_pad), device=dev, dtype=torch.float32)
            self.segm_max = torch.empty((rows, h, S), device=dev, dtype=torch.float32)
            self.segm_sum = torch.empty((rows, h, S), device=dev, dtype=torch.float32)
            self.cu_q = inp.query_start
            self.max_q = call.max_seqlen_q or work.max_seqlen_q
            if source == "upstream":
                from decodecalc.verify.upstream import load_vllm

                cap = env.capability or (9, 0)
                with _quiet_versions():  # the command has already reported the version
                    self.mod = load_vllm(vllm_src, batch_invariant=call.batch_invariant, capability=cap,
                                         interpret=env.interpret)
                self.version = self.mod.source.version
        else:
            B = inp.b_sg
            S = call.max_kv_splits
            self.part_out = torch.empty((B, h, S, d), device=dev, dtype=torch.float32)
            self.part_lse = torch.empty((B, h, S), device=dev, dtype=torch.float32)
            self.num_kv_splits = torch.empty((B,), device=dev, dtype=torch.int32)
            self.sm_count = call.sm_count or env.sm_count
            self.use_pdl = (not env.interpret) and (env.capability or (0, 0)) >= (9, 0)
            if source == "upstream":
                from decodecalc.verify.upstream import load_sglang

                with _quiet_versions():
                    self.mod = load_sglang(sglang_src, interpret=env.interpret)
                self.version = self.mod.source.version
        self.k_buf = inp.k_cache.view(-1, work.num_kv_heads, d)
        self.v_buf = inp.v_cache.view(-1, work.num_kv_heads, d)

    def fill_sentinels(self) -> None:
        nan = float("nan")
        self.out.fill_(nan)
        if self.call.system == "vllm":
            self.segm_out.fill_(nan)
            self.segm_max.fill_(nan)
            self.segm_sum.fill_(nan)
        else:
            self.part_out.fill_(nan)
            self.part_lse.fill_(nan)
            self.num_kv_splits.fill_(-1)

    def step(self, copy: int) -> None:
        inp = self.inp
        bt = inp.block_tables[copy]
        if self.call.system == "vllm":
            if self.source == "upstream":
                self.mod.unified_attention(
                    q=inp.q[:inp.t_run], k=inp.k_cache, v=inp.v_cache, out=self.out[:inp.t_run], cu_seqlens_q=self.cu_q,
                    max_seqlen_q=self.max_q, seqused_k=inp.seq_lens, max_seqlen_k=self.work.max_seqlen_k,
                    softmax_scale=inp.scale, causal=True, window_size=(-1, -1), block_table=bt, softcap=0,
                    q_descale=None, k_descale=None, v_descale=None,
                    seq_threshold_3D=self.call.seq_threshold_3d, num_par_softmax_segments=self.call.num_segments,
                    softmax_segm_output=self.segm_out, softmax_segm_max=self.segm_max,
                    softmax_segm_expsum=self.segm_sum,
                )
            else:
                from decodecalc.verify import reference_kernels as rk

                use_3d = reference_use_3d(self.work, self.call, inp.b_run, inp.t_run, self.max_q)
                rk.run_split_kv(
                    q=inp.q[:inp.t_run], k_cache=inp.k_cache, v_cache=inp.v_cache, out=self.out[:inp.t_run],
                    query_start=self.cu_q,
                    seq_lens=inp.seq_lens, block_table=bt, scale=inp.scale, use_3d=use_3d,
                    num_segments=self.call.num_segments, segm_out=self.segm_out, segm_max=self.segm_max,
                    segm_sum=self.segm_sum,
                )
        else:
            idx = inp.kv_indices[copy]
            B = inp.b_sg
            if self.call.split_mode != "adaptive":  # host-side fills, as triton_backend.py does
                if self.call.split_mode == "static":
                    self.num_kv_splits.fill_(self.call.max_kv_splits)
                else:
                    t = self.call.split_tile_size
                    self.num_kv_splits.copy_((inp.sg_seq_lens + t - 1) // t)
            if self.source == "upstream":
                import triton

                if self.call.split_mode == "adaptive":
                    self.mod.get_num_kv_splits_triton[(1,)](
                        self.num_kv_splits, inp.sg_seq_lens, B, 1, self.work.num_heads, self.work.num_kv_heads,
                        self.call.max_kv_splits, self.sm_count, MAX_NUM_SEQ=max(256, triton.next_power_of_2(B)),
                    )
                self.mod.decode_attention_fwd(
                    inp.q[:B], self.k_buf, self.v_buf, self.out[:B], inp.kv_indptr, idx, self.part_out,
                    self.part_lse, self.num_kv_splits, self.call.max_kv_splits, inp.scale, 1.0, 1.0,
                    use_pdl=self.use_pdl,
                )
            else:
                from decodecalc.verify import reference_kernels as rk

                rk.run_grouped(
                    q=inp.q[:B], k_buffer=self.k_buf, v_buffer=self.v_buf, out=self.out[:B],
                    kv_indptr=inp.kv_indptr, kv_indices=idx, seq_lens=inp.sg_seq_lens, part_out=self.part_out,
                    part_lse=self.part_lse, num_kv_splits=self.num_kv_splits,
                    max_kv_splits=self.call.max_kv_splits, sm_count=self.sm_count, scale=inp.scale,
                    compute_splits=self.call.split_mode == "adaptive",
                )


@contextlib.contextmanager
def _quiet_versions() -> Iterator[None]:
    from decodecalc.verify.upstream import UpstreamVersionWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UpstreamVersionWarning)
        yield


def reference_use_3d(work: Workload, call: EngineCall, b_run: int, t_run: int, max_q: int) -> bool:
    """Our reference launcher takes the 2D/3D choice from the same model of vLLM 0.33.0's gate
    (decodecalc.launchers.vllm_unified.unified_attention_grid; only max query length, token and
    sequence counts enter it)."""
    from decodecalc.launchers.vllm_unified import unified_attention_grid

    return unified_attention_grid(
        num_tokens=t_run, seq_lens=(1,) * b_run, query_lens=(max_q,) * b_run, num_heads=work.num_heads,
        num_kv_heads=work.num_kv_heads, head_size=work.head_size, q_dtype_bytes=work.q_bytes, sliding_window=None,
        seq_threshold_3D=call.seq_threshold_3d, num_par_softmax_segments=call.num_segments,
        scratch_rows=call.scratch_rows if call.scratch_rows > 0 else None, batch_invariant=call.batch_invariant,
    ).use_3d


# --------------------------------------------------------------------------------------------
# Counting what the kernels did


def _count_vllm(r: _Runner, launches: list[Any]) -> tuple[list[int], list[int], list[int]]:
    """Working programs per attention launch, allocated and written segments per sequence."""
    torch = r.torch
    work, inp = r.work, r.inp
    h, h_kv = work.num_heads, work.num_kv_heads
    g = h // h_kv
    main = launches[0]
    block_q = int(main.constexprs.get("BLOCK_Q") or 1)
    is_3d = len(main.grid) == 3
    starts = inp.query_start.tolist()
    seq_of_tok = []
    qb_of_tok = []
    for i in range(inp.b_run):
        for t in range(starts[i], starts[i + 1]):
            seq_of_tok.append(i)
            qb_of_tok.append(starts[i] // block_q + i + (t - starts[i]) // block_q)
    t_real = len(seq_of_tok)
    qb = torch.tensor(qb_of_tok, dtype=torch.long)
    seq = torch.tensor(seq_of_tok, dtype=torch.long)
    out_written = (~torch.isnan(r.out[:t_real].float())).any(-1).cpu()  # [t, h]
    working = []
    if is_3d:
        S = main.grid[2]
        w = (~torch.isnan(r.segm_max[:t_real])).cpu().view(t_real, h_kv, g, S).any(2)  # [t, h_kv, S]
        tok, kvh, s = w.nonzero(as_tuple=True)
        ids = (qb[tok] * h_kv + kvh) * S + s
        working.append(int(torch.unique(ids).numel()))
        per_seq = w.any(1)  # [t, S]
        written = [int(per_seq[seq == i].any(0).sum()) for i in range(inp.b_real)]
        allocated = [S] * inp.b_real
    else:
        w = out_written.view(t_real, h_kv, g).any(2)
        tok, kvh = w.nonzero(as_tuple=True)
        working.append(int(torch.unique(qb[tok] * h_kv + kvh).numel()))
        written = [1 if bool(out_written[seq == i].any()) else 0 for i in range(inp.b_real)]
        allocated = [1] * inp.b_real
    if len(launches) > 1:
        working.append(int(out_written.sum()))
    return working, allocated, written


def _count_sglang(r: _Runner, launches: list[Any]) -> tuple[list[int], list[int], list[int]]:
    torch = r.torch
    work = r.work
    B = r.inp.b_sg
    real = r.inp.b_real
    h, h_kv = work.num_heads, work.num_kv_heads
    g = h // h_kv
    valid_h = min(16, g) if g > 1 else 1
    S = r.call.max_kv_splits
    w = (~torch.isnan(r.part_lse)).cpu()  # [B, h, S]
    b, head, s = w.nonzero(as_tuple=True)
    tiles = cdiv(h, valid_h)
    ids = (b * tiles + head // valid_h) * S + s
    working = [int(torch.unique(ids).numel())]
    working.append(int((~torch.isnan(r.out[:B].float())).any(-1).sum()))
    allocated = [int(x) for x in r.num_kv_splits.cpu().tolist()][:real]
    written = [int(x) for x in w.any(1).sum(1).tolist()][:real]
    return working, allocated, written


# --------------------------------------------------------------------------------------------
# One workload


class CudaFault(DecodecalcError):
    """A kernel faulted (illegal address, ...): the CUDA context is unusable for the rest of the process."""

    def __init__(self, message: str, partial: "WorkloadResult") -> None:
        super().__init__(f"CUDA fault, stopping: {message}")
        self.partial = partial


def is_cuda_fault(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return "AcceleratorError" in text or "CUDA error" in text or "illegal memory access" in text


@dataclass
class WorkloadResult:
    workload: dict[str, Any]
    runs: list[RunResult]
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "notes": self.notes, "runs": [r.to_json() for r in self.runs],
                "ok": self.ok}


def workload_json(work: Workload) -> dict[str, Any]:
    return {
        "model": work.model.name, "tp": work.tp, "num_heads": work.num_heads, "num_kv_heads": work.num_kv_heads,
        "head_size": work.head_size, "batch": work.batch, "seq_lens": list(work.seq_lens),
        "query_lens": list(work.query_lens), "dtype": work.dtype, "kv_cache_dtype": work.kv_cache_dtype,
        "block_size": work.block_size,
    }


def verify_workload(
    work: Workload,
    calls: list[EngineCall],
    env: Environment,
    *,
    sources: tuple[str, ...] = SOURCES,
    vllm_src: str | None = None,
    sglang_src: str | None = None,
    timing: bool = True,
    check_seqs: int = 4,
    seed: int = 0,
    bandwidth: float | None = None,
    rotate_bytes: int | None = None,
    replays: int = 5,
    progress: Callable[[str], None] | None = None,
    results: list[RunResult] | None = None,
) -> WorkloadResult:
    """Run every (call, source) for one workload. Appends each finished run to ``results`` too
    (so a caller can save partial results when a later run fails)."""
    import torch

    from decodecalc.verify import timing as tm
    from decodecalc.verify.torch_ref import reference_attention

    check_workload(work)
    notes: list[str] = []
    runs: list[RunResult] = []
    pad_reqs = max([c.pad_reqs for c in calls if c.system == "vllm"], default=0)
    pad_tokens = max([c.pad_tokens for c in calls if c.system == "vllm"], default=0)
    sg_pad = max([c.pad_reqs for c in calls if c.system == "sglang"], default=0)
    elt = torch.tensor([], dtype=torch_dtype(work.dtype, env)[0]).element_size()
    kv_bytes = kv_bytes_of(work, elt)
    copies = 1
    if timing and env.device == "cuda":
        copies = tm.copies_for(kv_bytes, rotate_bytes=rotate_bytes or tm.ROTATE_BYTES)
    inp, note = build_inputs(work, env, copies=copies, seed=seed, pad_reqs=pad_reqs, pad_tokens=pad_tokens,
                             sg_pad_reqs=sg_pad)
    if note:
        notes.append(note)
    checked = pick_check_seqs(work, check_seqs)
    with _oom_as_error("computing the float32 reference"):
        ref = reference_attention(inp.q, inp.k_cache, inp.v_cache, inp.block_tables[0], list(work.seq_lens),
                                  list(work.query_lens), inp.scale, seqs=checked)
    tol = TOLERANCE.get(str(inp.dtype).replace("torch.", ""), 2e-2)
    for call in calls:
        for source in sources:
            if progress:
                progress(f"{call.system} {source}")
            res = RunResult(system=call.system, source=source, version="")
            try:
                _run_one(work, inp, call, source, env, res, ref, tol, timing=timing, vllm_src=vllm_src,
                         sglang_src=sglang_src, bandwidth=bandwidth, replays=replays)
            except DecodecalcError as exc:
                res.status, res.message = "error", str(exc)
            except torch.cuda.OutOfMemoryError as exc:
                torch.cuda.empty_cache()
                res.status, res.message = "error", f"out of GPU memory: {str(exc).splitlines()[0]}"
            except Exception as exc:  # an upstream kernel failing to compile/run is a result, not a crash
                if is_cuda_fault(exc):  # the context is lost: nothing after this can run in this process
                    res.status, res.message = "error", f"CUDA fault: {str(exc).splitlines()[0]}"
                    runs.append(res)
                    if results is not None:
                        results.append(res)
                    raise CudaFault(str(exc).splitlines()[0], WorkloadResult(workload_json(work), runs, notes)) from None
                res.status, res.message = "error", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            runs.append(res)
            if results is not None:
                results.append(res)
    del inp
    if env.device == "cuda":
        torch.cuda.empty_cache()
    return WorkloadResult(workload_json(work), runs, notes)


def _run_one(work: Workload, inp: Inputs, call: EngineCall, source: str, env: Environment, res: RunResult,
             ref: dict[int, Any], tol: float, *, timing: bool, vllm_src: str | None, sglang_src: str | None,
             bandwidth: float | None, replays: int) -> None:
    import torch

    from decodecalc.verify import timing as tm
    from decodecalc.verify.capture import LaunchRecorder
    from decodecalc.verify.torch_ref import compare

    if call.system == "sglang" and work.max_seqlen_q > 1:
        raise UnsupportedError("SGLang's decode kernel takes one query token per sequence "
                               "(speculative verify runs extend attention)")
    r = _Runner(work, inp, call, source, env, vllm_src, sglang_src)
    res.version = r.version
    if call.pad_reqs > work.batch:
        res.padded = [inp.b_run, inp.t_run] if call.system == "vllm" else [inp.b_sg, inp.b_sg]
    r.fill_sentinels()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning)  # interpreter: NaN arithmetic in masked rows
        with LaunchRecorder(execute=True) as rec:
            r.step(0)
        if env.device == "cuda":
            torch.cuda.synchronize()
    aux = [la for la in rec.launches if la.name in AUX_KERNELS]
    attn = [la for la in rec.launches if la.name not in AUX_KERNELS]
    res.aux_launches = [{"kernel": la.name, "grid": list(la.grid)} for la in aux]
    if call.system == "vllm":
        working, allocated, written = _count_vllm(r, attn)
    else:
        working, allocated, written = _count_sglang(r, attn)
        if aux:
            res.aux_launches[0]["did_work"] = bool((r.num_kv_splits >= 0).all())
    plan = call.plan
    n = max(len(plan.kernels), len(attn))
    for i in range(n):
        pk = plan.kernels[i] if i < len(plan.kernels) else None
        ol = attn[i] if i < len(attn) else None
        res.launches.append(LaunchCheck(
            role=ROLE_NAMES.get(ol.name, ol.name) if ol else (pk.name if pk else "?"),
            kernel=ol.name if ol else "(not launched)",
            predicted_grid=list(pk.grid) if pk else None,
            observed_grid=list(ol.grid) if ol else None,
            predicted_working=pk.working_programs if pk else None,
            observed_working=working[i] if ol and i < len(working) else None,
            programs=math.prod(ol.grid) if ol else 0,
            constexprs={k: v for k, v in (ol.constexprs if ol else {}).items()
                        if k in ("BLOCK_M", "BLOCK_Q", "TILE_SIZE", "NUM_SEGMENTS_PER_SEQ", "NUM_SEGMENTS",
                                 "IS_3D", "BLOCK_N", "BLOCK_H", "MAX_KV_SPLITS", "MAX_SPLITS", "BLOCK_SIZE")},
        ))
    res.splits_predicted = list(plan.splits)
    res.nonempty_predicted = list(plan.nonempty_splits)
    res.splits_observed = allocated
    res.nonempty_observed = written
    err = compare(r.out[:inp.t_real], ref, list(work.query_lens))
    limit = tol
    err["tolerance"] = limit
    err["ok"] = err["nan_count"] == 0 and err["max_err_vs_max"] <= limit
    res.error = err
    res.kv_bytes = inp.kv_bytes
    bw = bandwidth
    if bw:
        res.roofline_us = inp.kv_bytes / bw * 1e6
    if timing and env.device == "cuda":
        t = tm.time_calls(r.step, inp.copies, replays=replays)
        res.timing = t.to_json()
        if t.t_us:
            res.gbps = inp.kv_bytes / (t.t_us * 1e-6) / 1e9
            if bw:
                res.bandwidth_fraction = res.gbps * 1e9 / bw
    else:
        res.timing = tm.not_timed("interpreter: not timed" if env.interpret else "timing off").to_json()
    res.finish()


# --------------------------------------------------------------------------------------------
# Engine calls from decodecalc's own predictions


def vllm_call(vplan: Any) -> EngineCall:
    """From :func:`decodecalc.launchers.vllm_unified.plan_vllm`'s result: the launch the engine runs
    (the padded FULL-graph replay when one runs), with the backend's threshold, segments, scratch."""
    be = vplan.backend
    invariant = vplan.settings.batch_invariant  # VLLM_BATCH_INVARIANT for the upstream module
    if vplan.replay is not None:
        rp = vplan.replay
        return EngineCall(
            system="vllm", plan=rp.plan, seq_threshold_3d=be.seq_threshold_3D,
            num_segments=be.num_par_softmax_segments, scratch_rows=be.scratch_rows,
            pad_reqs=rp.num_reqs_padded, pad_tokens=rp.num_tokens_padded, batch_invariant=invariant,
        )
    return EngineCall(system="vllm", plan=vplan.plan, seq_threshold_3d=be.seq_threshold_3D,
                      num_segments=be.num_par_softmax_segments, scratch_rows=be.scratch_rows,
                      batch_invariant=invariant)


def sglang_call(splan: Any, gpu: Any) -> EngineCall:
    """From :func:`decodecalc.launchers.sglang_triton.plan_sglang`'s result."""
    plan = splan.plan
    tile = 0
    if splan.mode == "deterministic" and splan.kv_len_per_split:
        tile = getattr(splan, "split_tile_size", 0) or 256
    return EngineCall(system="sglang", plan=plan, max_kv_splits=splan.max_kv_splits, sm_count=gpu.num_sms,
                      pad_reqs=plan.kernels[0].grid[0] if splan.padded_rows else 0, split_mode=splan.mode,
                      split_tile_size=tile)


def timed_wall(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0
