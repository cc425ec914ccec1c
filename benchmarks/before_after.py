"""specdec at two commits, side by side: the peers' plain and draft rows (batch 1, bundled pair,
128 new tokens, greedy and T = 1), so a refactoring can show it costs no speed.

    python benchmarks/before_after.py --before f81c20f [--after HEAD] [--repeats 5] [--out DIR]

Each commit is checked out (`git worktree add --detach`) into a temporary folder; each
measurement is a fresh process running that checkout's `specdec` through the public API
(`LLM(method=..., k=4, max_batch=1)`), which loads the models, warms up once, then times
`LLM.generate` on the same prompts (code and prose, 128 tokens each). The two commits
alternate, the order flipping every repeat, so a slow spell of the machine falls on both.
Reported per row: each commit's median tok/s and the median of the per-repeat ratios
after / before. Threads are set explicitly (--threads).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cold_start import cpu_model     # benchmarks/cold_start.py: name, family and model

ROOT = Path(__file__).resolve().parents[1]
ROWS = {"plain": dict(method="none"), "draft k=4": dict(method="draft", k=4)}
MODES = {"greedy": dict(temperature=0.0), "T=1": dict(temperature=1.0, seed=1234)}


def child(argv: list[str]) -> int:
    """In a fresh process on one checkout: tok/s of each (row, mode), one generation each."""
    import torch
    from specdec import LLM, SamplingParams
    from specdec.analysis.workloads import load_workload
    threads, new_tokens = int(argv[0]), int(argv[1])
    torch.set_num_threads(threads)
    out = {}
    for row, kw in ROWS.items():
        llm = LLM(max_batch=1, threads=threads, **kw)
        tok = llm.tokenizer
        prompts = [{"prompt_token_ids": p} for p in (load_workload("code", tok, n=1, prompt_tokens=128)
                                                     + load_workload("prose", tok, n=1, prompt_tokens=128))]
        for mode, mkw in MODES.items():
            params = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True, **mkw)
            llm.generate(prompts[:1], params)                           # warm-up
            rates = []
            for p in prompts:
                t = time.perf_counter()
                res = llm.generate([p], params)[0]
                rates.append(len(res.token_ids) / (time.perf_counter() - t))
            out[f"{row} {mode}"] = statistics.median(rates)
    print(json.dumps(out))
    return 0


def run(tree: Path, threads: int, new_tokens: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "SPECDEC_CACHE": str(tree / ".cache")}
    proc = subprocess.run([sys.executable, __file__, "_child", str(threads), str(new_tokens)], cwd=tree,
                          env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{tree}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_child"]:
        return child(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", default="HEAD")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="specdec-ab-"))
    trees = {}
    for name in ("before", "after"):
        rev = subprocess.run(["git", "rev-parse", getattr(args, name)], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        trees[name] = (rev, tmp / name)
        subprocess.run(["git", "worktree", "add", "--detach", str(tmp / name), rev], cwd=ROOT, check=True,
                       capture_output=True)
    try:
        runs = {"before": [], "after": []}
        for r in range(args.repeats):
            for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                runs[name].append(run(trees[name][1], args.threads, args.new_tokens))
                print(f"repeat {r} {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in runs[name][-1].items()), flush=True)
    finally:
        for _, tree in trees.values():
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    rows = {}
    for key in runs["before"][0]:
        b, a = [x[key] for x in runs["before"]], [x[key] for x in runs["after"]]
        rows[key] = {"before": statistics.median(b), "after": statistics.median(a),
                     "median_ratio": statistics.median(y / x for x, y in zip(b, a))}
    cpu = cpu_model()
    lines = [f"CPU: {cpu}; threads {args.threads}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             f"before {trees['before'][0][:10]}, after {trees['after'][0][:10]}; "
             f"`python benchmarks/before_after.py {' '.join(argv)}`", "",
             "| row | before tok/s | after tok/s | after / before (median of per-repeat ratios) |", "|---|---:|---:|---:|"]
    lines += [f"| {k} | {v['before']:.1f} | {v['after']:.1f} | {v['median_ratio']:.3f} |" for k, v in rows.items()]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "before_after.json").write_text(json.dumps({"rows": rows, "runs": runs, "before": trees["before"][0],
                                                                 "after": trees["after"][0]}, indent=1))
        (args.out / "before_after.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
