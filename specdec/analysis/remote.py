"""`specdec analyze --endpoint URL`: measure speculation on a running OpenAI-compatible server.

Works with specdec's own server or vLLM: it needs /v1/completions and /metrics with vLLM's
spec-decode counter names. If the server accepts specdec's per-request `speculative`
extension (detected by `usage.draft_tokens` in a probe), every workload runs with
speculation off, at each k, and with k="auto" on the same server; otherwise it runs on
--endpoint (speculation on) and, given --endpoint-baseline, on that second server (off).
Acceptance comes from /metrics deltas, so nothing else should use the server meanwhile.

    specdec analyze --endpoint http://127.0.0.1:8000 --workload code --k 2,4
    specdec analyze --endpoint http://vllm:8000 --endpoint-baseline http://vllm-plain:8000 --emit-vllm-config
    specdec analyze --endpoint http://127.0.0.1:8000 --check-config out/vllm_config.json

--emit-vllm-config sweeps --concurrency levels and writes vLLM's per-batch-size table;
--check-config replays a table against a server that runs it (sweep.py, schedule.py).

API for commands/analyze.py: `add_remote_args(parser)` adds --endpoint, --endpoint-baseline,
--api-key, --served-model, --concurrency, --remote-prompts, --tokenizer, --emit-vllm-config,
--budget-s, --check-config, --vllm-draft-model; `run_remote(args) -> int` also reads
analyze's own --workload, --k, --method, --max-new-tokens, --prompt-tokens, --quick, --out,
--ngram-min/--ngram-max when present. Without --endpoint, run_remote serves the local models (--target/--draft) on
loopback and measures that. `emit_vllm_config(...)` builds vLLM's `speculative_config`.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import sys
from pathlib import Path

from ..errors import ConfigError
from .endpoint import Endpoint
from .workloads import WORKLOADS, load_workload


def add_remote_args(p) -> None:
    g = p.add_argument_group("remote server (OpenAI-compatible, vLLM metric names)")
    g.add_argument("--endpoint", help="base URL of the server to measure, e.g. http://127.0.0.1:8000")
    g.add_argument("--endpoint-baseline", help="a second server without speculation, for servers "
                                               "that cannot switch speculation per request")
    g.add_argument("--api-key", help="bearer token for the endpoint(s)")
    g.add_argument("--served-model", help="model id to request (default: the first of /v1/models)")
    g.add_argument("--concurrency", type=_levels,
                   help="requests in flight at once; with --emit-vllm-config a list of levels to "
                        "sweep, e.g. 1,4,16 (default 1; 1,4,16 with --emit-vllm-config)")
    g.add_argument("--remote-prompts", type=int, help="prompts per workload (default 8; 4 with --quick)")
    g.add_argument("--tokenizer", type=Path, help="tokenizer.json used to build workload prompts "
                                                  "(default: the bundled one); prompts are sent as text")
    g.add_argument("--emit-vllm-config", action="store_true",
                   help="sweep the concurrency levels and print vLLM's speculative_config with "
                        "num_speculative_tokens_per_batch_size on stdout (side files in --out)")
    g.add_argument("--budget-s", type=float, help="seconds the --emit-vllm-config sweep may take "
                                                  "(default: measure every planned cell)")
    g.add_argument("--check-config", type=Path, metavar="FILE",
                   help="replay the workload at each row of this emitted config against a server "
                        "running it (without --endpoint: specdec serve --k-table FILE on loopback)")
    g.add_argument("--vllm-draft-model", help="draft model id/path to write into a draft_model config")


def _levels(text: str) -> list[int]:
    try:
        levels = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not levels or levels[0] < 1:
        raise argparse.ArgumentTypeError(f"concurrency levels must be >= 1, got {text!r}")
    return levels


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


def _settings(args) -> dict:
    quick = bool(getattr(args, "quick", False))
    wl = getattr(args, "workload", None) or "all"
    ks = getattr(args, "k", None)
    ks = [ks] if isinstance(ks, int) else ks
    emit = getattr(args, "emit_vllm_config", False)
    levels = getattr(args, "concurrency", None) or ([1, 4, 16] if emit else [1])
    # the sweep's k: vLLM's own offline sweep uses 1, 3, 5
    default_ks = [1, 3, 5] if emit else [3] if quick else [2, 4]
    if isinstance(levels, int):
        levels = [levels]
    return {"workloads": list(WORKLOADS) if wl == "all" else [wl],
            "ks": sorted(set(k for k in (ks or default_ks) if isinstance(k, int) and k > 0)),
            "n": getattr(args, "remote_prompts", None) or (4 if quick else 8),
            "max_tokens": getattr(args, "max_new_tokens", None) or (32 if quick else 64),
            "prompt_tokens": getattr(args, "prompt_tokens", None) or (64 if quick else 128),
            "concurrencies": levels,
            "concurrency": levels[0],
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
    from . import sweep
    s = _settings(args)
    emit, check_path = bool(getattr(args, "emit_vllm_config", False)), getattr(args, "check_config", None)
    if len(s["concurrencies"]) > 1 and not (emit or check_path):
        raise ConfigError("several --concurrency levels are a sweep: add --emit-vllm-config")
    tok = Tokenizer.from_file(getattr(args, "tokenizer", None) or MODELS_DIR / "tokenizer.json")
    texts = {w: [tok.decode(ids) for ids in load_workload(w, tok, n=s["n"], prompt_tokens=s["prompt_tokens"])]
             for w in s["workloads"]}
    key, out = getattr(args, "api_key", None), getattr(args, "out", None)
    method = s["method"] or "draft"
    log = lambda text: print(text, file=sys.stderr)         # noqa: E731
    table = None
    if check_path:
        from ..config import KTable
        table = KTable.read(check_path)
    rows_max = max(s["concurrencies"] if table is None else sweep.check_levels(table))
    with _endpoints(args, key, table, rows_max) as (ep, base):
        if check_path:
            rows = sweep.check(ep, base, texts, s, check_path, log)
        elif emit:
            cells = sweep.sweep(ep, base, texts, s, getattr(args, "budget_s", None), log)
        else:
            results = measure(ep, base, texts, s)
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
    if check_path:
        md = sweep.render_check(rows)
        print(md)
        if out:
            (Path(out) / "check.json").write_text(json.dumps(rows, indent=1) + "\n")
            (Path(out) / "check.md").write_text(md)
        return 0
    if emit:
        draft = getattr(args, "vllm_draft_model", None) or (
            str(getattr(args, "draft", None) or default_draft()) if method == "draft" else None)
        base_cfg = emit_vllm_config(method, 1, getattr(args, "ngram_min", 1) or 1,
                                    getattr(args, "ngram_max", 4) or 4, draft)
        cfg = sweep.write_emit(cells, base_cfg, Path(out) if out else None, None)
        if cfg is None:
            log("speculation is not predicted to pay at any measured concurrency; recommending none")
        print(json.dumps(cfg))
        return 0
    md = report_md(results)
    print(md)
    if out:
        (Path(out) / "remote.json").write_text(json.dumps({"settings": s, "results": results,
                                                           "recommendation": recommend(results, method)},
                                                          indent=2) + "\n")
        (Path(out) / "remote.md").write_text(md)
    return 0


@contextlib.contextmanager
def _endpoints(args, key, table, max_batch: int):
    """(endpoint, baseline or None): --endpoint's, or specdec serving the local models on
    loopback (running `table` as its default k, when checking one)."""
    if getattr(args, "endpoint", None):
        ep = Endpoint(args.endpoint, key, getattr(args, "served_model", None))
        base = Endpoint(args.endpoint_baseline, key, None) if getattr(args, "endpoint_baseline", None) else None
        yield ep, base
        return
    from .local_server import serving
    with serving(args, k=table if table is not None else 4, max_batch=max_batch) as url:
        yield Endpoint(url, None, None), None
