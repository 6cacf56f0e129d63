"""The common shape of a modeled decode-attention launch, whatever system produced it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from decodecalc.derived import Derived, prod


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelLaunch:
    """One kernel launch: its grid and how many of its programs do real work."""

    name: str
    grid: tuple[int, ...]
    working_programs: int
    constexprs: dict[str, Any] = field(default_factory=dict)

    @property
    def programs(self) -> int:
        return prod(self.grid)


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchPlan:
    """What one system launches for one layer of one decode step on one rank.

    ``splits`` is the number of KV splits each sequence is cut into as the kernel allocates
    them (1 = unsplit); ``nonempty_splits`` those that read at least one key.
    ``partial_state_bytes`` is what stage 1 may write for the whole launch (every allocated
    split of every launched token and query head); ``partial_state_bytes_used`` only the
    splits that do work. ``scratch_bytes`` are the persistent buffers the backend allocates.
    """

    system: str
    kernels: tuple[KernelLaunch, ...]
    splits: tuple[int, ...]
    nonempty_splits: tuple[int, ...]
    tokens_per_split: tuple[int, ...]
    partial_state_bytes: int
    partial_state_bytes_used: int
    scratch_bytes: int
    explain: tuple[Derived, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def main(self) -> KernelLaunch:
        return self.kernels[0]

    @property
    def merge(self) -> KernelLaunch | None:
        return self.kernels[1] if len(self.kernels) > 1 else None

    @property
    def grid(self) -> tuple[int, ...]:
        return self.main.grid
