"""The official openai client against a live server: completions, chat, streaming, models."""
from __future__ import annotations

import httpx
import openai
import pytest

from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine.engine import Engine

from liveserver import wait_idle


@pytest.fixture(scope="module")
def client(server):
    url, _ = server
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def offline(models, prompt_ids, n, spec=SpecConfig(method="none", k=0)):
    eng = Engine(models.target, spec, EngineConfig(max_batch=4, max_model_len=512), draft=models.draft)
    return eng.generate([prompt_ids], SamplingParams(max_new_tokens=n, ignore_eos=True))[0].output_ids


def test_models_and_health(server, client):
    url, _ = server
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert httpx.get(url + "/health").json()["status"] == "ok"


def test_completion_matches_offline_greedy(server, client, tiny_models):
    ids = tiny_models.tokenizer.encode("def add(a, b):")
    r = client.completions.create(model="tiny", prompt=ids, max_tokens=12, temperature=0,
                                  extra_body={"ignore_eos": True})
    want = offline(tiny_models, ids, 12)
    assert r.choices[0].text == tiny_models.tokenizer.decode(want)
    assert r.choices[0].finish_reason == "length"
    u = r.usage.model_dump()
    assert u["prompt_tokens"] == len(ids) and u["completion_tokens"] == 12
    assert u["draft_tokens"] > 0 and 0 <= u["accepted_tokens"] <= u["draft_tokens"]
    assert u["mean_acceptance_length"] >= 1.0


def test_string_prompt_and_speculation_off_give_same_text(client):
    kw = dict(model="tiny", prompt="import os\n", max_tokens=10, temperature=0, extra_body={"ignore_eos": True})
    on = client.completions.create(**kw)
    off = client.completions.create(**{**kw, "extra_body": {"ignore_eos": True, "speculative": {"method": "none"}}})
    assert on.choices[0].text == off.choices[0].text
    assert off.usage.model_dump()["draft_tokens"] == 0
    assert on.usage.model_dump()["draft_tokens"] > 0


def test_streaming_completion_equals_non_streaming(client):
    kw = dict(model="tiny", prompt="class A:\n", max_tokens=10, temperature=0, extra_body={"ignore_eos": True})
    full = client.completions.create(**kw).choices[0].text
    chunks = list(client.completions.create(stream=True, **kw))
    assert "".join(c.choices[0].text for c in chunks) == full
    assert chunks[-1].choices[0].finish_reason == "length"


def test_sse_ends_with_done(server):
    url, _ = server
    with httpx.stream("POST", url + "/v1/completions", json={"prompt": "x", "max_tokens": 3, "stream": True,
                                                             "temperature": 0}) as r:
        lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"


def test_chat_and_chat_stream(client):
    msgs = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "a loop"}]
    r = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=8, temperature=0)
    assert r.choices[0].message.role == "assistant"
    text = r.choices[0].message.content
    s = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=8, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    chunks = list(s)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens


def test_stop_string_cuts_text(client):
    kw = dict(model="tiny", prompt="def f(x):\n", max_tokens=16, temperature=0, extra_body={"ignore_eos": True})
    full = client.completions.create(**kw).choices[0].text
    assert len(full) > 4
    stop = full[2:4]
    r = client.completions.create(stop=[stop], **kw)
    assert r.choices[0].text == full[:full.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_seeded_sampling_is_reproducible(client, server):
    kw = dict(model="tiny", prompt="x = ", max_tokens=8, temperature=1.0, top_p=0.9, seed=7,
              extra_body={"top_k": 50, "ignore_eos": True})
    a = client.completions.create(**kw).choices[0].text
    b = client.completions.create(**kw).choices[0].text
    assert a == b
    # and the seed is what makes it so: other seeds give other text, and so does greedy
    others = {client.completions.create(**{**kw, "seed": s}).choices[0].text for s in range(8, 14)}
    assert len(others - {a}) >= 4
    greedy = client.completions.create(**{**kw, "temperature": 0, "seed": None}).choices[0].text
    assert greedy != a or len(others) > 1
    wait_idle(server[1])
    assert server[1].state.worker.leaks() == []


@pytest.mark.parametrize("spec", [{"method": "ngram", "k": 3}, {"method": "suffix", "k": 2},
                                  {"method": "draft", "k": "heuristic"}])
def test_other_methods_are_lossless(client, spec):
    kw = dict(model="tiny", prompt="a = 1\nb = 2\na = 1\n", max_tokens=12, temperature=0)
    off = client.completions.create(**kw, extra_body={"ignore_eos": True, "speculative": {"method": "none"}})
    on = client.completions.create(**kw, extra_body={"ignore_eos": True, "speculative": spec})
    assert on.choices[0].text == off.choices[0].text
