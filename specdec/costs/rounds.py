"""What a whole round costs: real engine steps measured at (b, k), the table t(b, k).

points[(b, k)] = (seconds, cache length L), timed by adaptive/calibrate.py. Within a measured
row b, k = 0 is its plain step; k >= 1 is the line through the measured k = 1 step with
Theil-Sen's slope (the median of pairwise slopes: one disturbed step cannot bend it), raised
to a measured step above it that lies between its measured neighbours in k (a kernel cliff),
never lowered to one below it: the argmax is drawn to whatever is priced too low. Another
cache length or batch size moves a row's step by the forward model's change (its offset over
the forwards is interpolated linearly in b between rows, held outside them).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

Forward = Callable[[int, int, float], float]     # (b, k, L) -> forward-only seconds of a round


def theil_sen(points: dict[int, float]) -> tuple[float, float]:
    """(intercept, slope) of the Theil-Sen line through {x: y}; one point gives a flat line."""
    xs = sorted(points)
    slopes = [(points[x1] - points[x0]) / (x1 - x0) for i, x0 in enumerate(xs) for x1 in xs[i + 1:]]
    c = statistics.median(slopes) if slopes else 0.0
    return statistics.median(points[x] - c * x for x in xs), c


@dataclass
class RoundTable:
    points: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    contended: bool = False                  # some steps were timed on a busy machine

    def rows(self) -> list[int]:
        return sorted({b for b, _k in self.points})

    def ks(self, b: int) -> list[int]:
        return sorted(k for bb, k in self.points if bb == b)

    def line(self, r: int) -> tuple[float, float] | None:
        """Row r's drafting line (intercept, slope), through its measured k = 1 step."""
        drafting = {k: self.points[(r, k)][0] for k in self.ks(r) if k >= 1}
        if not drafting:
            return None
        a, c = theil_sen(drafting)
        return (drafting[1] - c if 1 in drafting else a), c

    def row_step(self, r: int, k: int) -> tuple[float, float] | None:
        """(seconds, L) of row r's step drafting k as priced (module doc); None if unmeasured."""
        if k == 0:
            return self.points.get((r, 0))
        line, ks = self.line(r), self.ks(r)
        if line is None:
            return None
        t, L = line[0] + line[1] * k, statistics.mean(self.points[(r, kk)][1] for kk in ks)
        if k in ks:
            i, (tk, Lk) = ks.index(k), self.points[(r, k)]
            lo = self.points[(r, ks[i - 1])][0] if i > 0 else 0.0
            hi = self.points[(r, ks[i + 1])][0] if i + 1 < len(ks) else float("inf")
            if lo <= tk <= hi and tk > t:                    # trusted, and above the line
                t, L = tk, Lk
        return t, L

    def step(self, b: float, k: int, forward: Forward, L: float | None = None) -> float | None:
        """Seconds of a real step drafting k at batch b and cache length L (None: as measured);
        None if no row has been measured at k."""
        known = [(r, s) for r in self.rows() if (s := self.row_step(r, k)) is not None]
        if not known:
            return None
        rows = [r for r, _ in known]
        off = np.interp(b, rows, [t - forward(r, k, Lr) for r, (t, Lr) in known])
        Lb = np.interp(b, rows, [Lr for _, (_, Lr) in known]) if L is None else L
        return float(forward(b, k, Lb) + off)

    def to_json(self) -> dict:
        return {"points": [[b, k, t, L] for (b, k), (t, L) in sorted(self.points.items())]}

    @classmethod
    def from_json(cls, d: dict, contended: bool = False) -> "RoundTable":
        return cls({(int(b), int(k)): (float(t), float(L)) for b, k, t, L in d["points"]}, contended)
