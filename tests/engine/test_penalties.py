"""Logit processing (logit_bias, min_tokens, repetition/frequency/presence penalties) is
lossless under speculation: greedy output is plain decoding's token for token, and a
sampled run draws from the processed distribution, computed here independently of
specdec's code (verify/processors.py), with the drafts before a position counted."""
from __future__ import annotations

import pytest
import torch

from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine import Engine
from specdec.errors import ConfigError, PromptError
from tests.conftest import make_model, perturbed
from tests.proposers.test_exact_law import p_value

PROCESSING = [dict(repetition_penalty=1.5), dict(frequency_penalty=0.8, presence_penalty=0.5),
              dict(logit_bias={7: 3.0, 9: -5.0}), dict(logit_bias={1: 4.0}, min_tokens=8),
              dict(repetition_penalty=0.8, frequency_penalty=-0.3, logit_bias={21: -2.0}, min_tokens=4)]
PROMPTS = [[0, 5, 6, 7, 5, 6, 7, 5, 6], [0, 9, 10, 11, 12]]


@pytest.fixture(scope="module")
def small():
    target = make_model(0, vocab=32, std=0.5)
    return target, perturbed(target, 0.1)


@pytest.mark.parametrize("kw", PROCESSING)
def test_greedy_speculation_with_processing_is_plain_decoding(small, kw):
    target, draft = small
    params = SamplingParams(max_new_tokens=24, **kw)
    plain = Engine(target, SpecConfig(method="none", k=0), EngineConfig(max_batch=4, max_model_len=64))
    want = [s.output_ids for s in plain.generate(PROMPTS, params)]
    unprocessed = [s.output_ids for s in plain.generate(PROMPTS, SamplingParams(max_new_tokens=24))]
    assert want != unprocessed, "the processing must change the output for the test to mean anything"
    for method in ("draft", "ngram"):
        eng = Engine(target, SpecConfig(method=method, k=3, options={"ngram_min": 1}),
                     EngineConfig(max_batch=4, max_model_len=64), draft=draft)
        assert [s.output_ids for s in eng.generate(PROMPTS, params)] == want, method
        assert eng.metrics.num_draft_tokens > 0


def test_the_draft_processes_q_as_the_target_processes_p(small):
    """With the target as its own draft, every draft is accepted only if q saw the same
    history (drafts before each position included) as p."""
    target, _ = small
    eng = Engine(target, SpecConfig(method="draft", k=4), EngineConfig(max_batch=4, max_model_len=64),
                 draft=perturbed(target, 0.0))
    eng.generate(PROMPTS, SamplingParams(max_new_tokens=24, repetition_penalty=1.5, frequency_penalty=0.8))
    assert eng.metrics.num_accepted_tokens == eng.metrics.num_draft_tokens > 0


def test_a_logit_bias_of_100_forces_the_token(small):
    target, draft = small
    eng = Engine(target, SpecConfig(method="draft", k=3), EngineConfig(max_batch=4, max_model_len=64), draft=draft)
    for params in (SamplingParams(max_new_tokens=10, logit_bias={"3": 100}),                # key as the API sends it
                   SamplingParams(max_new_tokens=10, logit_bias={3: 500}, temperature=1.0, seed=1)):  # clamped to 100
        assert all(s.output_ids == [3] * 10 for s in eng.generate(PROMPTS, params))


def test_min_tokens_prevents_an_early_eos():
    target = make_model(3, std=0.5, vocab=5)          # EOS (id 1) is one token in five
    eng = Engine(target, SpecConfig(method="ngram", k=3, options={"ngram_min": 1}),
                 EngineConfig(max_batch=64, max_model_len=32))
    prompts = [[2, 3, 4, 2, 3]] * 64
    free = eng.generate(prompts, [SamplingParams(temperature=1.0, seed=i, max_new_tokens=8) for i in range(64)])
    assert min(s.num_output for s in free) < 6, "EOS must come early without min_tokens"
    held = eng.generate(prompts, [SamplingParams(temperature=1.0, seed=i, max_new_tokens=8, min_tokens=6)
                                  for i in range(64)])
    assert min(s.num_output for s in held) >= 6 and all(1 not in s.output_ids for s in held)


@pytest.mark.parametrize("kw", [dict(frequency_penalty=2.5), dict(presence_penalty=-3), dict(repetition_penalty=0),
                                dict(min_tokens=-1), dict(min_tokens=9), dict(logit_bias={-1: 1.0}),
                                dict(logit_bias={"x": 1.0}), dict(logit_bias={2: float("nan")})])
def test_bad_processing_settings_are_refused(kw):
    with pytest.raises(ConfigError):
        SamplingParams(max_new_tokens=8, **kw)


def test_a_logit_bias_outside_the_vocabulary_is_a_prompt_error(small):
    eng = Engine(small[0], SpecConfig(method="none", k=0), EngineConfig(max_batch=1, max_model_len=64))
    with pytest.raises(PromptError, match="logit_bias"):
        eng.add_request([0, 1], SamplingParams(max_new_tokens=8, logit_bias={32: 1.0}))


# ---- the exact law ---------------------------------------------------------------------------
V, NEW, N = 5, 3, 8000
PROMPT = [2, 3, 4, 2, 3]
EXACT = dict(temperature=1.0, repetition_penalty=1.5, frequency_penalty=1.5, presence_penalty=1.0,
             logit_bias={2: 1.0, 4: -1.5}, min_tokens=2)


def _processed(logits, out: list[int]) -> torch.Tensor:
    """The next token's law after PROMPT + out, by the definitions (vLLM's order)."""
    lg = logits.double().clone()
    for t, b in EXACT["logit_bias"].items():
        lg[t] += b
    if len(out) < EXACT["min_tokens"]:
        lg[1] = float("-inf")                                   # EOS
    counts = torch.bincount(torch.tensor(out, dtype=torch.long), minlength=V).double()
    r = EXACT["repetition_penalty"]
    for v in range(V):
        if v in PROMPT or counts[v] > 0:
            lg[v] = lg[v] / r if lg[v] > 0 else lg[v] * r
    lg -= EXACT["frequency_penalty"] * counts + EXACT["presence_penalty"] * (counts > 0).double()
    return torch.softmax(lg / EXACT["temperature"], -1)


def _law(model) -> torch.Tensor:
    def p_next(out):
        ctx = PROMPT + out
        with torch.inference_mode():
            lg = model(torch.tensor([ctx]), torch.arange(len(ctx))[None])[0, -1]
        return _processed(lg, out)
    law = torch.zeros(V, V, V, dtype=torch.float64)
    p1 = p_next([])
    for a in range(V):
        p2 = p_next([a])
        for b in range(V):
            law[a, b] = p1[a] * p2[b] * p_next([a, b])
    return law.flatten()


# N: a target that leaves the drafts out of a position's counts (the third token's, when
# the second was an accepted draft) measured p = 8e-13 at N = 10,000 and 0.1 at 3,000.
# The draft model's q is the one that has to be processed; n-gram drafts are one-hot.
def test_sampled_speculation_with_processing_follows_the_processed_law(method="draft"):
    target = make_model(3, std=0.5, vocab=V)
    eng = Engine(target, SpecConfig(method=method, k=2, options={"ngram_min": 1}),
                 EngineConfig(max_batch=256, max_model_len=32), draft=perturbed(target, 1.0))
    seqs = eng.generate([PROMPT] * N, [SamplingParams(seed=i, max_new_tokens=NEW, **EXACT) for i in range(N)])
    # an EOS third token ends the request after two: that cell is (a, b, EOS)
    cells = [(s.output_ids + [1])[:NEW] for s in seqs]
    assert all(len(c) == NEW for c in cells), "min_tokens: no request may stop before two tokens"
    counts = torch.bincount(torch.tensor([a * V * V + b * V + c for a, b, c in cells]), minlength=V ** 3).double()
    m = eng.metrics
    assert 0 < m.num_accepted_tokens < m.num_draft_tokens
    assert p_value(counts, _law(target)) > 1e-3
