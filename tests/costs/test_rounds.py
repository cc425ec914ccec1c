"""Whole-round costs: the round table t(b, k), its cache, and the real-step timer."""
from __future__ import annotations

import pytest

from specdec.adaptive.calibrate import middle_mean, paired, round_timer, synthetic_prompts
from specdec.config import SpecConfig
from specdec.costs import cache as cm_mod
from specdec.costs import cost_model
from specdec.costs.cost_model import DRAFT_KEY, CostModel
from specdec.analysis.costs import cost_table
from specdec.costs.rounds import RoundTable, theil_sen

FAST = dict(min_time=0.0, min_reps=1, max_reps=1)
FWD = lambda b, k, L: 0.010 + 0.001 * b + 0.002 * k                 # noqa: E731  forward-only model
ZERO = lambda b, k, L: 0.0                                          # noqa: E731


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(cm_mod, "contended", lambda since=None: False)
    return tmp_path


def table(rows: dict[int, dict[int, float]], L: float = 100.0) -> RoundTable:
    """A table whose step times are the forward model plus the given overheads."""
    return RoundTable({(b, k): (FWD(b, k, L) + o, L) for b, ks in rows.items() for k, o in ks.items()})


def test_theil_sen_ignores_one_outlier():
    a, c = theil_sen({1: 1.0, 2: 2.0, 3: 3.0, 4: 40.0, 5: 5.0})
    assert (a, c) == pytest.approx((0.0, 1.0))
    assert theil_sen({3: 2.0}) == (2.0, 0.0)


def test_steps_plain_point_and_a_robust_line_for_drafting():
    t = table({1: {0: 0.0005, 1: 0.002, 8: 0.009}})                # steps = FWD + these
    assert t.step(1, 0, FWD) == pytest.approx(FWD(1, 0, 100) + 0.0005)  # plain decoding: its own point
    assert t.step(1, 8, FWD) == pytest.approx(FWD(1, 8, 100) + 0.009)
    # on the line through the steps at k=1 and k=8 (FWD is linear in k here)
    assert t.step(1, 4, FWD) == pytest.approx(FWD(1, 4, 100) + 0.002 + 3 * 0.001)
    # one disturbed interior step neither bends the line nor stands for its own k
    t.points[(1, 4)] = (FWD(1, 4, 100) + 0.05, 100.0)
    t.points[(1, 2)] = (FWD(1, 2, 100) + 0.003, 100.0)
    assert t.step(1, 6, FWD) == pytest.approx(FWD(1, 6, 100) + 0.007, rel=1e-6)
    assert t.step(1, 4, FWD) == pytest.approx(FWD(1, 4, 100) + 0.005, rel=1e-6)
    # another cache length: moved by the forward model's change
    long = lambda b, k, L: FWD(b, k, L) + 1e-5 * b * L                    # noqa: E731
    assert t.step(1, 6, long, L=300) - t.step(1, 6, long, L=100) == pytest.approx(1e-5 * 200)


def test_the_drafting_line_passes_through_the_measured_k1_step():
    """Steps curving upward in k (a large batch): a line through all of them would put
    k = 1 below its measured step, where it competes with plain decoding."""
    steps = {0: 0.027, 1: 0.048, 2: 0.065, 3: 0.092, 4: 0.113, 8: 0.224}
    t = RoundTable({(64, k): (v, 100.0) for k, v in steps.items()})
    a, c = theil_sen({k: v for k, v in steps.items() if k})
    assert a + c < 0.048 - 0.003                                           # the plain fit's k = 1
    assert t.step(64, 1, ZERO) == pytest.approx(0.048)
    assert t.step(64, 5, ZERO) == pytest.approx(0.048 + 4 * c)            # the robust slope from there
    assert t.step(64, 3, ZERO) == pytest.approx(max(0.092, 0.048 + 2 * c))   # measured above it: its own


def test_a_measured_step_above_the_line_stands_for_its_k():
    """A kernel cliff at 4 positions (batch 1, stock kernels: 7.7, 9.5, 11.5, 15.1, 16.9,
    18.5 ms for k = 0..5): the line through k = 1 would price k = 3 at 13.4 ms."""
    steps = {0: 7.7, 1: 9.5, 2: 11.5, 3: 15.1, 4: 16.9, 5: 18.5, 6: 20.8, 7: 22.3, 8: 24.0}
    t = RoundTable({(1, k): (v / 1e3, 150.0) for k, v in steps.items()})
    a, c = t.line(1)
    assert a + 3 * c < 0.0135
    assert t.step(1, 3, ZERO) == pytest.approx(0.0151)
    assert t.step(1, 2, ZERO) == pytest.approx(max(0.0115, a + 2 * c))


def test_a_measured_step_below_the_line_gives_way_to_it():
    """A batch-16 row whose k = 4 came out 4 ms over k = 3 where the other steps were 7-9 ms
    apart (noise): believed, it drew adaptive to k = 4, 0.93x the best fixed k."""
    steps = {0: 24.1, 1: 33.4, 2: 40.4, 3: 48.0, 4: 52.0, 5: 61.1, 6: 67.6, 7: 75.7, 8: 84.1}
    t = RoundTable({(16, k): (v / 1e3, 150.0) for k, v in steps.items()})
    a, c = t.line(16)
    assert t.step(16, 4, ZERO) == pytest.approx(a + 4 * c) and a + 4 * c > 0.054


def test_steps_between_rows_follow_the_forwards_and_unmeasured_is_none():
    t = table({1: {0: 0.0, 1: 0.001}, 4: {0: 0.0, 1: 0.004}})
    assert t.step(2, 1, FWD) == pytest.approx(FWD(2, 1, 100) + 0.002)
    assert t.step(16, 1, FWD) == pytest.approx(FWD(16, 1, 100) + 0.004)   # offset held past the last row
    assert RoundTable().step(3, 2, FWD) is None
    assert table({1: {0: 0.001}}).step(1, 3, FWD) is None                  # no drafting measured


def _timer(calls, speed=(1.0,)):
    def timer(key, b, ks, sampled):
        calls.append((key, b, tuple(ks), sampled))
        return {k: ((0.02 + 0.003 * k + 0.001 * b) * speed[0], 64.0) for k in ks}
    return timer


def test_measure_rounds_times_whole_rows_and_caches_them(cache, tiny_target, tiny_draft, monkeypatch):
    cm = CostModel.load_or_measure(tiny_target, tiny_draft, k_max=4, batch_sizes=[1, 4], timing=FAST)
    assert cm.t_round(DRAFT_KEY, 1, 2) == pytest.approx(cm.forward_round(DRAFT_KEY, 1, 2))   # none yet
    calls = []
    cm.measure_rounds(_timer(calls), DRAFT_KEY, [1, 4], sampled=False)
    assert calls == [(DRAFT_KEY, 1, (0, 1, 2, 3, 4), False), (DRAFT_KEY, 4, (0, 1, 2, 3, 4), False)]
    assert cm.t_round(DRAFT_KEY, 1, 4, 64) == pytest.approx(0.02 + 0.012 + 0.001)   # the measured step
    assert cm.t_round(DRAFT_KEY, 4, 0, 64) == pytest.approx(0.024)
    assert cm.t_round(DRAFT_KEY, 1, 4, 64, sampled=True) == pytest.approx(cm.forward_round(DRAFT_KEY, 1, 4, 64))
    assert "draft:draft|greedy" in cost_table(cm)["rounds"]
    # another cost model for the same models reads the table; a new row is timed whole
    again = CostModel.load_or_measure(tiny_target, tiny_draft, k_max=4, batch_sizes=[1, 4], timing=FAST)
    calls.clear()
    again.measure_rounds(_timer(calls), DRAFT_KEY, [1, 2, 4], sampled=False)
    assert calls == [(DRAFT_KEY, 2, (0, 1, 2, 3, 4), False)]
    assert again.t_round(DRAFT_KEY, 1, 4, 64) == pytest.approx(0.033)
    # a larger k_max re-times rows that lack its k, in one go
    wider = CostModel.load_or_measure(tiny_target, tiny_draft, k_max=5, batch_sizes=[1], timing=FAST)
    calls.clear()
    wider.measure_rounds(_timer(calls), DRAFT_KEY, [1], sampled=False)
    assert calls == [(DRAFT_KEY, 1, (0, 1, 2, 3, 4, 5), False)]
    # tables timed another way are not trusted
    monkeypatch.setattr(cost_model, "ROUNDS_VERSION", cost_model.ROUNDS_VERSION + 1)
    calls.clear()
    again.measure_rounds(_timer(calls), DRAFT_KEY, [1], sampled=False)
    assert calls


def test_measure_rounds_only_the_ks_asked_and_price_the_rest_by_the_line(cache, tiny_target, tiny_draft):
    cm = CostModel.load_or_measure(tiny_target, tiny_draft, k_max=8, batch_sizes=[1], timing=FAST)
    calls, rows = [], []
    cm.measure_rounds(_timer(calls), DRAFT_KEY, [1, 4], sampled=False, ks=[1, 3, 6],
                      on_row=lambda done, n: rows.append((done, n)))
    assert calls == [(DRAFT_KEY, 1, (0, 1, 3, 6), False), (DRAFT_KEY, 4, (0, 1, 3, 6), False)]
    assert rows == [(1, 2), (2, 2)]
    assert cm.t_round(DRAFT_KEY, 1, 8, 64) == pytest.approx(0.02 + 0.024 + 0.001)   # k = 8 on the line


def test_a_round_table_from_a_busy_machine_is_timed_again_when_quiet(cache, tiny_target, tiny_draft, monkeypatch):
    cm = CostModel.load_or_measure(tiny_target, tiny_draft, k_max=2, timing=FAST)
    monkeypatch.setattr(cm_mod, "contended", lambda since=None: True)
    calls = []
    cm.measure_rounds(_timer(calls), DRAFT_KEY, [1], sampled=True)
    cm.measure_rounds(_timer(calls), DRAFT_KEY, [1], sampled=True)
    assert len(calls) == 1 and cm.rounds[(DRAFT_KEY, True)].contended
    monkeypatch.setattr(cm_mod, "contended", lambda since=None: False)
    cm.measure_rounds(_timer(calls), DRAFT_KEY, [1], sampled=True)
    assert len(calls) == 2 and not cm.rounds[(DRAFT_KEY, True)].contended


def test_synthetic_prompts_repeat_a_segment():
    ps = synthetic_prompts(100, 3, 40, period=5)
    assert len(ps) == 3 and all(len(p) == 40 for p in ps)
    assert all(p[i] == p[i + 5] for p in ps for i in range(35))
    assert middle_mean([1.0, 2.0, 3.0, 100.0]) == 2.5


def test_paired_times_cancel_a_slow_spell_across_a_pass():
    plain = [10.0, 10.0, 20.0, 20.0]            # passes 3 and 4 ran in a slow spell, and a
    drafting = [17.0, 34.0, 34.0, 34.0]         # burst hit pass 2's drafting step alone
    assert paired(plain, drafting) / middle_mean(plain) == pytest.approx(1.7)
    assert middle_mean(drafting) / middle_mean(plain) == pytest.approx(34 / 15)   # unpaired


def test_round_timer_steps_real_engines(tiny_target, tiny_draft):
    timer = round_timer(tiny_target, SpecConfig(method="draft", k=2), tiny_draft, prompt_len=20,
                        warmup=1, steps=3, budget_s=0.0)
    out = timer(DRAFT_KEY, 2, [0, 1, 3], False)
    assert sorted(out) == [0, 1, 3]
    assert all(t > 0 for t, _L in out.values())
    assert all(20 <= L <= 20 + 5 * 4 for _t, L in out.values())       # the cache grows as it decodes
    assert sorted(timer(DRAFT_KEY, 1, [0, 2], True)) == [0, 2]
    # with time to spare, more passes (up to max_steps): the cache grows further
    longer = round_timer(tiny_target, SpecConfig(method="draft", k=2), tiny_draft, prompt_len=20,
                         warmup=1, steps=3, budget_s=60.0, max_steps=9)
    more = longer(DRAFT_KEY, 2, [0, 1, 3], False)
    assert all(more[k][1] > out[k][1] for k in out)


def test_round_timer_fits_the_models_context(tiny_target, tiny_draft):
    ctx = tiny_target.config.max_position_embeddings
    timer = round_timer(tiny_target, SpecConfig(method="draft", k=2), tiny_draft, prompt_len=ctx, warmup=1,
                        steps=ctx)
    out = timer(DRAFT_KEY, 1, [0, 8], False)
    assert sorted(out) == [0, 8] and all(L < ctx for _t, L in out.values())


def test_round_timer_times_each_drafting_k_beside_plain(tiny_target, tiny_draft, monkeypatch):
    import specdec.engine.engine as eng
    built = []
    real = eng.Engine.__init__

    def counting(self, target, spec, *a, **kw):
        built.append(spec.k)
        real(self, target, spec, *a, **kw)
    monkeypatch.setattr(eng.Engine, "__init__", counting)
    timer = round_timer(tiny_target, SpecConfig(method="draft", k=2), tiny_draft, prompt_len=20,
                        warmup=1, steps=3, budget_s=0.0)
    assert sorted(timer(DRAFT_KEY, 1, [0, 1, 2, 5], False)) == [0, 1, 2, 5]
    assert built == [0, 1, 0, 2, 0, 5]
    built.clear()
    assert sorted(timer(DRAFT_KEY, 1, [4], False)) == [4] and built == [0, 4]      # k = 0 is the anchor
