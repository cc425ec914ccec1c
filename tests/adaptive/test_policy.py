"""AdaptiveK: chooses k from a (synthetic) cost model and live acceptance; continuous batching
gives every request the tokens it gets alone."""
from __future__ import annotations

import numpy as np
import pytest

from specdec.adaptive.drift import Drift
from specdec.adaptive.policy import AdaptiveK
from specdec.build import Models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.costs.cost_model import DRAFT_KEY, CostModel
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


def observe(pol, batch, k, num_draft, accepted, dt):
    pol.observe(RoundResult(batch, k, DRAFT_KEY, list(num_draft), list(accepted), dt))


def make_policy(cost, n=4, max_new=1000):
    pol = AdaptiveK(K_MAX, FakeDraft(), cost)
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
    from specdec.adaptive.policy import RECHECK
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
    from specdec.adaptive.policy import RECHECK
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
    """Run the adaptive engine; record what each observe() got and the contexts before it."""
    seen, before = [], {}

    class Spy(AdaptiveK):
        def observe(self, r):
            seen.append({"k": r.k, "b": len(r.batch), "ap": r.accept_prob, "look": r.lookahead,
                         "ctx": [before.get(s.id) for s in r.batch], "acc": list(r.accepted)})
            before.update({s.id: list(s.token_ids) for s in r.batch})
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


def _next_probs(model, ids, temperature):
    import torch
    with torch.inference_mode():
        logits = model(torch.tensor([ids]), torch.arange(len(ids))[None])[0, -1]
    return torch.softmax(logits / temperature, -1) if temperature > 0 else logits


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_lookahead_beta_one_past_a_fully_accepted_draft(tiny_target, tiny_draft, temperature):
    """After a round that accepted all k drafts, the next round reports beta_{k+1}: the overlap
    of target and draft at the bonus position (greedy: argmax agreement), checked here
    against both models run from scratch on the same context."""
    import torch
    from tests.conftest import perturbed
    # greedy needs a closer draft: random tiny models' argmaxes rarely agree
    draft = tiny_draft if temperature > 0 else perturbed(tiny_target, 0.01)
    seen = _spy_run(tiny_target, draft, temperature, n=4, max_new=60)
    checked = 0
    for prev, x in zip(seen, seen[1:]):
        if x["look"] is None:
            continue
        pos, betas = x["look"]
        assert pos == prev["k"] + 1
        for ctx, beta in zip(x["ctx"], betas):
            if beta != beta:                                   # NaN: nothing observed for this row
                continue
            ids = ctx[:-1]                                     # context before the bonus token
            p, q = _next_probs(tiny_target, ids, temperature), _next_probs(draft, ids, temperature)
            want = (float(torch.minimum(p, q).sum()) if temperature > 0
                    else float(q.argmax() == ctx[-1]))
            assert beta == pytest.approx(want, abs=2e-3)
            checked += 1
    assert checked >= 3
    # rows that were not fully accepted report nothing
    for prev, x in zip(seen, seen[1:]):
        if x["look"] is not None and prev["b"] == x["b"]:
            for acc, beta in zip(prev["acc"], x["look"][1]):
                assert (acc == prev["k"]) == (beta == beta)


def test_overhead_fit_recovers_intercept_and_slope():
    fit = Drift(K_MAX)
    for i in range(400):
        k = i % (K_MAX + 1)
        fit.add(4, k, 0.002 + 0.0005 * k)
    pred = fit.predict(4, np.array([0, 8]))
    assert pred == pytest.approx([0.002, 0.006], rel=0.05)
    # a batch size not seen yet starts from the fit over all batch sizes
    assert fit.predict(2, np.array([3]))[0] == pytest.approx(0.0035, rel=0.05)
    assert Drift(K_MAX).predict(2, np.array([3]))[0] == 0.0     # nothing seen at all


def test_overhead_seen_at_one_k_moves_every_k_alike():
    fit = Drift(K_MAX)
    for _ in range(10):
        fit.add(16, 2, -0.4)                        # steps 33% faster than the model, at k = 2
    pred = fit.predict(16, np.arange(K_MAX + 1))
    assert pred[2] == pytest.approx(-0.4, rel=0.1)
    assert np.allclose(pred, pred[2])                   # no slope from one k: k = 8 is not cheaper


def test_overhead_learns_a_k_that_sits_off_the_line():
    """A kernel cliff the cost model missed: k = 3 runs 30% over the model while k = 2 and 4 run
    as modelled. A line cannot fit that; each k's own residual, shrunk toward it, does."""
    fit = Drift(K_MAX)
    for i in range(300):
        k = (2, 3, 4)[i % 3]
        fit.add(1, k, 0.26 if k == 3 else 0.0)
    p2, p3, p4 = fit.predict(1, np.array([2, 3, 4]))
    assert p3 - p2 > 0.15 and p3 - p4 > 0.15 and abs(p2 - p4) < 0.01     # 0.26 apart, shrunk
    assert fit.predict(1, np.array([6]))[0] == pytest.approx(0.26 / 3, abs=0.01)   # unseen: the line


@pytest.mark.parametrize("factor", [0.6, 1.5])
def test_a_uniformly_faster_or_slower_machine_does_not_change_the_choice(factor):
    """Steps that all run `factor` times the model's time (a model measured in a slow or fast
    spell): the same k as on the model's machine."""
    chosen = {}
    for f in (1.0, factor):
        pol, batch = make_policy(MEMORY_BOUND, n=16)
        rng = np.random.default_rng(0)
        ks = []
        for _ in range(60):
            k = pol.choose(batch)
            accepted = [int(np.argmin(np.append(rng.random(k) < 0.7, False))) for _ in batch]  # alpha 0.7
            observe(pol, batch, k, [k] * 16, accepted, f * pol.step_times(16, 10, DRAFT_KEY)[k])
            ks.append(k)
        chosen[f] = ks
    assert chosen[factor] == chosen[1.0]


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


def test_resuming_after_plain_rounds_carries_the_draft_models_catch_up():
    from specdec.adaptive.policy import RECHECK
    pol, batch = make_policy(MEMORY_BOUND)
    run(pol, batch, lambda k: 0, 30)                          # settled on k = 0
    pol._idle_rounds = pol._since = RECHECK              # due for an evaluation
    pol.choose(batch)
    charged = np.array(pol.last_choice["times"])
    pol._idle_rounds, pol._since = 0, RECHECK
    pol.choose(batch)
    fresh = np.array(pol.last_choice["times"])
    assert charged[0] == pytest.approx(fresh[0])              # plain decoding pays nothing
    assert charged[1:] - fresh[1:] == pytest.approx(0.0005)   # RECHECK tokens * t_draft / RECHECK
    # a resuming step that ran 20 ms over the model after 4 plain rounds: 5 ms per token
    pol._idle_rounds, pol._prev_k, pol._since = 4, 0, RECHECK
    pol.choose(batch)
    observe(pol, batch, 1, [1] * 4, [0] * 4, float(pol._pred[1]) + 0.020)
    assert pol._resume[len(batch)] == pytest.approx(0.005)


def test_near_ties_between_drafting_lengths_go_to_the_smaller_k():
    from specdec.adaptive.policy import TIE, near_best
    rate = np.array([1.0, 1.5, 2.0, 2.0 * (1 + TIE / 2), 1.9])
    assert near_best(rate) == 2                              # k = 3 is better, but by less than TIE
    rate[3] = 2.0 * (1 + 2 * TIE)
    assert near_best(rate) == 3                              # by more: it wins
    assert near_best(np.array([3.0, 2.0, 1.0])) == 0         # plain is best


def test_whether_to_draft_at_all_is_a_plain_argmax():
    from specdec.adaptive.policy import TIE, near_best
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
