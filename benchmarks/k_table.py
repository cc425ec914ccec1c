"""The emitted k-by-batch-size table against what specdec's own server measures.

    python benchmarks/k_table.py --out benchmarks/results/k_table [--threads 2] [--repeats 5]

1. Serve the bundled pair on loopback and sweep every (concurrency, k) cell, as
   `specdec analyze --emit-vllm-config --concurrency 1,4,16 --k 1,2,3,4,5,6` does with no
   budget, --sweeps times (the load generator shares the server's cores: one pass of a cell
   moved by 10-20%); each cell at its median tokens/s, the table predicted from all cells.
2. Agreement: at each level, the table's k against the k measured fastest (k = 0 included):
   equal, within one k, or within 3% of that k's measured throughput.
3. Serve again with the table as the server's default (`specdec serve --k-table`) and, per
   level, run the table, the level's best fixed k from step 1 and plain decoding in turn,
   --repeats times; report the medians of the within-repeat ratios (goal: table >= 0.97x the
   best fixed k, and >= 0.97x plain where the table says K = 0).

Writes <out>/k_table.json and <out>/k_table.md.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from specdec.analysis import schedule as S
from specdec.analysis import sweep
from specdec.analysis.endpoint import Endpoint
from specdec.analysis.local_server import serving
from specdec.analysis.workloads import load_workload
from specdec.costs.cache import _cpu_name
from specdec.defaults import MODELS_DIR
from specdec.models.tokenizer import Tokenizer

LEVELS, KS = [1, 4, 16], [1, 2, 3, 4, 5, 6]     # every k the table may choose is measured
GOAL = 0.97


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sweeps", type=int, default=3, help="sweeps over every cell; each cell at its median")
    ap.add_argument("--prompts", type=int, default=16, help="prompts per cell (at least 2 x concurrency)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--workload", default="code")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    tok = Tokenizer.from_file(MODELS_DIR / "tokenizer.json")
    texts = {a.workload: [tok.decode(ids) for ids in load_workload(a.workload, tok, n=a.prompts, prompt_tokens=128)]}
    s = {"concurrencies": LEVELS, "ks": KS, "method": "draft", "max_tokens": a.max_new_tokens, "n": a.prompts}
    args = SimpleNamespace(threads=a.threads, method="draft")
    t0 = time.perf_counter()
    with serving(args, max_batch=max(LEVELS)) as url:
        sweeps = [sweep.sweep(Endpoint(url, None, None), None, texts, s, None, print) for _ in range(a.sweeps)]
    cells = [median_cell([sw[i] for sw in sweeps]) for i in range(len(sweeps[0]))]
    table, per_batch = S.schedule(cells)
    plain = {c.concurrency: c.tokens_per_s for c in cells if c.k == 0}
    agree = []
    for c in LEVELS:
        at = {x.k: x.tokens_per_s for x in cells if x.concurrency == c}
        best = max(at, key=at.get)
        k = table.k_for(c)
        ok = abs(k - best) <= 1 or at[k] >= (1 - 0.03) * at[best]
        agree.append({"concurrency": c, "table_k": k, "best_k": best, "table_k_tps": at[k], "best_tps": at[best],
                      "speedups": {kk: v / plain[c] for kk, v in sorted(at.items())}, "agrees": ok})
    runs = []
    with serving(args, k=table, max_batch=max(LEVELS)) as url:
        ep = Endpoint(url, None, None)
        for c in LEVELS:
            fixed = next(x["best_k"] for x in agree if x["concurrency"] == c)
            modes = {"table": None, "plain": {"method": "none"}}
            if fixed:
                modes["fixed"] = {"method": "draft", "k": fixed}
            ps = sweep.prompts_for(texts, c, a.prompts)
            asyncio.run(ep.run(ps[a.workload][:c], 4, None, c))        # warm the table's engine
            for r in range(a.repeats):
                tps = {m: sweep.pooled(c, 0, {w: asyncio.run(ep.run(p, a.max_new_tokens, sp, c))
                                              for w, p in ps.items()}).tokens_per_s for m, sp in modes.items()}
                runs.append({"concurrency": c, "repeat": r, "fixed_k": fixed, **tps})
                print(f"concurrency {c} repeat {r}: " + " ".join(f"{m} {v:.1f}" for m, v in tps.items()))
    check = []
    for c in LEVELS:
        rs = [x for x in runs if x["concurrency"] == c]
        row = {"concurrency": c, "table_k": table.k_for(c), "fixed_k": rs[0]["fixed_k"],
               "table_vs_plain": statistics.median(x["table"] / x["plain"] for x in rs),
               "table_vs_fixed": statistics.median(x["table"] / x["fixed"] for x in rs) if "fixed" in rs[0] else None}
        ref = row["table_vs_fixed"] if row["table_vs_fixed"] is not None else row["table_vs_plain"]
        row["meets_goal"] = ref >= GOAL and (row["table_k"] > 0 or row["table_vs_plain"] >= GOAL)
        check.append(row)
    meta = {"cpu": _cpu_name(), "threads": a.threads, "workload": a.workload, "prompts": a.prompts,
            "max_new_tokens": a.max_new_tokens, "repeats": a.repeats, "wall_s": time.perf_counter() - t0,
            "command": "python benchmarks/k_table.py " + " ".join(f"--{k.replace('_', '-')} {v}"
                                                               for k, v in vars(a).items() if k != "out")}
    a.out.mkdir(parents=True, exist_ok=True)
    result = {"meta": meta, "table": table.to_vllm(), "per_batch": per_batch, "cells": [c.__dict__ for c in cells],
              "agreement": agree, "runs": runs, "check": check}
    (a.out / "k_table.json").write_text(json.dumps(result, indent=1) + "\n")
    (a.out / "k_table.md").write_text(render(result))
    print(render(result))


def median_cell(same: list[S.Cell]) -> S.Cell:
    """One (concurrency, k) cell from several sweeps: the median tokens/s, the counters summed."""
    n = max(len(c.accepted_per_pos) for c in same)
    return S.Cell(same[0].concurrency, same[0].k, statistics.median(c.tokens_per_s for c in same),
                  sum(c.drafts for c in same),
                  tuple(sum(c.accepted_per_pos[j] for c in same if j < len(c.accepted_per_pos)) for j in range(n)))


def render(r: dict) -> str:
    m = r["meta"]
    out = [f"# k by batch size on specdec serve ({m['cpu']}, {m['threads']} threads, workload {m['workload']})", "",
           f"`{m['command']}` ({m['wall_s']:.0f} s)", "", f"Emitted: `{json.dumps(r['table'])}`", "",
           "| concurrency | table k | measured best k | speed-up over plain by k (measured) | agrees |",
           "|---|---|---|---|---|"]
    for x in r["agreement"]:
        sp = ", ".join(f"{k}: {v:.2f}" for k, v in x["speedups"].items())
        out.append(f"| {x['concurrency']} | {x['table_k']} | {x['best_k']} | {sp} | {'yes' if x['agrees'] else 'NO'} |")
    out += ["", f"The server running the table, medians over {m['repeats']} repeats of the within-repeat ratio:", "",
            "| concurrency | table k | best fixed k | table / plain | table / best fixed k | goal |",
            "|---|---|---|---|---|---|"]
    for x in r["check"]:
        fx = f"{x['table_vs_fixed']:.3f}" if x["table_vs_fixed"] is not None else "-"
        out.append(f"| {x['concurrency']} | {x['table_k']} | {x['fixed_k']} | {x['table_vs_plain']:.3f} | {fx} | "
                   f"{'met' if x['meets_goal'] else 'MISSED'} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
