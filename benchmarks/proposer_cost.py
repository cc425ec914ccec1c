"""What a proposer's drafting costs against the target's step: c = t(one draft token) / t(plain step).

    python benchmarks/proposer_cost.py --methods draft,eagle --k 4 --out benchmarks/results/eagle/cost

For each method, decodes held-out code prompts at batch 1 with a fixed k and times every
`propose` call (its drafting: the head's or draft model's forwards and sampling). The plain
step is timed in the same run (k = 0). c per method = median over rounds of propose time / k,
divided by the median plain step; methods and plain alternate per repeat. Greedy.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from specdec.analysis.workloads import load_workload
from specdec.build import Models, load_models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.costs.cache import _cpu_name
from specdec.defaults import default_draft, default_head, default_target


def timed_run(models, method: str, k: int, prompts, new_tokens: int) -> tuple[list[float], list[float]]:
    """(propose seconds per round, step seconds per round) of one generate call."""
    spec = SpecConfig(method=method, k=k if method != "none" else 0)
    cfg = EngineConfig(max_batch=1, max_model_len=max(len(p) for p in prompts) + new_tokens + 16)
    eng = make_engine(Models(models.target, models.tokenizer, models.draft if method == "draft" else None,
                             head=models.head if method in ("eagle", "mtp") else None), spec, cfg)
    proposes, steps = [], []
    inner = eng.proposer.propose

    def propose(batch, kk):
        t = time.perf_counter()
        out = inner(batch, kk)
        proposes.append(time.perf_counter() - t)
        return out
    eng.proposer.propose = propose
    for p in prompts:
        eng.add_request(p, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True))
        while eng.has_unfinished():
            t, rounds = time.perf_counter(), eng.metrics.steps
            eng.step()
            if eng.metrics.steps > rounds:                                # a decode round, not admission
                steps.append(time.perf_counter() - t)
    return proposes, steps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", default="draft,eagle")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=96)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    models = load_models(default_target(), default_draft(), threads=a.threads, head=default_head())
    prompts = load_workload("code", models.tokenizer, n=a.n, prompt_tokens=128)
    methods = ["none"] + [m for m in a.methods.split(",") if m]
    for m in methods:
        timed_run(models, m, a.k, prompts[:1], 8)                                  # warm-up
    runs = {m: ([], []) for m in methods}
    for r in range(a.repeats):
        for m in (methods if r % 2 == 0 else methods[::-1]):
            pr, st = timed_run(models, m, a.k, prompts, a.new_tokens)
            runs[m][0].extend(pr)
            runs[m][1].extend(st)
    plain = statistics.median(runs["none"][1])
    res = {"plain_step_ms": plain * 1e3}
    for m in methods[1:]:
        per_token = statistics.median(runs[m][0]) / a.k
        res[m] = {"propose_ms": statistics.median(runs[m][0]) * 1e3, "per_draft_token_ms": per_token * 1e3,
                  "c": per_token / plain, "step_ms": statistics.median(runs[m][1]) * 1e3}
    meta = {"cpu": _cpu_name(), "torch": torch.__version__, "threads": a.threads, "k": a.k, "n": a.n,
            "new_tokens": a.new_tokens, "repeats": a.repeats,
            "command": "python benchmarks/proposer_cost.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "cost.json").write_text(json.dumps({"meta": meta, "results": res}, indent=1))
    print(json.dumps({"meta": meta, "results": res}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
