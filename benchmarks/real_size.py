"""What decoding costs at real model sizes on this CPU, per weight type, against llama.cpp.

Random-weight checkpoints with the exact shapes of real models (no hub here) are written once
with transformers into ~/.cache/specdec/real_size and loaded through specdec's loader. For each
shape and weight type it measures, in one process:
  - plain decoding tok/s (prefill included, batch 1) and llama.cpp's `llama-completion` on the
    same weights converted to GGUF (f32 against float32, Q8_0 against int8, Q4_0 against int4),
    same prompt text;
  - the forward's cost curve t(b, q) / t(b, 1) for q positions per row at batch b (the verify
    cost of drafting k = q - 1), 256 cached tokens;
  - the weight bytes streamed per plain step over its time, against the streaming roofline.
Random weights give meaningless acceptance: these are costs only.

    python benchmarks/real_size.py [--shapes qwen2.5-0.5b,llama-3.2-1b] [--dtypes float32,int8,int4]
        [--reps 3] [--no-llamacpp] [--out benchmarks/results/real_size]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llamacpp  # noqa: E402
from roofline import measure_bandwidth  # noqa: E402

from specdec.build import Models, make_engine  # noqa: E402
from specdec.config import EngineConfig, SamplingParams, SpecConfig  # noqa: E402
from specdec.costs.cache import _cpu_name  # noqa: E402
from specdec.defaults import bundled_dir  # noqa: E402
from specdec.models.loader import load_model, load_tokenizer  # noqa: E402
from specdec.models.quantize import quantized_linears  # noqa: E402
from specdec.analysis.what_if import CACHED, forward_times  # noqa: E402

CACHE = Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec")) / "real_size"
# The published configs' shapes. Llama-3.2-1B's llama3 rope scaling is left out: it changes
# the rotary frequencies, not a single byte or FLOP of a step.
SHAPES = {
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                         tie_word_embeddings=True, rope_theta=1e6, rms_norm_eps=1e-6),
    "llama-3.2-1b": dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                         tie_word_embeddings=True, rope_theta=5e5, rms_norm_eps=1e-5),
    "qwen2.5-3b": dict(model_type="qwen2", hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                       num_attention_heads=16, num_key_value_heads=2, vocab_size=151936,
                       tie_word_embeddings=True, rope_theta=1e6, rms_norm_eps=1e-6),
}
GGUF_TYPE = {"float32": "f32", "int8": "q8_0", "int4": "q4_0"}   # llama.cpp's counterpart of each
PROMPT_TOKENS, NEW_TOKENS = 64, 32
CURVE = [(b, q) for b in (1, 4, 16) for q in (1, 2, 3, 5, 9, 16) if b * q <= 64]   # rows per call <= 64


def checkpoint(name: str) -> Path:
    """The random-weight checkpoint of shape `name` (bf16 on disk, written once)."""
    out = CACHE / name
    if (out / "model.safetensors").exists() or (out / "model.safetensors.index.json").exists():
        return out
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = dict(SHAPES[name])
    config = AutoConfig.for_model(cfg.pop("model_type"), max_position_embeddings=4096, bos_token_id=0,
                                  eos_token_id=1, **cfg)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    (out / "tokenizer.json").write_text((bundled_dir() / "tokenizer.json").read_text())
    return out


def prompt_ids(tok) -> list[int]:
    """PROMPT_TOKENS ids of held-out-style code (json.decoder's source), re-encoded from their
    text so that llama.cpp, given the text, reads the same ids."""
    import json.decoder as src
    text = tok.decode(tok.encode(Path(src.__file__).read_text())[1:PROMPT_TOKENS])
    return tok.encode(text)


def weight_stream_bytes(model) -> int:
    """Bytes of linear weights a plain step reads: the weights as stored (int4: two a byte)
    plus their float scales (int8: one per row; int4: one per 32 weights)."""
    scales = lambda m: 4 * m.weight_scale.numel() if hasattr(m, "weight_scale") else 0  # noqa: E731
    return sum(m.weight.numel() * m.weight.element_size() + scales(m) for m in quantized_linears(model))


def curve(model, calls: int) -> dict[str, float]:
    """{"b,q": seconds} of a forward of q positions in each of b rows, CACHED keys cached."""
    out = {}
    for b in sorted({b for b, _ in CURVE}):
        times = forward_times(model, [b], [q for bb, q in CURVE if bb == b], calls)
        out.update({f"{b},{q}": v for (b, q), v in times.items()})
    return out


def specdec_plain(model, tok, ids: list[int], reps: int) -> dict[str, list[float]]:
    """Plain greedy decoding, batch 1: {"total": tok/s of NEW_TOKENS with the prefill included,
    "decode": tok/s of the NEW_TOKENS - 1 after the first (the run less a 1-token run)}."""
    eng = make_engine(Models(model, tok, None), SpecConfig(method="none", k=0),
                      EngineConfig(max_batch=1, max_model_len=PROMPT_TOKENS + NEW_TOKENS + 8))

    def run(n: int) -> float:
        t0 = time.perf_counter()
        eng.generate([ids], SamplingParams(max_new_tokens=n, ignore_eos=True))
        return time.perf_counter() - t0
    run(NEW_TOKENS)                                                                  # warm-up
    out: dict[str, list[float]] = {"total": [], "decode": []}
    for _ in range(reps):
        whole, first = run(NEW_TOKENS), run(1)
        out["total"].append(NEW_TOKENS / whole)
        out["decode"].append((NEW_TOKENS - 1) / max(whole - first, 1e-9))
    return out


def llamacpp_plain(ckpt: Path, outtype: str, tok, ids: list[int], reps: int, threads: int) -> dict[str, list[float]]:
    """llama-completion on the GGUF conversion: the same two figures, from its own timers
    (prompt eval + eval, and eval alone)."""
    bins, why = llamacpp.ensure_built(allow_build=False)
    if bins is None:
        raise RuntimeError(why)
    gguf = llamacpp.convert(ckpt, outtype=outtype)
    runner = llamacpp.LlamaCppRunner("llama.cpp plain", "llama-completion", bins, gguf, tok.decode, threads=threads)
    text = tok.decode(ids[1:])                                                       # it adds the BOS itself
    out: dict[str, list[float]] = {"total": [], "decode": []}
    for i in range(reps + 1):                                                        # the first warms the page cache
        r = subprocess.run(runner.command(text, True, 0, NEW_TOKENS), capture_output=True, text=True)
        log = r.stdout + r.stderr
        pe = re.search(r"prompt eval time =\s*([0-9.]+) ms", log)
        ev = re.search(r"\beval time =\s*([0-9.]+) ms /\s*(\d+) runs", log)
        if r.returncode != 0 or not (pe and ev):
            raise RuntimeError(f"llama-completion: {log[-500:]}")
        if i:
            runs, ms = int(ev.group(2)), float(ev.group(1))
            out["total"].append((runs + 1) / ((float(pe.group(1)) + ms) / 1e3))
            out["decode"].append(runs / (ms / 1e3))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="qwen2.5-0.5b,llama-3.2-1b")
    ap.add_argument("--dtypes", default="float32,int8")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--calls", type=int, default=5, help="timed forwards per point of the cost curve")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/real_size"))
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    a.out.mkdir(parents=True, exist_ok=True)
    results = {"cpu": _cpu_name(), "threads": a.threads, "prompt_tokens": PROMPT_TOKENS, "new_tokens": NEW_TOKENS,
               "cached": CACHED, "torch": torch.__version__, "rows": []}
    results["bandwidth_gbs"] = measure_bandwidth(mb=512, threads=a.threads) / 1e9
    print(f"streaming roofline: {results['bandwidth_gbs']:.1f} GB/s ({_cpu_name()})", flush=True)
    for name in a.shapes.split(","):
        ckpt = checkpoint(name)
        tok = load_tokenizer(ckpt)
        ids = prompt_ids(tok)
        for dtype in a.dtypes.split(","):
            model = load_model(ckpt, weights=dtype)
            row = {"shape": name, "dtype": dtype, "params": model.config.num_params,
                   "native": model.runner.native is not None, "stream_bytes": weight_stream_bytes(model)}
            row["curve_s"] = curve(model, a.calls)
            row["specdec_tok_s"] = specdec_plain(model, tok, ids, a.reps)
            row["achieved_gbs"] = row["stream_bytes"] / row["curve_s"]["1,1"] / 1e9
            del model
            gc.collect()
            if not a.no_llamacpp:
                try:
                    row["llamacpp_tok_s"] = llamacpp_plain(ckpt, GGUF_TYPE[dtype], tok, ids, a.reps, a.threads)
                except Exception as e:  # noqa: BLE001 - a missing build or a failed conversion is a recorded skip
                    row["llamacpp_skip"] = f"{type(e).__name__}: {str(e)[:300]}"
            results["rows"].append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "curve_s"}), flush=True)
            (a.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (a.out / "real_size.md").write_text(table(results) + "\n")
    print(table(results))
    return 0


def table(results: dict) -> str:
    lines = ["| shape | weights | specdec decode tok/s | llama.cpp decode tok/s | ratio | with prefill: specdec | "
             "llama.cpp | t(1) ms | achieved GB/s (roofline {:.1f}) | t(2)/t(1) | t(5)/t(1) | t(9)/t(1) | t(16)/t(1) "
             "| batch 4: t(9)/t(1) | batch 16: t(2)/t(1) |".format(results["bandwidth_gbs"]), "|" + "---|" * 15]
    for r in results["rows"]:
        c, sp = r["curve_s"], {k: statistics.median(v) for k, v in r["specdec_tok_s"].items()}
        ll = {k: statistics.median(v) for k, v in r["llamacpp_tok_s"].items()} if r.get("llamacpp_tok_s") else None
        rel = lambda b, q: f"{c[f'{b},{q}'] / c[f'{b},1']:.2f}" if f"{b},{q}" in c else "—"  # noqa: E731
        fmt = lambda d, k: f"{d[k]:.1f}" if d else "skipped"  # noqa: E731
        ratio = f"{sp['decode'] / ll['decode']:.2f}" if ll else "—"
        lines.append(f"| {r['shape']} | {r['dtype']} | {sp['decode']:.1f} | {fmt(ll, 'decode')} | {ratio} | "
                     f"{sp['total']:.1f} | {fmt(ll, 'total')} | {c['1,1'] * 1e3:.1f} | {r['achieved_gbs']:.1f} | "
                     f"{rel(1, 2)} | {rel(1, 5)} | {rel(1, 9)} | {rel(1, 16)} | {rel(4, 9)} | {rel(16, 2)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
