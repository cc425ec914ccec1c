"""Standard against invariant sampling coupling: acceptance and tokens/s in the same run.

    python benchmarks/coupling.py --out benchmarks/results/coupling [--quick]

For code (held-out) and prose, at T = 0.7 and 1, the bundled draft model at fixed k
decodes the same seeded prompts at batch 1 with `coupling="standard"` (rejection
sampling) and `coupling="invariant"` (verify/coupling.py). The two engines are stepped in
turn, one decode step each, so the machine's drift hits both alike; tokens/s counts decode
steps only. Per configuration: first-draft acceptance P(d_1 accepted), the acceptance rate,
mean acceptance length (vLLM's definitions) and tokens/s; the ratio invariant/standard is
the median over repeats of the per-repeat ratio.

The bound: with TV the total variation between the target's and the draft's processed
distributions at a context, rejection sampling accepts a draft with probability 1 - TV
and the Gumbel coupling with at least (1 - TV) / (1 + TV). Both are averaged over the
contexts of the standard run's own outputs (one target and one draft forward over each
finished sequence), and set beside the measured first-draft acceptance.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from specdec.analysis.workloads import load_workload
from specdec.build import load_models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.verify.sampling import probs_from_logits

COUPLINGS = ("standard", "invariant")


def lockstep(models, k: int, prompts, temperature: float, new_tokens: int, seed: int) -> dict:
    """Both couplings on the same prompts and seeds, one decode step each in turn."""
    engines, seqs, times = {}, {}, {}
    for c in COUPLINGS:
        eng = make_engine(models, SpecConfig(method="draft", k=k),
                          EngineConfig(max_batch=1, max_model_len=max(map(len, prompts)) + new_tokens + k + 2))
        seqs[c] = [eng.add_request(p, SamplingParams(temperature=temperature, seed=seed + i, max_new_tokens=new_tokens,
                                                     ignore_eos=True, coupling=c)) for i, p in enumerate(prompts)]
        engines[c], times[c] = eng, [0.0, 0]
    while any(e.has_unfinished() for e in engines.values()):
        for c, eng in engines.items():
            if not eng.has_unfinished():
                continue
            before = eng.metrics.generated_tokens
            t0 = time.perf_counter()
            admitted = bool(eng.waiting) and len(eng.running) < eng.config.max_batch
            eng.step()
            if not admitted:                                  # decode steps only
                times[c][0] += time.perf_counter() - t0
                times[c][1] += eng.metrics.generated_tokens - before
    out = {}
    for c, eng in engines.items():
        m = eng.metrics
        out[c] = {"tok_s": times[c][1] / times[c][0] if times[c][0] else 0.0,
                  "first_accept": m.accepted_per_pos[0] / m.num_drafts if m.num_drafts else 0.0,
                  "acceptance_rate": m.acceptance_rate, "mean_acceptance_length": m.mean_acceptance_length,
                  "outputs": [s.token_ids for s in seqs[c]], "prompt_lens": [s.prompt_len for s in seqs[c]]}
    return out


@torch.inference_mode()
def tv_bounds(models, sequences, prompt_lens, temperature: float) -> dict:
    """Mean 1 - TV and mean (1 - TV)/(1 + TV) over the contexts of the generated tokens."""
    one, gumbel = [], []
    t = torch.tensor([temperature])
    for ids, n in zip(sequences, prompt_lens):
        x = torch.tensor([ids[:-1]])
        pos = torch.arange(x.shape[1])[None]
        p = probs_from_logits(models.target(x, pos), t)[0, n - 1:]                   # (T, V)
        q = probs_from_logits(models.draft(x, pos), t)[0, n - 1:]
        tv = 0.5 * (p - q).abs().sum(-1)                                            # (T,)
        one += (1 - tv).tolist()
        gumbel += ((1 - tv) / (1 + tv)).tolist()
    return {"one_minus_tv": statistics.mean(one), "gumbel_bound": statistics.mean(gumbel)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    n, new, repeats = (2, 32, 1) if a.quick else (6, 96, 3)
    models = load_models()
    rows = []
    for workload in ("code", "prose"):
        prompts = load_workload(workload, models.tokenizer, n=n, prompt_tokens=64)
        for temperature in (0.7, 1.0):
            runs = [lockstep(models, a.k, prompts, temperature, new, seed=1000 * r) for r in range(repeats)]
            bound = tv_bounds(models, runs[0]["standard"]["outputs"], runs[0]["standard"]["prompt_lens"], temperature)
            row = {"workload": workload, "temperature": temperature, **bound,
                   "tok_s_ratio": statistics.median(r["invariant"]["tok_s"] / r["standard"]["tok_s"] for r in runs)}
            for c in COUPLINGS:
                for key in ("tok_s", "first_accept", "acceptance_rate", "mean_acceptance_length"):
                    row[f"{c}_{key}"] = statistics.median(r[c][key] for r in runs)
            rows.append(row)
            print(json.dumps(row))
    meta = {"cpu": platform.processor() or platform.machine(), "threads": a.threads, "k": a.k, "prompts": n,
            "new_tokens": new, "repeats": repeats, "torch": torch.__version__}
    try:
        meta["cpu"] = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "coupling.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"Bundled pair, draft k = {a.k}, batch 1, {n} prompts x {new} tokens, {repeats} repeats, "
             f"{a.threads} threads, {meta['cpu']}; `python benchmarks/coupling.py --out {a.out}`", "",
             "| workload | T | P(d1) standard | P(d1) invariant | 1-TV | (1-TV)/(1+TV) | mean acc. len std / inv "
             "| tok/s std / inv | inv/std tok/s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['temperature']} | {r['standard_first_accept']:.3f} | "
                     f"{r['invariant_first_accept']:.3f} | {r['one_minus_tv']:.3f} | {r['gumbel_bound']:.3f} | "
                     f"{r['standard_mean_acceptance_length']:.2f} / {r['invariant_mean_acceptance_length']:.2f} | "
                     f"{r['standard_tok_s']:.0f} / {r['invariant_tok_s']:.0f} | {r['tok_s_ratio']:.3f} |")
    (a.out / "coupling.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
