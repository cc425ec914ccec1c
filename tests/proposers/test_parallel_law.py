"""Speculative sampling with the parallel drafter draws exactly from the target's law.

test_exact_law's chi^2 test (V = 5, the joint law of the next 3 tokens) with q being each
draft slot's own distribution: the last real token's for draft 1, mask j's for draft j + 1.
The negative controls hand the verifier a q from the wrong slot (the drafts themselves are
drawn correctly), or draw every draft from draft 1's slot while reporting each slot's q:
both must fail the same test.
"""
import pytest
import torch

from specdec.proposers.parallel import ParallelProposer
from tests.conftest import make_model, perturbed
from tests.proposers.parallel_drafts import with_mask
from tests.proposers.test_exact_law import N_CONTROL, P_MIN, V, exact_law, p_value, sampled


@pytest.fixture(scope="module")
def pair():
    target = make_model(3, std=0.5, vocab=V)
    # rejected often (test_exact_law's noise), and a mask slot far from the target's law
    return target, with_mask(perturbed(target, 1.0), seed=2, scale=3.0)


@pytest.mark.parametrize("T,top_k,top_p", [(0.7, 0, 1.0), (1.0, 0, 1.0), (1.3, 0, 1.0), (1.0, 3, 1.0), (1.0, 0, 0.8)])
def test_parallel_sampling_follows_the_exact_law(pair, T, top_k, top_p):
    assert p_value(sampled(pair, "parallel", T, top_k, top_p), exact_law(pair[0], T, top_k, top_p)) > P_MIN


def test_a_batch_mixing_greedy_rows_samples_exactly(pair):
    assert p_value(sampled(pair, "parallel", greedy_every=4), exact_law(pair[0])) > P_MIN


def _q_from_the_next_slot(propose):
    """Bug: draft i is drawn from q_i, but the verifier is told q_{i+1} (the slots rolled)."""
    def wrong(self, batch, k):
        d = propose(self, batch, k)
        d.probs = d.probs.roll(-1, dims=1)
        return d
    return wrong


def _every_draft_from_the_first_slot(propose):
    """Bug: every draft is drawn from draft 1's slot (as if the masks were never read), while
    each slot's own q is reported."""
    def wrong(self, batch, k):
        d = propose(self, batch, k)
        g = torch.Generator().manual_seed(int(d.tokens.sum()))
        d.tokens = torch.multinomial(d.probs[:, 0], k, replacement=True, generator=g)    # (B, k)
        return d
    return wrong


@pytest.mark.parametrize("bug", [_q_from_the_next_slot, _every_draft_from_the_first_slot])
def test_negative_control_a_wrong_slot_fails(pair, monkeypatch, bug):
    monkeypatch.setattr(ParallelProposer, "propose", bug(ParallelProposer.propose))
    assert p_value(sampled(pair, "parallel", n=N_CONTROL), exact_law(pair[0])) < P_MIN
