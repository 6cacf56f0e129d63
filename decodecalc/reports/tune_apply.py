"""How to apply a tuned setting, per engine: the words and the lines to copy (each under 80 columns)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from decodecalc.reports.tune_space import EngineCandidate, SglangCandidate, VllmCandidate

#: (in words; the shell lines or flags to copy)
Applied = tuple[tuple[str, ...], tuple[str, ...]]

TRITON_ATTN_MODULE = "vllm.v1.attention.backends.triton_attn"  # vLLM 0.33.0: the two constants at L58-59


def vllm_apply(best: EngineCandidate, default: EngineCandidate, ctx: Any) -> Applied:
    """vLLM: the two constants of the installed triton_attn.py, edited in place."""
    assert isinstance(best, VllmCandidate) and isinstance(default, VllmCandidate)
    s, m = best.segments, best.min_grid
    d_s, d_m = default.segments, default.min_grid
    t = max(0, m // ctx.work.num_kv_heads)
    words = (f"edit the two constants of vllm/v1/attention/backends/triton_attn.py (vLLM 0.33.0, L58-59) in the "
             f"installed package: NUM_PAR_SOFTMAX_SEGMENTS {d_s} -> {s}, MIN_LAUNCH_GRID_SIZE_2D {d_m} -> {m}",
             f"the 3D (split) path then runs the steps with num_seqs x cdiv(query length, BLOCK_Q) up to "
             f"seq_threshold_3D = {m} // {ctx.work.num_kv_heads} KV heads = {t} ({t} sequences of one query "
             "token), snapped to the nearest CUDA-graph capture size; both constants apply to every batch and "
             "the split-K scratch grows with the threshold and the segment count")
    cmds = (f"M={TRITON_ATTN_MODULE}",
            'F=$(python -c "import $M as m; print(m.__file__)")',
            f"sed -i 's/^\\(NUM_PAR_SOFTMAX_SEGMENTS =\\) [0-9]*/\\1 {s}/' \"$F\"",
            f"sed -i 's/^\\(MIN_LAUNCH_GRID_SIZE_2D =\\) [0-9]*/\\1 {m}/' \"$F\"")
    return words, cmds


def sglang_apply(best: EngineCandidate, default: EngineCandidate, ctx: Any) -> Applied:
    """SGLang: the server's flag (and the static-splits environment variable) on its whole launch line."""
    assert isinstance(best, SglangCandidate)
    m, static = best.max_kv_splits, best.static
    launch = _sglang_launch_line(ctx, m)
    if static:
        return ((f"launch the server (python -m sglang.launch_server) with --triton-attention-num-kv-splits {m} and "
                 f"the environment variable SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS=1 (every sequence then gets "
                 f"{m} split{'s' * (m > 1)})",),
                ("export SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS=1", *launch))
    return ((f"launch the server (python -m sglang.launch_server) with --triton-attention-num-kv-splits {m} (the "
             "maximum of the adaptive rule; leave SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS unset)",),
            ("unset SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS", *launch))


def _sglang_launch_line(ctx: Any, max_kv_splits: int) -> tuple[str, str]:
    """SGLang's launch command with the tuned flag, as two shell lines (a continuation) under 80 columns: the
    model's Hugging Face id where the library knows it, else a placeholder to fill in."""
    model = ctx.work.model.hf_id or "MODEL_PATH"
    return (f"python -m sglang.launch_server --model-path {model} \\",
            f"  --tp {ctx.work.tp} --attention-backend triton --triton-attention-num-kv-splits {max_kv_splits}")


#: the engines' apply functions, by name (the settings are reports/tune_space.py's candidate records)
APPLY: dict[str, Callable[[EngineCandidate, EngineCandidate, Any], Applied]] = {"vllm": vllm_apply,
                                                                                "sglang": sglang_apply}
