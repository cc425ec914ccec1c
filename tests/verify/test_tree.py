"""Tree verification: greedy follows the argmax, and sampling over a tree is lossless."""
import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from specdec.verify.greedy import greedy_verify
from specdec.verify.rejection import rejection_verify
from specdec.verify.tree import tree_greedy, tree_rejection

V = 5
N = 8000


def _dist(*xs):
    t = torch.tensor(xs, dtype=torch.float64)
    return (t / t.sum()).float()


def test_greedy_walk_follows_the_argmax_through_siblings():
    #            node: 0   1   2   3   4
    parents = [[-1, -1, 1, 1, 3]]
    tokens = [[7, 8, 5, 6, 9]]
    best = [[8, 0, 6, 0, 9, 4]]   # after root: 8 (node 1); after node 1: 6 (node 3); after 3: 9 (node 4)
    paths, nxt = tree_greedy(best, tokens, parents)
    assert paths == [[1, 3, 4]] and nxt == [4]
    paths, nxt = tree_greedy([[3, 0, 0, 0, 0, 0]], tokens, parents)      # no child carries 3
    assert paths == [[]] and nxt == [3]


def test_on_a_chain_both_rules_are_the_chain_rules():
    g = torch.Generator().manual_seed(0)
    B, k = 64, 4
    p = torch.softmax(torch.randn(B, k + 1, V, generator=g), -1)
    q = torch.softmax(torch.randn(B, k, V, generator=g), -1)
    drafts = torch.multinomial(q.view(-1, V), 1, generator=g).view(B, k)
    u = torch.rand(B, k + 1, generator=g)
    chain = [[j - 1 for j in range(k)]] * B
    n_acc, nxt = rejection_verify(p, q, drafts, torch.full((B,), k), u[:, :k], u[:, k])
    paths, nxt_t = tree_rejection(p, q, drafts.tolist(), chain, u)
    assert [len(x) for x in paths] == n_acc.tolist() and nxt_t == nxt.tolist()
    assert all(x == list(range(len(x))) for x in paths)
    best = p.argmax(-1).tolist()
    acc, nx = greedy_verify(best, drafts.tolist(), [k] * B)
    paths, nx_t = tree_greedy(best, drafts.tolist(), chain)
    assert [len(x) for x in paths] == acc and nx_t == nx


# p after the root, and p after a first token x (the "model" the tree is checked against)
P0 = _dist(4, 1, 3, 0, 2)
P1 = torch.stack([_dist(1, 1, 1, 1, 1), _dist(0, 5, 1, 0, 1), _dist(2, 0, 0, 3, 1),
                  _dist(1, 2, 3, 4, 5), _dist(0, 0, 0, 0, 1)])
PARENTS = [-1, -1, -1, 0, 0, 1]          # three root children; two under node 0, one under node 1

CASES = {
    # tokens of the root's children, the law they were drawn from (None: fixed, one-hot)
    "fixed, a repeated sibling": ("fixed", [2, 0, 2], None),
    "sampled from q": ("sampled", None, _dist(1, 3, 1, 2, 3)),
    "q = p": ("sampled", None, P0),
    "disjoint supports": ("sampled", None, _dist(0, 0, 0, 1, 0)),
}


def _trials(kind, fixed, q_root, seed):
    """N trees with their p rows (from P0/P1 by path) and node laws -> (p, q, tokens)."""
    g = torch.Generator().manual_seed(seed)
    n = len(PARENTS)
    tokens = torch.zeros(N, n, dtype=torch.long)
    q = None if kind == "fixed" else torch.zeros(N, n, V)
    if kind == "fixed":
        tokens[:, :3] = torch.tensor(fixed)
        tokens[:, 3:] = torch.tensor([1, 1, 3])                    # siblings carrying the same token
    else:
        tokens[:, :3] = torch.multinomial(q_root, 3 * N, replacement=True, generator=g).view(N, 3)
        q[:, :3] = q_root
        q_child = _dist(2, 1, 1, 1, 0)                             # the grandchildren's law
        tokens[:, 3:] = torch.multinomial(q_child, 3 * N, replacement=True, generator=g).view(N, 3)
        q[:, 3:] = q_child
    p = torch.zeros(N, n + 1, V)
    p[:, 0] = P0
    for j, par in enumerate(PARENTS):
        first = tokens[:, j] if par < 0 else tokens[:, par]        # the path's first token
        p[:, j + 1] = P1[first] if par < 0 else torch.ones(V) / V  # after two tokens: uniform
    return p, q, tokens, g


@pytest.mark.parametrize("name", list(CASES))
def test_tree_sampling_emits_the_targets_two_token_law(name):
    p, q, tokens, g = _trials(*CASES[name], seed=11)
    u = torch.rand(N, len(PARENTS) + 1, generator=g)
    paths, nxt = tree_rejection(p, q, tokens.tolist(), [PARENTS] * N, u)
    pairs = np.zeros((V, V))
    extra = torch.rand(N, generator=g)
    for b, (path, t) in enumerate(zip(paths, nxt)):
        out = [int(tokens[b, j]) for j in path] + [t]
        if len(out) == 1:                                          # finish with a plain draw
            cdf = torch.cumsum(P1[out[0]], 0)
            out.append(int(torch.searchsorted(cdf, extra[b] * cdf[-1], right=True).clamp(max=V - 1)))
        pairs[out[0], out[1]] += 1
    law = (P0[:, None].double() * P1.double()).numpy()
    expected = law / law.sum() * N
    support = expected > 0
    assert pairs[~support].sum() == 0, "emitted a pair the target never would"
    _, pval = chisquare(pairs[support], expected[support])
    assert pval > 1e-3, (name, pval)
