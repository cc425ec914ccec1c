"""What one model's forward costs: timed at grid points, interpolated in between.

A `ModelProfile` maps (L, b, q) to the seconds of one cached forward (time_forwards) called as the
engine calls it: b rows of L cached tokens, each feeding q new positions (q = k + 1 verifies
k drafts; a draft model's step is q = 1). Points are timed at batch rows b, q = 1..q_max and
cache lengths l_ref and l_long. In between, t is piecewise linear in q within a row, linear
in L (never falling with L, never below 0 at L = 0) and linear in b between rows (a fixed
weight read plus per-row work), extended linearly past the rows measured.
"""
from __future__ import annotations

import bisect
import statistics
import time
from dataclasses import dataclass, field

import torch

from ..models.llama import padded


def grid_rows(max_batch: int) -> list[int]:
    """The batch rows measured for a maximum batch: the powers of two below it, and it."""
    return sorted({1 << i for i in range(max_batch.bit_length()) if 1 << i < max_batch} | {max_batch})


def interp(xs: list[float], ys: list[float], x: float) -> float:
    """Piecewise linear through sorted (xs, ys), extended linearly past both ends."""
    if len(xs) == 1:
        return ys[0]
    i = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1)
    w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return ys[i - 1] * (1 - w) + ys[i] * w                  # exactly ys at the xs


@torch.inference_mode()
def time_forwards(model, b: int, L: int, qs: list[int], num_layers: int | None = None,
                  min_time: float = 0.05, min_reps: int = 3, max_reps: int = 15) -> dict[int, float]:
    """q -> seconds of `model(tokens (b, q), positions, cache)` with L tokens cached per row.

    Every pass calls each q once, passes in pairs of opposite order, after one warm-up pass: at
    least `min_reps` passes and `min_time` s per q, at most `max_reps` (rounded up to a pair).
    The first q's time is its median; another q's is that times the median over passes of its
    ratio to the first q's call in the same pass. Timed q by q instead, a machine that speeds up or slows down
    while the timing runs (a frequency ramp, the other core's load) tilted the curve in q, and
    the cost model read the tilt as a cost per draft."""
    dev, g = model.device, torch.Generator().manual_seed(1000 * b + L)
    cache = model.new_cache(b, padded(L + max(qs) + 1), num_layers)
    cache.lengths = [L] * b
    calls = {}
    for q in qs:
        tokens = torch.randint(0, model.config.vocab_size, (b, q), generator=g).to(dev)     # (b, q)
        positions = (L + torch.arange(q))[None].expand(b, q).contiguous().to(dev)            # (b, q)
        calls[q] = (tokens, positions)
    times: dict[int, list[float]] = {q: [] for q in qs}

    def one_pass(order):
        for q in order:
            t0 = time.perf_counter()
            model(*calls[q], cache, num_layers=num_layers)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            times[q].append(time.perf_counter() - t0)

    one_pass(qs)                                                    # the warm-up
    while len(times[qs[0]]) <= max_reps and not (len(times[qs[0]]) > min_reps
                                                 and sum(sum(t[1:]) for t in times.values()) >= min_time * len(qs)):
        one_pass(qs[::-1])                                          # passes in pairs: each q as often
        one_pass(qs)                                                # early in a pass as late
    first = times[qs[0]][1:]                                        # the warm-up pass left out
    base = statistics.median(first)
    return {q: base if q == qs[0] else base * statistics.median(t / f for t, f in zip(times[q][1:], first))
            for q in qs}


@dataclass
class ModelProfile:
    l_ref: int
    l_long: int
    points: dict[tuple[int, int, int], float] = field(default_factory=dict)    # (L, b, q) -> seconds
    contended: bool = False                 # some points were timed on a busy machine
    _grid: dict = field(default_factory=dict, repr=False, compare=False)

    def rows(self) -> list[int]:
        """The batch rows measured at both cache lengths."""
        if self._grid.get("n") != len(self.points):           # points are only ever added
            by: dict = {}
            for (L, b, q), t in self.points.items():
                by.setdefault(b, {}).setdefault(L, {})[q] = t
            both = {b: sorted(set(ts.get(self.l_ref, {})) & set(ts.get(self.l_long, {}))) for b, ts in by.items()}
            rows = {b: (qs, [by[b][self.l_ref][x] for x in qs], [by[b][self.l_long][x] for x in qs])
                    for b, qs in sorted(both.items()) if qs}
            self._grid = {"n": len(self.points), "rows": rows}
        return list(self._grid["rows"])

    def _row(self, b: int, q: float) -> tuple[float, float]:
        """Row b at q positions: (seconds at l_ref, seconds per cached token)."""
        qs, ref, long = self._grid["rows"][b]
        t_ref, t_long = interp(qs, ref, q), interp(qs, long, q)
        slope = (t_long - t_ref) / (self.l_long - self.l_ref) if self.l_long != self.l_ref else 0.0
        return t_ref, min(max(slope, 0.0), t_ref / self.l_ref)

    def t(self, b: float, q: float, L: float | None = None) -> float:
        rows, dl = self.rows(), (self.l_ref if L is None else L) - self.l_ref
        return interp(rows, [t + s * dl for t, s in (self._row(r, q) for r in rows)], b) if rows else 0.0

    def per_token(self, b: float, q: float) -> float:
        """dt/dL: seconds per cached token of a forward at batch b and q positions."""
        rows = self.rows()
        return interp(rows, [self._row(r, q)[1] for r in rows], b) if rows else 0.0

    def missing(self, rows: list[int], q_max: int, qs: list[int] | None = None) -> list[tuple[int, int]]:
        """The (cache length, row) pairs of rows x q = 1..q_max (or `qs`) x {l_ref, l_long}
        that lack a point."""
        qs = qs or list(range(1, q_max + 1))
        return [(L, b) for b in rows for L in (self.l_ref, self.l_long) if any((L, b, q) not in self.points for q in qs)]

    def measure(self, model, rows: list[int], q_max: int, num_layers: int | None = None,
                qs: list[int] | None = None, **timing) -> bool:
        """Time what rows x q = 1..q_max (or `qs`) x {l_ref, l_long} lacks; whether anything was timed."""
        todo = self.missing(rows, q_max, qs)
        qs = qs or list(range(1, q_max + 1))
        for L, b in todo:
            times = time_forwards(model, b, L, qs, num_layers, **timing)
            self.points.update({(L, b, q): t for q, t in times.items()})
        return bool(todo)

    def to_json(self) -> dict:
        return {"l_ref": self.l_ref, "l_long": self.l_long,
                "points": [[*p, t] for p, t in sorted(self.points.items())]}

    @classmethod
    def from_json(cls, d: dict, contended: bool = False) -> "ModelProfile":
        points = {(int(L), int(b), int(q)): float(t) for L, b, q, t in d["points"]}
        return cls(int(d["l_ref"]), int(d["l_long"]), points, contended)
