"""A draft with another tokenizer samples exactly from the target's law.

The harness of test_exact_law.py (chi^2 of N seeded 3-token continuations against the exact
joint law of the target's next 3 tokens), with a target over 5 byte-level tokens (a, b, c,
ab, ca) and a draft over 6 (a, b, c, ba, cc, bc) that spells the same text differently: the
intersection is a, b, c, so the target's ab and ca come only from recovered and bonus tokens,
and the draft's history is re-spelt at every seam (committed "b" then "c" becomes its "bc").
The negative controls break the rule the proof needs (q is the law the token was drawn from)
in two ways and must fail the same test.
"""
from __future__ import annotations

import pytest
import torch

import specdec.proposers.cross_vocab as cross_vocab
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine import Engine
from specdec.proposers.vocab_map import VocabMap
from specdec.verify.sampling import probs_from_logits, sample
from tests.conftest import make_model
from tests.proposers.test_exact_law import N, N_CONTROL, NEW, P_MIN, PROMPT, V, exact_law, p_value
from tests.proposers.xvocab import DRAFT_PIECES, TARGET_PIECES, tiny_tokenizer


@pytest.fixture(scope="module")
def pair():
    target = make_model(3, std=0.5, vocab=V)
    draft = make_model(5, std=0.5, vocab=len(DRAFT_PIECES))
    draft.vocab_map = VocabMap.build(tiny_tokenizer(TARGET_PIECES), tiny_tokenizer(DRAFT_PIECES), V,
                                     len(DRAFT_PIECES))
    return target, draft


def sampled(pair, T=1.0, top_k=0, n=N, greedy_every=0, k=2):
    """Counts (V**3,) of n continuations drafted across the vocabularies (greedy rows, every
    `greedy_every`-th, share the batch and are left out of the counts)."""
    target, draft = pair
    eng = Engine(target, SpecConfig(method="draft", k=k), EngineConfig(max_batch=256, max_model_len=32), draft=draft)
    assert isinstance(eng.proposer, cross_vocab.CrossVocabProposer)
    greedy = [greedy_every and i % greedy_every == 0 for i in range(n)]
    params = [SamplingParams(temperature=0.0 if g else T, top_k=top_k, seed=i, max_new_tokens=NEW, ignore_eos=True)
              for i, g in enumerate(greedy)]
    seqs = eng.generate([PROMPT] * n, params)
    m = eng.metrics
    assert 0 < m.num_accepted_tokens < m.num_draft_tokens, "the test must see acceptances and rejections"
    idx = torch.tensor([a * V * V + b * V + c for s, g in zip(seqs, greedy) if not g for a, b, c in [s.output_ids]])
    return torch.bincount(idx, minlength=V ** 3).double()


@pytest.mark.parametrize("T,top_k", [(0.7, 3), (1.0, 0), (1.3, 3)])
def test_cross_vocabulary_sampling_follows_the_exact_law(pair, T, top_k):
    assert p_value(sampled(pair, T, top_k), exact_law(pair[0], T, top_k)) > P_MIN


def test_a_batch_mixing_greedy_rows_samples_exactly(pair):
    """Argmax rows re-tokenize the draft's free text in the same rounds; the sampled rows' law holds."""
    assert p_value(sampled(pair, 1.0, greedy_every=4, n=N // 2), exact_law(pair[0])) > P_MIN


# ---- negative controls: each breaks "q is the law the draft token was drawn from" ---------------

def _unnormalised(q_draft, vmap):
    """Bug: q is the draft's mass on the intersection, not renormalised (the token is still drawn
    from the renormalised law: sample() normalises by the total)."""
    q = torch.zeros(q_draft.shape[0], vmap.target_size, dtype=q_draft.dtype)
    return q.index_add_(1, vmap.shared_target, q_draft[:, vmap.shared_draft])


def _drawn_at_another_temperature(self, logits, i, before):
    """Bug: the token is drawn from the restricted law at the row's temperature, but q is
    reported at temperature 1."""
    lg = logits[:, 0].float()
    s, vmap = self.s, self.vmap
    drawn = cross_vocab.restrict(probs_from_logits(lg[:, None], s.temperature, s.top_k, s.top_p)[:, 0], vmap)
    reported = cross_vocab.restrict(torch.softmax(lg, -1), vmap)
    j = sample(drawn[:, vmap.shared_target], self.uniforms[:, i])
    return vmap.shared_draft[j], reported


def test_negative_control_an_unnormalised_q_fails(pair, monkeypatch):
    monkeypatch.setattr(cross_vocab, "restrict", _unnormalised)
    assert p_value(sampled(pair, n=N_CONTROL), exact_law(pair[0])) < P_MIN


def test_negative_control_q_of_another_law_than_the_draw_fails(pair, monkeypatch):
    monkeypatch.setattr(cross_vocab.CrossRule, "pick", _drawn_at_another_temperature)
    assert p_value(sampled(pair, 0.7, n=N_CONTROL), exact_law(pair[0], 0.7)) < P_MIN
