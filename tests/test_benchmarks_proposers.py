"""The proposer benchmark's method labels: k, trees, and auto's arms."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import proposers  # noqa: E402
from specdec.build import Models  # noqa: E402
from specdec.proposers.auto import DEFAULT_ARMS  # noqa: E402
from tests.conftest import random_prompts  # noqa: E402


def test_labels_parse_to_method_k_and_tree():
    assert proposers.parse_method("draft", 4) == ("draft", 4, 0)
    assert proposers.parse_method("draft@6", 4) == ("draft", 6, 0)
    assert proposers.parse_method("tree16@4", 2) == ("draft", 4, 16)
    assert proposers.parse_method("treeauto@4", 2) == ("draft", 4, "auto")
    assert proposers.parse_method("auto:draft+eagle+none@3", 4) == ("auto", 3, 0)
    assert proposers.arms_of("auto:draft+eagle+none") == {"auto_arms": "draft,eagle,none"}
    assert proposers.arms_of("auto") == {} and proposers.arms_of("draft@6") == {}


def test_an_auto_label_runs_only_its_arms(tiny_target, tiny_draft):
    models = Models(tiny_target, None, tiny_draft)
    prompts = random_prompts(2, seed=3, vocab=64)
    out = proposers.run_once(models, "auto:draft+none", 3, prompts, 12, {})
    assert set(out["arm_share"]) == {"draft", "none"} and out["tokens"] == 24
    # the default arms this pair has: `parallel` needs a draft with a mask token
    assert set(proposers.run_once(models, "auto", 3, prompts, 12, {})["arm_share"]) == set(DEFAULT_ARMS) - {"parallel"}
