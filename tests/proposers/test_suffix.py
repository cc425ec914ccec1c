"""Suffix index: counts, matching, frequency-adaptive length, the global LRU store."""
import random

import pytest

from specdec.errors import ConfigError
from specdec.proposers.suffix import SuffixProposer, SuffixTrie


class Seq:
    _ids = iter(range(10**9))

    def __init__(self, ids):
        self.token_ids, self.id = list(ids), next(Seq._ids)


def prop(ids, k=4, **kw):
    p = SuffixProposer(**kw)
    s = Seq(ids)
    p.start(0, s)
    d = p.propose([s], k)
    return d.tokens[0, :d.lengths[0]].tolist()


def test_trie_counts_every_substring_up_to_depth():
    rng = random.Random(1)
    ids = [rng.randrange(4) for _ in range(40)]
    t = SuffixTrie(5)
    t.add(ids)
    for _ in range(200):
        n = rng.randint(1, 5)
        pat = [rng.randrange(4) for _ in range(n)]
        occ = sum(ids[i:i + n] == pat for i in range(len(ids) - n + 1))
        node = t.lookup(pat)
        assert (t.count[node] if node >= 0 else 0) == occ


def test_remove_restores_the_trie_and_frees_nodes():
    rng = random.Random(2)
    base = [rng.randrange(5) for _ in range(60)]
    t = SuffixTrie(6)
    t.add(base)
    size, counts = len(t), {tuple(base[i:i + 3]): t.count[t.lookup(base[i:i + 3])] for i in range(50)}
    for _ in range(10):
        extra = [rng.randrange(5) for _ in range(40)]
        t.add(extra)
        t.remove(extra)
    assert len(t) == size
    assert all(t.count[t.lookup(list(k))] == c for k, c in counts.items())


def test_edge_cases():
    assert prop([]) == []
    assert prop([9]) == []
    assert prop([1, 2, 3, 4]) == []                       # no match
    assert prop([0, 8191, 0], k=2) == [8191]              # boundary ids; cap = ceil(alpha * match 1)
    assert prop([0, 8191, 5, 0, 8191], k=2) == [5, 0]


def test_most_frequent_continuation_beats_the_most_recent():
    ids = [3, 7, 3, 7, 3, 7, 3, 9, 3]
    assert prop(ids, k=1) == [7]                          # 7 follows 3 three times, 9 once


def test_length_adapts_to_how_often_the_continuation_was_seen():
    once = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2]                # "1 2" seen once, then 3 4 5 ...
    steady = [1, 2, 3, 4, 5, 6] * 3 + [1, 2, 3]            # always continued the same way
    branchy = [1, 2, 3, 4, 1, 2, 3, 7, 1, 2, 3, 8, 1, 2, 3, 9, 1, 2, 3]
    assert prop(once, k=6) == [3, 4]                       # capped at alpha * match length (2)
    assert prop(once, k=6, alpha=3) == [3, 4, 5, 6, 7, 8]
    assert prop(steady, k=6) == [4, 5, 6, 1, 2, 3]         # long match: the full k
    assert prop(branchy, k=6, alpha=4, min_prob=0.3) == []  # each continuation seen 1 time in 4
    assert prop(branchy, k=6, alpha=4, min_prob=0.2) == [9, 1, 2, 3]   # then certain


def test_index_catches_up_with_tokens_proposed_elsewhere():
    p = SuffixProposer()
    s = Seq([4, 5, 6])
    p.start(0, s)
    assert p.propose([s], 3).lengths == [0]
    s.token_ids += [4, 5]                                 # the engine appended two tokens
    d = p.propose([s], 3)
    assert d.tokens[0, :d.lengths[0]].tolist() == [6, 4]


def test_earlier_outputs_help_later_requests_and_memory_is_bounded():
    p = SuffixProposer(global_tokens=30)
    first = Seq([2, 3])
    p.start(0, first)
    first.token_ids += [10, 11, 12, 13, 14, 15]            # its output
    p.finish(0)
    assert p.stored_tokens == 6
    second = Seq([5, 10, 11, 12])
    p.start(0, second)
    d = p.propose([second], 3)
    assert d.tokens[0, :d.lengths[0]].tolist() == [13, 14, 15]
    empty = len(SuffixTrie(p.depth))
    for i in range(20):                                    # LRU: old outputs are evicted
        s = Seq([1])
        p.start(1, s)
        s.token_ids += [100 + i] * 10
        p.finish(1)
    assert p.stored_tokens <= 30 and len(p.stored) <= 3
    p.forget(next(iter(p.stored)))
    while p.stored:
        p.forget(next(iter(p.stored)))
    assert len(p.global_trie) == empty                     # every node freed again


def test_bad_settings_raise():
    with pytest.raises(ConfigError):
        SuffixProposer(depth=1)
    with pytest.raises(ConfigError):
        SuffixProposer(alpha=0)


def test_a_tree_keeps_the_likeliest_continuations_best_first():
    """After "1" the text went on with 2 four times and 3 twice; after "1 2", with 7 three
    times and 8 once. Scores: 2 4/6, its child 7 4/6 * 3/4 = 1/2, 3 2/6, 8 1/6. Budget 3
    keeps 2, 7 and 3, best first, parents before children; depth is capped at k, and nodes
    under min_prob are cut."""
    t = SuffixTrie(6)
    t.add([1, 2, 7, 1, 2, 7, 1, 2, 7, 1, 2, 8, 1, 3, 1, 3, 1])
    node = t.lookup([1])
    tokens, parents, expected = t.expand(node, 1, k=2, alpha=2.0, min_prob=0.0, budget=3)
    assert (tokens, parents) == ([2, 7, 3], [-1, 0, -1]) and expected == pytest.approx(4 / 6 + 1 / 2 + 2 / 6)
    tokens, parents, _ = t.expand(node, 1, k=1, alpha=2.0, min_prob=0.0, budget=8)   # depth 1 only
    assert (tokens, parents) == ([2, 3], [-1, -1])
    tokens, _, _ = t.expand(node, 1, k=2, alpha=2.0, min_prob=0.4, budget=8)          # below 0.4: cut
    assert tokens == [2, 7]


def test_the_proposer_drafts_a_tree_per_row_with_a_budget():
    p = SuffixProposer(tree=6, min_prob=0.0, alpha=2.0)      # a 1-token match may go 2 deep
    s = Seq([1, 2, 7, 1, 2, 7, 1, 2, 8, 1, 3, 1])
    p.start(0, s)
    d = p.propose([s], 2)
    tokens = d.tokens[0, :d.lengths[0]].tolist()
    assert tokens[:2] == [2, 7] and sorted(tokens) == [1, 2, 3, 7, 8] and d.parents[0].count(-1) == 2
    assert all(q < i for i, q in enumerate(d.parents[0]))


def test_suffix_trees_are_exact():
    """Greedy output with suffix trees equals plain greedy output (the tiny model's loops
    give the index matches, so some drafts are accepted)."""
    from specdec.config import EngineConfig, SamplingParams, SpecConfig
    from specdec.engine import Engine
    from tests.conftest import make_model, random_prompts
    target = make_model(0)
    prompts = [p * 3 for p in random_prompts(40, seed=4, hi=12)]
    params = SamplingParams(max_new_tokens=64, ignore_eos=True)

    def run(spec):
        eng = Engine(target, spec, EngineConfig(max_batch=8, max_model_len=256))
        return [s.output_ids for s in eng.generate(prompts, params)], eng.metrics
    plain, _ = run(SpecConfig(method="none", k=0))
    spec, m = run(SpecConfig(method="suffix", k=4, tree=12, options={"suffix_min_prob": 0.0}))
    assert spec == plain and m.tree_rounds > 0 and m.num_accepted_tokens > 0
