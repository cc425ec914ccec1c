"""Training a feature head: the training-time test unrolls exactly what drafting computes, and
a short run raises the head's acceptance."""
from __future__ import annotations

import numpy as np
import torch

from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine import Engine
from specdec.models.feature_head import head_decoder
from specdec.models.head_loader import load_head, save_head
from specdec.proposers.feature_head import FeatureHeadProposer
from specdec.train.data import Batches
from specdec.train.eagle import frequent_tokens, head_batches, ttt_loss, ttt_mask, unroll
from specdec.train.trainer import TrainConfig, train
from tests.conftest import TOKENIZER, random_prompts
from tests.proposers.conftest import make_loopy
from tests.proposers.heads import random_head
import pytest


@pytest.fixture(scope="module")
def loopy_target():
    return make_loopy()


def test_the_mask_sees_the_verified_context_and_the_own_drafts():
    assert torch.equal(ttt_mask(4, 1), torch.ones(4, 4).tril().bool())
    m = ttt_mask(5, 3)                                   # (5, 15): step-1 | step-2 | step-3 keys
    assert m[4, :5].tolist() == [True, True, True, False, False]     # verified context <= 4 - 2
    assert m[4, 5:10].tolist() == [False] * 3 + [True, False]         # its step-2 draft at 3
    assert m[4, 10:].tolist() == [False] * 4 + [True]                 # itself


def test_the_unrolled_steps_equal_drafting(loopy_target):
    """Step s's logits at entry j are what the head computes when drafting s-1 tokens past the
    anchor j-s+1 on its own KV cache (features of the target up to the anchor, its own after)."""
    target = loopy_target
    head = random_head(target, seed=0, std=0.05)
    w = torch.tensor([random_prompts(1, seed=2, lo=14, hi=15, vocab=64)[0]])               # (1, 14)
    with torch.no_grad():
        _, steps = unroll(head, target, w, steps=3)
        hid = torch.empty(1, w.shape[1], target.config.hidden_size)
        target.eager(w, torch.arange(w.shape[1])[None], None, hidden_out=hid)
        dec = head_decoder(head, target.lm_head.weight)
        for anchor in (0, 4, 9):
            cache = dec.new_cache(1, 32)
            feats = torch.cat([torch.zeros(1, 1, hid.shape[-1]), hid[:, :anchor]], 1)       # entries 0..anchor
            tok = w[:, :anchor + 1]
            out = torch.empty(1, anchor + 1, hid.shape[-1])
            x = head.embed_features(target.model.embed_tokens(tok), feats)
            lg = dec.eager(tok, torch.arange(anchor + 1)[None], cache, embeds=x, hidden_out=out)
            cache.lengths[0] = anchor + 1
            for s in range(1, 4):
                j = anchor + s - 1
                torch.testing.assert_close(lg[0, -1], steps[s - 1][0, j], atol=1e-4, rtol=1e-4)
                h = out[:, -1:].clone()
                out = torch.empty(1, 1, hid.shape[-1])
                x = head.embed_features(target.model.embed_tokens(w[:, j + 1:j + 2]), h)
                lg = dec.eager(w[:, j + 1:j + 2], torch.tensor([[j + 1]]), cache, embeds=x, hidden_out=out)
                cache.lengths[0] += 1


def _acceptance(target, head) -> float:
    eng = Engine(target, SpecConfig(method="eagle", k=3), EngineConfig(max_batch=8, max_model_len=96),
                 proposer=FeatureHeadProposer(target, head, 8, 128))
    eng.generate(random_prompts(16, seed=9, vocab=64), SamplingParams(max_new_tokens=24, ignore_eos=True))
    return eng.metrics.acceptance_rate


def test_training_raises_acceptance_and_exports_a_loadable_head(loopy_target, tmp_path):
    target = loopy_target
    stream = np.random.default_rng(0).integers(2, 64, 6000).astype(np.uint16)
    head = random_head(target, seed=1, std=0.02)
    head.draft_vocab.copy_(frequent_tokens(stream, 64, 64))
    assert sorted(head.draft_vocab.tolist()) == list(range(64))
    before = _acceptance(target, head)
    samples = torch.tensor([s.token_ids for s in Engine(target, SpecConfig(method="none", k=0),
                                                         EngineConfig(max_batch=8, max_model_len=64)).generate(
        random_prompts(8, seed=1, lo=8, hi=9, vocab=64), SamplingParams(max_new_tokens=40, ignore_eos=True))])
    batches = Batches(stream, batch=4, seq_len=32, seed=0)
    cfg = TrainConfig(tokens=4 * 32 * 60, minutes=5, lr=3e-3, warmup_steps=5, batch=4, seq_len=32, threads=1)
    head.train()
    train(head, cfg, head_batches(batches, samples, 0), ttt_loss(target), tmp_path / "w", tmp_path / "out",
          TOKENIZER, export_fn=lambda card: save_head(head, tmp_path / "out", card))
    head.eval()
    after = _acceptance(target, load_head(tmp_path / "out", target))
    assert after > before + 0.1, (before, after)
