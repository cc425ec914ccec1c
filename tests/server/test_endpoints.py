"""The endpoints a vLLM user expects beside the completions: models by id, tokenize,
detokenize, version, and OpenAI-style bodies for unknown paths and wrong methods."""
from __future__ import annotations

import httpx


def _error(r, status):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == status
    return err


def test_a_model_by_id_and_an_unknown_one(server):
    url, _ = server
    card = httpx.get(url + "/v1/models/tiny").json()
    assert card["id"] == "tiny" and card["object"] == "model" and "root" in card and card["parent"] is None
    listed = httpx.get(url + "/v1/models").json()["data"][0]
    assert {k: v for k, v in listed.items() if k != "created"} == {k: v for k, v in card.items() if k != "created"}
    assert _error(httpx.get(url + "/v1/models/gpt-9"), 404)["type"] == "not_found_error"


def test_tokenize_and_detokenize_round_trip(server, tiny_models):
    url, _ = server
    r = httpx.post(url + "/tokenize", json={"prompt": "def f(x):\n    return x"}).json()
    assert r["tokens"] == tiny_models.tokenizer.encode("def f(x):\n    return x") and r["count"] == len(r["tokens"])
    bare = httpx.post(url + "/tokenize", json={"prompt": "abc", "add_special_tokens": False}).json()["tokens"]
    assert bare == tiny_models.tokenizer.encode("abc", add_special_tokens=False)
    assert httpx.post(url + "/detokenize", json={"tokens": bare}).json()["prompt"] == "abc"
    _error(httpx.post(url + "/detokenize", json={"tokens": [10 ** 6]}), 400)
    _error(httpx.post(url + "/tokenize", json={"prompt": 5}), 400)


def test_version_and_routing_errors(server):
    url, _ = server
    assert httpx.get(url + "/version").json()["version"]
    assert _error(httpx.get(url + "/v1/nothing"), 404)["type"] == "not_found_error"
    _error(httpx.get(url + "/v1/completions"), 405)
