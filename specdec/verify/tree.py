"""Verifying a token tree: the longest branch the target accepts, losslessly.

A row's tree is its nodes' tokens and parents (-1: the root, the row's pending token); the
target scored the root and every node in one forward, so p[0] is its distribution after the
root and p[j + 1] after node j. A chain is the tree whose node j has parent j - 1, and on a
chain both rules below are exactly the chain rules (greedy.py, rejection.py).

Greedy: from the root, follow the child whose token is the target's argmax; stop where no
child carries it, and emit the argmax there (recovered) or after a leaf (bonus). The output
is plain greedy decoding's.

Sampling (recursive rejection over siblings, SpecInfer / Chen et al.'s multi-draft rule): at
a node, r = p after it; its children are tried in order. Child x drawn from q accepts with
probability min(1, r(x) / q(x)); on rejection r becomes norm(max(0, r - q)), so the next
sibling is tested against what is left of p. A child chosen deterministically (the draft's
top candidates) has a one-hot q: it accepts with probability r(x), and a rejection removes x
from r. If every child is rejected, the token is drawn from r. By induction over the tried
children, the emitted token has law p whatever the children were, so each step of the walk,
and the whole output, is distributed as plain sampling from the target. Each child's q must
be the law it was drawn from given its parent and its earlier siblings (a deterministic
choice: one-hot, q = None here). docs/trees.md has the argument in full.
"""
from __future__ import annotations

import torch

from .rejection import guarded
from .sampling import sample


def children(parents: list[int]) -> dict[int, list[int]]:
    """parent index (-1: the root) -> its children's node indices, in node order."""
    out: dict[int, list[int]] = {}
    for j, par in enumerate(parents):
        out.setdefault(par, []).append(j)
    return out


def ends_at_leaf(path: list[int], parents: list[int]) -> bool:
    """Whether an accepted branch ended at a node without children (its next token is a bonus)."""
    return (path[-1] if path else -1) not in parents


def tree_greedy(best: list[list[int]], tokens: list[list[int]], parents: list[list[int]]
                ) -> tuple[list[list[int]], list[int]]:
    """best (B, >= n+1) the target's argmax after the root and after each node; tokens and
    parents (B, n) per row, host lists -> (accepted path (B, a) of node indices, next token (B,))."""
    paths, nexts = [], []
    for row_best, toks, par in zip(best, tokens, parents):
        kids, cur, path = children(par), -1, []
        while True:
            want = row_best[cur + 1]
            hit = next((j for j in kids.get(cur, ()) if toks[j] == want), None)
            if hit is None:
                break
            path.append(hit)
            cur = hit
        paths.append(path)
        nexts.append(row_best[cur + 1])
    return paths, nexts


def tree_rejection(p: torch.Tensor, q: torch.Tensor | None, tokens: list[list[int]], parents: list[list[int]],
                   u: torch.Tensor) -> tuple[list[list[int]], list[int]]:
    """p (B, n+1, V) target probabilities after the root and each node; q (B, n, V) the law
    each node was drawn from, or None (every node deterministic: one-hot); tokens, parents
    (B, n) host lists; u (B, n+1) uniforms: u[b, j] tests node j, u[b, n] draws the last token.
    -> (accepted path (B, a), next token (B,))."""
    paths, nexts = [], []
    n = u.shape[1] - 1
    for b, (toks, par) in enumerate(zip(tokens, parents)):
        kids, cur, path = children(par), -1, []
        r = p[b, 0]                                                           # (V,)
        while True:
            accepted = None
            for j in kids.get(cur, ()):
                x = toks[j]
                rx = r[x] / r.sum()
                qx = 1.0 if q is None else q[b, j, x]
                if u[b, j] * qx < rx:                                         # u < r/q, no division
                    accepted = j
                    break
                if q is None:
                    r = r.clone()
                    r[x] = 0.0
                else:
                    r = (r / r.sum() - q[b, j]).clamp_min(0.0)
                r = guarded(r[None], p[b, cur + 1][None])[0]                  # never empty
            if accepted is None:
                break
            path.append(accepted)
            cur = accepted
            r = p[b, cur + 1]
        paths.append(path)
        nexts.append(int(sample(r[None] / r.sum(), u[b, n:n + 1])[0]))
    return paths, nexts
