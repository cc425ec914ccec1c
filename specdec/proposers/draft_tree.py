"""`draft` with a token tree: the draft model's top candidates at every level (EAGLE-2 style).

A chain spends a round's k positions on one guess; when its first token is wrong the round
yields one token. A tree spends a node budget on several guesses, grown level by level
(tree_growth.py); the `budget` nodes with the highest path scores are kept (`--tree auto`: as
many as pay for their verification, and for a while none when no tree pays; tree_size.py).

Each level is one draft forward over the level's nodes with tree attention (models/tree.py),
so a tree costs k draft forwards, as a chain of k does, each over `width` inputs instead of
one. Rollback keeps the accepted branch's K/V in the draft's cache (moved to consecutive
slots) and drops the other nodes. Batches with penalties, coupled rows or top-k/top-p filters
draft a chain instead.
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from ..batch import Batch, RowSlots
from ..models.prefill import prefill_rows
from ..models.tree import MAX_TREE
from .base import Draft
from .draft_model import DraftModelProposer
from .tree_growth import grow, keep_best, path_probs, tree_width
from .tree_size import AUTO_NODES, AutoSize


def tree_round(sampling) -> bool:
    """Whether a batch with these settings drafts a tree: greedy or temperature-only rows."""
    return sampling.tree_ok


def level_width(budget: int | str, k: int, sampled: bool, vocab: int) -> int:
    """Nodes per level for `budget` ("auto": AUTO_NODES drafted, greedy; sampled rows draw 2
    chains under auto, budget / k otherwise)."""
    if sampled:
        return 2 if budget == "auto" else max(2, min(budget // k, MAX_TREE // k))
    return min(tree_width(AUTO_NODES if budget == "auto" else budget, k), vocab)


def kept_nodes(budget: int | str, g, sampled: bool, auto_size: AutoSize, spent: float) -> int:
    """How many of the grown tree's nodes a round keeps: all of a sampled tree's (its chains);
    greedy, the budget, or under auto as many as pay (tree_size.py) after `spent` seconds."""
    W = g.tokens.shape[1]
    if sampled:
        return W
    return auto_size.size(path_probs(g), spent) if budget == "auto" else min(budget, W)


class DraftTreeProposer(DraftModelProposer):
    """A DraftModelProposer whose rounds draft a tree of up to `budget` nodes and depth k."""

    def __init__(self, model, rows: int, max_len: int, budget: int | str, name="draft",
                 cost: Callable[[int, int], float] | None = None):
        """budget: nodes per tree, or "auto": AUTO_NODES drafted and as many kept as pay for
        their verification (tree_size.py) by `cost(b, q)`, the target's forward seconds."""
        super().__init__(model, rows, max_len, name=name)
        self.budget, self._was_tree, self.auto_size = budget, False, AutoSize(cost, budget)
        self._no_draft = torch.zeros(rows, 0, dtype=torch.long, device=model.device)   # (rows, 0)
        self._unfilled = RowSlots()              # auto: rows whose prompt the draft has not read yet (-> True)

    def propose(self, batch: Batch, k: int) -> Draft:
        s = batch.sampling
        self._was_tree = tree_round(s)
        kind = self.auto_size.choose(self._was_tree and self.budget == "auto", len(batch), k)
        if kind == "none":
            self._was_tree, self._committed = False, None       # a plain step (tree_size.py: can_pay)
            return Draft(tokens=self._no_draft[:len(batch)], probs=None)
        self._was_tree = self._was_tree and kind != "chain"
        self._catch_up(batch)
        return self._tree(batch, k) if self._was_tree else super().propose(batch, k)

    # ---- auto: the draft's prefill waits for its first drafted round ----------------------
    def start_rows(self, rows, seqs):
        """auto: no prefill at admission (a batch where nothing can pay never drafts); the row
        is prefilled by the first round that drafts for it (`_catch_up`)."""
        if self.budget != "auto":
            return super().start_rows(rows, seqs)
        for row in rows:
            self.cache.reset(row)
            self._unfilled[row] = True

    def _catch_up(self, batch: Batch) -> None:
        """Prefill the rows admitted since the last drafted round, every token but the pending one
        (the round feeds it), outside the round's measured time."""
        rows = sorted(r for r in self._unfilled if r < len(batch))
        if not rows:
            return
        t0 = time.perf_counter()
        with torch.inference_mode():
            for r in rows:
                prefill_rows(self.model, self.cache, [batch[r].token_ids[:-1]], r,
                             num_layers=self.num_layers, hidden_only=True)
        for r in rows:
            del self._unfilled[r]
        self.auto_size.rates.exclude(time.perf_counter() - t0)

    def row_state(self):
        return super().row_state() + [self._unfilled]

    @torch.inference_mode()
    def _tree(self, batch: Batch, k: int) -> Draft:
        B, dev, s, t0 = len(batch), self.model.device, batch.sampling, time.perf_counter()
        w = level_width(self.budget, k, s.sampled, self.model.config.vocab_size)
        # 1. Feed what the draft has not seen; its last output scores the root's children.
        feeds, tokens, positions = self._unseen(batch)
        last = torch.tensor([len(f) - 1 for f in feeds], device=dev)                      # (B,)
        logits = self.model(tokens, positions, self.cache, num_layers=self.num_layers)     # (B, T, V)
        self._advance([len(f) for f in feeds])
        base = torch.tensor(self.cache.lengths[:B], device=dev)                            # (B,) node 0's slot
        self._committed = self.cache.lengths[:B]
        # 2. k levels of w nodes; each level after the first is one draft forward.
        g = grow(logits[torch.arange(B), last], lambda tok, par, tree, pos: self.model(
            tok, pos, self.cache, num_layers=self.num_layers, tree=tree), k, w, base, s)
        # 3. Keep the budget's best nodes (auto: as many as pay), in node order.
        n = kept_nodes(self.budget, g, s.sampled, self.auto_size, time.perf_counter() - t0)
        draft, keep_rows = keep_best(g, n)
        # for rollback: the rows, and where each kept node's K/V sit (levels 1..k-1 were fed)
        self._round = (draft, keep_rows, (k - 1) * w)
        return draft

    def rollback(self, num_accepted):
        self.auto_size.observe(num_accepted)
        self._rollback(num_accepted)

    def _rollback(self, num_accepted):
        """Keep the accepted branch's fed nodes: their K/V move from their tree slots to the
        committed tokens' next slots (KVCache.keep_path), every other node is dropped, and
        the next round feeds only what was never fed (the branch's last level, the new token)."""
        if self._committed is None or not self._was_tree:
            return super().rollback(num_accepted)
        draft, keep_rows, fed = self._round
        paths = []
        for b, n in enumerate(num_accepted):
            path = []
            for node in (draft.paths[b] if draft.paths is not None else [])[:n]:   # verification's branch
                if keep_rows[b][node] >= fed:                   # never fed: the draft has no K/V
                    break
                path.append(keep_rows[b][node])
            paths.append(path)
        self.cache.keep_path(paths)
        for b, path in enumerate(paths):
            self.cache.advance(b, len(path))
        self._committed = self._round = None

