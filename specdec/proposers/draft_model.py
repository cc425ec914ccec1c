"""`draft`: a small model with the target's vocabulary guesses k tokens autoregressively."""
from __future__ import annotations

import torch

from ..verify.sampling import sample
from ..batch import Batch
from ..models.prefill import prefill_rows
from ..costs.key import CostKey
from .base import Draft, Proposer
from .picking import pick


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

    def move_row(self, src, dst):
        self.cache.move_row(src, dst)

    def finish(self, row):
        self.cache.reset(row)

    @torch.inference_mode()
    def propose(self, context: Batch, k: int) -> Draft:
        B, dev = len(context), self.model.device
        feeds, tokens, positions, last = self._unseen(context)
        self._committed = [len(seq.token_ids) for seq in context]
        start, T = torch.tensor(self.cache.lengths[:B], device=dev), tokens.shape[1]
        pos = start + last + 1                                          # (B,) where draft 1 feeds
        s = context.sampling
        native = getattr(self.model, "native", None)
        # On the compiled decoder, drafts 1..k-1 come from one C call (no Python between the
        # draft's steps) for greedy batches and for sampled batches with temperature only.
        if native is not None and k > 1 and s.all_argmax and not s.any_coupled and not s.processed:
            best = torch.empty(B, T, dtype=torch.long)                                  # (B, T)
            self.model(tokens, positions, self.cache, num_layers=self.num_layers, argmax_out=best)
            self._advance([len(f) for f in feeds])
            first_tok = best.gather(1, last[:, None])                                   # (B, 1)
            rest = native.draft_argmax(first_tok[:, 0], pos, k - 1, self.cache, self.num_layers)
            self._advance([k - 1] * B)
            return Draft(tokens=torch.cat([first_tok, rest], 1), probs=None)
        if native is not None and s.temperature_only and all(len(f) == T for f in feeds):
            # as many tokens to feed in every row: all k draft steps, the first included, in one C call
            u = s.uniforms(k)                                                          # (B, k)
            out, q = native.draft_sample(tokens, start, k, self.cache, s.temperature, u,
                                         self.num_layers)                              # (B, k), (B, k, V)
            self._advance([T + k - 1] * B)
            return Draft(tokens=out, probs=q)
        logits = self.model(tokens, positions, self.cache, num_layers=self.num_layers)  # (B, T, V)
        logits = logits.gather(1, last[:, None, None].expand(B, 1, logits.shape[-1]))    # (B, 1, V)
        self._advance([len(f) for f in feeds])
        u = None if s.all_argmax else s.uniforms(k)                                    # (B, k)
        if native is not None and k > 1 and s.temperature_only:
            q = s.probs(logits)                                                        # (B, 1, V)
            first_tok = sample(q[:, 0], u[:, 0])                                       # (B,)
            rest, q_rest = native.draft_sample(first_tok, pos, k - 1, self.cache, s.temperature,
                                               u[:, 1:], self.num_layers)              # (B, k-1), (B, k-1, V)
            self._advance([k - 1] * B)
            return Draft(tokens=torch.cat([first_tok[:, None], rest], 1), probs=torch.cat([q, q_rest], 1))
        first = [len(seq.token_ids) for seq in context]             # the position draft 0 fills
        out, qs = [], []
        for i in range(k):
            # greedy rows: argmax of the logits; coupled rows: of log q + the position's noise.
            # Processed rows (penalties) see the drafts so far, as the target's p will.
            at, before = [[t + i] for t in first], torch.stack(out, 1) if out and s.processed else None
            tok, q = pick(s, logits, at, before, None if u is None else u[:, i])
            if q is not None:
                qs.append(q)
            out.append(tok)
            if i < k - 1:
                logits = self.model(tok[:, None], (pos + i)[:, None], self.cache, num_layers=self.num_layers)
                self._advance([1] * B)
        tokens = torch.stack(out, 1) if out else torch.zeros(B, 0, dtype=torch.long, device=dev)
        probs = torch.stack(qs, 1) if qs else None                                     # (B, k, V)
        return Draft(tokens=tokens, probs=probs)

    def _unseen(self, context: Batch):
        """What each row's cache has not seen (1-2 tokens, more after k = 0), as one block:
        (feeds, tokens (B, T) zero-padded, positions (B, T), last (B,): each feed's last index)."""
        dev, lens = self.model.device, self.cache.lengths
        feeds = [seq.token_ids[lens[b]:] for b, seq in enumerate(context)]
        T = max(len(f) for f in feeds)
        tokens = torch.tensor([f + [0] * (T - len(f)) for f in feeds], dtype=torch.long, device=dev)
        start = torch.tensor(lens[:len(context)], device=dev)
        positions = (start[:, None] + torch.arange(T, device=dev)).clamp_(max=self.cache.max_len - 1)
        return feeds, tokens, positions, torch.tensor([len(f) - 1 for f in feeds], device=dev)

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
