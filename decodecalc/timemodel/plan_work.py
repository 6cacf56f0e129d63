"""Which work a launch plan does: the dispatch from a launcher's LaunchPlan to the time model's work.

vLLM's and SGLang's Triton plans (and decodecalc's reference kernels in their layouts) become work in
:mod:`decodecalc.timemodel.work`; the other backends' plans in :mod:`decodecalc.timemodel.backends`.
This module sits above both, so neither imports the other.
"""

from __future__ import annotations

import dataclasses

from decodecalc.errors import ConfigError
from decodecalc.launchers.base import KernelKind, LaunchPlan
from decodecalc.timemodel import backends, work
from decodecalc.timemodel.profile import KERNEL_FAMILIES
from decodecalc.timemodel.work import LaunchWork, WorkShape

#: the kinds of vLLM's and SGLang's Triton launches (set by launchers/vllm_unified.py and sglang_triton.py)
_VLLM_KINDS = frozenset({KernelKind.VLLM_UNIFIED_2D, KernelKind.VLLM_UNIFIED_3D, KernelKind.VLLM_REDUCE_SEGMENTS})
_SGLANG_STAGE1 = frozenset({KernelKind.SGLANG_GROUPED_STAGE1, KernelKind.SGLANG_MHA_STAGE1})
_SGLANG_KINDS = _SGLANG_STAGE1 | {KernelKind.SGLANG_STAGE2}


def work_for_plan(plan: LaunchPlan, workload: WorkShape, kernel: str) -> LaunchWork:
    """The work of a LaunchPlan of vLLM's or SGLang's launcher (read from the kinds the launcher set on
    its kernels); ``kernel`` says whose kernels run it: vllm, sglang, or reference (decodecalc's own
    kernels in the plan's layout; also reference-vllm / reference-sglang)."""
    kinds = {k.kind for k in plan.kernels}
    if kernel == "reference":
        kernel = "reference-vllm" if kinds & _VLLM_KINDS else "reference-sglang"
    if kernel in ("vllm", "reference-vllm") and kinds & _VLLM_KINDS:
        prefix = "vllm" if kernel == "vllm" else "ref_vllm"
        main = next(k for k in plan.kernels if k.kind in (KernelKind.VLLM_UNIFIED_2D, KernelKind.VLLM_UNIFIED_3D))
        tile = int(main.constexprs["TILE_SIZE"]) if main.constexprs.get("TILE_SIZE") else None
        if main.kind is KernelKind.VLLM_UNIFIED_3D:
            seg = int(main.constexprs.get("NUM_SEGMENTS_PER_SEQ", max(plan.splits or (1,))))
            return work.vllm_work(workload, splits=seg, use_3d=True, tile=tile, prefix=prefix)
        return work.vllm_work(workload, splits=1, use_3d=False, tile=tile, prefix=prefix)
    if kernel in ("sglang", "reference-sglang") and kinds & _SGLANG_KINDS:
        stage1 = next((k for k in plan.kernels if k.kind in _SGLANG_STAGE1), None)
        max_s = stage1.grid[2] if stage1 is not None and len(stage1.grid) == 3 else None
        per_seq = tuple(plan.splits or (1,))
        seq = per_seq if len(per_seq) == len(workload.seq_lens) else (max(per_seq),)
        mha = None if stage1 is None else stage1.kind is KernelKind.SGLANG_MHA_STAGE1
        lw = work.sglang_work(workload, splits=seq if len(seq) > 1 else seq[0], max_kv_splits=max_s,
                         adaptive=plan.aux_launches > 0, prefix="sglang" if kernel == "sglang" else "ref_sglang",
                         mha=mha)
        if kernel == "reference-sglang":  # run_grouped always launches its split-count kernel
            lw = dataclasses.replace(lw, extra_launches=1)
        return lw
    if kernel in backends.BACKEND_KERNELS and kinds & backends.BACKEND_KINDS:
        return backends.backend_work(plan, workload, kernel)
    raise ConfigError(f"no time model for kernel {kernel!r} on a {plan.system} launch; known: vllm, sglang, "
                      f"reference, {', '.join(k for k in KERNEL_FAMILIES if k.startswith('reference'))}")
