"""AcceptanceTracker: per-request, per-position Beta estimates; acceptance probabilities
instead of outcomes; relaxation after plain rounds; queued rounds folded in."""
from __future__ import annotations

import numpy as np
import pytest

from specdec.adaptive import acceptance
from specdec.adaptive.acceptance import AcceptanceTracker


def _tracker(k_max: int, rows: int, mode: str = "standard") -> AcceptanceTracker:
    acc = AcceptanceTracker(k_max)
    for row in range(rows):
        acc.start(row, mode)
    return acc


def test_per_request_and_per_position_estimates():
    acc = _tracker(4, 2)
    for _ in range(20):
        acc.record("x", [4, 4], [4, 1], 4)               # row 0 accepts all, row 1 stops at 2
    a = acc.row_means("x", 2)
    assert a[0].min() > 0.8
    assert a[1, 0] > 0.8 and a[1, 1] < 0.3
    e = acc.expected_tokens("x", [100, 100])
    assert np.all(np.diff(e) > 0) and e[0] == 2.0
    acc.rows[1] = acc.rows.pop(0)                       # the row table moves row 0 to row 1
    assert np.allclose(acc.row_means("x", 2)[1], a[0])
    acc.start(2, "standard")
    for _ in range(20):
        acc.record("y", [0, 0, 2], [0, 0, 2], 4)          # rows 0, 1 had nothing to propose
    assert acc.row_means("y", 3)[0, 0] < 0.3 and acc.row_means("y", 3)[2, 2] < 0.3


def test_counts_of_one_round_exactly():
    """One round, k = 4: row 0 made 4 drafts and had 2 accepted (successes at 1, 2, a failure
    at 3, 4 unseen); row 1 made 1 and had it accepted (a failure at 2: no draft was made)."""
    acc = _tracker(4, 2)
    acc.record("x", [4, 1], [2, 1], 4)
    acc.flush()
    assert np.allclose(acc.rows_of("x")[:, 0], [[1, 1, 0, 0], [1, 0, 0, 0]])    # successes
    assert np.allclose(acc.rows_of("x")[:, 1], [[0, 0, 1, 0], [0, 1, 0, 0]])    # failures
    s, f = acc.keys[("x", "standard")]
    assert np.allclose(s, [2, 1, 0, 0]) and np.allclose(f, [0, 1, 1, 0])
    # the proposer's means chain from PRIOR_MEAN: m_1 = (2 * 0.8 + 2) / 4, m_2 = (2 m_1 + 1) / 4, ..
    m1 = (acceptance.PRIOR_N * acceptance.PRIOR_MEAN + 2) / (acceptance.PRIOR_N + 2)
    m2 = (acceptance.PRIOR_N * m1 + 1) / (acceptance.PRIOR_N + 2)
    m3 = (acceptance.PRIOR_N * m2) / (acceptance.PRIOR_N + 1)
    assert acc.proposer_means("x", "standard") == pytest.approx([m1, m2, m3, m3])
    n = acceptance.ROW_PRIOR_N
    assert acc.row_means("x", 2)[0] == pytest.approx([(n * m1 + 1) / (n + 1), (n * m2 + 1) / (n + 1),
                                                      n * m3 / (n + 1), m3])


def test_acceptance_probabilities_replace_noisy_outcomes():
    """Fed beta_j, the estimate follows the acceptance probability whatever the 0/1 outcomes
    were; without it, the same unlucky outcomes drag the estimate down."""
    rb, plain = _tracker(4, 1), _tracker(4, 1)
    for _ in range(12):
        rb.record("x", [4], [0], 4, accept_prob=[[0.7, 0.7, 0.7, 0.7]])     # rejected at once
        plain.record("x", [4], [0], 4)
    assert abs(rb.row_means("x", 1)[0, 0] - 0.7) < 0.06
    assert plain.row_means("x", 1)[0, 0] < 0.3
    # positions past the first rejection are not counted; a draft that was not made fails
    acc = _tracker(4, 1)
    acc.record("y", [1], [1], 4, accept_prob=[[0.9]])
    acc.flush()
    s, f = acc.keys[("y", "standard")]
    assert np.allclose(s, [0.9, 0, 0, 0]) and np.allclose(f, [0.1, 1, 0, 0])
    assert np.allclose(acc.rows_of("y")[0], [s, f])
    acc.record("y", [1], [0], 4, accept_prob=[[0.5]])                       # older evidence decays
    acc.flush()
    assert np.allclose(acc.rows_of("y")[0, 0], [0.9 * acceptance.ROW_DECAY + 0.5, 0, 0, 0])
    assert np.allclose(acc.keys[("y", "standard")][0], [0.9 * acceptance.PROPOSER_DECAY + 0.5, 0, 0, 0])


def test_plain_rounds_relax_requests_fast_and_proposers_slowly():
    acc = _tracker(2, 1)
    acc.record("x", [2], [0], 2)
    for _ in range(3):
        acc.record("x", [0], [0], 0)
    acc.flush()
    assert acc.rows_of("x")[0, 1, 0] == pytest.approx(acceptance.ROW_DECAY ** 6)    # squared per plain round
    assert acc.keys[("x", "standard")][1][0] == pytest.approx(acceptance.PROPOSER_DECAY ** 3)


@pytest.mark.parametrize("with_beta", [False, True])
def test_queued_rounds_fold_in_exactly_as_one_at_a_time(with_beta):
    """The tracker queues rounds and folds runs of them at once: the same estimates as
    folding each round as it comes, across k changes, plain rounds and row moves."""
    rng = np.random.default_rng(1)
    lazy, eager = _tracker(5, 3), _tracker(5, 3)
    k, longest = 2, 0
    for i in range(60):
        if i % 7 == 0:
            k = int(rng.integers(0, 6))
        accepted = [int(x) for x in rng.integers(0, k + 1, 3)]
        prob = rng.random((3, k)).tolist() if with_beta and k else None
        for t in (lazy, eager):
            t.record("x", [k] * 3, accepted, k, prob)
        eager.flush()
        longest = max(longest, len(lazy._queue))
        if i == 30:
            for t in (lazy, eager):                             # the row table moves row 2 to 0
                t.rows[0] = t.rows.pop(2)
    assert longest >= 5                                         # runs of rounds were folded at once
    assert np.allclose(lazy.row_means("x", 3), eager.row_means("x", 3))
    assert all(np.allclose(a, b) for a, b in zip(lazy.keys[("x", "standard")], eager.keys[("x", "standard")]))


def test_row_tokens_mean_and_variance_of_a_round():
    acc = _tracker(3, 2)
    a = acc.row_means("d", 2)[0]                                # the prior's E[a_j], same for both rows
    mean, var = acc.row_tokens("d", [50, 2])
    assert mean.sum(axis=0) == pytest.approx(acc.expected_tokens("d", [50, 2]))
    # row 0 at k = 1: T = 1 + Bernoulli(a_1)
    assert mean[0, 1] == pytest.approx(1 + a[0]) and var[0, 1] == pytest.approx(a[0] * (1 - a[0]))
    assert var[0, 0] == 0.0 and mean[0, 0] == 1.0
    # row 1 has 2 tokens left: from k = 1 on it is capped, so longer drafts add nothing
    assert mean[1, 3] == pytest.approx(mean[1, 1]) and var[1, 3] == pytest.approx(var[1, 1])


def test_a_requests_record_is_kept_per_proposer():
    """One request, two proposers (auto's arms): one's acceptances leave the other's estimate
    for that request at its proposer's means."""
    acc = _tracker(4, 1)
    for _ in range(20):
        acc.record("x", [4], [4], 4)
    assert acc.row_means("x", 1)[0, 0] > 0.9
    assert acc.row_means("y", 1)[0] == pytest.approx(acc.proposer_means("y", "standard"))
    for _ in range(20):
        acc.record("y", [4], [0], 4)
    assert acc.row_means("y", 1)[0, 0] < 0.2 and acc.row_means("x", 1)[0, 0] > 0.5


def test_a_row_moved_while_its_rounds_are_queued_keeps_their_evidence():
    """Rounds are folded in lazily; the row table may retire and move rows in between. Each
    queued round counts toward the requests that ran it, wherever they live now."""
    lazy, eager = _tracker(4, 2), _tracker(4, 2)
    for acc, fold in ((lazy, False), (eager, True)):
        acc.record("x", [4, 4], [0, 4], 4)               # row 0 rejects at once, row 1 accepts all
        if fold:
            acc.flush()
        acc.rows[0] = acc.rows.pop(1)                     # row 0 finished: row 1's request moves up
        acc.record("x", [4], [4], 4)
    assert np.allclose(lazy.rows_of("x", 1), eager.rows_of("x", 1))
    assert np.allclose(lazy.rows_of("x", 1)[0, 1], 0.0)   # no failure counted toward the moved request
    assert lazy.rows_of("x", 1)[0, 0, 0] > 1.9            # both of its rounds succeeded at position 1
