"""How far off a predicted time is likely to be: the measured error of the same kernel's predictions on launches no
fit of the profile saw, split by whether the profile's fit measured the launch's head layout.

A profile may carry ``fit.expected_error`` (the H200 profile's is written by ``benchmarks/expected_error.py`` from
committed measurements)::

    expected_error:
      source: ...
      goals: {median: 0.03, p90: 0.08}        # issue 18's single-shape goals
      kernels:
        vllm:                                 # a --kernel / compare policy name; "<kernel>/fp8" for an e4m3 KV cache
          fitted_layouts: ["32:8 d128", ...]  # per-rank head layouts (num_heads:num_kv_heads d<head size>) the fit saw
          fitted_layout: {rows, layouts, median_abs_err, p90_abs_err, evidence}  # new shapes of those layouts
          new_layout: {rows, layouts, median_abs_err, p90_abs_err, evidence}     # layouts no fit saw
          workload_totals: {fitted_layout: {...}, new_layout: {...}}  # the same, of whole workloads' totals
                                              # (tune's), each also with within_5pct and max_abs_err
          in_graph: {fitted_layout: {...}, new_layout: {...}}  # launches in a decode layer's graph (--regime in-graph)

A ``new_layout`` figure covers the layout classes (:func:`layout_class`: MHA or the query-group range, and the head
size) of the layouts left out behind it: its ``layout_classes`` list, or, where it has none (the figures of
``calibrate``'s folds, which leave out each fitted layout in turn), the classes of ``fitted_layouts``. A layout no
fit saw whose class no left-out layout had gets no expected error (:func:`missing_evidence` says why), so that no
command prints a ± the data do not back.

Either figure may be absent (no such evidence); a launch then gets no expected error. Errors are
``|predicted / measured - 1|`` per launch (per workload total for ``workload_totals``), as everywhere in
:mod:`decodecalc.timemodel.fit`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from decodecalc.errors import ConfigError

#: issue 18's single-shape goals on data no fit saw (median, 90th percentile of |predicted / measured - 1|)
GOAL_MEDIAN = 0.03
GOAL_P90 = 0.08
#: and for whole workloads' totals: at least 95% of them within 5%, none beyond 10%
GOAL_TOTALS_WITHIN_5PCT = 0.95
GOAL_TOTALS_MAX = 0.10
FIGURES = ("fitted_layout", "new_layout")
_FIGURE_KEYS = ("rows", "layouts", "median_abs_err", "p90_abs_err", "evidence")


def percentile(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` with linear interpolation between ranks (NaN of none): every error figure's."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def layout_key(num_heads: int, num_kv_heads: int, head_size: int) -> str:
    """A per-rank head layout as the fits and the leave-out folds name it: ``32:8 d128``."""
    return f"{num_heads}:{num_kv_heads} d{head_size}"


#: query-group sizes per layout class (upper bounds): one query head per KV head is MHA; GQA by how many share one
GROUP_CLASSES = ((1, "MHA"), (4, "g2-4"), (8, "g5-8"), (16, "g9-16"))


def layout_class(num_heads: int, num_kv_heads: int, head_size: int) -> str:
    """The class a per-rank head layout's expected error is judged by: its group class and head size, e.g.
    ``MHA d64``, ``g5-8 d128``. A layout no fit saw gets a figure only where left-out layouts of its class back it."""
    g = max(1, num_heads // max(1, num_kv_heads))
    name = next((n for top, n in GROUP_CLASSES if g <= top), "g17+")
    return f"{name} d{head_size}"


def class_of_key(layout: str) -> str:
    """:func:`layout_class` of a :func:`layout_key` string (``32:8 d128`` -> ``g2-4 d128``)."""
    heads, d = layout.split()
    h, hkv = heads.split(":")
    return layout_class(int(h), int(hkv), int(d[1:]))


def kernel_key(kernel: str, kv_bytes_per_element: int) -> str:
    """The ``kernels`` entry of a launch: the kernel name, ``/fp8`` added on a one-byte KV cache (its own families)."""
    return f"{kernel}/fp8" if kv_bytes_per_element == 1 else kernel


@dataclass(frozen=True, slots=True)
class ExpectedError:
    """The error a launch's predicted time is likely to have, and the evidence it comes from."""

    kernel: str  # the ``kernels`` entry it was read from
    layout: str  # the launch's per-rank head layout
    layout_fitted: bool  # the profile's fit measured this layout (then: new shapes of fitted layouts)
    median_abs_err: float
    p90_abs_err: float
    rows: int  # launches behind the figure
    layouts: int  # head layouts behind the figure
    evidence: str
    goal_median: float = GOAL_MEDIAN
    goal_p90: float = GOAL_P90
    of: str = "launch"  # what the figure is the error of: "launch" or "workload total"
    regime: str = "back-to-back"  # the timing regime of the evidence (timemodel.profile.REGIMES)
    within_5pct: float | None = None  # the share within 5% (workload totals)
    max_abs_err: float | None = None

    @property
    def meets_goal(self) -> bool:
        if self.of == "workload total":
            return (self.within_5pct is not None and self.within_5pct >= GOAL_TOTALS_WITHIN_5PCT
                    and self.max_abs_err is not None and self.max_abs_err <= GOAL_TOTALS_MAX)
        return self.median_abs_err <= self.goal_median and self.p90_abs_err <= self.goal_p90

    @property
    def goal(self) -> dict[str, float]:
        if self.of == "workload total":
            return {"within_5pct": GOAL_TOTALS_WITHIN_5PCT, "max_abs_err": GOAL_TOTALS_MAX}
        return {"median_abs_err": self.goal_median, "p90_abs_err": self.goal_p90}

    @property
    def basis(self) -> str:
        return "fitted head layout" if self.layout_fitted else "head layout no fit saw"

    def text(self) -> str:
        """``±3.4% median, 12% p90 (head layout no fit saw; misses 3%/8% goal)``: how every command words it."""
        within = f", {100 * self.within_5pct:.0f}% within 5%" if self.within_5pct is not None else ""
        if self.of == "workload total":
            miss = f"misses {100 * GOAL_TOTALS_WITHIN_5PCT:.0f}%-within-5% goal"
        else:
            miss = f"misses {100 * self.goal_median:.0f}%/{100 * self.goal_p90:.0f}% goal"
        return (f"±{100 * self.median_abs_err:.1f}% median, {100 * self.p90_abs_err:.0f}% p90{within} ({self.basis}"
                + ("" if self.meets_goal else f"; {miss}") + ")")

    def to_json(self) -> dict[str, Any]:
        """``predicted_error`` of grid / compare --json."""
        out = {"of": self.of, "regime": self.regime, "median_abs_err": round(self.median_abs_err, 4),
               "p90_abs_err": round(self.p90_abs_err, 4), "layout": self.layout, "layout_fitted": self.layout_fitted,
               "rows": self.rows, "layouts": self.layouts, "evidence": self.evidence,
               "goal": self.goal, "meets_goal": self.meets_goal}
        if self.within_5pct is not None:
            out["within_5pct"] = round(self.within_5pct, 4)
        if self.max_abs_err is not None:
            out["max_abs_err"] = round(self.max_abs_err, 4)
        return out


def check_block(block: Any) -> None:
    """Raise :class:`ConfigError` naming the first malformed key of a profile's ``fit.expected_error``."""
    where = "'fit.expected_error'"
    if not isinstance(block, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {type(block).__name__}")
    goals = block.get("goals", {})
    if not isinstance(goals, Mapping) or not all(isinstance(goals.get(k, 0.0), (int, float)) for k in ("median", "p90")):
        raise ConfigError(f"{where}.goals must map median and p90 to numbers, got {goals!r:.80}")
    kernels = block.get("kernels")
    if not isinstance(kernels, Mapping):
        raise ConfigError(f"{where}.kernels must be a mapping of kernel names, got {kernels!r:.60}")
    for name, rec in kernels.items():
        at = f"{where}.kernels.{name}"
        if not isinstance(rec, Mapping):
            raise ConfigError(f"{at} must be a mapping, got {type(rec).__name__}")
        lays = rec.get("fitted_layouts", [])
        if not (isinstance(lays, list) and all(isinstance(x, str) for x in lays)):
            raise ConfigError(f"{at}.fitted_layouts must be a list of layouts like '32:8 d128', got {lays!r:.60}")
        _check_figures(rec, at)
        for sub in ("workload_totals", "in_graph"):
            figs = rec.get(sub)
            if figs is not None:
                if not isinstance(figs, Mapping):
                    raise ConfigError(f"{at}.{sub} must be a mapping, got {type(figs).__name__}")
                _check_figures(figs, f"{at}.{sub}")


def _check_figures(rec: Mapping[str, Any], at: str) -> None:
    for fig in FIGURES:
        f = rec.get(fig)
        if f is None:
            continue
        if not isinstance(f, Mapping) or any(k not in f for k in _FIGURE_KEYS):
            raise ConfigError(f"{at}.{fig} must hold {', '.join(_FIGURE_KEYS)}, got {f!r:.80}")
        for k in ("median_abs_err", "p90_abs_err", "max_abs_err", "within_5pct"):
            v = f.get(k, 0.0)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < 100.0:
                raise ConfigError(f"{at}.{fig}.{k} must be a fraction >= 0 (0.05 = 5%), got {v!r}")
        for k in ("rows", "layouts"):
            if isinstance(f[k], bool) or not isinstance(f[k], int) or f[k] < 1:
                raise ConfigError(f"{at}.{fig}.{k} must be a positive integer, got {f[k]!r}")
        classes = f.get("layout_classes")
        if classes is not None and not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)):
            raise ConfigError(f"{at}.{fig}.layout_classes must be a list of classes like 'g5-8 d128', got "
                              f"{classes!r:.60}")


def expected_error(profile: Any, kernel: str, num_heads: int, num_kv_heads: int, head_size: int,
                   kv_bytes_per_element: int, *, of: str = "launch", regime: str = "back-to-back") -> ExpectedError | None:
    """The expected error of ``kernel``'s predicted time for a launch (``of="launch"``) or a whole workload's total
    (``of="workload total"``, tune's) of this per-rank head layout under ``profile``, in a timing ``regime``
    (``back-to-back``; ``in-graph``: launches only), or None where the profile holds no such evidence (another GPU's
    datasheet profile, a kernel or KV format without a record, a figure the record lacks). Every command's
    ``predicted_error`` comes from here."""
    if of not in ("launch", "workload total") or regime not in ("back-to-back", "in-graph"):
        raise ValueError(f"of={of!r}, regime={regime!r}")
    block = (getattr(profile, "fit", None) or {}).get("expected_error")
    if not block:
        return None
    key = kernel_key(kernel, kv_bytes_per_element)
    rec = (block.get("kernels") or {}).get(key)
    if rec is None:
        return None
    layout = layout_key(num_heads, num_kv_heads, head_size)
    fitted = layout in (rec.get("fitted_layouts") or ())
    if regime == "in-graph":
        figures = (rec.get("in_graph") or {}) if of == "launch" else {}
    else:
        figures = rec if of == "launch" else (rec.get("workload_totals") or {})
    fig = figures.get("fitted_layout" if fitted else "new_layout")
    if fig is None or (not fitted and class_of_key(layout) not in covered_classes(rec, fig)):
        return None
    goals = block.get("goals") or {}
    return ExpectedError(kernel=key, layout=layout, layout_fitted=fitted, median_abs_err=float(fig["median_abs_err"]),
                         p90_abs_err=float(fig["p90_abs_err"]), rows=int(fig["rows"]), layouts=int(fig["layouts"]),
                         evidence=str(fig["evidence"]), goal_median=float(goals.get("median", GOAL_MEDIAN)),
                         goal_p90=float(goals.get("p90", GOAL_P90)), of=of, regime=regime,
                         within_5pct=float(fig["within_5pct"]) if "within_5pct" in fig else None,
                         max_abs_err=float(fig["max_abs_err"]) if "max_abs_err" in fig else None)


def covered_classes(rec: Mapping[str, Any], fig: Mapping[str, Any]) -> frozenset[str]:
    """The layout classes a ``new_layout`` figure covers (module doc)."""
    classes = fig.get("layout_classes")
    if classes is None:
        classes = [class_of_key(x) for x in rec.get("fitted_layouts") or ()]
    return frozenset(str(c) for c in classes)


def missing_evidence(profile: Any, kernel: str, work: Any, *, of: str = "launch") -> str | None:
    """Why a layout no fit saw gets no expected error although ``kernel`` has a left-out figure: no left-out layout of
    its class (None when it has one, or when the profile has no figure at all)."""
    if not getattr(profile, "calibrated", False):
        return None
    block = (getattr(profile, "fit", None) or {}).get("expected_error") or {}
    rec = (block.get("kernels") or {}).get(kernel_key(kernel, work.kv_bytes_per_element))
    if rec is None:
        return None
    layout = layout_key(work.num_heads, work.num_kv_heads, work.head_size)
    if layout in (rec.get("fitted_layouts") or ()):
        return None
    figures = rec if of == "launch" else (rec.get("workload_totals") or {})
    fig = figures.get("new_layout")
    if fig is None:
        return None
    cls = class_of_key(layout)
    have = covered_classes(rec, fig)
    if cls in have:
        return None
    what = "totals" if of == "workload total" else "launches"
    return (f"no ± for {kernel} at {layout}: no left-out {what} of {cls} layouts back one (left out: "
            f"{', '.join(sorted(have)) or 'none'})")


def expected_error_for(profile: Any, kernel: str, work: Any, *, of: str = "launch") -> ExpectedError | None:
    """:func:`expected_error` for a :class:`~decodecalc.workload.Workload`'s per-rank layout in the profile's regime,
    as every command asks for it; an uncalibrated (datasheet) profile gets none (its figures would be another GPU's)."""
    if not getattr(profile, "calibrated", False):
        return None
    return expected_error(profile, kernel, work.num_heads, work.num_kv_heads, work.head_size,
                          work.kv_bytes_per_element, of=of, regime=getattr(profile, "regime", "back-to-back"))


@dataclass(frozen=True, slots=True)
class LayoutCheck:
    """One left-out layout's rows against the p90 the others would print for it (None: its class has no other
    layout, so no ± is printed)."""

    layout: str
    rows: int
    p90_abs_err: float | None
    within: int

    @property
    def claimed(self) -> bool:
        return self.p90_abs_err is not None


def leave_one_layout_out(rows: Sequence[tuple[float, str]]) -> list[LayoutCheck]:
    """Whether a printed p90 holds on a layout no fit saw: each layout of ``rows`` (``(|error|, layout key)``) is
    judged against the p90 of the other layouts' rows, printed only where another layout of its class is among them
    (the rule of :func:`expected_error`)."""
    out = []
    for lay in sorted({x for _, x in rows}):
        others = sorted(e for e, x in rows if x != lay)
        mine = [e for e, x in rows if x == lay]
        if class_of_key(lay) not in {class_of_key(x) for _, x in rows if x != lay} or not others:
            out.append(LayoutCheck(lay, len(mine), None, 0))
            continue
        p90 = percentile(others, 0.9)
        out.append(LayoutCheck(lay, len(mine), p90, sum(e <= p90 for e in mine)))
    return out
