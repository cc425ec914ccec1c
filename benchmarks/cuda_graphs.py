"""The CUDA path: eager PyTorch against captured CUDA graphs, on the bundled pair.

Per-forward latency of the target (T = 1 and T = 9, 256 cached tokens) and end-to-end greedy
tokens/s on held-out code (plain, draft k = 4) at batch 1 and 8. Each row
is a median over repeats, eager and graphs interleaved in one run; the outputs of eager and
graphs must match token for token.

    python benchmarks/cuda_graphs.py [--repeats 3] [--new-tokens 128] [--out results/cuda_graphs]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from specdec.analysis.workloads import load_workload
from specdec.build import load_models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig

CACHED = 256      # context of the per-forward timing, as decode_cost.py uses
CALLS = 50        # forwards per latency sample


def forward_ms(model, T: int) -> float:
    cache = model.new_cache(1, 512)
    dev = model.device
    with torch.inference_mode():
        model.eager(torch.randint(2, 8000, (1, CACHED), device=dev), torch.arange(CACHED, device=dev)[None], cache)
        toks = torch.randint(2, 8000, (1, T), device=dev)
        pos = (torch.arange(T, device=dev) + CACHED)[None]
        for _ in range(5):
            model(toks, pos, cache)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(CALLS):
            model(toks, pos, cache)
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / CALLS * 1e3


def tok_s(models, spec, prompts, params, batch) -> tuple[float, list]:
    eng = make_engine(models, spec, EngineConfig(max_batch=batch, max_model_len=512, device="cuda"))
    eng.generate(prompts[:1], params[:1])                                    # capture, warm up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    seqs = eng.generate(prompts, params)
    torch.cuda.synchronize()
    return sum(s.num_output for s in seqs) / (time.perf_counter() - t0), [s.output_ids for s in seqs]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, default=Path("results/cuda_graphs"))
    args = ap.parse_args(argv)
    paths = {"eager": load_models(device="cuda", compile=False), "graphs": load_models(device="cuda")}
    prompts = load_workload("code", paths["eager"].tokenizer, n=8, prompt_tokens=128)
    params = [SamplingParams(temperature=0, max_new_tokens=args.new_tokens, ignore_eos=True)] * len(prompts)
    rows, texts = [], {}
    lat = {(n, T): [] for n in paths for T in (1, 9)}
    for _ in range(args.repeats):
        for n, m in paths.items():
            for T in (1, 9):
                lat[(n, T)].append(forward_ms(m.target, T))
    for n in paths:
        rows.append({"row": f"target forward, {n}", "t1_ms": statistics.median(lat[(n, 1)]),
                     "t9_ms": statistics.median(lat[(n, 9)])})
    configs = [("plain", SpecConfig(method="none", k=0)), ("draft k=4", SpecConfig(method="draft", k=4))]
    for batch in (1, 8):
        for name, spec in configs:
            runs = {n: [] for n in paths}
            for _ in range(args.repeats):
                for n, m in paths.items():
                    rate, out = tok_s(m, spec, prompts[:batch] if batch == 1 else prompts, params, batch)
                    runs[n].append(rate)
                    texts.setdefault((batch, name), {})[n] = out
            same = texts[(batch, name)]["eager"] == texts[(batch, name)]["graphs"]
            rows.append({"row": f"{name}, batch {batch}", **{f"{n}_tok_s": statistics.median(v) for n, v in runs.items()},
                         "same_tokens": same})
    plain_ids = {b: texts[(b, "plain")]["graphs"] for b in (1, 8)}
    for b in (1, 8):
        for name, _ in configs[1:]:
            rows.append({"row": f"{name}, batch {b}: graphs' tokens equal plain graphs'",
                         "same_tokens": texts[(b, name)]["graphs"] == plain_ids[b]})
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "repeats": args.repeats,
              "rows": rows, "command": "python benchmarks/cuda_graphs.py " + " ".join(argv or [])}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2))
    md = [f"CUDA path, bundled pair, greedy held-out code, median of {args.repeats}; {result['device']}, "
          f"torch {result['torch']}", "", "| row | eager | graphs | graphs / eager | same tokens |", "|---|---|---|---|---|"]
    for r in rows:
        if "t1_ms" in r:
            md.append(f"| {r['row']} | t(1) {r['t1_ms']:.2f} ms, t(9) {r['t9_ms']:.2f} ms | | | |")
        elif "eager_tok_s" in r:
            md.append(f"| {r['row']} tok/s | {r['eager_tok_s']:.0f} | {r['graphs_tok_s']:.0f} | "
                      f"{r['graphs_tok_s'] / r['eager_tok_s']:.2f} | {r['same_tokens']} |")
        else:
            md.append(f"| {r['row']} | | | | {r['same_tokens']} |")
    (args.out / "results.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return result


if __name__ == "__main__":
    main()
