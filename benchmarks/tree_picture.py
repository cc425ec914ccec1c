"""Draw one real token tree of the bundled pair, with the branch the target accepted.

Greedy decoding of a held-out code prompt with `--tree`; the first round whose accepted
branch left the draft's first choice is drawn (docs/img/tree.png), nodes as their text,
placed by depth, the accepted branch in colour.

    python benchmarks/tree_picture.py [--k 4] [--tree 16] [--out docs/img/tree.png]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib
import torch

from specdec.analysis.workloads import load_workload
from specdec.build import Models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.defaults import MODELS_DIR
from specdec.models.loader import load_model, load_tokenizer
from specdec.verify.tree import children

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def capture(k: int, budget: int, prompts: int = 4):
    """(tokenizer, context ids, tree tokens, parents, accepted path) of the first round whose
    branch was not the first child all the way."""
    tok = load_tokenizer(MODELS_DIR / "target")
    target = load_model(MODELS_DIR / "target")
    draft = load_model(MODELS_DIR / (MODELS_DIR / "default_draft.txt").read_text().strip())
    eng = make_engine(Models(target, None, draft), SpecConfig(method="draft", k=k, tree=budget),
                      EngineConfig(max_batch=1, max_model_len=512))
    seen = {}
    propose = eng.proposer.propose

    def keep(batch, kk):
        d = propose(batch, kk)
        seen["draft"], seen["context"] = d, list(batch[0].token_ids)
        return d
    eng.proposer.propose = keep
    found = []

    def on_round(result):
        d = seen.get("draft")
        if found or d is None or d.parents is None:
            return
        parents, tokens = d.parents[0], d.tokens[0].tolist()
        n = result.accepted[0]
        path, cur = [], -1                        # the accepted branch, from its emitted tokens
        for t in result.emitted[0][:n]:
            cur = next(j for j in children(parents).get(cur, ()) if tokens[j] == t)
            path.append(cur)
        if any(parents.index(parents[j]) != j for j in path) and n >= 2:
            found.append((seen["context"], tokens, parents, path))
    eng.on_round = on_round
    for p in load_workload("code", tok, n=prompts, prompt_tokens=96):
        eng.generate([p], SamplingParams(max_new_tokens=64, ignore_eos=True))
        if found:
            return (tok, *found[0])
    raise SystemExit("no round accepted a non-first branch on these prompts")


def draw(tok, context, tokens, parents, path, out: Path) -> None:
    kids = children(parents)
    depth = {-1: 0}
    for j, par in enumerate(parents):
        depth[j] = depth[par] + 1
    order: list[int] = []

    def visit(j):                                 # leaves top to bottom, parents centred on them
        for c in kids.get(j, ()):
            visit(c)
        if j >= 0 and not kids.get(j):
            order.append(j)
    visit(-1)
    y = {j: -i for i, j in enumerate(order)}
    for j in sorted(range(len(parents)), key=lambda j: -depth[j]):
        if j not in y:
            y[j] = sum(y[c] for c in kids[j]) / len(kids[j])
    y[-1] = sum(y[c] for c in kids[-1]) / len(kids[-1])
    on = set(path) | {-1}
    fig, ax = plt.subplots(figsize=(2.2 * (max(depth.values()) + 1), 0.42 * len(order) + 1.2))
    for j, par in enumerate(parents):
        hot = j in on and par in on
        ax.plot([depth[par], depth[j]], [y[par], y[j]], color="#d62728" if hot else "#bbbbbb",
                lw=2.2 if hot else 0.8, zorder=1)
    label = lambda j: repr(tok.decode([tokens[j]]))[1:-1][:14]                           # noqa: E731
    root = repr(tok.decode(context[-6:]))[1:-1][-18:]
    for j in [-1] + list(range(len(parents))):
        hot = j in on
        ax.text(depth[j], y[j], ("..." + root) if j < 0 else label(j), ha="center", va="center",
                fontsize=8, family="monospace", zorder=2,
                bbox=dict(boxstyle="round,pad=0.25", fc="#ffe5e5" if hot else "white",
                          ec="#d62728" if hot else "#999999"))
    ax.set_xticks(range(max(depth.values()) + 1))
    ax.set_xticklabels(["context"] + [f"depth {d}" for d in range(1, max(depth.values()) + 1)])
    ax.set_yticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"one round of the bundled pair: {len(parents)} draft nodes, "
                 f"{len(path)} accepted (red), greedy", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    print(f"wrote {out}: path {path}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--tree", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("docs/img/tree.png"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    draw(*capture(args.k, args.tree), out=args.out)


if __name__ == "__main__":
    main()
