"""What the adaptive policy costs per step, beyond the forwards that fixed k also runs.

    python benchmarks/policy_overhead.py --out results/policy_overhead      # ~3 min

Two engines on the default pair decode the same prompts at temperature 1: fixed k and
adaptive, where adaptive runs its policy as usual (learning from every round, choosing k
every few rounds while the batch is steady) but is then made to draft the same k. Pick
--k as the k adaptive settles on in that regime (k = 2 at batch 4, k = 1 at batch 16 on
random prompts): when its choice differs from the forced k it sees a switch and
re-evaluates every round, which overstates its steady cost. They step in turn, alternating which goes first, so the
difference of their median step times is what adaptive adds: choosing k, the acceptance
probabilities in verification and the learning. Variants switch parts off to attribute it:

- `choose off`: the policy returns k without computing anything;
- `beta off`: verification computes no acceptance probabilities;
- `all off`: both, and no learning.

Each variant: --repeats fresh engine pairs, median step time over --steps steps each after
the first two (kernel set-up), difference adaptive - fixed. Writes <out>/policy_overhead.json
and <out>/policy_overhead.md.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from specdec.analysis.workloads import load_workload  # noqa: E402
from specdec.config import EngineConfig, SamplingParams, SpecConfig  # noqa: E402
from specdec.defaults import default_draft, default_target  # noqa: E402
from specdec.build import load_models, make_engine  # noqa: E402
from adaptive import calibrated_cost  # noqa: E402  (benchmarks/adaptive.py)

VARIANTS = {"full": (), "choose off": ("choose",), "beta off": ("beta",),
            "all off": ("choose", "beta", "observe")}


def _forced(eng, k: int, off: tuple[str, ...]):
    """Make the adaptive engine draft k every step, with the parts in `off` switched off."""
    policy, choose = eng.policy, eng.policy.choose
    policy.choose = (lambda batch: k) if "choose" in off else (lambda batch: (choose(batch), k)[1])
    if "beta" in off:
        policy.wants_accept_prob = False
    if "observe" in off:
        policy.observe = lambda *a, **kw: None


def measure(models, cost, prompts, args, off) -> tuple[list[float], float]:
    """-> (adaptive - fixed median step seconds per repeat, fixed's median step seconds)."""
    diffs, fixed = [], []
    for r in range(args.repeats):
        engines = {}
        for name, spec in (("fixed", SpecConfig(method="draft" if args.k else "none", k=args.k, k_max=max(args.k, 1))),
                           ("adaptive", SpecConfig(method="draft", k="auto", k_max=args.k_max))):
            eng = make_engine(models, spec, EngineConfig(max_batch=args.batch, max_model_len=args.prompt_tokens + 200),
                              cost_model=cost)
            if name == "adaptive":
                _forced(eng, args.k, off)
            for i, p in enumerate(prompts):
                eng.add_request(p, SamplingParams(temperature=1.0, seed=1000 * i + r, max_new_tokens=150,
                                                  ignore_eos=True))
            eng.step()                                                # admission
            engines[name] = eng
        times = {n: [] for n in engines}
        for s in range(args.steps + 2):
            order = list(engines) if s % 2 else list(reversed(engines))
            for n in order:
                t0 = time.perf_counter()
                engines[n].step()
                times[n].append(time.perf_counter() - t0)
        med = {n: statistics.median(t[2:]) for n, t in times.items()}
        diffs.append(med["adaptive"] - med["fixed"])
        fixed.append(med["fixed"])
    return diffs, statistics.median(fixed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--k-max", type=int, default=8)
    ap.add_argument("--workload", default="random")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=18)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="results/policy_overhead")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    models = load_models(default_target(), default_draft(), threads=args.threads)
    cost = calibrated_cost(models, args.batch, args.k_max, args.prompt_tokens, args.threads)
    prompts = load_workload(args.workload, models.tokenizer, n=args.batch, prompt_tokens=args.prompt_tokens, seed=0)
    rows = []
    for name, off in VARIANTS.items():
        diffs, step = measure(models, cost, prompts, args, off)
        rows.append({"variant": name, "off": list(off), "extra_ms": [d * 1e3 for d in diffs],
                     "median_extra_ms": statistics.median(diffs) * 1e3, "fixed_step_ms": step * 1e3})
        print(f"{name:14s} adaptive - fixed: median {rows[-1]['median_extra_ms']:.3f} ms "
              f"(repeats {', '.join(f'{d * 1e3:.2f}' for d in diffs)}); fixed step {step * 1e3:.1f} ms", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {k: v for k, v in vars(args).items() if k != "out"} | {"torch": torch.__version__}
    (out / "policy_overhead.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = ["# Adaptive policy overhead per step", "", "```", json.dumps(meta, indent=1), "```", "",
             "| variant | parts off | adaptive - fixed (ms, median) | per repeat | fixed step (ms) |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['variant']} | {', '.join(r['off']) or '-'} | {r['median_extra_ms']:.3f} | "
              f"{', '.join(f'{d:.2f}' for d in r['extra_ms'])} | {r['fixed_step_ms']:.1f} |" for r in rows]
    (out / "policy_overhead.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}/policy_overhead.json and {out}/policy_overhead.md")


if __name__ == "__main__":
    main()
