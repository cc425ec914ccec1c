"""Is adaptive's acceptance estimate right, and where does a fixed k's throughput go?

    python benchmarks/acceptance_check.py --workload code --batch 4 --k 2 4 6 \
        --out results/acceptance_check                                        # ~2 min

For one workload and batch size, the default pair decodes the same prompts at temperature
1 once per k in --k: an adaptive engine made to draft that k in every round, while its
acceptance tracker (adaptive/acceptance.py) learns from every round as usual. For each k:

- estimate: the tracker's P(A >= j) for j = 1..k_max (A: drafts accepted in a round), the
  mean of its readings every --every rounds. Positions past the drafted k are predictions
  (they inherit their neighbour's estimate);
- realized: the fraction of drafting rows with at least j drafts accepted (the engine's
  vLLM-style per-position counts), for j = 1..k;
- decode tokens/s by the number of rows in the round. A closed batch's tail (fewer rows)
  and admission steps (prefill; neither timed nor counted here, as in
  benchmarks/adaptive.py) weigh more in a larger k's run, which takes fewer rounds.

An unbiased estimate matches realized at every drafted position, whatever the k.

- simulated: the full-batch and tail rounds a closed batch of identical rows would take
  (each row's accepted count drawn independently every round from the realized P(A >= j);
  means over 2000 draws), beside the measured ones. Where they agree, the tail comes from
  chance alone; measured tail rounds beyond it come from rows that differ.

Writes <out>/acceptance_check.json and <out>/acceptance_check.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from specdec.analysis.workloads import load_workload  # noqa: E402
from specdec.config import EngineConfig, SamplingParams  # noqa: E402
from specdec.defaults import default_draft, default_target  # noqa: E402
from specdec.build import load_models, make_engine  # noqa: E402
from adaptive import REQUESTS, calibrated_cost, spec_for  # noqa: E402  (benchmarks/adaptive.py)


def run_forced(models, cost, prompts, params, k: int, args) -> dict:
    """One engine drafting k every round while adaptive's tracker learns."""
    cfg = EngineConfig(max_batch=args.batch, max_model_len=args.prompt_tokens + args.max_new_tokens + 1)
    eng = make_engine(models, spec_for(("draft", "auto"), args.k_max), cfg, cost_model=cost)
    policy, choose = eng.policy, eng.policy.choose
    policy.choose = lambda batch: (choose(batch), k)[1]        # learn and evaluate as usual, draft k
    key = policy.proposer.cost_key()
    for prompt, sp in zip(prompts, params):
        eng.add_request(prompt, sp)
    readings, by_rows = [], {}                                 # rows -> [rounds, seconds, tokens]
    while eng.has_unfinished():
        rows, steps, made = len(eng.running), eng.metrics.steps, eng.metrics.generated_tokens
        t0 = time.perf_counter()
        eng.step()
        dt = time.perf_counter() - t0
        if eng.metrics.steps == steps:                         # an admission step
            continue
        e = by_rows.setdefault(rows, [0, 0.0, 0])
        e[0], e[1], e[2] = e[0] + 1, e[1] + dt, e[2] + eng.metrics.generated_tokens - made
        if eng.metrics.steps % args.every == 0:
            readings.append(np.cumprod(policy.acc.proposer_means(key, params[0].verification)).tolist())
    m = eng.metrics.as_dict()
    return {"k": k, "estimate": np.mean(readings, axis=0).tolist(),
            "realized": m["per_position_acceptance"], "mean_acceptance_length": m["mean_acceptance_length"],
            "by_rows": {r: {"rounds": n, "tok_s": t / s} for r, (n, s, t) in sorted(by_rows.items())},
            "tok_s": sum(e[2] for e in by_rows.values()) / sum(e[1] for e in by_rows.values())}


def simulate_closed_batch(realized: list[float], rows: int, tokens: int, draws: int = 2000,
                          seed: int = 0) -> tuple[float, float]:
    """-> mean (full-batch rounds, rounds with fewer rows) for `rows` identical requests of
    `tokens` tokens, each round emitting 1 + A tokens per row with P(A >= j) = realized[j-1]."""
    at_least = np.array([1.0] + list(realized) + [0.0])                         # P(A >= j), j = 0..k+1
    p = np.clip(at_least[:-1] - at_least[1:], 0.0, None)                       # P(A = j), j = 0..k
    rng = np.random.default_rng(seed)
    full = tail = 0
    for _ in range(draws):
        made = np.zeros(rows)
        while (active := made < tokens).any():
            full, tail = (full + 1, tail) if active.all() else (full, tail + 1)
            made[active] += 1 + rng.choice(len(p), size=int(active.sum()), p=p / p.sum())
    return full / draws, tail / draws


def render(result: dict) -> str:
    out = [f"{result['workload']}, batch {result['batch']}, temperature 1, {result['threads']} threads: "
           "P(A >= j), the tracker's estimate (mean over the run) / realized", "",
           "| k | " + " | ".join(f"j={j}" for j in range(1, result["k_max"] + 1))
           + " | decode tok/s | full-batch tok/s (rounds) | fewer rows (rounds) | simulated full / fewer |",
           "|---|" + "---|" * (result["k_max"] + 4)]
    for r in result["runs"]:
        cells = [f"{e:.3f} / {r['realized'][j]:.3f}" if j < len(r["realized"]) else f"{e:.3f}"
                 for j, e in enumerate(r["estimate"])]
        full = r["by_rows"].get(result["batch"], {"rounds": 0, "tok_s": float("nan")})
        tail = sum(v["rounds"] for b, v in r["by_rows"].items() if b != result["batch"])
        out.append(f"| {r['k']} | " + " | ".join(cells) + f" | {r['tok_s']:.1f} | {full['tok_s']:.1f} "
                   f"({full['rounds']}) | {tail} | " + ("{:.1f} / {:.1f}".format(*r["simulated"]) if "simulated" in r else "–") + " |")
    return "\n".join(out + ["", f"    {result['command']}", ""])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="code")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--k", type=int, nargs="+", default=[2, 4, 6])
    ap.add_argument("--k-max", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--every", type=int, default=5, help="read the estimate every this many rounds")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("results/acceptance_check"))
    args = ap.parse_args(argv)
    if any(k < 1 or k > args.k_max for k in args.k) or args.batch < 1 or args.every < 1:
        ap.error("need 1 <= k <= --k-max, --batch >= 1 and --every >= 1")
    torch.set_num_threads(args.threads)
    models = load_models(default_target(), default_draft())
    cost = calibrated_cost(models, args.batch, args.k_max, args.prompt_tokens, args.threads)
    prompts = load_workload(args.workload, models.tokenizer, n=REQUESTS.get(args.batch, args.batch),
                            prompt_tokens=args.prompt_tokens, seed=0)
    params = [SamplingParams(temperature=1.0, seed=1000 * i + 7, max_new_tokens=args.max_new_tokens,
                             ignore_eos=True) for i in range(len(prompts))]
    runs = [run_forced(models, cost, prompts, params, k, args) for k in args.k]
    if args.batch > 1 and len(prompts) == args.batch:          # one closed batch
        for r in runs:
            r["simulated"] = simulate_closed_batch(r["realized"], args.batch, args.max_new_tokens)
    result = {"workload": args.workload, "batch": args.batch, "k_max": args.k_max, "threads": args.threads,
              "runs": runs, "command": "python benchmarks/acceptance_check.py " + " ".join(argv or sys.argv[1:])}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "acceptance_check.json").write_text(json.dumps(result, indent=2))
    md = render(result)
    (args.out / "acceptance_check.md").write_text(md)
    print(md)
    return result


if __name__ == "__main__":
    main()
