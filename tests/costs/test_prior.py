"""The cold start's prior: which forwards it times, and that a second start reads them back."""
from __future__ import annotations

import pytest

from specdec.costs import cache as cm_mod
from specdec.costs import prior
from tests.conftest import make_model


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(cm_mod, "contended", lambda since=None: False)    # the machine's load is not under test
    monkeypatch.setattr(prior, "PRIOR_TIMING", dict(min_time=0.0, min_reps=1, max_reps=1))
    return tmp_path


def test_the_prior_times_every_q_at_batch_1_and_a_few_at_max_batch(cache, capsys):
    target, draft = make_model(seed=0), make_model(seed=1, num_hidden_layers=1)
    cm = prior.prior_costs(target, draft, k_max=8, max_batch=4)
    qs = {b: sorted({q for (L, bb, q) in cm.target.points if bb == b}) for b in (1, 4)}
    assert qs[1] == list(range(1, 10))                     # the decoder's steps in q are all seen at b = 1
    assert qs[4] == [1, 2, 3, 5, 9]
    assert {bb for (L, bb, q) in cm.target.points} == {1, 4}
    assert "batch 1" in capsys.readouterr().err
    again = prior.prior_costs(target, draft, k_max=8, max_batch=4)       # cached: nothing timed, nothing said
    assert again.target.points == cm.target.points and capsys.readouterr().err == ""
