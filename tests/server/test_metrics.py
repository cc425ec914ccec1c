"""/metrics: vLLM names, counters that agree with per-request usage, latency histograms."""
from __future__ import annotations

import httpx

from liveserver import live_server, wait_idle
from specdec.analysis.endpoint import parse_metrics
from specdec.config import SpecConfig


def test_spec_decode_counters_match_usage(tiny_models):
    with live_server(tiny_models, spec=SpecConfig(method="draft", k=4), model_name="tiny") as (url, app):
        usage = []
        for i, p in enumerate(["def f(x):", "import sys", "for i in range(3):"]):
            r = httpx.post(url + "/v1/completions", json={"prompt": p, "max_tokens": 12, "temperature": 0,
                                                           "ignore_eos": True}, timeout=30)
            usage.append(r.json()["usage"])
        r = httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 5, "ignore_eos": True,
                                                       "speculative": {"method": "none"}}, timeout=30)
        assert r.json()["usage"]["draft_tokens"] == 0
        wait_idle(app)
        text = httpx.get(url + "/metrics").text
        m = parse_metrics(text)
        assert m["vllm:spec_decode_num_draft_tokens"] == sum(u["draft_tokens"] for u in usage) > 0
        assert m["vllm:spec_decode_num_accepted_tokens"] == sum(u["accepted_tokens"] for u in usage)
        per_pos = m["per_pos"]
        assert sum(per_pos.values()) == m["vllm:spec_decode_num_accepted_tokens"]
        assert set(per_pos) <= {0, 1, 2, 3}
        assert m["vllm:spec_decode_num_drafts"] > 0
        assert m["vllm:generation_tokens"] == 3 * 12 + 5
        for name in ("vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds_count"):
            assert m[name] == 4, name
        # one observation per token after each request's first emission (which may hold several)
        assert 0 < m["vllm:inter_token_latency_seconds_count"] <= m["vllm:generation_tokens"] - 4
        assert m["vllm:inter_token_latency_seconds_sum"] > 0
        assert m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
        assert "vllm:spec_decode_num_drafts_total " in text and "# TYPE vllm:spec_decode_num_drafts" in text


def test_request_metrics_carry_the_model_name_and_kv_usage_follows_the_cache(tiny_models):
    import re
    with live_server(tiny_models, spec=SpecConfig(method="draft", k=3), model_name="tiny-m") as (url, app):
        gauge = re.compile(r'^vllm:kv_cache_usage_perc\{model_name="tiny-m"\} (\S+)$', re.M)

        def usage_now() -> float:
            return float(gauge.search(httpx.get(url + "/metrics").text).group(1))

        assert usage_now() == 0.0
        seen = []
        body = {"prompt": "x", "max_tokens": 300, "temperature": 0, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            for i, line in enumerate(r.iter_lines()):
                if i in (5, 60):                 # twice while it runs: the cache grows
                    seen.append(usage_now())
        wait_idle(app)
        assert 0 < seen[0] < seen[1] <= 1, seen
        cache = app.state.worker.engines[("draft", 3, 0)].cache
        assert seen[1] <= 302 / (cache.num_rows * cache.max_len)     # one row's worth at most
        assert usage_now() == 0.0
        text = httpx.get(url + "/metrics").text
        for name in ("vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
                     "vllm:e2e_request_latency_seconds_count", "vllm:num_requests_running",
                     "vllm:num_requests_waiting"):
            assert re.search(rf'^{name}\{{model_name="tiny-m"\}} ', text, re.M), name
