"""Prompt lookup: matching logic, edge cases and the Draft it returns."""
import random

import numpy as np
import pytest
import torch

from specdec.config import SpecConfig
from specdec.engine.policy import FixedK
from specdec.engine.rows import RowTable
from specdec.errors import ConfigError
from specdec.proposers import create
from specdec.proposers.ngram import NgramProposer, find_match


class NoCache:
    """A row table's target cache where only the proposer's state matters."""
    def move_row(self, src, dst):
        pass

    def reset(self, row):
        pass


class Seq:
    def __init__(self, ids):
        self.token_ids = list(ids)


def brute_force(ids, min_n, max_n):
    """Reference: the longest n (capped at max_n), then the most recent earlier end e."""
    T = len(ids)
    for n in range(max_n, min_n - 1, -1):
        if n > T - 1:
            continue
        tail = ids[T - n:]
        for e in range(T - 2, n - 2, -1):
            if ids[e - n + 1:e + 1] == tail:
                return n, e
    return 0, -1


def propose(ids, k=4, min_n=1, max_n=4):
    d = NgramProposer(min_n, max_n).propose([Seq(ids)], k)
    return d.tokens[0, :d.lengths[0]].tolist()


def test_matches_brute_force_on_random_sequences():
    rng = random.Random(0)
    for _ in range(500):
        ids = [rng.randrange(3) for _ in range(rng.randrange(0, 30))]
        lo = rng.randint(1, 3)
        hi = rng.randint(lo, 5)
        assert find_match(np.array(ids, dtype=np.int64), lo, hi) == brute_force(ids, lo, hi), (ids, lo, hi)


def test_edge_cases():
    assert propose([]) == []                              # empty history
    assert propose([7]) == []                             # nothing before the tail
    assert propose([1, 2, 3, 4, 5]) == []                 # no match
    assert propose([5, 5], min_n=2) == []                 # context shorter than n + 1
    assert propose([5, 6, 5, 6], min_n=3) == []           # only shorter matches exist
    assert propose([5, 5]) == [5]


def test_longest_match_wins_over_more_recent_shorter_one():
    ids = [1, 2, 3, 40, 9, 3, 50, 1, 2, 3]
    assert propose(ids, k=2) == [40, 9]                   # "1 2 3" -> 40, not "3" -> 50


def test_most_recent_of_equally_long_matches():
    assert propose([1, 2, 10, 1, 2, 20, 1, 2], k=1) == [20]


def test_proposal_stops_at_k_and_at_end_of_context():
    assert propose([1, 2, 3, 4, 5, 6, 1, 2], k=3) == [3, 4, 5]
    assert propose([8, 9, 8], k=5) == [9, 8]              # only two tokens followed the match


def test_vocabulary_boundary_ids():
    V = 8192
    assert propose([0, V - 1, 0, 0, V - 1], k=2) == [0, 0]
    assert propose([V - 1, 0, V - 1], k=2) == [0, V - 1]


def test_batch_rows_are_independent_and_padded():
    d = NgramProposer(1, 3).propose([Seq([1, 2, 3, 1, 2]), Seq([4, 5, 6]), Seq([])], 4)
    assert d.lengths == [3, 0, 0] and d.probs is None
    assert tuple(d.tokens.shape) == (3, 3) and d.tokens.dtype == torch.int64
    assert d.tokens[0].tolist() == [3, 1, 2] and d.tokens[1:].eq(0).all()


def test_buffers_follow_appends_moves_and_new_requests():
    p = NgramProposer(1, 4)
    a, b = Seq([1, 2, 3]), Seq([7, 8, 9])
    assert p.propose([a, b], 2).lengths == [0, 0]
    a.token_ids += [1, 2]
    b.token_ids += [7]
    d = p.propose([a, b], 2)
    assert d.tokens[0].tolist() == [3, 1] and d.tokens[1].tolist() == [8, 9]
    rows = RowTable(NoCache(), p, FixedK(2), "cpu")
    rows.free(0)
    rows.move(1, 0)                                       # b now lives in row 0
    d = p.propose([b], 2)
    assert d.tokens[0].tolist() == [8, 9]
    c = Seq([4, 4])                                       # a new request in row 0, no start hook
    assert p.propose([c], 2).tokens[0].tolist() == [4]


def test_settings_come_from_spec_and_are_validated(tiny_target):
    p = create("ngram", tiny_target, SpecConfig(method="ngram", k=4, options={"ngram_min": 2, "ngram_max": 3}))
    assert (p.min_n, p.max_n) == (2, 3)
    with pytest.raises(ConfigError):
        create("ngram", tiny_target, SpecConfig(method="ngram", k=4, options={"ngram_min": 3, "ngram_max": 2}))
    with pytest.raises(ConfigError):
        NgramProposer(0, 2)
