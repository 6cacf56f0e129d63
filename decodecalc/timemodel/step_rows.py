"""Per-step timing rows (a workload's step under one launch) as time-model measurements, and what
``calibrate --workload`` times (:class:`StepLaunch`, :class:`WorkloadSample`: built by
:mod:`decodecalc.reports.step_launches`, timed by :mod:`decodecalc.verify.calibration`).

The rows are what ``calibrate --workload`` and ``benchmarks/validate_tune_h200.py --per-step`` measure: a ragged
step's KV lengths, the engine's launch (:mod:`decodecalc.reports.step_launches`) and its time. The launch work is
rebuilt from the stored launch by today's work functions (:mod:`decodecalc.timemodel.work`), so a refit recomputes it
with the model of its day.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from decodecalc.errors import ConfigError
from decodecalc.timemodel.fit import Measurement, Shape
from decodecalc.timemodel.work import COPY_KERNEL, SPLIT_COUNT_KERNEL, sglang_work, vllm_work

@dataclass(frozen=True)
class StepLaunch:
    """One sampled step under one launch, and the settings of tune's search that make it."""

    step: int  # index of the step in the workload
    seq_lens: tuple[int, ...]
    engine: str  # vllm | sglang
    launch: Mapping[str, Any]  # module doc
    engine_split_kernel: bool  # SGLang adaptive: the engine's split-count kernel runs before stage 1
    settings: tuple[str, ...]  # labels of the candidates making this launch

    def row(self) -> dict[str, Any]:
        """The per-step timing row without its time (``t_us`` is added once measured)."""
        return {"shape_index": self.step, "seq_lens": list(self.seq_lens), "engine": self.engine,
                "launch": dict(self.launch), "engine_split_kernel": self.engine_split_kernel,
                "entries": list(self.settings)}


@dataclass(frozen=True)
class WorkloadSample:
    """What ``calibrate --workload`` times: sampled steps of one workload of one model, each under every launch of
    :func:`candidate_step_launches`, with the head layout per rank they run with."""

    model: str
    tp: int
    source: str  # the workload, as the user named it
    num_heads: int  # per rank
    num_kv_heads: int
    head_size: int
    head_size_v: int
    num_steps: int  # steps of the whole workload
    launches: tuple[StepLaunch, ...]

    @property
    def steps(self) -> list[int]:
        return sorted({x.step for x in self.launches})

    def saved(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The ``workload`` record of ``calibrate --save-measurements`` (what ``--from-measurements`` refits from)."""
        return {"model": self.model, "tp": self.tp, "source": self.source, "num_heads": self.num_heads,
                "num_kv_heads": self.num_kv_heads, "head_size": self.head_size, "head_size_v": self.head_size_v,
                "num_steps": self.num_steps, "sampled_steps": self.steps, "rows": [dict(r) for r in rows]}


#: what a saved row may hold (a file is data: nothing in it may cost more than the calibration did)
MAX_BATCH = 4096
MAX_SEQ_LEN = 1 << 24
MAX_SPLITS = 1 << 16


def step_measurement(row: Mapping[str, Any], *, num_heads: int, num_kv_heads: int, head_size: int,
                     head_size_v: int | None = None, model: str = "") -> Measurement:
    """One per-step timing row as a measurement of the head layout (per rank) it was timed with."""
    shape = Shape(num_heads=num_heads, num_kv_heads=num_kv_heads, seq_lens=tuple(int(x) for x in row["seq_lens"]),
                  head_size=head_size, head_size_v=head_size_v or head_size)
    launch = row["launch"]
    if row["engine"] == "vllm":
        s = int(launch["segments"]) if launch["use_3d"] else 1
        work = vllm_work(shape, splits=s, use_3d=bool(launch["use_3d"]))
        variant = f"vllm-3d-S{s}" if launch["use_3d"] else "vllm-2d"
    else:
        splits = tuple(int(x) for x in launch["splits"])
        # the counts came from the engine's split-count kernel or (a proposed rule) a copy
        work = sglang_work(shape, splits=splits, max_kv_splits=int(launch["max_kv_splits"]),
                           adaptive=bool(launch["adaptive"]),
                           aux_kernel=SPLIT_COUNT_KERNEL if row.get("engine_split_kernel", True) else COPY_KERNEL)
        s = max(splits)
        variant = f"sglang-step-M{launch['max_kv_splits']}{'-a' if launch['adaptive'] else ''}"
    return Measurement(shape=shape, kernel=str(row["engine"]), variant=variant, splits=s,
                       time_s=float(row["t_us"]) * 1e-6, work=work, model=model)


def _int(v: Any, top: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= top


def check_step_row(r: Any, where: str) -> None:
    """A saved per-step row, or a ConfigError naming the field."""
    if not isinstance(r, Mapping):
        raise ConfigError(f"{where}: expected an object")
    lens = r.get("seq_lens")
    if not isinstance(lens, list) or not 1 <= len(lens) <= MAX_BATCH or not all(_int(x, MAX_SEQ_LEN) for x in lens):
        raise ConfigError(f"{where}: field 'seq_lens': expected 1 to {MAX_BATCH:,} integers in [1, {MAX_SEQ_LEN:,}]")
    t = r.get("t_us")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < 1e8:
        raise ConfigError(f"{where}: field 't_us': {t!r}; expected microseconds in (0, 1e8)")
    launch = r.get("launch")
    if not isinstance(launch, Mapping):
        raise ConfigError(f"{where}: field 'launch': expected an object")
    engine = r.get("engine")
    if engine == "vllm":
        if not isinstance(launch.get("use_3d"), bool) or not _int(launch.get("segments"), MAX_SPLITS):
            raise ConfigError(f"{where}: field 'launch': a vLLM launch needs 'use_3d' (true or false) and 'segments' "
                              f"(an integer in [1, {MAX_SPLITS:,}])")
    elif engine == "sglang":
        splits, top = launch.get("splits"), launch.get("max_kv_splits")
        if (not _int(top, MAX_SPLITS) or not isinstance(splits, list) or len(splits) != len(lens)
                or not all(_int(x, top or 0) for x in splits) or not isinstance(launch.get("adaptive"), bool)):
            raise ConfigError(f"{where}: field 'launch': an SGLang launch needs 'max_kv_splits' (an integer in "
                              f"[1, {MAX_SPLITS:,}]), 'splits' ({len(lens)} integers in [1, max_kv_splits]) and "
                              "'adaptive' (true or false)")
    else:
        raise ConfigError(f"{where}: field 'engine': {engine!r}; valid: vllm, sglang")
