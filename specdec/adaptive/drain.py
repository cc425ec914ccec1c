"""A draining batch's expected time to finish, for each k.

When no request waits for a row (a closed batch's end, a quiet server), a row that finishes
is not refilled: the batch runs on at a smaller size, where a round costs nearly what a full
one does. What counts then is when the last row finishes, not the next round's tokens per
second. A longer draft puts the rows further out of step (one round emits 1 to k + 1
tokens), so a k that ties at full batch can still lose over the whole decode to a longer
tail (measured: benchmarks/results/adaptive/NOTES.md; design: docs/adaptive.md, section 6).

Model. Row r needs N_r more rounds, about normal with mean R_r / mu_r and variance
R_r var_r / mu_r^3 (R_r tokens left; mu_r, var_r: the mean and variance of its tokens per
round, acceptance.py), kept within [R_r / (k + 1), R_r]. For one draw of every N_r, sorted,
the batch runs n_(1) rounds at size n, then n_(2) - n_(1) rounds at size n - 1, and so on:

    D(k) = sum_i (n_(i) - n_(i-1)) * t(n - i + 1, k)

averaged over DRAWS fixed draws of standard normals (the same ones every call, so a choice
does not flicker with the draw). With one row, D(k) = R / mu(k) * t(1, k): the per-round
rate objective again.
"""
from __future__ import annotations

import numpy as np

DRAWS = 32
_normals = {"z": np.zeros((DRAWS, 0))}


def _z(n: int) -> np.ndarray:
    """(DRAWS, n) standard normals, fixed per process, standardised per column so that one
    row's mean is exact."""
    if _normals["z"].shape[1] < n:
        z = np.random.default_rng(0).standard_normal((DRAWS, max(n, 64)))
        _normals["z"] = (z - z.mean(axis=0)) / z.std(axis=0)          # exactly mean 0, sd 1 per row
    return _normals["z"][:, :n]


def drain_seconds(mean: np.ndarray, var: np.ndarray, remaining, step: np.ndarray) -> np.ndarray:
    """mean, var: (n, K+1) each row's tokens per round for k = 0..K; remaining: (n,) tokens
    left per row; step: (n, K+1) seconds of a round at batch size 1..n (row s - 1) for each k
    -> (K+1,) expected seconds until the last row finishes."""
    n, K1 = mean.shape
    R = np.asarray(remaining, dtype=float)[:, None]                          # (n, 1)
    mu = np.maximum(mean, 1e-9)
    rounds = R / mu                                                          # (n, K+1)
    sd = np.sqrt(R * var / mu ** 3)                                          # (n, K+1)
    lo = R / (np.arange(K1) + 1.0)                                           # (n, K+1)
    draws = rounds.T[:, None, :] + sd.T[:, None, :] * _z(n)[None]           # (K+1, D, n)
    draws = np.clip(draws, lo.T[:, None, :], R.T[:, None, :])
    draws.sort(axis=2)
    extra = np.diff(draws, axis=2, prepend=0.0)                              # rounds at size n, n-1, .., 1
    t_desc = step[::-1].T                                                    # (K+1, n): sizes n..1
    return (extra * t_desc[:, None, :]).sum(axis=2).mean(axis=1)
