"""Continuous batching under load: exact greedy tokens, and disconnects that leak nothing."""
from __future__ import annotations

import asyncio
import time

import httpx
import openai

from liveserver import offline_greedy, prompts, wait_idle


def test_32_concurrent_greedy_requests_match_offline(server, tiny_models):
    url, app = server
    ps = prompts(32, seed=3)
    want = offline_greedy(tiny_models, ps, 10)

    async def main():
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        # half the requests speculate (server default: draft, k=3), half decode plainly,
        # so two engines batch concurrently
        async def one(i, p):
            spec = {"method": "none"} if i % 2 else {"k": 2 + i % 3}
            r = await client.completions.create(model="tiny", prompt=p, max_tokens=10, temperature=0,
                                                extra_body={"ignore_eos": True, "return_token_ids": True,
                                                            "speculative": spec})
            return r.choices[0].model_extra["token_ids"]
        out = await asyncio.gather(*(one(i, p) for i, p in enumerate(ps)))
        await client.close()
        return out

    got = asyncio.run(main())
    assert got == want
    wait_idle(app)
    assert app.state.worker.leaks() == []


def _health(url):
    return httpx.get(url + "/health").json()


def test_disconnecting_20_percent_of_streams_frees_their_rows(server):
    url, app = server
    w = app.state.worker
    before = {k: v for k, v in _reasons(url).items()}
    n, drop = 20, set(range(0, 20, 5))          # 4 of 20 clients leave after 2 chunks

    async def client(i, p):
        body = {"prompt": p, "max_tokens": 400, "temperature": 0, "stream": True, "ignore_eos": i in drop}
        async with httpx.AsyncClient(timeout=60) as c:
            async with c.stream("POST", url + "/v1/completions", json=body) as r:
                assert r.status_code == 200
                chunks = 0
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        chunks += 1
                        if i in drop and chunks == 2:
                            return "dropped"
                        if line == "data: [DONE]":
                            return "done"
        return "eof"

    async def main():
        return await asyncio.gather(*(client(i, p) for i, p in enumerate(prompts(n, seed=5))))

    res = asyncio.run(main())
    assert res.count("dropped") == 4 and res.count("done") == 16
    wait_idle(app, timeout=20)
    assert w.leaks() == []
    for _ in range(5):                            # the request count stays at zero
        h = _health(url)
        assert (h["running"], h["waiting"]) == (0, 0)
        time.sleep(0.05)
    after = _reasons(url)
    # the dropped requests wanted 400 tokens each (ignore_eos): they ended by abort, not length
    assert after.get("abort", 0) - before.get("abort", 0) == 4
    # and the server still serves
    r = httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 2, "temperature": 0})
    assert r.status_code == 200


def _reasons(url) -> dict[str, float]:
    out = {}
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("vllm:request_success_total{"):
            reason = line.split('finished_reason="')[1].split('"')[0]
            out[reason] = float(line.rsplit(" ", 1)[1])
    return out
