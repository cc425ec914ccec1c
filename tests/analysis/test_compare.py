"""Proposers side by side in one analysis: compared methods run in the batch-1 lockstep groups."""
from __future__ import annotations

import pytest

from specdec.analysis.compare import VS, compare_blocks, compare_specs
from specdec.analysis.measure import Cell, Plan, run_plan
from specdec.build import Models
from specdec.commands.analyze import check_compare
from specdec.config import SpecConfig
from specdec.errors import ConfigError
from tests.conftest import random_prompts


def test_compared_methods_run_beside_the_analyzed_one(tiny_target, tiny_draft):
    def spec_for_k(k):
        return SpecConfig(method="draft" if k else "none", k=k, options={"ngram_min": 1, "ngram_max": 3})
    assert compare_specs(spec_for_k, [2], ["ngram"])[VS, "ngram", 2].method == "ngram"
    prompts = {"code": [p * 2 for p in random_prompts(4, seed=5, hi=12)]}
    plan = Plan([Cell("code", 2, 1, 0.0), Cell("code", 2, 2, 0.0)], prompts, groups=2, max_new_tokens=12,
                compare=("ngram",))
    cells = [r.as_dict() for r in run_plan(Models(tiny_target, None, tiny_draft), plan, spec_for_k)]
    b1, b2 = cells
    side = b1["compare"]["ngram"]
    assert side["identical_to_chain"] is True and side["tok_s"] > 0 and side["chain_tok_s"] > 0
    assert b2["compare"] == {}                                            # batch 1 only
    blocks = compare_blocks(cells)
    assert blocks[0] == ("h", 2, "Proposers side by side") and blocks[2][2][0][3] == "ngram"


def test_compared_methods_must_exist_and_be_loaded(tiny_target):
    models = Models(tiny_target, None, None)
    for bad, msg in (("nope", "not a proposer"), ("auto", "not a proposer"), ("draft", "--draft"),
                     ("eagle", "--head")):
        with pytest.raises(ConfigError, match=msg):
            check_compare([bad], models)
    check_compare(["ngram", "suffix"], models)


def test_compare_auto_is_every_proposer_this_target_has(tiny_target, tiny_draft):
    from specdec.commands.analyze import proposers_of, resolve_compare
    bare = Models(tiny_target, None, None)
    assert proposers_of(bare) == ["ngram", "suffix", "layerskip"]
    assert resolve_compare(["auto"], "ngram", bare) == ["suffix", "layerskip"]
    assert resolve_compare(["suffix", "auto"], "ngram", bare) == ["suffix", "layerskip"]
    paired = Models(tiny_target, None, tiny_draft)
    assert resolve_compare(["auto"], "draft", paired) == ["ngram", "suffix", "layerskip"]


def test_layerskip_compares_beside_ngram(tiny_target):
    def spec_for_k(k):
        return SpecConfig(method="ngram" if k else "none", k=k, options={"ngram_min": 1, "ngram_max": 3})
    prompts = {"chat": [p * 2 for p in random_prompts(2, seed=7, hi=12)]}
    plan = Plan([Cell("chat", 2, 1, 0.0)], prompts, groups=1, max_new_tokens=8, compare=("layerskip",))
    (cell,) = [r.as_dict() for r in run_plan(Models(tiny_target, None, None), plan, spec_for_k)]
    assert cell["compare"]["layerskip"]["identical_to_chain"] is True


def test_parallel_compares_beside_the_draft_and_needs_a_mask_token(tiny_target, tiny_draft):
    """A parallel draft (a draft with a mask token) is compared as `parallel` beside `draft`
    (the same model step by step); a draft without one is refused for it."""
    from specdec.commands.analyze import proposers_of
    from specdec.models.llama import LlamaModel
    from tests.proposers.parallel_drafts import with_mask
    with pytest.raises(ConfigError, match="mask token"):
        check_compare(["parallel"], Models(tiny_target, None, tiny_draft))
    pdraft = LlamaModel(tiny_draft.config)
    pdraft.load_state_dict(tiny_draft.state_dict())
    pdraft = with_mask(pdraft.eval().prepare(tiny_draft.kernel))
    models = Models(tiny_target, None, pdraft)
    assert proposers_of(models)[:2] == ["draft", "parallel"]
    check_compare(["parallel"], models)

    def spec_for_k(k):
        return SpecConfig(method="draft" if k else "none", k=k)
    prompts = {"code": random_prompts(2, seed=5, hi=12)}
    plan = Plan([Cell("code", 3, 1, 0.0)], prompts, groups=1, max_new_tokens=10, compare=("parallel",))
    (cell,) = [r.as_dict() for r in run_plan(models, plan, spec_for_k)]
    assert cell["compare"]["parallel"]["identical_to_chain"] is True
