"""What a whole speculative round costs beyond its forwards, measured on real engine steps.

A round is more than one verify forward plus k draft forwards timed in isolation:
- the draft loop's Python, argmax or sampling per drafted token;
- the first draft step reads the draft's weights from memory again, because the target's
  forward has just evicted them from the CPU caches (isolated timing keeps them warm);
- verification, the step's single host sync and the commit of accepted tokens.
On this machine that is 1-2 ms per round at batch 1, as much as the draft forwards.

A `RoundTable` holds real engine step times at (b, k), measured by a timer the engine
supplies (engine/calibrate.py), one table per proposer and sampling mode. The overhead is

    overhead(b, k) = step(b, k) - [t_target(b, k+1, L) + k * t_draft(b, L)]

with the forward-only model evaluated at the cache length L the step ran at. Per batch row
the step is the measured one at k = 0 (plain decoding) and, for k >= 1, the line a + c * k
(drafting at all has a fixed cost, each drafted token a further one), raised to the
measured step where that lies above it. Steps are not linear in k where the kernel has
cliffs: with the stock F.linear kernel on this project's machine, batch 1 measured 7.7,
9.5, 11.5, 15.1, 16.9 ms for k = 0..4, the forward alone jumping 1.6 ms from 3 to 4
positions, and the line through k = 1 priced k = 3 at 13.4 ms, so adaptive drafted k = 3
in half its rounds at code/1 where k = 2 was 8% faster (0.94x fixed k = 2). A step below
the line is not believed: the policy's argmax is drawn to whichever k is priced too low,
and when measured steps stood for their k either way, a batch-16 row that measured k = 4
at 4 ms over k = 3 (its other steps 7-9 ms apart) went with adaptive falling to 0.93x
fixed k = 2 at prose/16 (1.00x with the line; which k it drafted was not recorded). Pricing a k too high costs less: the policy passes over one of
several nearly tied k. A step out of order with its neighbours (a burst of other work hit
it) is not believed either. The line's slope is Theil-Sen's (the median of
pairwise slopes) over every measured k >= 1, so that such a step cannot bend it. It
passes through the measured k = 1 step rather than Theil-Sen's median intercept:
k = 1 against k = 0 is the close call at large batches, and there the steps curve upward
in k (batch 64: 27, 48, 65, 92, 113 ms for k = 0..4), so a line through all of them put
k = 1 at 1.62 plain steps where it measured 1.75, and adaptive drafted where plain decoding
was faster. k = 1 is timed beside k = 0 in the same passes (engine/calibrate.py). The steps
are measured interleaved across k (robust to the machine's drift), while the forward
model is measured one q after another; so the forward model only carries the step to
another cache length, and between measured batch rows (interpolated linearly in b,
clamped outside them).
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

Forward = Callable[[int, int, float], float]     # (b, k, L) -> forward-only seconds of a round


def _interp(xs: list[float], ys: list[float], x: float) -> float:
    """Piecewise-linear through sorted (xs, ys), clamped to the end values."""
    if x <= xs[0]:
        return ys[0]
    for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1]


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
        off = _interp(rows, [at_row(r) for r in rows], b)
        Lb = _interp(rows, [self._fit(r)[2] for r in rows], b)
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
