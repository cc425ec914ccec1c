"""The CUDA path (captured graphs, models/cuda_graphs.py): the same answers as eager, greedy
identity, the bitwise shape invariance it is built for, and the exact sampling law. Skipped
without CUDA; run on a GPU with `python -m pytest -q tests/cuda`."""
from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from specdec.build import Models, load_models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.models.cuda_graphs import CudaGraphs
from specdec.models.linear import LinearKernel
from tests.conftest import make_model, perturbed, random_prompts
from tests.engine.test_coupling import _law3
from tests.engine.test_invariance import CHUNKS, NEW, _prompt_lengths, _score
from tests.synthetic_costs import synthetic_cost_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
# k = "auto" without timing the GPU
AUTO_COST = synthetic_cost_model(lambda b, q, L: 0.01 + 1e-4 * b * q, {"draft:draft": lambda b, L: 1e-4}, k_max=8)


def _on_cuda(model, exact=True):
    model = model.to("cuda").prepare(LinearKernel())
    model.runner.use_graphs(CudaGraphs(model, exact=exact))
    return model


@pytest.fixture(scope="module")
def bundled():
    return load_models(device="cuda")


def test_the_loader_turns_graphs_on_for_cuda(bundled):
    assert isinstance(bundled.target.runner.graphs, CudaGraphs) and bundled.target.runner.graphs.buckets == (17,)
    assert bundled.draft.runner.graphs.buckets[0] == 1


@pytest.mark.parametrize("T", [1, 3, 17, 40])
def test_graphs_match_eager(bundled, T):
    m = bundled.target
    g = torch.Generator().manual_seed(T)
    prompt = torch.randint(2, 8192, (2, 60), generator=g).cuda()
    toks = torch.randint(2, 8192, (2, T), generator=g).cuda()
    pos = (torch.arange(T) + 60).expand(2, T).cuda()
    out = {}
    with torch.inference_mode():
        for name in ("graphs", "eager"):
            cache = m.new_cache(2, 256)
            m.eager(prompt, torch.arange(60).expand(2, 60).cuda(), cache)
            out[name] = (m if name == "graphs" else m.eager)(toks, pos, cache)
            out[name + " again"] = (m if name == "graphs" else m.eager)(toks, pos, cache)   # a replay
    assert torch.allclose(out["graphs"], out["eager"], atol=1e-4, rtol=1e-4)
    assert torch.equal(out["graphs"], out["graphs again"])


@pytest.mark.parametrize("name", ["tiny", "bundled"])
@pytest.mark.parametrize("batch", [1, 5, 16])
def test_a_position_scores_the_same_bits_in_any_chunk(bundled, name, batch):
    """By construction: decode and verify run one shape (T = 17) at a given batch size."""
    model = _on_cuda(make_model(0, prepare=False)) if name == "tiny" else bundled.target
    lengths = _prompt_lengths(16)
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(2, model.config.vocab_size, (16, max(lengths) + NEW), generator=g).cuda()
    rows = list(range(16 - batch, 16))
    ref = _score(model, tokens, lengths, rows, 1)
    for chunk in CHUNKS[1:]:
        assert torch.equal(_score(model, tokens, lengths, rows, chunk), ref), (name, batch, chunk)


def test_a_row_scores_the_same_bits_in_any_batch(bundled):
    """By construction within one cache: a target's graphs run every row of it. (Across caches
    of other row counts the shapes differ; not claimed, cuda_graphs.py.)"""
    model = bundled.target
    lengths = _prompt_lengths(16)
    tokens = torch.randint(2, 8192, (16, max(lengths) + NEW), generator=torch.Generator().manual_seed(4)).cuda()
    alone = {r: _score(model, tokens, lengths, [r], 1, cache_rows=16)[0] for r in (11, 15)}
    for batch in (2, 5, 16):
        got = _score(model, tokens, lengths, list(range(16 - batch, 16)), 1, cache_rows=16)
        for r in (11, 15):
            if r >= 16 - batch:
                assert torch.equal(got[r - (16 - batch)], alone[r]), (batch, r)


def _decode(models, spec, prompts, params, max_batch):
    eng = make_engine(models, spec, EngineConfig(max_batch=max_batch, max_model_len=256, device="cuda"),
                      cost_model=AUTO_COST)
    return [s.output_ids for s in eng.generate(prompts, params)], eng.metrics


@pytest.mark.parametrize("max_batch", [1, 4])
def test_greedy_speculation_emits_the_plain_text(bundled, max_batch):
    prompts = random_prompts(8, seed=2, lo=8, hi=48)
    params = [SamplingParams(temperature=0, max_new_tokens=48, ignore_eos=True)] * 8
    plain, _ = _decode(bundled, SpecConfig(method="none", k=0), prompts, params, max_batch)
    for k in (1, 3, 8, "auto"):
        out, m = _decode(bundled, SpecConfig(method="draft", k=k), prompts, params, max_batch)
        assert out == plain, k
        assert m.num_drafts > 0


@pytest.mark.parametrize("coupling,method,k", [("standard", "draft", 2), ("standard", "draft", 4),
                                               ("invariant", "draft", 2), ("standard", "none", 0)])
def test_sampled_text_follows_the_exact_law(coupling, method, k):
    """chi^2 of 6,000 3-token continuations against the exact law (V = 5) on the GPU."""
    base = make_model(3, std=0.5, vocab=5)                  # on the CPU: the exact law
    target = _on_cuda(make_model(3, std=0.5, vocab=5, prepare=False))
    draft = _on_cuda(perturbed(base, 0.3), exact=False) if method == "draft" else None
    prompt, T, N = [2, 3, 4], 1.0, 6000
    law = _law3(base, prompt, T).flatten()
    params = [SamplingParams(temperature=T, seed=i, max_new_tokens=3, ignore_eos=True, coupling=coupling)
              for i in range(N)]
    out, _ = _decode(Models(target, None, draft), SpecConfig(method=method, k=k), [prompt] * N, params, 64)
    idx = torch.tensor([a * 25 + b * 5 + c for a, b, c in out])
    counts = torch.bincount(idx, minlength=125).double()
    keep = law * N >= 5
    obs = torch.cat([counts[keep], counts[~keep].sum()[None]])
    exp = torch.cat([law[keep], law[~keep].sum()[None]]) * N
    assert chisquare(obs.numpy(), exp.numpy()).pvalue > 1e-3
