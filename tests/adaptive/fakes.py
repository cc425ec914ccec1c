"""Synthetic cost tables, fake proposers and a round driver for the AdaptiveK tests."""
from __future__ import annotations

import numpy as np

from specdec.adaptive.policy import AdaptiveK, near_best
from specdec.config import SamplingParams
from specdec.costs.cost_model import DRAFT_KEY
from specdec.costs.key import CostKey
from specdec.engine.round import RoundResult
from specdec.engine.sequence import Sequence
from specdec.proposers.base import Proposer
from tests.synthetic_costs import synthetic_cost_model

K_MAX = 8
# memory-bound: a forward costs the weight read, scoring more positions is nearly free
MEMORY_BOUND = synthetic_cost_model(lambda b, q, L: 0.010 + 0.0002 * b * q,
                                       {"draft:draft": lambda b, L: 0.0005}, k_max=K_MAX)
# compute-bound: cost proportional to the positions scored
COMPUTE_BOUND = synthetic_cost_model(lambda b, q, L: 0.001 * b * q,
                                        {"draft:draft": lambda b, L: 0.0001 * b}, k_max=K_MAX)
# batch 1, no draft model (an n-gram-like proposer): a round verifying k drafts costs
# 10 ms + 4 ms per draft, so with every position accepted w.p. alpha
#   rate(k) = (1 - alpha^(k+1)) / (1 - alpha) / (0.010 + 0.004 k)
LINEAR = synthetic_cost_model(lambda b, q, L: b * (0.010 + 0.004 * (q - 1)), k_max=K_MAX)


def exact_choice(alpha: float) -> int:
    """The k a batch of one row accepting alpha at every position should get on LINEAR."""
    ks = np.arange(K_MAX + 1)
    return near_best((1 - alpha ** (ks + 1)) / (1 - alpha) / (0.010 + 0.004 * ks))


class FakeDraft(Proposer):
    name = "draft"

    def propose(self, batch, k):
        raise AssertionError("the policy never proposes")

    def cost_key(self):
        return DRAFT_KEY


class FakeNgram(FakeDraft):
    name = "ngram"

    def cost_key(self):
        return CostKey("ngram")


def observe(pol, batch, k, num_draft, accepted, dt, accept_prob=None):
    pol.observe(RoundResult(batch, k, pol.proposer.cost_key(), list(num_draft), list(accepted), dt, accept_prob))


def make_policy(cost, n=4, max_new=1000, proposer=None, params=None):
    """An AdaptiveK with n running rows (greedy, or one per SamplingParams in `params`)."""
    pol = AdaptiveK(K_MAX, proposer or FakeDraft(), cost)
    params = params or [SamplingParams(max_new_tokens=max_new)] * n
    batch = [Sequence(list(range(2, 12)), p) for p in params]
    for row, seq in enumerate(batch):
        pol.start(row, seq)
    return pol, batch


def run(pol, batch, accept, steps):
    """Drive `steps` rounds; `accept(k)` -> accepted drafts per row. Returns the k chosen."""
    ks = []
    for _ in range(steps):
        k = pol.choose(batch)
        dt = pol.last_choice["times"][k] if pol.last_choice else 0.0
        observe(pol, batch, k, [k] * len(batch), [accept(k)] * len(batch), dt)
        ks.append(k)
    return ks
