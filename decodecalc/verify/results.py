"""What one verify run observed next to what decodecalc predicted, and its JSON form (pure: no torch)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from decodecalc.workload import Workload

__all__ = ["LaunchCheck", "RunResult", "WorkloadResult", "workload_json"]


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
