"""Feature-head trees (eagle and mtp with --tree): greedy output identical to plain decoding,
the exact sampling law, and `--tree auto` giving way to plain steps where no tree pays."""
from __future__ import annotations

import pytest
import torch

from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine import Engine
from specdec.proposers.feature_tree import FeatureTreeProposer
from specdec.proposers.tree_size import BACKOFF_MAX
from tests.conftest import priced_rounds, random_prompts
from tests.proposers.heads import random_head
from tests.proposers.test_exact_law import NEW, P_MIN, PROMPT, V, exact_law, p_value
from tests.proposers.test_feature_head import N_HEAD


def _run(target, method, head, prompts, params, k, tree, max_batch, cost=None, drafted=None):
    prop = FeatureTreeProposer(target, head, max_batch, 256, tree, cost, name=method) if head else None
    if drafted is not None:             # record the batch size of every tree drafted
        priced_rounds(prop)                                        # a tree round 3 plain steps, a chain 1.5
        grow = prop._tree
        prop._tree = lambda batch, k: drafted.append(len(batch)) or grow(batch, k)
    eng = Engine(target, SpecConfig(method=method, k=k, tree=tree if head else 0),
                 EngineConfig(max_batch=max_batch, max_model_len=128), proposer=prop)
    return [s.output_ids for s in eng.generate(prompts, params)], eng


@pytest.mark.parametrize("method,k,tree,max_batch", [("eagle", 2, 4, 1), ("eagle", 4, 16, 4),
                                                      ("mtp", 3, 12, 16), ("mtp", 6, 30, 4)])
def test_greedy_identity_200_prompts_with_head_trees(heads, method, k, tree, max_batch):
    target, head = heads[method]
    prompts = random_prompts(200, seed=k + tree, vocab=64)
    params = SamplingParams(max_new_tokens=16, ignore_eos=True)
    plain, _ = _run(target, "none", None, prompts, params, 0, 0, max_batch)
    out, eng = _run(target, method, head, prompts, params, k, tree, max_batch)
    assert out == plain
    m = eng.metrics
    assert 0 < m.num_accepted_tokens and m.tree_rounds > 0
    assert m.branch_accepts > 0, "no round accepted a node other than a first child"


@pytest.mark.parametrize("T", [0.7, 1.3])
def test_head_tree_sampling_follows_the_exact_law(small, T):
    """Drawn chains from the head's q (two a row), verified by the tree rule: the joint law
    of three tokens is the target's, with a draft vocabulary that leaves q = 0 on two tokens
    (the tree rule itself is tested at T = 0.7, 1 and 1.3 with the draft model: test_exact_law)."""
    target, head = small
    eng = Engine(target, SpecConfig(method="eagle", k=2, tree=4), EngineConfig(max_batch=256, max_model_len=32),
                 proposer=FeatureTreeProposer(target, head, 256, 64, 4))
    params = [SamplingParams(temperature=T, seed=i, max_new_tokens=NEW, ignore_eos=True) for i in range(N_HEAD)]
    seqs = eng.generate([PROMPT] * N_HEAD, params)
    m = eng.metrics
    assert 0 < m.num_accepted_tokens < m.num_draft_tokens and m.tree_rounds > 0
    idx = torch.tensor([a * V * V + b * V + c for s in seqs for a, b, c in [s.output_ids]])
    assert p_value(torch.bincount(idx, minlength=V ** 3).double(), exact_law(target, T)) > P_MIN


def test_auto_head_trees_give_way_where_verification_is_costly(heads):
    """A tree round priced at 3 plain steps and a chain round at 1.5 (priced_rounds): a tree could
    pay (can_pay), but only its probes are drafted (a round at batch 4, one in at most BACKOFF_MAX)
    before it loses to the chain or plain steps, whichever emits more; the output is still plain's."""
    target, head = heads["eagle"]
    prompts = random_prompts(8, seed=22, vocab=64)
    params = SamplingParams(max_new_tokens=40, ignore_eos=True)
    plain, _ = _run(target, "none", None, prompts, params, 0, 0, 4)
    drafted = []
    out, eng = _run(target, "eagle", head, prompts, params, 4, "auto", 4, cost=lambda b, q: 1.0 + 0.5 * (q - 1),
                    drafted=drafted)
    assert out == plain
    m = eng.metrics
    assert len(drafted) <= 1 + m.target_forwards // BACKOFF_MAX, (len(drafted), m.tree_rounds)


def test_a_head_tree_holds_the_heads_greedy_chain(loopy_target):
    """Every level feeds each node with its parent's head output as its feature, as a chain
    feeds each draft its predecessor's. A node's best child is the head's argmax after its
    path, and it is kept whenever any child is (children score below it): so the chain's
    greedy drafts d1 -> d2 -> d3 are a branch of a greedy tree wide enough to keep a child
    at every level (a head whose features matter: random weights)."""
    from specdec.batch import Batch
    from specdec.proposers.feature_head import FeatureHeadProposer
    target, head, budget = loopy_target, random_head(loopy_target, seed=1, std=1.0), 48
    drafts = {}
    for tree, prop in ((0, FeatureHeadProposer(target, head, 1, 64)),
                       (budget, FeatureTreeProposer(target, head, 1, 64, budget))):
        eng = Engine(target, SpecConfig(method="eagle", k=3, tree=tree), EngineConfig(max_batch=1, max_model_len=32),
                     proposer=prop)
        eng.add_request(PROMPT, SamplingParams(max_new_tokens=8, ignore_eos=True))
        eng.step()                                                      # admission: the first token
        drafts[tree] = prop.propose(Batch(eng.running, eng.rows.sampling()), 3)
    chain, toks, parents = drafts[0].tokens[0].tolist(), drafts[budget].tokens[0].tolist(), drafts[budget].parents[0]
    node = -1
    for depth, want in enumerate(chain):
        children = {toks[j]: j for j in range(len(toks)) if parents[j] == node}
        assert want in children, (depth, chain, children)
        node = children[want]
