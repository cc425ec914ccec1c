"""`eagle` and `mtp` with a token tree: the feature head's top candidates at every level
(EAGLE-2), and the registry entries of both methods, chains or trees.

The tree grows as the draft model's does (tree_growth.py): each level after the first is one
head forward over the level's w nodes with tree attention in the head's one-layer cache. A node
reads its token and, as its feature, the head's own output at its parent (the root's children:
the output at the last verified entry), as a chain's drafts read their predecessor's. Rollback
drops every drafted entry, as a chain's does (their features were the head's, not the
target's), so the accepted branch needs no move: the target hands over its own features of
that branch (take_features) and the next round feeds them.
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from ..batch import Batch
from ..errors import ConfigError
from .base import Draft, register
from .draft_tree import kept_nodes, level_width, tree_round
from .feature_head import HEAD_DTYPE, FeatureHeadProposer
from .tree_growth import grow, keep_best
from .tree_size import AutoSize


class FeatureTreeProposer(FeatureHeadProposer):
    """A FeatureHeadProposer whose rounds draft a tree of up to `budget` nodes and depth k."""

    def __init__(self, target, head, rows: int, max_len: int, budget: int | str,
                 cost: Callable[[int, int], float] | None = None, **kwargs):
        """budget: nodes per tree, or "auto" (tree_size.py) by `cost(b, q)`, the target's
        forward seconds; kwargs: FeatureHeadProposer's."""
        super().__init__(target, head, rows, max_len, **kwargs)
        self.budget, self.auto_size = budget, AutoSize(cost, budget)
        self._no_draft = torch.zeros(rows, 0, dtype=torch.long, device=target.device)  # (rows, 0)

    def propose(self, context: Batch, k: int) -> Draft:
        s = context.sampling
        tree = tree_round(s)
        kind = self.auto_size.choose(tree and self.budget == "auto", len(context), k)
        if kind == "none":
            self._committed = None                      # a plain step: the features wait in `pending`
            return Draft(tokens=self._no_draft[:len(context)], probs=None)
        return self._tree(context, k) if tree and kind != "chain" else super().propose(context, k)

    @torch.inference_mode()
    def _tree(self, context: Batch, k: int) -> Draft:
        B, s, t0 = len(context), context.sampling, time.perf_counter()
        w = level_width(self.budget, k, s.sampled, len(self.vocab))
        # 1. Feed the verified entries; the last one's logits score the root's children.
        tokens, feats, n = self._verified(context)                              # (B, T), (B, T, d), (B,)
        start = list(self.cache.lengths[:B])
        self._committed = [a + m for a, m in zip(start, n)]                    # rollback keeps these entries
        root, h = self._feed(tokens, feats, n, start)                           # (B, N), (B, d)
        base = torch.tensor(self._committed, device=root.device)               # (B,) node 0's slot
        outs = []                                                               # each fed level's outputs (B, w, d)

        def step(tok, par, tree, pos):                  # feed one level; each node's feature: its parent's output
            if outs:
                f = outs[-1].gather(1, (par - (len(outs) - 1) * w)[:, :, None].expand(*par.shape, h.shape[-1]))
            else:
                f = h[:, None].expand(B, par.shape[1], h.shape[-1])                          # (B, w, d)
            outs.append(torch.empty_like(f))
            return self._full(self._forward(tok, f, pos, self.cache, outs[-1], tree=tree))  # (B, w, V)

        # 2. k levels of w nodes; each level after the first is one head forward.
        g = grow(self._full(root), step, k, w, base, s)
        # 3. Keep the budget's best nodes (auto: as many as pay), in node order.
        return keep_best(g, kept_nodes(self.budget, g, s.sampled, self.auto_size, time.perf_counter() - t0))[0]

    def rollback(self, num_accepted):
        self.auto_size.observe(num_accepted)
        super().rollback(num_accepted)


def _factory(name: str):
    def build(target, spec, head=None, rows=1, max_len=1024, tree_cost=None, **_):
        if head is None:
            where = ("--head DIR (the bundled target has a bundled head)" if name == "eagle"
                     else "a target checkpoint with MTP layers (`specdec train eagle --mtp DIR` writes one)")
            raise ConfigError(f"method {name!r} needs a feature head: {where}")
        if head.source != name:
            raise ConfigError(f"method {name!r} got {'MTP layers' if head.source == 'mtp' else 'an EAGLE head'}: "
                              + ("--method mtp reads the target checkpoint's own" if name == "mtp"
                                 else "name an EAGLE head with --head DIR"))
        opts = dict(name=name, weights=spec.opts.get(f"{name}_dtype", HEAD_DTYPE), vocab_size=spec.opts.get(f"{name}_vocab"))
        if spec.tree:
            return FeatureTreeProposer(target, head, rows, max_len, spec.tree, tree_cost, **opts)
        return FeatureHeadProposer(target, head, rows, max_len, **opts)
    return build


register("eagle")(_factory("eagle"))
register("mtp")(_factory("mtp"))
