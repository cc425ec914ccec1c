"""Every proposer on every workload, side by side with plain decoding, in one run.

    python benchmarks/proposers.py --out results/proposers [--quick] [--k 4] [--repeats 3]

For each workload (code, prose, grounded, random; specdec.analysis.workloads), each
sampling mode (greedy, and with `--temperatures` each temperature under each of
`--couplings`: standard rejection sampling, or the drafter-invariant coupling) and each
method (none = plain, draft, ngram, suffix, layerskip, eagle, auto; a method may carry its own k as
`draft@6`, `tree16@4` is the draft model's token tree of 16 nodes and depth 4, and
`auto:draft+eagle+none` is auto over those arms instead of its default ones) it decodes the same prompts
with the bundled models and records acceptance rate, mean acceptance length, tokens/s
(output tokens / wall time of the whole generate call, prefill included), the speed-up
over plain and the repetition fraction of the output (specdec/repetition.py). Greedy and
invariant rows must equal plain token for token; standard sampled rows equal it only in
distribution. After one untimed warm-up per method, methods run in alternating order per repeat (forward, then
reversed) with a fresh engine each time; figures are medians over repeats, the speed-up
is the median of per-repeat ratios to that repeat's plain run. torch threads are set
explicitly (--threads, default 2). Writes proposers.json and proposers.md to --out.
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

from specdec.repetition import FLAG, NGRAM, mean_repetition
from specdec.analysis.workloads import WORKLOADS, load_workload
from specdec.costs.cache import _cpu_name
from specdec.commands.common import _k
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.defaults import default_draft, default_head, default_target
from specdec.build import Models, load_models, make_engine

METHODS = ("none", "draft", "ngram", "suffix", "layerskip", "eagle", "auto")
SEED = 1234        # request i is seeded SEED + i, so every method and repeat samples alike


def parse_method(label: str, k):
    """'draft' -> (draft, k, 0); 'draft@6' -> (draft, 6, 0); 'tree16@4' -> (draft, 4, 16);
    'treeauto@4' -> (draft, 4, "auto"); 'suffixtree16@4' -> (suffix, 4, 16): another
    proposer's trees; 'auto:draft+none' -> (auto, k, 0) (its arms: `arms_of`)."""
    name, _, own_k = label.partition("@")
    name = name.partition(":")[0]
    k = _k(own_k) if own_k else k
    if "tree" in name:
        method, _, size = name.partition("tree")
        return method or "draft", k, "auto" if size == "auto" else int(size)
    return name, k, 0


def arms_of(label: str) -> dict:
    """'auto:draft+eagle+none' -> the options naming auto's arms; {} for any other label."""
    arms = label.partition("@")[0].partition(":")[2]
    return {"auto_arms": ",".join(arms.split("+"))} if arms else {}


def run_once(models, label: str, k, prompts, new_tokens: int, options: dict, mode=("greedy", 0.0, "standard"),
             batch: int = 1) -> dict:
    method, k, tree = parse_method(label, k)
    spec = SpecConfig(method=method, k=0 if method == "none" else k, options={**options, **arms_of(label)}, tree=tree)
    longest = max(len(p) for p in prompts) + new_tokens + 1
    cfg = EngineConfig(max_batch=batch, max_model_len=min(longest, models.target.config.max_position_embeddings))
    draft = models.draft if method in ("draft", "auto") else None
    head = models.head if method in ("eagle", "mtp", "auto") else None
    eng = make_engine(Models(models.target, models.tokenizer, draft, head=head), spec, cfg)
    _, temperature, coupling = mode
    params = [SamplingParams(max_new_tokens=new_tokens, ignore_eos=True, temperature=temperature,
                             seed=SEED + i, coupling=coupling) for i in range(len(prompts))]
    t = time.perf_counter()
    seqs = eng.generate(prompts, params)
    wall = time.perf_counter() - t
    m = eng.metrics
    out = {"tokens": sum(s.num_output for s in seqs), "wall_s": wall,
           "tokens_per_s": sum(s.num_output for s in seqs) / wall,
           "acceptance_rate": m.acceptance_rate, "mean_acceptance_length": m.mean_acceptance_length,
           "repetition": mean_repetition([s.output_ids for s in seqs]), "outputs": [s.output_ids for s in seqs],
           "per_position": [a / m.num_drafts for a in m.accepted_per_pos] if m.num_drafts else []}
    if hasattr(eng.proposer, "share"):
        out["arm_share"] = eng.proposer.share()
    return out


def bench_workload(models, name: str, prompts, methods, k, new_tokens, repeats, options, mode, batch=1) -> dict:
    runs = {m: [] for m in methods}
    for m in methods:                        # untimed warm-up: kernels, caches, calibration
        run_once(models, m, k, prompts[:batch], min(8, new_tokens), options, mode, batch)
    for r in range(repeats):
        for m in (methods if r % 2 == 0 else list(reversed(methods))):
            runs[m].append(run_once(models, m, k, prompts, new_tokens, options, mode, batch))
    exact = mode[1] == 0 or mode[2] == "invariant"      # rows that must equal plain's tokens
    plain = runs["none"]
    res = {}
    for m in methods:
        rs = runs[m]
        res[m] = {
            "tokens_per_s": statistics.median(x["tokens_per_s"] for x in rs),
            "speedup": statistics.median(x["tokens_per_s"] / p["tokens_per_s"] for x, p in zip(rs, plain)),
            "acceptance_rate": statistics.median(x["acceptance_rate"] for x in rs),
            "mean_acceptance_length": statistics.median(x["mean_acceptance_length"] for x in rs),
            "identical_to_plain": all(x["outputs"] == p["outputs"] for x, p in zip(rs, plain)) if exact else None,
            "repetition": statistics.median(x["repetition"] for x in rs),
            "per_position": [statistics.median(col) for col in zip(*(x["per_position"] for x in rs))],
            "repeats": [{kk: v for kk, v in x.items() if kk != "outputs"} for x in rs],
        }
    return res


def markdown(results: dict, meta: dict) -> str:
    lines = [f"k = {meta['k']}, {meta['n']} prompts per workload, {meta['new_tokens']} new tokens each, "
             f"batch {meta.get('batch', 1)}, {meta['threads']} threads, median of {meta['repeats']} repeats; {meta['cpu']}. "
             f"repetition: share of output tokens that repeat an earlier {NGRAM}-gram (* above {FLAG:.0%}: "
             "the row measures self-repetition).", "",
             "| workload | sampling | method | acceptance | mean acc. length | tokens/s | speed-up | repetition | = plain |",
             "|---|---|---|---:|---:|---:|---:|---:|:-:|"]
    same = {True: "yes", False: "NO", None: "n/a"}
    for key, per in results.items():
        w, mode = key.split(" | ")
        for m, r in per.items():
            flag = "*" if r["repetition"] > FLAG else ""
            lines.append(f"| {w} | {mode} | {m} | {r['acceptance_rate']:.2f} | {r['mean_acceptance_length']:.2f} | "
                         f"{r['tokens_per_s']:.1f} | {r['speedup']:.2f}x | {r['repetition']:.2f}{flag} | "
                         f"{same[r['identical_to_plain']]} |")
    best = []
    for w, per in results.items():
        singles = {m: r["speedup"] for m, r in per.items() if parse_method(m, meta["k"])[0] != "auto"}
        top = max(singles, key=singles.get)
        for m in (m for m in per if m not in singles):
            best.append(f"- {w}: best single = {top} ({singles[top]:.2f}x); {m} = {per[m]['speedup']:.2f}x "
                        f"({per[m]['speedup'] / singles[top]:.0%} of best)")
    for w, per in results.items():                       # each proposer's token trees against its chains
        kinds = {m: parse_method(m, meta["k"]) for m in per}
        for method in sorted({meth for meth, _, tree in kinds.values() if tree}):
            chains = [m for m, (meth, _, tree) in kinds.items() if meth == method and not tree]
            trees = [m for m, (meth, _, tree) in kinds.items() if meth == method and tree]
            if not chains:
                continue
            c = max(chains, key=lambda m: per[m]["tokens_per_s"])
            t = max(trees, key=lambda m: per[m]["tokens_per_s"])
            best.append(f"- {w}: best tree {t} against the best chain {c}: mean acceptance length "
                        f"{per[t]['mean_acceptance_length'] / per[c]['mean_acceptance_length']:.2f}x, "
                        f"tokens/s {per[t]['speedup'] / per[c]['speedup']:.2f}x")
    return "\n".join(lines + [""] + best) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--target", type=Path, default=None, help="default: the bundled target")
    p.add_argument("--draft", type=Path, default=None, help="default: the bundled draft")
    p.add_argument("--head", type=Path, default=None, help="eagle's head (default: the bundled head)")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--k", type=_k, default=4)
    p.add_argument("--n", type=int, default=4, help="prompts per workload")
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--layerskip-layers", type=int, help="default: measured on the target")
    p.add_argument("--temperatures", default="", help="sampled modes beside greedy, e.g. 0.7,1")
    p.add_argument("--couplings", default="standard,invariant", help="couplings of each sampled mode")
    p.add_argument("--batch", type=int, default=1, help="requests decoded together (give --n >= it)")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 prompt, 16 new tokens, 1 repeat")
    a = p.parse_args(argv)
    if a.quick:
        a.n, a.new_tokens, a.repeats, a.prompt_tokens = 1, 16, 1, 48
    torch.set_num_threads(a.threads)
    mtp = "mtp" in a.methods.split(",")             # the target's own MTP layers (then no EAGLE head)
    head = None if mtp else a.head or (default_head() if a.target is None else None)
    models = load_models(a.target or default_target(), a.draft or default_draft(), threads=a.threads, head=head,
                         method="mtp" if mtp else None)
    methods = [m for m in a.methods.split(",") if m and (m not in ("eagle", "mtp") or models.head is not None)]
    if "none" not in methods:
        methods.insert(0, "none")
    options = {"ngram_min": 1, "ngram_max": 4}
    if a.layerskip_layers is not None:
        options["layerskip_layers"] = a.layerskip_layers
    modes = [("greedy", 0.0, "standard")] + [(f"T={t} {c}", float(t), c) for t in a.temperatures.split(",") if t
                                             for c in a.couplings.split(",")]
    results = {}
    for w in [w for w in a.workloads.split(",") if w]:
        prompts = load_workload(w, models.tokenizer, n=a.n, prompt_tokens=a.prompt_tokens)
        for mode in modes:
            key = f"{w} | {mode[0]}"
            results[key] = bench_workload(models, w, prompts, methods, a.k, a.new_tokens, a.repeats, options, mode,
                                          a.batch)
            print(f"{key}: " + ", ".join(f"{m} {r['speedup']:.2f}x" for m, r in results[key].items()), flush=True)
    meta = {"k": a.k, "n": a.n, "batch": a.batch, "new_tokens": a.new_tokens, "repeats": a.repeats, "threads": a.threads,
            "prompt_tokens": a.prompt_tokens, "target": str(models.target_path), "draft": str(models.draft_path),
            "head": str(head) if models.head is not None else None,
            "torch": torch.__version__, "machine": platform.machine(), "cpu": _cpu_name(), "quick": a.quick,
            "command": "python benchmarks/proposers.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "proposers.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    (a.out / "proposers.md").write_text(markdown(results, meta))
    print(markdown(results, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
