"""A draining batch's expected time to finish (engine/drain.py)."""
from __future__ import annotations

import numpy as np
import pytest

from specdec.engine.drain import drain_seconds


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
