"""How ``decodecalc tune`` finds an engine's best setting among its candidates: quick estimates first, the guard's
doubtful steps timed exactly, every candidate's total tightened to the target error, and a sampled workload's
candidates measured again on more steps (the rules and their numbers: decodecalc/reports/tune.py's docstring)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from decodecalc.reports.tune_space import Option, option_like
from decodecalc.reports.tune_stats import Stats
from decodecalc.reports.tune_types import TIE_FRACTION, Candidate, Guard, TuneContext, objective_value

#: steps whose ratio to the default is checked exactly for the guard: the largest estimated ratios, the steps above
#: the guard's quantile and this many more, at most GUARD_STEPS_MAX
GUARD_STEPS = 16
GUARD_STEPS_MAX = 512
#: the quantile of the step ratio a candidate shows without a guard (--max-regression none)
GUARD_QUANTILE_SHOWN = 0.99
#: a candidate whose estimated ratio at the guard's quantile lies this close to its tolerance gets its steps above
#: the quantile checked exactly
GUARD_MARGIN = 0.05
#: rounds of exact checks of the top steps of a candidate the guard rules out on estimates though it ranks above
#: the pick (each times its GUARD_STEPS worst steps)
GUARD_ROUNDS = 4


def _candidate(ctx: TuneContext, engine: str, opt: Option, default: Option | None,
               guard: Guard | None) -> Candidate:
    from decodecalc.batch.stats import ratio_quantile, share_above, worst_ratio

    worst, q_ratio, over, exact_q = 1.0, 1.0, 0.0, True
    if default is not None:
        worst, _ = worst_ratio(opt.times, default.times)
        q = guard.quantile if guard is not None else GUARD_QUANTILE_SHOWN
        q_ratio, i = ratio_quantile(opt.times, default.times, ctx.weights, q)
        exact_q = bool(opt.exact[i] and default.exact[i])
        if guard is not None:
            over = share_above(opt.times, default.times, ctx.weights, 1.0 + guard.tolerance)
    allowed = guard is None or guard.allows(q_ratio)
    rel_se = float(math.hypot(ctx.timer.rel_se_of(opt.recipes, opt.uses, opt.times), ctx.sampling_rel_se(opt.times)))
    st = ctx.stats(opt.times)
    r = ctx.memo.get("score_ratio", {}).get(opt.label)  # a measuring pass without the score's points: the sample's
    score = ctx.stats(opt.score) if r is None else Stats(st.mean_step_s * r[0], st.p99_step_s * r[1],
                                                          st.total_s * r[0])
    return Candidate(engine=engine, setting=opt.setting, label=opt.label, times=opt.times, stats=st,
                     worst_ratio=worst, allowed=allowed, score=score, steps_2d=opt.steps_2d,
                     scratch_bytes=opt.scratch_bytes, rel_se=rel_se, worst_exact=exact_q, ratio_quantile=q_ratio,
                     share_over=over)


def _guard_checked(ctx: TuneContext, opt: Option, default: Option, guard: Guard | None,
                   force: bool = False) -> tuple[Option, Option]:
    """Where the guard may turn on an estimate (the estimated ratio at the guard's quantile lies near its tolerance)
    or ``force``: the steps with the largest ratios, down past the quantile, are timed exactly (both settings) and
    the options rebuilt from the refined estimates."""
    from decodecalc.batch.stats import ratio_quantile, top_ratio_steps

    if not opt.recipes or opt.recipes == ("own",) or guard is None:
        return opt, default
    value, i = ratio_quantile(opt.times, default.times, ctx.weights, guard.quantile)
    near = abs(value - 1.0 - guard.tolerance) <= GUARD_MARGIN
    if not (near or force) or (opt.exact[i] and default.exact[i]):
        return opt, default
    k = min(GUARD_STEPS_MAX, GUARD_STEPS + math.ceil((1.0 - guard.quantile) * len(opt.times)))
    idx = top_ratio_steps(opt.times, default.times, k)
    ctx.timer.refine_many(opt.recipes + default.recipes, idx)
    return ctx.refreshed(opt), ctx.refreshed(default)


def _search(ctx: TuneContext, engine: str, options: Sequence[Option], objective: str,
            guard: Guard | None) -> tuple[Candidate, Candidate, tuple[Candidate, ...]]:
    d_opt = options[0]
    checked = []
    for o in options[1:]:
        o, d_opt = _guard_checked(ctx, o, d_opt, guard)
        checked.append(o)
    for _ in range(GUARD_ROUNDS):
        default, best, cands = _best(ctx, engine, d_opt, checked, objective, guard)
        # a candidate ruled out by an estimated step but better than the pick: its worst steps are timed exactly, so
        # that only the model (not the estimate) rules it out
        top = objective_value(best.score or best.stats, objective)
        doubtful = [j for j, c in enumerate(cands[1:]) if not c.allowed and not c.worst_exact
                    and objective_value(c.score or c.stats, objective) < top]
        if not doubtful:
            break
        for j in doubtful:
            checked[j], d_opt = _guard_checked(ctx, checked[j], d_opt, guard, force=True)
        checked = [o.refreshed() for o in checked]
    return default, best, cands


def _best(ctx: TuneContext, engine: str, d_opt: Option, others: Sequence[Option], objective: str,
          guard: Guard | None) -> tuple[Candidate, Candidate, tuple[Candidate, ...]]:
    default = _candidate(ctx, engine, d_opt, d_opt, guard)
    cands = [default] + [_candidate(ctx, engine, o, d_opt, guard) for o in others]
    # a setting is only worth changing to where the nominal prediction agrees that it saves time
    ok = [c for c in cands if c.allowed and (c is default or objective_value(c.stats, objective)
                                             < objective_value(default.stats, objective))]
    # ranked by the robust score, as recommend ranks (occupancy, the least certain input, +-1)
    rank = {id(c): objective_value(c.score or c.stats, objective) for c in ok}
    top = min(ok, key=lambda c: (rank[id(c)], c.stats.total_s))
    # scores within TIE_FRACTION of the best are a tie: the default, then the least split-K scratch, then the fewest
    # programs (the smallest knob values: fewer segments or splits, fewer steps on the split path)
    tied = [c for c in ok if rank[id(c)] <= rank[id(top)] * (1.0 + TIE_FRACTION)]
    best = min(tied, key=lambda c: (c is not default, c.scratch_bytes, c.setting.key(),
                                    rank[id(c)]))
    if best is not top and best is not default:
        why = (f"tied with {top.label} (predicted {objective} within {TIE_FRACTION:.1%}): less split-K scratch"
               if best.scratch_bytes < top.scratch_bytes else
               f"tied with {top.label} (predicted {objective} within {TIE_FRACTION:.1%}): the same scratch, fewer "
               "programs")
        best = replace(best, tie_break=why)
        cands = [best if c.label == best.label else c for c in cands]
    return default, best, tuple(cands)


#: the best candidates by the objective whose estimated guard failures are checked exactly (the tables show five)
SHOWN_CHECKED = 8
#: a candidate whose first quick estimate lies within this fraction of the best's gets a closer one (the first has a
#: few exactly timed steps: a few per cent)
NEAR_FRACTION = 0.15


def leading_candidates(cands: Sequence[Candidate], objective: str, n: int) -> list[Candidate]:
    """The ``n`` best candidates by the objective, settings that launch the same (equal statistics) once: the rows a
    table shows."""
    rows: list[Candidate] = []
    seen: set[tuple[float, float, float]] = set()
    for c in sorted(cands, key=lambda c: (objective_value(c.stats, objective), c.stats.total_s)):
        key = (c.stats.mean_step_s, c.stats.p99_step_s, c.stats.total_s)
        if key not in seen and len(rows) < n:
            seen.add(key)
            rows.append(c)
    return rows


def evaluate_candidates(ctx: TuneContext, engine: str, options: list[Option], objective: str,
              guard: Guard | None, tighten: bool = True
              ) -> tuple[Candidate, Candidate, tuple[Candidate, ...], list[Option]]:
    """The candidates of ``options`` over ``ctx``'s steps: quick estimates first (``tighten`` False: a ranking pass,
    the ones near the best estimated closer), else every candidate's total made tight (the default first), the
    pick's worst step timed exactly."""
    default, best, cands = _search(ctx, engine, options, objective, guard)
    if not ctx.timer.exact and not tighten:  # a ranking pass: the quick estimates near the best get more steps timed
        top = objective_value(best.score or best.stats, objective) * (1 + NEAR_FRACTION)
        near = {c.label for c in cands if objective_value(c.score or c.stats, objective) <= top} | {default.label}
        ctx.timer.improve([k for o in options if o.label in near for k in o.recipes if k != "own"])
        options = [o.refreshed() for o in options]
        default, best, cands = _search(ctx, engine, options, objective, guard)
    if tighten and not ctx.timer.exact:
        # every candidate's total to the target error (the exactly timed steps come through the scalar model's own
        # dispatch on arrays: decodecalc/batch/dispatch.py), the default first: every candidate's guard is a per-step
        # ratio to it, so a loose default would let a candidate that slows some steps pass the guard for nothing
        ctx.timer.tighten([k for k in options[0].recipes if k != "own"])
        ctx.timer.tighten([k for o in options for k in o.recipes if k != "own"])
        for o in options:
            if len(o.uses) > 1:
                ctx.timer.settle_parts(o.recipes, o.uses)
        options = [o.refreshed() for o in options]
        default, best, cands = _search(ctx, engine, options, objective, guard)
    if tighten and best is not default and not best.worst_exact:  # what the table shows of the pick is the model's
        opt = next(o for o in options if o.label == best.label)
        opt, d_opt = _guard_checked(ctx, opt, options[0], guard, force=True)
        best = replace(_candidate(ctx, engine, opt, d_opt, guard), tie_break=best.tie_break)
        cands = tuple(best if c.label == best.label else c for c in cands)
    # the rows a table shows carry no estimated guard failure: an "over" there is the model's, not the estimate's
    doubtful = {c.label for c in leading_candidates(cands[1:], objective, SHOWN_CHECKED) if not c.allowed and not c.worst_exact}
    if doubtful:
        d_opt = options[0]
        checked = []
        for o in options[1:]:
            if o.label in doubtful:
                o, d_opt = _guard_checked(ctx, o, d_opt, guard, force=True)
            checked.append(o)
        options = [d_opt.refreshed()] + [o.refreshed() for o in checked]
        default, best, cands = _search(ctx, engine, options, objective, guard)
    return default, best, cands, options


def measure_all(ctx: TuneContext, engine: str, options: list[Option], cands: Sequence[Candidate], objective: str,
                guard: Guard | None) -> tuple[Candidate, Candidate, tuple[Candidate, ...]]:
    """A sampled workload's second pass: every candidate measured on ``ctx``'s steps (the first pass, on a smaller
    sample, gave the ranking score's ratio to the prediction), in the first pass's order."""
    measured = [option_like(ctx, engine, o.setting) for o in options]
    default, best, got, _ = evaluate_candidates(ctx, engine, measured, objective, guard)
    by_label = {c.label: c for c in got}
    return default, best, tuple(by_label[c.label] for c in cands)
