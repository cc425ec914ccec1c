"""A measured speed-up's confidence interval: a bootstrap over paired stretches of the runs.

Plain and speculative decoding of one group run in lockstep (measure.lockstep_runs): the
next step always goes to the engine least far through its tokens, so the steps that take
both from fraction j/n to (j+1)/n of their tokens run in the same stretch of wall-clock
time. Such a stretch is one paired unit: (plain tokens, plain seconds, speculative tokens,
speculative seconds). A slow spell of a shared machine lands in one stretch on both sides;
a stretch where acceptance ran high or low counts in the speculative tokens. The cell's
speed-up pools its units (total speculative tokens per second over the same for plain)
and its interval is the percentile bootstrap of that ratio over units drawn with
replacement.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

STRETCHES = 4         # units per group: enough to resample, long enough to hold several rounds at k = 6
DRAWS = 2000          # bootstrap resamples: the 2.5% and 97.5% quantiles move < 1% between seeds
LEVEL = 0.95          # the interval's coverage
WIDE = 0.10           # a cell is wide when its interval's half-width exceeds 10% of its speed-up

Step = tuple[float, float, float, int]   # (progress before the step in [0, 1), wall s, thread CPU s, tokens)


def stretches(plain: Sequence[Step], spec: Sequence[Step], n: int = STRETCHES,
              cpu: bool = False) -> list[tuple[float, float, float, float]]:
    """The paired units of one lockstep group: per stretch j (progress in [j/n, (j+1)/n)),
    (plain tokens, plain seconds, spec tokens, spec seconds); seconds are wall time, or the
    stepping thread's CPU time with `cpu`."""
    units = [[0.0, 0.0, 0.0, 0.0] for _ in range(n)]
    for side, steps in ((0, plain), (2, spec)):
        for progress, wall, thread, tokens in steps:
            j = min(n - 1, max(0, int(progress * n)))
            units[j][side] += tokens
            units[j][side + 1] += thread if cpu else wall
    return [tuple(u) for u in units if (u[1] > 0) or (u[3] > 0)]


def pooled(units: np.ndarray) -> float:
    """Total spec tokens/s over total plain tokens/s of `units` (rows as in `stretches`)."""
    pt, ps, st, ss = units.sum(axis=0)
    return float((st / ss) / (pt / ps)) if pt > 0 and ps > 0 and ss > 0 else 0.0


def bootstrap(units: Sequence[Sequence[float]], draws: int = DRAWS, level: float = LEVEL,
              seed: int = 0) -> tuple[float, float, float]:
    """(speed-up, low, high): the pooled ratio of `units` and its percentile interval.
    Deterministic for a given seed; with fewer than two units the interval is the point."""
    u = np.asarray(units, dtype=float).reshape(-1, 4)
    point = pooled(u)
    if len(u) < 2:
        return point, point, point
    idx = np.random.default_rng(seed).integers(0, len(u), size=(draws, len(u)))
    sums = u[idx].sum(axis=1)                                        # (draws, 4)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = (sums[:, 2] / sums[:, 3]) / (sums[:, 0] / sums[:, 1])
    ratios = ratios[np.isfinite(ratios)]
    if not len(ratios):
        return point, point, point
    lo, hi = np.quantile(ratios, [(1 - level) / 2, (1 + level) / 2])
    return point, float(lo), float(hi)


def half_width(point: float, lo: float, hi: float) -> float:
    """The interval's half-width relative to the point estimate (inf for a zero point)."""
    return (hi - lo) / 2 / point if point > 0 else float("inf")
