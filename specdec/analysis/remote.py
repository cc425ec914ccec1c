"""`specdec analyze --endpoint URL`: measure speculation on a running OpenAI-compatible server.

Works with specdec's own server or vLLM: it needs /v1/completions and /metrics with vLLM's
spec-decode counter names. If the server accepts specdec's per-request `speculative`
extension (detected by `usage.draft_tokens` in a probe), every workload runs with
speculation off, at each k, and with k="auto" on the same server; otherwise it runs on
--endpoint (speculation on) and, given --endpoint-baseline, on that second server (off).
Acceptance comes from /metrics deltas, so nothing else should use the server meanwhile.

    specdec analyze --endpoint http://127.0.0.1:8000 --workload code --k 2,4
    specdec analyze --endpoint http://vllm:8000 --endpoint-baseline http://vllm-plain:8000 --emit-vllm-config

API for commands/analyze.py: `add_remote_args(parser)` adds --endpoint, --endpoint-baseline,
--api-key, --served-model, --concurrency, --remote-prompts, --tokenizer, --emit-vllm-config,
--vllm-draft-model; `run_remote(args) -> int` also reads analyze's own --workload, --k,
--method, --max-new-tokens, --prompt-tokens, --quick, --out, --ngram-min/--ngram-max when
present. Without --endpoint, run_remote serves the local models (--target/--draft) on
loopback and measures that. `emit_vllm_config(...)` builds vLLM's `speculative_config`.
"""
from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from pathlib import Path

import httpx

from ..errors import ConfigError
from .workloads import WORKLOADS, load_workload

SPEC_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens")
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def add_remote_args(p) -> None:
    g = p.add_argument_group("remote server (OpenAI-compatible, vLLM metric names)")
    g.add_argument("--endpoint", help="base URL of the server to measure, e.g. http://127.0.0.1:8000")
    g.add_argument("--endpoint-baseline", help="a second server without speculation, for servers "
                                               "that cannot switch speculation per request")
    g.add_argument("--api-key", help="bearer token for the endpoint(s)")
    g.add_argument("--served-model", help="model id to request (default: the first of /v1/models)")
    g.add_argument("--concurrency", type=int, default=1, help="requests in flight at once")
    g.add_argument("--remote-prompts", type=int, help="prompts per workload (default 8; 4 with --quick)")
    g.add_argument("--tokenizer", type=Path, help="tokenizer.json used to build workload prompts "
                                                  "(default: the bundled one); prompts are sent as text")
    g.add_argument("--emit-vllm-config", action="store_true",
                   help="print the recommended vLLM speculative_config JSON on stdout")
    g.add_argument("--vllm-draft-model", help="draft model id/path to write into a draft_model config")


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


def emit_vllm_config(method: str, num_speculative_tokens: int, prompt_lookup_min: int = 1,
                     prompt_lookup_max: int = 4, draft_model: str | None = None) -> dict:
    """vLLM's `speculative_config` for a specdec method: draft -> draft_model, ngram -> ngram
    (prompt lookup). Other specdec methods have no vLLM equivalent and raise ConfigError."""
    if not isinstance(num_speculative_tokens, int) or num_speculative_tokens < 1:
        raise ConfigError(f"num_speculative_tokens must be an integer >= 1, got {num_speculative_tokens!r}")
    if method == "draft":
        return {"method": "draft_model", "model": draft_model or "<draft model id or path>",
                "num_speculative_tokens": num_speculative_tokens}
    if method == "ngram":
        if not 1 <= prompt_lookup_min <= prompt_lookup_max:
            raise ConfigError("need 1 <= prompt_lookup_min <= prompt_lookup_max")
        return {"method": "ngram", "num_speculative_tokens": num_speculative_tokens,
                "prompt_lookup_min": prompt_lookup_min, "prompt_lookup_max": prompt_lookup_max}
    raise ConfigError(f"method {method!r} has no vLLM speculative_config equivalent (use draft or ngram)")


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


class Endpoint:
    def __init__(self, url: str, api_key: str | None, model: str | None):
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.model = model or self._first_model()

    def _first_model(self) -> str:
        r = httpx.get(self.url + "/v1/models", headers=self.headers, timeout=30)
        if r.status_code != 200:
            raise ConfigError(f"{self.url}/v1/models answered {r.status_code}: {r.text[:200]}")
        return r.json()["data"][0]["id"]

    def metrics(self) -> dict:
        return parse_metrics(httpx.get(self.url + "/metrics", headers=self.headers, timeout=30).text)

    def body(self, prompt: str, max_tokens: int, spec: dict | None) -> dict:
        b = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
             "ignore_eos": True}
        return {**b, "speculative": spec} if spec is not None else b

    def supports_speculative(self) -> bool:
        r = httpx.post(self.url + "/v1/completions", headers=self.headers, timeout=120,
                       json=self.body("x", 1, {"method": "none"}))
        return r.status_code == 200 and "draft_tokens" in (r.json().get("usage") or {})

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
                    r = await c.post(self.url + "/v1/completions", json=self.body(p, max_tokens, spec))
                    if r.status_code != 200:
                        raise ConfigError(f"{self.url} answered {r.status_code}: {r.text[:300]}")
                    lat.append(time.perf_counter() - t0)
                    tokens += r.json()["usage"]["completion_tokens"]
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


def _settings(args) -> dict:
    quick = bool(getattr(args, "quick", False))
    wl = getattr(args, "workload", None) or "all"
    ks = getattr(args, "k", None)
    ks = [ks] if isinstance(ks, int) else ks
    return {"workloads": list(WORKLOADS) if wl == "all" else [wl],
            "ks": sorted(set(k for k in (ks or ([3] if quick else [2, 4])) if isinstance(k, int) and k > 0)),
            "n": getattr(args, "remote_prompts", None) or (4 if quick else 8),
            "max_tokens": getattr(args, "max_new_tokens", None) or (32 if quick else 64),
            "prompt_tokens": getattr(args, "prompt_tokens", None) or (64 if quick else 128),
            "concurrency": max(1, getattr(args, "concurrency", 1) or 1),
            "method": getattr(args, "method", None)}


def measure(ep: Endpoint, baseline: Endpoint | None, texts: dict[str, list[str]], s: dict) -> dict:
    """{mode: {workload: result}} for modes off, k=<each>, auto (one server) or on/off (two)."""
    if ep.supports_speculative():
        spec = {"method": s["method"]} if s["method"] else {}
        modes = {"off": (ep, {"method": "none"}), **{f"k={k}": (ep, {**spec, "k": k}) for k in s["ks"]},
                 "auto": (ep, {**spec, "k": "auto"})}
    else:
        modes = {"on": (ep, None), **({"off": (baseline, None)} if baseline else {})}
    out: dict = {}
    for mode, (e, spec) in modes.items():
        try:   # warm up (a per-request speculative config may build an engine on first use)
            asyncio.run(e.run(["def"], 2, spec, 1))
        except ConfigError as err:
            out[mode] = {"error": str(err)}
            continue
        out[mode] = {w: asyncio.run(e.run(ps, s["max_tokens"], spec, s["concurrency"])) for w, ps in texts.items()}
    return out


def recommend(results: dict, method: str) -> dict | None:
    """The mode with the best geometric-mean speed-up over `off`; None if nothing beats off."""
    off = results.get("off")
    best, best_gain = None, 1.0
    for mode, res in results.items():
        if mode == "off" or "error" in res or not off or "error" in off:
            continue
        gains = [res[w]["tokens_per_s"] / off[w]["tokens_per_s"] for w in res if off[w]["tokens_per_s"] > 0]
        g = math.exp(sum(map(math.log, gains)) / len(gains)) if gains and all(x > 0 for x in gains) else 0
        if g > best_gain:
            best, best_gain = mode, g
    if best is None:
        return None
    drafts = sum(r["drafts"] for r in results[best].values())
    dtok = sum(r["draft_tokens"] for r in results[best].values())
    k = int(best[2:]) if best.startswith("k=") else max(1, round(dtok / drafts)) if drafts else None
    return {"mode": best, "speedup": best_gain, "method": method, "k": k}


def report_md(results: dict) -> str:
    lines = ["| mode | workload | tokens/s | p50 s | p99 s | accept rate | mean acc. len | speed-up |",
             "|---|---|---|---|---|---|---|---|"]
    off = results.get("off", {})
    for mode, res in results.items():
        if "error" in res:
            lines.append(f"| {mode} | (refused: {res['error'][:80]}) | | | | | | |")
            continue
        for w, r in res.items():
            base = off.get(w, {}).get("tokens_per_s") if "error" not in off else None
            sp = f"{r['tokens_per_s'] / base:.2f}x" if base else "-"
            lines.append(f"| {mode} | {w} | {r['tokens_per_s']:.1f} | {r['latency_p50_s']:.3f} | "
                         f"{r['latency_p99_s']:.3f} | {r['acceptance_rate']:.2f} | "
                         f"{r['mean_acceptance_length']:.2f} | {sp} |")
    return "\n".join(lines) + "\n"


def run_remote(args) -> int:
    from ..defaults import MODELS_DIR, default_draft
    from ..models.tokenizer import Tokenizer
    s = _settings(args)
    tok = Tokenizer.from_file(getattr(args, "tokenizer", None) or MODELS_DIR / "tokenizer.json")
    texts = {w: [tok.decode(ids) for ids in load_workload(w, tok, n=s["n"], prompt_tokens=s["prompt_tokens"])]
             for w in s["workloads"]}
    key = getattr(args, "api_key", None)
    if getattr(args, "endpoint", None):
        ep = Endpoint(args.endpoint, key, getattr(args, "served_model", None))
        base = Endpoint(args.endpoint_baseline, key, None) if getattr(args, "endpoint_baseline", None) else None
        results = measure(ep, base, texts, s)
    else:
        from .local_server import serving
        with serving(args) as url:
            results = measure(Endpoint(url, None, None), None, texts, s)
    method = s["method"] or "draft"
    rec = recommend(results, method)
    md = report_md(results)
    emit = bool(getattr(args, "emit_vllm_config", False))
    print(md, file=sys.stderr if emit else sys.stdout)
    out = getattr(args, "out", None)
    payload = {"settings": s, "results": results, "recommendation": rec}
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "remote.json").write_text(json.dumps(payload, indent=2) + "\n")
        (Path(out) / "remote.md").write_text(md)
    if emit:
        if rec is None or rec["k"] is None:
            print("no speculative configuration beat plain decoding; recommending none", file=sys.stderr)
            print("null")
        else:
            draft = getattr(args, "vllm_draft_model", None) or (
                str(getattr(args, "draft", None) or default_draft()) if method == "draft" else None)
            cfg = emit_vllm_config(method, rec["k"], getattr(args, "ngram_min", 1) or 1,
                                   getattr(args, "ngram_max", 4) or 4, draft)
            print(json.dumps(cfg))
    return 0
