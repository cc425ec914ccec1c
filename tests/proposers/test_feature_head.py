"""The feature-head proposers, eagle and mtp: exact greedy output, the exact sampling law, the
target's features handed over without a second pass, and one loader for both weight sources."""
from __future__ import annotations

import pytest
import torch

from specdec.batch import Batch
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine import Engine
from specdec.proposers.base import Draft
from specdec.proposers.feature_head import FeatureHeadProposer
from tests.conftest import random_prompts
from tests.proposers.conftest import SUBSET
from tests.proposers.heads import random_head
from tests.proposers.test_exact_law import NEW, P_MIN, PROMPT, V, exact_law, p_value

N_HEAD = 10000      # continuations per law test: test_exact_law's negative controls catch every known
                    # verifier bug at 8,000 (p < 1e-29), and six runs at 20,000 cost the suite 30 s


def _run(target, method, head, prompts, params, k, max_batch=16):
    eng = Engine(target, SpecConfig(method=method, k=k), EngineConfig(max_batch=max_batch, max_model_len=128),
                 proposer=FeatureHeadProposer(target, head, max_batch, 256, name=method) if head else None)
    return [s.output_ids for s in eng.generate(prompts, params)], eng.metrics


@pytest.mark.parametrize("method", ["eagle", "mtp"])
@pytest.mark.parametrize("k", [1, 3, 5, 8])
def test_greedy_identity_200_prompts(heads, method, k):
    target, head = heads[method]
    prompts = random_prompts(200, seed=k, vocab=64)
    params = SamplingParams(max_new_tokens=16, ignore_eos=True)
    plain, _ = _run(target, "none", None, prompts, params, 0)
    out, m = _run(target, method, head, prompts, params, k)
    assert out == plain
    assert 0 < m.num_accepted_tokens < m.num_draft_tokens        # acceptances and rejections, ragged


def test_the_mtp_layer_is_the_eagle_head(heads):
    """One module, two sources: the same weights; only the draft vocabulary differs."""
    (_, eagle), (_, mtp) = heads["eagle"], heads["mtp"]
    assert eagle.weights().keys() == mtp.weights().keys()
    assert all(torch.equal(eagle.weights()[n], mtp.weights()[n]) for n in eagle.weights())
    assert eagle.draft_vocab.tolist() == SUBSET and mtp.draft_vocab.tolist() == list(range(64))


def test_drafts_stay_in_the_draft_vocabulary(heads):
    target, head = heads["eagle"]
    eng = Engine(target, SpecConfig(method="eagle", k=4), EngineConfig(max_batch=4, max_model_len=128),
                 proposer=FeatureHeadProposer(target, head, 4, 256))
    seen = []
    eng.on_round = lambda r: seen.extend(t for row in r.emitted for t in row[:-1])   # accepted drafts
    eng.generate(random_prompts(8, seed=3, vocab=64), SamplingParams(max_new_tokens=24, ignore_eos=True))
    assert seen and set(seen) <= set(SUBSET)


def test_the_first_draft_reads_the_prompts_features(heads):
    """After admission the head's first draft is its prediction from the target's own features
    of the prompt (computed here by a separate full forward): nothing is lost in the handover."""
    target, head = heads["eagle"]
    prompt = random_prompts(1, seed=5, lo=12, hi=13, vocab=64)[0]
    with torch.inference_mode():
        hid = torch.empty(1, len(prompt), target.config.hidden_size)
        first = target.eager(torch.tensor([prompt]), torch.arange(len(prompt))[None], None, hidden_out=hid)[0, -1].argmax()
        seq = prompt + [int(first)]
        feats = torch.cat([torch.zeros(1, 1, hid.shape[-1]), hid], 1)                    # features of j-1
        x = head.embed_features(target.model.embed_tokens(torch.tensor([seq])), feats)
        prop = FeatureHeadProposer(target, head, 1, 64)
        y = prop.decoder.eager(torch.tensor([seq]), torch.arange(len(seq))[None], None, embeds=x)    # (1, T, N)
    want = head.draft_vocab[y[0, -1].argmax()]
    eng = Engine(target, SpecConfig(method="eagle", k=1), EngineConfig(max_batch=1, max_model_len=64),
                 proposer=FeatureHeadProposer(target, head, 1, 128))
    eng.add_request(prompt, SamplingParams(max_new_tokens=3, ignore_eos=True))
    eng.step()                                                          # admission: the first token
    assert eng.running[0].token_ids == seq
    got = eng.proposer.propose(Batch(eng.running, eng.rows.sampling()), 1)
    assert int(got.tokens[0, 0]) == int(want)


# ---- the sampling law (V = 5) ----------------------------------------------------------------

@pytest.mark.parametrize("method,T,top_k,top_p", [      # each method: three temperatures, top-k, top-p
    ("eagle", 0.7, 3, 1.0), ("eagle", 1.0, 0, 0.8), ("eagle", 1.3, 0, 1.0),
    ("mtp", 0.7, 0, 0.9), ("mtp", 1.0, 0, 1.0), ("mtp", 1.3, 2, 1.0),
])
def test_sampling_follows_the_exact_law(small, method, T, top_k, top_p):
    target, head = small
    if method == "mtp":
        head = random_head(target, seed=1)                   # the same weights, the full vocabulary
    n = N_HEAD
    eng = Engine(target, SpecConfig(method=method, k=2), EngineConfig(max_batch=256, max_model_len=32),
                 proposer=FeatureHeadProposer(target, head, 256, 64, name=method))
    params = [SamplingParams(temperature=T, top_k=top_k, top_p=top_p, seed=i, max_new_tokens=NEW, ignore_eos=True)
              for i in range(n)]
    seqs = eng.generate([PROMPT] * n, params)
    m = eng.metrics
    assert 0 < m.num_accepted_tokens < m.num_draft_tokens
    idx = torch.tensor([a * V * V + b * V + c for s in seqs for a, b, c in [s.output_ids]])
    assert p_value(torch.bincount(idx, minlength=V ** 3).double(), exact_law(target, T, top_k, top_p)) > P_MIN


def test_eagle_is_an_arm_of_auto(heads):
    """auto hands the target's features to its eagle arm every round, chosen or not."""
    from specdec.build import Models, make_engine
    target, head = heads["eagle"]
    prompts = random_prompts(24, seed=11, vocab=64)
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    plain, _ = _run(target, "none", None, prompts, params, 0)
    eng = make_engine(Models(target, None, None, head=head),
                      SpecConfig(method="auto", k=3, options={"auto_arms": "eagle,ngram,none"}),
                      EngineConfig(max_batch=8, max_model_len=128))
    assert [s.output_ids for s in eng.generate(prompts, params)] == plain
    assert eng.proposer.share()["eagle"] > 0 and eng.metrics.num_accepted_tokens > 0


def test_the_compiled_draft_loop_drafts_what_the_python_loop_does(heads):
    """Greedy drafts 2..k come from one C call (decoder.c, sd_head_draft_argmax); the same
    rounds with the loop in Python (the compiled decoder hidden from the proposer) draft the
    same tokens."""
    target, head = heads["eagle"]
    prompts = random_prompts(12, seed=21, vocab=64)
    params = SamplingParams(max_new_tokens=20, ignore_eos=True)
    drafts = {}
    for compiled in (True, False):
        prop = FeatureHeadProposer(target, head, 4, 256)
        prop.decoder.runner.fused = compiled
        eng = Engine(target, SpecConfig(method="eagle", k=5), EngineConfig(max_batch=4, max_model_len=128),
                     proposer=prop)
        seen = []
        inner = prop.propose
        prop.propose = lambda batch, k: seen.append(inner(batch, k).tokens.tolist()) or Draft(torch.tensor(seen[-1]))
        eng.generate(prompts, params)
        drafts[compiled] = seen
    assert drafts[True] == drafts[False] and len(drafts[True]) > 10
    assert (FeatureHeadProposer(target, head, 1, 64)._proj_packed is not None) == (target.runner.native is not None)
