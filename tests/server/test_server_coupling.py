"""Per-request `sampling_coupling`: with "invariant", a seed's text does not depend on whether or
how the server speculates, so eight calls under k = auto agree with each other and with
speculation off."""
from __future__ import annotations

import httpx
import pytest


def _text(url, **extra):
    body = {"prompt": "def main():", "max_tokens": 16, "temperature": 1.0, "top_p": 0.95, "seed": 1234,
            "ignore_eos": True, **extra}
    r = httpx.post(url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def test_invariant_seed_reproduces_under_auto_k_and_without_speculation(server):
    url, _ = server
    auto = [_text(url, sampling_coupling="invariant", speculative={"method": "draft", "k": "auto"})
            for _ in range(8)]
    assert len(set(auto)) == 1
    assert auto[0] == _text(url, sampling_coupling="invariant", speculative={"method": "none"})
    assert auto[0] == _text(url, sampling_coupling="invariant", speculative={"method": "ngram", "k": 3})
    assert auto[0] != _text(url, sampling_coupling="invariant", seed=1235,
                            speculative={"method": "none"})                 # the seed matters


@pytest.mark.parametrize("bad", ["gumbel", 1, None])
def test_an_unknown_coupling_is_a_400(server, bad):
    url, _ = server
    r = httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 2, "sampling_coupling": bad})
    assert r.status_code == 400 and "sampling_coupling" in r.text
