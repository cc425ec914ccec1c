"""Verification cost curve: t(q)/t(1) for q = 1..16 at batch 1, the chosen path (the compiled
decoder where it builds) against eager oneDNN and eager stock F.linear.

The bundled target (`--model target`, the default) or a random 49M-parameter Llama (d=512,
12 layers, 8 heads, vocab 8192, untied: `--model random49m`), with 256 cached tokens. The
paths are timed in the same run, interleaved, medians over repeats.

    python benchmarks/decode_cost.py [--model target] [--threads 2] [--repeats 30] [--out results/decode_cost]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from specdec.models.config import ModelConfig
from specdec.models.linear import LinearKernel, OneDNNKernel, choose_kernel
from specdec.models.llama import LlamaModel


def forty_m() -> ModelConfig:
    return ModelConfig(vocab_size=8192, hidden_size=512, intermediate_size=1536, num_hidden_layers=12,
                       num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=2048)


def time_q(model: LlamaModel, q: int, batch: int, ctx: int, repeats: int) -> float:
    cache = model.new_cache(batch, ctx + 64)
    tokens = torch.randint(0, 8192, (batch, q))
    pos = (torch.arange(q) + ctx).expand(batch, q)
    ts = []
    with torch.inference_mode():
        for b in range(batch):
            cache.lengths[b] = ctx
        for i in range(repeats + 3):
            t0 = time.perf_counter()
            model(tokens, pos, cache)
            if i >= 3:
                ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["target", "random49m"], default="target")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--max-q", type=int, default=16)
    ap.add_argument("--out", type=Path, default=Path("results/decode_cost"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.model == "target":
        from specdec.defaults import default_target
        from specdec.models.loader import load_model
        base = load_model(default_target(), prepare=False)
        cfg, state = base.config, base.state_dict()
    else:
        cfg = forty_m()
        state = LlamaModel(cfg).state_dict()
    chosen = choose_kernel("cpu", cfg.hidden_size, cfg.intermediate_size)
    models = {}
    m = LlamaModel(cfg)
    m.load_state_dict(state)
    models[f"chosen ({chosen.name})"] = m.prepare(chosen)
    for name, kernel in (("eager oneDNN", OneDNNKernel()), ("stock F.linear", LinearKernel())):
        if name == "eager oneDNN" and chosen.name == "onednn":
            continue
        m = LlamaModel(cfg)
        m.load_state_dict(state)
        models[name] = m.prepare(kernel)
    qs = list(range(1, args.max_q + 1))
    times = {name: {} for name in models}
    for q in qs:  # interleave the paths at every q
        for name, m in models.items():
            times[name][q] = time_q(m, q, args.batch, args.ctx, args.repeats)
    rows = []
    for q in qs:
        rows.append({"q": q, **{f"{n} t(q)/t(1)": times[n][q] / times[n][1] for n in models},
                     **{f"{n} ms": times[n][q] * 1e3 for n in models}})
    from specdec.costs.cache import _cpu_name
    result = {"cpu": _cpu_name(), "model": args.model, "params_m": round(cfg.num_params / 1e6, 1), "threads": args.threads, "batch": args.batch,
              "ctx": args.ctx, "chosen_kernel": chosen.name, "rows": rows,
              "command": "python benchmarks/decode_cost.py " + " ".join(argv or [])}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2))
    names = list(models)
    what = "the bundled target" if args.model == "target" else "random Llama"
    md = [f"{cfg.num_params / 1e6:.1f}M-parameter {what}, batch {args.batch}, {args.ctx} cached tokens, "
          f"{args.threads} threads, median of {args.repeats}; {result['cpu']}", "",
          "| q | " + " | ".join(f"{n} t(q)/t(1)" for n in names) + " | " + " | ".join(f"{n} ms" for n in names) + " |",
          "|---|" + "---|" * (2 * len(names))]
    for r in rows:
        md.append(f"| {r['q']} | " + " | ".join(f"{r[f'{n} t(q)/t(1)']:.2f}" for n in names) + " | "
                  + " | ".join(f"{r[f'{n} ms']:.1f}" for n in names) + " |")
    (args.out / "results.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return result


if __name__ == "__main__":
    main()
