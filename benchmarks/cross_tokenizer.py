"""A draft with another tokenizer against plain decoding, acceptance and speed-up side by side.

    python benchmarks/cross_tokenizer.py --target SmolLM2-135M-Instruct.Q4_1.gguf \
        [--draft specdec/bundled/draft] --out benchmarks/results/cross-tokenizer-DATE-zen4 \
        [--ks 2,3,4,auto] [--n 4] [--new-tokens 128] [--repeats 3] [--pairs forward,reverse]

Held-out code prompts (specdec.analysis.workloads, `code`, in the target's own tokens), batch 1,
greedy and T = 1. Each repeat runs plain and every k in alternating order with a fresh engine;
figures are medians over repeats (the speed-up: of per-repeat ratios to that repeat's plain
run). Greedy rows must equal plain token for token. It also records what a round is made of:
the target's forward at 1 and k + 1 positions, the draft's step, and the proposer's host work
per draft token (catch-up and re-tokenization), so the speed-up can be read from its parts.
`--pairs reverse` runs the pair the other way round (the bundled target, the named target as
draft), greedy only. `--like-draft DIR` adds a pair in the same run: the named target with a draft
that shares its tokenizer (`specdec train draft --like`), the comparison issue 64 asks for.
Writes cross_tokenizer.json and cross_tokenizer.md to --out.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from specdec.analysis.workloads import load_workload
from specdec.build import load_models, make_engine
from specdec.commands.common import _k
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.costs.cache import _cpu_name
from specdec.costs.profiling import time_forwards
from specdec.defaults import bundled_dir

SEED = 1234          # request i is seeded SEED + i, so every configuration samples alike
L_TIMED = 256        # cached tokens when timing single forwards: a 128-token prompt half-way through


def run(models, prompts, k, temperature, new_tokens, greedy="retokenize"):
    """-> (outputs, seconds, accepted, drafted, rounds, host seconds per draft token or None).
    greedy: how argmax rows draft across the vocabularies (cross_vocab.GREEDY_MODES)."""
    spec = SpecConfig(method="draft" if k != 0 else "none", k=k, k_max=8, options={"cross_greedy": greedy})
    eng = make_engine(models, spec, EngineConfig(max_batch=1, max_model_len=1024))
    params = [SamplingParams(temperature=temperature, seed=SEED + i, max_new_tokens=new_tokens, ignore_eos=True)
              for i in range(len(prompts))]
    t0 = time.perf_counter()
    outs = [s.output_ids for p, sp in zip(prompts, params) for s in eng.generate([p], [sp])]
    dt = time.perf_counter() - t0
    m = eng.metrics
    host = getattr(eng.proposer, "host_seconds_per_token", None)
    return outs, dt, m.num_accepted_tokens, m.num_draft_tokens, m.num_drafts, host


def measure_pair(models, prompts, ks, temperatures, new_tokens, repeats, shared_ks=()):
    """{(T, k, greedy mode): {tok_s, speedup, acceptance, mean_acc_len, identical, host_us}} over
    the repeats; `shared_ks`: the k that greedy also runs with the intersection's argmax."""
    configs = [(T, k, "retokenize") for T in temperatures for k in [0, *ks]]
    configs += [(0.0, k, "shared") for k in shared_ks if 0.0 in temperatures]
    for T, k, mode in configs:                             # warm-up: native builds, priors, caches
        run(models, prompts[:1], k, T, 8, mode)
    raw = {c: [] for c in configs}
    for rep in range(repeats):
        for c in (configs if rep % 2 == 0 else configs[::-1]):
            raw[c].append(run(models, prompts, c[1], c[0], new_tokens, c[2]))
            print(f"  repeat {rep} T={c[0]} k={c[1]} {c[2]}: {raw[c][-1][1]:.1f} s", file=sys.stderr, flush=True)
    rows = {}
    tokens = len(prompts) * new_tokens
    for T, k, mode in configs:
        runs, plain = raw[(T, k, mode)], raw[(T, 0, "retokenize")]
        rows[(T, k, mode)] = {
            "tok_s": statistics.median(tokens / r[1] for r in runs),
            "speedup": statistics.median(p[1] / r[1] for r, p in zip(runs, plain)),
            "acceptance": statistics.median(r[2] / r[3] if r[3] else 0.0 for r in runs),
            "mean_acc_len": statistics.median(1 + r[2] / r[4] if r[4] else 1.0 for r in runs),
            "identical": all(r[0] == p[0] for r, p in zip(runs, plain)) if T == 0 else None,
            "host_us_per_draft_token": (statistics.median(r[5] for r in runs) * 1e6 if runs[0][5] is not None
                                        else None)}
    return rows


def forward_costs(models, k_max=4) -> dict:
    """Seconds of the target's forward at 1..k_max+1 positions and of one draft step, batch 1."""
    t = time_forwards(models.target, 1, L_TIMED, list(range(1, k_max + 2)))
    d = time_forwards(models.draft, 1, L_TIMED, [1])
    return {"target_ms": {q: s * 1e3 for q, s in t.items()}, "draft_step_ms": d[1] * 1e3}


def table(name, rows, costs) -> list[str]:
    out = [f"### {name}", "", f"target forward ms by positions: "
           + ", ".join(f"q={q}: {v:.2f}" for q, v in costs["target_ms"].items())
           + f"; draft step: {costs['draft_step_ms']:.2f} ms", "",
           "| sampling | k | greedy drafts | acceptance | mean acc. length | tokens/s | speed-up | "
           "host us / draft token | = plain |",
           "|---|---|---|---:|---:|---:|---:|---:|:-:|"]
    for (T, k, mode), r in rows.items():
        host = f"{r['host_us_per_draft_token']:.0f}" if r["host_us_per_draft_token"] is not None else "-"
        same = "" if r["identical"] is None else ("yes" if r["identical"] else "NO")
        mode = "-" if T != 0 or k == 0 else mode
        sampling = "greedy" if T == 0 else f"T = {T:g}"
        out.append(f"| {sampling} | {k if k != 0 else 'plain'} | {mode} | {r['acceptance']:.2f} | "
                   f"{r['mean_acc_len']:.2f} | {r['tok_s']:.1f} | {r['speedup']:.2f}x | {host} | {same} |")
    return out + [""]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", default=str(bundled_dir() / "draft"))
    ap.add_argument("--ks", default="2,3,4,auto")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shared-ks", default="3", help="k that greedy also runs drafting over the intersection")
    ap.add_argument("--pairs", default="forward", help="forward (the named target), reverse (it as the draft)")
    ap.add_argument("--like-draft", help="a draft with the target's own tokenizer, run as a third pair, 'like'")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    ks = [_k(k) for k in a.ks.split(",")]
    temperatures = [float(t) for t in a.temperatures.split(",")]
    chosen = a.pairs.split(",")
    pairs = [p for p in [("forward", a.target, a.draft, temperatures),
                         ("reverse", str(bundled_dir() / "target"), a.target, [0.0])] if p[0] in chosen]
    if a.like_draft:
        pairs.append(("like", a.target, a.like_draft, temperatures))
    result = {"command": " ".join(["python", "benchmarks/cross_tokenizer.py", *(argv or sys.argv[1:])]),
              "cpu": _cpu_name(), "machine": platform.machine(), "torch": torch.__version__, "threads": a.threads,
              "n": a.n, "new_tokens": a.new_tokens, "repeats": a.repeats, "pairs": {}}
    md = [f"# Cross-tokenizer draft, {time.strftime('%Y-%m-%d', time.gmtime())}", "",
          f"`{result['command']}`", "", f"{result['cpu']}, torch {torch.__version__}, {a.threads} threads; "
          f"held-out code, {a.n} prompts x {a.new_tokens} new tokens, batch 1, medians of {a.repeats} repeats.", ""]
    for name, target, draft, temps in pairs:
        models = load_models(target, draft, threads=a.threads)
        vmap = getattr(models.draft, "vocab_map", None)               # None: the same tokenizer
        shared = len(vmap.shared_draft) if vmap else models.target.config.vocab_size
        share = vmap.share if vmap else 1.0
        prompts = load_workload("code", models.tokenizer, n=a.n)
        print(f"{name}: shared {shared} tokens ({share:.1%})", file=sys.stderr, flush=True)
        shared_ks = [_k(k) for k in a.shared_ks.split(",") if k] if name == "forward" else []
        rows = measure_pair(models, prompts, ks, temps, a.new_tokens, a.repeats, shared_ks)
        costs = forward_costs(models)
        result["pairs"][name] = {"target": target, "draft": draft, "shared": shared,
                                 "share": share, "costs": costs,
                                 "rows": [{"temperature": T, "k": k, "greedy": mode, **r}
                                          for (T, k, mode), r in rows.items()]}
        md += table(f"{name}: target {Path(target).name}, draft {Path(draft).name} "
                    f"(shared {shared} tokens, {share:.1%} of the target's)", rows, costs)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cross_tokenizer.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "cross_tokenizer.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
