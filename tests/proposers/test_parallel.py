"""The parallel drafter (proposers/parallel.py): greedy output identical to plain decoding,
each draft's q is its own slot's distribution from one uncached forward of the context and
the masks, the draft cache keeps the committed tokens only, and bad drafts are refused."""
import pytest
import torch

from specdec.build import Models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine import Engine
from specdec.errors import ConfigError
from specdec.proposers.parallel import ParallelProposer
from tests.conftest import make_model, perturbed, random_prompts
from tests.proposers.parallel_drafts import with_mask


def _run(target, draft, k, prompts, max_batch=4, new=24, temperature=0.0):
    eng = make_engine(Models(target, None, draft), SpecConfig(method="parallel", k=k),
                      EngineConfig(max_batch=max_batch, max_model_len=256))
    params = SamplingParams(temperature=temperature, seed=3, max_new_tokens=new, ignore_eos=True)
    return [s.output_ids for s in eng.generate(prompts, params)], eng


def _plain(target, prompts, new=24):
    eng = Engine(target, SpecConfig(method="none", k=0), EngineConfig(max_batch=4, max_model_len=256))
    return [s.output_ids for s in eng.generate(prompts, SamplingParams(max_new_tokens=new, ignore_eos=True))]


@pytest.fixture(scope="module", params=["tiny", "loopy"])
def pair(request, tiny_target, loopy_target):
    target = tiny_target if request.param == "tiny" else loopy_target
    draft = with_mask(perturbed(target, 0.02))
    prompts = random_prompts(6, seed=1, lo=4, hi=30, vocab=target.config.vocab_size)
    return target, draft, prompts, _plain(target, prompts)


@pytest.mark.parametrize("k", [1, 3, 6, "auto"])
def test_greedy_matches_plain(pair, k):
    target, draft, prompts, plain = pair
    assert _run(target, draft, k, prompts)[0] == plain


def test_drafts_are_accepted_and_batched_rows_agree(loopy_target):
    """A close draft's first drafts are accepted (the identity test is not vacuous), and a
    row's output does not depend on its neighbours (rows feed unequal lengths)."""
    draft = with_mask(perturbed(loopy_target, 0.02))
    ps = random_prompts(4, seed=3, lo=4, hi=30, vocab=64)
    batched, eng = _run(loopy_target, draft, 4, ps, new=40, temperature=1.0)
    m = eng.metrics
    assert m.num_accepted_tokens > 0.2 * m.num_draft_tokens > 0
    alone = [_run(loopy_target, draft, 4, [p], max_batch=1, new=40, temperature=1.0)[0][0] for p in ps]
    assert batched == alone


def test_q_is_each_slots_own_distribution_and_masks_are_not_cached(tiny_target):
    """Round after round, the q the proposer returns equals softmax of an uncached forward of
    the committed tokens and k - 1 masks, read at draft i's own slot; and the draft cache
    holds exactly the tokens fed, never a mask."""
    draft = with_mask(perturbed(tiny_target, 0.05))
    eng = Engine(tiny_target, SpecConfig(method="parallel", k=4), EngineConfig(max_batch=2, max_model_len=128),
                 draft=draft)
    prop: ParallelProposer = eng.rows.proposer
    seen, inner = [], prop.propose

    def propose(batch, k):
        d = inner(batch, k)
        for b, seq in enumerate(batch):
            ctx = seq.token_ids
            assert prop.cache.lengths[b] == len(ctx)                  # the real tokens, no mask
            T = len(ctx) + k - 1
            emb = draft.model.embed_tokens(torch.tensor([ctx]))
            x = torch.cat([emb, draft.mask_token.embedding.expand(1, k - 1, -1)], 1)   # (1, T, d)
            with torch.inference_mode():
                logits = draft(torch.zeros(1, T, dtype=torch.long), torch.arange(T)[None], embeds=x)[0]
            q = torch.softmax(logits[len(ctx) - 1:], -1)                                # (k, V)
            torch.testing.assert_close(d.probs[b], q, atol=1e-4, rtol=1e-3)
            seen.append(b)
        return d
    prop.propose = propose
    eng.generate(random_prompts(2, seed=5, vocab=8192), SamplingParams(temperature=1.0, seed=1, max_new_tokens=16,
                                                                      ignore_eos=True))
    assert len(seen) > 6


def test_a_draft_without_a_mask_token_is_refused(tiny_target, tiny_draft):
    with pytest.raises(ConfigError, match="mask token"):
        Engine(tiny_target, SpecConfig(method="parallel", k=3), EngineConfig(max_batch=1, max_model_len=128), draft=tiny_draft)
    with pytest.raises(ConfigError, match="needs a parallel draft"):
        Engine(tiny_target, SpecConfig(method="parallel", k=3), EngineConfig(max_batch=1, max_model_len=128))


def test_a_draft_of_another_vocabulary_is_refused(tiny_target):
    other = with_mask(make_model(2, vocab=64))
    with pytest.raises(ConfigError, match="vocabulary"):
        Engine(tiny_target, SpecConfig(method="parallel", k=3), EngineConfig(max_batch=1, max_model_len=128), draft=other)


def test_auto_plays_parallel_where_the_draft_has_a_mask_token(tiny_target, tiny_draft):
    from specdec.proposers import create
    spec = SpecConfig(method="auto", k=3, options={"ngram_min": 1, "ngram_max": 3})
    pdraft = with_mask(perturbed(tiny_target, 0.05))
    assert create("auto", tiny_target, spec, draft_model=pdraft, max_len=64).names == ["draft", "parallel", "ngram",
                                                                                        "suffix"]
    assert "parallel" not in create("auto", tiny_target, spec, draft_model=tiny_draft, max_len=64).names
    prompts = random_prompts(3, seed=2, lo=4, hi=20, vocab=8192)
    eng = make_engine(Models(tiny_target, None, pdraft), spec, EngineConfig(max_batch=2, max_model_len=128))
    seqs = eng.generate(prompts, SamplingParams(max_new_tokens=20, ignore_eos=True))
    assert [s.output_ids for s in seqs] == _plain(tiny_target, prompts, new=20)
