"""Admission prefills runs of equal-length prompts in one forward, and requests that finish
with their first token leave the batch without a hole."""
import pytest

from specdec.batch import PREFILL_TOKENS, prompt_runs
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine.engine import Engine
from tests.conftest import random_prompts


def test_runs_group_equal_neighbours_within_the_token_cap():
    assert prompt_runs([5, 5, 5, 3, 3, 5]) == [(0, 3), (3, 5), (5, 6)]
    assert prompt_runs([]) == []
    long = PREFILL_TOKENS // 2 + 1                 # two of them exceed the cap: one row per run
    assert prompt_runs([long] * 3) == [(0, 1), (1, 2), (2, 3)]
    assert prompt_runs([PREFILL_TOKENS * 2]) == [(0, 1)]
    per = PREFILL_TOKENS // 100
    assert prompt_runs([100] * (per + 1)) == [(0, per), (per, per + 1)]


@pytest.mark.parametrize("method", ["none", "draft"])
def test_equal_prompts_share_one_prefill_forward(tiny_target, tiny_draft, method, monkeypatch):
    eng = Engine(tiny_target, SpecConfig(method=method, k=2 if method == "draft" else 0),
                 EngineConfig(max_batch=8, max_model_len=64), draft=tiny_draft if method == "draft" else None)
    calls = []
    if method == "draft":                          # the draft's prefill is batched too
        forward = eng.proposer.model.forward
        monkeypatch.setattr(eng.proposer.model, "forward",
                            lambda ids, *a, **kw: calls.append(tuple(ids.shape)) or forward(ids, *a, **kw))
    prompts = random_prompts(8, seed=5, lo=7, hi=8)                 # 8 prompts of 7 tokens
    seqs = [eng.add_request(p, SamplingParams(max_new_tokens=4, ignore_eos=True)) for p in prompts]
    eng.step()
    assert eng.metrics.target_forwards == 1 and [s.row for s in eng.running] == list(range(8))
    assert calls == ([(8, 7)] if method == "draft" else [])
    assert all(eng.cache.lengths[s.row] == 7 for s in seqs)


@pytest.mark.parametrize("method,temperature", [("none", 0.0), ("draft", 0.0), ("draft", 1.0)])
def test_requests_finishing_at_admission_leave_no_hole(tiny_target, tiny_draft, method, temperature):
    """Every other request wants one token (its first ends it) among prompts of mixed lengths:
    the rest close up to rows [0, n), and every output equals the request decoded alone."""
    spec = SpecConfig(method=method, k=3 if method == "draft" else 0)
    draft = tiny_draft if method == "draft" else None
    prompts = random_prompts(10, seed=6)
    params = [SamplingParams(max_new_tokens=1 if i % 2 else 12, temperature=temperature, seed=i, ignore_eos=True)
              for i in range(10)]
    eng = Engine(tiny_target, spec, EngineConfig(max_batch=10, max_model_len=128), draft=draft)
    seqs = [eng.add_request(p, sp) for p, sp in zip(prompts, params)]
    eng.step()
    assert [s.row for s in eng.running] == list(range(5)) and all(s.finished for s in seqs[1::2])
    for b, s in enumerate(eng.running):
        assert s is seqs[2 * b] and eng.cache.lengths[b] == len(s.token_ids) - 1
    while eng.has_unfinished():
        eng.step()
    alone = Engine(tiny_target, spec, EngineConfig(max_batch=1, max_model_len=128), draft=draft)
    expected = [s.output_ids for s in alone.generate(prompts, params)]
    assert [s.output_ids for s in seqs] == expected
