"""Measurement on a noisy machine, on synthetic measurements with known answers: the
interval, the extension of wide cells, the in-run offset, and the rule that picks regimes."""
import random

import numpy as np
import pytest

from specdec.analysis import interval as I
from specdec.analysis.extend import extend_wide, groups_needed
from specdec.analysis.in_run import offset, shifted
from specdec.analysis.regimes import best_predicted, headline, regimes
from tests.synthetic_costs import synthetic_cost_model


def test_stretches_pair_steps_by_progress():
    plain = [(j / 8, 0.01, 0.009, 1) for j in range(8)]                  # 8 steps, 1 token each
    spec = [(0.0, 0.02, 0.018, 3), (3 / 8, 0.02, 0.018, 3), (6 / 8, 0.02, 0.018, 2)]
    u = I.stretches(plain, spec, n=4)
    assert u == [(2, 0.02, 3, 0.02, 2, 1), (2, 0.02, 3, 0.02, 2, 1), (2, 0.02, 0, 0.0, 2, 0),
                 (2, 0.02, 2, 0.02, 2, 1)]
    cpu = I.stretches(plain, spec, n=4, cpu=True)
    assert cpu[0] == pytest.approx((2, 0.018, 3, 0.018, 2, 1))
    assert I.pooled(np.array(u)) == pytest.approx((8 / 0.06) / (8 / 0.08))


def units(rng, n, noise, tokens=(8, 12), steps=(8, 4), round_cost=2.0, step_s=0.01):
    """n paired stretches: plain `steps[0]` steps of `step_s`, spec `steps[1]` rounds of
    `round_cost` plain steps, each side's time with multiplicative log-normal noise."""
    return [(tokens[0], steps[0] * step_s * rng.lognormvariate(0, noise), tokens[1],
             steps[1] * round_cost * step_s * rng.lognormvariate(0, noise), steps[0], steps[1]) for _ in range(n)]


def test_interval_of_noise_free_units_is_the_point():
    point, lo, hi = I.bootstrap(units(random.Random(0), 12, 0.0))
    # 12 tokens in 4 rounds of 2 plain steps against 8 tokens in 8 steps: 1.5x
    assert point == pytest.approx(1.5) and lo == pytest.approx(1.5) and hi == pytest.approx(1.5)
    assert I.half_width(point, lo, hi) == pytest.approx(0.0, abs=1e-12)
    one = I.bootstrap(units(random.Random(0), 1, 0.2))
    assert one[0] == one[1] == one[2]                                     # one unit: no interval


def test_interval_covers_the_true_speedup_at_the_nominal_rate():
    rng = random.Random(1)
    hits, trials = 0, 200
    for t in range(trials):
        _, lo, hi = I.bootstrap(units(rng, 16, 0.2), draws=400, seed=t)
        hits += lo <= 1.5 <= hi
    assert 0.85 <= hits / trials <= 0.99          # percentile bootstrap, 16 units: near 95%


def test_interval_is_the_timings_not_the_acceptances():
    # stretches whose acceptance differs but whose round cost is exact: no timing uncertainty
    u = [(8, 0.08, t, 4 * 0.02, 8, 4) for t in (4, 8, 12, 16)]
    point, lo, hi = I.bootstrap(u)
    assert point == pytest.approx(40 / 32) and lo == pytest.approx(point) and hi == pytest.approx(point)


def test_interval_narrows_with_more_units_and_is_deterministic():
    u = units(random.Random(2), 64, 0.3)
    few, many = I.bootstrap(u[:8]), I.bootstrap(u)
    assert I.half_width(*many) < I.half_width(*few) / 1.8                 # about 1/sqrt(8) narrower
    assert I.bootstrap(u) == many


def test_groups_needed_follows_one_over_sqrt_n():
    assert groups_needed(3, 0.05) == 0
    assert groups_needed(3, 0.2) == 9            # 3 * (0.2 / 0.1)^2 - 3
    assert groups_needed(4, 0.11) == 1
    assert groups_needed(3, float("inf")) == 3


class Blocks:
    """Synthetic blocks: a block's width is `w0 * sqrt(n0 / n)` after n groups; each group takes
    `cost` seconds of a fake clock."""

    def __init__(self, spec):
        self.spec, self.now, self.runs = spec, 0.0, []
        self.groups = {b: 3 for b in spec}
        self.durations = {b: [c] * 3 for b, (_, c) in spec.items()}

    def width(self, b):
        w0, _ = self.spec[b]
        return w0 * (3 / self.groups[b]) ** 0.5

    def run_group(self, b, g):
        self.runs.append((b, g))
        self.now += self.spec[b][1]


def test_extension_narrows_wide_cells_within_budget():
    bl = Blocks({"narrow": (0.05, 1.0), "wide": (0.15, 1.0), "hopeless": (0.60, 10.0)})
    done = extend_wide(bl.run_group, bl.width, bl.groups, bl.durations, budget_s=12.0, clock=lambda: bl.now)
    # "wide" needs 3 * 1.5^2 - 3 = 3.75 -> 4 groups (4 s) to get under 10%; "hopeless" needs
    # 105 groups of 10 s: it gets nothing until "wide" is done, then what the budget allows
    assert done[:4] == [("wide", 3), ("wide", 4), ("wide", 5), ("wide", 6)]
    assert bl.width("wide") <= I.WIDE and bl.groups["narrow"] == 3
    assert ("hopeless", 3) not in done[:4] and bl.now <= 12.0 + 10.0
    assert bl.width("hopeless") > I.WIDE                                   # stays wide: uncertain


def test_extension_stops_at_the_budget_and_when_nothing_is_wide():
    bl = Blocks({"a": (0.3, 5.0)})
    done = extend_wide(bl.run_group, bl.width, bl.groups, bl.durations, budget_s=12.0, clock=lambda: bl.now)
    assert len(done) == 2 and bl.now == 10.0                               # a third would overrun
    bl = Blocks({"a": (0.08, 5.0)})
    assert extend_wide(bl.run_group, bl.width, bl.groups, bl.durations, 100.0, clock=lambda: bl.now) == []


def test_in_run_offset_is_added_to_every_step():
    model = lambda a, k: 0.002 + 0.001 * k + 0.0001 * a                   # noqa: E731
    extra = offset(0.0025, model(1, 0))
    assert extra == pytest.approx(0.0004)
    step = shifted(model, extra)
    assert step(1, 0) == pytest.approx(0.0025) and step(1, 3) == pytest.approx(model(1, 3) + 0.0004)
    assert offset(None, 0.002) == 0.0 and offset(0.0, 0.002) == 0.0
    assert shifted(model, -1.0)(1, 0) == pytest.approx(0.5 * model(1, 0))  # never below the floor


def c(w, k, b, pred, speedup, t=0.0):
    return {"workload": w, "k": k, "batch": b, "temperature": t, "pred": pred, "speedup": speedup}


def test_regimes_follow_the_prediction_never_the_measured_maximum():
    cells = [c("code", 1, 1, 1.40, 1.38), c("code", 3, 1, 1.80, 1.70), c("code", 6, 1, 1.75, 2.90),  # lucky k=6
             c("long-code", 1, 1, 0.95, 0.90), c("long-code", 3, 1, 0.80, 1.30),
             c("random", 6, 1, 2.60, 5.76),                                # self-repeating: never picked
             c("prose", 3, 1, 1.50, 1.45),
             c("code", 1, 16, 0.90, 0.70), c("code", 3, 16, 0.60, 1.10), c("code", 3, 4, 1.2, 1.2),
             c("code", 3, 1, 9.0, 9.0, t=1.0)]                             # another temperature
    rows = {r["regime"]: r["cell"] for r in regimes(cells, 0.0)}
    assert list(rows) == ["predictable", "hard", "heavy batching"]
    assert (rows["predictable"]["workload"], rows["predictable"]["k"]) == ("code", 3)
    assert (rows["hard"]["workload"], rows["hard"]["k"]) == ("long-code", 1)
    assert (rows["heavy batching"]["batch"], rows["heavy batching"]["k"]) == (16, 1)
    assert headline(cells, 0.0) is rows["predictable"]


def test_regime_rule_ties_and_fallbacks():
    assert best_predicted([c("code", 3, 1, 1.5, 1.0), c("code", 1, 1, 1.5, 2.0)])["k"] == 1   # tie: smaller k
    assert best_predicted([]) is None
    mine = [c("mine", 2, 1, 1.2, 1.1), c("mine", 4, 1, 1.3, 1.0), c("mine", 4, 8, 0.7, 0.8)]
    rows = regimes(mine, 0.0)
    assert [r["regime"] for r in rows] == ["heavy batching"] and rows[0]["cell"]["batch"] == 8
    assert headline(mine, 0.0)["k"] == 4


def test_round_rows_are_priced_at_the_median_of_separate_timings():
    # the second call's k = 0 reference was caught in a slow spell (its rounds look cheap
    # relative to it); the median of three calls ignores it
    calls = iter([{0: (3.0, 100), 1: (6.6, 110)}, {0: (3.9, 100), 1: (6.7, 110)}, {0: (3.1, 100), 1: (6.5, 112)}])
    seen = []

    def timer(key, b, ks, sampled):
        seen.append((key, b, tuple(ks), sampled))
        return next(calls)
    cm = synthetic_cost_model(lambda b, q, L: 0.001, k_max=1)
    cm.measure_rounds(timer, "draft", [1], False, remeasure=True, repeats=3)
    assert cm.rounds[("draft", False)].points == {(1, 0): (3.1, 100), (1, 1): (6.6, 110)}
    assert seen == [("draft", 1, (0, 1), False)] * 3
