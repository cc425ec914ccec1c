"""Known answers on the synthetic LINEAR cost table: the choice is the argmax of expected
tokens per second (or, draining, the argmin of the finish time), from the summed rows'
estimates capped by their remaining tokens, priced at the batch's size."""
from __future__ import annotations

import numpy as np
import pytest

from specdec.adaptive.drain import drain_seconds
from specdec.adaptive.policy import RECHECK, near_best
from specdec.costs.key import CostKey

from tests.adaptive.fakes import K_MAX, LINEAR, FakeNgram, exact_choice, make_policy, observe


@pytest.mark.parametrize("alpha,want", [(0.8, 2), (0.5, 1), (0.3, 0), (0.9, 3)])
def test_the_choice_is_the_argmax_of_tokens_per_second(alpha, want):
    """Fed acceptance probabilities alpha at every position, the estimates converge on alpha
    and the policy drafts the k that maximises (1 - alpha^(k+1)) / (1 - alpha) / t(1, k)."""
    assert exact_choice(alpha) == want                   # the hand-computed answers
    pol, batch = make_policy(LINEAR, n=1, proposer=FakeNgram())
    for _ in range(300):                                  # evidence at every position, whatever k
        observe(pol, batch, K_MAX, [K_MAX], [K_MAX], 0.0, accept_prob=[[alpha] * K_MAX])
    assert pol.acc.row_means(CostKey("ngram"), 1) == pytest.approx(np.full((1, K_MAX), alpha), abs=0.02)
    pol._since = RECHECK
    assert pol.choose(batch) == want
    ks = np.arange(K_MAX + 1)
    assert pol.last_choice["times"] == pytest.approx(0.010 + 0.004 * ks)   # t(1, k) read off the table


def test_the_batch_sums_its_rows_and_the_table_is_read_at_its_size():
    """Four rows, two accepting at 0.9 and two at 0.2: one k for the batch, from the summed
    expected tokens, priced at t(4, k) = 4 times batch 1's."""
    pol, batch = make_policy(LINEAR, n=4, proposer=FakeNgram())
    for _ in range(300):
        observe(pol, batch, K_MAX, [K_MAX] * 4, [K_MAX] * 4, 0.0,
                accept_prob=[[0.9] * K_MAX, [0.9] * K_MAX, [0.2] * K_MAX, [0.2] * K_MAX])
    pol._since = RECHECK
    k = pol.choose(batch)
    a = pol.acc.row_means(CostKey("ngram"), 4)
    reach = np.hstack([np.ones((4, 1)), np.cumprod(a, axis=1)])
    tokens = np.cumsum(reach, axis=1).sum(axis=0)
    ks = np.arange(K_MAX + 1)
    assert pol.last_choice["tokens"] == pytest.approx(tokens)
    assert pol.last_choice["times"] == pytest.approx(4 * (0.010 + 0.004 * ks))
    assert k == near_best(tokens / (4 * (0.010 + 0.004 * ks))) == 1          # rates 100, 111, 110, 107: k = 1


def test_remaining_tokens_cap_the_expected_tokens():
    """A row with 2 tokens left gains nothing past k = 1: E[tokens] stops growing there."""
    pol, batch = make_policy(LINEAR, n=1, max_new=2, proposer=FakeNgram())
    for _ in range(100):
        observe(pol, batch, K_MAX, [K_MAX], [K_MAX], 0.0, accept_prob=[[0.95] * K_MAX])
    pol._since = RECHECK
    k = pol.choose(batch)
    tokens = pol.last_choice["tokens"]
    assert tokens[1] > tokens[0] and tokens[2:] == pytest.approx([tokens[1]] * (K_MAX - 1)) and k == 1


def test_a_draining_batch_minimises_its_finish_time():
    """Nobody waits: the choice is the argmin of drain.py's expected finish time over the
    steps at each batch size, not the full batch's rate."""
    class Draining(list):
        draining = True
    pol, rows = make_policy(LINEAR, n=4, max_new=40, proposer=FakeNgram())
    batch = Draining(rows)
    for _ in range(60):
        observe(pol, batch, K_MAX, [K_MAX] * 4, [K_MAX] * 4, 0.0, accept_prob=[[0.7] * K_MAX] * 4)
    pol._since = RECHECK
    k = pol.choose(batch)
    ks = np.arange(K_MAX + 1)
    step = np.array([[s * (0.010 + 0.004 * kk) for kk in ks] for s in (1, 2, 3, 4)])     # (4, K+1)
    mean, var = pol.acc.row_tokens(CostKey("ngram"), [40] * 4)
    finish = drain_seconds(mean, var, [40] * 4, step)
    assert pol.last_choice["score"] == pytest.approx(1 / finish)
    assert k == near_best(1 / finish)
    pol._since = RECHECK
    assert pol.choose(batch[:1]) == near_best(np.array(pol.last_choice["tokens"]) / pol.last_choice["times"])
