"""Parallel drafting against a sequential baseline, every row in one run.

    python benchmarks/parallel.py --out benchmarks/results/parallel-2026-12-07-zen4        # bundled target, code
    python benchmarks/parallel.py --target SmolLM2.gguf --parallel DIR --baseline eagle \
        --workload chat --out DIR                                                          # a chat target

Batch 1, held-out prompts of one workload (specdec.analysis.workloads), --new-tokens per
request. For each sampling mode (greedy, and T = 1 by default) the same prompts are decoded
plainly, by the baseline (`draft`: the sequential draft model; or `eagle`: a feature head) at
each k of --ks, and by the parallel draft (`--method parallel`) at each k of --ks: one engine
per row, built once and warmed up, the rows interleaved prompt by prompt so that a drift of
the machine reaches all of them alike. tokens/s = new tokens / wall time of the request's
generate call (prefill included); a row's figure is the median over the prompts. Each method's
best k is the row with the highest median; the headline is parallel's best over the
baseline's best, per mode. Acceptance by position (vLLM's: the share of drafting rounds whose
first j drafts were accepted) comes from the same runs. Greedy rows must equal plain output.
The forwards a round is made of are timed alone at the end (costs/profiling.py), to show where
a round's time goes. Writes results.json and README.md (the command, the machine, the tables).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from specdec.analysis.workloads import load_workload
from specdec.build import Models, find_head, load_models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.costs.cache import _cpu_name
from specdec.costs.profiling import time_forwards
from specdec.defaults import MODELS_DIR, default_draft, default_target
from specdec.engine.metrics import EngineMetrics
from specdec.models.head_loader import load_head
from specdec.models.loader import load_model
from specdec.models.mask_token import read_mask

SEED = 1234          # request i is seeded SEED + i: every row samples alike
WARM_TOKENS = 16     # one untimed request per engine first: the compiled decoder's first calls
ROOM = 8             # cache positions beyond prompt and new tokens


def rows_of(args) -> list[tuple[str, int]]:
    return [("none", 0)] + [(args.baseline, k) for k in args.ks] + [("parallel", k) for k in args.ks]


def engines(args, target, tok, draft, parallel, head, longest: int) -> dict:
    """(method, k) -> a warmed engine, each with its own model's caches."""
    out = {}
    for method, k in rows_of(args):
        model = {"draft": draft, "parallel": parallel}.get(method)
        eng = make_engine(Models(target, tok, model, head=head if method == "eagle" else None),
                          SpecConfig(method=method, k=k), EngineConfig(max_batch=1, max_model_len=longest))
        out[(method, k)] = eng
    return out


def decode(eng, prompt, temperature: float, seed: int, new: int):
    sp = SamplingParams(temperature=temperature, seed=seed, max_new_tokens=new, ignore_eos=True)
    t = time.perf_counter()
    (seq,) = eng.generate([prompt], sp)
    return seq.output_ids, time.perf_counter() - t


def run_mode(engs: dict, prompts, temperature: float, new: int) -> list[dict]:
    for eng in engs.values():                     # warm-up, then count only the timed requests
        decode(eng, prompts[0], temperature, SEED, WARM_TOKENS)
        eng.metrics = EngineMetrics()
    per = {key: [] for key in engs}
    outs = {key: [] for key in engs}
    for i, prompt in enumerate(prompts):
        for key, eng in engs.items():
            ids, wall = decode(eng, prompt, temperature, SEED + i, new)
            per[key].append(len(ids) / wall)
            outs[key].append(ids)
    rows = []
    for (method, k), eng in engs.items():
        m = eng.metrics
        rows.append({"method": method, "k": k, "tok_s": statistics.median(per[(method, k)]),
                     "tok_s_per_prompt": per[(method, k)],
                     "mean_acceptance_length": 1 + m.num_accepted_tokens / m.num_drafts if m.num_drafts else 1.0,
                     "per_position_acceptance": [a / m.num_drafts for a in m.accepted_per_pos] if m.num_drafts else [],
                     "identical_to_plain": outs[(method, k)] == outs[("none", 0)] if temperature == 0 else None})
    return rows


def round_forwards(target, draft, parallel, k: int) -> dict:
    """Seconds of the forwards of one batch-1 round at cache length 128, timed alone: the
    target's verify (k + 1 positions), a draft step (1), the parallel draft's one forward (k + 1)."""
    out = {"verify_s": time_forwards(target, 1, 128, [k + 1])[k + 1], "plain_s": time_forwards(target, 1, 128, [1])[1]}
    if draft is not None:
        out["draft_step_s"] = time_forwards(draft, 1, 128, [1])[1]
    out["parallel_forward_s"] = time_forwards(parallel, 1, 128, [k + 1])[k + 1]
    return out


def best(rows, method) -> dict:
    return max((r for r in rows if r["method"] == method), key=lambda r: r["tok_s"])


def readme(args, res) -> str:
    lines = [f"# Parallel drafting vs {args.baseline}: {args.workload}, batch 1, {args.new_tokens} new tokens",
             "", "```bash", "flock /tmp/specdec-cpu.lock python " + " ".join(sys.argv), "```", "",
             f"CPU: {res['cpu']}; torch {torch.__version__}, {args.threads} threads; {res['date']}. "
             f"Target `{res['target']}`, baseline `{res['baseline_model']}`, parallel draft `{res['parallel']}`; "
             f"{len(res['prompts'])} held-out prompts, medians over them.", ""]
    for mode in res["modes"]:
        rows = mode["rows"]
        b, p = best(rows, args.baseline), best(rows, "parallel")
        lines += [f"## T = {mode['temperature']:g}", "",
                  f"parallel's best (k = {p['k']}) over {args.baseline}'s best (k = {b['k']}): "
                  f"**{p['tok_s'] / b['tok_s']:.2f}x** ({p['tok_s']:.1f} vs {b['tok_s']:.1f} tok/s; plain "
                  f"{best(rows, 'none')['tok_s']:.1f})", "",
                  "| method | k | tok/s (median) | mean acceptance length | acceptance by position | greedy = plain |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            pos = " ".join(f"{a:.2f}" for a in r["per_position_acceptance"])
            same = "" if r["identical_to_plain"] is None else ("yes" if r["identical_to_plain"] else "NO")
            lines.append(f"| {r['method']} | {r['k']} | {r['tok_s']:.1f} | {r['mean_acceptance_length']:.2f} | "
                         f"{pos} | {same} |")
        lines.append("")
    f = res["forwards"]
    lines += ["## Where a round's time goes (forwards timed alone, batch 1, 128 cached tokens)", "",
              "| k | target verify (k+1) | plain step | draft step x k | parallel forward (k+1) |", "|---|---|---|---|---|"]
    for k, t in f.items():
        lines.append(f"| {k} | {t['verify_s'] * 1e3:.2f} ms | {t['plain_s'] * 1e3:.2f} ms | "
                     + (f"{t['draft_step_s'] * int(k) * 1e3:.2f} ms" if "draft_step_s" in t else "-")
                     + f" | {t['parallel_forward_s'] * 1e3:.2f} ms |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", type=Path, default=None, help="default: the bundled target")
    ap.add_argument("--draft", type=Path, default=None, help="the sequential baseline draft (default: bundled)")
    ap.add_argument("--parallel", type=Path, default=MODELS_DIR / "draft-parallel")
    ap.add_argument("--baseline", choices=["draft", "eagle"], default="draft")
    ap.add_argument("--head", type=Path, help="eagle baseline: its head (default: the target's shipped one)")
    ap.add_argument("--workload", default="code")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--ks", type=lambda s: [int(x) for x in s.split(",")], default=[2, 3, 4, 5, 6, 8])
    ap.add_argument("--temperatures", type=lambda s: [float(x) for x in s.split(",")], default=[0.0, 1.0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target_path = args.target or default_target()
    draft_path = args.draft or default_draft() if args.baseline == "draft" else None
    models = load_models(target_path, draft_path)
    target, tok = models.target, models.tokenizer
    parallel = load_model(args.parallel, exact=False)
    parallel.mask_token = read_mask(args.parallel, parallel.config.hidden_size)
    head = None
    if args.baseline == "eagle":
        head = load_head(args.head or find_head(Path(target_path)), target, Path(target_path))
    prompts = load_workload(args.workload, tok, n=args.n, prompt_tokens=args.prompt_tokens)
    longest = max(len(p) for p in prompts) + args.new_tokens + ROOM
    engs = engines(args, target, tok, models.draft, parallel, head, longest)
    modes = [{"temperature": T, "rows": run_mode(engs, prompts, T, args.new_tokens)} for T in args.temperatures]
    ks = sorted({best(m["rows"], meth)["k"] for m in modes for meth in (args.baseline, "parallel")})
    res = {"cpu": _cpu_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "target": str(target_path), "baseline": args.baseline,
           "baseline_model": str(draft_path or args.head or "shipped head"), "parallel": str(args.parallel),
           "workload": args.workload, "new_tokens": args.new_tokens, "threads": args.threads,
           "prompts": [len(p) for p in prompts], "modes": modes,
           "forwards": {k: round_forwards(target, models.draft, parallel, k) for k in ks}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(res, indent=1) + "\n")
    (args.out / "README.md").write_text(readme(args, res))
    print(readme(args, res))


if __name__ == "__main__":
    main()
