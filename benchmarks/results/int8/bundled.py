"""The bundled pair with float32, int8 and int4 weights, side by side: batch 1, greedy, 128 new
tokens on 4 held-out code prompts (128 tokens each), plain and draft k = 4, the engines
alternated in every repetition, medians of decode tok/s (prefill included). Also: each
type's speculative text against its plain text (must be identical), the quantized plain
text against float32 plain (quantization changes the model), and the draft's acceptance.

    python benchmarks/results/int8/bundled.py [--reps 3] [--weights float32,int8,int4]
"""
import argparse
import json
import statistics
import time

import torch

from specdec.analysis.workloads import load_workload
from specdec.build import load_models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.costs.cache import _cpu_name

ap = argparse.ArgumentParser()
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--weights", default="float32,int8,int4")
args = ap.parse_args()
torch.set_num_threads(2)
models = {w: load_models(weights=w) for w in args.weights.split(",")}
prompts = load_workload("code", models["float32"].tokenizer, n=4, prompt_tokens=128)
params = SamplingParams(max_new_tokens=128, ignore_eos=True)
engines = {(w, k): make_engine(m, SpecConfig(method="draft" if k else "none", k=k),
                               EngineConfig(max_batch=1, max_model_len=300))
           for w, m in models.items() for k in (0, 4)}
rates, texts, acc = {e: [] for e in engines}, {}, {}
for rep in range(args.reps):
    for name in (list(engines) if rep % 2 == 0 else list(engines)[::-1]):
        eng = engines[name]
        for i, p in enumerate(prompts):
            d0, a0 = eng.metrics.num_draft_tokens, eng.metrics.num_accepted_tokens
            t0 = time.perf_counter()
            out = eng.generate([p], params)[0].output_ids
            rates[name].append(len(out) / (time.perf_counter() - t0))
            texts.setdefault(name, {})[i] = out
            if name[1]:
                acc.setdefault(name, []).append((eng.metrics.num_accepted_tokens - a0) / (eng.metrics.num_draft_tokens - d0))
same = lambda a, b: statistics.mean(sum(x == y for x, y in zip(a[i], b[i])) / len(a[i]) for i in a)  # noqa: E731
result = {
    "cpu": _cpu_name(), "threads": 2, "reps": args.reps,
    "tok_s": {f"{w} k={k}": round(statistics.median(v), 1) for (w, k), v in rates.items()},
    "spec_equals_plain": {w: texts[(w, 4)] == texts[(w, 0)] for w in models},
    "plain_tokens_equal_to_float32_plain": {w: round(same(texts[(w, 0)], texts[("float32", 0)]), 3)
                                            for w in models if "float32" in models},
    "acceptance_k4": {w: round(statistics.mean(acc[(w, 4)]), 3) for w in models},
}
print(json.dumps(result, indent=1))
