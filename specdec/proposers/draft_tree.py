"""`draft` with a token tree: the draft model's top candidates at every level (EAGLE-2 style).

A chain spends a round's k positions on one guess; when its first token is wrong the round
yields one token. A tree spends a node budget on several guesses: level 1 holds the draft's
`width` most likely first tokens, and each later level the `width` most likely extensions of
the level before (by the path's draft log-probability, over all of that level's children).
After k levels the `budget` nodes with the highest path scores are kept (`--tree auto`: as
many as pay for their verification, and for a while none when no tree pays; tree_size.py).
A child never scores
above its parent (log-probabilities are <= 0) and ties keep the earlier node, so the kept
nodes always include their ancestors.

Each level is one draft forward over the level's nodes with tree attention (models/tree.py),
so a tree costs k draft forwards, as a chain of k does, each over `width` inputs instead of
one. Greedy nodes are chosen deterministically, so verification treats them as one-hot
(q = None). Sampled rows draw instead: the root gets `width` children drawn independently
from the draft's q, and each continues as a chain drawn from q (budget / k chains; `auto`:
2), with every node's q kept for verification, which is lossless either way (verify/tree.py).
A deterministic top-w tree at temperature 1 accepted a node with probability p(x), where a
drawn one is accepted with min(1, p(x)/q(x)): on flat distributions the tree lost
(docs/trees.md). Rollback keeps the accepted branch's K/V in the
draft's cache (moved to consecutive slots) and drops the other nodes.
Batches with penalties, coupled rows or top-k/top-p filters draft a chain instead.
"""
from __future__ import annotations

import math
import time
from typing import Callable

import torch

from ..batch import Batch
from ..models.tree import MAX_TREE, TreeAttention, bits_tensor
from ..errors import ConfigError
from ..verify.sampling import sample
from .base import Draft, register
from .draft_model import DraftModelProposer
from .tree_size import AUTO_NODES, Backoff, Calibration, RoundRates, best_rate


def tree_width(budget: int, k: int) -> int:
    """Nodes per level: enough for k levels to reach the budget, at least 2 (a tree), and no
    more than k levels can hold within the MAX_TREE slots of one ancestor mask."""
    return max(2, min(math.ceil(budget / max(k, 1)), MAX_TREE // max(k, 1)))


class DraftTreeProposer(DraftModelProposer):
    """A DraftModelProposer whose rounds draft a tree of up to `budget` nodes and depth k."""

    def __init__(self, model, rows: int, max_len: int, budget: int | str, name="draft",
                 cost: Callable[[int, int], float] | None = None):
        """budget: nodes per tree, or "auto": AUTO_NODES drafted and as many kept as pay for
        their verification (tree_size.py) by `cost(b, q)`, the target's forward seconds."""
        super().__init__(model, rows, max_len, name=name)
        if budget == "auto" and cost is None:
            raise ConfigError("--tree auto needs the target's measured forward costs (build.make_engine)")
        self.budget, self.cost, self._was_tree = budget, cost, False
        self.calibration, self.backoff, self.rates = Calibration(), Backoff(), RoundRates()
        self._no_draft = torch.zeros(rows, 0, dtype=torch.long, device=model.device)   # (rows, 0)

    def propose(self, batch: Batch, k: int) -> Draft:
        s = batch.sampling
        self._was_tree = not (s.processed or s.any_coupled or not (s.all_argmax or s.temperature_only))
        auto, r = self._was_tree and self.budget == "auto" and s.all_argmax, self.rates
        if r.end() == "tree" and r.rate["plain"] is not None:    # judge the tree round that just ended
            self.backoff.judge(r.rate["tree"], r.rate["plain"], r.seconds["tree"], r.seconds["plain"])
        if auto and (self.backoff.take() or r.plain_due()):
            r.begin("plain")
            self._was_tree, self._committed = False, None       # a plain step (tree_size.py: no tree)
            return Draft(tokens=self._no_draft[:len(batch)], probs=None)
        if auto:
            r.begin("tree")
        return self._tree(batch, k) if self._was_tree else super().propose(batch, k)

    @torch.inference_mode()
    def _tree(self, batch: Batch, k: int) -> Draft:
        B, dev, V = len(batch), self.model.device, self.model.config.vocab_size
        auto, s, t0 = self.budget == "auto", batch.sampling, time.perf_counter()
        sampled = not s.all_argmax           # temperature-only rows: w chains drawn from q (below)
        if sampled:
            w = 2 if auto else max(2, min(self.budget // k, MAX_TREE // k))
        else:
            w = min(tree_width(AUTO_NODES if auto else self.budget, k), V)
        temp = s.temperature.to(dev)[:, None] if sampled else None                         # (B, 1)
        # 1. Feed what the draft has not seen; its last output scores the root's children.
        feeds, tokens, positions, last = self._unseen(batch)
        logits = self.model(tokens, positions, self.cache, num_layers=self.num_layers)     # (B, T, V)
        logp = torch.log_softmax(logits[torch.arange(B), last].float(), -1)                # (B, V)
        self._advance([len(f) for f in feeds])
        base = torch.tensor(self.cache.lengths[:B], device=dev)                            # (B,) node 0's slot
        self._committed = self.cache.lengths[:B]
        # 2. Level 1: the root's best children (sampled rows: w draws from q). Then each
        #    level extends the previous one.
        qs = []
        if sampled:
            q = torch.softmax(logits[torch.arange(B), last].float() / temp, -1)            # (B, V)
            tok = sample(q.repeat_interleave(w, 0), s.uniforms(w).view(-1)).view(B, w)
            score, qs = torch.zeros(B, w, device=dev), [q[:, None].expand(B, w, V)]
        else:
            score, tok = logp.topk(w, -1)                                                  # (B, w)
        toks, scores, parents = [tok], [score], [torch.full((B, w), -1, device=dev)]
        anc = [[1 << i for i in range(w)] for _ in range(B)]                               # per node, host ints
        for level in range(1, k):
            idx0 = (level - 1) * w                                                         # the frontier's first node
            tree = TreeAttention(base[:, None] + idx0 + torch.arange(w, device=dev),
                                 bits_tensor([a[idx0:idx0 + w] for a in anc]), base)
            pos = (base - 1 + level)[:, None].expand(B, w)
            out = self.model(toks[-1], pos, self.cache, num_layers=self.num_layers, tree=tree)  # (B, w, V)
            if sampled:        # each chain's next token, drawn from q after it
                q = torch.softmax(out.float() / temp[:, :, None], -1)                      # (B, w, V)
                tok = sample(q.view(B * w, V), s.uniforms(w).view(-1)).view(B, w)
                score, par = scores[-1] - level, idx0 + torch.arange(w, device=dev).expand(B, w)
                qs.append(q)
            else:
                cand = scores[-1][:, :, None] + torch.log_softmax(out.float(), -1)         # (B, w, V)
                score, flat = cand.view(B, -1).topk(w, -1)                                 # (B, w)
                par, tok = flat // V + idx0, flat % V                                      # node indices
            toks.append(tok)
            scores.append(score)
            parents.append(par)
            for b, row in enumerate(par.tolist()):
                anc[b] += [anc[b][p] | 1 << (idx0 + w + i) for i, p in enumerate(row)]
        # 3. Keep the budget's best nodes (ties: the earlier node), in node order.
        all_scores = torch.cat(scores, 1)                                                  # (B, w k)
        probs = all_scores.exp().sort(-1, descending=True).values                          # (B, w k)
        if auto and not sampled:
            spent = time.perf_counter() - t0
            n, rate = best_rate(probs, self.calibration.c, self.cost, spent)
            if self.rates.rate["plain"] is None:                   # not measured yet: predicted
                plain = self.cost(B, 1)                            # a plain step: B tokens
                self.backoff.judge(rate, B / plain, spent + self.cost(B, n + 1), plain)
        else:
            n = all_scores.shape[1] if sampled else min(self.budget, all_scores.shape[1])
        order = torch.arange(all_scores.shape[1], device=dev).expand(B, -1)
        rank = torch.argsort(torch.argsort(-all_scores, dim=-1, stable=True), dim=-1)            # (B, w k)
        keep = torch.sort(torch.where(rank < n, order, order.shape[1] + order), -1).values[:, :n]
        all_toks, all_par = torch.cat(toks, 1), torch.cat(parents, 1)
        kept_toks = all_toks.gather(1, keep)                                               # (B, n)
        par_rows, keep_rows = [], keep.tolist()
        for kb, pb in zip(keep_rows, all_par.gather(1, keep).tolist()):
            new_index = {old: i for i, old in enumerate(kb)}
            par_rows.append([new_index[p] if p >= 0 else -1 for p in pb])
        q_kept = torch.cat(qs, 1).gather(1, keep[:, :, None].expand(B, n, V)) if sampled else None  # (B, n, V)
        draft = Draft(tokens=kept_toks, probs=q_kept, parents=par_rows)
        # for rollback: the rows, and where each kept node's K/V sit (levels 1..k-1 were fed)
        self._round = (draft, keep_rows, (k - 1) * w)
        self._predicted = None if sampled else float(probs[:, :n].sum())
        return draft

    def rollback(self, num_accepted):
        self.rates.emitted(len(num_accepted) + sum(num_accepted))      # each row: accepted + 1
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
        if self._predicted is not None:
            self.calibration.observe(sum(num_accepted), self._predicted)
        self._committed = self._round = None


@register("draft")
def _build(target, spec, draft_model=None, rows=1, max_len=1024, tree_cost=None, **_):
    if draft_model is None:
        raise ConfigError("method 'draft' needs a draft model (--draft DIR)")
    if draft_model.config.vocab_size != target.config.vocab_size:
        raise ConfigError(f"draft vocabulary ({draft_model.config.vocab_size}) differs from the "
                          f"target's ({target.config.vocab_size})")
    if spec.tree:
        return DraftTreeProposer(draft_model, rows, max_len, budget=spec.tree, cost=tree_cost)
    return DraftModelProposer(draft_model, rows, max_len)
