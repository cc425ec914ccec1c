"""AcceptanceTracker: per-request, per-position Beta estimates; acceptance probabilities
instead of outcomes; observations past k; queued rounds folded in."""
from __future__ import annotations

import numpy as np
import pytest

from specdec.adaptive.acceptance import AcceptanceTracker


def test_per_request_and_per_position_estimates():
    acc = AcceptanceTracker(4)
    acc.start(0)
    acc.start(1)
    for _ in range(20):
        acc.record("x", [4, 4], [4, 1])               # row 0 accepts all, row 1 stops at 2
    a = acc.row_means("x", 2)
    assert a[0].min() > 0.8
    assert a[1, 0] > 0.8 and a[1, 1] < 0.3
    e = acc.expected_tokens("x", [100, 100])
    assert np.all(np.diff(e) > 0) and e[0] == 2.0
    acc.move_row(0, 1)
    assert np.allclose(acc.row_means("x", 2)[1], a[0])
    acc.start(2)
    for _ in range(20):
        acc.record("y", [0, 0, 2], [0, 0, 2], k=4)     # rows 0, 1 had nothing to propose
    assert acc.row_means("y", 3)[0, 0] < 0.3 and acc.row_means("y", 3)[2, 2] < 0.3


def test_acceptance_probabilities_replace_noisy_outcomes():
    """Fed beta_j, the estimate follows the acceptance probability whatever the 0/1 outcomes
    were; without it, the same unlucky outcomes drag the estimate down."""
    rb, plain = AcceptanceTracker(4), AcceptanceTracker(4)
    for acc in (rb, plain):
        acc.start(0)
    for _ in range(12):
        m = 0                                              # an unlucky streak: rejected at once
        rb.record("x", [4], [m], k=4, accept_prob=[[0.7, 0.7, 0.7, 0.7]])
        plain.record("x", [4], [m], k=4)
    assert abs(rb.row_means("x", 1)[0, 0] - 0.7) < 0.06
    assert plain.row_means("x", 1)[0, 0] < 0.3
    # positions past the first rejection are not counted; a draft that was not made fails
    acc = AcceptanceTracker(4)
    acc.start(0)
    acc.record("y", [1], [1], k=4, accept_prob=[[0.9, 0.0, 0.0, 0.0]])
    acc.flush()
    s, f = acc.keys["y"]
    assert np.allclose(s, [0.9, 0, 0, 0]) and np.allclose(f, [0.1, 1, 0, 0])
    assert np.allclose(acc.rows_s[0], s) and np.allclose(acc.rows_f[0], f)
    acc.record("y", [1], [0], k=4, accept_prob=[[0.5, 0.0, 0.0, 0.0]])      # older evidence decays
    acc.flush()
    assert np.allclose(acc.rows_s[0], [0.9 * 0.95 + 0.5, 0, 0, 0])
    assert np.allclose(acc.keys["y"][0], [0.9 * 0.98 + 0.5, 0, 0, 0])


@pytest.mark.parametrize("with_beta", [False, True])
def test_queued_rounds_fold_in_exactly_as_one_at_a_time(with_beta):
    """The tracker queues rounds and folds runs of them at once: the same estimates as
    folding each round as it comes, across k changes, idle rounds and positions past k."""
    rng = np.random.default_rng(1)
    lazy, eager = AcceptanceTracker(5), AcceptanceTracker(5)
    for t in (lazy, eager):
        for row in range(3):
            t.start(row)
    k, longest = 2, 0
    for i in range(60):
        if i % 7 == 0:
            k = int(rng.integers(0, 6))
        acc = [int(x) for x in rng.integers(0, k + 1, 3)]
        prob = rng.random((3, k)).tolist() if with_beta and k else None
        look = (k + 1, [float(x) if x > 0.5 else float("nan") for x in rng.random(3)])
        for t in (lazy, eager):
            if i % 3 == 0 and k:
                t.record_position("x", *look)
            t.record("x", [k] * 3, acc, k, prob)
        eager.flush()
        longest = max(longest, len(lazy._queue))
        if i == 30:
            for t in (lazy, eager):
                t.move_row(2, 0)
    assert longest >= 5                                         # runs of rounds were folded at once
    assert np.allclose(lazy.row_means("x", 3), eager.row_means("x", 3))
    assert np.allclose(lazy.keys["x"][0], eager.keys["x"][0]) and np.allclose(lazy.keys["x"][1], eager.keys["x"][1])


def test_observation_past_k_counts_at_that_position_only():
    """A lookahead beta lands at its own position, for the rows that have one; a position
    beyond k_max is ignored. While k = 1 runs, position 2 then tracks its own evidence
    instead of inheriting position 1's."""
    acc = AcceptanceTracker(3)
    for row in range(2):
        acc.start(row)
    acc.record_position("x", 2, [0.9, float("nan")])
    acc.flush()
    s, f = acc.keys["x"]
    assert np.allclose(s, [0, 0.9, 0]) and np.allclose(f, [0, 0.1, 0])
    assert np.allclose(acc.rows_s[:, 1], [0.9, 0]) and np.allclose(acc.rows_f[:, 1], [0.1, 0])
    acc.record_position("x", 4, [1.0, 1.0])                  # past k_max: nothing to learn
    acc.flush()
    assert np.allclose(acc.keys["x"][0], [0, 0.9, 0])
    inherit, look = AcceptanceTracker(3), AcceptanceTracker(3)
    for t in (inherit, look):
        t.start(0)
    for _ in range(30):                                        # k = 1, every draft accepted w.p. 0.6
        for t in (inherit, look):
            t.record("y", [1], [1], k=1, accept_prob=[[0.6]])
        look.record_position("y", 2, [0.95])
    assert inherit.row_means("y", 1)[0, 1] < 0.7 < 0.9 < look.row_means("y", 1)[0, 1]


def test_row_tokens_mean_and_variance_of_a_round():
    acc = AcceptanceTracker(3)
    acc.start(0)
    acc.start(1)
    a = acc.row_means("d", 2)[0]                                # the prior's E[a_j], same for both rows
    mean, var = acc.row_tokens("d", [50, 2])
    assert mean.sum(axis=0) == pytest.approx(acc.expected_tokens("d", [50, 2]))
    # row 0 at k = 1: T = 1 + Bernoulli(a_1)
    assert mean[0, 1] == pytest.approx(1 + a[0]) and var[0, 1] == pytest.approx(a[0] * (1 - a[0]))
    assert var[0, 0] == 0.0 and mean[0, 0] == 1.0
    # row 1 has 2 tokens left: from k = 1 on it is capped, so longer drafts add nothing
    assert mean[1, 3] == pytest.approx(mean[1, 1]) and var[1, 3] == pytest.approx(var[1, 1])
