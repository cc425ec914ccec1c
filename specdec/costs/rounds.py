"""What a whole speculative round costs beyond its forwards, measured on real engine steps.

A round is more than one verify forward plus k draft forwards timed in isolation: the
draft loop's Python and sampling per drafted token, the draft's weights read again after
the target's forward evicted them from the CPU caches, verification, the step's host sync
and the commit. At batch 1 on a small model that is as much as the draft forwards.

A `RoundTable` holds real engine step times at (b, k), one table per proposer and sampling
mode, measured by a timer handed in from above (adaptive/calibrate.py). The overhead is

    overhead(b, k) = step(b, k) - [t_target(b, k+1, L) + k * t_draft(b, L)]

with the forward model at the cache length L the step ran at. Per batch row the step is
the measured one at k = 0 and, for k >= 1, the line a + c * k (drafting at all has a fixed
cost, each drafted token a further one), raised to the measured step where that lies
above it:

- Raised, because steps are not linear in k where a kernel has a cliff at some number of
  positions, and a line through the cliff prices the k beyond it too low.
- Never lowered: the policy's argmax is drawn to whichever k is priced too low, while
  pricing one too high only passes over one of several nearly tied k. A step out of order
  with its neighbours (a burst of other work hit it) is not believed either.
- The slope is Theil-Sen's (the median of pairwise slopes) over the measured k >= 1, so
  that one bad step cannot bend it; the line passes through the measured k = 1 step,
  because k = 1 against k = 0 is the close call at large batches, where steps curve
  upward in k and a line through all of them misprices k = 1.

Steps are measured interleaved across k (robust to the machine's drift), the forward model
one q after another; so the forward model only carries a step to another cache length, and
between measured batch rows steps are interpolated linearly in b, clamped outside them.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .profiling import interp

Forward = Callable[[int, int, float], float]     # (b, k, L) -> forward-only seconds of a round


def theil_sen(points: dict[int, float]) -> tuple[float, float]:
    """(intercept, slope) of the Theil-Sen line through {x: y}: the median pairwise slope,
    then the median intercept. One point gives a flat line."""
    xs = sorted(points)
    slopes = [(points[x1] - points[x0]) / (x1 - x0) for i, x0 in enumerate(xs) for x1 in xs[i + 1:]]
    c = statistics.median(slopes) if slopes else 0.0
    return statistics.median(points[x] - c * x for x in xs), c


@dataclass
class RoundTable:
    """Measured seconds of a real engine step: points[(b, k)] = (seconds, cache length L)."""
    points: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    contended: bool = False
    _fits: dict = field(default_factory=dict, repr=False, compare=False)

    def rows(self) -> list[int]:
        return sorted({b for b, _k in self.points})

    def ks(self, b: int) -> list[int]:
        return sorted(k for bb, k in self.points if bb == b)

    def _fit(self, r: int) -> tuple[float | None, tuple[float, float] | None, float]:
        """Row r's plain step (k = 0), the Theil-Sen line through its steps at k >= 1, and the
        mean cache length they ran at; memoized until points are added."""
        key = (r, len(self.points))
        if key not in self._fits:
            ks = self.ks(r)
            drafting = {k: self.points[(r, k)][0] for k in ks if k >= 1}
            plain = self.points[(r, 0)][0] if 0 in ks else None
            L = statistics.mean(self.points[(r, k)][1] for k in ks)
            line = theil_sen(drafting) if drafting else None
            if line is not None and 1 in drafting:         # through the measured k = 1 step
                line = (drafting[1] - line[1], line[1])
            self._fits[key] = (plain, line, L)
        return self._fits[key]

    def _trusted(self, r: int, k: float) -> bool:
        """Whether row r's measured step at k stands for k: it lies between the measured steps
        at its nearest measured neighbours in k (drafting more never costs less). A step
        disturbed by other work on the machine breaks that and gives way to the line."""
        if (r, k) not in self.points:
            return False
        ks = self.ks(r)
        i = ks.index(k)
        t = self.points[(r, k)][0]
        lo = self.points[(r, ks[i - 1])][0] if i > 0 else 0.0
        hi = self.points[(r, ks[i + 1])][0] if i + 1 < len(ks) else float("inf")
        return lo <= t <= hi

    def step(self, b: float, k: float, forward: Forward, L: float | None = None) -> float | None:
        """Seconds of a real step drafting k at batch b and cache length L (None: as measured),
        or None when nothing has been measured. Within a row: the plain step at k = 0, the
        line at k >= 1; the forward model moves it to another cache length and, between
        rows, carries the difference in batch size."""
        rows = [r for r in self.rows() if self._fit(r)[0 if k < 1 else 1] is not None]
        if not rows:
            return None

        def at_row(r: int) -> float:            # the row's step, as an offset from the forwards
            plain, line, Lr = self._fit(r)
            off = (plain if k < 1 else line[0] + line[1] * k) - forward(r, k, Lr)
            if k >= 1 and self._trusted(r, k):    # measured above the line: a kernel cliff
                t, Lk = self.points[(r, k)]
                off = max(off, t - forward(r, k, Lk))
            return off
        off = interp(rows, [at_row(r) for r in rows], b, clamp=True)
        Lb = interp(rows, [self._fit(r)[2] for r in rows], b, clamp=True)
        return forward(b, k, Lb if L is None else L) + off

    def to_json(self) -> dict:
        return {"points": [[b, k, t, L] for (b, k), (t, L) in sorted(self.points.items())],
                "contended": self.contended}

    @classmethod
    def from_json(cls, d: dict) -> "RoundTable":
        return cls({(int(b), int(k)): (float(t), float(L)) for b, k, t, L in d["points"]},
                   bool(d.get("contended", False)))


def plausible(steps: dict[int, tuple[float, float]]) -> bool:
    """Whether step times measured together {k: (seconds, L)} can be right: drafting more
    never makes a step cheaper (beyond 10% timing noise). A burst of other work on the
    machine during one k's steps breaks this, and the caller measures again."""
    ks = sorted(steps)
    return all(steps[a][0] <= 1.1 * steps[b][0] for a, b in zip(ks, ks[1:]))


def round_ks(k_max: int) -> tuple[list[int], list[int]]:
    """(required, optional) draft lengths to time: 0, 1 and k_max first, then midpoints."""
    req = sorted({0, 1, k_max})
    opt, gaps = [], [(1, k_max)]
    while gaps:
        gaps.sort(key=lambda g: g[0] - g[1])
        lo, hi = gaps.pop(0)
        if hi - lo >= 2:
            mid = (lo + hi) // 2
            opt.append(mid)
            gaps += [(lo, mid), (mid, hi)]
    return req, opt


def save_table(table: RoundTable, path: Path, identity: dict, busy: bool) -> None:
    """Write `table` (marked contended if it or this write happened on a busy machine)."""
    table.contended = table.contended or busy
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"identity": identity, "table": table.to_json()}))
    tmp.replace(path)


def load_table(path: Path, identity: dict, busy_now: bool) -> RoundTable:
    """The cached table for `identity`, or an empty one. A table measured on a busy machine
    is dropped (re-measured) once the machine is quiet."""
    try:
        d = json.loads(path.read_text())
        table = RoundTable.from_json(d["table"])
        if d["identity"] == json.loads(json.dumps(identity)) and not (table.contended and not busy_now):
            return table
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return RoundTable()
