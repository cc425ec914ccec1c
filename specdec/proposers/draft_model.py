"""`draft`: a small model with the target's vocabulary guesses k tokens autoregressively."""
from __future__ import annotations

import torch

from ..batch import Batch
from ..models.prefill import prefill_rows
from ..costs.key import CostKey
from .base import Draft, Proposer
from .picking import DraftRule


class DraftModelProposer(Proposer):
    """Runs `model` (a LlamaModel) with a KV cache of its own, one row per batch row.

    The cache holds every committed token the draft has seen. A round feeds what it has
    not seen yet (the newest token, plus the last draft token when all k were accepted),
    then k-1 single-token steps; rollback() truncates back to the committed tokens.
    """
    name = "draft"

    def __init__(self, model, rows: int, max_len: int, num_layers: int | None = None, name="draft"):
        self.model, self.num_layers, self.name = model, num_layers, name
        self.cache = model.new_cache(rows, max_len, num_layers)
        self._committed: list[int] | None = None

    def start(self, row, seq):
        self.start_rows([row], [seq])

    def start_rows(self, rows, seqs):
        """Prefill every prompt but its last token (the pending one) into the draft cache, one
        forward per run of equal lengths (models/prefill.py); no logits are needed."""
        if rows:
            with torch.inference_mode():
                prefill_rows(self.model, self.cache, [seq.token_ids[:-1] for seq in seqs], rows[0],
                             num_layers=self.num_layers, hidden_only=True)

    def row_state(self):
        return [self.cache]

    @torch.inference_mode()
    def propose(self, context: Batch, k: int) -> Draft:
        feeds, tokens, positions = self._unseen(context)
        self._committed = [len(seq.token_ids) for seq in context]
        rule = DraftRule(context.sampling, k, self._committed)          # draft 1 fills position len(seq)
        out, q = self.model.runner.draft(tokens, positions, [len(f) for f in feeds], k, self.cache, rule,
                                         self.num_layers)                 # (B, k), (B, k, V) or None
        self._advance([len(f) + k - 1 for f in feeds])
        return Draft(tokens=out, probs=q)

    def _unseen(self, context: Batch, extra: int = 0):
        """What each row's cache has not seen (1-2 tokens, more after k = 0), as one block with
        `extra` more slots after the longest: (feeds, tokens (B, T) zero-padded, positions (B, T))."""
        dev, lens = self.model.device, self.cache.lengths
        feeds = [seq.token_ids[lens[b]:] for b, seq in enumerate(context)]
        T = max(len(f) for f in feeds) + extra
        tokens = torch.tensor([f + [0] * (T - len(f)) for f in feeds], dtype=torch.long, device=dev)
        start = torch.tensor(lens[:len(context)], device=dev)
        positions = (start[:, None] + torch.arange(T, device=dev)).clamp_(max=self.cache.max_len - 1)
        return feeds, tokens, positions

    def _advance(self, counts: list[int]) -> None:
        """Row b's cache grew by counts[b] tokens."""
        for b, n in enumerate(counts):
            self.cache.advance(b, n)

    def rollback(self, num_accepted):
        if self._committed is None:   # no proposal this round (k = 0): nothing to roll back
            return
        for b, n in enumerate(num_accepted):
            # keep the committed tokens: the history before the round plus n accepted drafts
            self.cache.truncate(b, min(self.cache.lengths[b], self._committed[b] + n))
        self._committed = None

    def cost_key(self):
        return CostKey("draft", self.name)
