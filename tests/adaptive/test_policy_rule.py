"""AdaptiveK's decision rule on synthetic cost tables: draft only where it pays, re-evaluate
every RECHECK rounds and at once when the batch changes, probe cheaply after k = 0, break
near-ties toward the smaller k, and charge a resumed draft model its catch-up."""
from __future__ import annotations

import numpy as np
import pytest

from specdec.adaptive.policy import RECHECK, TIE, near_best
from specdec.config import SamplingParams

from tests.adaptive.fakes import COMPUTE_BOUND, K_MAX, MEMORY_BOUND, make_policy, observe, run


def test_zero_acceptance_stops_drafting():
    pol, batch = make_policy(MEMORY_BOUND)
    ks = run(pol, batch, lambda k: 0, 30)
    assert ks[0] > 0                    # the optimistic prior tries drafting first
    assert ks[-10:].count(0) >= 9       # ... and learns that it does not pay (a rare probe aside)


def test_plain_decoding_reevaluates_every_few_rounds_and_at_once_when_the_batch_changes():
    pol, batch = make_policy(MEMORY_BOUND)
    run(pol, batch, lambda k: 0, 30)                         # settled on k = 0
    calls = []
    inner = pol.acc.expected_tokens
    pol.acc.expected_tokens = lambda *a: calls.append(1) or inner(*a)
    ks = run(pol, batch, lambda k: 0, 8 * RECHECK)
    assert ks.count(0) >= len(ks) - 2 and len(calls) <= 8 + 2  # one evaluation per RECHECK rounds
    calls.clear()
    pol.choose(batch[:-1])                                   # a request left: evaluate now
    assert calls


def test_steady_drafting_reevaluates_every_few_rounds_and_near_a_requests_end():
    pol, batch = make_policy(MEMORY_BOUND)
    run(pol, batch, lambda k: k, 30)                         # settled on a long k
    calls = []
    inner = pol.acc.expected_tokens
    pol.acc.expected_tokens = lambda *a: calls.append(1) or inner(*a)
    ks = run(pol, batch, lambda k: k, 8 * RECHECK)
    assert min(ks) > 0 and len(calls) <= 8 + 2
    calls.clear()
    batch[0].params = SamplingParams(max_new_tokens=batch[0].num_output + ks[-1])   # k tokens left
    pol.choose(batch)
    assert calls                                             # evaluated: the cap may change k


def test_compute_bound_never_drafts_even_when_everything_is_accepted():
    pol, batch = make_policy(COMPUTE_BOUND, n=16)
    ks = run(pol, batch, lambda k: k, 30)
    assert ks == [0] * 30


def test_high_acceptance_and_cheap_verification_drafts_long():
    pol, batch = make_policy(MEMORY_BOUND)
    ks = run(pol, batch, lambda k: k, 20)
    assert min(ks[-5:]) >= K_MAX - 1


def test_recovers_from_k0_and_probing_costs_little():
    pol, batch = make_policy(MEMORY_BOUND, n=1)
    run(pol, batch, lambda k: 0, 40)
    spent = plain = 0.0
    for _ in range(500):                               # a useless draft: occasional probes only
        k = run(pol, batch, lambda k: 0, 1)[0]
        spent += pol.last_choice["times"][k]
        plain += pol.last_choice["times"][0]
    assert spent / plain < 1.02
    ks = run(pol, batch, lambda k: k, 300)             # the draft now agrees with the target
    first = next(i for i, k in enumerate(ks) if k > 0)
    assert first < 200
    assert min(ks[first + 30:first + 40]) >= K_MAX - 1


def test_no_drafting_for_requests_about_to_finish():
    pol, batch = make_policy(MEMORY_BOUND, max_new=1)
    observe(pol, batch, 4, [4] * 4, [4] * 4, 0.01)      # even with perfect acceptance so far
    assert pol.choose(batch) == 0


def test_near_ties_between_drafting_lengths_go_to_the_smaller_k():
    rate = np.array([1.0, 1.5, 2.0, 2.0 * (1 + TIE / 2), 1.9])
    assert near_best(rate) == 2                              # k = 3 is better, but by less than TIE
    rate[3] = 2.0 * (1 + 2 * TIE)
    assert near_best(rate) == 3                              # by more: it wins
    assert near_best(np.array([3.0, 2.0, 1.0])) == 0         # plain is best


def test_whether_to_draft_at_all_is_a_plain_argmax():
    # k = 1 beats plain by less than the margin: still drafted (the margin is only between k >= 1)
    assert near_best(np.array([1.0, 1.0 + TIE / 4, 0.9])) == 1
    # k = 2 is best but within the margin of k = 1, which itself beats plain: k = 1
    assert near_best(np.array([1.0, 1.01, 1.01 * (1 + TIE / 2)])) == 1
    # k = 1 is within the margin of k = 2 but below plain: k = 2, never a k worse than plain
    assert near_best(np.array([1.0, 0.99, 1.01])) == 2
    # an exact tie with plain goes to plain
    assert near_best(np.array([1.0, 1.0, 0.5])) == 0


def test_resuming_after_plain_rounds_carries_the_draft_models_catch_up():
    """After n plain rounds every k > 0 costs min(n, RECHECK) * t_draft / RECHECK more: 4 rows,
    t_draft = 0.5 ms, n >= RECHECK: 0.5 ms a round; plain decoding pays nothing."""
    pol, batch = make_policy(MEMORY_BOUND)
    pol._since = RECHECK
    pol.choose(batch)
    fresh = np.array(pol.last_choice["times"])
    for n in (1, RECHECK, RECHECK + 3):
        pol._idle, pol._since = n, RECHECK
        pol.choose(batch)
        charged = np.array(pol.last_choice["times"])
        assert charged[0] == pytest.approx(fresh[0])
        assert charged[1:] - fresh[1:] == pytest.approx(min(n, RECHECK) * 0.0005 / RECHECK)
    pol._idle = 0
    observe(pol, batch, 0, [0] * 4, [0] * 4, 0.01)
    observe(pol, batch, 0, [0] * 4, [0] * 4, 0.01)
    assert pol._idle == 2
    observe(pol, batch, 1, [1] * 4, [0] * 4, 0.01)
    assert pol._idle == 0


def test_a_round_drafted_by_another_proposer_is_evaluated_at_once():
    """auto switches arms between rounds: k is re-chosen for the arm now drafting, from that
    arm's own record, not kept from the last arm's evaluation for RECHECK rounds."""
    from tests.adaptive.fakes import FakeDraft, FakeNgram
    draft, ngram = FakeDraft(), FakeNgram()

    class Switch(FakeDraft):
        arm = ngram

        def cost_key(self):
            return self.arm.cost_key()

    pol, batch = make_policy(MEMORY_BOUND, proposer=Switch())
    assert run(pol, batch, lambda k: 0, 30)[-1] == 0          # ngram: nothing accepted, plain
    Switch.arm = draft
    ks = run(pol, batch, lambda k: k, 30)
    assert ks[0] > 0 and ks[-1] >= K_MAX - 1                  # the draft: everything accepted
    keys = []
    inner = pol.acc.expected_tokens
    pol.acc.expected_tokens = lambda key, *a: keys.append(key) or inner(key, *a)
    Switch.arm = ngram
    assert pol.choose(batch) < K_MAX - 1 and keys == [ngram.cost_key()]   # at once, from ngram's record
