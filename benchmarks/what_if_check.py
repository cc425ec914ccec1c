"""`--what-if-shape`'s prediction against a direct measurement on the same random-weight model.

The proposer is an oracle that drafts plain decoding's own next tokens, each replaced by
another token with probability 1 - alpha, so that greedy acceptance is i.i.d. alpha by
construction and drafting costs nothing. Batch 1, fixed k, plain and speculative engines
alternated; the measured speed-up (tokens/s over plain's, medians over repeats) is set against
Leviathan's E[tokens](alpha, k) x t(1) / t(k + 1) over this model's measured forward times
(analysis/what_if.py's costs with a draft step of 0). Also checked: every speculative output
equals plain decoding's (greedy identity on the real-size shape), and a self-draft run.

    python benchmarks/what_if_check.py CONFIG.json [--dtype int8] [--alphas 0.6,0.8] [--ks 1,2,4]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch

from specdec.analysis.predict import expected_tokens
from specdec.analysis.what_if import forward_times, random_model
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.costs.cache import _cpu_name
from specdec.engine import Engine
from specdec.proposers.base import Draft, Proposer


class NoisyOracle(Proposer):
    """Drafts each row's known continuation, every token replaced w.p. 1 - alpha."""
    name = "oracle"

    def __init__(self, answers: dict[tuple, list[int]], alpha: float, vocab: int, seed: int = 0):
        self.answers, self.alpha, self.vocab, self.rng = answers, alpha, vocab, random.Random(seed)

    def propose(self, context, k):
        rows = []
        for seq in context:
            ans = self.answers[tuple(seq.token_ids[:seq.prompt_len])][seq.num_output:][:k]
            ans += [0] * (k - len(ans))
            rows.append([t if self.rng.random() < self.alpha else (t + 1 + self.rng.randrange(self.vocab - 1)) % self.vocab
                         for t in ans])
        return Draft(tokens=torch.tensor(rows, dtype=torch.long))


def run(engine: Engine, prompt, n: int) -> tuple[float, list[int]]:
    t0 = time.perf_counter()
    seq = engine.generate([prompt], SamplingParams(max_new_tokens=n, ignore_eos=True))[0]
    return seq.num_output / (time.perf_counter() - t0), seq.output_ids


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--dtype", default="int8")
    ap.add_argument("--alphas", default="0.6,0.8")
    ap.add_argument("--ks", default="1,2,4")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/what_if"))
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    alphas, ks = [float(x) for x in a.alphas.split(",")], [int(x) for x in a.ks.split(",")]
    model = random_model(a.config, a.dtype)
    V = model.config.vocab_size
    prompt = torch.randint(2, min(V, 8192), (32,), generator=torch.Generator().manual_seed(1)).tolist()
    cfg = EngineConfig(max_batch=1, max_model_len=32 + a.new_tokens + max(ks) + 8)
    plain_engine = Engine(model, SpecConfig(method="none", k=0), cfg)
    _, plain_out = run(plain_engine, prompt, a.new_tokens + max(ks) + 1)
    answers = {tuple(prompt): plain_out}
    engines = {"plain": plain_engine}
    for alpha in alphas:
        for k in ks:
            engines[(alpha, k)] = Engine(model, SpecConfig(method="oracle", k=k), cfg,
                                         proposer=NoisyOracle(answers, alpha, V, seed=k))
    rates = {n: [] for n in engines}
    identical = True
    for rep in range(a.repeats + 1):                                   # repeat 0 warms up
        for name in (list(engines) if rep % 2 else list(engines)[::-1]):
            tps, out = run(engines[name], prompt, a.new_tokens)
            identical &= out == plain_out[:a.new_tokens]
            if rep:
                rates[name].append(tps)
    t = forward_times(model, [1], list(range(1, max(ks) + 2)))
    self_draft = Engine(model, SpecConfig(method="draft", k=2), cfg, draft=model)
    identical_self = run(self_draft, prompt, 16)[1] == plain_out[:16]
    plain = statistics.median(rates["plain"])
    rows = []
    for alpha in alphas:
        for k in ks:
            m = engines[(alpha, k)].metrics
            rows.append({"alpha": alpha, "k": k, "measured_speedup": statistics.median(rates[(alpha, k)]) / plain,
                         "predicted_speedup": expected_tokens(alpha, k) * t[(1, 1)] / t[(1, k + 1)],
                         "position_1_acceptance": m.accepted_per_pos[0] / m.num_drafts if m.num_drafts else None})
    result = {"config": str(a.config), "dtype": a.dtype, "cpu": _cpu_name(), "threads": a.threads,
              "plain_tok_s": plain, "t_forward_ms": {q: t[(1, q)] * 1e3 for (_, q) in t},
              "greedy_identical_to_plain": identical, "self_draft_identical": identical_self, "rows": rows}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{a.config.parent.name}-{a.dtype}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
