"""vLLM ROCm custom paged attention, upstream-launchers.md section 6; checked against vLLM 0.33.0's own
code by tests/test_oracles_vllm_rocm.py.

Launchers (vllm 0.33.0 ``csrc/rocm/attention_kernels.cuh``): ``paged_attention_custom_launcher``
(CDNA) L3432-3589 and ``paged_attention_custom_launcher_navi`` (RDNA) L3588-3759:
``PARTITION_SIZE = 256``, ``NTHR = 256``, grid ``(num_seqs, max_num_partitions, num_kv_heads)``:
one workgroup serves all ``g`` query heads of a KV head. CDNA: ``g`` 1..4 -> mfma4 kernel, 5..16 ->
mfma16; RDNA: mfma16 for every ``g``; otherwise "Unsupported gqa ratio". The reduce always runs:
grid ``(num_heads, num_seqs)``, block ``head_size``, ``npar_loops = cdiv(P, warp)`` with a 64-lane
warp on CDNA (at most 8) and 32 on RDNA (at most 16). (An older launcher, attention.cu @4388f06c,
skipped the reduce for one partition; 0.33.0 does not.)

Applicability: ``use_rocm_custom_paged_attention`` (vLLM v0.33.0 ``vllm/platforms/rocm.py``
L458-494), caller ``vllm/v1/attention/ops/chunked_prefill_paged_decode.py`` L391-454 (scratch
``tmp_output [num_seq_rows, h, P, d]`` in the query dtype, ``exp_sums``/``max_logits`` fp32).
"""

from __future__ import annotations

from decodecalc.derived import Explain, cdiv
from decodecalc.errors import UnsupportedError
from decodecalc.launchers.base import KernelLaunch, LaunchPlan, LengthKey
from decodecalc.launchers.details import RocmDetails
from decodecalc.launchers.guards import layer_window, require_decode, require_not_mla, require_vendor
from decodecalc.specs.gpus import GPUSpec
from decodecalc.workload import Workload

SRC_LAUNCH = "vllm 0.33.0 csrc/rocm/attention_kernels.cuh L3432-3589 paged_attention_custom_launcher"
SRC_LAUNCH_NAVI = "vllm 0.33.0 csrc/rocm/attention_kernels.cuh L3588-3759 paged_attention_custom_launcher_navi"
SRC_RULE = "vllm 0.33.0 vllm/platforms/rocm.py L458-494 use_rocm_custom_paged_attention"
SRC_CALLER = "vllm 0.33.0 vllm/v1/attention/ops/chunked_prefill_paged_decode.py L391-454"

# SRC_LAUNCH: PARTITION_SIZE is "fixed at 256 since both mfma4 and mfma16 kernels support it"; NTHR
# threads per workgroup; the reduce runs warp lanes x npar_loops: 64 x 8 on CDNA, 32 x 16 on RDNA (128 K).
PARTITION_SIZE = 256
NTHR = 256
WARP_SIZE = 64
WARP_SIZE_NAVI = 32  # the navi launcher's own `const int warp_size = 32`
MAX_NPAR_LOOPS = 8  # reduce supports up to 8 * 64 partitions = 128 K tokens
# vllm 0.33.0 vllm/platforms/rocm.py L458-494 (SRC_RULE): max_seq_len <= 128 K for the custom kernel
MAX_SEQ_LEN = 128 * 1024


def _is_rdna(gpu: GPUSpec) -> bool:
    return bool(gpu.gfx_arch) and str(gpu.gfx_arch).startswith("gfx1")


def check_applicable(w: Workload, gpu: GPUSpec, layer: str = "auto") -> None:
    """``use_rocm_custom_paged_attention`` (V33 rocm.py L458-494), raising the failed rule."""
    system = "vLLM ROCm custom paged attention"
    g = w.group_size
    d = w.head_size
    if _is_rdna(gpu):
        # RDNA (gfx1x): no sliding window, fp16/bf16, d = 128, block 16, 3 <= g <= 16, max_seq_len <= 128 K,
        # no ALiBi, auto KV dtype (the window, dtype and length checks found by tests/test_oracles_vllm_rocm.py)
        if layer_window(w, layer):
            raise UnsupportedError(f"{system}: sliding-window layers are not served ({SRC_RULE})")
        if w.dtype not in ("float16", "bfloat16"):
            raise UnsupportedError(f"{system} needs fp16/bf16 queries, got {w.dtype} ({SRC_RULE})")
        if w.max_seqlen_k > MAX_SEQ_LEN:
            raise UnsupportedError(f"{system}: max_seq_len {w.max_seqlen_k} > 128 K ({SRC_RULE})")
        if d != 128:
            raise UnsupportedError(f"{system} on RDNA needs head size 128, got {d} ({SRC_RULE})")
        if w.block_size != 16:
            raise UnsupportedError(f"{system} on RDNA needs block size 16, got {w.block_size} ({SRC_RULE})")
        if not 3 <= g <= 16:
            raise UnsupportedError(f"{system} on RDNA needs 3 <= g <= 16, got g = {g} ({SRC_RULE})")
        if w.kv_cache_dtype != w.dtype:
            raise UnsupportedError(f"{system} on RDNA needs the auto KV-cache dtype ({SRC_RULE})")
    else:
        # CDNA: no sliding window, fp16/bf16, d in {64, 128}, block 16 or 32, 1 <= g <= 16,
        # max_seq_len <= 128 K, no sinks
        if layer_window(w, layer):
            raise UnsupportedError(f"{system}: sliding-window layers are not served ({SRC_RULE})")
        if w.dtype not in ("float16", "bfloat16"):
            raise UnsupportedError(f"{system} needs fp16/bf16 queries, got {w.dtype} ({SRC_RULE})")
        if d not in (64, 128):
            raise UnsupportedError(f"{system}: head size {d} not supported (64 or 128) ({SRC_RULE})")
        if w.block_size not in (16, 32):
            raise UnsupportedError(f"{system}: block size {w.block_size} not allowed (16 or 32) ({SRC_RULE})")
        if not 1 <= g <= 16:
            raise UnsupportedError(f"{system}: GQA ratio {g} outside 1..16 ({SRC_RULE})")
        if w.max_seqlen_k > MAX_SEQ_LEN:
            raise UnsupportedError(f"{system}: max_seq_len {w.max_seqlen_k} > 128 K ({SRC_RULE})")


def plan_vllm_rocm(w: Workload, gpu: GPUSpec, *, layer: str = "auto", check_platform: bool = True) -> LaunchPlan:
    """The custom ROCm decode launch; raises UnsupportedError where vLLM falls back to Triton."""
    system = "vLLM ROCm custom paged attention"
    require_vendor(gpu, "amd", system, check_platform)
    require_not_mla(w, system)
    require_decode(w, system)
    check_applicable(w, gpu, layer)
    ex = Explain()
    B, h, h_kv, d, g = w.batch, w.num_heads, w.num_kv_heads, w.head_size, w.group_size
    maxL = w.max_seqlen_k
    P = ex.add("max_num_partitions", cdiv(maxL, PARTITION_SIZE), "cdiv(max_context_len, PARTITION_SIZE)",
               SRC_LAUNCH, max_context_len=maxL, PARTITION_SIZE=PARTITION_SIZE)
    navi = _is_rdna(gpu)
    src = SRC_LAUNCH_NAVI if navi else SRC_LAUNCH
    kernel = ex.add("kernel", "paged_attention_ll4mi_QKV_mfma4_kernel" if (g <= 4 and not navi) else
                    "paged_attention_ll4mi_QKV_mfma16_kernel", "mfma4 if gqa_ratio <= 4 and not rdna else mfma16",
                    src, gqa_ratio=g, rdna=navi)
    nonempty = tuple(cdiv(L, PARTITION_SIZE) for L in w.seq_lens)
    warp = WARP_SIZE_NAVI if navi else WARP_SIZE
    npar_loops = ex.add("npar_loops", cdiv(P, warp), "cdiv(max_num_partitions, warp_size)", src,
                        max_num_partitions=P, warp_size=warp)
    kernels = [KernelLaunch(name=kernel, grid=(B, P, h_kv), working_programs=h_kv * sum(nonempty),
                            constexprs={"NTHR": NTHR, "GQA_RATIO": g, "PARTITION_SIZE": PARTITION_SIZE,
                                        "BLOCK_SIZE": w.block_size, "HEAD_SIZE": d})]
    # the reduce runs for every launch, one partition included (L3552-3588, navi L3700-3757)
    kernels.append(KernelLaunch(name="paged_attention_ll4mi_reduce_kernel", grid=(h, B), working_programs=h * B,
                                constexprs={"block": d, "NPAR_LOOPS": npar_loops}))
    per_split = d * w.q_bytes + 8
    per = ex.add("partial_state_bytes_per_token_head", P * per_split,
                 "max_num_partitions * (d * sizeof(q dtype) + 4 + 4)", SRC_CALLER,
                 max_num_partitions=P, d=d, dtype=w.dtype, unit="bytes")
    allocated = B * h * per
    used = sum(n * h * per_split for n in nonempty)
    return LaunchPlan(
        system="vllm-rocm", kernels=tuple(kernels), splits=(P,) * B, nonempty_splits=nonempty,
        tokens_per_split=tuple(min(PARTITION_SIZE, L) for L in w.seq_lens),
        partial_state_bytes=allocated, partial_state_bytes_used=used,
        scratch_bytes=allocated, explain=ex.items(),
        details=RocmDetails(kernel=kernel, max_num_partitions=P, npar_loops=npar_loops, source=SRC_LAUNCH),
    )


def length_key(w: Workload) -> LengthKey:
    """For the sweep: the launch depends on the length through its partition count and the 128 K limit."""
    return LengthKey(lambda L: (cdiv(L, PARTITION_SIZE), L > MAX_SEQ_LEN),
                     lambda p, L: min(PARTITION_SIZE, L))
