"""A round asked for k is priced, cold, at the width it is expected to verify (adaptive/width.py):
a proposer that drafts short costs what its short rounds cost; one that drafts in full, and a
measured table, are priced as before."""
from __future__ import annotations

import numpy as np
import pytest

from specdec.adaptive.online import OnlineRounds
from specdec.adaptive.policy import AdaptiveK
from specdec.adaptive.width import DraftWidths
from specdec.config import SamplingParams
from specdec.costs.cost_model import DRAFT_KEY
from specdec.engine.sequence import Sequence
from tests.adaptive.fakes import K_MAX, MEMORY_BOUND, FakeDraft, observe
from tests.synthetic_costs import synthetic_cost_model


def test_expected_width_follows_what_the_proposer_drafts():
    w = DraftWidths(K_MAX)
    np.testing.assert_array_equal(w.expected(DRAFT_KEY), np.arange(K_MAX + 1))   # unseen: in full
    for _ in range(200):
        w.record(DRAFT_KEY, 8, [2, 2])                  # asked for 8, drafted 2 in both rows
    e = w.expected(DRAFT_KEY)
    assert e[2] == pytest.approx(2.0) and e[8] == pytest.approx(2.0, abs=0.1)
    w.record(DRAFT_KEY, 0, [0, 0])                       # a plain round says nothing
    assert w.expected(DRAFT_KEY)[8] == pytest.approx(e[8])


def _cold(n=1):
    cm = synthetic_cost_model(lambda b, q, L: 0.010 + 0.001 * b * q, k_max=K_MAX)   # 1 ms a position
    pol = AdaptiveK(K_MAX, FakeDraft(), cm, OnlineRounds(cm, persist=False))
    batch = [Sequence([2] * 64, SamplingParams(max_new_tokens=1000)) for _ in range(n)]
    for row, seq in enumerate(batch):
        pol.start(row, seq)
    return pol, batch


def test_a_short_drafting_proposer_asked_for_k_costs_its_width():
    pol, batch = _cold()
    full = pol.step_times(1, 64, DRAFT_KEY)
    for _ in range(100):
        observe(pol, batch, 8, [3], [1], 0.013)       # asked for 8, verified 3: the width-3 price
    short = pol.step_times(1, 64, DRAFT_KEY)
    assert short[8] == pytest.approx(short[3], rel=0.02) and short[8] < full[8] - 0.004
    np.testing.assert_allclose(short[:4], pol.online.prices(DRAFT_KEY, False, 1, K_MAX)[:4]
                               + (pol.cost.curve(DRAFT_KEY, 1, K_MAX)[1][:4] * (64 - pol.cost.target.l_ref)),
                               rtol=0.05)


def test_a_measured_table_is_priced_as_asked():
    pol = AdaptiveK(K_MAX, FakeDraft(), MEMORY_BOUND)          # no online table: measured costs
    batch = [Sequence([2] * 64, SamplingParams(max_new_tokens=1000))]
    pol.start(0, batch[0])
    before = pol.step_times(1, 64, DRAFT_KEY)
    for _ in range(50):
        observe(pol, batch, 8, [2], [1], 0.013)
    np.testing.assert_array_equal(pol.step_times(1, 64, DRAFT_KEY), before)
