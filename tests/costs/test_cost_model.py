"""The cost model: interpolation, the KV-cache term, lazy measurement and the on-disk cache."""
from __future__ import annotations

import json

import pytest

from specdec.costs import cache as cm_mod
from specdec.costs import profiling
from specdec.costs.cache import cache_path, identity_hash, model_identity
from specdec.costs.cost_model import DRAFT_KEY, CostModel
from specdec.costs.profiling import bisect_order, grid_rows
from tests.conftest import make_model, perturbed
from specdec.costs.report import cost_table
from specdec.costs.key import CostKey

FAST = dict(min_time=0.0, min_reps=1, max_reps=1)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(cm_mod, "contended", lambda: False)    # the machine's load is not under test
    return tmp_path


def test_bisect_order_and_grid():
    assert bisect_order(9)[:3] == [1, 9, 5] and sorted(bisect_order(9)) == list(range(1, 10))
    assert sorted(bisect_order(2)) == [1, 2] and bisect_order(1) == [1]
    assert grid_rows(64) == [1, 2, 4, 8, 16, 32, 64] and grid_rows(12) == [1, 2, 4, 8, 12]
    assert CostModel.bracket(5) == [4, 8] and CostModel.bracket(16) == [16] and CostModel.bracket(1) == [1]


def test_interpolation_is_exact_for_a_bilinear_cost_with_a_kv_term():
    f = lambda b, q, L: 0.004 + 0.0003 * b + 0.0002 * q + 0.0001 * b * q + 2e-7 * b * L
    cm = CostModel.from_function(f, {"draft:x": lambda b, L: 0.001 + 1e-5 * b}, k_max=8)
    for b, q, L in [(3, 2.5, 300), (48, 7, 700), (1, 9, 128), (100, 4, 200), (12, 1, 50)]:
        assert cm.t_target(b, q, L) == pytest.approx(f(b, q, L), rel=1e-9)
    assert cm.t_target(5, 3) == pytest.approx(f(5, 3, 128))          # L defaults to l_ref
    assert cm.t_draft(CostKey.parse("draft:x"), 24) == pytest.approx(0.001 + 24e-5)
    assert cm.t_draft("ngram", 24) == 0.0                             # draft-free proposer
    t = cost_table(cm)
    assert t["kv_sigma"] == pytest.approx([2e-7] * 9)
    assert sorted(t["target"]) == [1, 2, 4, 8, 16, 32, 64]


def test_kv_term_vanishes_when_length_does_not_matter():
    cm = CostModel.from_function(lambda b, q, L: 0.01 * q, k_max=4)
    assert cost_table(cm)["kv_sigma"] == [0.0] * 5
    assert cm.t_target(8, 3, 1000) == pytest.approx(0.03)


def test_quick_start_then_lazy_refinement(cache, tiny_target, tiny_draft):
    cm = CostModel.load_or_measure(tiny_target, tiny_draft, quick=True, k_max=3, timing=FAST)
    p = cm.target
    assert p.rows(p.l_ref) == [1] and sorted(p.row(p.l_ref, 1)) == [1, 4]
    assert cm.ensure(5)                                   # first use of b=5: rows 4 and 8
    assert p.rows(p.l_ref) == [1, 4, 8] and sorted(p.row(p.l_ref, 8)) == [1, 4]
    n = 0
    while cm.ensure(5):
        n += 1
    assert n == 4 and sorted(p.row(p.l_ref, 4)) == [1, 2, 3, 4]      # q=2,3 for rows 4 and 8
    assert not cm.ensure(5)
    assert all(t > 0 for t in p.points.values())
    assert all(s >= 0 for s in cost_table(cm)["kv_sigma"])
    assert cm.t_draft(DRAFT_KEY, 6) > 0


def test_cache_round_trip(cache, tiny_target, tiny_draft, monkeypatch):
    cm = CostModel.load_or_measure(tiny_target, tiny_draft, quick=True, k_max=2, timing=FAST)
    while cm.ensure(2):
        pass
    before = cost_table(cm)
    path = cache_path(model_identity(tiny_target))
    assert path.exists() and json.loads(path.read_text())["identity"] == model_identity(tiny_target)

    def boom(*a, **k):
        raise AssertionError("measured although cached")
    monkeypatch.setattr(profiling, "time_forwards", boom)
    again = CostModel.load_or_measure(tiny_target, tiny_draft, quick=True, k_max=2)
    assert cost_table(again) == before
    assert again.ensure(2) is False                      # nothing left to measure for b=2
    with pytest.raises(AssertionError):                   # remeasure ignores the cache
        CostModel.load_or_measure(tiny_target, tiny_draft, quick=True, k_max=2, remeasure=True)


def test_cache_keys_separate_what_changes_the_cost(cache, tiny_target):
    base = identity_hash(model_identity(tiny_target, threads=1))
    assert identity_hash(model_identity(tiny_target, threads=2)) != base
    assert identity_hash(model_identity(tiny_target, num_layers=1, threads=1)) != base
    assert identity_hash(model_identity(make_model(0, vocab=4096), threads=1)) != base
    # weights do not change the cost: a retrained checkpoint of the same shape shares the table
    assert identity_hash(model_identity(perturbed(tiny_target, 0.1), threads=1)) == base
    CostModel.load_or_measure(tiny_target, threads=1, k_max=1, timing=FAST)
    CostModel.load_or_measure(tiny_target, threads=2, k_max=1, timing=FAST)
    assert len(list((cache / "costs").glob("*.json"))) == 2


def test_proposer_with_its_own_layers_is_keyed_and_timed(cache, tiny_target):
    class Skip:                                    # what layerskip exposes
        model, num_layers = tiny_target, 1

        def cost_key(self):
            return CostKey("layerskip", "1")
    cm = CostModel.load_or_measure(tiny_target, Skip(), k_max=1, timing=FAST)
    assert cm.t_draft(CostKey("layerskip", "1"), 1) > 0 and cm.t_draft(DRAFT_KEY, 1) == 0.0
    assert len(list((cache / "costs").glob("*.json"))) == 2


def test_curve_matches_the_pointwise_model():
    f = lambda b, q, L: 0.004 + 0.0001 * b * q + 2e-7 * b * L
    cm = CostModel.from_function(f, {"d": lambda b, L: 0.001 + 1e-6 * L}, k_max=4)
    base, slope = cm.curve("d", 8, k_max=6)                     # k beyond k_max extrapolates
    for k in range(7):
        L = 400
        want = cm.t_target(8, k + 1, L) + k * cm.t_draft("d", 8, L)
        assert base[k] + slope[k] * (L - 128) == pytest.approx(want)


def test_curve_is_memoized_until_something_new_is_measured():
    f = lambda b, q, L: 0.004 + 0.0001 * b * q
    cm = CostModel.from_function(f, {"d": lambda b, L: 0.001}, k_max=4, batch_sizes=[1, 8])
    first = cm.curve("d", 4, k_max=4)
    assert cm.curve("d", 4, k_max=4) is first                   # a hit: the same object
    for q in range(1, 6):                                       # a new row changes the model
        for L in (cm.target.l_ref, cm.target.l_long):
            cm.target.points[(L, 4, q)] = 0.5
    again = cm.curve("d", 4, k_max=4)
    assert again is not first and again[0][0] > first[0][0]


def test_noisy_rows_are_made_monotone():
    p = profiling.ModelProfile(128, 512, {(128, 4, 1): 3.0, (128, 4, 2): 1.0, (128, 4, 3): 2.0,
                                          (128, 8, 1): 1.0, (128, 8, 3): 1.0})
    assert list(p.row(128, 4).values()) == [2.0, 2.0, 2.0]
    assert p.t(8, 2) >= p.t(4, 2)                               # never cheaper at larger b
    assert profiling.isotonic([1, 3, 2, 4]) == [1, 2.5, 2.5, 4]


def test_profile_command_measures_and_prints(cache, tiny_dirs, capsys):
    from specdec.cli import main
    target, draft = tiny_dirs
    assert main(["profile", "--target", str(target), "--draft", str(draft), "--batch-sizes", "1", "3",
                 "--k-max", "1", "--threads", "1", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert sorted(table["target"]) == ["1", "3"] and len(table["target"]["3"]) == 2
    assert table["measured_q"]["3"] == [1, 2] and table["draft"]["draft:draft"]["3"] > 0
    assert main(["profile", "--target", str(target), "--batch-sizes", "1", "--k-max", "1"]) == 0
    assert "target forward" in capsys.readouterr().out


def test_table_measured_under_contention_is_remeasured_when_quiet(cache, tiny_target, monkeypatch):
    monkeypatch.setattr(cm_mod, "contended", lambda: True)
    CostModel.load_or_measure(tiny_target, k_max=1, timing=FAST)
    assert json.loads(cache_path(model_identity(tiny_target)).read_text())["contended"]
    calls = []
    real = profiling.time_forwards
    monkeypatch.setattr(profiling, "time_forwards", lambda *a, **k: calls.append(a) or real(*a, **k))
    busy = CostModel.load_or_measure(tiny_target, k_max=1, timing=FAST)
    assert not calls and cost_table(busy)["contended"]           # still busy: keep the old table
    monkeypatch.setattr(cm_mod, "contended", lambda: False)
    quiet = CostModel.load_or_measure(tiny_target, k_max=1, timing=FAST)
    assert calls and not cost_table(quiet)["contended"]
