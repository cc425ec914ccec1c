"""`--tree auto`: the kept size follows the costs and the draft's confidence, and stays exact."""
import itertools
import math

import pytest
import torch

from specdec.build import Models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.errors import ConfigError
from specdec.proposers.tree_size import (can_pay, EXPLORE_SHARE, BACKOFF_MAX, KINDS, PROBE_ROWS, AutoSize, Backoff, RoundRates,
                                         Calibration, best_rate, best_size,
                                         probe_rounds)
from tests.conftest import make_model, perturbed, priced_rounds, random_prompts

PROBS = torch.tensor([[0.9, 0.6, 0.3, 0.1, 0.05, 0.01]])     # one row's path probabilities, sorted


def test_flat_costs_keep_every_confident_node_and_steep_costs_few():
    flat = lambda b, q: 1.0                                   # noqa: E731  memory-bound: positions are free
    assert best_size(PROBS, 1.0, flat) == 6
    steep = lambda b, q: float(q)                             # noqa: E731  compute-bound: each position costs
    assert best_size(PROBS, 1.0, steep) == 1                  # (1 + .9) / 2 beats (1 + 1.5) / 3
    knee = lambda b, q: 1.0 if q <= 4 else 3.0                # noqa: E731  a cliff past 3 nodes
    assert best_size(PROBS, 1.0, knee) == 3
    assert best_size(PROBS, 0.0, steep) == 1                  # a draft never accepted: the smallest tree


def test_the_drafting_time_already_spent_makes_more_nodes_pay():
    steep = lambda b, q: float(q)                             # noqa: E731
    # spent 10: (1 + .9 + .6 + .3) / 14 = 0.200 beats (1 + .9) / 12 = 0.158 and (1 + 1.5) / 13 = 0.192
    assert best_size(PROBS, 1.0, steep, spent=10.0) == 3
    assert best_size(PROBS, 1.0, steep, spent=0.0) == 1


def test_a_bigger_batch_keeps_fewer_nodes():
    probs = PROBS.expand(16, -1)
    cost = lambda b, q: 1.0 + 0.02 * b * q                    # noqa: E731  weights once, then per row-position
    assert best_size(probs[:1], 1.0, cost) > best_size(probs, 1.0, cost)


def test_calibration_tracks_the_accepted_share():
    cal = Calibration()
    for _ in range(200):
        cal.observe(accepted=1.0, predicted=2.0)
    assert cal.c == pytest.approx(0.5, abs=0.01)


def test_auto_trees_are_exact_and_vary_in_size(tiny_target):
    draft = perturbed(tiny_target, 0.01, seed=3)
    prompts = random_prompts(40, seed=21)
    params = SamplingParams(max_new_tokens=16, ignore_eos=True)
    models = Models(tiny_target, None, draft)
    plain = make_engine(Models(tiny_target, None, None), SpecConfig(method="none", k=0),
                        EngineConfig(max_batch=4, max_model_len=128))
    auto = make_engine(models, SpecConfig(method="draft", k=4, tree="auto"), EngineConfig(max_batch=4, max_model_len=128))
    auto.proposer.auto_size.rates.clock = itertools.count().__next__   # every round one tick: rate = tokens
    assert [s.output_ids for s in auto.generate(prompts, params)] == \
        [s.output_ids for s in plain.generate(prompts, params)]
    assert auto.metrics.tree_rounds > 0 and auto.metrics.tree_nodes > 0
    with pytest.raises(ConfigError, match="auto"):
        SpecConfig(method="ngram", k=4, tree="auto")


def test_auto_times_the_target_once_per_batch_size(capsys):
    target = make_model(7)                         # a target no other test has timed in this process
    draft = perturbed(target, 0.05, seed=4)
    spec = SpecConfig(method="draft", k=3, tree="auto")
    for rows in (3, 3, 5):
        make_engine(Models(target, None, draft), spec, EngineConfig(max_batch=rows, max_model_len=64))
    notes = [line for line in capsys.readouterr().err.splitlines() if "timing the target's verify forwards" in line]
    assert [n.split("batch up to ")[1] for n in notes] == ["3)", "5)"]


def test_a_kind_that_loses_sits_out_rounds_in_proportion_to_the_time_it_lost():
    """A tree round emitting fewer tokens a second than the best other kind (here the chain) sits
    out rounds enough that its excess time is EXPLORE_SHARE of theirs (at most BACKOFF_MAX);
    one that pays, none."""
    steep = lambda b, q: float(q)                             # noqa: E731
    n, rate = best_rate(PROBS, 1.0, steep, spent=1.0)
    assert n == best_size(PROBS, 1.0, steep, spent=1.0) and rate < 1 / steep(1, 1)   # plain: 1 token a step
    rates, b = RoundRates(), Backoff()
    rates.rate.update(tree=1.0, chain=2.0, none=0.5)
    rates.seconds.update(tree=0.3, chain=0.05, none=0.01)
    b.judge("tree", rates, 4)               # a probe loses 4 x 0.15 s to the chain: 0.6 / (0.01 * 0.05) = 1200
    assert b.wait["tree"] == min(BACKOFF_MAX, math.ceil(4 * 0.15 / (EXPLORE_SHARE * 0.05))) == BACKOFF_MAX
    rates.seconds["tree"] = 0.02                               # 4 x 0.01 s lost: 80 rounds
    b.judge("tree", rates, 4)
    assert b.wait["tree"] == math.ceil(4 * 0.01 / (EXPLORE_SHARE * 0.05)) == 80
    assert [probe_rounds(b) for b in (1, 2, 3, 4, 16)] == [PROBE_ROWS, 2, 2, 1, 1]
    for _ in range(80):
        b.tick()
    assert b.wait["tree"] == 0
    b.judge("chain", rates)                                    # the best: no wait
    rates.rate["tree"] = 2.5
    b.judge("tree", rates)
    assert b.wait == {"tree": 0, "chain": 0, "none": 0}


def _ladder(seconds: dict, tokens: dict, rounds: int = 2000) -> dict:
    """AutoSize's choices over `rounds` rounds where a round of each kind takes seconds[kind] on
    a fake clock and emits tokens[kind] -> the share of rounds of each kind."""
    auto, clock = AutoSize(lambda b, q: 1.0, budget=4), [0.0]                 # flat costs: can_pay
    auto.rates.clock = lambda: clock[0]
    kinds = []
    for _ in range(rounds):
        kind = auto.choose(True, 1, 4)
        kinds.append(kind)
        clock[0] += seconds[kind]
        auto.observe([tokens[kind] - 1])
    return {kind: kinds.count(kind) / rounds for kind in KINDS}


@pytest.mark.parametrize("rates,best", [
    ((5.0, 3.0, 1.0), "tree"),        # tokens a second of tree, chain and plain rounds
    ((2.0, 3.0, 1.0), "chain"),
    ((2.0, 2.0, 4.0), "none"),        # batch 16 on a CPU: a plain step beats both
    ((3.0, 2.0, 4.0), "none"),        # the tree is never tried: the chain, cheaper, loses to plain
])
def test_auto_spends_most_rounds_on_the_kind_that_emits_most(rates, best):
    """Plain step, chain or tree: each losing kind sits out rounds of the best kind in proportion
    to the time it lost, so the best kind gets most rounds and the time lost to probing the
    other two stays within their exploration budget (EXPLORE_SHARE each, or a probe of
    PROBE_ROWS rounds at batch 1 in BACKOFF_MAX where that is more). A tree is first tried only where the chain beats plain steps."""
    rate = dict(zip(("tree", "chain", "none"), rates))
    seconds = {"tree": 1.0, "chain": 1.0, "none": 1.0}
    tokens = {kind: int(rate[kind] * seconds[kind]) for kind in KINDS}
    share = _ladder(seconds, tokens)
    assert max(share, key=share.get) == best, share
    if rate["chain"] < rate["none"]:
        assert share["tree"] == 0, share
    time_share = {kind: share[kind] * seconds[kind] for kind in KINDS}
    emitted = sum(time_share[kind] * rate[kind] for kind in KINDS) / sum(time_share.values())
    lost = 1 - emitted / rate[best]                                # against always the best kind
    bound = 0.0                                                    # each other kind's probes: the excess of
    for kind in KINDS:                                             # PROBE_ROWS rounds per wait (at most BACKOFF_MAX)
        if kind != best and (kind != "tree" or rate["chain"] >= rate["none"]):
            excess = PROBE_ROWS * seconds[kind] * (1 - rate[kind] / rate[best])     # a probe's
            wait = min(BACKOFF_MAX, math.ceil(excess / (EXPLORE_SHARE * seconds[best])))
            bound += excess / (wait * seconds[best] + excess)
    assert lost <= 1.1 * bound + 2 * PROBE_ROWS / 2000, (share, lost, bound)       # 10%: waits round up; the tries


@pytest.mark.parametrize("cost,max_drafted", [
    (lambda b, q: float(q), 0),                  # compute-bound: no tree could pay, none is drafted
    (lambda b, q: 1.0 + 0.5 * (q - 1), probe_rounds(4)),   # one could: tried, judged, then only probed
])
def test_auto_trees_give_way_where_verification_is_costly(tiny_target, cost, max_drafted):
    """Where every extra verify position costs a whole step, nothing could pay (can_pay): auto
    drafts nothing and the draft never reads a prompt. Where a tree round costs 3 plain steps and
    a chain round 1.5 (priced_rounds), with every draft accepted: the chain beats plain steps, so
    trees are tried (one probe), lose to the chain, and are then only probed (a probe in at most
    BACKOFF_MAX rounds). The output is plain's either way."""
    from specdec.engine import Engine
    from specdec.proposers.draft_tree import DraftTreeProposer
    prompts = random_prompts(8, seed=22)
    params = SamplingParams(max_new_tokens=200, ignore_eos=True)
    cfg = EngineConfig(max_batch=4, max_model_len=256)
    spec = SpecConfig(method="draft", k=4, tree="auto")
    prop = DraftTreeProposer(tiny_target, 4, 256, "auto", cost=cost)       # the target as its own draft
    priced_rounds(prop)
    drafted, tree = [], prop._tree
    prop._tree = lambda batch, k: drafted.append(len(batch)) or tree(batch, k)
    eng = Engine(tiny_target, spec, cfg, draft=tiny_target, proposer=prop)
    plain = Engine(tiny_target, SpecConfig(method="none", k=0), cfg)
    assert [s.output_ids for s in eng.generate(prompts, params)] == \
        [s.output_ids for s in plain.generate(prompts, params)]
    m = eng.metrics
    assert max_drafted <= len(drafted) <= max_drafted * (1 + m.target_forwards // BACKOFF_MAX), drafted  # probes
    if not max_drafted:
        assert m.num_drafts == 0 and prop.cache.lengths == [0] * 4, "the draft read prompts it never drafted for"
    else:
        assert m.num_drafts > 10 * len(drafted), "the chain did not take the rounds"


def test_can_pay_rules_out_trees_only_where_verification_is_compute_bound():
    flat = lambda b, q: 1.0                                   # noqa: E731  bandwidth-bound: positions free
    linear = lambda b, q: float(b * q)                        # noqa: E731  compute-bound at every batch
    knee = lambda b, q: max(1.0, b * q / 8)                   # noqa: E731  free up to 8 positions in all
    assert can_pay(1, 4, flat) and not can_pay(1, 4, linear)
    assert can_pay(1, 4, knee) and can_pay(2, 4, knee) and not can_pay(16, 4, knee)


def test_auto_reads_each_prompt_at_its_first_drafted_round(tiny_target):
    """Free verify positions: every round drafts. Rows admitted while others run (12 requests,
    4 rows) are prefilled by the draft at their first drafted round, and the output is plain's."""
    from specdec.engine import Engine
    from specdec.proposers.draft_tree import DraftTreeProposer
    draft = tiny_target                     # every draft accepted: trees and chains beat plain steps
    prompts = random_prompts(12, seed=23)
    params = [SamplingParams(max_new_tokens=8 + 3 * i, ignore_eos=True) for i in range(12)]   # ragged ends
    cfg = EngineConfig(max_batch=4, max_model_len=128)
    prop = DraftTreeProposer(draft, 4, 128, "auto", cost=lambda b, q: 1.0)
    prop.auto_size.rates.clock = itertools.count().__next__    # every round one tick: rate = tokens
    eng = Engine(tiny_target, SpecConfig(method="draft", k=3, tree="auto"), cfg, draft=draft, proposer=prop)
    plain = Engine(tiny_target, SpecConfig(method="none", k=0), cfg)
    assert [s.output_ids for s in eng.generate(prompts, params)] == \
        [s.output_ids for s in plain.generate(prompts, params)]
    assert eng.metrics.tree_rounds > 0 and eng.metrics.num_accepted_tokens > 0 and not prop._unfilled
    # the late prefill writes what the admission's would have: the same keys and values
    from specdec.batch import Batch
    from specdec.proposers.draft_model import DraftModelProposer
    late, early = DraftTreeProposer(draft, 1, 128, "auto", cost=lambda b, q: 1.0), DraftModelProposer(draft, 1, 128)
    eng = Engine(tiny_target, SpecConfig(method="draft", k=3, tree="auto"), cfg, draft=draft, proposer=late)
    eng.add_request(prompts[0], params[0])
    eng.step()                                                          # admission: no draft prefill
    seq = eng.running[0]
    early.start_rows([0], [seq])
    assert late.cache.lengths[0] == 0
    late._catch_up(Batch(eng.running, eng.rows.sampling()))
    n = len(seq.token_ids) - 1
    assert late.cache.lengths[0] == early.cache.lengths[0] == n
    assert all(torch.equal(a[0, :, :n], b[0, :, :n]) for a, b in zip(late.cache.k + late.cache.v, early.cache.k + early.cache.v))
