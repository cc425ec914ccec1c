"""A/B in one process: `--tree auto` choosing its size with and without the round's drafting
time (tree_size.best_size(spent=)), greedy, held-out code, batch 1, interleaved per repeat.

    python benchmarks/results/trees/checks/auto_spent.py [--repeats 5] [--k 4]
"""
import argparse
import statistics
import time

import torch

import specdec.proposers.draft_tree as draft_tree
from benchmarks.proposers import run_once
from specdec.analysis.workloads import load_workload
from specdec.build import load_models
from specdec.costs.cache import _cpu_name
from specdec.defaults import default_draft, default_target

p = argparse.ArgumentParser()
p.add_argument("--repeats", type=int, default=5)
p.add_argument("--k", type=int, default=4)
args = p.parse_args()
torch.set_num_threads(2)
models = load_models(default_target(), default_draft())
prompts = load_workload("code", models.tokenizer, n=4, prompt_tokens=128)
with_spent = draft_tree.best_size
without = lambda probs, c, cost, spent=0.0: with_spent(probs, c, cost)          # noqa: E731
arms = {"chain": ("draft", with_spent), "auto, drafting counted": ("treeauto", with_spent),
        "auto, verify only": ("treeauto", without)}
rates: dict = {a: [] for a in arms}
lengths: dict = {a: [] for a in arms}
for r in range(args.repeats + 1):                       # the first pass warms up, untimed
    for arm in (list(arms) if r % 2 else list(arms)[::-1]):
        label, rule = arms[arm]
        draft_tree.best_size = rule
        res = run_once(models, f"{label}@{args.k}", args.k, prompts, 128, {})
        if r:
            rates[arm].append(res["tokens_per_s"])
            lengths[arm].append(res["mean_acceptance_length"])
draft_tree.best_size = with_spent
cpu = _cpu_name()
print(f"{time.strftime('%Y-%m-%d %H:%M')}, {cpu}, 2 threads, k = {args.k}, medians of {args.repeats}")
print("| arm | tokens/s | mean acc. length | vs chain (median of per-repeat ratios) |\n|---|---:|---:|---:|")
for arm in arms:
    ratio = statistics.median(a / c for a, c in zip(rates[arm], rates["chain"]))
    print(f"| {arm} | {statistics.median(rates[arm]):.1f} | {statistics.median(lengths[arm]):.2f} | {ratio:.2f} |")
