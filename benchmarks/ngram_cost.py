"""Cost of one `ngram` proposal on a long context (goal: <= 0.1 ms at 4k tokens).

    python benchmarks/ngram_cost.py [--context 4096] [--repeats 2000] [--threads 1]

Steady state, as in the engine: one row, the context grows by one token between calls
(the row buffer catches up incrementally), then `propose(context, k)` is timed.
Prints the median, p90 and the cold first call; exits 1 if the median exceeds --limit-ms.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch

from specdec.proposers.ngram import NgramProposer


class Seq:
    def __init__(self, ids):
        self.token_ids = ids


def measure(context: int, repeats: int, k: int, min_n: int, max_n: int, vocab: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    # code-like text: random tokens with copied spans, so matches of every length exist
    ids = []
    while len(ids) < context:
        if ids and rng.random() < 0.3:
            s = rng.randrange(len(ids))
            ids += ids[s:s + rng.randint(2, 12)]
        else:
            ids.append(rng.randrange(2, vocab))
    ids = ids[:context - repeats - 1] if context > repeats + 1 else ids[:context // 2]
    seq, prop = Seq(ids), NgramProposer(min_n, max_n)
    t = time.perf_counter()
    prop.propose([seq], k)
    cold = time.perf_counter() - t
    times = []
    while len(seq.token_ids) < context and len(times) < repeats:
        seq.token_ids.append(rng.randrange(2, vocab))
        t = time.perf_counter()
        prop.propose([seq], k)
        times.append(time.perf_counter() - t)
    # then at exactly `context` tokens, repeated (the buffer is already in sync)
    while len(seq.token_ids) < context:
        seq.token_ids.append(rng.randrange(2, vocab))
    at = []
    for _ in range(repeats):
        t = time.perf_counter()
        prop.propose([seq], k)
        at.append(time.perf_counter() - t)
    times.sort()
    return {"context": context, "k": k, "min_n": min_n, "max_n": max_n, "threads": torch.get_num_threads(),
            "median_ms_growing": statistics.median(times) * 1e3 if times else None,
            "p90_ms_growing": times[int(0.9 * (len(times) - 1))] * 1e3 if times else None,
            "median_ms_at_context": statistics.median(at) * 1e3, "cold_first_call_ms": cold * 1e3}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=2000)
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--min-n", type=int, default=1)
    p.add_argument("--max-n", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--limit-ms", type=float, default=0.1)
    p.add_argument("--quick", action="store_true", help="few repeats (smoke run)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    r = measure(a.context, 50 if a.quick else a.repeats, a.k, a.min_n, a.max_n, a.vocab)
    print(json.dumps(r, indent=2))
    worst = max(r["median_ms_at_context"], r["median_ms_growing"] or 0.0)
    print(f"median proposal cost: {worst:.4f} ms (limit {a.limit_ms} ms) -> {'OK' if worst <= a.limit_ms else 'OVER'}")
    return 0 if worst <= a.limit_ms else 1


if __name__ == "__main__":
    raise SystemExit(main())
