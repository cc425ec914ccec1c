"""How much a round costs now relative to the cost model: an online, per-batch-size fit.

    drift(b, k) = a_b + c_b * k  (+ k's own mean residual, shrunk toward the line)

is the log of the factor by which a step costs more (or less) than the cost model says: a
machine slower or faster than when it was measured, real text rather than synthetic
prompts. A factor, because a slow or fast spell scales every k alike. It is fitted by
exponentially weighted ridge regression on log(measured / modelled step time).

- The slope is fitted about the mean observed k. The batch mostly runs one k, and its
  residual then moves every k alike and leaves the slope at its prior; fitted about k = 0,
  a residual seen at k = 2 would go partly into the slope, which k = 8 multiplies fourfold.
- Each batch size's fit shrinks toward the fit over all batch sizes, which shrinks toward
  zero: a batch size met for the first time (a closed batch's tail) starts from how the
  machine runs now.
- Each k's own mean residual off the line, shrunk by SHAPE_N pseudo-steps, corrects a k
  the cost model got wrong in shape (a kernel cliff at one number of positions).
"""
from __future__ import annotations

import numpy as np

FIT_DECAY = 0.95      # per observed step: a window of ~20 steps, as long as a spell of load lasts
FIT_RIDGE = 1.0       # pseudo-steps of zero residual behind the level (and, scaled to k_max/2,
                      # behind the slope): one odd step cannot swing the fit
SHAPE_N = 2.0         # pseudo-steps on the line behind each k's own mean residual


class Drift:
    """log(dt / predicted)(b, k) ~ a_b + c_b * k, fitted online (module doc). Plain floats in
    closed form: it runs every step, where numpy's per-call overhead would show."""

    ALL = -1                                        # the key of the fit over all batch sizes

    def __init__(self, k_max: int):
        self.ridge_c = FIT_RIDGE * max(1.0, k_max / 2) ** 2
        self.k_max = k_max
        self.sums: dict[int, list[float]] = {}     # b -> [n, Sk, Skk, Sr, Skr]
        self.shape: dict[int, tuple[list[float], list[float]]] = {}   # b -> (weight, residual sum) per k

    def add(self, b: int, k: int, residual: float) -> None:
        w, s = self.shape.setdefault(b, ([0.0] * (self.k_max + 1), [0.0] * (self.k_max + 1)))
        for j in range(len(w)):                     # every k of this batch size forgets alike
            w[j] *= FIT_DECAY
            s[j] *= FIT_DECAY
        w[k] += 1.0
        s[k] += residual
        d = FIT_DECAY
        for key in (b, self.ALL):
            n, sk, skk, sr, skr = self.sums.get(key, (0.0, 0.0, 0.0, 0.0, 0.0))
            self.sums[key] = [d * n + 1.0, d * sk + k, d * skk + k * k, d * sr + residual, d * skr + k * residual]

    def _fit(self, key: int, prior: tuple[float, float]) -> tuple[float, float]:
        s = self.sums.get(key)
        if s is None:
            return prior
        n, sk, skk, sr, skr = s
        kbar = sk / n
        level = (sr + FIT_RIDGE * (prior[0] + prior[1] * kbar)) / (n + FIT_RIDGE)   # at k = kbar
        sxx, sxr = skk - sk * kbar, skr - sr * kbar                                # centred sums
        c = (sxr + self.ridge_c * prior[1]) / (max(sxx, 0.0) + self.ridge_c)
        return level - c * kbar, c

    def coefficients(self, b: int) -> tuple[float, float]:
        """(a_b, c_b); the all-batch-size fit before batch size b has been observed."""
        return self._fit(b, self._fit(self.ALL, (0.0, 0.0)))

    def predict(self, b: int, ks: np.ndarray) -> np.ndarray:
        a, c = self.coefficients(b)
        out = a + c * ks
        if b in self.shape:
            # each k's own mean residual off the data's centre line (mean residual at the mean k,
            # the fitted slope; no ridge: one k alone sits exactly on it), shrunk by SHAPE_N
            w, s = self.shape[b]
            n, sk, _, sr, _ = self.sums[b]
            out = out + np.array([(s[k] - w[k] * (sr / n + c * (k - sk / n))) / (w[k] + SHAPE_N) for k in ks])
        return out
