"""logprobs / top_logprobs: the target's log_softmax at the emitted tokens, on completions
and chat, streaming or not, with speculation on or off."""
import json

import httpx
import torch

from test_errors import assert_error, post

PROMPT = "def f(x):"


def _reference(models, ids: list[int], out: list[int]) -> torch.Tensor:
    """log_softmax of one uncached forward over prompt + output, at each output token."""
    full = torch.tensor([ids + out])
    with torch.inference_mode():
        logits = models.target(full, torch.arange(full.shape[1])[None])[0]
    lp = torch.log_softmax(logits.float(), -1)
    return lp[torch.arange(len(ids) - 1, len(ids) + len(out) - 1), out]


def _completion(url, **kw):
    body = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "ignore_eos": True, "return_token_ids": True, **kw}
    r = post(url, body)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_completion_logprobs_are_the_targets(server, tiny_models):
    url = server[0]
    c = _completion(url, logprobs=2)
    ids = tiny_models.tokenizer.encode(PROMPT)
    ref = _reference(tiny_models, ids, c["token_ids"])
    got = torch.tensor(c["logprobs"]["token_logprobs"])
    assert len(got) == len(c["token_ids"]) == 8
    assert torch.allclose(got, ref, atol=1e-5), (got - ref).abs().max()
    assert all(len(t) <= 2 for t in c["logprobs"]["top_logprobs"])
    assert c["logprobs"]["text_offset"][0] == 0
    # greedy: the emitted token is the most likely one
    assert all(max(t.values()) == lp for t, lp in zip(c["logprobs"]["top_logprobs"], got.tolist())
               if len(t) == 2)
    plain = _completion(url, logprobs=2, speculative={"method": "none"})
    assert plain["token_ids"] == c["token_ids"]
    assert plain["logprobs"]["token_logprobs"] == c["logprobs"]["token_logprobs"]   # bit for bit


def test_sampled_logprobs_are_the_targets_too(server, tiny_models):
    c = _completion(server[0], logprobs=0, temperature=1.0, seed=7)
    ref = _reference(tiny_models, tiny_models.tokenizer.encode(PROMPT), c["token_ids"])
    assert torch.allclose(torch.tensor(c["logprobs"]["token_logprobs"]), ref, atol=1e-5)
    assert c["logprobs"]["top_logprobs"] == [{}] * 8


def test_streamed_logprobs_equal_the_non_streamed(server):
    url = server[0]
    whole = _completion(url, logprobs=1)["logprobs"]["token_logprobs"]
    body = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "ignore_eos": True, "logprobs": 1, "stream": True}
    got = []
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                lp = json.loads(line[6:])["choices"][0]["logprobs"]
                got += lp["token_logprobs"] if lp else []
    assert got == whole


def test_chat_logprobs(server):
    url = server[0]
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "temperature": 0,
            "ignore_eos": True, "logprobs": True, "top_logprobs": 3}
    r = post(url, body, "/v1/chat/completions")
    assert r.status_code == 200, r.text
    content = r.json()["choices"][0]["logprobs"]["content"]
    assert len(content) == r.json()["usage"]["completion_tokens"] == 6
    for e in content:
        assert len(e["top_logprobs"]) == 3 and e["logprob"] == e["top_logprobs"][0]["logprob"]
        assert e["bytes"] == list(e["token"].encode())
    no = post(url, {**body, "logprobs": False, "top_logprobs": None}, "/v1/chat/completions").json()
    assert no["choices"][0]["logprobs"] is None


def test_bad_logprobs_get_400(server):
    url = server[0]
    assert_error(post(url, {"prompt": PROMPT, "logprobs": 21}), 400)
    assert_error(post(url, {"prompt": PROMPT, "logprobs": True}), 400)
    chat = {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}
    assert_error(post(url, chat, "/v1/chat/completions"), 400, contains="logprobs")
