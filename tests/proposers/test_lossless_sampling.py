"""Sampling with a proposer that has no probabilities (one-hot q) is lossless: the
distribution of short continuations matches plain sampling within a TV bound."""
import math
from collections import Counter

import pytest

from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine.engine import Engine
from tests.conftest import make_model

N = 1200                 # samples per method
NEW = 3                  # continuation length (first token from prefill, then speculative rounds)
PROMPT = [2, 3, 4, 2, 3, 4, 2, 3]


@pytest.fixture(scope="module")
def small():
    return make_model(5, vocab=5, std=0.5)


def continuations(model, method, temperature=1.0, seed0=0):
    k = 0 if method == "none" else 3
    eng = Engine(model, SpecConfig(method=method, k=k, options={"ngram_min": 1}),
                 EngineConfig(max_batch=256, max_model_len=64))
    params = [SamplingParams(temperature=temperature, seed=seed0 + i, max_new_tokens=NEW, ignore_eos=True)
              for i in range(N)]
    seqs = eng.generate([PROMPT] * N, params)
    return Counter(tuple(s.output_ids) for s in seqs), eng.metrics


def tv(a: Counter, b: Counter) -> float:
    return 0.5 * sum(abs(a[x] - b[x]) for x in set(a) | set(b)) / N


def tv_bound(ref: Counter) -> float:
    """~5 standard deviations above the expected TV between two independent N-sample
    empirical distributions drawn from `ref`'s (estimated) distribution."""
    p = [c / N for c in ref.values()]
    mean = 0.5 * sum(math.sqrt(2 * 2 * q * (1 - q) / (math.pi * N)) for q in p)
    sd = 0.5 * math.sqrt(sum(2 * q * (1 - q) / N for q in p))
    return mean + 5 * sd


@pytest.fixture(scope="module")
def plain(small):
    return continuations(small, "none", seed0=10**6)[0]


@pytest.mark.parametrize("method", ["ngram", "suffix"])
def test_one_hot_proposer_sampling_matches_plain(small, plain, method):
    spec, m = continuations(small, method)
    assert m.num_draft_tokens > N // 2                   # it did speculate...
    assert 0 < m.num_accepted_tokens < m.num_draft_tokens  # ...with acceptances and rejections
    assert tv(spec, plain) < tv_bound(plain), (tv(spec, plain), tv_bound(plain))


def test_the_bound_detects_a_different_distribution(small, plain):
    """Power check: sampling at another temperature is caught by the same bound."""
    other, _ = continuations(small, "none", temperature=0.6, seed0=2 * 10**6)
    assert tv(other, plain) > tv_bound(plain)
