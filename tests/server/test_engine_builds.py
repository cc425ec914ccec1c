"""Per-request speculation: a new engine is built off the engine thread, so the requests of
the engines that exist keep streaming meanwhile; the default engine is never evicted."""
import json
import threading
import time

import httpx

from liveserver import live_server, wait_idle
from specdec.config import SpecConfig
from specdec.server.worker import Worker

BUILD_S = 2.0          # an artificially slow build (a calibration): long against a token's time


def test_a_slow_build_stalls_no_other_stream(tiny_models, monkeypatch):
    real = Worker._make
    built_at = {}

    def slow(self, key):
        if key != self._default:
            time.sleep(BUILD_S)
            built_at[key] = time.time()
        return real(self, key)
    monkeypatch.setattr(Worker, "_make", slow)
    with live_server(tiny_models, spec=SpecConfig(method="draft", k=3), model_name="tiny") as (url, app):
        stamps = []

        def stream():
            body = {"prompt": "def f(x):", "max_tokens": 400, "temperature": 0, "ignore_eos": True, "stream": True}
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        stamps.append(time.time())
        t = threading.Thread(target=stream)
        t.start()
        while len(stamps) < 3:
            time.sleep(0.01)
        asked = time.time()                       # a request that needs a new engine
        r = httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 4,
                                                      "speculative": {"method": "ngram", "k": 2}}, timeout=60)
        t.join()
        assert r.status_code == 200, r.text
        done = built_at[("ngram", 2, 0)]
        during = [s for s in stamps if asked < s < done]
        # the default stream kept going while the other engine was being built
        assert len(during) >= 5, (len(during), len(stamps))
        wait_idle(app)
        assert app.state.worker.leaks() == []


def test_the_default_engine_is_never_evicted(tiny_models):
    with live_server(tiny_models, spec=SpecConfig(method="draft", k=3), model_name="tiny", max_engines=2) as (url, app):
        for method in ("ngram", "suffix", "none"):
            body = {"prompt": "x", "max_tokens": 3, "speculative": {"method": method, "k": 2}}
            assert httpx.post(url + "/v1/completions", json=body, timeout=60).status_code == 200
            wait_idle(app)
            assert ("draft", 3, 0) in app.state.worker.engines
        assert len(app.state.worker.engines) <= 2
        health = httpx.get(url + "/health").json()
        assert (health["running"], health["waiting"]) == (0, 0), json.dumps(health)


def test_request_speculation_can_be_turned_off(tiny_models):
    with live_server(tiny_models, spec=SpecConfig(method="draft", k=3), model_name="tiny",
                     allow_request_speculation=False) as (url, _):
        r = httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 2,
                                                      "speculative": {"method": "ngram"}})
        assert r.status_code == 400 and r.json()["error"]["param"] == "speculative"
        assert httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code == 200


def test_a_plain_server_keeps_plain_requests_plain(tiny_models):
    """`specdec serve --k 0` (method draft, k 0): a request without `speculative` decodes
    plainly on the default engine; it used to be sent to a new k = "auto" engine."""
    import httpx
    from liveserver import live_server
    from specdec.config import SpecConfig
    with live_server(tiny_models, spec=SpecConfig(method="draft", k=0), model_name="tiny") as (url, app):
        r = httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 4, "ignore_eos": True}, timeout=30)
        assert r.status_code == 200 and r.json()["usage"]["draft_tokens"] == 0
        assert list(app.state.worker.engines) == [("none", 0, 0)]


def test_a_speculative_setting_whose_caches_would_not_fit_is_a_400(tiny_models, monkeypatch):
    from specdec import build
    from specdec.errors import ResourceError

    def no_room(need, what, fix, device):
        raise ResourceError(f"{what} needs about 1.00 GiB, but only 0.00 GiB is available in host memory; {fix}")
    with live_server(tiny_models, spec=SpecConfig(method="draft", k=3), model_name="tiny") as (url, app):
        monkeypatch.setattr(build, "require", no_room)          # memory runs short after the start
        body = {"prompt": "x", "max_tokens": 3, "speculative": {"method": "ngram", "k": 2}}
        r = httpx.post(url + "/v1/completions", json=body, timeout=60)
        assert r.status_code == 400 and "lower --max-batch" in r.json()["error"]["message"], r.text
        monkeypatch.undo()
        assert httpx.post(url + "/v1/completions", json=body, timeout=60).status_code == 200   # built once it fits
        wait_idle(app)
        assert app.state.worker.leaks() == []


def test_a_request_may_ask_for_a_token_tree(tiny_models):
    with live_server(tiny_models, spec=SpecConfig(method="draft", k=3), model_name="tiny") as (url, app):
        body = {"prompt": "def f(x):", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
        plain = httpx.post(url + "/v1/completions", json=body, timeout=60).json()["choices"][0]["text"]
        tree = {**body, "speculative": {"method": "draft", "k": 3, "tree": 8}}
        r = httpx.post(url + "/v1/completions", json=tree, timeout=60)
        assert r.status_code == 200 and r.json()["choices"][0]["text"] == plain
        assert ("draft", 3, 8) in app.state.worker.engines
        for bad, param in (({"method": "draft", "k": 3, "tree": 99}, "speculative.tree"),
                           ({"method": "layerskip", "k": 3, "tree": 8}, "speculative.tree"),
                           ({"method": "draft", "k": "auto", "tree": 8}, "speculative.tree")):
            r = httpx.post(url + "/v1/completions", json={**body, "speculative": bad}, timeout=60)
            assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
        wait_idle(app)
        assert app.state.worker.leaks() == []


def test_a_request_may_ask_for_eagle_when_the_server_has_a_head(tiny_models, tiny_target):
    """Per request: eagle runs on the server's head and says what plain says under greedy; a
    server without one answers 400 naming the field, as it does for mtp without MTP layers."""
    from dataclasses import replace
    from tests.proposers.heads import random_head
    with_head = replace(tiny_models, head=random_head(tiny_target, seed=3, draft_vocab=list(range(500))))
    body = {"prompt": "def f(x):", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    with live_server(with_head, spec=SpecConfig(method="none", k=0), model_name="tiny") as (url, app):
        plain = httpx.post(url + "/v1/completions", json=body, timeout=60).json()["choices"][0]["text"]
        r = httpx.post(url + "/v1/completions", json={**body, "speculative": {"method": "eagle", "k": 3}}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == plain and r.json()["usage"]["draft_tokens"] > 0
        r = httpx.post(url + "/v1/completions", json={**body, "speculative": {"method": "mtp", "k": 3}}, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == "speculative.method"
    with live_server(tiny_models, spec=SpecConfig(method="none", k=0), model_name="tiny") as (url, app):
        r = httpx.post(url + "/v1/completions", json={**body, "speculative": {"method": "eagle", "k": 3}}, timeout=60)
        assert r.status_code == 400 and "--head" in r.json()["error"]["message"]
