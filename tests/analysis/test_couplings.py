"""Both couplings' acceptance on synthetic rounds: known alphas, lengths and predictions."""
import pytest

from specdec.analysis import predict as P
from specdec.analysis.couplings import annotate_couplings, coupling_blocks, coupling_entry, coupling_rows


def test_entry_of_all_accepted_and_all_rejected_rounds():
    assert coupling_entry(3, [3, 3, 3, 3], [3, 3, 3, 3]) == {
        "alpha": pytest.approx(P.fit_alpha([3] * 4, 3, [3] * 4)), "mean_acceptance_length": 3.0, "rounds": 4}
    assert coupling_entry(3, [3] * 4, [3] * 4)["alpha"] > 0.9
    none = coupling_entry(3, [0, 0, 0, 0], [3, 3, 3, 3])
    assert none["alpha"] < 0.1 and none["mean_acceptance_length"] == 0.0
    assert coupling_entry(2, [], []) == {"alpha": P.fit_alpha([], 2, []), "mean_acceptance_length": 0.0, "rounds": 0}


def test_invariant_prediction_uses_its_own_alpha():
    cell = {"workload": "code", "k": 4, "temperature": 1.0, "pred_iid": 2.0,
            "couplings": {"standard": {"alpha": 0.8, "mean_acceptance_length": 2.5, "rounds": 10},
                          "invariant": {"alpha": 0.5, "mean_acceptance_length": 0.9, "rounds": 10}}}
    annotate_couplings(cell, ratio=1.5)
    inv = cell["couplings"]["invariant"]
    # alpha 0.5, k 4: (1 - 0.5^5) / (1 - 0.5) = 1.9375 tokens a round, over a round costing 1.5 steps
    assert inv["tokens_iid"] == pytest.approx(1.9375)
    assert inv["pred_iid"] == pytest.approx(1.9375 / 1.5)
    assert coupling_rows([cell]) == [["code", 4, "1", "0.80", "0.50", "2.50", "0.90", "2.00×", "1.29×"]]


def test_cells_without_both_couplings_give_no_section():
    greedy = {"workload": "code", "k": 1, "temperature": 0.0, "couplings": None, "pred_iid": 1.0}
    annotate_couplings(greedy, ratio=1.2)
    assert greedy["couplings"] is None
    assert coupling_rows([greedy]) == [] and coupling_blocks([greedy]) == []
