"""Time one model's forward on this machine, and interpolate between the measured points.

A `ModelProfile` maps points (L, b, q) to the median seconds of one cached forward:
b rows, each holding L cached tokens, each feeding q new positions (q = k + 1 when the
target verifies k drafts; q = 1 for one draft-model step). It is measured at two cache
lengths, `l_ref` and `l_long`, and predicts any (b, q, L) as

    t(b, q, L) = t_ref(b, q) + b * sigma(q) * (L - l_ref)

t_ref is piecewise linear in q within each measured batch row (made non-decreasing in q,
and across rows in b, against timing noise) and linear in b between rows (the forward costs a fixed weight read plus per-row work, so linear in b is the
physical shape; log-b would overstate the cost of small batches). sigma(q) >= 0 is the
per-row, per-token KV-cache cost, estimated from the largest row measured at both
lengths (attention reads b * L keys, so the term scales with b). Where the cache length
does not matter on this machine, sigma measures ~0 and the term vanishes.
"""
from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass, field

import torch

from ..models.llama import padded

GRID_B = (1, 2, 4, 8, 16, 32, 64)
Point = tuple[int, int, int]          # (L, b, q)


def grid_rows(max_batch: int) -> list[int]:
    """The batch sizes measured for a maximum batch: powers of two below it, and it."""
    return sorted({b for b in GRID_B if b < max_batch} | {max_batch})


def bisect_order(q_max: int) -> list[int]:
    """1 and q_max first, then midpoints of the widest gaps (a coarse-to-fine q order)."""
    order, gaps = [1, q_max] if q_max > 1 else [1], [(1, q_max)]
    while gaps:
        gaps.sort(key=lambda g: g[0] - g[1])
        lo, hi = gaps.pop(0)
        if hi - lo < 2:
            continue
        mid = (lo + hi) // 2
        order.append(mid)
        gaps += [(lo, mid), (mid, hi)]
    return order


@torch.inference_mode()
def time_forwards(model, b: int, L: int, qs: list[int], num_layers: int | None = None,
                  min_time: float = 0.05, min_reps: int = 3, max_reps: int = 15) -> dict[int, float]:
    """Median seconds of `model(tokens (b, q), positions, cache)` with L cached tokens per row,
    for each q in `qs`, called exactly as the engine calls it. One cache serves every q."""
    dev = model.device
    max_len = padded(L + max(qs) + 1)
    cache = model.new_cache(b, max_len, num_layers)
    cache.lengths = [L] * b
    g = torch.Generator().manual_seed(1000 * b + L)
    out = {}
    for q in qs:
        tokens = torch.randint(0, model.config.vocab_size, (b, q), generator=g).to(dev)     # (b, q)
        positions = (L + torch.arange(q))[None].expand(b, q).contiguous().to(dev)            # (b, q)

        def run():
            model(tokens, positions, cache, num_layers=num_layers)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
        run()                                             # warm-up (kernel/primitive creation)
        times, t_start = [], time.perf_counter()
        while len(times) < max_reps and (len(times) < min_reps or time.perf_counter() - t_start < min_time):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        out[q] = statistics.median(times)
    return out


def isotonic(ys: list[float]) -> list[float]:
    """The non-decreasing sequence closest to ys in least squares (pool adjacent violators).
    A forward never gets cheaper by scoring more positions; timing noise can say otherwise."""
    blocks: list[list[float]] = []          # [mean, weight]
    for y in ys:
        blocks.append([y, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, w1), (m2, w2) = blocks[-2], blocks.pop()
            blocks[-1] = [(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2]
    return [m for m, w in blocks for _ in range(int(w))]


def interp(xs: list[float], ys: list[float], x: float, clamp: bool = False) -> float:
    """Piecewise-linear through sorted (xs, ys), extended linearly past both ends (with
    `clamp`: held at the end values)."""
    if len(xs) == 1 or (clamp and x <= xs[0]):
        return ys[0]
    if clamp and x >= xs[-1]:
        return ys[-1]
    i = 1
    while i < len(xs) - 1 and xs[i] < x:
        i += 1
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


@dataclass
class ModelProfile:
    """Measured forward times of one model; see the module docstring for the model."""
    l_ref: int
    l_long: int
    points: dict[Point, float] = field(default_factory=dict)
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    def _cached(self, name, fn):
        if self._memo.get("n") != len(self.points):       # points only ever get added
            self._memo = {"n": len(self.points)}
        if name not in self._memo:
            self._memo[name] = fn()
        return self._memo[name]

    def row(self, L: int, b: int) -> dict[int, float]:
        """Measured q -> seconds for (L, b), made non-decreasing in q."""
        def build():
            r = {q: t for (l, bb, q), t in self.points.items() if l == L and bb == b}
            qs = sorted(r)
            return dict(zip(qs, isotonic([r[q] for q in qs])))
        return self._cached(("row", L, b), build)

    def rows(self, L: int) -> list[int]:
        return self._cached(("rows", L), lambda: sorted({bb for (l, bb, _q) in self.points if l == L}))

    def _row_t(self, L: int, b: int, q: float) -> float:
        r = self.row(L, b)
        qs = list(r)
        return interp(qs, list(r.values()), q)

    def t_ref(self, b: float, q: float) -> float:
        rows = self.rows(self.l_ref)
        if not rows:
            return 0.0
        vals = list(itertools.accumulate([self._row_t(self.l_ref, r, q) for r in rows], max))
        if b <= rows[0]:
            return vals[0]                                  # never cheaper than measured
        v = interp(rows, vals, b)
        return max(v, vals[-1]) if b > rows[-1] else v      # cost does not fall with b

    def sigma(self, q: float) -> float:
        """Seconds per row per cached token at q positions (>= 0)."""
        both = [b for b in self.rows(self.l_long) if b in self.rows(self.l_ref)]
        if not both or self.l_long == self.l_ref:
            return 0.0
        b = both[-1]
        long, ref = self.row(self.l_long, b), self.row(self.l_ref, b)
        qs = sorted(set(long) & set(ref))
        if not qs:
            return 0.0
        s = [(long[x] - ref[x]) / ((self.l_long - self.l_ref) * b) for x in qs]
        return max(0.0, interp(qs, s, q))

    def t(self, b: float, q: float, L: float | None = None) -> float:
        base = self.t_ref(b, q)
        if L is None:
            return base
        return max(base + b * self.sigma(q) * (L - self.l_ref), 0.5 * base)

    def measure(self, points: list[Point], model, num_layers: int | None = None, **timing) -> None:
        """Measure `points` (grouped so that one cache serves each (L, b))."""
        groups: dict[tuple[int, int], list[int]] = {}
        for L, b, q in points:
            groups.setdefault((L, b), []).append(q)
        for (L, b), qs in groups.items():
            for q, t in time_forwards(model, b, L, sorted(set(qs)), num_layers, **timing).items():
                self.points[(L, b, q)] = t
        self._memo = {}

    def to_json(self) -> dict:
        return {"l_ref": self.l_ref, "l_long": self.l_long,
                "points": [[L, b, q, t] for (L, b, q), t in sorted(self.points.items())]}

    @classmethod
    def from_json(cls, d: dict) -> "ModelProfile":
        return cls(int(d["l_ref"]), int(d["l_long"]),
                   {(int(L), int(b), int(q)): float(t) for L, b, q, t in d["points"]})
