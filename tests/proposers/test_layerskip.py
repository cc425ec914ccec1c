"""layerskip: the shallow draft, its settings and the measured choice of L'."""
import json

import pytest
import torch

from specdec.config import SpecConfig
from specdec.errors import ConfigError
from specdec.proposers import create
from specdec.adaptive.layers import measure_layers
from tests.conftest import make_model, random_prompts


@pytest.fixture(scope="module")
def four_layer():
    return make_model(3, num_hidden_layers=4)


def test_shallow_draft_equals_first_layers_of_target(four_layer):
    """The draft's logits are those of the target truncated to L' layers, norm and head."""
    p = create("layerskip", four_layer, SpecConfig(method="layerskip", k=2, options={"layerskip_layers": 2}),
               rows=1, max_len=128)
    assert p.layers == 2 and len(p.cache.k) == 2
    ids = torch.tensor([[5, 9, 400, 7]])
    pos = torch.arange(4)[None]
    with torch.inference_mode():
        ref = four_layer(ids, pos, num_layers=2)[0, -1].argmax()
        full = four_layer(ids, pos)[0, -1]
    from specdec.verify.sampling import BatchSampling
    from specdec.batch import Batch
    from specdec.config import SamplingParams

    class Seq:
        token_ids = ids[0].tolist()
    s = Seq()
    p.start(0, s)
    d = p.propose(Batch([s], BatchSampling([SamplingParams()], [None])), 1)
    assert int(d.tokens[0, 0]) == int(ref)
    assert full.shape[-1] == four_layer.config.vocab_size


def test_layers_are_validated(four_layer):
    for bad in (0, 4, 7):
        with pytest.raises(ConfigError):
            create("layerskip", four_layer, SpecConfig(method="layerskip", k=2, options={"layerskip_layers": bad}))


def test_measure_and_choose(four_layer):
    prompts = random_prompts(2, seed=4, lo=6, hi=12)
    rows = measure_layers(four_layer, prompts, k=2, new_tokens=8)
    assert [r["layers"] for r in rows] == [0, 1, 2, 3]
    assert rows[0]["speedup"] == pytest.approx(1.0)
    for r in rows:
        assert 0 <= r["acceptance_rate"] <= 1 and r["tokens_per_s"] > 0
        assert 1 <= r["mean_acceptance_length"] <= 3



@pytest.mark.parametrize("rates,best", [({1: 150.0, 3: 120.0}, 1), ({1: 90.0, 3: 130.0}, 3)])
def test_choose_takes_the_fastest_measured_depth(four_layer, monkeypatch, rates, best):
    import specdec.adaptive.layers as L
    rows = [{"layers": 0, "tokens_per_s": 100.0}] + [{"layers": n, "tokens_per_s": r} for n, r in rates.items()]
    monkeypatch.setattr(L, "measure_layers", lambda *a, **kw: rows)
    assert L.choose_layers(four_layer, [[1, 2, 3]], k=2, candidates=list(rates)) == best


def _fail(what):
    def f(*a, **kw):
        pytest.fail(what)
    return f


def test_depth_is_required_below_build_and_probed_once_by_it(tmp_path, monkeypatch):
    """The proposer never measures; build probes the depth (one forward's early exits, no
    decoding with each depth) once, then reads it back."""
    from specdec.build import resolve_spec
    import specdec.adaptive.layer_probe as P
    import specdec.adaptive.layers as L
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    target = make_model(5, num_hidden_layers=4)
    spec = SpecConfig(method="layerskip", k=2)
    with pytest.raises(ConfigError, match="layerskip_layers"):
        create("layerskip", target, spec, rows=1, max_len=128)    # the proposer never measures
    monkeypatch.setattr(L, "measure_layers", _fail("decoded with every depth before the first token"))
    a = resolve_spec(target, spec)
    monkeypatch.setattr(P, "probe", _fail("probed twice: the cached choice was not used"))
    b = resolve_spec(target, spec)
    P._PROBED.clear()                                   # a new process: read from the cache on disk
    assert resolve_spec(target, spec).opts == b.opts
    p = create("layerskip", target, a, rows=1, max_len=128)
    assert 1 <= p.layers <= 3 and a.opts["layerskip_layers"] == b.opts["layerskip_layers"] == p.layers


def test_a_calibrated_depth_takes_precedence_over_the_probe(tmp_path, monkeypatch):
    """calibrate_costs (`specdec profile`) decodes with every depth; its choice is what later
    engines take, without probing."""
    from specdec.build import resolve_spec
    import specdec.adaptive.layer_probe as P
    import specdec.adaptive.layers as L
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    target = make_model(6, num_hidden_layers=4)
    rows = [{"layers": 0, "tokens_per_s": 100.0}] + [{"layers": n, "tokens_per_s": 100.0 + (n == 2)} for n in (1, 2, 3)]
    monkeypatch.setattr(L, "measure_layers", lambda *a, **kw: rows)
    monkeypatch.setattr(P, "probe", _fail("probed although a calibrated depth exists"))
    spec = SpecConfig(method="layerskip", k=2)
    assert resolve_spec(target, spec, calibrate=True).opts["layerskip_layers"] == 2
    L._CHOSEN.clear()
    assert resolve_spec(target, spec).opts["layerskip_layers"] == 2


def test_the_probe_prefers_the_depth_that_agrees_at_a_price(monkeypatch):
    """The probe's choice: tokens per second at K_PROBE from each depth's agreement and the
    linear-in-depth draft cost; a deeper depth wins only where its agreement pays for it."""
    import specdec.adaptive.layer_probe as P
    target = make_model(7, num_hidden_layers=8)
    assert P.candidates(8) == [1, 2, 3, 4, 5, 6, 7] and P.candidates(30) == [1, 5, 9, 13, 17, 21, 25, 29]
    times = {None: {1: 0.010, 5: 0.011}, 1: {1: 0.002}}
    monkeypatch.setattr(P, "time_forwards", lambda model, b, L, qs, num_layers=None, **kw: times[num_layers])
    for agree, best in [({d: 0.1 for d in range(1, 8)}, 1), ({**{d: 0.1 for d in range(1, 8)}, 6: 0.95}, 6)]:
        monkeypatch.setattr(P, "agreement", lambda *a, **kw: agree)
        assert P.probe(target)["layers"] == best


def test_agreement_counts_early_exits_that_match_the_full_depth(four_layer):
    from specdec.adaptive.layer_probe import agreement
    texts = random_prompts(2, seed=9, lo=12, hi=13)
    a = agreement(four_layer, texts, [1, 2, 3], skip=2)
    assert set(a) == {1, 2, 3} and all(0.0 <= v <= 1.0 for v in a.values())
    with torch.inference_mode():
        ids, pos = torch.tensor(texts), torch.arange(12)[None].expand(2, 12)
        full = four_layer(ids, pos)[:, 2:].argmax(-1)
        two = four_layer(ids, pos, num_layers=2)[:, 2:].argmax(-1)
    assert a[2] == pytest.approx((two == full).float().mean().item())


def test_a_chosen_depths_measured_agreement_is_the_greedy_acceptance_prior(tmp_path, monkeypatch):
    """The depth's agreement, measured when it was chosen (the probe's, or the calibration's
    acceptance at K_PROBE drafts as a per-position a), starts the policy's greedy estimates for
    layer-skip instead of the optimistic prior; sampled rows keep the prior; none measured: none."""
    import specdec.adaptive.layer_probe as P
    import specdec.adaptive.layers as L
    from specdec.adaptive.acceptance import PRIOR_MEAN
    from specdec.build import Models, make_engine
    from specdec.config import EngineConfig
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    target = make_model(8, num_hidden_layers=4)
    assert P.depth_agreement(target, 2) is None
    monkeypatch.setattr(P, "agreement", lambda *a, **kw: {1: 0.3, 2: 0.6, 3: 0.9})
    eng = make_engine(Models(target, None, None), SpecConfig(method="layerskip", k="auto", k_max=4),
                      EngineConfig(max_batch=1, max_model_len=128))
    key, depth = eng.proposer.cost_key(), eng.proposer.layers
    a = {1: 0.3, 2: 0.6, 3: 0.9}[depth]
    assert P.depth_agreement(target, depth) == pytest.approx(a)
    assert eng.policy.acc.proposer_means(key, "greedy")[0] == pytest.approx(a)
    assert eng.policy.acc.proposer_means(key, "standard")[0] == pytest.approx(PRIOR_MEAN)
    # the calibration's acceptance rate at K_PROBE drafts, a + a^2 + a^3 + a^4 = 4 * rate at a = 0.5
    rows = [{"layers": 2, "acceptance_rate": (0.5 + 0.25 + 0.125 + 0.0625) / 4, "tokens_per_s": 1.0}]
    L._calibration_file(target, P.K_PROBE).write_text(json.dumps({"layers": 2, "measured": rows}))
    assert P.depth_agreement(target, 2) == pytest.approx(0.5, abs=1e-6)
