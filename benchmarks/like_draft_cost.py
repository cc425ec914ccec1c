"""What a `train draft --like` draft's step costs beside its target's, for candidate shapes.

    python benchmarks/like_draft_cost.py --target SmolLM2-135M-Instruct.Q4_1.gguf \
        --hidden 128,192,256,320 --layers 2,4,6 --weights float32 int8 --out DIR

Each candidate (train/like.py `like_config`, random weights: a step's cost does not depend on
their values) is written as a checkpoint and loaded as `--draft` loads it (the compiled
decoder, the weights rounded at load for int8). One decode step (batch 1, one new position,
L_CACHED tokens cached) of the draft and of the target at the same weight type, median of
repeats (costs/profiling.py `time_forwards`), and their ratio: issue 58 bounds it at 0.15.
Writes like_draft_cost.json and like_draft_cost.md to --out.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from specdec.costs.cache import _cpu_name
from specdec.costs.profiling import time_forwards
from specdec.models.loader import load_model
from specdec.train.like import COST_BOUND, export_like, like_config
from specdec.models.llama import LlamaModel

L_CACHED = 256       # a chat prompt and part of its reply: the benchmark's prompts are 38-232 tokens
ROUNDS = 3           # each point is timed ROUNDS times, interleaved with the target; the median kept


def step_ms(model) -> float:
    return time_forwards(model, 1, L_CACHED, [1], min_time=0.3, max_reps=200)[1] * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--hidden", default="128,192,256,320")
    ap.add_argument("--layers", default="2,4,6")
    ap.add_argument("--weights", nargs="+", default=["float32", "int8"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for weights in a.weights:
            target = load_model(a.target, weights=weights)
            for h in map(int, a.hidden.split(",")):
                for n in map(int, a.layers.split(",")):
                    cfg = like_config(target.config, h, n)
                    folder = export_like(LlamaModel(cfg), Path(a.target), Path(tmp) / f"d{h}x{n}", None)
                    draft = load_model(folder, exact=False, weights=weights)
                    t, d = [], []
                    for _ in range(ROUNDS):
                        t.append(step_ms(target))
                        d.append(step_ms(draft))
                    t_ms, d_ms = sorted(t)[ROUNDS // 2], sorted(d)[ROUNDS // 2]
                    rows.append({"weights": weights, "hidden": h, "layers": n, "params_M": cfg.num_params / 1e6,
                                 "target_ms": t_ms, "draft_ms": d_ms, "ratio": d_ms / t_ms})
                    print(f"{weights} d={h} L={n}: draft {d_ms:.3f} ms, target {t_ms:.2f} ms, "
                          f"ratio {d_ms / t_ms:.3f}", file=sys.stderr, flush=True)
    command = "python benchmarks/like_draft_cost.py " + " ".join(argv or sys.argv[1:])
    md = [f"# Draft step cost beside the target's ({_cpu_name()}, {a.threads} threads, torch {torch.__version__})",
          "", f"`{command}`", "", f"Batch 1, one new position, {L_CACHED} tokens cached, medians; "
          f"bound: {COST_BOUND}.", "", "| weights | hidden | layers | params (M) | draft ms | target ms | ratio |",
          "|---|---:|---:|---:|---:|---:|---:|"]
    md += [f"| {r['weights']} | {r['hidden']} | {r['layers']} | {r['params_M']:.1f} | {r['draft_ms']:.3f} | "
           f"{r['target_ms']:.2f} | {r['ratio']:.3f}{'' if r['ratio'] <= COST_BOUND else ' (over)'} |" for r in rows]
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "like_draft_cost.json").write_text(json.dumps({"command": command, "cpu": _cpu_name(),
                                                            "threads": a.threads, "rows": rows}, indent=1))
    (a.out / "like_draft_cost.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
