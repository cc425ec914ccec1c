"""Prometheus metrics under vLLM's names, in a registry of their own (one per app).

Counters (exposed with prometheus_client's `_total` suffix, exactly as vLLM exposes them):
  vllm:spec_decode_num_drafts, vllm:spec_decode_num_draft_tokens,
  vllm:spec_decode_num_accepted_tokens, vllm:spec_decode_num_accepted_tokens_per_pos{position},
  vllm:prompt_tokens, vllm:generation_tokens, vllm:request_success{finished_reason}
Histograms: vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds,
  vllm:e2e_request_latency_seconds
Gauges: vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc (the
  fraction of the target caches' rows x positions that hold tokens, read on each scrape)
The histograms and gauges carry vLLM's `model_name` label; the counters carry none.

The engine thread feeds counters from EngineMetrics deltas after each step, so the
spec-decode counters keep vLLM's definitions (a draft = one round with >= 1 proposed token
for one request).
"""
from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..engine.metrics import EngineMetrics

_LAT = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
        2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_E2E = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 120.0, 240.0, 600.0)


class ServerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None, model_name: str = "specdec"):
        self.registry = r = registry or CollectorRegistry()
        self.num_drafts = Counter("vllm:spec_decode_num_drafts", "Speculative rounds with >= 1 draft token",
                                  registry=r)
        self.num_draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Draft tokens proposed",
                                        registry=r)
        self.num_accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted",
                                    registry=r)
        self.accepted_per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                        "Accepted draft tokens by position", ["position"], registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens processed", registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "Tokens generated", registry=r)
        self.request_success = Counter("vllm:request_success", "Finished requests", ["finished_reason"],
                                       registry=r)
        # the request metrics carry vLLM's `model_name` label (the served name)
        label = dict(labelnames=["model_name"], registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token", buckets=_LAT,
                              **label).labels(model_name)
        self.itl = Histogram("vllm:inter_token_latency_seconds",
                             "Gap between emissions / tokens emitted, observed once per token",
                             buckets=_LAT, **label).labels(model_name)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency",
                             buckets=_E2E, **label).labels(model_name)
        self.running = Gauge("vllm:num_requests_running", "Requests in a running batch", **label).labels(model_name)
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests queued for a batch", **label).labels(model_name)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "Fraction of the KV cache's rows x positions in use "
                              "(1 = full), over every engine", **label).labels(model_name)

    def bind_gauges(self, running: Callable[[], float], waiting: Callable[[], float],
                    kv_usage: Callable[[], float]) -> None:
        self.running.set_function(running)
        self.waiting.set_function(waiting)
        self.kv_usage.set_function(kv_usage)

    def add_engine_delta(self, now: EngineMetrics, before: dict) -> dict:
        """Increment counters by what `now` gained since the snapshot `before`; return the
        new snapshot (a plain dict, so the engine's object is never shared across threads)."""
        snap = {"drafts": now.num_drafts, "draft_tokens": now.num_draft_tokens,
                "accepted": now.num_accepted_tokens, "per_pos": list(now.accepted_per_pos),
                "generated": now.generated_tokens}
        self.num_drafts.inc(snap["drafts"] - before.get("drafts", 0))
        self.num_draft_tokens.inc(snap["draft_tokens"] - before.get("draft_tokens", 0))
        self.num_accepted.inc(snap["accepted"] - before.get("accepted", 0))
        self.generation_tokens.inc(snap["generated"] - before.get("generated", 0))
        old = before.get("per_pos", [])
        for pos, val in enumerate(snap["per_pos"]):
            d = val - (old[pos] if pos < len(old) else 0)
            if d:
                self.accepted_per_pos.labels(position=str(pos)).inc(d)
        return snap

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
