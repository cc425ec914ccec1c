"""Speculative sampling is lossless: statistical tests at fixed seeds."""
import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from specdec.verify.greedy import greedy_verify
from specdec.verify.rejection import acceptance_probability, recovery_distribution, rejection_verify

V = 6
N = 40000


def _dist(*xs):
    t = torch.tensor(xs, dtype=torch.float64)
    return (t / t.sum()).float()


CASES = {
    "p_equals_q": (_dist(1, 2, 3, 4, 5, 6), _dist(1, 2, 3, 4, 5, 6)),
    "disjoint": (_dist(1, 1, 1, 0, 0, 0), _dist(0, 0, 0, 1, 2, 3)),
    "q_zero_where_p_positive": (_dist(1, 2, 3, 4, 0, 0), _dist(0, 0, 5, 1, 2, 2)),
    "skewed": (_dist(10, 1, 1, 1, 1, 1), _dist(1, 1, 1, 1, 1, 10)),
    "one_hot_q": (_dist(3, 1, 2, 1, 1, 2), None),
}


def _run_single_step(p, q, seed):
    """Draw N independent single-draft rounds: x ~ q (or fixed one-hot token), verify, return output."""
    g = torch.Generator().manual_seed(seed)
    if q is None:
        draft = torch.full((N, 1), 2, dtype=torch.long)  # a proposer with no probabilities
        qs = None
    else:
        draft = torch.multinomial(q.expand(N, V), 1, replacement=True, generator=g)
        qs = q.expand(N, 1, V)
    ps = p.expand(N, 2, V).clone()
    u = torch.rand(N, 2, generator=g)
    n_acc, nxt = rejection_verify(ps, qs, draft, torch.ones(N, dtype=torch.long), u[:, :1], u[:, 1])
    # the emitted token: the draft if accepted, else the recovered token
    out = torch.where(n_acc == 1, draft[:, 0], nxt)
    return out, n_acc


@pytest.mark.parametrize("name", list(CASES))
def test_single_step_output_is_distributed_as_p(name):
    p, q = CASES[name]
    out, n_acc = _run_single_step(p, q, seed=1234)
    counts = np.bincount(out.numpy(), minlength=V)
    expected = p.double().numpy() / p.double().sum().item() * N
    support = expected > 0
    assert counts[~support].sum() == 0, "emitted a token outside p's support"
    stat, pval = chisquare(counts[support], expected[support])
    assert pval > 1e-3, (name, counts, expected, pval)
    # acceptance rate equals sum(min(p, q)) (one-hot q: p(x) of the fixed token), which is
    # what acceptance_probability reports for every round
    beta = (torch.minimum(p, q).sum() if q is not None else p[2]).item()
    draft = torch.full((1, 1), 2, dtype=torch.long)
    reported = acceptance_probability(p[None, None], None if q is None else q[None, None], draft)
    assert reported.shape == (1, 1) and abs(reported.item() - beta) < 1e-6
    se = (beta * (1 - beta) / N) ** 0.5
    assert abs(n_acc.float().mean().item() - beta) < 5 * se + 1e-9


def test_bonus_token_is_drawn_from_p_when_all_accepted():
    p = _dist(1, 2, 3, 4, 5, 6)
    ps = torch.stack([p, _dist(6, 5, 4, 3, 2, 1)]).expand(N, 2, V)
    draft = torch.zeros(N, 1, dtype=torch.long)
    g = torch.Generator().manual_seed(7)
    u = torch.rand(N, 2, generator=g)
    # q is one-hot at token 0 and p(0) = 1/21: accepted rounds emit a bonus from ps[:, 1]
    n_acc, nxt = rejection_verify(ps, None, draft, torch.ones(N, dtype=torch.long), u[:, :1] * 0, u[:, 1])
    assert bool((n_acc == 1).all())  # u = 0 always accepts
    counts = np.bincount(nxt.numpy(), minlength=V)
    ref = ps[0, 1].double().numpy()
    assert chisquare(counts, ref / ref.sum() * N).pvalue > 1e-3


def test_rows_respect_their_own_draft_length():
    p = torch.softmax(torch.randn(3, 4, V), -1)
    draft = p[:, :3].argmax(-1)
    n_acc, _ = greedy_verify(p.argmax(-1).tolist(), draft.tolist(), [0, 1, 3])
    assert n_acc == [0, 1, 3]
    u = torch.zeros(3, 3)  # u = 0 accepts every valid draft
    n_acc, _ = rejection_verify(p, None, draft, torch.tensor([0, 1, 3]), u, torch.zeros(3))
    assert n_acc.tolist() == [0, 1, 3]


def test_greedy_stops_at_first_mismatch():
    logits = torch.full((1, 4, V), -1.0)
    for j, t in enumerate([2, 3, 4, 5]):
        logits[0, j, t] = 1.0
    best = logits.argmax(-1).tolist()
    assert greedy_verify(best, [[2, 0, 4]], [3]) == ([1], [3])   # recovered token at the mismatch
    assert greedy_verify(best, [[2, 3, 4]], [3]) == ([3], [5])   # bonus token after all accepted
    assert greedy_verify(best, [[2, 3, 4]], [1]) == ([1], [3])   # a shorter row stops at its length


def test_a_three_token_chain_emits_each_position_from_its_own_p():
    """k = 3 with a different p and q at every position: the j-th emitted token, among rows
    that emitted more than j tokens, is distributed as p_j (each p_j here is fixed, so it
    does not depend on the prefix), and the bonus after three accepted drafts as p_3."""
    g = torch.Generator().manual_seed(11)
    p = torch.stack([_dist(1, 2, 3, 4, 5, 6), _dist(6, 1, 1, 1, 1, 2), _dist(1, 1, 4, 4, 1, 1),
                     _dist(2, 2, 2, 1, 1, 1)])                                     # (k+1, V)
    q = torch.stack([_dist(3, 3, 1, 1, 1, 1), _dist(1, 1, 1, 1, 1, 6), _dist(1, 2, 1, 2, 1, 2)])  # (k, V)
    n, k = 60000, 3
    drafts = torch.stack([torch.multinomial(q[j], n, replacement=True, generator=g) for j in range(k)], 1)
    num_acc, nxt = rejection_verify(p.expand(n, -1, -1), q.expand(n, -1, -1), drafts,
                                    torch.full((n,), k), torch.rand(n, k, generator=g), torch.rand(n, generator=g))
    emitted = [drafts[i, :a].tolist() + [t] for i, (a, t) in enumerate(zip(num_acc.tolist(), nxt.tolist()))]
    for j in range(k + 1):
        tokens = [e[j] for e in emitted if len(e) > j]
        counts = np.bincount(tokens, minlength=V)
        expected = p[j].double().numpy()
        assert chisquare(counts, expected / expected.sum() * len(tokens)).pvalue > 1e-3, j
    # and acceptance at each position is sum_x min(p_j, q_j), given the earlier ones
    for j in range(k):
        reached = (num_acc >= j).sum().item()
        rate = (num_acc > j).sum().item() / reached
        assert abs(rate - torch.minimum(p[j], q[j]).sum().item()) < 4 * (0.25 / reached) ** 0.5, j


def test_acceptance_probability_is_one_minus_tv():
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(torch.randn(4, 3, V, generator=g), -1)
    q = torch.softmax(torch.randn(4, 2, V, generator=g), -1)
    drafts = torch.randint(0, V, (4, 2), generator=g)
    beta = acceptance_probability(p, q, drafts)
    assert torch.allclose(beta, 1 - 0.5 * (p[:, :2] - q).abs().sum(-1), atol=1e-6)
    one_hot = acceptance_probability(p, None, drafts)
    assert torch.allclose(one_hot, p[:, :2].gather(2, drafts[:, :, None]).squeeze(2))


def test_accept_plus_recover_is_p():
    """The identity docs/how-it-works.md proves: min(p, q) + (1 - beta) norm(max(0, p - q)) = p,
    with q a distribution or one-hot (a proposer without probabilities)."""
    g = torch.Generator().manual_seed(9)
    p = torch.softmax(torch.randn(5, V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(5, V, generator=g, dtype=torch.float64), -1)
    one_hot = torch.nn.functional.one_hot(torch.randint(0, V, (5,), generator=g), V).double()
    for qq in (q, one_hot):
        beta = torch.minimum(p, qq).sum(-1, keepdim=True)
        r = recovery_distribution(p, qq)
        assert torch.allclose(r.sum(-1), torch.ones(5, dtype=torch.float64))
        assert torch.allclose(torch.minimum(p, qq) + (1 - beta) * r, p, atol=1e-12)
    assert torch.allclose(recovery_distribution(p, p), p)       # p == q: the guard gives p back
