"""Memory-bandwidth roofline for decoding: how fast could plain and speculative decoding be?

A decode step at batch 1 must read every weight it multiplies by, plus the KV cache, from
memory. So for plain decoding

    tokens/s  <=  bandwidth / (weight bytes + KV bytes per token)

The token embedding is a gather (one row per token), so only the output projection's copy
of the vocabulary matrix counts; with tied embeddings it is the same tensor.

Speculation with k drafts at per-token acceptance α (i.i.d. model of Leviathan et al.)
yields E[tokens/round] = (1 - α^(k+1)) / (1 - α). A verify pass over k+1 positions reads
the same bytes as one step (memory bound), and the k draft steps cost k·c target steps,
so the bound is  roofline_plain · E[tokens/round] / (1 + k·c), maximised over k.

    python benchmarks/roofline.py [--target DIR] [--draft DIR]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def measure_bandwidth(mb: int = 512, repeats: int = 15, threads: int | None = 2) -> float:
    """Bytes/s of streaming reads the way a forward reads its weights: repeated passes over an
    `mb`-MB fp32 buffer, split in contiguous halves between the threads, 8-wide loads with four
    FMA accumulators (the native decoder's `sd_stream`). The median pass after a warm-up, not
    the best (the best of noisy passes is biased upward). Falls back to a torch sum where the
    native decoder cannot be built."""
    import ctypes
    import statistics

    import torch
    from specdec.models.native import load
    threads = threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    n = mb * 1024 * 1024 // 4 // 256 * 256
    x = torch.ones(n, dtype=torch.float32)
    lib = load()
    if lib is not None:
        lib.sd_stream.restype = ctypes.c_float
        run = lambda: lib.sd_stream(ctypes.c_void_p(x.data_ptr()), ctypes.c_size_t(n), threads)  # noqa: E731
    else:
        run = x.sum
    run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return n * 4 / statistics.median(times)


def weight_bytes(cfg: dict, bytes_per_param: int = 4) -> int:
    """Bytes of weights read per decode step (HF config.json keys; embedding gather excluded)."""
    d, f, L, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    h = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or d // h
    kvh = cfg.get("num_key_value_heads") or h
    attn = d * h * hd + 2 * d * kvh * hd + h * hd * d
    mlp = 3 * d * f
    norms = 2 * d
    per_layer = attn + mlp + norms
    return bytes_per_param * (L * per_layer + d + V * d)


def kv_bytes(cfg: dict, context: float, bytes_per_value: int = 4) -> float:
    """Bytes of KV cache read per decode step at `context` cached tokens."""
    h = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // h
    kvh = cfg.get("num_key_value_heads") or h
    return bytes_per_value * cfg["num_hidden_layers"] * 2 * kvh * hd * context


def plain_bound(bandwidth: float, cfg: dict, prompt_len: int, new_tokens: int) -> float:
    """Upper bound on plain tokens/s, KV read at the mean context of the generation."""
    mean_ctx = prompt_len + new_tokens / 2
    return bandwidth / (weight_bytes(cfg) + kv_bytes(cfg, mean_ctx))


def expected_tokens(alpha: float, k: int) -> float:
    """E[tokens per round] with k drafts at i.i.d. acceptance α (includes the bonus token)."""
    if k == 0:
        return 1.0
    if alpha >= 1.0:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def spec_bound(plain: float, alpha: float, c: float, k_max: int = 16) -> tuple[float, int]:
    """(upper bound on speculative tokens/s, the k that attains it) given α and c."""
    best = (plain, 0)
    for k in range(1, k_max + 1):
        v = plain * expected_tokens(alpha, k) / (1 + k * c)
        if v > best[0]:
            best = (v, k)
    return best


def main(argv=None) -> int:
    from specdec.defaults import default_draft, default_target
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=str(default_target()))
    ap.add_argument("--draft", default=str(default_draft()))
    ap.add_argument("--prompt-len", type=int, default=129)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--alpha", type=float, default=None, help="measured acceptance rate, if known")
    ap.add_argument("--mb", type=int, default=None, help="probe buffer (default: the target's weight size)")
    args = ap.parse_args(argv)
    tcfg = json.loads((Path(args.target) / "config.json").read_text())
    bw = measure_bandwidth(args.mb or round(weight_bytes(tcfg) / 2**20))
    out = {"bandwidth_GBps": bw / 1e9}
    for role, d in (("target", args.target), ("draft", args.draft)):
        cfgp = Path(d) / "config.json"
        if cfgp.exists():
            cfg = json.loads(cfgp.read_text())
            out[role] = {"weight_MB": weight_bytes(cfg) / 1e6,
                         "plain_bound_tok_s": plain_bound(bw, cfg, args.prompt_len, args.new_tokens)}
    if "target" in out and "draft" in out and args.alpha is not None:
        c = out["target"]["plain_bound_tok_s"] / out["draft"]["plain_bound_tok_s"]
        v, k = spec_bound(out["target"]["plain_bound_tok_s"], args.alpha, c)
        out["spec"] = {"alpha": args.alpha, "c_bytes": c, "bound_tok_s": v, "k": k}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
