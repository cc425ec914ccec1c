"""AdaptiveK: chooses k from a (synthetic) cost table and live acceptance; continuous batching
gives every request the tokens it gets alone; building it measures only in make_policy."""
from __future__ import annotations

import numpy as np
import pytest

from specdec.adaptive.drain import drain_seconds
from specdec.adaptive.policy import RECHECK, TIE, AdaptiveK, near_best
from specdec.build import Models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.costs.cost_model import DRAFT_KEY, CostModel
from specdec.costs.key import CostKey
from specdec.engine.engine import Engine
from specdec.engine.round import RoundResult
from specdec.engine.sequence import Sequence
from specdec.proposers.base import Proposer

from tests.conftest import random_prompts

K_MAX = 8
# memory-bound: a forward costs the weight read, scoring more positions is nearly free
MEMORY_BOUND = CostModel.from_function(lambda b, q, L: 0.010 + 0.0002 * b * q,
                                       {"draft:draft": lambda b, L: 0.0005}, k_max=K_MAX)
# compute-bound: cost proportional to the positions scored
COMPUTE_BOUND = CostModel.from_function(lambda b, q, L: 0.001 * b * q,
                                        {"draft:draft": lambda b, L: 0.0001 * b}, k_max=K_MAX)


class FakeDraft(Proposer):
    name = "draft"

    def propose(self, batch, k):
        raise AssertionError("the policy never proposes")

    def cost_key(self):
        return DRAFT_KEY


class FakeNgram(FakeDraft):
    name = "ngram"

    def cost_key(self):
        return CostKey("ngram")


def observe(pol, batch, k, num_draft, accepted, dt, accept_prob=None):
    pol.observe(RoundResult(batch, k, pol.proposer.cost_key(), list(num_draft), list(accepted), dt, accept_prob))


def make_policy(cost, n=4, max_new=1000, proposer=None):
    pol = AdaptiveK(K_MAX, proposer or FakeDraft(), cost)
    batch = [Sequence(list(range(2, 12)), SamplingParams(max_new_tokens=max_new)) for _ in range(n)]
    for row, seq in enumerate(batch):
        pol.start(row, seq)
    return pol, batch


def run(pol, batch, accept, steps):
    """Drive `steps` rounds; `accept(k)` -> accepted drafts per row. Returns the k chosen."""
    ks = []
    for _ in range(steps):
        k = pol.choose(batch)
        dt = pol.last_choice["times"][k] if pol.last_choice else 0.0
        observe(pol, batch, k, [k] * len(batch), [accept(k)] * len(batch), dt)
        ks.append(k)
    return ks


def test_zero_acceptance_stops_drafting():
    pol, batch = make_policy(MEMORY_BOUND)
    ks = run(pol, batch, lambda k: 0, 30)
    assert ks[0] > 0                    # the optimistic prior tries drafting first
    assert ks[-10:].count(0) >= 9       # ... and learns that it does not pay (a rare probe aside)


def test_plain_decoding_reevaluates_every_few_rounds_and_at_once_when_the_batch_changes():
    pol, batch = make_policy(MEMORY_BOUND)
    run(pol, batch, lambda k: 0, 30)                         # settled on k = 0
    calls = []
    inner = pol.acc.expected_tokens
    pol.acc.expected_tokens = lambda *a: calls.append(1) or inner(*a)
    ks = run(pol, batch, lambda k: 0, 8 * RECHECK)
    assert ks.count(0) >= len(ks) - 2 and len(calls) <= 8 + 2  # one evaluation per RECHECK rounds
    calls.clear()
    pol.choose(batch[:-1])                                   # a request left: evaluate now
    assert calls


def test_steady_drafting_reevaluates_every_few_rounds_and_near_a_requests_end():
    pol, batch = make_policy(MEMORY_BOUND)
    run(pol, batch, lambda k: k, 30)                         # settled on a long k
    calls = []
    inner = pol.acc.expected_tokens
    pol.acc.expected_tokens = lambda *a: calls.append(1) or inner(*a)
    ks = run(pol, batch, lambda k: k, 8 * RECHECK)
    assert min(ks) > 0 and len(calls) <= 8 + 2
    calls.clear()
    batch[0].params = SamplingParams(max_new_tokens=batch[0].num_output + ks[-1])   # k tokens left
    pol.choose(batch)
    assert calls                                             # evaluated: the cap may change k


def test_compute_bound_never_drafts_even_when_everything_is_accepted():
    pol, batch = make_policy(COMPUTE_BOUND, n=16)
    ks = run(pol, batch, lambda k: k, 30)
    assert ks == [0] * 30


def test_high_acceptance_and_cheap_verification_drafts_long():
    pol, batch = make_policy(MEMORY_BOUND)
    ks = run(pol, batch, lambda k: k, 20)
    assert min(ks[-5:]) >= K_MAX - 1


def test_recovers_from_k0_and_probing_costs_little():
    pol, batch = make_policy(MEMORY_BOUND, n=1)
    run(pol, batch, lambda k: 0, 40)
    spent = plain = 0.0
    for _ in range(500):                               # a useless draft: occasional probes only
        k = run(pol, batch, lambda k: 0, 1)[0]
        spent += pol.last_choice["times"][k]
        plain += pol.last_choice["times"][0]
    assert spent / plain < 1.02
    ks = run(pol, batch, lambda k: k, 300)             # the draft now agrees with the target
    first = next(i for i, k in enumerate(ks) if k > 0)
    assert first < 200
    assert min(ks[first + 30:first + 40]) >= K_MAX - 1


def test_no_drafting_for_requests_about_to_finish():
    pol, batch = make_policy(MEMORY_BOUND, max_new=1)
    observe(pol, batch, 4, [4] * 4, [4] * 4, 0.01)      # even with perfect acceptance so far
    assert pol.choose(batch) == 0


def _spy_run(target, draft, temperature, n=2, max_new=24):
    """Run the adaptive engine; record what each observe() got."""
    seen = []

    class Spy(AdaptiveK):
        def observe(self, r):
            seen.append({"k": r.k, "b": len(r.batch), "ap": r.accept_prob, "acc": list(r.accepted)})
            super().observe(r)

    spec = SpecConfig(method="draft", k="auto", k_max=4)
    cost = CostModel.from_function(lambda b, q, L: 0.010 + 0.0002 * b * q,
                                   {"draft:draft": lambda b, L: 0.0005}, k_max=4)
    eng = make_engine(Models(target, None, draft), spec, EngineConfig(max_batch=n, max_model_len=128),
                      cost_model=cost)
    eng.policy = Spy(4, eng.proposer, cost)
    for i, prompt in enumerate(random_prompts(n, seed=3)):
        eng.add_request(prompt, SamplingParams(temperature=temperature, seed=i, max_new_tokens=max_new))
    while eng.has_unfinished():
        eng.step()
    return seen


def test_engine_reports_acceptance_probabilities_to_the_adaptive_policy(tiny_target, tiny_draft):
    drafted = [x for x in _spy_run(tiny_target, tiny_draft, 1.0) if x["k"] > 0]
    assert drafted
    for x in drafted:
        k, b, ap = x["k"], x["b"], x["ap"]
        assert len(ap) == b and all(len(row) == k and all(0.0 <= v <= 1.0 for v in row) for row in ap)


def _alone(target, prompt, n):
    eng = Engine(target, SpecConfig(method="none", k=0), EngineConfig(max_batch=1, max_model_len=256))
    return eng.generate([prompt], SamplingParams(max_new_tokens=n))[0].output_ids


@pytest.mark.parametrize("k", ["auto", 3])
def test_continuous_batching_matches_each_request_alone(tiny_target, k):
    prompts = random_prompts(7, seed=3)
    limits = [5, 17, 9, 30, 3, 12, 21]
    eng = make_engine(Models(tiny_target, None, tiny_target), SpecConfig(method="draft", k=k, k_max=K_MAX),
                      EngineConfig(max_batch=3, max_model_len=256),
                      cost_model=CostModel.from_function(lambda b, q, L: 0.01 + 1e-4 * b * q,
                                                         {"draft:draft": lambda b, L: 1e-4}, k_max=K_MAX))
    seqs = [eng.add_request(p, SamplingParams(max_new_tokens=n)) for p, n in zip(prompts[:4], limits[:4])]
    done = {}
    for i in range(200):
        if i == 2:                                      # later requests join mid-flight
            seqs += [eng.add_request(p, SamplingParams(max_new_tokens=n))
                     for p, n in zip(prompts[4:], limits[4:])]
        if not eng.has_unfinished():
            break
        eng.step()
        done.update({s.id: s for s in eng.collect_finished()})
    assert len(done) == 7
    for seq, p, n in zip(seqs, prompts, limits):
        assert done[seq.id].output_ids == _alone(tiny_target, p, n)
    assert any(kk > 0 for kk in eng.metrics.k_hist) and eng.metrics.num_accepted_tokens > 0


def test_near_ties_between_drafting_lengths_go_to_the_smaller_k():
    rate = np.array([1.0, 1.5, 2.0, 2.0 * (1 + TIE / 2), 1.9])
    assert near_best(rate) == 2                              # k = 3 is better, but by less than TIE
    rate[3] = 2.0 * (1 + 2 * TIE)
    assert near_best(rate) == 3                              # by more: it wins
    assert near_best(np.array([3.0, 2.0, 1.0])) == 0         # plain is best


def test_whether_to_draft_at_all_is_a_plain_argmax():
    # k = 1 beats plain by less than the margin: still drafted (the margin is only between k >= 1)
    assert near_best(np.array([1.0, 1.0 + TIE / 4, 0.9])) == 1
    # k = 2 is best but within the margin of k = 1, which itself beats plain: k = 1
    assert near_best(np.array([1.0, 1.01, 1.01 * (1 + TIE / 2)])) == 1
    # k = 1 is within the margin of k = 2 but below plain: k = 2, never a k worse than plain
    assert near_best(np.array([1.0, 0.99, 1.01])) == 2
    # an exact tie with plain goes to plain
    assert near_best(np.array([1.0, 1.0, 0.5])) == 0


def test_building_an_auto_engine_with_a_cost_model_times_nothing(tiny_target, tiny_draft, monkeypatch):
    """The constructor chain measures nothing when the cost model is handed in: no forward is
    timed, no round timer runs, no scratch engine is built."""
    import specdec.costs.profiling as profiling
    import specdec.adaptive.calibrate as calibrate

    def forbidden(*a, **kw):
        raise AssertionError("timed the machine while building")
    monkeypatch.setattr(profiling, "time_forwards", forbidden)
    monkeypatch.setattr(calibrate, "Engine", forbidden)
    cost = CostModel.from_function(lambda b, q, L: 0.01 + 1e-4 * b * q, {"draft:draft": lambda b, L: 1e-4},
                                   k_max=4)
    eng = make_engine(Models(tiny_target, None, tiny_draft), SpecConfig(method="draft", k="auto", k_max=4),
                      EngineConfig(max_batch=2, max_model_len=64), cost_model=cost)
    assert isinstance(eng.policy, AdaptiveK) and eng.policy.cost is cost
    # and the engine alone cannot make one: k = "auto" needs the policy from above
    with pytest.raises(Exception, match="adaptive policy"):
        Engine(tiny_target, SpecConfig(method="draft", k="auto"), EngineConfig(max_model_len=64), draft=tiny_draft)


# ---- known answers on a synthetic cost table -------------------------------------------------
# batch 1, no draft model (an n-gram-like proposer): a round verifying k drafts costs
# 10 ms + 4 ms per draft, so with every position accepted w.p. alpha
#   rate(k) = (1 - alpha^(k+1)) / (1 - alpha) / (0.010 + 0.004 k)
LINEAR = CostModel.from_function(lambda b, q, L: b * (0.010 + 0.004 * (q - 1)), k_max=K_MAX)


def _exact_choice(alpha: float) -> int:
    ks = np.arange(K_MAX + 1)
    return near_best((1 - alpha ** (ks + 1)) / (1 - alpha) / (0.010 + 0.004 * ks))


@pytest.mark.parametrize("alpha,want", [(0.8, 2), (0.5, 1), (0.3, 0), (0.9, 3)])
def test_the_choice_is_the_argmax_of_tokens_per_second(alpha, want):
    """Fed acceptance probabilities alpha at every position, the estimates converge on alpha
    and the policy drafts the k that maximises (1 - alpha^(k+1)) / (1 - alpha) / t(1, k)."""
    assert _exact_choice(alpha) == want                   # the hand-computed answers
    pol, batch = make_policy(LINEAR, n=1, proposer=FakeNgram())
    for _ in range(300):                                  # evidence at every position, whatever k
        observe(pol, batch, K_MAX, [K_MAX], [K_MAX], 0.0, accept_prob=[[alpha] * K_MAX])
    assert pol.acc.row_means(CostKey("ngram"), 1) == pytest.approx(np.full((1, K_MAX), alpha), abs=0.02)
    pol._since = RECHECK
    assert pol.choose(batch) == want
    ks = np.arange(K_MAX + 1)
    assert pol.last_choice["times"] == pytest.approx(0.010 + 0.004 * ks)   # t(1, k) read off the table


def test_the_batch_sums_its_rows_and_the_table_is_read_at_its_size():
    """Four rows, two accepting at 0.9 and two at 0.2: one k for the batch, from the summed
    expected tokens, priced at t(4, k) = 4 times batch 1's."""
    pol, batch = make_policy(LINEAR, n=4, proposer=FakeNgram())
    for _ in range(300):
        observe(pol, batch, K_MAX, [K_MAX] * 4, [K_MAX] * 4, 0.0,
                accept_prob=[[0.9] * K_MAX, [0.9] * K_MAX, [0.2] * K_MAX, [0.2] * K_MAX])
    pol._since = RECHECK
    k = pol.choose(batch)
    a = pol.acc.row_means(CostKey("ngram"), 4)
    reach = np.hstack([np.ones((4, 1)), np.cumprod(a, axis=1)])
    tokens = np.cumsum(reach, axis=1).sum(axis=0)
    ks = np.arange(K_MAX + 1)
    assert pol.last_choice["tokens"] == pytest.approx(tokens)
    assert pol.last_choice["times"] == pytest.approx(4 * (0.010 + 0.004 * ks))
    assert k == near_best(tokens / (4 * (0.010 + 0.004 * ks))) == 1          # rates 100, 111, 110, 107: k = 1


def test_remaining_tokens_cap_the_expected_tokens():
    """A row with 2 tokens left gains nothing past k = 1: E[tokens] stops growing there."""
    pol, batch = make_policy(LINEAR, n=1, max_new=2, proposer=FakeNgram())
    for _ in range(100):
        observe(pol, batch, K_MAX, [K_MAX], [K_MAX], 0.0, accept_prob=[[0.95] * K_MAX])
    pol._since = RECHECK
    k = pol.choose(batch)
    tokens = pol.last_choice["tokens"]
    assert tokens[1] > tokens[0] and tokens[2:] == pytest.approx([tokens[1]] * (K_MAX - 1)) and k == 1


def test_a_draining_batch_minimises_its_finish_time():
    """Nobody waits: the choice is the argmin of drain.py's expected finish time over the
    steps at each batch size, not the full batch's rate."""
    class Draining(list):
        draining = True
    pol, rows = make_policy(LINEAR, n=4, max_new=40, proposer=FakeNgram())
    batch = Draining(rows)
    for _ in range(60):
        observe(pol, batch, K_MAX, [K_MAX] * 4, [K_MAX] * 4, 0.0, accept_prob=[[0.7] * K_MAX] * 4)
    pol._since = RECHECK
    k = pol.choose(batch)
    ks = np.arange(K_MAX + 1)
    step = np.array([[s * (0.010 + 0.004 * kk) for kk in ks] for s in (1, 2, 3, 4)])     # (4, K+1)
    mean, var = pol.acc.row_tokens(CostKey("ngram"), [40] * 4)
    finish = drain_seconds(mean, var, [40] * 4, step)
    assert pol.last_choice["score"] == pytest.approx(1 / finish)
    assert k == near_best(1 / finish)
    pol._since = RECHECK
    assert pol.choose(batch[:1]) == near_best(np.array(pol.last_choice["tokens"]) / pol.last_choice["times"])


def test_resuming_after_plain_rounds_carries_the_draft_models_catch_up():
    """After n plain rounds every k > 0 costs min(n, RECHECK) * t_draft / RECHECK more: 4 rows,
    t_draft = 0.5 ms, n >= RECHECK: 0.5 ms a round; plain decoding pays nothing."""
    pol, batch = make_policy(MEMORY_BOUND)
    pol._since = RECHECK
    pol.choose(batch)
    fresh = np.array(pol.last_choice["times"])
    for n in (1, RECHECK, RECHECK + 3):
        pol._idle, pol._since = n, RECHECK
        pol.choose(batch)
        charged = np.array(pol.last_choice["times"])
        assert charged[0] == pytest.approx(fresh[0])
        assert charged[1:] - fresh[1:] == pytest.approx(min(n, RECHECK) * 0.0005 / RECHECK)
    pol._idle = 0
    observe(pol, batch, 0, [0] * 4, [0] * 4, 0.01)
    observe(pol, batch, 0, [0] * 4, [0] * 4, 0.01)
    assert pol._idle == 2
    observe(pol, batch, 1, [1] * 4, [0] * 4, 0.01)
    assert pol._idle == 0


def test_make_policy_measures_the_cost_table_once_and_caches_it(tiny_target, tiny_draft, tmp_path, monkeypatch):
    """Without a cost model, make_policy builds one: forwards, and real rounds at every grid row
    up to max_batch, k = 0..k_max, greedy and sampled; a second build reads it from disk."""
    import specdec.build as build
    import specdec.costs.profiling as profiling
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(profiling, "time_forwards", lambda model, b, L, qs, *a, **kw: {q: 1e-3 * q for q in qs})
    timed = []

    def timer(key, b, ks, sampled):
        timed.append((b, sampled, tuple(ks)))
        return {k: (0.01 * b + 0.002 * k, 64.0) for k in ks}
    monkeypatch.setattr(build, "round_timer", lambda target, spec, draft=None: timer)
    spec = SpecConfig(method="draft", k="auto", k_max=3)
    eng = make_engine(Models(tiny_target, None, tiny_draft), spec, EngineConfig(max_batch=3, max_model_len=64))
    assert sorted(timed) == [(b, s, (0, 1, 2, 3)) for b in (1, 2, 3) for s in (False, True)]
    assert eng.policy.cost.t_round(DRAFT_KEY, 2, 3, 64, sampled=True) == pytest.approx(0.026)
    timed.clear()
    monkeypatch.setattr(profiling, "time_forwards", lambda *a, **kw: pytest.fail("timed forwards again"))
    again = make_engine(Models(tiny_target, None, tiny_draft), spec, EngineConfig(max_batch=3, max_model_len=64))
    assert not timed and again.policy.cost.t_round(DRAFT_KEY, 2, 3, 64, sampled=True) == pytest.approx(0.026)
