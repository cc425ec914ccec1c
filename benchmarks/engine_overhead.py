"""The engine's own share of a round: time outside the model forwards, at batch 1.

A round is one `Engine.step()` (propose, verify forward, verify, commit, policy). The
forwards (the target's and the draft's, through the compiled decoder, CUDA graphs or eager
PyTorch) are timed at the model runner's seams (models/runner.py), the only way a cached
forward is run: `ModelRunner.forward`, `ModelRunner.draft` (a whole drafting loop, its
argmaxes and draws counted as forward time, as is the argmax a greedy verify forward
computes) and `ModelRunner.head_draft` (a feature head's round). A seam called inside
another (the draft loop's own forwards) is counted once, in the outer one. Everything else
in the step is the engine's own work: Python bookkeeping, building inputs, verification,
sampling (`ModelRunner.sample_verify` included) and the host sync.

    python benchmarks/engine_overhead.py [--new-tokens 200] [--repeats 5] [--out results/engine_overhead]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch


def measure(engine, prompt, params, repeats: int, forward_time: dict) -> dict:
    """Median over repeats of (share of round time outside forwards, ms per round)."""
    engine.generate([prompt], params)                       # warm-up (and any calibration)
    shares, rounds = [], []
    for _ in range(repeats):
        engine.add_request(prompt, params)
        engine.step()                                       # admission + prefill: not a round
        total, n = 0.0, 0
        forward_time["s"] = 0.0
        while engine.has_unfinished():
            t0 = time.perf_counter()
            engine.step()
            total += time.perf_counter() - t0
            n += 1
        engine.collect_finished()
        shares.append(1 - forward_time["s"] / total)
        rounds.append(total / n * 1e3)
    return {"outside_share": statistics.median(shares), "round_ms": statistics.median(rounds),
            "shares": shares}


def main(argv=None) -> dict:
    from specdec.config import EngineConfig, SamplingParams, SpecConfig
    from specdec.defaults import default_draft, default_target
    from specdec.build import load_models, make_engine
    from specdec.models.runner import ModelRunner
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ks", default="0,2,4")
    ap.add_argument("--out", type=Path, default=Path("results/engine_overhead"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    models = load_models(default_target(), default_draft())
    forward_time = {"s": 0.0}
    seams = ("forward", "draft", "head_draft")                      # ModelRunner's forward-running methods
    real = {name: getattr(ModelRunner, name) for name in seams}
    depth = [0]                                                     # seams in progress (nested: counted once)

    def timer(fn):
        def timed(self, *a, **kw):
            depth[0] += 1
            t0 = time.perf_counter()
            try:
                return fn(self, *a, **kw)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    forward_time["s"] += time.perf_counter() - t0
        return timed
    for name in seams:
        setattr(ModelRunner, name, timer(real[name]))
    prompt = models.tokenizer.frame(models.tokenizer.encode(Path(__file__).read_text()[:600], add_special_tokens=False)[:128])
    rows = []
    for k in [int(x) for x in args.ks.split(",")]:
        spec = SpecConfig(method="none", k=0) if k == 0 else SpecConfig(method="draft", k=k)
        for temp in (0.0, 1.0):
            engine = make_engine(models, spec, EngineConfig(max_batch=1, max_model_len=1024))
            params = SamplingParams(temperature=temp, seed=1, max_new_tokens=args.new_tokens, ignore_eos=True)
            r = measure(engine, prompt, params, args.repeats, forward_time)
            rows.append({"k": k, "temperature": temp, **r})
            print(f"k={k} T={temp:g}: outside forwards {100 * r['outside_share']:.1f}% of a "
                  f"{r['round_ms']:.2f} ms round", flush=True)
    for name in seams:
        setattr(ModelRunner, name, real[name])
    from specdec.costs.cache import _cpu_name
    cpu = _cpu_name()
    result = {"cpu": cpu, "threads": args.threads, "kernel": models.target.kernel.name, "rows": rows,
              "command": "python benchmarks/engine_overhead.py " + " ".join(argv or [])}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
