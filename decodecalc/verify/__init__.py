"""Run the real upstream decode kernels (vLLM, SGLang), or decodecalc's reference kernels, and compare
what they launch and compute with decodecalc's prediction.  An optional side package: the core never
imports it, and nothing here imports torch or triton at import time.

Finding and loading the kernels
  * :mod:`~decodecalc.verify.locate` -- where the upstream sources are (a path, an installed package,
    ``./upstream/<name>-<version>`` from ``tools/fetch_upstream.sh``), and their versions;
  * :mod:`~decodecalc.verify.upstream` -- import the kernel modules from file, with small shims;
  * :mod:`~decodecalc.verify.engine` -- the one place that calls ``unified_attention``,
    ``get_num_kv_splits_triton`` and ``decode_attention_fwd`` with the engines' arguments;
  * :mod:`~decodecalc.verify.reference_common`, ``reference_split_kv``, ``reference_grouped`` --
    decodecalc's own Triton kernels in the two engines' launch shapes.

Running a step
  * :mod:`~decodecalc.verify.kv_cache` -- the one paged-KV-cache builder (rotating copies);
  * :mod:`~decodecalc.verify.timing` -- the one CUDA-graph timer;
  * :mod:`~decodecalc.verify.capture` -- record every Triton launch (:class:`RecordedLaunch`);
  * :mod:`~decodecalc.verify.recording` -- small synthetic calls for the recorded upstream launches;
  * :mod:`~decodecalc.verify.profiler` -- CUDA-profiler captures of compiled backends (FlashInfer, FA3, ...).

``decodecalc verify``
  * :mod:`~decodecalc.verify.environment` (GPU or interpreter, dtype), :mod:`~decodecalc.verify.calls`
    (the engine's configuration from decodecalc's plans), :mod:`~decodecalc.verify.tensors` (a
    workload's tensors), :mod:`~decodecalc.verify.step` (one kernel step and what it wrote),
    :mod:`~decodecalc.verify.results` (prediction vs observation), :mod:`~decodecalc.verify.runner`
    (one workload), :mod:`~decodecalc.verify.torch_ref` (float32 reference).

``decodecalc calibrate``: :mod:`~decodecalc.verify.calibration` times the fit's microbenchmarks.
"""

from __future__ import annotations

import importlib.util

__all__ = ["is_available", "missing_requirements"]


def missing_requirements() -> list[str]:
    """Names of the Python packages the verify machinery needs but cannot find."""
    return [name for name in ("torch", "triton") if importlib.util.find_spec(name) is None]


def is_available() -> bool:
    """True when torch and triton can be imported (no GPU needed: the interpreter works on CPU)."""
    return not missing_requirements()
