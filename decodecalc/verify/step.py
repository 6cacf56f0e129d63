"""One decode step of one (system, kernel source) on a workload's tensors: the sentinel-filled
buffers the kernels write, the call itself (upstream kernels through :mod:`decodecalc.verify.engine`,
or decodecalc's reference kernels), and counting what the kernels did from the rows they wrote.
Imports torch and triton inside functions only."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

from decodecalc.derived import next_power_of_2
from decodecalc.errors import UnsupportedError
from decodecalc.launchers.sglang_triton import head_tiles, heads_per_program
from decodecalc.verify import engine
from decodecalc.verify.calls import EngineCall, reference_use_3d
from decodecalc.verify.environment import Environment
from decodecalc.verify.tensors import StepTensors
from decodecalc.workload import Workload

__all__ = ["STEPS", "KernelStep", "SglangStep", "VllmStep", "count_sglang", "count_vllm", "make_step",
           "step_padding"]


@contextlib.contextmanager
def _quiet_versions() -> Iterator[None]:
    from decodecalc.verify.locate import UpstreamVersionWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UpstreamVersionWarning)
        yield


class KernelStep:
    """One (system, source) on one workload's tensors: the buffers its kernels write, filled with sentinels, the
    per-copy call, and what the rows written say the kernels did. One subclass per engine (:data:`STEPS`); the
    runner never branches on the engine."""

    system = ""

    def __init__(self, work: Workload, inp: StepTensors, call: EngineCall, source: str, env: Environment,
                 src: str | None) -> None:
        import torch

        self.torch = torch
        self.work, self.inp, self.call, self.source, self.env = work, inp, call, source, env
        self.version = "reference"
        self.mod: Any = None  # VllmKernels or SglangKernels, for the upstream source only
        self.out = torch.empty((max(inp.t_run, inp.b_sg), work.num_heads, work.head_size), device=env.device,
                               dtype=inp.dtype)
        self.k_buf = inp.k_cache.view(-1, work.num_kv_heads, work.head_size)
        self.v_buf = inp.v_cache.view(-1, work.num_kv_heads, work.head_size)

    @staticmethod
    def padding(call: EngineCall) -> dict[str, int]:
        """The padded rows this engine's call needs in the shared tensors (:func:`build_step_tensors`'s keywords)."""
        raise NotImplementedError

    @staticmethod
    def check(work: Workload) -> None:
        """Refuse a workload this engine's decode kernel cannot run (an UnsupportedError)."""

    def padded(self) -> list[int]:
        """The (requests, tokens) the padded launch runs."""
        raise NotImplementedError

    def fill_sentinels(self) -> None:
        raise NotImplementedError

    def step(self, copy: int) -> None:
        raise NotImplementedError

    def count(self, launches: list[Any]) -> tuple[list[int], list[int], list[int]]:
        """Working programs per attention launch, allocated and written splits per sequence."""
        raise NotImplementedError

    def note_aux(self, aux: list[dict[str, Any]]) -> None:
        """Add what the metadata kernels did to their JSON rows (nothing by default)."""


class VllmStep(KernelStep):
    system = "vllm"

    def __init__(self, work: Workload, inp: StepTensors, call: EngineCall, source: str, env: Environment,
                 src: str | None) -> None:
        super().__init__(work, inp, call, source, env, src)
        torch, dev, h = self.torch, env.device, work.num_heads
        rows, S, d_pad = call.scratch_rows, call.num_segments, next_power_of_2(work.head_size)
        self.segm_out = torch.empty((rows, h, S, d_pad), device=dev, dtype=torch.float32)
        self.segm_max = torch.empty((rows, h, S), device=dev, dtype=torch.float32)
        self.segm_sum = torch.empty((rows, h, S), device=dev, dtype=torch.float32)
        self.cu_q = inp.query_start
        self.max_q = call.max_seqlen_q or work.max_seqlen_q
        if source == "upstream":
            from decodecalc.verify.upstream import load_vllm

            with _quiet_versions():  # the command has already reported the version
                self.mod = load_vllm(src, batch_invariant=call.batch_invariant, capability=env.capability or (9, 0),
                                     interpret=env.interpret)
            self.version = self.mod.source.version

    @staticmethod
    def padding(call: EngineCall) -> dict[str, int]:
        return {"pad_reqs": call.pad_reqs, "pad_tokens": call.pad_tokens}

    def padded(self) -> list[int]:
        return [self.inp.b_run, self.inp.t_run]

    def fill_sentinels(self) -> None:
        for t in (self.out, self.segm_out, self.segm_max, self.segm_sum):
            t.fill_(float("nan"))

    def step(self, copy: int) -> None:
        inp, call = self.inp, self.call
        bt = inp.block_tables[copy]
        if self.source == "upstream":
            engine.vllm_unified_attention(
                self.mod, q=inp.q[:inp.t_run], k=inp.k_cache, v=inp.v_cache, out=self.out[:inp.t_run],
                cu_seqlens_q=self.cu_q, max_seqlen_q=self.max_q, seqused_k=inp.seq_lens,
                max_seqlen_k=self.work.max_seqlen_k, block_table=bt, softmax_scale=inp.scale,
                seq_threshold_3D=call.seq_threshold_3d, num_par_softmax_segments=call.num_segments,
                softmax_segm_output=self.segm_out, softmax_segm_max=self.segm_max, softmax_segm_expsum=self.segm_sum,
            )
            return
        from decodecalc.verify.reference_split_kv import run_split_kv

        use_3d = reference_use_3d(self.work, call, inp.b_run, inp.t_run, self.max_q)
        run_split_kv(
            q=inp.q[:inp.t_run], k_cache=inp.k_cache, v_cache=inp.v_cache, out=self.out[:inp.t_run],
            query_start=self.cu_q, seq_lens=inp.seq_lens, block_table=bt, scale=inp.scale, use_3d=use_3d,
            num_segments=call.num_segments, segm_out=self.segm_out, segm_max=self.segm_max, segm_sum=self.segm_sum,
        )

    def count(self, launches: list[Any]) -> tuple[list[int], list[int], list[int]]:
        return count_vllm(self, launches)


class SglangStep(KernelStep):
    system = "sglang"

    def __init__(self, work: Workload, inp: StepTensors, call: EngineCall, source: str, env: Environment,
                 src: str | None) -> None:
        super().__init__(work, inp, call, source, env, src)
        torch, dev = self.torch, env.device
        B, h, S, d = inp.b_sg, work.num_heads, call.max_kv_splits, work.head_size
        self.part_out = torch.empty((B, h, S, d), device=dev, dtype=torch.float32)
        self.part_lse = torch.empty((B, h, S), device=dev, dtype=torch.float32)
        self.num_kv_splits = torch.empty((B,), device=dev, dtype=torch.int32)
        self.sm_count = call.sm_count or env.sm_count
        self.use_pdl = (not env.interpret) and (env.capability or (0, 0)) >= (9, 0)
        if source == "upstream":
            from decodecalc.verify.upstream import load_sglang

            with _quiet_versions():
                self.mod = load_sglang(src, interpret=env.interpret)
            self.version = self.mod.source.version

    @staticmethod
    def padding(call: EngineCall) -> dict[str, int]:
        return {"sg_pad_reqs": call.pad_reqs}

    @staticmethod
    def check(work: Workload) -> None:
        if work.max_seqlen_q > 1:
            raise UnsupportedError("SGLang's decode kernel takes one query token per sequence "
                                   "(speculative verify runs extend attention)")

    def padded(self) -> list[int]:
        return [self.inp.b_sg, self.inp.b_sg]

    def fill_sentinels(self) -> None:
        for t in (self.out, self.part_out, self.part_lse):
            t.fill_(float("nan"))
        self.num_kv_splits.fill_(-1)

    def step(self, copy: int) -> None:
        inp, call = self.inp, self.call
        idx = inp.kv_indices[copy]
        B = inp.b_sg
        if call.split_mode != "adaptive":  # host-side fills, as triton_backend.py does
            if call.split_mode == "static":
                self.num_kv_splits.fill_(call.max_kv_splits)
            else:
                t = call.split_tile_size
                self.num_kv_splits.copy_((inp.sg_seq_lens + t - 1) // t)
        if self.source == "upstream":
            if call.split_mode == "adaptive":
                engine.sglang_num_kv_splits(
                    self.mod, num_kv_splits=self.num_kv_splits, seq_lens=inp.sg_seq_lens, num_seq=B, num_group=1,
                    num_head=self.work.num_heads, num_kv_head=self.work.num_kv_heads,
                    max_kv_splits=call.max_kv_splits, device_core_count=self.sm_count,
                )
            engine.sglang_decode_attention(
                self.mod, q=inp.q[:B], k_buffer=self.k_buf, v_buffer=self.v_buf, o=self.out[:B],
                kv_indptr=inp.kv_indptr, kv_indices=idx, attn_logits=self.part_out, attn_lse=self.part_lse,
                num_kv_splits=self.num_kv_splits, max_kv_splits=call.max_kv_splits, sm_scale=inp.scale,
                use_pdl=self.use_pdl,
            )
            return
        from decodecalc.verify.reference_grouped import run_grouped

        run_grouped(
            q=inp.q[:B], k_buffer=self.k_buf, v_buffer=self.v_buf, out=self.out[:B],
            kv_indptr=inp.kv_indptr, kv_indices=idx, seq_lens=inp.sg_seq_lens, part_out=self.part_out,
            part_lse=self.part_lse, num_kv_splits=self.num_kv_splits, max_kv_splits=call.max_kv_splits,
            sm_count=self.sm_count, scale=inp.scale, compute_splits=call.split_mode == "adaptive",
        )

    def count(self, launches: list[Any]) -> tuple[list[int], list[int], list[int]]:
        return count_sglang(self, launches)

    def note_aux(self, aux: list[dict[str, Any]]) -> None:
        if aux:  # get_num_kv_splits_triton wrote every row
            aux[0]["did_work"] = bool((self.num_kv_splits >= 0).all())


#: the engines verify runs: EngineCall.system -> its step
STEPS: dict[str, type[KernelStep]] = {"vllm": VllmStep, "sglang": SglangStep}


def make_step(work: Workload, inp: StepTensors, call: EngineCall, source: str, env: Environment,
              sources: dict[str, str | None]) -> KernelStep:
    """The step of ``call``'s engine; ``sources``: each engine's upstream source path (None: locate it)."""
    cls = STEPS[call.system]
    cls.check(work)
    return cls(work, inp, call, source, env, sources.get(call.system))


def step_padding(calls: list[EngineCall]) -> dict[str, int]:
    """The padded rows the shared tensors need for every call (the largest each engine asks)."""
    pads: dict[str, int] = {}
    for call in calls:
        for key, n in STEPS[call.system].padding(call).items():
            pads[key] = max(pads.get(key, 0), n)
    return pads


def count_vllm(r: VllmStep, launches: list[Any]) -> tuple[list[int], list[int], list[int]]:
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


def count_sglang(r: SglangStep, launches: list[Any]) -> tuple[list[int], list[int], list[int]]:
    torch = r.torch
    work = r.work
    B = r.inp.b_sg
    real = r.inp.b_real
    h, h_kv = work.num_heads, work.num_kv_heads
    valid_h = heads_per_program(h, h_kv)  # a stage-1 program's query heads (SGLang's rule, the core's copy)
    S = r.call.max_kv_splits
    w = (~torch.isnan(r.part_lse)).cpu()  # [B, h, S]
    b, head, s = w.nonzero(as_tuple=True)
    ids = (b * head_tiles(h, h_kv) + head // valid_h) * S + s
    working = [int(torch.unique(ids).numel())]
    working.append(int((~torch.isnan(r.out[:B].float())).any(-1).sum()))
    allocated = [int(x) for x in r.num_kv_splits.cpu().tolist()][:real]
    written = [int(x) for x in w.any(1).sum(1).tolist()][:real]
    return working, allocated, written
