"""A proposer's host work per draft step (a cross-vocabulary draft's re-tokenization) is priced
with its forward: the cost model reads `host_seconds_per_token` and adds it per row."""
from specdec.costs.cost_model import CostModel
from specdec.costs.key import CostKey
from tests.synthetic_costs import synthetic_cost_model

KEY = CostKey("draft", "cross")


def test_t_draft_adds_the_host_work_per_row_and_the_round_prices_it():
    cm = synthetic_cost_model(lambda b, q, L: 1e-2, {str(KEY): lambda b, L: 1e-3}, k_max=4)
    before = cm.forward_round(KEY, 2, 3)
    cm.host[KEY] = 2e-4
    assert abs(cm.t_draft(KEY, 2) - (1e-3 + 2 * 2e-4)) < 1e-12
    assert abs(cm.forward_round(KEY, 2, 3) - before - 3 * 2 * 2e-4) < 1e-12


def test_load_or_measure_reads_the_proposers_host_cost(tiny_target, monkeypatch):
    class Host:
        model = None
        host_seconds_per_token = 3e-4

        def cost_key(self):
            return KEY
    monkeypatch.setattr("specdec.costs.profiling.ModelProfile.measure", lambda *a, **k: False)
    cm = CostModel.load_or_measure(tiny_target, Host(), k_max=2, batch_sizes=[1])
    assert cm.host == {KEY: 3e-4}
