"""AdaptiveK inside a real engine: the engine reports acceptance probabilities, continuous
batching gives every request the tokens it gets alone, and building it measures only in
make_policy (nothing when a cost model is handed in; a few forwards otherwise, and no round:
test_online.py), the full table only in calibrate_costs (`specdec profile`)."""
from __future__ import annotations

import pytest

from specdec.adaptive.policy import AdaptiveK
from specdec.build import Models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.costs.cost_model import DRAFT_KEY
from specdec.engine.engine import Engine

from tests.adaptive.fakes import K_MAX
from tests.conftest import random_prompts
from tests.synthetic_costs import synthetic_cost_model


def _spy_run(target, draft, params: list[SamplingParams]):
    """Run the adaptive engine on one request per SamplingParams; record what each observe()
    got. -> (records, engine)."""
    seen = []

    class Spy(AdaptiveK):
        def observe(self, r):
            seen.append({"k": r.k, "b": len(r.batch), "ap": r.accept_prob, "acc": list(r.accepted),
                         "modes": [s.params.verification for s in r.batch]})
            super().observe(r)

    spec = SpecConfig(method="draft", k="auto", k_max=4)
    cost = synthetic_cost_model(lambda b, q, L: 0.010 + 0.0002 * b * q,
                                   {"draft:draft": lambda b, L: 0.0005}, k_max=4)
    eng = make_engine(Models(target, None, draft), spec, EngineConfig(max_batch=len(params), max_model_len=128),
                      cost_model=cost)
    eng.policy = Spy(4, eng.proposer, cost)
    for prompt, p in zip(random_prompts(len(params), seed=3), params):
        eng.add_request(prompt, p)
    while eng.has_unfinished():
        eng.step()
    return seen, eng


def test_engine_reports_acceptance_probabilities_to_the_adaptive_policy(tiny_target, tiny_draft):
    params = [SamplingParams(temperature=1.0, seed=i, max_new_tokens=24) for i in range(2)]
    drafted = [x for x in _spy_run(tiny_target, tiny_draft, params)[0] if x["k"] > 0]
    assert drafted
    for x in drafted:
        k, b, ap = x["k"], x["b"], x["ap"]
        assert len(ap) == b and all(len(row) == k and all(0.0 <= v <= 1.0 for v in row) for row in ap)


def test_an_engine_mixing_modes_keeps_one_acceptance_estimate_per_mode(tiny_target, tiny_draft):
    """Greedy, standard and invariant requests in one batch: each row's evidence goes to its own
    mode's estimate; argmax rows (greedy, invariant) report 0/1 outcomes, standard rows beta."""
    params = [SamplingParams(temperature=t, seed=i, coupling=c, max_new_tokens=24)
              for i, (t, c) in enumerate([(0.0, "standard"), (1.0, "standard"), (1.0, "invariant")])]
    seen, eng = _spy_run(tiny_target, tiny_draft, params)
    assert {mode for _key, mode in eng.policy.acc.keys} == {"greedy", "standard", "invariant"}
    mixed = [x for x in seen if x["k"] > 0 and len(set(x["modes"])) > 1]
    assert mixed
    for x in mixed:
        for mode, row in zip(x["modes"], x["ap"]):
            assert mode == "standard" or set(row) <= {0.0, 1.0}


def _alone(target, prompt, n):
    eng = Engine(target, SpecConfig(method="none", k=0), EngineConfig(max_batch=1, max_model_len=256))
    return eng.generate([prompt], SamplingParams(max_new_tokens=n))[0].output_ids


@pytest.mark.parametrize("k", ["auto", 3])
def test_continuous_batching_matches_each_request_alone(tiny_target, k):
    prompts = random_prompts(7, seed=3)
    limits = [5, 17, 9, 30, 3, 12, 21]
    eng = make_engine(Models(tiny_target, None, tiny_target), SpecConfig(method="draft", k=k, k_max=K_MAX),
                      EngineConfig(max_batch=3, max_model_len=256),
                      cost_model=synthetic_cost_model(lambda b, q, L: 0.01 + 1e-4 * b * q,
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


def test_building_an_auto_engine_with_a_cost_model_times_nothing(tiny_target, tiny_draft, monkeypatch):
    """The constructor chain measures nothing when the cost model is handed in: no forward is
    timed, no round timer runs, no scratch engine is built."""
    import specdec.costs.profiling as profiling
    import specdec.adaptive.calibrate as calibrate

    def forbidden(*a, **kw):
        raise AssertionError("timed the machine while building")
    monkeypatch.setattr(profiling, "time_forwards", forbidden)
    monkeypatch.setattr(calibrate, "Engine", forbidden)
    cost = synthetic_cost_model(lambda b, q, L: 0.01 + 1e-4 * b * q, {"draft:draft": lambda b, L: 1e-4},
                                   k_max=4)
    eng = make_engine(Models(tiny_target, None, tiny_draft), SpecConfig(method="draft", k="auto", k_max=4),
                      EngineConfig(max_batch=2, max_model_len=64), cost_model=cost)
    assert isinstance(eng.policy, AdaptiveK) and eng.policy.cost is cost
    # and the engine alone cannot make one: k = "auto" needs the policy from above
    with pytest.raises(Exception, match="adaptive policy"):
        Engine(tiny_target, SpecConfig(method="draft", k="auto"), EngineConfig(max_model_len=64), draft=tiny_draft)


def test_calibrate_costs_measures_the_full_table_once_and_cold_engines_read_it(tiny_target, tiny_draft, tmp_path,
                                                                             monkeypatch):
    """`calibrate_costs` (`specdec profile`) times forwards and real rounds at every grid row up to
    max_batch, k = 0..k_max, greedy and sampled; a second call reads them from disk, and an engine
    built without a cost model prices its rounds from that table, timing nothing."""
    import specdec.build as build
    import specdec.costs.cache as cost_cache
    import specdec.costs.profiling as profiling
    from specdec.build import calibrate_costs
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(profiling, "time_forwards", lambda model, b, L, qs, *a, **kw: {q: 1e-3 * q for q in qs})
    monkeypatch.setattr(cost_cache, "contended", lambda since=None: False)   # a busy machine re-times: not tested here
    timed = []

    def timer(key, b, ks, sampled):
        timed.append((b, sampled, tuple(ks)))
        return {k: (0.01 * b + 0.002 * k, 64.0) for k in ks}
    monkeypatch.setattr(build, "round_timer", lambda target, spec, draft=None, **kw: timer)
    spec = SpecConfig(method="draft", k="auto", k_max=3)
    models = Models(tiny_target, None, tiny_draft)
    cm = calibrate_costs(models, spec, max_batch=3)
    assert sorted(timed) == [(b, s, (0, 1, 2, 3)) for b in (1, 2, 3) for s in (False, True)]
    assert cm.t_round(DRAFT_KEY, 2, 3, 64, sampled=True) == pytest.approx(0.026)
    timed.clear()
    monkeypatch.setattr(profiling, "time_forwards", lambda *a, **kw: pytest.fail("timed forwards again"))
    calibrate_costs(models, spec, max_batch=3)
    again = make_engine(models, spec, EngineConfig(max_batch=3, max_model_len=64))
    assert not timed and again.policy.cost.t_round(DRAFT_KEY, 2, 3, 64, sampled=True) == pytest.approx(0.026)
    assert not again.policy._learns(DRAFT_KEY, True), "a measured table is not relearnt online"


def test_k_auto_with_a_feature_head_learns_its_rounds_online(loopy_head_models, tmp_path, monkeypatch):
    """--k auto with eagle: no round is timed before decoding; the online table learns the head's
    rounds from those decoded, and the output is plain decoding's."""
    import specdec.costs.cache as cost_cache
    import specdec.costs.profiling as profiling
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(profiling, "time_forwards", lambda model, b, L, qs, *a, **kw: {q: 1e-3 * q for q in qs})
    monkeypatch.setattr(cost_cache, "contended", lambda since=None: False)
    eng = make_engine(loopy_head_models, SpecConfig(method="eagle", k="auto", k_max=2),
                      EngineConfig(max_batch=1, max_model_len=128))
    assert eng.proposer.name == "eagle" and isinstance(eng.policy, AdaptiveK)
    assert not eng.policy.cost.rounds, "a round was timed before decoding"
    out = eng.generate(random_prompts(2, seed=1, vocab=64), SamplingParams(max_new_tokens=16, ignore_eos=True))
    assert eng.policy.online.observed(eng.proposer.cost_key(), False, 1), "no round was learnt"
    plain = Engine(loopy_head_models.target, SpecConfig(method="none", k=0), EngineConfig(max_model_len=128))
    assert [s.output_ids for s in out] == [s.output_ids for s in plain.generate(
        random_prompts(2, seed=1, vocab=64), SamplingParams(max_new_tokens=16, ignore_eos=True))]


@pytest.fixture(scope="module")
def loopy_head_models():
    from tests.proposers.conftest import make_loopy
    from tests.proposers.heads import passthrough_head
    target = make_loopy()
    return Models(target, None, None, head=passthrough_head(target, 0.1))
