"""The cost model's forwards: interpolation, the KV-cache term, measurement and the on-disk cache."""
from __future__ import annotations

import json
import time

import pytest
import torch

from specdec.costs import cache as cm_mod
from specdec.costs import profiling
from specdec.costs.cache import cache_path, identity_hash, model_identity
from specdec.costs.cost_model import DRAFT_KEY, CostModel
from specdec.costs.key import CostKey
from specdec.costs.profiling import ModelProfile, grid_rows
from specdec.analysis.costs import cost_table
from tests.conftest import make_model, perturbed
from tests.synthetic_costs import synthetic_cost_model

FAST = dict(min_time=0.0, min_reps=1, max_reps=1)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(cm_mod, "contended", lambda since=None: False)    # the machine's load is not under test
    return tmp_path


def test_grid_rows():
    assert grid_rows(64) == [1, 2, 4, 8, 16, 32, 64] and grid_rows(12) == [1, 2, 4, 8, 12]
    assert grid_rows(1) == [1] and grid_rows(3) == [1, 2, 3]


def test_interpolation_is_exact_for_a_bilinear_cost_with_a_kv_term():
    f = lambda b, q, L: 0.004 + 0.0003 * b + 0.0002 * q + 0.0001 * b * q + 2e-7 * b * L   # noqa: E731
    cm = synthetic_cost_model(f, {"draft:x": lambda b, L: 0.001 + 1e-5 * b}, k_max=8)
    for b, q, L in [(3, 2.5, 300), (48, 7, 700), (1, 9, 128), (100, 4, 200), (12, 1, 50)]:
        assert cm.t_target(b, q, L) == pytest.approx(f(b, q, L), rel=1e-9)
    assert cm.t_target(5, 3) == pytest.approx(f(5, 3, 128))          # L defaults to l_ref
    assert cm.t_draft(CostKey.parse("draft:x"), 24) == pytest.approx(0.001 + 24e-5)
    assert cm.t_draft("ngram", 24) == 0.0                             # draft-free proposer
    assert cm.target.per_token(8, 3) == pytest.approx(8 * 2e-7)
    t = cost_table(cm)
    assert sorted(t["target"]) == [1, 2, 4, 8, 16, 32, 64]
    assert t["kv_effect"][64] == pytest.approx(f(64, 9, 512) / f(64, 9, 128))


def test_the_kv_term_never_falls_nor_goes_below_zero():
    """Noise can make a long cache look cheaper, or the cache all of a forward's cost."""
    p = ModelProfile(128, 512, {(128, 1, 1): 1.0, (512, 1, 1): 0.8, (128, 2, 1): 1.0, (512, 2, 1): 9.0})
    assert p.t(1, 1, 1000) == pytest.approx(1.0)                              # flat, not falling
    assert p.t(2, 1, 0) == pytest.approx(0.0) and p.per_token(2, 1) == pytest.approx(1 / 128)
    assert synthetic_cost_model(lambda b, q, L: 0.01 * q, k_max=4).t_target(8, 3, 1000) == pytest.approx(0.03)


def test_curve_matches_the_pointwise_model():
    f = lambda b, q, L: 0.004 + 0.0001 * b * q + 2e-7 * b * L         # noqa: E731
    cm = synthetic_cost_model(f, {"d": lambda b, L: 0.001 + 1e-6 * L}, k_max=4)
    base, slope = cm.curve(CostKey("d"), 8, k_max=6)                   # k beyond k_max extrapolates
    for k in range(7):
        want = cm.t_target(8, k + 1, 400) + k * cm.t_draft("d", 8, 400)
        assert base[k] + slope[k] * (400 - 128) == pytest.approx(want)
        assert cm.t_round(CostKey("d"), 8, k, 400) == pytest.approx(want)


def test_measures_what_the_cache_lacks_and_reads_the_rest(cache, tiny_target, tiny_draft, monkeypatch):
    cm = CostModel.load_or_measure(tiny_target, tiny_draft, k_max=3, batch_sizes=[1, 4], timing=FAST)
    p = cm.target
    assert p.rows() == [1, 4] and sorted({q for (_L, _b, q) in p.points}) == [1, 2, 3, 4]
    assert {L for (L, _b, _q) in p.points} == {p.l_ref, p.l_long}
    assert all(t > 0 for t in p.points.values()) and cm.t_draft(DRAFT_KEY, 6) > 0
    path = cache_path(model_identity(tiny_target))
    assert json.loads(path.read_text())["identity"] == model_identity(tiny_target)
    calls = []
    real = profiling.time_forwards
    monkeypatch.setattr(profiling, "time_forwards", lambda m, b, *a, **kw: calls.append(b) or real(m, b, *a, **kw))
    again = CostModel.load_or_measure(tiny_target, tiny_draft, k_max=3, batch_sizes=[1, 2, 4], timing=FAST)
    assert sorted(set(calls)) == [2] and again.target.rows() == [1, 2, 4]      # only the new row
    assert cost_table(again)["target"][4] == cost_table(cm)["target"][4]
    calls.clear()
    CostModel.load_or_measure(tiny_target, tiny_draft, k_max=3, batch_sizes=[1], remeasure=True, timing=FAST)
    assert calls                                                               # remeasure ignores the cache


def test_cache_keys_separate_what_changes_the_cost(cache, tiny_target):
    base = identity_hash(model_identity(tiny_target, threads=1))
    assert identity_hash(model_identity(tiny_target, threads=2)) != base
    assert identity_hash(model_identity(tiny_target, num_layers=1, threads=1)) != base
    assert identity_hash(model_identity(make_model(0, vocab=4096), threads=1)) != base
    # weights do not change the cost: a retrained checkpoint of the same shape shares the table
    assert identity_hash(model_identity(perturbed(tiny_target, 0.1), threads=1)) == base
    old = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            CostModel.load_or_measure(tiny_target, k_max=1, timing=FAST)
    finally:
        torch.set_num_threads(old)
    assert len(list((cache / "costs").glob("*.json"))) == 2


def test_proposer_with_its_own_layers_is_keyed_and_timed(cache, tiny_target):
    class Skip:                                    # what layerskip exposes
        model, num_layers = tiny_target, 1

        def cost_key(self):
            return CostKey("layerskip", "1")
    cm = CostModel.load_or_measure(tiny_target, Skip(), k_max=1, timing=FAST)
    assert cm.t_draft(CostKey("layerskip", "1"), 1) > 0 and cm.t_draft(DRAFT_KEY, 1) == 0.0
    assert len(list((cache / "costs").glob("*.json"))) == 2


def test_a_draft_shaped_like_the_target_shares_its_table(cache, tiny_target):
    cm = CostModel.load_or_measure(tiny_target, perturbed(tiny_target, 0.1), k_max=2, timing=FAST)
    assert cm.drafts[DRAFT_KEY] is cm.target and len(list((cache / "costs").glob("*.json"))) == 1


def test_profile_command_measures_and_prints(cache, tiny_dirs, capsys):
    """`specdec profile`: the forwards at --batch-sizes and, for the method, real rounds greedy
    and sampled at the rows up to --max-batch (whose forwards it times too); --no-rounds, or no
    proposer, the forwards alone."""
    from specdec.cli import main
    target, draft = tiny_dirs
    assert main(["profile", "--target", str(target), "--draft", str(draft), "--batch-sizes", "1", "3",
                 "--k-max", "1", "--max-batch", "2", "--threads", "1", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert sorted(table["target"]) == ["1", "2", "3"] and len(table["target"]["3"]) == 2
    assert table["draft"]["draft:draft"]["3"] > 0
    assert {name: sorted(rows) for name, rows in table["rounds"].items()} == {
        "draft:draft|greedy": ["1", "2"], "draft:draft|sampled": ["1", "2"]}
    assert list(table["rounds"]["draft:draft|greedy"]["2"]) == ["0", "1"]
    assert main(["profile", "--target", str(target), "--draft", str(draft), "--batch-sizes", "1", "--k-max", "1",
                 "--no-rounds", "--json"]) == 0
    assert not json.loads(capsys.readouterr().out)["rounds"]
    assert main(["profile", "--target", str(target), "--batch-sizes", "1", "--k-max", "1"]) == 0
    assert "target forward" in capsys.readouterr().out


def test_table_measured_under_contention_is_remeasured_when_quiet(cache, tiny_target, monkeypatch):
    monkeypatch.setattr(cm_mod, "contended", lambda since=None: True)
    CostModel.load_or_measure(tiny_target, k_max=1, timing=FAST)
    assert json.loads(cache_path(model_identity(tiny_target)).read_text())["contended"]
    calls = []
    real = profiling.time_forwards
    monkeypatch.setattr(profiling, "time_forwards", lambda *a, **k: calls.append(a) or real(*a, **k))
    busy = CostModel.load_or_measure(tiny_target, k_max=1, timing=FAST)
    assert not calls and cost_table(busy)["contended"]           # still busy: keep the old table
    monkeypatch.setattr(cm_mod, "contended", lambda since=None: False)
    quiet = CostModel.load_or_measure(tiny_target, k_max=1, timing=FAST)
    assert calls and not cost_table(quiet)["contended"]


@pytest.mark.quiet
def test_only_other_processes_mark_a_timing_window_contended():
    """Our own two busy threads over a window (which drive the 1-minute load average to about
    2 on a 2-core machine: the former rule's contention) do not mark it contended; a spawned
    busy loop does."""
    import subprocess
    import sys
    from specdec.cpu_load import busy_cores, snapshot
    if (busy_cores() or 0.0) > 0.3:
        pytest.skip("other processes are busy: the quiet reading cannot be checked")

    def spin(seconds):
        threads, x = torch.get_num_threads(), torch.randn(512, 512)
        torch.set_num_threads(2)
        try:
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                x = (x @ x).clamp_(-1, 1)
        finally:
            torch.set_num_threads(threads)
    since = snapshot()
    spin(1.5)
    assert not cm_mod.contended(since)
    other = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 3: pass"])
    try:
        time.sleep(0.3)
        since = snapshot()
        time.sleep(1.0)
        assert cm_mod.contended(since)
    finally:
        other.kill()
        other.wait()
