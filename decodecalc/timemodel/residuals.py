"""What the time model's physics still gets wrong on one GPU, measured: a map of its residuals.

The model (:mod:`decodecalc.timemodel.predict`) has a handful of numbers per kernel family. On the H200 its
errors are not noise but bias that depends on the regime a launch is in: SGLang's grouped stage 1 at one
program per SM runs 6-8% faster than predicted at 32:8 and 3% slower at 8:1; short splits in many waves
run slower than predicted (benchmarks/results/validate_tune_h200_steps.json). Four numbers per family
cannot follow that, and workload totals sum many launches of one regime, so the bias does not average out.

A :class:`ResidualMap` stores, per *cell* (the launch's main kernel family, its query heads per KV head and
its padded head dim; or a *layout cell*, the same with the KV heads per rank, which ``calibrate --model`` writes for
the layouts it timed), the measured log residuals ``log(measured / modelled)`` of the fit's launches, binned
in two coordinates:

* ``u = log2(mean loop iterations per working program)``: the work of one program;
* ``v = log2(working programs / (occupancy * num_sms))``: the waves of the launch (negative: one partial wave).

A launch's correction is ``exp(sum_i w_i n_i r_i / (sum_i w_i n_i + prior_launches))`` over the bins of its
cell, with Gaussian weights ``w_i = exp(-d_i^2 / 2 bandwidth^2)`` of the distance in (u, v) (octaves): a
smoothed local mean of the residuals of nearby measured launches, shrunk toward no correction where few were
measured (``prior_launches``), and exactly 1 far from every measurement or in a cell nobody measured. A launch
reads its layout cell where the map has one, else its (family, group, head dim) cell: the group-size cell pools
every layout of that group (8:1 and 64:8 alike), which on the H200 differ by up to 18% in SGLang's stage 1
(benchmarks/results/calibrate-h200-thorough-measurements.json, layouts-h200-group-sweep.json). A layout cell's
correction is its group cell's, moved by one offset for the layout: the mean log residual of the layout's timings
over what the group cell predicts at each, shrunk by ``layout_prior_launches``. Layout cells made from sampled
steps of a user's traffic (``calibrate --workload``) add a local term: the same smoothing as a group cell's, of what
group cell and offset leave (``layout_local_bandwidth_octaves``, ``layout_local_prior_launches``). The fit writes the
map (:func:`decodecalc.timemodel.recipe.with_residuals`); ``--explain`` shows the factor and its support.

Pure Python, no numpy: ``tune`` evaluates tens of thousands of launches, so lookups are memoized on a
1/16-octave grid of (u, v) (a 4% step, far below the bandwidth).
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from decodecalc.errors import ConfigError


# what this module reads of a profile and a launch (TimeProfile and LaunchWork; protocols, because the profile
# module imports this one to parse its ``residuals`` section)
class TimeProfile(Protocol):
    @property
    def num_sms(self) -> int: ...
    def family(self, name: str) -> Any: ...


class LaunchWork(Protocol):
    @property
    def kernels(self) -> tuple[Any, ...]: ...
    @property
    def group_size(self) -> int: ...
    @property
    def extra_launches(self) -> int: ...
    @property
    def aux_kernel(self) -> str: ...
    @property
    def kv_heads(self) -> int: ...

#: width of the bins the measured residuals are pooled in (octaves of u and v): well under the bandwidth, so
#: pooling moves no point by more than a third of it; 8,818 H200 rows fill 2,000-odd bins
BIN_OCTAVES = 0.25
#: Gaussian width of the smoothing (octaves); chosen on the fit's held-out shapes (benchmarks/fit_timemodel.py)
DEFAULT_BANDWIDTH_OCTAVES = 0.35
#: pseudo-launches of zero residual every correction is pooled with (shrinkage toward the physics)
DEFAULT_PRIOR_LAUNCHES = 4.0
#: ... of a layout cell's offset (calibrate --model): its points are single timings of one layout (a median of
#: CUDA-graph replays, 1-3% apart between runs) set against a layout bias of 5-18%
#: (benchmarks/results/calibrate-h200-thorough-measurements.json), so the offset is shrunk by one pseudo-timing of
#: none; chosen before it was scored
DEFAULT_LAYOUT_PRIOR_LAUNCHES = 1.0
#: a layout cell made from sampled steps of the user's own traffic (calibrate --workload) also gets a local term: the
#: Gaussian-smoothed mean, in (u, v), of its timings' residuals over group cell and offset, so that the correction can
#: differ between the traffic's regimes (vLLM 2D and 3D, SGLang's small and large splits), which one offset cannot
#: follow (Llama-3-405B's chat error changes sign between settings). The bandwidth is the group cells'; the prior (of
#: 2, 1, 0.5, 0.25, 0.1 launches) was chosen on Gemma-2-9B's and Llama-3-405B's later H200 steps and scored on the
#: other models (benchmarks/calibrate_workload_h200.py, benchmarks/results/calibrate-workload-h200.json). Dense
#: samples of one traffic support it; calibrate --model's 40 uniform timings do not (a local mean of them moved no
#: prediction), so they keep the offset
WORKLOAD_LOCAL_BANDWIDTH_OCTAVES = DEFAULT_BANDWIDTH_OCTAVES
WORKLOAD_LOCAL_PRIOR_LAUNCHES = 0.1
#: bins further than this many bandwidths away do not count (their weight is below 1e-2)
_CUTOFF_BANDWIDTHS = 3.0
#: memo grid of lookups (octaves)
_QUERY_STEP = 1 / 16
QUERY_STEP = _QUERY_STEP
#: the memo key's grid index of a layout cell's offset (no lookup reaches it: |u|, |v| stay below 2^20 steps)
_OFFSET = 1 << 40
#: a correction never leaves this range of factors (a map is data read from a file)
MAX_LOG_FACTOR = math.log(1.5)
#: the largest |log residual| a stored point may have (a bin measured 148x off the physics is a broken fit)
MAX_LOG_RESIDUAL = 5.0

Point = tuple[float, float, float, int]  # (u, v, mean log residual, launches)


def cell_key(family: str, group_size: int, head_dim: int, aux_kernel: str = "", kv_heads: int = 0) -> str:
    """``family/g<group>/d<head dim>``, plus ``/kv<KV heads per rank>`` for a layout cell, plus ``/<aux kernel>`` for
    launches behind a small kernel of their own (SGLang's adaptive split counts): the measured residuals of those
    differ by that kernel's real cost."""
    return (f"{family}/g{group_size}/d{head_dim}" + (f"/kv{kv_heads}" if kv_heads else "")
            + (f"/{aux_kernel}" if aux_kernel else ""))


def _kv_part(part: str) -> bool:
    return part[:2] == "kv" and part[2:].isdigit()


def is_layout_cell(cell: str) -> bool:
    """Whether ``cell`` is a layout cell (it names the KV heads per rank: a ``kv<N>`` part)."""
    return any(_kv_part(part) for part in cell.split("/"))


def group_cell_of(cell: str) -> str:
    """The group cell a layout cell refines (``cell`` without its ``kv<N>`` part)."""
    return "/".join(part for part in cell.split("/") if not _kv_part(part))


def launch_cells(lw: LaunchWork) -> tuple[str, str]:
    """(group cell, layout cell) of a launch: its main kernel's family, query heads per KV head and padded head dim,
    and the same with its KV heads per rank."""
    k = lw.kernels[0]
    aux = (lw.aux_kernel or f"x{lw.extra_launches}") if lw.extra_launches else ""
    return (cell_key(k.family, lw.group_size, k.head_dim, aux),
            cell_key(k.family, lw.group_size, k.head_dim, aux, lw.kv_heads))


def _uv(lw: LaunchWork, profile: TimeProfile) -> tuple[float, float]:
    k = lw.kernels[0]
    occ = k.occupancy or profile.family(k.family).occupancy_for(k.head_dim)
    n = k.programs
    mean_iters = sum(i * c for i, c in k.iters) / n if n else 1.0
    return math.log2(max(mean_iters, 1.0)), math.log2(max(n, 1) / (occ * profile.num_sms))


def launch_coordinates(lw: LaunchWork, profile: TimeProfile) -> tuple[str, float, float]:
    """(group cell, u, v) of a launch (:func:`launch_cells`); log2 of the mean loop iterations of its working
    programs and of its waves at the profile's occupancy."""
    return (launch_cells(lw)[0], *_uv(lw, profile))


@dataclass(frozen=True, slots=True)
class Correction:
    """One launch's residual correction and what it rests on."""

    factor: float  # multiply the modelled time by this
    cell: str
    u: float
    v: float
    support_launches: float  # Gaussian-weighted count of measured launches behind it


@dataclass(frozen=True, kw_only=True)
class ResidualMap:
    """Binned measured residuals per cell (module docstring). ``cells``: cell -> points (u, v, mean log residual,
    launches), u and v at bin centres."""

    cells: Mapping[str, tuple[Point, ...]]
    bandwidth_octaves: float = DEFAULT_BANDWIDTH_OCTAVES
    prior_launches: float = DEFAULT_PRIOR_LAUNCHES
    #: the prior of the layout cells (:func:`is_layout_cell`)
    layout_prior_launches: float = DEFAULT_LAYOUT_PRIOR_LAUNCHES
    #: the layout cells' local term (None: none, the offset alone): its bandwidth and prior (calibrate --workload)
    layout_local_bandwidth_octaves: float | None = None
    layout_local_prior_launches: float = WORKLOAD_LOCAL_PRIOR_LAUNCHES
    source: str = ""
    _memo: dict[tuple[str, int, int], tuple[float, float]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.bandwidth_octaves, (int, float)) and 0.05 <= self.bandwidth_octaves <= 4):
            raise ConfigError(f"residuals.bandwidth_octaves must be in [0.05, 4], got {self.bandwidth_octaves!r}")
        local = self.layout_local_bandwidth_octaves
        if local is not None and not (isinstance(local, (int, float)) and 0.05 <= local <= 4):
            raise ConfigError(f"residuals.layout_local_bandwidth_octaves must be in [0.05, 4], got {local!r}")
        for name in ("prior_launches", "layout_prior_launches", "layout_local_prior_launches"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 <= value <= 1e6):
                raise ConfigError(f"residuals.{name} must be in [0, 1e6], got {value!r}")

    @property
    def launches(self) -> int:
        return sum(p[3] for pts in self.cells.values() for p in pts)

    def _log_factor(self, cell: str, u: float, v: float) -> tuple[float, float]:
        return self.log_factor_at(cell, round(u / _QUERY_STEP), round(v / _QUERY_STEP))

    def log_factor_at(self, cell: str, iu: int, iv: int) -> tuple[float, float]:
        """(log factor, support) at the memo grid point (``iu``, ``iv``) = (u, v) / QUERY_STEP rounded (tune's batch
        evaluator looks up each distinct point of a workload once)."""
        key = (cell, iu, iv)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        if is_layout_cell(cell):  # the group cell's correction here, moved by the layout's own offset
            group_cell = group_cell_of(cell)
            group, support = self.log_factor_at(group_cell, iu, iv)
            offset, launches = self._layout_offset(cell)
            local = 0.0
            if self.layout_local_bandwidth_octaves is not None:  # what the offset leaves, near (u, v)
                local = self._smoothed(self.cells.get(cell, ()), iu, iv, self.layout_local_bandwidth_octaves,
                                       self.layout_local_prior_launches,
                                       lambda pu, pv: self._grid_log_factor(group_cell, pu, pv) + offset)[0]
            out = (max(-MAX_LOG_FACTOR, min(MAX_LOG_FACTOR, group + offset + local)), support + launches)
            self._memo[key] = out
            return out
        lf, den = self._smoothed(self.cells.get(cell, ()), iu, iv, self.bandwidth_octaves, self.prior_launches)
        out = (max(-MAX_LOG_FACTOR, min(MAX_LOG_FACTOR, lf)), den)
        self._memo[key] = out
        return out

    def _grid_log_factor(self, cell: str, u: float, v: float) -> float:
        return self.log_factor_at(cell, round(u / _QUERY_STEP), round(v / _QUERY_STEP))[0]

    @staticmethod
    def _smoothed(points: Iterable[Point], iu: int, iv: int, bandwidth: float, prior: float,
                  baseline: Any = None) -> tuple[float, float]:
        """(Gaussian-weighted mean of the points' residuals over ``baseline(u, v)`` (none: 0) near the grid point,
        shrunk by ``prior`` pseudo-launches of zero; the weight behind it)."""
        qu, qv = iu * _QUERY_STEP, iv * _QUERY_STEP
        h2 = 2 * bandwidth ** 2
        cut = (_CUTOFF_BANDWIDTHS * bandwidth) ** 2
        num = den = 0.0
        for pu, pv, r, n in points:
            d2 = (pu - qu) ** 2 + (pv - qv) ** 2
            if d2 <= cut:
                w = math.exp(-d2 / h2) * n
                num += w * (r - (baseline(pu, pv) if baseline is not None else 0.0))
                den += w
        return (num / (den + prior) if den else 0.0), den

    def _layout_offset(self, cell: str) -> tuple[float, int]:
        """(offset, launches) of a layout cell: the mean log residual of its timings over what its group cell
        predicts at each of them, shrunk by ``layout_prior_launches``. One number for the whole layout, because its
        timings are a few dozen launches spread over the (u, v) plane, each far from the next: a local mean of them
        moved no prediction of another batch of the same layout (each batch of
        benchmarks/results/layouts-h200-unseen.json left out in turn, against the other batches' layout cells)."""
        key = (cell, _OFFSET, 0)
        hit = self._memo.get(key)
        if hit is None:
            group = group_cell_of(cell)
            pts = self.cells.get(cell, ())
            num = sum(n * (r - self._grid_log_factor(group, pu, pv)) for pu, pv, r, n in pts)
            launches = sum(n for *_, n in pts)
            hit = (num / (launches + self.layout_prior_launches) if launches else 0.0, float(launches))
            self._memo[key] = hit
        return hit[0], int(hit[1])

    def with_family_alias(self, family: str, parent: str) -> ResidualMap:
        """This map with ``parent``'s cells also read by launches of ``family`` (a family that borrows its parent's
        numbers: decodecalc.timemodel.profile.FAMILY_FALLBACKS), unless it has cells of its own."""
        own, theirs = f"{family}/", f"{parent}/"
        if any(c.startswith(own) for c in self.cells) or not any(c.startswith(theirs) for c in self.cells):
            return self
        cells = dict(self.cells)
        cells.update({own + c[len(theirs):]: pts for c, pts in self.cells.items() if c.startswith(theirs)})
        return dataclasses.replace(self, cells=cells, _memo={})

    def cell_for(self, group_cell: str, layout_cell: str) -> str:
        """The cell a launch reads: its layout cell where this map has one, else its group cell."""
        return layout_cell if layout_cell in self.cells else group_cell

    def correction(self, lw: LaunchWork, profile: TimeProfile) -> Correction:
        u, v = _uv(lw, profile)
        cell = self.cell_for(*launch_cells(lw))
        lf, support = self._log_factor(cell, u, v)
        return Correction(factor=math.exp(lf), cell=cell, u=u, v=v, support_launches=support)

    def factor(self, lw: LaunchWork, profile: TimeProfile) -> float:
        return self.correction(lw, profile).factor

    def to_mapping(self) -> dict[str, Any]:
        layout = ({"layout_prior_launches": self.layout_prior_launches}
                  if any(is_layout_cell(c) for c in self.cells) else {})
        if self.layout_local_bandwidth_octaves is not None:
            layout.update(layout_local_bandwidth_octaves=self.layout_local_bandwidth_octaves,
                          layout_local_prior_launches=self.layout_local_prior_launches)
        return {"bandwidth_octaves": self.bandwidth_octaves, "prior_launches": self.prior_launches, **layout,
                "source": self.source, "bin_octaves": BIN_OCTAVES,
                "cells": {c: [[round(u, 4), round(v, 4), round(r, 5), n] for u, v, r, n in pts]
                          for c, pts in sorted(self.cells.items())}}


def build_residual_map(samples: Iterable[tuple[LaunchWork, float, float]], profile: TimeProfile, *,
                       bandwidth_octaves: float = DEFAULT_BANDWIDTH_OCTAVES,
                       prior_launches: float = DEFAULT_PRIOR_LAUNCHES, source: str = "",
                       layout_cells: bool = False, group_cells: bool = True) -> ResidualMap:
    """A map from measured launches: ``samples`` are (work, measured seconds, modelled seconds) with the
    model's time *without* a residual correction (:func:`decodecalc.timemodel.predict.model_launch_time_s`).
    ``group_cells``: pool by (family, group size, head dim); ``layout_cells``: also (or only) by layout."""
    bins: dict[str, dict[tuple[int, int], list[float]]] = defaultdict(lambda: defaultdict(list))
    for lw, measured_s, modelled_s in samples:
        if measured_s <= 0 or modelled_s <= 0:
            continue
        u, v = _uv(lw, profile)
        group, layout = launch_cells(lw)
        where = (*((group,) if group_cells else ()), *((layout,) if layout_cells and layout != group else ()))
        for cell in where:
            bins[cell][(round(u / BIN_OCTAVES), round(v / BIN_OCTAVES))].append(math.log(measured_s / modelled_s))
    # a bin's mean is kept within what a profile may hold (residual_map_from_mapping); corrections stop far below it
    cells = {c: tuple((iu * BIN_OCTAVES, iv * BIN_OCTAVES, max(-MAX_LOG_RESIDUAL, min(MAX_LOG_RESIDUAL, sum(rs) / len(rs))),
                       len(rs))
                      for (iu, iv), rs in sorted(b.items()))
             for c, b in bins.items()}
    return ResidualMap(cells=cells, bandwidth_octaves=bandwidth_octaves, prior_launches=prior_launches, source=source)


def residual_map_from_mapping(data: Any, origin: str) -> ResidualMap:
    """Parse the ``residuals`` section of a profile; ConfigError naming the field on any problem."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"'residuals' must be a mapping, got {type(data).__name__}")
    cells_raw = data.get("cells")
    if not isinstance(cells_raw, Mapping):
        raise ConfigError("'residuals.cells' must be a mapping of cell to points")
    if data.get("bin_octaves", BIN_OCTAVES) != BIN_OCTAVES:  # the cells' coordinates are in these bins
        raise ConfigError(f"residuals.bin_octaves must be {BIN_OCTAVES} (the only binning this version reads), "
                          f"got {data.get('bin_octaves')!r:.40}")
    cells: dict[str, tuple[Point, ...]] = {}
    for c, pts in cells_raw.items():
        if not isinstance(pts, list):
            raise ConfigError(f"residuals.cells.{c} must be a list of [u, v, log_residual, launches]")
        out = []
        for j, p in enumerate(pts):
            ok = (isinstance(p, list) and len(p) == 4 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                              and math.isfinite(x) for x in p)
                  and isinstance(p[3], int) and p[3] >= 1 and abs(p[2]) <= MAX_LOG_RESIDUAL and abs(p[0]) <= 64 and abs(p[1]) <= 64)
            if not ok:
                raise ConfigError(f"residuals.cells.{c}[{j}] must be [u, v, log_residual, launches] "
                                  f"(finite numbers, |log_residual| <= 5, launches a positive integer), got {p!r}")
            out.append((float(p[0]), float(p[1]), float(p[2]), int(p[3])))
        cells[str(c)] = tuple(out)
    try:
        bw = float(data.get("bandwidth_octaves", DEFAULT_BANDWIDTH_OCTAVES))
        prior = float(data.get("prior_launches", DEFAULT_PRIOR_LAUNCHES))
        layout_prior = float(data.get("layout_prior_launches", DEFAULT_LAYOUT_PRIOR_LAUNCHES))
        local_bw = data.get("layout_local_bandwidth_octaves")
        local_bw = None if local_bw is None else float(local_bw)
        local_prior = float(data.get("layout_local_prior_launches", WORKLOAD_LOCAL_PRIOR_LAUNCHES))
    except (TypeError, ValueError):
        raise ConfigError("residuals.bandwidth_octaves, prior_launches, layout_prior_launches, "
                          "layout_local_bandwidth_octaves and layout_local_prior_launches must be numbers") from None
    return ResidualMap(cells=cells, bandwidth_octaves=bw, prior_launches=prior, layout_prior_launches=layout_prior,
                       layout_local_bandwidth_octaves=local_bw, layout_local_prior_launches=local_prior,
                       source=str(data.get("source", "")) or origin)
