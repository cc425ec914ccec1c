"""n > 1 and batched prompts: OpenAI's indices (prompt_i * n + j), summed usage, streaming,
and distinct derived seeds per choice (server/choices.py)."""
from __future__ import annotations

import json

import httpx

from specdec.server.choices import choice_seed
from test_errors import post

PROMPTS = ["def f(x):", "The cat sat on"]


def complete(url, **body):
    r = post(url, {"max_tokens": 8, "ignore_eos": True, "return_token_ids": True, **body})
    assert r.status_code == 200, r.text
    return r.json()


def streamed(url, path="/v1/completions", **body):
    with httpx.stream("POST", url + path, json={"max_tokens": 8, "ignore_eos": True, "stream": True, **body}) as r:
        assert r.status_code == 200
        return [json.loads(line[6:]) for line in r.iter_lines()
                if line.startswith("data: ") and line != "data: [DONE]"]


def test_batched_prompts_with_n_are_indexed_and_summed(server):
    url = server[0]
    single = [complete(url, prompt=p, temperature=0) for p in PROMPTS]
    out = complete(url, prompt=PROMPTS, n=3, temperature=0)
    assert [c["index"] for c in out["choices"]] == list(range(6))
    for c in out["choices"]:                        # greedy: every choice of prompt i is prompt i's text
        assert c["token_ids"] == single[c["index"] // 3]["choices"][0]["token_ids"]
    u = out["usage"]
    assert u["prompt_tokens"] == sum(s["usage"]["prompt_tokens"] for s in single)   # each prompt once
    assert u["completion_tokens"] == 6 * 8 and u["total_tokens"] == u["prompt_tokens"] + 48
    ids = [single[0]["choices"][0]["token_ids"][:3], [5, 6, 7, 8]]
    assert [c["index"] for c in complete(url, prompt=ids, temperature=0)["choices"]] == [0, 1]


def test_seeded_choices_differ_and_follow_the_documented_rule(server):
    url = server[0]
    body = dict(prompt=PROMPTS[0], temperature=1.0, seed=1234, max_tokens=12)
    texts = [c["token_ids"] for c in complete(url, n=4, **body)["choices"]]
    assert len({tuple(t) for t in texts}) == 4                   # distinct seeds, distinct samples
    assert [c["token_ids"] for c in complete(url, n=4, **body)["choices"]] == texts   # reproducible
    for j in (0, 2):                                             # choice j = a lone request with seed_j
        lone = complete(url, **{**body, "seed": choice_seed(1234, j)})["choices"][0]["token_ids"]
        assert lone == texts[j]
    assert choice_seed(1234, 0) == 1234 and choice_seed(None, 3) is None
    assert 0 <= choice_seed(2 ** 64 - 1, 5) < 2 ** 64 and choice_seed(-7, 1) >= 0


def test_streamed_choices_equal_whole_ones(server):
    url = server[0]
    whole = complete(url, prompt=PROMPTS, n=2, temperature=0, echo=True)
    chunks = streamed(url, prompt=PROMPTS, n=2, temperature=0, echo=True, stream_options={"include_usage": True})
    text = {}
    finish = {}
    for ch in chunks[:-1]:
        (c,) = ch["choices"]
        text[c["index"]] = text.get(c["index"], "") + c["text"]
        if c["finish_reason"]:
            finish[c["index"]] = c["finish_reason"]
    assert text == {c["index"]: c["text"] for c in whole["choices"]}
    assert finish == {i: "length" for i in range(4)}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 32
    assert chunks[-1]["usage"]["prompt_tokens"] == whole["usage"]["prompt_tokens"]


def test_chat_with_n(server):
    url = server[0]
    msg = {"messages": [{"role": "user", "content": "hi"}], "temperature": 1.0, "seed": 7, "n": 3}
    whole = post(url, {**msg, "max_tokens": 10, "ignore_eos": True}, "/v1/chat/completions").json()
    assert [c["index"] for c in whole["choices"]] == [0, 1, 2]
    assert len({c["message"]["content"] for c in whole["choices"]}) == 3
    chunks = streamed(url, "/v1/chat/completions", **msg, max_tokens=10)
    roles = [ch["choices"][0]["index"] for ch in chunks if ch["choices"][0]["delta"].get("role")]
    assert sorted(roles) == [0, 1, 2]
    got = {}
    for ch in chunks:
        c = ch["choices"][0]
        got[c["index"]] = got.get(c["index"], "") + c["delta"].get("content", "")
    assert got == {c["index"]: c["message"]["content"] for c in whole["choices"]}


def test_the_openai_client_reads_n_choices(server):
    import openai
    client = openai.OpenAI(base_url=server[0] + "/v1", api_key="x", http_client=httpx.Client())
    out = client.completions.create(model="tiny", prompt=PROMPTS, n=2, max_tokens=3, temperature=0)
    assert [c.index for c in out.choices] == [0, 1, 2, 3] and out.usage.completion_tokens <= 12


def test_continuous_usage_stats_puts_usage_on_every_chunk(server):
    url = server[0]
    chunks = streamed(url, prompt=PROMPTS, n=2, temperature=0, max_tokens=6,
                      stream_options={"continuous_usage_stats": True, "include_usage": True})
    per_choice = {}
    for ch in chunks[:-1]:
        (c,) = ch["choices"]
        u = ch["usage"]
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
        seen = per_choice.setdefault(c["index"], [])
        assert not seen or u["completion_tokens"] >= seen[-1]        # a running count per choice
        seen.append(u["completion_tokens"])
    assert sorted(per_choice) == [0, 1, 2, 3] and all(v[-1] == 6 for v in per_choice.values())
    assert chunks[-1]["usage"]["completion_tokens"] == 24                # the summed last chunk
    plain = streamed(url, prompt=PROMPTS[0], temperature=0, max_tokens=6)
    assert all("usage" not in ch for ch in plain)                       # off unless asked
    chat = streamed(url, "/v1/chat/completions", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                    stream_options={"continuous_usage_stats": True})
    assert all(ch["usage"]["prompt_tokens"] > 0 for ch in chat)
