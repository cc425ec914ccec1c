"""400 / 401 / 404 / 408 / 429 with OpenAI-style error objects."""
from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from liveserver import live_server, wait_idle
from specdec.config import SpecConfig


def post(url, body, path="/v1/completions", **kw):
    if isinstance(body, (bytes, str)):
        return httpx.post(url + path, content=body, headers={"content-type": "application/json"}, **kw)
    return httpx.post(url + path, json=body, **kw)


def assert_error(r, status, type_="invalid_request_error", contains=""):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == type_ and err["code"] == status
    assert contains.lower() in err["message"].lower()
    return err


@pytest.mark.parametrize("body, contains", [
    (b"{not json", "not valid json"),
    (b"[1, 2", "not valid json"),
    ({"prompt": "x", "max_tokens": "5"}, "max_tokens"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": "x", "temperature": "hot"}, "temperature"),
    ({"prompt": "x", "stream": "yes"}, "stream"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "temperature": 2.5}, "temperature"),
    ({"prompt": "x", "top_p": 0}, "top_p"),
    ({"prompt": "x", "top_k": -1}, "top_k"),
    ({"prompt": "x", "n": 0}, "n"),
    ({"prompt": ["a", "b"], "n": 40}, "at most 64"),      # 80 completions, more than the queue
    ({"prompt": [], "max_tokens": 2}, "empty prompt"),
    ({"prompt": [1, 99999], "max_tokens": 2}, "token ids"),
    ({"prompt": ["a", ""]}, "empty prompt"),
    ({"prompt": [[5, 6], []]}, "empty prompt"),
    ({"prompt": "x", "max_tokens": 600}, "exceeds the context length"),
    ({"prompt": list(range(2, 600)), "max_tokens": 1}, "exceeds the context length"),
    ({"prompt": "x", "speculative": {"method": "telepathy"}}, "unknown speculative method"),
    ({"prompt": "x", "speculative": {"k": 99}}, "k must be"),
    ({"prompt": "x", "speculative": {"k": "lots"}}, "speculative.k"),
    ({}, "prompt"),
])
def test_bad_completion_requests_get_400(server, body, contains):
    err = assert_error(post(server[0], body), 400, contains=contains)
    assert err["message"]


@pytest.mark.parametrize("body, contains", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "role"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": -3}, "max_completion_tokens"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "text content"),
])
def test_bad_chat_requests_get_400(server, body, contains):
    assert_error(post(server[0], body, "/v1/chat/completions"), 400, contains=contains)


def test_unknown_model_gets_404(server):
    assert_error(post(server[0], {"prompt": "x", "model": "gpt-9"}), 404, "not_found_error", "does not exist")


def test_openai_client_raises_bad_request(server):
    c = openai.OpenAI(base_url=server[0] + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="context length"):
        c.completions.create(model="tiny", prompt="x", max_tokens=10_000)


def test_api_key(tiny_models):
    with live_server(tiny_models, api_key="s3cret", model_name="tiny") as (url, _):
        assert_error(post(url, {"prompt": "x", "max_tokens": 1}), 401, "authentication_error")
        bad = openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
        good = openai.OpenAI(base_url=url + "/v1", api_key="s3cret", max_retries=0)
        r = good.completions.create(model="tiny", prompt="x", max_tokens=2, extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == 2 and isinstance(r.choices[0].text, str)
        assert httpx.get(url + "/health").status_code == 200          # health and metrics stay open
        assert httpx.get(url + "/metrics").status_code == 200


def test_full_queue_gets_429(tiny_models):
    long = {"prompt": "x", "max_tokens": 480, "temperature": 0, "ignore_eos": True, "stream": True}
    short = {"prompt": "y", "max_tokens": 2}
    with live_server(tiny_models, max_batch=1, max_queue=1, model_name="tiny") as (url, app):
        with httpx.Client(timeout=60) as c:
            with c.stream("POST", url + "/v1/completions", json=long) as a:   # runs (1 batch slot)
                next(ln for ln in a.iter_lines() if ln.startswith("data: "))

                async def burst():       # 6 at once for 1 queue slot, while `a` still runs
                    async with httpx.AsyncClient(timeout=60) as ac:
                        return await asyncio.gather(*(ac.post(url + "/v1/completions", json=short)
                                                      for _ in range(6)))
                rs = asyncio.run(burst())
        codes = sorted(r.status_code for r in rs)
        assert 429 in codes and set(codes) <= {200, 429}, codes
        assert_error(next(r for r in rs if r.status_code == 429), 429, "rate_limit_error", "queue is full")
        wait_idle(app)
        assert app.state.worker.leaks() == []
        assert httpx.post(url + "/v1/completions", json=short).status_code == 200


def test_request_timeout(tiny_models):
    with live_server(tiny_models, request_timeout=0.05, model_name="tiny",
                     spec=SpecConfig(method="none", k=0)) as (url, app):
        body = {"prompt": "x", "max_tokens": 480, "temperature": 0, "ignore_eos": True}
        assert_error(post(url, body, timeout=30), 408, "timeout_error", "timed out")
        with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=30) as r:
            lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
        assert '"timeout_error"' in lines[-2] and lines[-1] == "data: [DONE]"
        wait_idle(app)
        assert app.state.worker.leaks() == []


def test_a_lone_surrogate_gets_400_and_the_connection_stays_usable(server):
    """JSON may escape a lone surrogate; the tokenizer cannot take it (it was a 500 that
    reset the keep-alive connection)."""
    with httpx.Client(base_url=server[0]) as client:
        for path, body in (("/v1/completions", b'{"prompt": "a\\ud800b", "max_tokens": 2}'),
                           ("/v1/chat/completions",
                            b'{"messages": [{"role": "user", "content": "\\udfff"}], "max_tokens": 2}'),
                           ("/v1/completions", b'{"prompt": "x", "stop": ["\\ud83d"], "max_tokens": 2}')):
            r = client.post(path, content=body, headers={"content-type": "application/json"})
            assert_error(r, 400, contains="surrogate")
        ok = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
        assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("seed, status", [(2 ** 64, 400), (-(2 ** 63) - 1, 400), (2 ** 64 - 1, 200), (-1, 200)])
def test_seeds_outside_64_bits_get_400(server, seed, status):
    r = post(server[0], {"prompt": "x", "max_tokens": 2, "temperature": 1, "seed": seed})
    if status == 400:
        assert_error(r, 400, contains="seed")
    else:
        assert r.status_code == 200, r.text


def test_an_empty_prompt_string_gets_400(server):
    assert_error(post(server[0], {"prompt": "", "max_tokens": 2}), 400, contains="empty prompt")


def test_a_non_streaming_client_that_leaves_frees_its_slot(server):
    """The disconnect check used to run only after 0.5 s without a token, which never
    happens mid-generation: the slot stayed busy until the generation ended."""
    import time
    url, app = server
    wait_idle(app)
    worker = app.state.worker
    aborted = worker.metrics.request_success.labels(finished_reason="abort")
    before = aborted._value.get()
    body = {"prompt": "x", "max_tokens": 480, "temperature": 0, "ignore_eos": True}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(url + "/v1/completions", json=body, timeout=0.05)
    end = time.time() + 5.0
    while (worker.num_running or aborted._value.get() == before) and time.time() < end:
        time.sleep(0.005)
    assert worker.num_running == 0
    assert aborted._value.get() == before + 1      # ended by the disconnect, not by its length
    assert httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code == 200


@pytest.mark.parametrize("name, value, noop", [
    ("best_of", 3, 1), ("suffix", "end", ""),
    ("tools", [{"type": "function", "function": {"name": "f"}}], []), ("tool_choice", "auto", "none"),
    ("response_format", {"type": "json_object"}, {"type": "text"}),
])
def test_parameters_that_change_the_output_are_refused_not_ignored(server, name, value, noop):
    path, body = ("/v1/completions", {"prompt": "x", "max_tokens": 2})
    if name in ("tools", "tool_choice", "response_format"):
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    err = assert_error(post(server[0], {**body, name: value}, path), 400, contains=name)
    assert err["param"] == name
    assert post(server[0], {**body, name: noop}, path).status_code == 200


def test_every_request_field_is_handled_or_refused():
    """A field added to the request models must be implemented (listed here) or refused
    (protocol.UNSUPPORTED); nothing a client sends is declared and then ignored."""
    from specdec.server import protocol as P
    handled = {"model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stream",
               "stream_options", "n", "ignore_eos", "return_token_ids", "speculative", "prompt", "echo",
               "messages", "max_completion_tokens", "sampling_coupling", "logprobs", "top_logprobs",
               "logit_bias", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_tokens"}
    for model in (P.CompletionRequest, P.ChatCompletionRequest):
        assert set(model.model_fields) <= handled | set(P.UNSUPPORTED), set(model.model_fields) - handled


def test_echo_is_honoured_when_streaming(server):
    body = {"prompt": "def f(x):", "max_tokens": 3, "echo": True, "stream": True, "temperature": 0}
    with httpx.stream("POST", server[0] + "/v1/completions", json=body) as r:
        chunks = [line[6:] for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    import json
    text = "".join(c["choices"][0]["text"] for c in map(json.loads, chunks) if c["choices"])
    assert text.startswith("def f(x):")
    plain = post(server[0], {**body, "stream": False}).json()["choices"][0]["text"]
    assert text == plain


def test_a_body_over_the_limit_gets_413_declared_or_streamed(tiny_models):
    with live_server(tiny_models, model_name="tiny", max_request_bytes=1000) as (url, _):
        assert_error(post(url, {"prompt": "x" * 2000, "max_tokens": 1}), 413, contains="exceeds")

        def chunks():                                   # no content-length: counted as it arrives
            yield b'{"prompt": "'
            for _ in range(20):
                yield b"y" * 100
            yield b'", "max_tokens": 1}'
        r = httpx.post(url + "/v1/completions", content=chunks(), headers={"content-type": "application/json"})
        assert_error(r, 413, contains="exceeds")
        assert post(url, {"prompt": "x" * 500, "max_tokens": 1}).status_code == 200


def test_a_request_that_ends_while_queued_is_counted(server):
    """Aborted or timed out before it got a row: counted in vllm:request_success like any
    finished request (it used to vanish from the metrics)."""
    import asyncio
    from specdec.config import SamplingParams
    from specdec.server.handle import Handle
    worker = server[1].state.worker
    loop = asyncio.new_event_loop()
    try:
        for reason in ("abort", "timeout"):
            counter = worker.metrics.request_success.labels(finished_reason=reason)
            before = counter._value.get()
            h = Handle([5, 6], SamplingParams(max_new_tokens=2), ("none", 0, 0), deadline=0.0, loop=loop)
            worker._drop_pending(h, reason)
            assert counter._value.get() == before + 1 and h.done
    finally:
        loop.close()
