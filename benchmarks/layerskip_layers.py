"""Layer-skip self-speculation: acceptance against cost for every L' (how L' is chosen).

    python benchmarks/layerskip_layers.py --out results/layerskip [--workload code] [--quick]

Runs `specdec.proposers.layerskip.measure_layers` on a workload's prompts with the bundled
target, writes layerskip.json and layerskip.md (L', acceptance, mean acceptance length,
tokens/s, speed-up over plain) and prints the L' that `choose_layers` would pick.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from specdec.analysis.workloads import WORKLOADS, load_workload
from specdec.defaults import default_target
from specdec.build import load_models
from specdec.adaptive.layers import measure_layers


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--target", type=Path, default=None)
    p.add_argument("--workload", default="code", choices=WORKLOADS)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="smoke run: 1 prompt, 8 tokens, 1 repeat")
    a = p.parse_args(argv)
    if a.quick:
        a.n, a.new_tokens, a.repeats = 1, 8, 1
    torch.set_num_threads(a.threads)
    models = load_models(a.target or default_target(), threads=a.threads)
    prompts = load_workload(a.workload, models.tokenizer, n=a.n, prompt_tokens=64 if a.quick else 128)
    rows = measure_layers(models.target, prompts, k=a.k, new_tokens=a.new_tokens, repeats=a.repeats)
    best = max((r for r in rows if r["layers"] > 0), key=lambda r: r["tokens_per_s"])
    lines = [f"{a.workload}, k = {a.k}, {a.n} prompts x {a.new_tokens} tokens, median of {a.repeats}; "
             "L' = 0 is plain decoding.", "",
             "| L' | acceptance | mean acc. length | tokens/s | speed-up |", "|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['layers']} | {r['acceptance_rate']:.2f} | {r['mean_acceptance_length']:.2f} | "
              f"{r['tokens_per_s']:.1f} | {r['speedup']:.2f}x |" for r in rows]
    lines += ["", f"chosen L' = {best['layers']}"]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "layerskip.json").write_text(json.dumps({"args": vars(a) | {"out": str(a.out), "target": str(a.target)},
                                                      "rows": rows}, indent=1))
    (a.out / "layerskip.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
