"""The tree-against-chain comparison on synthetic runs: pooled rates, acceptance, branch share."""
from types import SimpleNamespace as NS

import pytest

from specdec.analysis.trees import TREE, TreeSide, tree_blocks, tree_rows, tree_specs
from specdec.config import SpecConfig


def _run(tokens, seconds, accepted, drafted, outputs, branch=0):
    stats = [NS(accepted_lengths=a, draft_lengths=d) for a, d in zip(accepted, drafted)]
    return NS(tokens=tokens, decode_s=seconds, stats=stats, outputs=outputs, metrics={"branch_accepts": branch})


def test_pools_groups_and_counts_rounds():
    side = TreeSide(8)
    # group 1: the tree made 30 tokens in 0.1 s over 2 + 1 rounds; the chain 20 in 0.1 s
    side.add(_run(30, 0.1, [[3, 2], [4]], [[8, 8], [7]], [[1, 2]], branch=2),
             _run(20, 0.1, [[1, 1], [2]], [[4, 4], [4]], [[1, 2]]), greedy=True)
    side.add(_run(10, 0.1, [[0]], [[8]], [[5]]), _run(10, 0.05, [[0]], [[4]], [[6]]), greedy=True)
    d = side.as_dict()
    assert d["tok_s"] == pytest.approx(40 / 0.2) and d["chain_tok_s"] == pytest.approx(30 / 0.15)
    assert d["vs_chain"] == pytest.approx((40 / 0.2) / (30 / 0.15))
    assert d["mean_acceptance_length"] == pytest.approx(1 + 9 / 4)        # 4 rounds, 9 accepted
    assert d["chain_mean_acceptance_length"] == pytest.approx(1 + 4 / 4)
    assert d["nodes_per_round"] == pytest.approx(31 / 4)
    assert d["branch_share"] == pytest.approx(2 / 9)
    assert d["identical_to_chain"] is False                              # the second group differs


def test_sampled_groups_do_not_claim_identity_and_empty_sides_are_zero():
    side = TreeSide("auto")
    assert side.as_dict()["vs_chain"] == 0.0 and side.as_dict()["mean_acceptance_length"] == 1.0
    side.add(_run(5, 0.1, [[1]], [[6]], [[1]]), _run(5, 0.1, [[1]], [[2]], [[2]]), greedy=False)
    assert side.as_dict()["identical_to_chain"] is None


def test_specs_and_rows():
    chain = lambda k: SpecConfig(method="draft", k=k)          # noqa: E731
    specs = tree_specs(chain, [2, 4], 12)
    assert set(specs) == {(TREE, 2), (TREE, 4)} and specs[TREE, 4] == SpecConfig(method="draft", k=4, tree=12)
    assert tree_specs(chain, [2], 0) == {}
    side = TreeSide(12)
    side.add(_run(30, 0.1, [[3]], [[12]], [[1]]), _run(20, 0.1, [[2]], [[4]], [[1]]), greedy=True)
    cell = {"workload": "code", "k": 4, "temperature": 0.0, "tree": side.as_dict()}
    assert tree_rows([cell, {**cell, "tree": None}]) == [
        ["code", 4, "0", "12", "12.0", "3.00", "4.00", "0%", "200.0", "300.0", "1.50×", "yes"]]
    blocks = tree_blocks([cell])
    assert blocks[0] == ("h", 2, "Token tree against chain") and "in 1 of 1 cells" in blocks[1][1]
    assert tree_blocks([{**cell, "tree": None}]) == []
