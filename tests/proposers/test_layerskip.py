"""layerskip: the shallow draft, its settings and the measured choice of L'."""
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


def test_depth_is_required_below_build_and_calibrated_once_by_it(four_layer):
    from specdec.build import resolve_spec
    spec = SpecConfig(method="layerskip", k=2)
    with pytest.raises(ConfigError, match="layerskip_layers"):
        create("layerskip", four_layer, spec, rows=1, max_len=128)    # the proposer never measures
    a = resolve_spec(four_layer, spec)
    import specdec.adaptive.layers as L
    real = L.measure_layers
    L.measure_layers = lambda *a_, **kw: pytest.fail("calibrated twice: the cached choice was not used")
    try:
        b = resolve_spec(four_layer, spec)
    finally:
        L.measure_layers = real
    p = create("layerskip", four_layer, a, rows=1, max_len=128)
    assert 1 <= p.layers <= 3 and a.opts["layerskip_layers"] == b.opts["layerskip_layers"] == p.layers
