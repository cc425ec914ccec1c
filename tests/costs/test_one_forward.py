"""A parallel round is priced as ONE draft forward of k + 1 positions, not k draft steps."""
import pytest

from specdec.config import SpecConfig
from specdec.costs.cost_model import CostModel
from specdec.proposers import create
from tests.conftest import perturbed
from tests.proposers.parallel_drafts import with_mask

FAST = {"min_time": 0.0, "min_reps": 1, "max_reps": 2}    # the prices' structure is tested, not their size


@pytest.fixture(scope="module")
def priced(tiny_target):
    draft = with_mask(perturbed(tiny_target, 0.05))
    spec = SpecConfig(method="parallel", k=4)
    par = create("parallel", tiny_target, spec, draft_model=draft, rows=1, max_len=64)
    seq = create("draft", tiny_target, SpecConfig(method="draft", k=4), draft_model=draft, rows=1, max_len=64)
    kw = dict(k_max=4, batch_sizes=[1], remeasure=True, timing=FAST)
    return CostModel.load_or_measure(tiny_target, par, **kw), par, CostModel.load_or_measure(tiny_target, seq, **kw), seq


def test_the_parallel_drafts_forward_is_timed_at_every_width(priced):
    cm, par, _, _ = priced
    prof = cm.drafts[par.cost_key()]
    assert {q for (_L, _b, q) in prof.points} == {1, 2, 3, 4, 5}
    assert par.cost_key() in cm.one_forward


def test_a_parallel_round_is_one_forward_and_a_sequential_one_k_steps(priced):
    cm, par, cms, seq = priced
    key, skey = par.cost_key(), seq.cost_key()
    prof = cm.drafts[key]
    for k in (1, 2, 4):
        assert cm.t_drafting(key, 1, k) == pytest.approx(prof.t(1, k + 1))
        assert cm.forward_round(key, 1, k) == pytest.approx(cm.t_target(1, k + 1) + prof.t(1, k + 1))
        assert cms.t_drafting(skey, 1, k) == pytest.approx(k * cms.t_draft(skey, 1))
    assert cm.t_drafting(key, 1, 0) == 0.0
    base, slope = cm.curve(key, 1, 4, None)
    assert base[4] == pytest.approx(cm.forward_round(key, 1, 4))
    assert slope[4] == pytest.approx(cm.target.per_token(1, 5) + prof.per_token(1, 5))
