"""Every figure in models/README.md: perplexity, cost ratio c, acceptance and speed.

    python benchmarks/model_card.py --out results/model_card [--threads 2] [--n 8] [--new-tokens 128]

- held-out perplexity of the target and each draft on held-out code and on prose;
- t(5)/t(1) of the target and the draft cost ratio c = t_draft(1 token) / t_target(1 token), batch 1;
- acceptance at k = 4 (vLLM's rate, mean acceptance length, acceptance by position), greedy and
  temperature 1, on held-out code and prose, for each draft and the EAGLE head, with the
  repetition fraction of the outputs (specdec/repetition.py) beside each row;
- the target's own quality: greedy and T = 0.8 repetition over 20 held-out prompts, and samples
  (benchmarks/model_quality.py);
- tokens/s of speculative decoding (each draft, k = 4 and adaptive k) against plain decoding on
  held-out code at batch 1, measured side by side: medians over repeats, order alternated.

The models are the bundled ones, or those of $SPECDEC_MODELS (a folder laid out as
specdec/bundled/) to measure a candidate set before it is bundled.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from specdec.repetition import mean_repetition
from specdec.analysis.workloads import load_workload
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.defaults import MODELS_DIR
from specdec.build import Models, make_engine
from specdec.models.head_loader import load_head
from specdec.models.loader import load_model, load_tokenizer
from specdec.train.data import perplexity, token_stream

from decode_cost import time_q
from model_quality import quality


def run(target, draft, spec, prompts, params, head=None) -> dict:
    eng = make_engine(Models(target, None, draft, head=head), spec, EngineConfig(max_batch=1, max_model_len=512))
    t0 = time.perf_counter()
    seqs = eng.generate(prompts, params)
    wall = time.perf_counter() - t0
    m, outs = eng.metrics, [s.output_ids for s in seqs]
    return {"tokens_per_s": sum(s.num_output for s in seqs) / wall, "acceptance": m.acceptance_rate,
            "mean_acceptance_length": m.mean_acceptance_length,
            "by_position": [a / max(m.num_drafts, 1) for a in m.accepted_per_pos],
            "repetition": mean_repetition(outs), "outputs": outs}


def main(argv=None):
    ap = argparse.ArgumentParser(description="measure the model card's figures")
    ap.add_argument("--out", type=Path, default=Path("results/model_card"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=8, help="prompts per workload")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quality-n", type=int, default=20, help="held-out prompts for the target's repetition")
    ap.add_argument("--drafts", default="draft,draft-distill")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tok = load_tokenizer(MODELS_DIR / "target")
    target = load_model(MODELS_DIR / "target")
    drafts = {n: load_model(MODELS_DIR / n) for n in args.drafts.split(",") if (MODELS_DIR / n).exists()}
    head = load_head(MODELS_DIR / "eagle", target, MODELS_DIR / "target") if (MODELS_DIR / "eagle").exists() else None
    res = {"threads": args.threads, "command": "python benchmarks/model_card.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    # 1. perplexity
    streams = {"code": token_stream(tok, "heldout"), "prose": token_stream(tok, "prose")}
    res["perplexity"] = {name: {w: perplexity(m, s) for w, s in streams.items()}
                         for name, m in {"target": target, **drafts}.items()}
    print(json.dumps(res["perplexity"]))
    # 2. costs
    t1, t5 = time_q(target, 1, 1, 128, 40), time_q(target, 5, 1, 128, 40)
    res["target_t5_over_t1"] = t5 / t1
    res["c"] = {n: time_q(d, 1, 1, 128, 40) / t1 for n, d in drafts.items()}
    print(json.dumps({"t5/t1": res["target_t5_over_t1"], "c": res["c"]}))
    # 3. acceptance at k = 4, with the outputs' repetition
    prompts = {w: load_workload(w, tok, n=args.n, prompt_tokens=128) for w in ("code", "prose")}
    res["acceptance_k4"] = {}
    proposers = {n: (d, None, "draft") for n, d in drafts.items()}
    if head is not None:
        proposers["eagle"] = (None, head, "eagle")
    for n, (d, h, method) in proposers.items():
        for w, ps in prompts.items():
            for temp in (0.0, 1.0):
                params = [SamplingParams(temperature=temp, seed=i, max_new_tokens=args.new_tokens, ignore_eos=True)
                          for i in range(len(ps))]
                r = run(target, d, SpecConfig(method=method, k=4), ps, params, head=h)
                res["acceptance_k4"][f"{n}/{w}/T={temp}"] = {k: r[k] for k in (
                    "acceptance", "mean_acceptance_length", "by_position", "repetition")}
                print(n, w, temp, res["acceptance_k4"][f"{n}/{w}/T={temp}"])
    # 3b. the target's own quality over held-out prompts (model_quality.py)
    res["target_quality"] = quality(MODELS_DIR / "target", args.quality_n, 128, 128)
    # 4. speed on held-out code, batch 1, greedy
    params = SamplingParams(max_new_tokens=args.new_tokens, ignore_eos=True)
    ps = prompts["code"]
    configs = {"plain": (None, SpecConfig(method="none", k=0))}
    for n, d in drafts.items():
        configs[f"{n} k=4"] = (d, SpecConfig(method="draft", k=4))
        configs[f"{n} k=auto"] = (d, SpecConfig(method="draft", k="auto"))
    for name, (d, spec) in configs.items():   # warm-up (also measures the adaptive cost model)
        run(target, d, spec, ps[:1], SamplingParams(max_new_tokens=16, ignore_eos=True))
    speeds, repetition = {name: [] for name in configs}, {}
    identical = {}
    plain_out = None
    for rep in range(args.repeats):
        order = list(configs) if rep % 2 == 0 else list(reversed(configs))
        for name in order:
            d, spec = configs[name]
            r = run(target, d, spec, ps, params)
            speeds[name].append(r["tokens_per_s"])
            repetition[name] = r["repetition"]
            if name == "plain":
                plain_out = r["outputs"]
            else:
                identical.setdefault(name, []).append(r["outputs"])
    med = {n: statistics.median(v) for n, v in speeds.items()}
    res["speed_code_b1"] = {n: {"tokens_per_s": med[n], "speedup": med[n] / med["plain"],
                                "identical_to_plain": all(o == plain_out for o in identical.get(n, [plain_out]))}
                            for n in configs}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(res, indent=2))
    md = ["| configuration | tokens/s | speed-up | identical to plain | repetition |", "|---|---|---|---|---|"]
    md += [f"| {n} | {v['tokens_per_s']:.1f} | {v['speedup']:.2f}x | {v['identical_to_plain']} | {repetition[n]:.2f} |"
           for n, v in res["speed_code_b1"].items()]
    md += ["", "| proposer / workload / T | acceptance | mean acceptance length | by position | repetition |",
           "|---|---:|---:|---|---:|"]
    md += [f"| {n} | {a['acceptance']:.2f} | {a['mean_acceptance_length']:.2f} | "
           f"{' '.join(f'{x:.2f}' for x in a['by_position'])} | {a['repetition']:.2f} |"
           for n, a in res["acceptance_k4"].items()]
    (args.out / "card.md").write_text(f"`{res['command']}`\n\n" + "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
