"""An OpenAI-compatible server seen from outside: /v1/models, /v1/completions and /metrics
with vLLM's spec-decode counter names (specdec's own server or vLLM)."""
from __future__ import annotations

import asyncio
import math
import time

import httpx

from ..errors import ConfigError

SPEC_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens")
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def parse_metrics(text: str) -> dict:
    """Prometheus text -> {name: value summed over label sets}; counters lose `_total`;
    per-position acceptance is returned as {"per_pos": {position: value}}."""
    out: dict = {"per_pos": {}}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            series, value = line.rsplit(" ", 1)
            val = float(value)
        except ValueError:
            continue
        name, _, labels = series.partition("{")
        if name.endswith("_created") or name.endswith("_bucket"):
            continue
        if name.endswith("_total"):
            name = name[:-6]
        if name == PER_POS:
            pos = labels.split('position="')[1].split('"')[0] if 'position="' in labels else "0"
            out["per_pos"][int(pos)] = out["per_pos"].get(int(pos), 0.0) + val
            continue
        out[name] = out.get(name, 0.0) + val
    return out


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


class Endpoint:
    """An OpenAI-compatible server under test. Every failure to reach it or to read its answer
    is a ConfigError naming the URL and what failed (one line, exit code 2)."""

    def __init__(self, url: str, api_key: str | None, model: str | None):
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.model = self._served(model)

    def _request(self, method: str, path: str, timeout: float, **kw) -> httpx.Response:
        try:
            return httpx.request(method, self.url + path, headers=self.headers, timeout=timeout, **kw)
        except httpx.HTTPError as e:
            raise ConfigError(f"{self.url}{path}: {type(e).__name__}: {e}") from e

    def _json(self, r: httpx.Response, path: str):
        if r.status_code != 200:
            raise ConfigError(f"{self.url}{path} answered {r.status_code}: {r.text[:200]}")
        try:
            return r.json()
        except ValueError as e:
            raise ConfigError(f"{self.url}{path} did not answer JSON: {r.text[:200]!r}") from e

    def _served(self, model: str | None) -> str:
        """`model` if the server serves it, else its first model; ConfigError otherwise."""
        body = self._json(self._request("GET", "/v1/models", 30), "/v1/models")
        ids = [m.get("id") for m in body.get("data", []) if isinstance(m, dict)] if isinstance(body, dict) else []
        if not ids:
            raise ConfigError(f"{self.url}/v1/models lists no model: {str(body)[:200]}")
        if model is not None and model not in ids:
            raise ConfigError(f"{self.url} serves {', '.join(map(str, ids))}, not {model!r}")
        return model or ids[0]

    def metrics(self) -> dict:
        r = self._request("GET", "/metrics", 30)
        if r.status_code != 200:
            raise ConfigError(f"{self.url}/metrics answered {r.status_code}: {r.text[:200]}")
        return parse_metrics(r.text)

    def body(self, prompt: str, max_tokens: int, spec: dict | None) -> dict:
        b = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
             "ignore_eos": True}
        return {**b, "speculative": spec} if spec is not None else b

    def supports_speculative(self) -> bool:
        r = self._request("POST", "/v1/completions", 120, json=self.body("x", 1, {"method": "none"}))
        return r.status_code == 200 and "draft_tokens" in (self._json(r, "/v1/completions").get("usage") or {})

    async def run(self, prompts: list[str], max_tokens: int, spec: dict | None, concurrency: int) -> dict:
        """Send every prompt (at most `concurrency` at once); timing and /metrics deltas."""
        sem = asyncio.Semaphore(concurrency)
        lat: list[float] = []
        tokens = 0
        async with httpx.AsyncClient(headers=self.headers, timeout=600) as c:
            async def one(p):
                nonlocal tokens
                async with sem:
                    t0 = time.perf_counter()
                    try:
                        r = await c.post(self.url + "/v1/completions", json=self.body(p, max_tokens, spec))
                    except httpx.HTTPError as e:
                        raise ConfigError(f"{self.url}/v1/completions: {type(e).__name__}: {e}") from e
                    lat.append(time.perf_counter() - t0)
                    usage = self._json(r, "/v1/completions").get("usage") or {}
                    if not isinstance(usage.get("completion_tokens"), int):
                        raise ConfigError(f"{self.url}/v1/completions answered without usage.completion_tokens")
                    tokens += usage["completion_tokens"]
            before = await asyncio.to_thread(self.metrics)
            t0 = time.perf_counter()
            await asyncio.gather(*(one(p) for p in prompts))
            wall = time.perf_counter() - t0
            after = await asyncio.to_thread(self.metrics)
        d = {n: after.get(n, 0.0) - before.get(n, 0.0) for n in SPEC_COUNTERS}
        drafts, dtok, acc = (d[n] for n in SPEC_COUNTERS)
        per_pos = {p: after["per_pos"].get(p, 0.0) - before["per_pos"].get(p, 0.0) for p in after["per_pos"]}
        return {"requests": len(prompts), "completion_tokens": tokens, "wall_s": wall,
                "tokens_per_s": tokens / wall if wall > 0 else 0.0,
                "latency_p50_s": percentile(lat, 50), "latency_p90_s": percentile(lat, 90),
                "latency_p99_s": percentile(lat, 99),
                "drafts": drafts, "draft_tokens": dtok, "accepted_tokens": acc,
                "acceptance_rate": acc / dtok if dtok else 0.0,
                "mean_acceptance_length": 1 + acc / drafts if drafts else 1.0,
                "mean_draft_length": dtok / drafts if drafts else 0.0,
                "per_position_acceptance": [per_pos[p] / drafts for p in sorted(per_pos)] if drafts else []}
