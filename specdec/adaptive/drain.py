"""A draining batch's expected time to finish, for each k.

When nobody waits for a row, a finished row is not refilled and what counts is when the last
row finishes; a longer draft spreads the rows (a round emits 1 to k + 1 tokens). Row r needs
N_r rounds, about normal with mean R_r / mu_r and variance R_r var_r / mu_r^3 (R_r tokens
left; mu_r, var_r its tokens per round), kept within [R_r / (k + 1), R_r]. With the N_r of one
draw sorted, D(k) = sum_i (n_(i) - n_(i-1)) t(n - i + 1, k), averaged over DRAWS fixed draws.
One row gives the rate objective back: R / mu(k) * t(1, k).
"""
from __future__ import annotations

import numpy as np
from numpy.random import default_rng     # at import: numpy loads it lazily, 8 ms in a first round

DRAWS = 32      # Monte Carlo draws: enough to hold D within 4% of 4000 simulated closed batches
                # and its choice within 1% of their best (tests/adaptive/test_drain.py)
_Z: dict[int, np.ndarray] = {}


def _normals(n: int) -> np.ndarray:
    """(DRAWS, n) standard normals, the same every call (a choice must not flicker with the
    draw), standardised per row so that its mean is exact."""
    if n not in _Z:
        z = default_rng(0).standard_normal((DRAWS, n))
        _Z[n] = (z - z.mean(axis=0)) / z.std(axis=0)
    return _Z[n]


def drain_seconds(mean: np.ndarray, var: np.ndarray, remaining, step: np.ndarray) -> np.ndarray:
    """mean, var: (n, K+1) each row's tokens per round for k = 0..K; remaining: (n,) tokens
    left per row; step: (n, K+1) seconds of a round at batch size 1..n (row s - 1) for each k
    -> (K+1,) expected seconds until the last row finishes."""
    n, K1 = mean.shape
    R = np.asarray(remaining, dtype=float)[:, None]                          # (n, 1)
    mu = np.maximum(mean, 1e-9)
    sd = np.sqrt(R * var / mu ** 3)                                          # (n, K+1)
    draws = (R / mu).T[:, None, :] + sd.T[:, None, :] * _normals(n)[None]   # (K+1, D, n)
    np.minimum(np.maximum(draws, (R / (np.arange(K1) + 1.0)).T[:, None, :], out=draws), R.T[:, None, :], out=draws)
    draws.sort(axis=2)                                                       # the i-th row to finish
    t = step[::-1]                                                           # sizes n, n-1, .., 1
    w = t - np.concatenate([t[1:], np.zeros((1, K1))])    # sum_i (n_(i) - n_(i-1)) t_i = sum_i n_(i) w_i
    return (draws.mean(axis=1) * w.T).sum(axis=1)                            # so the mean comes first
