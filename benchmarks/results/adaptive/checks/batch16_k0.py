"""Where adaptive loses to plain at batch 16 when it drafts nothing (k = 0 every round).

    python benchmarks/results/adaptive/checks/batch16_k0.py      # ~1 min with a warm cost cache

The benchmark's random/16 regime (16 requests of 64 tokens at temperature 1, one wave),
plain and adaptive in lockstep (analysis/measure.py), 6 repeats. Per repeat: total decode
seconds of each, their ratio, and the summed step-time difference at the policy's evaluation
steps (every RECHECK = 4th step) and at the other steps.
"""
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))      # benchmarks/
import adaptive as A                                                 # noqa: E402
from specdec.analysis.measure import lockstep_runs                  # noqa: E402
from specdec.analysis.workloads import load_workload                # noqa: E402
from specdec.build import load_models                               # noqa: E402
from specdec.config import SamplingParams                           # noqa: E402

torch.set_num_threads(2)
models = load_models(device="cpu")
cost = A.calibrated_cost(models, 16, 8, 128, 2)
prompts = load_workload("random", models.tokenizer, n=16, prompt_tokens=128, seed=0)
specs = {c: A.spec_for(A.configs()[c], 8) for c in ("plain", "adaptive")}
for r in range(6):
    params = [SamplingParams(temperature=1.0, seed=1000 * i + 7 + 100_000 * r, max_new_tokens=64, ignore_eos=True)
              for i in range(16)]
    out = lockstep_runs(models, specs, prompts, params, 128 + 1 + 64, max_batch=16, cost_model=cost)
    p, a = out["plain"].steps, out["adaptive"].steps
    ev = [i for i in range(len(p)) if i % 4 == 0]
    other = [i for i in range(len(p)) if i % 4]
    print(f"repeat {r}: plain {out['plain'].decode_s:.3f} s, adaptive {out['adaptive'].decode_s:.3f} s, "
          f"adaptive/plain {out['plain'].decode_s / out['adaptive'].decode_s:.3f}; median step "
          f"{1e3 * statistics.median(x[1] for x in p):.2f} / {1e3 * statistics.median(x[1] for x in a):.2f} ms; "
          f"extra at evaluations {1e3 * sum(a[i][1] - p[i][1] for i in ev):.1f} ms, "
          f"elsewhere {1e3 * sum(a[i][1] - p[i][1] for i in other):.1f} ms")
