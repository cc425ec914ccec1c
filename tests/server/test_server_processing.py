"""logit_bias, min_tokens and the repetition/frequency/presence penalties over HTTP: mapped
onto SamplingParams, lossless under speculation, bad values a 400 naming the field."""
from __future__ import annotations

import httpx
import pytest

from test_errors import assert_error, post

PROMPT = "def f(x):\n    return x"
OFF = {"speculative": {"method": "none"}}


def tokens(url, **body):
    r = post(url, {"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "ignore_eos": True,
                   "return_token_ids": True, **body})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


def test_a_logit_bias_of_100_emits_that_token(server):
    url = server[0]
    plain = tokens(url)
    forced = next(t for t in range(100, 200) if t not in plain)     # a token greedy never picks
    assert tokens(url, logit_bias={str(forced): 100}) == [forced] * 24
    assert tokens(url, logit_bias={str(forced): 100}, **OFF) == [forced] * 24
    chat = post(url, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "temperature": 0,
                      "ignore_eos": True, "return_token_ids": True, "logit_bias": {str(forced): 100}},
                "/v1/chat/completions")
    assert chat.status_code == 200 and chat.json()["choices"][0]["token_ids"] == [forced] * 6


# the tiny model's greedy text never repeats a token, so penalties that discourage repeats
# leave it unchanged: these encourage them (a penalty < 0, a repetition_penalty < 1)
@pytest.mark.parametrize("kw", [dict(repetition_penalty=0.3), dict(frequency_penalty=-2),
                                dict(presence_penalty=-2, logit_bias={"5": -3}),
                                dict(min_tokens=24, repetition_penalty=0.5, presence_penalty=0.5)])
def test_penalties_change_greedy_output_and_speculation_keeps_it(server, kw):
    url = server[0]
    spec = tokens(url, **kw)
    assert spec != tokens(url), "the setting must change the output for the test to mean anything"
    assert spec == tokens(url, **kw, **OFF)                         # speculation on = off, bit for bit
    assert server[1].state.worker.metrics.num_draft_tokens._value.get() > 0


def test_min_tokens_holds_off_eos(server):
    url = server[0]
    free = post(url, {"prompt": PROMPT, "max_tokens": 40, "temperature": 0, "logit_bias": {"1": 100}}).json()
    assert free["usage"]["completion_tokens"] == 0                 # EOS (id 1) forced at once
    held = post(url, {"prompt": PROMPT, "max_tokens": 40, "temperature": 0, "logit_bias": {"1": 100},
                      "min_tokens": 7}).json()
    assert held["usage"]["completion_tokens"] == 7


@pytest.mark.parametrize("field, value", [
    ("logit_bias", {"abc": 1}), ("logit_bias", {"5": 101}), ("logit_bias", {"5": -100.5}),
    ("logit_bias", {"99999999": 1}), ("logit_bias", {"5": "big"}), ("logit_bias", [5]),
    ("frequency_penalty", 2.5), ("frequency_penalty", "x"), ("presence_penalty", -3),
    ("repetition_penalty", 0), ("repetition_penalty", -1.0), ("min_tokens", -1), ("min_tokens", 1.5),
    ("min_tokens", 50),                                             # more than max_tokens
])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_bad_processing_values_get_a_400_naming_the_field(server, field, value, path):
    body = {"prompt": PROMPT} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]}
    err = assert_error(post(server[0], {**body, "max_tokens": 8, field: value}, path), 400, contains=field)
    assert err["param"].split(".")[0] == field


def test_the_openai_client_sends_them(server):
    import openai
    client = openai.OpenAI(base_url=server[0] + "/v1", api_key="x", http_client=httpx.Client())
    out = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=4, temperature=0,
                                    logit_bias={"150": 100}, frequency_penalty=0.5, presence_penalty=0.5)
    assert out.usage.completion_tokens == 4
