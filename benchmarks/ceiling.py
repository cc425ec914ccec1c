"""The engine's ceiling on this machine: acceptance 1.0, random 40M-parameter target, batch 1.

Two ways to get acceptance 1.0, measured side by side with plain decoding:
- `self-draft`: the draft is the target itself (acceptance 1.0, but the draft costs as much
  as the target, c = 1, so this is slower than plain by design);
- `oracle`: a proposer that replays plain decoding's own output (acceptance 1.0 at c ~ 0): the
  most any proposer can give, k+1 tokens per verify forward, less the engine's overheads.

    python benchmarks/ceiling.py [--k 4 8] [--new-tokens 128] [--repeats 3] [--out results/ceiling]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.engine import Engine
from specdec.models.linear import choose_kernel
from specdec.models.llama import LlamaModel
from specdec.proposers.base import Proposer, Draft

from decode_cost import forty_m


class Oracle(Proposer):
    """Proposes the known continuation (plain decoding's output) of each row."""
    name = "oracle"

    def __init__(self, answers: dict[tuple, list[int]]):
        self.answers = answers

    def propose(self, context, k):
        rows = []
        for seq in context:
            ans = self.answers[tuple(seq.token_ids[:seq.prompt_len])]
            done = seq.num_output
            rows.append((ans[done:done + k] + [0] * k)[:k])
        return Draft(tokens=torch.tensor(rows, dtype=torch.long))


def timed(engine: Engine, prompts, params) -> tuple[float, list]:
    t0 = time.perf_counter()
    seqs = engine.generate(prompts, params)
    return sum(s.num_output for s in seqs) / (time.perf_counter() - t0), [s.output_ids for s in seqs]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("results/ceiling"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    target = LlamaModel(forty_m()).prepare(choose_kernel())
    prompts = [torch.randint(2, 8192, (32,)).tolist()]
    params = SamplingParams(max_new_tokens=args.new_tokens, ignore_eos=True)
    cfg = EngineConfig(max_batch=1, max_model_len=512)
    _, plain_out = timed(Engine(target, SpecConfig(method="none", k=0), cfg), prompts, params)
    longer = SamplingParams(max_new_tokens=args.new_tokens + max(args.k) + 1, ignore_eos=True)
    _, long_out = timed(Engine(target, SpecConfig(method="none", k=0), cfg), prompts, longer)
    answers = {tuple(p): o for p, o in zip(prompts, long_out)}   # drafts may run past the end
    configs = {"plain": lambda: Engine(target, SpecConfig(method="none", k=0), cfg)}
    for k in args.k:
        configs[f"self-draft k={k}"] = lambda k=k: Engine(target, SpecConfig(method="draft", k=k), cfg, draft=target)
        configs[f"oracle k={k}"] = lambda k=k: Engine(target, SpecConfig(method="oracle", k=k), cfg,
                                                      proposer=Oracle(answers))
    speeds = {n: [] for n in configs}
    same = {}
    for rep in range(args.repeats + 1):                  # repeat 0 is a warm-up
        for name in (configs if rep % 2 else reversed(list(configs))):
            eng = configs[name]()
            tps, out = timed(eng, prompts, params)
            if rep:
                speeds[name].append(tps)
                same[name] = out == plain_out
                if name != "plain":
                    assert eng.metrics.acceptance_rate == 1.0, (name, eng.metrics.acceptance_rate)
    med = {n: statistics.median(v) for n, v in speeds.items()}
    rows = [{"config": n, "tokens_per_s": med[n], "vs_plain": med[n] / med["plain"], "identical": same[n]}
            for n in configs]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"rows": rows, "threads": args.threads,
                                                       "new_tokens": args.new_tokens}, indent=2))
    md = ["| configuration | tokens/s | vs plain | identical to plain |", "|---|---|---|---|"]
    md += [f"| {r['config']} | {r['tokens_per_s']:.1f} | {r['vs_plain']:.2f}x | {r['identical']} |" for r in rows]
    (args.out / "results.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
