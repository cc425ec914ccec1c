"""SmolLM2-135M-Instruct as the target, the bundled draft (another tokenizer: 8192 tokens against
49,152) drafting across the vocabularies through build.load_models: greedy output equal to plain
on held-out code, sampled rounds drafting only intersection tokens."""
from __future__ import annotations

import pytest

from specdec.analysis.workloads import load_workload
from specdec.build import load_models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.defaults import bundled_dir
from specdec.proposers.cross_vocab import CrossVocabProposer

N, NEW = 2, 48       # held-out code prompts and tokens each: two rounds of every k in a few seconds


@pytest.fixture(scope="module")
def models(gguf_path):
    return load_models(gguf_path, bundled_dir() / "draft", threads=2)


def _run(models, k, temperature, prompts):
    eng = make_engine(models, SpecConfig(method="draft" if k else "none", k=k), EngineConfig(max_batch=2))
    params = [SamplingParams(temperature=temperature, seed=i, max_new_tokens=NEW, ignore_eos=True)
              for i in range(len(prompts))]
    return eng, [s.output_ids for s in eng.generate(prompts, params)]


def test_the_pair_is_accepted_and_greedy_output_is_plain(models):
    vmap = models.draft.vocab_map
    assert len(vmap.shared_draft) == 5791 and 0.11 < vmap.share < 0.12
    prompts = load_workload("code", models.tokenizer, n=N)
    _, plain = _run(models, 0, 0.0, prompts)
    for k in (2, 4):
        eng, spec = _run(models, k, 0.0, prompts)
        assert isinstance(eng.proposer, CrossVocabProposer)
        assert spec == plain
        assert eng.metrics.num_accepted_tokens > 0


def test_sampled_rounds_draft_intersection_tokens(models):
    prompts = load_workload("code", models.tokenizer, n=N)
    eng, _ = _run(models, 3, 1.0, prompts)
    assert 0 < eng.metrics.num_accepted_tokens < eng.metrics.num_draft_tokens
