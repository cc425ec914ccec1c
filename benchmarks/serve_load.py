"""Load generator for `specdec serve`: throughput and latency at several concurrencies.

    python benchmarks/serve_load.py --out results/serve            # full run (bundled models)
    python benchmarks/serve_load.py --out /tmp/serve --quick       # smoke run (~1 min)
    python benchmarks/serve_load.py --endpoint http://127.0.0.1:8000 --out /tmp/remote

Without --endpoint it serves --target/--draft (default: the bundled pair) on loopback in this
process. For each mode (off: plain decoding; on: draft model, fixed --k; auto: adaptive k),
chosen per request with the `speculative` extension, and each concurrency c, it sends a
bounded number of streaming greedy requests (--requests, default max(8, 2c)), at most c in
flight, each generating exactly --max-tokens tokens (ignore_eos). It records end-to-end
latency, time to first token and the server's per-request acceptance (usage).
Writes <out>/serve_load.json and <out>/serve_load.md. A mode the server refuses is reported
as an error, not skipped silently.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

from specdec.analysis.endpoint import percentile
from specdec.analysis.workloads import WORKLOADS, load_workload
from specdec.defaults import MODELS_DIR
from specdec.models.tokenizer import Tokenizer


def modes(k: int) -> dict[str, dict]:
    return {"off": {"method": "none"}, "on": {"method": "draft", "k": k}, "auto": {"method": "draft", "k": "auto"}}


async def one(c: httpx.AsyncClient, url: str, body: dict) -> dict:
    t0 = time.perf_counter()
    ttft, usage = None, None
    async with c.stream("POST", url + "/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread()).decode()[:300]}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            obj = json.loads(line[6:])
            if "error" in obj:
                raise RuntimeError(obj["error"]["message"])
            if ttft is None and obj.get("choices") and obj["choices"][0].get("text"):
                ttft = time.perf_counter() - t0
            if obj.get("usage"):
                usage = obj["usage"]
    return {"latency": time.perf_counter() - t0, "ttft": ttft, "usage": usage}


async def level(url: str, prompts: list[str], spec: dict, conc: int, n: int, max_tokens: int) -> dict:
    sem = asyncio.Semaphore(conc)
    body = lambda p: {"prompt": p, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,  # noqa: E731
                      "stream": True, "stream_options": {"include_usage": True}, "speculative": spec}
    async with httpx.AsyncClient(timeout=600) as c:
        await one(c, url, body(prompts[0]))                      # warm-up (builds the mode's engine)

        async def bounded(i):
            async with sem:
                return await one(c, url, body(prompts[i % len(prompts)]))
        t0 = time.perf_counter()
        rs = await asyncio.gather(*(bounded(i) for i in range(n)))
        wall = time.perf_counter() - t0
    toks = sum(r["usage"]["completion_tokens"] for r in rs)
    drafts = [r["usage"] for r in rs if r["usage"]["draft_tokens"]]
    lat, ttft = [r["latency"] for r in rs], [r["ttft"] for r in rs if r["ttft"] is not None]
    return {"requests": n, "completion_tokens": toks, "wall_s": wall, "tokens_per_s": toks / wall,
            "requests_per_s": n / wall, "latency_p50_s": percentile(lat, 50), "latency_p99_s": percentile(lat, 99),
            "ttft_p50_s": percentile(ttft, 50), "ttft_p99_s": percentile(ttft, 99),
            "mean_acceptance_length": statistics.mean(u["mean_acceptance_length"] for u in drafts) if drafts else 1.0,
            "acceptance_rate": (sum(u["accepted_tokens"] for u in drafts) / sum(u["draft_tokens"] for u in drafts))
            if drafts else 0.0}


def run(url: str, args) -> dict:
    tok = Tokenizer.from_file(MODELS_DIR / "tokenizer.json")
    prompts = [tok.decode(p) for p in load_workload(args.workload, tok, n=16, prompt_tokens=args.prompt_tokens)]
    out: dict = {}
    for mode in args.modes:
        out[mode] = {}
        for conc in args.concurrency:
            n = args.requests or max(8, 2 * conc)
            try:
                res = asyncio.run(level(url, prompts, modes(args.k)[mode], conc, n, args.max_tokens))
            except (RuntimeError, httpx.HTTPError) as e:
                res = {"error": str(e)}
            out[mode][str(conc)] = res
            print(f"{mode:5s} c={conc:3d} " + (f"{res['tokens_per_s']:8.1f} tok/s  p50 {res['latency_p50_s']:.2f}s  "
                                               f"p99 {res['latency_p99_s']:.2f}s" if "error" not in res
                                               else f"error: {res['error'][:100]}"), file=sys.stderr)
    return out


def markdown(results: dict, settings: dict) -> str:
    lines = [f"Settings: {json.dumps(settings)}", "",
             "| mode | concurrency | tokens/s | req/s | p50 latency s | p99 latency s | p50 TTFT s | "
             "accept rate | mean acc. len | vs off |", "|---|---|---|---|---|---|---|---|---|---|"]
    for mode, levels in results.items():
        for conc, r in levels.items():
            if "error" in r:
                lines.append(f"| {mode} | {conc} | error: {r['error'][:80]} | | | | | | | |")
                continue
            base = results.get("off", {}).get(conc, {}).get("tokens_per_s")
            lines.append(f"| {mode} | {conc} | {r['tokens_per_s']:.1f} | {r['requests_per_s']:.2f} | "
                         f"{r['latency_p50_s']:.3f} | {r['latency_p99_s']:.3f} | {r['ttft_p50_s']:.3f} | "
                         f"{r['acceptance_rate']:.2f} | {r['mean_acceptance_length']:.2f} | "
                         + (f"{r['tokens_per_s'] / base:.2f}x |" if base else "- |"))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", help="measure this running server instead of starting one")
    p.add_argument("--target", type=Path)
    p.add_argument("--draft", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--quick", action="store_true", help="smoke run: concurrency 1,4; 4 short requests")
    p.add_argument("--concurrency", default="1,4,16,32")
    p.add_argument("--modes", default="off,on,auto")
    p.add_argument("--k", type=int, default=4, help="draft length of mode 'on'")
    p.add_argument("--requests", type=int, help="requests per level (default max(8, 2c))")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--workload", choices=WORKLOADS, default="code")
    args = p.parse_args(argv)
    if args.quick:
        args.concurrency, args.requests, args.max_tokens, args.prompt_tokens = "1,4", 4, 16, 32
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.modes = [m for m in args.modes.split(",") if m]
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    if args.endpoint:
        results = run(args.endpoint.rstrip("/"), args)
    else:
        from specdec.analysis.local_server import serving
        with serving(argparse.Namespace(target=args.target, draft=args.draft, method="draft")) as url:
            results = run(url, args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "serve_load.json").write_text(json.dumps({"settings": settings, "results": results}, indent=2) + "\n")
    md = markdown(results, settings)
    (args.out / "serve_load.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
