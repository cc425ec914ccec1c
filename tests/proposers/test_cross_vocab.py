"""The cross-vocabulary draft in the engine: greedy output identical to plain decoding, batched
with rows retired and moved; its seams (a character cut between tokens, special tokens); the
draft's history follows the committed text; pairs refused."""
from __future__ import annotations

import pytest
import torch

from specdec.batch import Batch
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.defaults import bundled_dir
from specdec.engine import Engine
from specdec.errors import ConfigError
from specdec.models.loader import load_model
from specdec.proposers import create
from specdec.proposers.cross_vocab import CrossVocabProposer
from specdec.proposers.vocab_map import VocabMap, whole_chars
from specdec.verify.sampling import BatchSampling
from tests.proposers.xvocab import bundled, cut_bundled

PROMPTS = ["import os\n\n\ndef list_files(root):\n    \"\"\"Return the files under root.\"\"\"\n",
           "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
           "def parse_args(argv):\n    parser = argparse.ArgumentParser(description='café 𝔘')\n",
           "for i in range(10):\n    if i % 2 == 0:\n"]


@pytest.fixture(scope="module")
def pair():
    """The bundled target and draft, the draft reading text with the bundled tokenizer cut to its
    first 1000 tokens: another vocabulary, spelling most words in more, shorter tokens."""
    target = load_model(bundled_dir() / "target")
    draft = load_model(bundled_dir() / "draft", exact=False)
    draft.vocab_map = VocabMap.build(bundled(), cut_bundled(1000), 8192, 8192)
    return target, draft


def _generate(target, draft, prompts, params, method="draft", k=3, max_batch=2, options=None):
    eng = Engine(target, SpecConfig(method=method, k=k if method != "none" else 0, options=options or {}),
                 EngineConfig(max_batch=max_batch, max_model_len=256), draft=draft)
    return eng, [s.output_ids for s in eng.generate(prompts, params)]


@pytest.mark.parametrize("greedy", ["retokenize", "shared"])
def test_greedy_output_is_plain_decoding_token_for_token(pair, greedy):
    """Four requests through two rows (finished rows retire, the last row moves into the hole)."""
    target, draft = pair
    tok = bundled()
    prompts = [tok.encode(p) for p in PROMPTS]
    params = [SamplingParams(temperature=0.0, max_new_tokens=40 + 7 * i, ignore_eos=True) for i in range(4)]
    _, plain = _generate(target, None, prompts, params, method="none")
    eng, spec = _generate(target, draft, prompts, params, options={"cross_greedy": greedy})
    assert isinstance(eng.proposer, CrossVocabProposer)
    assert spec == plain
    assert eng.metrics.num_accepted_tokens > 0.1 * eng.metrics.num_draft_tokens   # 0.19 measured (retokenize)


def _batch(seqs, temperature: float):
    params = [SamplingParams(temperature=temperature, seed=i) for i in range(len(seqs))]
    gens = [torch.Generator().manual_seed(i) for i in range(len(seqs))]
    return Batch(seqs, BatchSampling(params, gens))


class _Seq:
    def __init__(self, ids):
        self.token_ids = list(ids)


def test_a_character_cut_between_target_tokens_waits_as_lag(pair):
    """A prompt ending inside 𝔘 (4 bytes, spelt in several target tokens): the draft's history
    stops before the character and no row proposes (the target's tokenizer encodes whole
    characters only); once the character is whole the history covers it."""
    target, draft = pair
    vmap = draft.vocab_map
    ids = bundled().encode("x = '𝔘")
    cuts = [i for i in range(len(ids)) if whole_chars(vmap.target.text(ids[:i])) < len(vmap.target.text(ids[:i]))]
    assert cuts, "the bundled tokenizer spells the character in more than one token"
    seq = _Seq(ids[:cuts[0]])
    prop = CrossVocabProposer(draft, vmap, 1, 64)
    prop.start(0, seq)
    r = prop.texts[0]
    assert r.covered == len(b"x = '") < len(r.text)
    for temperature in (1.0, 0.0):
        assert prop.propose(_batch([seq], temperature), 3).lengths == [0]
        prop.rollback([0])
    seq.token_ids = ids + bundled().encode("'\n", add_special_tokens=False)
    assert prop.propose(_batch([seq], 0.0), 3).lengths[0] > 0
    assert r.covered == len(r.text) and vmap.draft.text(r.ids) == bytes(r.text)


def test_sampled_drafts_are_ordinary_shared_tokens_with_their_q(pair):
    target, draft = pair
    vmap = draft.vocab_map
    seqs = [_Seq(bundled().encode(p)) for p in PROMPTS]
    prop = CrossVocabProposer(draft, vmap, 4, 256)
    prop.start_rows(list(range(4)), seqs)
    d = prop.propose(_batch(seqs, 1.0), 4)
    assert d.lengths == [4] * 4 and d.probs.shape == (4, 4, 8192)
    shared = set(vmap.shared_target.tolist())
    assert all(t in shared for t in d.tokens.flatten().tolist())
    assert torch.allclose(d.probs.sum(-1), torch.ones(4, 4))
    assert (d.probs[..., [0, 1]] == 0).all()                      # <s>, </s>: never proposed
    assert (d.probs.gather(2, d.tokens[..., None]) > 0).all()


def test_the_draft_history_spells_the_committed_text(pair):
    """At every round of a sampled run, after the catch-up, every row's draft ids spell the
    committed text's bytes (up to a lag), kept proposals included."""
    target, draft = pair
    tok = bundled()
    eng = Engine(target, SpecConfig(method="draft", k=3), EngineConfig(max_batch=4, max_model_len=256), draft=draft)
    seen = []
    orig = eng.proposer.propose

    def check(batch, k):
        out = orig(batch, k)
        for b, seq in enumerate(batch):
            r = eng.proposer.texts[b]
            seen.append(draft.vocab_map.draft.text(r.ids) == bytes(r.text[:r.covered])
                        == draft.vocab_map.target.text(seq.token_ids)[:r.covered])
        return out
    eng.proposer.propose = check
    eng.generate([tok.encode(p) for p in PROMPTS],
                 [SamplingParams(temperature=1.0, seed=i, max_new_tokens=30) for i in range(4)])
    assert seen and all(seen)


def test_trees_and_unknown_greedy_modes_are_refused(pair):
    target, draft = pair
    with pytest.raises(ConfigError, match="token trees need a draft with the target's vocabulary"):
        create("draft", target, SpecConfig(method="draft", k=3, tree=4), draft_model=draft)
    with pytest.raises(ConfigError, match="cross_greedy"):
        create("draft", target, SpecConfig(method="draft", k=3, options={"cross_greedy": "x"}), draft_model=draft)


def test_a_prompt_longer_than_the_drafts_cache_is_decoded_without_drafts(pair):
    target, draft = pair
    prop = CrossVocabProposer(draft, draft.vocab_map, 1, 16)
    seq = _Seq(bundled().encode(PROMPTS[0]))
    prop.start(0, seq)
    d = prop.propose(_batch([seq], 1.0), 3)
    assert d.lengths == [0]
    prop.rollback([0])
