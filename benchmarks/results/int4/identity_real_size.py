"""Greedy identity on the random Qwen2.5-0.5B shape (benchmarks/real_size.py's checkpoint),
with a self-draft of the other quantized type: the int4 target drafted by its own int8
rounding, and the int8 target by its int4 one. The drafts differ from their targets, so some
are rejected; speculative output must equal the target's plain output token for token.

    python benchmarks/results/int4/identity_real_size.py [--prompts 8] [--new-tokens 24]
"""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from real_size import checkpoint  # noqa: E402

from specdec.build import Models, make_engine  # noqa: E402
from specdec.config import EngineConfig, SamplingParams, SpecConfig  # noqa: E402
from specdec.costs.cache import _cpu_name  # noqa: E402
from specdec.models.loader import load_model  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--prompts", type=int, default=8)
ap.add_argument("--new-tokens", type=int, default=24)
args = ap.parse_args()
torch.set_num_threads(2)
ckpt = checkpoint("qwen2.5-0.5b")
models = {w: load_model(ckpt, weights=w) for w in ("int8", "int4")}
g = torch.Generator().manual_seed(0)
prompts = [torch.randint(2, 5000, (16,), generator=g).tolist() for _ in range(args.prompts)]
params = SamplingParams(max_new_tokens=args.new_tokens, ignore_eos=True)
out = {"cpu": _cpu_name(), "prompts": args.prompts, "new_tokens": args.new_tokens}
for target, draft in (("int4", "int8"), ("int8", "int4")):
    def run(spec, d=None):
        eng = make_engine(Models(models[target], None, d), spec, EngineConfig(max_batch=4, max_model_len=64))
        return [s.output_ids for s in eng.generate(prompts, params)], eng.metrics
    plain, _ = run(SpecConfig(method="none", k=0))
    spec, m = run(SpecConfig(method="draft", k=4), models[draft])
    out[f"target {target}, draft {draft}"] = {
        "identical": spec == plain, "drafts": m.num_drafts,
        "acceptance": round(m.num_accepted_tokens / max(m.num_draft_tokens, 1), 3)}
print(json.dumps(out, indent=1))
