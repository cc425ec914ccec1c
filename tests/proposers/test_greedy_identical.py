"""Greedy output of every proposer is token-identical to plain decoding."""
import pytest

from specdec.build import Models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from tests.conftest import perturbed, random_prompts

METHODS = ["ngram", "suffix", "layerskip", "auto"]


def _prompts(vocab, n=6, seed=0):
    """Random prompts, half of them with a repeated span so lookups find matches in the prompt."""
    ps = random_prompts(n, seed=seed, lo=4, hi=30, vocab=vocab)
    return [p + p[: len(p) // 2] if i % 2 else p for i, p in enumerate(ps)]


def _run(target, spec, prompts, draft=None, max_batch=4, new=24):
    eng = make_engine(Models(target, None, draft), spec, EngineConfig(max_batch=max_batch, max_model_len=256))
    seqs = eng.generate(prompts, SamplingParams(max_new_tokens=new, ignore_eos=True))
    return [s.output_ids for s in seqs], eng


@pytest.fixture(scope="module", params=["tiny", "loopy"])
def pair(request, tiny_target, tiny_draft, loopy_target):
    """(target, draft, prompts per seed, plain outputs per seed)."""
    if request.param == "tiny":
        target, draft = tiny_target, tiny_draft
    else:
        target, draft = loopy_target, perturbed(loopy_target, 0.02)
    V = target.config.vocab_size
    prompts = {s: _prompts(V, seed=s) for s in (0, 1)}
    plain = {s: _run(target, SpecConfig(method="none", k=0), prompts[s])[0] for s in prompts}
    return target, draft, prompts, plain


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_matches_plain(pair, method, k):
    target, draft, prompts, plain = pair
    for s in prompts:
        out, _ = _run(target, SpecConfig(method=method, k=k), prompts[s], draft=draft)
        assert out == plain[s], (method, k, s)


@pytest.mark.parametrize("method", METHODS)
def test_drafts_are_accepted_raggedly(loopy_target, method):
    """Guards against a proposer that never proposes (which would pass the identity test),
    and checks acceptance really differs between rows and rounds."""
    draft = perturbed(loopy_target, 0.02)
    _, eng = _run(loopy_target, SpecConfig(method=method, k=4), _prompts(64), draft=draft, new=48)
    m = eng.metrics
    assert m.num_accepted_tokens > 0.3 * m.num_draft_tokens > 0
    assert len(m.accepted_length_hist) >= 2      # some rounds accept more than others


def test_batch_one_and_batched_agree(loopy_target):
    ps = _prompts(64, n=4, seed=3)
    draft = perturbed(loopy_target, 0.02)
    batched, _ = _run(loopy_target, SpecConfig(method="auto", k=4), ps, draft=draft, max_batch=4)
    alone = [_run(loopy_target, SpecConfig(method="auto", k=4), [p], draft=draft, max_batch=1)[0][0]
             for p in ps]
    assert batched == alone


@pytest.mark.parametrize("method", METHODS)
def test_greedy_matches_plain_with_adaptive_k(pair, method):
    """With k chosen each round by the adaptive policy (the CLI default)."""
    target, draft, prompts, plain = pair
    out, _ = _run(target, SpecConfig(method=method, k="auto"), prompts[0], draft=draft)
    assert out == plain[0]
