"""Predict the time of a decode-attention launch from the work its programs do.

Pure Python (no torch, no numpy): the CLI imports it for ``recommend``, ``grid`` and ``compare``.

The model, per kernel family (``vllm_2d``, ``vllm_3d``, ``vllm_reduce``, ``sglang_stage1`` (SGLang's
grouped GQA/MQA kernel ``_fwd_grouped_kernel_stage1``), ``sglang_mha_stage1`` (SGLang's MHA kernel
``_fwd_kernel_stage1``: one query head per program, BLOCK_N 64, no tensor-core dot), ``sglang_stage1_fp8`` (the
grouped kernel on an fp8 KV cache: ``work.sglang_stage1_family``), ``sglang_stage2``,
and the ``ref_*`` families of decodecalc's own kernels):

* A launch is a set of *working programs*; program ``i`` runs ``n_i`` loop iterations, each
  moving ``b`` bytes from HBM (one KV tile of K and V, or one partial state for a merge).
  Programs that exit at once (vLLM's surplus q-block programs) only cost
  ``idle_program_s`` each, spread over the SMs.
* At most ``max_programs_per_sm`` programs are resident on one SM (occupancy, from the
  kernel's registers and shared memory: data of the profile, one value per GPU and family).
  ``c = min(occupancy, ceil(N / num_sms))`` programs share the busiest SM.
* One iteration of a program takes ``t_it = max(latency_s + b / program_bandwidth_bytes_per_s
  + min(c, occupancy - sm_saturation_gap) * b / sm_bandwidth_bytes_per_s, n * b / hbm_bandwidth_bytes_per_s)``
  (``sm_saturation_gap``: the SM's load path saturates that many programs short of full occupancy): an unloaded round
  trip (the dependent loads of the loop body that the kernel's pipelining does not hide), the
  time one program's warps need to stream its tile (their own loads in flight and the math on
  them, so it scales with the head dim), and the time the SM's load path needs to take in the
  bytes of its ``c`` programs, unless all ``n`` resident programs of the GPU together ask more
  of HBM than its achievable bandwidth. This is Little's law: an SM moves ``c * b / t_it`` bytes/s, growing with
  its bytes in flight ``c * b`` towards ``sm_bandwidth``; the GPU moves at most
  ``hbm_bandwidth`` (about the 4.2-4.3 TB/s a device-to-device copy reaches on an H200).
* Programs run in waves of ``occupancy * num_sms``; a program takes
  ``program_overhead_s + n_i * t_it``; the last, partial wave runs at its own lower
  concurrency (the tail). Ragged work is scheduled as a list over the slots.
* Each kernel of the launch adds ``launch_overhead_s`` (graph replay, so no CPU cost); a
  two-kernel split launch pays its merge kernel with the same model.
* That physics (:func:`~decodecalc.timemodel.predict.model_launch_time_s`, what the fit fits) is multiplied by
  the profile's measured residual factor for the launch's regime (:mod:`.residuals`: per kernel cell, a smoothed
  mean of ``log(measured / modelled)`` over work per program and waves; 1 where nothing was measured).

Parameters live in a :class:`TimeProfile` (YAML, ``decodecalc/profiles/<gpu>.yaml`` packaged,
or ``$XDG_CONFIG_HOME/decodecalc/profiles/<gpu>.yaml`` from ``decodecalc calibrate``).
A GPU with neither falls back to datasheet figures and every prediction is marked
uncalibrated.

The package: :mod:`.profile` (parameters and where they come from), :mod:`.work` (the work a launch
plan does), :mod:`.predict` (the time of that work), :mod:`.residuals` (the measured residual map),
:mod:`.fit` (fitting a profile to measured launches).
"""

from __future__ import annotations

from decodecalc.timemodel.predict import (
    TIE_FRACTION,
    Prediction,
    kernel_time_s,
    launch_time_s,
    predict_plan,
    predict_time_s,
    robust_time_s,
)
from decodecalc.timemodel.profile import (
    FAMILIES,
    FAMILY_FALLBACKS,
    KERNEL_FAMILIES,
    PROFILE_SCHEMA,
    FamilyParams,
    TimeProfile,
    occupancy,
    kernel_families,
    profile_from_mapping,
)
from decodecalc.timemodel.profile_sources import (
    datasheet_profile,
    dump_profile,
    load_profile_file,
    packaged_profile,
    resolve_profile,
    user_profile_dir,
)
from decodecalc.timemodel.plan_work import work_for_plan
from decodecalc.timemodel.work import (
    KernelWork,
    LaunchWork,
    WorkShape,
    sglang_work,
    vllm_work,
)

__all__ = [
    "TIE_FRACTION", "FAMILIES", "FAMILY_FALLBACKS", "KERNEL_FAMILIES", "PROFILE_SCHEMA", "FamilyParams", "KernelWork", "LaunchWork", "WorkShape",
    "TimeProfile", "datasheet_profile", "dump_profile", "kernel_families", "kernel_time_s", "launch_time_s", "load_profile_file",
    "occupancy", "packaged_profile", "Prediction", "predict_plan", "predict_time_s", "profile_from_mapping", "resolve_profile", "robust_time_s",
    "sglang_work", "user_profile_dir", "vllm_work", "work_for_plan",
]
