"""Growing a token tree level by level (EAGLE-2), for every drafter that scores several nodes
in one forward with tree attention: the draft model (draft_tree.py) and the feature heads
(feature_tree.py).

Greedy rows: level 1 holds the drafter's `w` most likely first tokens, and each later level
the `w` most likely extensions of the level before, by the path's draft log-probability over
all of that level's children. A child never scores above its parent (log-probabilities are
<= 0) and ties keep the earlier node, so the `n` best nodes always include their ancestors.
Greedy nodes are chosen deterministically, so verification treats them as one-hot (q = None).

Sampled (temperature-only) rows draw instead: the root gets `w` children drawn independently
from q, and each continues as a chain drawn from q, with every node's q kept for
verification (verify/tree.py), which is lossless either way. A deterministic top-w tree at
temperature 1 accepted a node with probability p(x), where a drawn one is accepted with
min(1, p(x)/q(x)): on flat distributions it lost (docs/trees.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from ..models.tree import MAX_TREE, TreeAttention, bits_tensor
from ..verify.sampling import BatchSampling, sample
from .base import Draft

# step(tokens (B, w), parents (B, w) node indices, -1: the root; tree, positions (B, w))
#   -> logits (B, w, V): the drafter fed one level's nodes, scoring each one's children
Step = Callable[[torch.Tensor, torch.Tensor, TreeAttention, torch.Tensor], torch.Tensor]


def tree_width(budget: int, k: int) -> int:
    """Nodes per level: enough for k levels to reach the budget, at least 2 (a tree), and no
    more than k levels can hold within the MAX_TREE slots of one ancestor mask."""
    return max(2, min(math.ceil(budget / max(k, 1)), MAX_TREE // max(k, 1)))


@dataclass
class Growth:
    """Every node drafted, level by level (node i of level l has index (l - 1) w + i)."""
    tokens: torch.Tensor                 # (B, W) int64
    scores: torch.Tensor                 # (B, W) the path's draft log-probability (sampled: -depth)
    parents: torch.Tensor                # (B, W) the parent's node index, -1: the root
    q: torch.Tensor | None               # (B, W, V) each node's draft distribution (sampled rows)


def grow(root_logits: torch.Tensor, step: Step, k: int, w: int, base: torch.Tensor,
         sampling: BatchSampling) -> Growth:
    """root_logits (B, V): the drafter's scores after the pending token; base (B,): the cache
    slot of node 0 and the position of depth-1 nodes; k levels of w nodes, k - 1 forwards."""
    B, V, dev = *root_logits.shape, root_logits.device
    sampled = sampling.sampled
    temp = sampling.temperature.to(dev)[:, None] if sampled else None                    # (B, 1)
    qs = []
    if sampled:
        q = torch.softmax(root_logits.float() / temp, -1)                                 # (B, V)
        tok = sample(q.repeat_interleave(w, 0), sampling.uniforms(w).view(-1)).view(B, w)
        score, qs = torch.zeros(B, w, device=dev), [q[:, None].expand(B, w, V)]
    else:
        score, tok = torch.log_softmax(root_logits.float(), -1).topk(w, -1)               # (B, w)
    toks, scores, parents = [tok], [score], [torch.full((B, w), -1, device=dev)]
    anc = [[1 << i for i in range(w)] for _ in range(B)]                                 # per node, host ints
    for level in range(1, k):
        idx0 = (level - 1) * w                                                           # the frontier's first node
        tree = TreeAttention(base[:, None] + idx0 + torch.arange(w, device=dev),
                             bits_tensor([a[idx0:idx0 + w] for a in anc]), base)
        out = step(toks[-1], parents[-1], tree, (base - 1 + level)[:, None].expand(B, w))  # (B, w, V)
        if sampled:            # each chain's next token, drawn from q after it
            q = torch.softmax(out.float() / temp[:, :, None], -1)                        # (B, w, V)
            tok = sample(q.view(B * w, V), sampling.uniforms(w).view(-1)).view(B, w)
            score, par = scores[-1] - level, idx0 + torch.arange(w, device=dev).expand(B, w)
            qs.append(q)
        else:
            cand = scores[-1][:, :, None] + torch.log_softmax(out.float(), -1)           # (B, w, V)
            score, flat = cand.view(B, -1).topk(w, -1)                                   # (B, w)
            par, tok = flat // V + idx0, flat % V                                        # node indices
        toks.append(tok)
        scores.append(score)
        parents.append(par)
        for b, row in enumerate(par.tolist()):
            anc[b] += [anc[b][p] | 1 << (idx0 + w + i) for i, p in enumerate(row)]
    return Growth(torch.cat(toks, 1), torch.cat(scores, 1), torch.cat(parents, 1),
                  torch.cat(qs, 1) if sampled else None)


def path_probs(g: Growth) -> torch.Tensor:
    """(B, W): every row's path probabilities, largest first (what `--tree auto` sizes by)."""
    return g.scores.exp().sort(-1, descending=True).values


def keep_best(g: Growth, n: int) -> tuple[Draft, list[list[int]]]:
    """The n best-scoring nodes of every row (ties: the earlier node), in node order, as a
    Draft with parents re-indexed -> (draft, each row's kept nodes' indices in `g`)."""
    B, W = g.tokens.shape
    order = torch.arange(W, device=g.tokens.device).expand(B, -1)
    rank = torch.argsort(torch.argsort(-g.scores, dim=-1, stable=True), dim=-1)          # (B, W)
    keep = torch.sort(torch.where(rank < n, order, W + order), -1).values[:, :n]         # (B, n)
    par_rows, keep_rows = [], keep.tolist()
    for kb, pb in zip(keep_rows, g.parents.gather(1, keep).tolist()):
        new_index = {old: i for i, old in enumerate(kb)}
        par_rows.append([new_index[p] if p >= 0 else -1 for p in pb])
    q = g.q.gather(1, keep[:, :, None].expand(B, n, g.q.shape[-1])) if g.q is not None else None  # (B, n, V)
    return Draft(tokens=g.tokens.gather(1, keep), probs=q, parents=par_rows), keep_rows
