"""A draining batch's expected time to finish (engine/drain.py)."""
from __future__ import annotations

import numpy as np
import pytest

from specdec.adaptive.drain import drain_seconds


def test_one_row_is_the_rate_objective():
    mean = np.array([[1.0, 1.8, 2.4]])                      # tokens per round at k = 0, 1, 2
    var = np.array([[0.0, 0.16, 0.5]])
    step = np.array([[10.0, 14.0, 17.0]])                   # seconds a round at batch size 1
    got = drain_seconds(mean, var, [60], step)
    assert got == pytest.approx(60 / mean[0] * step[0], rel=0.01)   # its mean rounds (clipped draws: ~0.1%)
    assert int(np.argmin(got)) == int(np.argmax(mean[0] / step[0]))


def test_certain_rows_in_step_finish_together():
    n = 8
    mean = np.tile([1.0, 2.0], (n, 1))
    var = np.zeros((n, 2))
    step = np.tile([[1.0, 1.5]], (n, 1)) * np.arange(1, n + 1)[:, None]   # dearer with more rows
    got = drain_seconds(mean, var, [40] * n, step)
    assert got == pytest.approx([40 * step[-1, 0], 20 * step[-1, 1]])     # all rounds at full size


def test_the_spread_of_a_long_draft_costs_a_tail():
    """k = 1 and 2 at the same full-batch rate: the one whose rows drift apart takes longer."""
    n = 16
    mean = np.tile([1.0, 2.0, 4.0], (n, 1))
    var = np.tile([0.0, 0.0, 2.0], (n, 1))
    step = np.tile([[0.6, 1.0, 2.0]], (n, 1))               # as dear at every size: the tail is waste
    got = drain_seconds(mean, var, [64] * n, step)
    assert got[1] == pytest.approx(32.0)
    assert got[2] > got[1] * 1.05
    assert int(np.argmin(got)) == 1


def test_rows_that_differ_are_waited_for():
    mean = np.array([[1.0, 3.0], [1.0, 1.2]])               # the second row rarely accepts
    var = np.zeros((2, 2))
    step = np.array([[1.0, 1.6], [1.0, 1.6]])
    got = drain_seconds(mean, var, [30, 30], step)
    assert got[1] == pytest.approx(30 / 1.2 * 1.6)          # the slow row sets the finish
    assert int(np.argmin(got)) == 0                         # where the rate (4.2 vs 2 tokens) says k = 1


def _simulate(a: np.ndarray, k: int, remaining: int, step: np.ndarray, sims: int = 4000) -> float:
    """Mean seconds until a closed batch's last row finishes, by direct simulation: row r
    drafts k tokens a round, draft j accepted with probability a[r, j] once 1..j-1 were, and
    emits 1 + A tokens (at most what it has left); a round costs step[live rows - 1, k]."""
    rng = np.random.default_rng(1)
    n = a.shape[0]
    left = np.full((sims, n), remaining)                                  # (S, n)
    total = np.zeros(sims)
    while (left > 0).any():
        live = left > 0
        total += np.where(live.any(axis=1), step[np.maximum(live.sum(axis=1) - 1, 0), k], 0.0)
        ok = rng.random((sims, n, k)) < a[None, :, :k]                    # (S, n, k)
        accepted = np.cumprod(ok, axis=2).sum(axis=2)                     # (S, n) leading successes
        left = np.where(live, np.maximum(left - 1 - accepted, 0), 0)
    return float(total.mean())


@pytest.mark.parametrize("spread", [False, True])
def test_matches_a_simulated_closed_batch(spread):
    """The normal approximation against the process it models: 16 rows, 64 tokens each, the
    acceptance of the bundled pair on code (0.79, 0.8, 0.8, ..), a step that grows with the
    live rows and the drafted positions; with `spread`, half the rows accept far less."""
    n, K, R = 16, 5, 64
    a = np.tile([0.79, 0.81, 0.8, 0.8, 0.8], (n, 1))
    if spread:
        a[n // 2:] = 0.45
    reach = np.ones((n, K + 1))
    reach[:, 1:] = np.cumprod(a, axis=1)                                  # P(A >= i)
    pos = np.arange(K + 1)
    mean = np.cumsum(reach, axis=1)
    var = np.cumsum((2 * pos + 1) * reach, axis=1) - mean ** 2
    sizes = np.arange(1, n + 1)[:, None]
    step = 0.03 + 0.002 * sizes * (1 + 0.5 * pos[None])                   # (n, K+1)
    got = drain_seconds(mean, var, [R] * n, step)
    want = np.array([_simulate(a, k, R, step) for k in range(K + 1)])
    assert got == pytest.approx(want, rel=0.04)
    assert want[int(np.argmin(got))] <= want.min() * 1.01                 # picks a k within 1% of the best
