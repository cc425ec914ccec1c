"""Lookahead: which rows get an observation one position past k."""
from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from specdec.config import SamplingParams
from specdec.engine import lookahead
from specdec.engine.lookahead import Lookahead
from specdec.proposers.base import Draft
from specdec.verify.sampling import BatchSampling

V = 16


def _batch(B: int):
    """B sequences at temperature 1, and their BatchSampling."""
    batch = [SimpleNamespace(id=i, token_ids=[1, 2, 3]) for i in range(B)]
    params = [SamplingParams(temperature=1.0, seed=i) for i in range(B)]
    return batch, BatchSampling(params, [torch.Generator() for _ in params])


def _round(look: Lookahead, batch, sampling, accepted: list[int], k: int = 2):
    """remember() one round in which row b accepted accepted[b] of k drafts, then betas()."""
    B = len(batch)
    p_bonus = torch.softmax(torch.randn(B, V, generator=torch.Generator().manual_seed(1)), -1)
    look.remember(batch, k, "draft", [k] * B, accepted, p_bonus)
    draft = Draft(torch.zeros(B, k, dtype=torch.long), lookahead_logits=torch.randn(B, V))
    return look.betas(batch, draft, "draft", sampling)


def test_rows_that_rejected_a_draft_report_nothing(monkeypatch):
    monkeypatch.setattr(lookahead, "EVERY", 1)
    batch, sampling = _batch(3)
    position, beta = _round(Lookahead(), batch, sampling, [2, 1, 2])
    assert position == 3
    assert [math.isnan(x) for x in beta.tolist()] == [False, True, False]
    assert all(0.0 <= x <= 1.0 for x in beta.tolist() if x == x)


def test_at_most_ROWS_rows_a_round_taking_turns(monkeypatch):
    """A large batch costs only ROWS softmaxes a round, and over rounds every row is seen."""
    monkeypatch.setattr(lookahead, "EVERY", 1)
    B = 2 * lookahead.ROWS + 1
    batch, sampling = _batch(B)
    look, seen = Lookahead(), set()
    for _ in range(3):
        _, beta = _round(look, batch, sampling, [2] * B)
        rows = {b for b, x in enumerate(beta.tolist()) if x == x}
        assert len(rows) == lookahead.ROWS
        seen |= rows
    assert seen == set(range(B))


def test_observes_every_EVERY_rounds():
    batch, sampling = _batch(2)
    look = Lookahead()
    got = [_round(look, batch, sampling, [2, 2]) is not None for _ in range(4 * lookahead.EVERY)]
    assert sum(got) == 4 and got[lookahead.EVERY - 1]
