"""`specdec analyze --what-if-shape CONFIG.json`: the speed-up curve of a model shape, without
its weights.

A random-weight model of the shape (a Hugging Face config.json, weights as `--dtype`) is built
in memory and its cached forward timed at each batch size b for q = 1..k_max + 1 positions per
row, CACHED keys in the cache: t(b, q). The draft's step is a random model of `--draft-shape`
timed at q = 1 or, without one, DRAFT_RATIO x t(b, 1). Leviathan's formula over those costs
(analysis/predict.py) then gives, for each acceptance rate alpha and batch size, the best k
and its speed-up, and per batch size the break-even alpha: the least acceptance at which
some k pays. Random weights give costs only; alpha is an input, not a measurement.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from ..models.config import ModelConfig
from ..models.linear import choose_kernel
from ..models.llama import LlamaModel
from ..models.loader import empty_model
from ..models.memory import require
from ..models.quantize import check_weights
from .predict import break_even_alpha, expected_tokens

CACHED = 256             # keys cached while a forward is timed: a mid-length request's context
DRAFT_RATIO = 0.10       # a draft step over a target step without --draft-shape: the bundled
                         # pair's weight-byte ratio (docs/benchmarks.md)
CALLS = 3                # timed forwards per cell, after one warm-up; the median is kept
INIT_STD = 0.02          # random weights' scale (transformers' initializer_range): finite activations


def random_model(config: Path, weights: str = "float32") -> LlamaModel:
    """A model of `config`'s shape with random weights, prepared for decoding, built without a
    float32 copy of quantized linears; refused before allocation if it would not fit in memory."""
    check_weights(weights)
    cfg = ModelConfig.from_file(config)
    per_weight = {"int8": 1, "int4": 0.625}.get(weights, 4)          # int4: half a byte + its scales
    require(int(2 * per_weight * cfg.num_params) + 4 * cfg.vocab_size * cfg.hidden_size,   # weights + packed copy
            f"a random {config.name} model ({cfg.num_params / 1e9:.2f}B parameters, {weights})",
            "use --dtype int8 or int4, or a smaller shape", torch.device("cpu"))
    model = empty_model(cfg, weights)              # the loader's: quantized linears are never fp32
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, t in [*model.named_parameters(), *model.named_buffers()]:
            if t.dtype == torch.int8:
                t.random_(-127, 128, generator=gen)
            elif t.dtype == torch.uint8:
                t.random_(0, 256, generator=gen)            # two int4 nibbles, each -8..7
            elif name.endswith("weight_scale"):
                t.fill_(INIT_STD * 3 / (127 if weights == "int8" else 8))   # q * s spans about +-3 std
            elif name.endswith("norm.weight"):
                t.fill_(1.0)
            elif t.is_floating_point() and name != "inv_freq":
                t.normal_(0.0, INIT_STD, generator=gen)
    model.reset_rope()
    return model.prepare(choose_kernel("cpu", cfg.hidden_size, cfg.intermediate_size))


def forward_times(model: LlamaModel, batch_sizes: list[int], qs: list[int], calls: int = CALLS) -> dict:
    """{(b, q): median seconds of a cached forward of q positions in each of b rows}."""
    cache = model.new_cache(max(batch_sizes), CACHED + max(qs) + 1)
    out = {}
    with torch.inference_mode():
        model(torch.randint(2, 1000, (1, CACHED)), torch.arange(CACHED)[None], cache)     # row 0's prefill
        for layer in range(len(cache.k)):                                                 # copied to all rows
            cache.k[layer][1:] = cache.k[layer][0]
            cache.v[layer][1:] = cache.v[layer][0]
        for b in batch_sizes:
            for q in qs:
                toks = torch.randint(2, 1000, (b, q))
                pos = (torch.arange(q) + CACHED).expand(b, q).contiguous()
                model(toks, pos, cache)
                ts = []
                for _ in range(calls):
                    t0 = time.perf_counter()
                    model(toks, pos, cache)
                    ts.append(time.perf_counter() - t0)
                out[(b, q)] = statistics.median(ts)
    return out


def predict(t: dict, t_draft: dict, alphas: list[float], batch_sizes: list[int], k_max: int) -> dict:
    """Per batch size: the round's relative cost for each k, the best k and speed-up for each
    alpha, and the break-even alpha (None: no k pays at any acceptance)."""
    out = {}
    for b in batch_sizes:
        ratio = {k: (t[(b, k + 1)] + k * t_draft[b]) / t[(b, 1)] for k in range(1, k_max + 1)}
        best = {}
        for a in alphas:
            k, s = max(((k, expected_tokens(a, k) / r) for k, r in ratio.items()), key=lambda x: x[1])
            best[a] = (k, s) if s > 1.0 else (0, 1.0)
        even = [x for x in (break_even_alpha(k, r) for k, r in ratio.items()) if x is not None]
        out[b] = {"ratio": ratio, "best": best, "break_even_alpha": min(even) if even else None}
    return out


def run_what_if(args) -> int:
    """The command: time, predict, print, and write what_if.json and what_if.md to --out."""
    torch.set_num_threads(args.threads or torch.get_num_threads())
    weights = args.dtype or "float32"
    bs, k_max = args.batch_sizes or [1, 4, 16], args.k_max
    alphas = args.alpha or [0.5, 0.6, 0.7, 0.8, 0.9]
    target = random_model(args.what_if_shape, weights)
    t = forward_times(target, bs, list(range(1, k_max + 2)))
    del target
    if args.draft_shape:
        draft = random_model(args.draft_shape, args.draft_dtype or weights)
        td = {b: v for (b, _), v in forward_times(draft, bs, [1]).items()}
    else:
        td = {b: DRAFT_RATIO * t[(b, 1)] for b in bs}
    result = predict(t, td, alphas, bs, k_max)
    args.out.mkdir(parents=True, exist_ok=True)
    lines = [f"What if: {args.what_if_shape} ({weights}), draft "
             f"{args.draft_shape or f'at {DRAFT_RATIO} x a target step'}, {CACHED} cached keys, "
             f"{torch.get_num_threads()} threads. Random weights: costs measured, acceptance assumed.", "",
             "| batch | t(1) ms | t(k_max+1)/t(1) | draft step / t(1) | break-even alpha | "
             + " | ".join(f"alpha {a}: best k, speed-up" for a in alphas) + " |",
             "|" + "---|" * (5 + len(alphas))]
    for b, r in result.items():
        even = r["break_even_alpha"]
        lines.append(f"| {b} | {t[(b, 1)] * 1e3:.1f} | {t[(b, k_max + 1)] / t[(b, 1)]:.2f} | {td[b] / t[(b, 1)]:.2f} | "
                     f"{'never' if even is None else f'{even:.2f}'} | "
                     + " | ".join(f"k={k}, {s:.2f}x" for k, s in r["best"].values()) + " |")
    (args.out / "what_if.md").write_text("\n".join(lines) + "\n")
    (args.out / "what_if.json").write_text(json.dumps({
        "shape": str(args.what_if_shape), "weights": weights, "draft_shape": str(args.draft_shape or ""),
        "t_target_s": {f"{b},{q}": v for (b, q), v in t.items()}, "t_draft_s": td,
        "predicted": {b: {"break_even_alpha": r["break_even_alpha"], "ratio": r["ratio"],
                          "best": {str(a): list(v) for a, v in r["best"].items()}} for b, r in result.items()},
    }, indent=1) + "\n")
    print("\n".join(lines))
    return 0
