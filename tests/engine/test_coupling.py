"""Drafter-invariant sampling (verify/coupling.py): the same seed gives the same text whatever
the proposer, k and batch, and that text is an exact draw from the target."""
from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch
from scipy.stats import chisquare

from specdec.build import Models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.errors import ConfigError
from specdec.verify.coupling import CoupledNoise, gumbel, position_seed
from tests.conftest import make_model, perturbed, random_prompts
from tests.synthetic_costs import synthetic_cost_model

# a synthetic cost model: k = "auto" builds without timing the machine, and drafts
AUTO_COST = synthetic_cost_model(lambda b, q, L: 0.01 + 1e-4 * b * q, {"draft:draft": lambda b, L: 1e-4}, k_max=8)


def _decode(target, draft, spec, prompts, params, max_batch, order=None):
    """Outputs in prompt order; `order` admits the prompts in another order."""
    eng = make_engine(Models(target, None, draft), spec, EngineConfig(max_batch=max_batch, max_model_len=256),
                      cost_model=AUTO_COST)
    order = order or list(range(len(prompts)))
    seqs = eng.generate([prompts[i] for i in order], [params[i] for i in order])
    out = [None] * len(prompts)
    for i, s in zip(order, seqs):
        out[i] = s.output_ids
    return out, eng.metrics


N_PROMPTS = 30   # 30 prompts x 12 tokens x 5 configs: every config meets rejections and bonuses
CONFIGS = [("draft", 1, 1), ("draft", 3, 8), ("draft", 8, 8), ("draft", "auto", 8), ("ngram", 3, 8)]


@pytest.mark.parametrize("temperature,top_k,top_p", [(0.7, 0, 1.0), (1.0, 20, 1.0), (1.3, 0, 0.9)])
def test_every_proposer_k_and_batch_emits_the_plain_text(tiny_target, temperature, top_k, top_p):
    draft = perturbed(tiny_target, 0.02)               # close enough to be accepted often
    prompts = random_prompts(N_PROMPTS, seed=5, lo=2, hi=20)
    params = [SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=1000 + i,
                             max_new_tokens=12, ignore_eos=True, coupling="invariant") for i in range(N_PROMPTS)]
    plain, _ = _decode(tiny_target, None, SpecConfig(method="none", k=0), prompts, params, max_batch=1)
    shuffled = list(torch.randperm(N_PROMPTS, generator=torch.Generator().manual_seed(0)).tolist())
    for method, k, b in CONFIGS:
        out, m = _decode(tiny_target, draft, SpecConfig(method=method, k=k), prompts, params, b,
                         order=shuffled if b > 1 else None)
        assert out == plain, (method, k, b)
        if method == "draft":
            assert m.accepted_per_pos[0] > 0.3 * m.num_drafts > 0   # speculation really ran
    # and the seed matters: other seeds, other text
    other = [replace(p, seed=p.seed + 1) for p in params]
    assert _decode(tiny_target, None, SpecConfig(method="none", k=0), prompts, other, 8)[0] != plain


def _law3(model, prompt, temperature):
    """The exact joint law of the next 3 tokens, (V, V, V), from the model's own forwards."""
    V = model.config.vocab_size
    law = torch.zeros(V, V, V, dtype=torch.float64)
    with torch.inference_mode():
        def p_next(ctx):
            lg = model(torch.tensor([ctx]), torch.arange(len(ctx))[None])[0, -1].double()
            return torch.softmax(lg / temperature, -1)
        p1 = p_next(prompt)
        for a in range(V):
            p2 = p_next(prompt + [a])
            for b in range(V):
                law[a, b] = p1[a] * p2[b] * p_next(prompt + [a, b])
    return law


@pytest.mark.parametrize("method,k", [("none", 0), ("draft", 2)])
def test_the_coupled_text_is_an_exact_draw_from_the_target(method, k):
    """chi^2 of 6,000 seeded 3-token continuations against the exact law, V = 5 (125 cells)."""
    target = make_model(3, std=0.5, vocab=5)
    draft = perturbed(target, 0.3)
    prompt, T, N = [2, 3, 4], 1.0, 6000
    law = _law3(target, prompt, T).flatten()
    params = [SamplingParams(temperature=T, seed=i, max_new_tokens=3, ignore_eos=True, coupling="invariant")
              for i in range(N)]
    out, _ = _decode(target, draft, SpecConfig(method=method, k=k), [prompt] * N, params, max_batch=64)
    idx = torch.tensor([a * 25 + b * 5 + c for a, b, c in out])
    counts = torch.bincount(idx, minlength=125).double()
    keep = law * N >= 5                                      # pool the rare cells
    obs = torch.cat([counts[keep], counts[~keep].sum()[None]])
    exp = torch.cat([law[keep], law[~keep].sum()[None]]) * N
    assert chisquare(obs.numpy(), exp.numpy()).pvalue > 1e-3


def test_noise_depends_only_on_seed_and_position():
    g = gumbel(7, 100, 64)
    assert torch.equal(g, gumbel(7, 100, 64))
    assert not torch.equal(g, gumbel(7, 101, 64)) and not torch.equal(g, gumbel(8, 100, 64))
    assert len({position_seed(s, t) for s, t in itertools.product(range(50), range(50))}) == 2500
    noise = CoupledNoise(7, 64)
    first = noise.at(list(range(200)))                       # more positions than the cache holds
    assert torch.equal(noise.at([0, 150, 199]), first[[0, 150, 199]])      # recomputed identically


def test_coupling_is_validated():
    with pytest.raises(ConfigError, match="coupling"):
        SamplingParams(temperature=1.0, coupling="gumbel")
    assert not SamplingParams(temperature=0.0, coupling="invariant").coupled      # greedy is greedy
