"""Greedy speculative output is token-identical to plain greedy output, by design: the
target's forward is bitwise shape-invariant (test_invariance.py). On a model built with
near ties, where a non-invariant kernel does change the output: test_near_ties.py."""
import pytest

from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine import Engine
from tests.conftest import perturbed, random_prompts


def _generate(target, spec, prompts, params, draft=None, max_batch=4):
    eng = Engine(target, spec, EngineConfig(max_batch=max_batch, max_model_len=256), draft=draft)
    return [s.output_ids for s in eng.generate(prompts, params)], eng


@pytest.mark.parametrize("k", [1, 3, 5, 8])
def test_greedy_identity_200_prompts(tiny_target, k):
    prompts = random_prompts(200, seed=k)
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    draft = perturbed(tiny_target, 0.02, seed=k)   # partial acceptance: exercises every branch
    plain, _ = _generate(tiny_target, SpecConfig(method="none", k=0), prompts, params, max_batch=16)
    spec, eng = _generate(tiny_target, SpecConfig(method="draft", k=k), prompts, params, draft, max_batch=16)
    assert spec == plain
    assert 0 < eng.metrics.num_accepted_tokens < eng.metrics.num_draft_tokens


@pytest.mark.parametrize("k,tree,max_batch", [(2, 4, 1), (4, 16, 4), (6, 30, 16)])
def test_greedy_identity_200_prompts_with_trees(tiny_target, k, tree, max_batch):
    prompts = random_prompts(120 if max_batch < 16 else 64, seed=10 + k)   # batch 16: a shorter run
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    draft = perturbed(tiny_target, 0.05, seed=k)   # wrong first guesses: branches other than the first win
    plain, _ = _generate(tiny_target, SpecConfig(method="none", k=0), prompts, params, max_batch=16)
    spec, eng = _generate(tiny_target, SpecConfig(method="draft", k=k, tree=tree), prompts, params, draft,
                          max_batch=max_batch)
    assert spec == plain
    m = eng.metrics
    assert m.tree_rounds > 0 and m.branch_accepts > 0, "no round accepted a node other than a first child"


def test_a_tree_runs_to_the_end_of_the_context(tiny_target):
    """k = 8 with a budget of 9: 2 nodes a level, 16 draft slots past the committed tokens, at
    a context length (53 + slack) whose cache is one 64-key block when the slack is short."""
    prompt = random_prompts(1, seed=3, lo=40, hi=41)
    params = SamplingParams(max_new_tokens=13, ignore_eos=True)
    eng = Engine(tiny_target, SpecConfig(method="draft", k=8, tree=9), EngineConfig(max_batch=1, max_model_len=53),
                 draft=perturbed(tiny_target, 0.05, seed=2))
    plain = Engine(tiny_target, SpecConfig(method="none", k=0), EngineConfig(max_batch=1, max_model_len=53))
    assert [s.output_ids for s in eng.generate(prompt, params)] == \
        [s.output_ids for s in plain.generate(prompt, params)]


def test_ngram_trees_are_exact_and_merge_shared_prefixes(tiny_target):
    import numpy as np
    from specdec.proposers.ngram import continuation_tree
    #          0  1  2  3  4  5  6  7  8  9 10 11: the tail "2" follows 5, 1 and 9
    buf = np.array([2, 5, 6, 2, 1, 7, 2, 5, 8, 2, 9, 2])
    tokens, parents = continuation_tree(buf, 1, 2, 2, budget=8)
    # longest match first ([9, 2] has none; "2" alone at ends 9, 6, 3, 0), most recent first
    assert tokens == [9, 2, 5, 8, 1, 7, 6] and parents == [-1, 0, -1, 2, -1, 4, 2]
    assert continuation_tree(buf, 1, 2, 2, budget=3) == ([9, 2, 5], [-1, 0, -1])
    prompts = [p * 3 for p in random_prompts(60, seed=4, hi=12)]      # repeats: n-gram matches
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    plain, _ = _generate(tiny_target, SpecConfig(method="none", k=0), prompts, params, max_batch=8)
    spec, eng = _generate(tiny_target, SpecConfig(method="ngram", k=4, tree=12), prompts, params, max_batch=8)
    assert spec == plain and eng.metrics.tree_rounds > 0


def test_self_draft_accepts_everything(tiny_target):
    prompts = random_prompts(4, seed=1)
    params = SamplingParams(max_new_tokens=21, ignore_eos=True)
    out, eng = _generate(tiny_target, SpecConfig(method="draft", k=4), prompts, params, tiny_target)
    assert eng.metrics.acceptance_rate == 1.0
    assert all(len(o) == 21 for o in out)
    # 21 tokens = 1 from prefill + 4 full rounds of 5
    assert eng.metrics.steps == 4


def test_eos_and_max_tokens_finish_rows_independently(tiny_target, tiny_draft):
    prompts = random_prompts(6, seed=2)
    plain, _ = _generate(tiny_target, SpecConfig(method="none", k=0), prompts,
                         SamplingParams(max_new_tokens=30, ignore_eos=True))
    # make the 7th generated token of prompt 0 an EOS for the engine, via stop_token_ids
    stop = plain[0][6]
    lim = [SamplingParams(max_new_tokens=n, stop_token_ids=(stop,)) for n in (30, 5, 17, 1, 30, 9)]
    out, _ = _generate(tiny_target, SpecConfig(method="draft", k=4), prompts, lim, tiny_draft, max_batch=3)
    for o, p, sp in zip(out, plain, lim):
        expect = p[:sp.max_new_tokens]
        if stop in expect:
            expect = expect[:expect.index(stop)]
        assert o == expect
