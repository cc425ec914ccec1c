"""A measured speed-up's confidence interval: a paired bootstrap over stretches of the runs.

Plain and speculative decoding of one group run in lockstep (measure.lockstep_runs): the
next step always goes to the engine least far through its tokens, so the steps that take
both from fraction j/n to (j+1)/n of their tokens run in the same stretch of wall-clock
time. Such a stretch is one paired unit: (plain tokens, plain seconds, speculative tokens,
speculative seconds, plain steps, speculative steps). A slow spell of a shared machine
lands in one stretch on both sides.

The cell's speed-up pools its units, and factors exactly into what was counted and what
was timed:

    speed-up = (spec tokens / spec steps) / (plain tokens / plain steps)     counted
             × (plain seconds / plain steps) / (spec seconds / spec steps)   timed

The tokens per step are the runs' own (the prediction is built from the same rounds'
acceptance), so the uncertainty that decides whether a measurement holds on a noisy
machine is the timed factor: the interval is the percentile bootstrap of a round's cost in
plain steps over units drawn with replacement, carried through the counted factor. How
acceptance varies between prompts is a property of the workload, reported apart (the
per-prompt α).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

STRETCHES = 8         # units per group: enough to resample from 3 groups; 64 tokens at k = 6 still give a round or two each
DRAWS = 2000          # bootstrap resamples: the 2.5% and 97.5% quantiles move < 1% between seeds
LEVEL = 0.95          # the interval's coverage
WIDE = 0.10           # a cell is wide when its interval's half-width exceeds 10% of its speed-up

Step = tuple[float, float, float, int]   # (progress before the step in [0, 1), wall s, thread CPU s, tokens)
Unit = tuple[float, float, float, float, int, int]   # plain tokens, s; spec tokens, s; plain, spec steps


def stretches(plain: Sequence[Step], spec: Sequence[Step], n: int = STRETCHES, cpu: bool = False) -> list[Unit]:
    """The paired units of one lockstep group: per stretch j (progress in [j/n, (j+1)/n)),
    (plain tokens, plain seconds, spec tokens, spec seconds, plain steps, spec steps);
    seconds are wall time, or the stepping thread's CPU time with `cpu`."""
    units = [[0.0, 0.0, 0.0, 0.0, 0, 0] for _ in range(n)]
    for side, steps in ((0, plain), (1, spec)):
        for progress, wall, thread, tokens in steps:
            u = units[min(n - 1, max(0, int(progress * n)))]
            u[2 * side] += tokens
            u[2 * side + 1] += thread if cpu else wall
            u[4 + side] += 1
    return [tuple(u) for u in units if u[4] or u[5]]


def pooled(units: np.ndarray) -> float:
    """Total spec tokens/s over total plain tokens/s of `units` (rows as in `stretches`)."""
    pt, ps, st, ss = units[:, :4].sum(axis=0)
    return float((st / ss) / (pt / ps)) if pt > 0 and ps > 0 and ss > 0 else 0.0


def bootstrap(units: Sequence[Sequence[float]], draws: int = DRAWS, level: float = LEVEL,
              seed: int = 0) -> tuple[float, float, float]:
    """(speed-up, low, high): the pooled speed-up of `units` and its percentile interval
    over the timed factor (module doc). Deterministic for a given seed; with fewer than two
    units, or no steps on a side, the interval is the point."""
    u = np.asarray(units, dtype=float).reshape(-1, 6)
    point = pooled(u)
    pn, sn = u[:, 4].sum(), u[:, 5].sum()
    if len(u) < 2 or point <= 0 or not pn or not sn:
        return point, point, point
    counted = (u[:, 2].sum() / sn) / (u[:, 0].sum() / pn)
    idx = np.random.default_rng(seed).integers(0, len(u), size=(draws, len(u)))
    sums = u[idx].sum(axis=1)                                        # (draws, 6)
    with np.errstate(divide="ignore", invalid="ignore"):
        cost = (sums[:, 3] / sums[:, 5]) / (sums[:, 1] / sums[:, 4])   # a round in plain steps
    cost = cost[np.isfinite(cost) & (cost > 0)]
    if not len(cost):
        return point, point, point
    hi_cost, lo_cost = np.quantile(cost, [(1 + level) / 2, (1 - level) / 2])
    return point, min(point, float(counted / hi_cost)), max(point, float(counted / lo_cost))


def half_width(point: float, lo: float, hi: float) -> float:
    """The interval's half-width relative to the point estimate (inf for a zero point)."""
    return (hi - lo) / 2 / point if point > 0 else float("inf")
