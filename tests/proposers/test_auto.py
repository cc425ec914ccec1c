"""auto: the bandit converges to the best arm, keeps exploring, follows a regime change;
and the real proposer builds its arms from the registry and keeps sub-proposers in sync."""
import random

import torch

from specdec.config import SpecConfig
from specdec.proposers import create
from specdec.proposers.auto import AutoProposer
from specdec.proposers.base import Proposer, Draft


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class FakeArm(Proposer):
    """Proposes k tokens costing `cost` seconds; `accept` draws the accepted count."""

    def __init__(self, clock, cost, accept):
        self.clock, self.cost, self.accept, self.observed = clock, cost, accept, []

    def propose(self, context, k):
        self.clock.t += self.cost
        return Draft(tokens=torch.zeros(len(context), k, dtype=torch.long))

    def rollback(self, num_accepted):
        self.observed.append(list(num_accepted))


def simulate(auto, arms, clock, rounds, verify_cost=0.004, k=4, rng=None):
    rng = rng or random.Random(0)
    ctx = [object()]
    for _ in range(rounds):
        auto.propose(ctx, k)
        arm = arms[auto.chosen[0]]
        clock.t += verify_cost
        auto.rollback([arm.accept(rng, k)])


def make(clock, specs, **kw):
    arms = {name: FakeArm(clock, cost, acc) for name, (cost, acc) in specs.items()}
    auto = AutoProposer(arms, clock=clock, **kw)
    auto.start(0, None)
    return auto, list(arms.values())


def binom(p):
    def draw(rng, k):
        n = 0
        while n < k and rng.random() < p:
            n += 1
        return n
    return draw


SPECS = {  # name: (draft cost s, acceptance) ; goodput = E[accepted + 1] / (cost + 0.004)
    "slow_good": (0.010, binom(0.8)),    # ~3.4 tokens / 14 ms = 240 tok/s
    "cheap_ok": (0.0005, binom(0.5)),    # ~1.9 tokens / 4.5 ms = 420 tok/s  <- best
    "none": (0.0, lambda rng, k: 0),     # 1 token / 4 ms = 250 tok/s
}


def test_converges_to_the_best_arm_and_keeps_exploring():
    clock = Clock()
    auto, arms = make(clock, SPECS)
    simulate(auto, arms, clock, 3000)
    late = [r[0] for r in auto.history[1500:]]
    assert late.count(1) / len(late) > 0.85
    for window in range(1000, 3000, 500):               # never abandons the others for good
        chosen = {r[0] for r in auto.history[window:window + 500]}
        assert chosen == {0, 1, 2}


def test_follows_a_change_of_regime():
    clock = Clock()
    state = {"p": 0.9}
    specs = dict(SPECS, cheap_ok=(0.0005, lambda rng, k: binom(state["p"])(rng, k)))
    auto, arms = make(clock, specs)
    simulate(auto, arms, clock, 1000)
    assert [r[0] for r in auto.history[500:1000]].count(1) > 400
    state["p"] = 0.0                                     # the leader stops being accepted
    arms[1].cost = 0.006                                 # and gets slow: 1 token / 10 ms
    simulate(auto, arms, clock, 1000)
    late = [r[0] for r in auto.history[-500:]]
    assert late.count(1) / len(late) < 0.1
    assert late.count(0) + late.count(2) > 0.9 * len(late)


def test_sub_proposers_only_see_their_own_acceptances():
    clock = Clock()
    auto, arms = make(clock, SPECS)
    auto.start(1, None)
    for _ in range(30):
        auto.propose([object(), object()], 4)
        chosen = list(auto.chosen)
        auto.rollback([3, 2])
        for i, arm in enumerate(arms):
            if i in chosen:
                assert arm.observed[-1] == [3 if chosen[0] == i else 0, 2 if chosen[1] == i else 0]


def test_rollback_without_propose_is_ignored():
    clock = Clock()
    auto, arms = make(clock, SPECS)
    auto.rollback([0])
    assert all(not a.observed for a in arms)


def test_a_planned_round_without_drafts_counts_as_the_arms_play():
    """The policy may pick k = 0 for the planned arm: the engine then never calls propose, and
    the plain round it runs is that arm's play (a bandit learning nothing from it would plan
    the same arm forever)."""
    clock = Clock()
    auto, arms = make(clock, SPECS)
    auto.plan([object()])
    first = auto.planned[0]
    clock.t += 0.004                                     # a plain round
    auto.rollback([0])
    assert auto.rows[0].n[first] == 1.0 and auto.rows[0].tok[first] == 1.0
    assert auto.history == [[first]] and all(not a.observed for a in arms)   # no arm drafted
    auto.plan([object()])
    assert auto.planned[0] != first                      # on to an arm not tried yet


def test_factory_builds_available_arms(tiny_target, tiny_draft):
    spec = SpecConfig(method="auto", k=4, options={"layerskip_layers": 1})
    with_draft = create("auto", tiny_target, spec, draft_model=tiny_draft, rows=2, max_len=128)
    assert with_draft.names == ["draft", "ngram", "suffix"]
    without = create("auto", tiny_target, spec, rows=2, max_len=128)
    assert "draft" not in without.names
    some = create("auto", tiny_target, SpecConfig(method="auto", k=4, options={"auto_arms": "ngram,none"}))
    assert some.names == ["ngram", "none"]


def test_prior_is_kept_per_coupling_mode():
    """A request's goodput becomes the prior only of later requests verified the same way:
    invariant rows learn that arm 'b' is best, and a standard row still starts from nothing."""
    from types import SimpleNamespace
    from specdec.config import SamplingParams

    def seq(coupling):
        return SimpleNamespace(params=SamplingParams(temperature=1.0, coupling=coupling))

    clock = Clock()
    arms = {"a": FakeArm(clock, 0.001, binom(0.0)), "b": FakeArm(clock, 0.001, binom(0.9))}
    auto = AutoProposer(arms, clock=clock, prior=5.0)
    auto.start(0, seq("invariant"))
    simulate(auto, list(arms.values()), clock, 200)
    auto.finish(0)
    tok, sec = auto.prior_of("invariant")
    assert sec[0] > 0 and sec[1] > 0 and tok[1] / sec[1] > tok[0] / sec[0]
    assert auto.prior_of("standard") == ([0.0, 0.0], [0.0, 0.0])
    auto.start(0, seq("standard"))                     # no prior: an untried arm (n = 0) first
    assert auto.rows[0].n == [0.0, 0.0] and auto.choose(auto.rows[0]) == 0
    auto.finish(0)
    auto.start(1, seq("invariant"))                    # the invariant prior: both arms pre-counted
    assert auto.rows[1].n == [5.0, 5.0] and auto.choose(auto.rows[1]) == 1
