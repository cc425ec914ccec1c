"""`parallel`: a draft trained with a mask token (PARD, arXiv 2504.18583) guesses k tokens in
ONE forward.

A round feeds each row what its draft cache has not seen (the newest token, plus the drafts
accepted last round) and k - 1 mask tokens at the next positions. The last real token's
logits give draft 1, mask j's give draft j + 1: k distributions from one forward, each its
position's own (the mask slots see the context and the masks before them, never a drafted
token). Draft i is picked from q_i by the row's rule (picking.py), so q_i is exactly the law
it was drawn from and rejection sampling stays lossless, though q_i does not condition on
drafts 1..i-1. The cache keeps the real tokens only: the masks' entries lie beyond each row's
length, never read, and overwritten next round.
"""
from __future__ import annotations

import torch

from ..batch import Batch
from ..costs.key import CostKey
from ..errors import ConfigError
from .base import Draft, register
from ..verify.sampling import probs_from_logits, sample
from .draft_model import DraftModelProposer
from .picking import DraftRule


class ParallelProposer(DraftModelProposer):
    """Runs `model` (a LlamaModel with a `mask_token`, models/mask_token.py) with a KV cache of
    its own, one row per batch row, prefilled as the draft model's; k drafts per round from one
    forward of at most k + 1 + (k - 1) positions (usually 1 or 2 real ones and the masks)."""
    name = "parallel"
    one_forward = True      # a round's drafting is one forward of its positions (costs/cost_model.py)

    def __init__(self, model, rows: int, max_len: int, name: str = "parallel"):
        super().__init__(model, rows, max_len, name=name)
        self.mask = model.mask_token
        self.max_k = self.mask.max_k          # the longest draft trained; longer ones stay lossless
        self._embedding = self.mask.embedding.to(model.device, model.model.norm.weight.dtype)    # (d,)

    @torch.inference_mode()
    def propose(self, context: Batch, k: int) -> Draft:
        tokens, positions, is_mask, last = self._block(context, k)
        embeds = self.model.model.embed_tokens(tokens)                                 # (B, T, d)
        embeds[is_mask] = self._embedding
        at = last[:, None] + torch.arange(k, device=tokens.device)                     # (B, k) draft i's slot
        self._committed = [len(seq.token_ids) for seq in context]
        rule = DraftRule(context.sampling, k, self._committed)
        if rule.greedy:
            best = torch.empty(tokens.shape, dtype=torch.long, device=tokens.device)   # (B, T)
            self.model.runner.forward(tokens, positions, self.cache, embeds=embeds, argmax_out=best)
            out, q = best.gather(1, at), None                                          # (B, k)
        else:
            logits = self.model.runner.forward(tokens, positions, self.cache, embeds=embeds)        # (B, T, V)
            logits = logits.gather(1, at[:, :, None].expand(-1, -1, logits.shape[-1]))              # (B, k, V)
            out, q = self._pick(rule, logits)
        for b, seq in enumerate(context):          # the real tokens fed are cached; the masks are not
            self.cache.advance(b, self._committed[b] - self.cache.lengths[b])
        return Draft(tokens=out, probs=q)

    @staticmethod
    def _pick(rule: DraftRule, logits: torch.Tensor):
        """Drafts (B, k) and q (B, k, V) or None from each slot's logits (B, k, V) by the rows'
        rule: temperature-only rows all slots at once (q = softmax(logits / t), each draft at its
        own uniform), any other rule slot by slot (picking.py, which sees the drafts before)."""
        B, k, _ = logits.shape
        if rule.temperature is not None:
            q = probs_from_logits(logits, rule.temperature)                                         # (B, k, V)
            return sample(q.flatten(0, 1), rule.uniforms.flatten()).view(B, k), q
        picks, qs = [], []
        for i in range(k):
            tok, qi = rule.pick(logits[:, i:i + 1], i, picks)
            picks.append(tok)
            qs.append(qi)
        return torch.stack(picks, 1), (torch.stack(qs, 1) if qs[0] is not None else None)         # (B, k, V)

    def _block(self, context: Batch, k: int):
        """Each row's unseen tokens, then k - 1 masks, right-padded into one block: tokens,
        positions, is_mask (B, T) and last (B,), the slot of each row's last real token. A mask
        slot's token id is the padding's, never read: its embedding is the mask's."""
        feeds, tokens, positions = self._unseen(context, extra=k - 1)
        slot = torch.arange(tokens.shape[1], device=tokens.device)
        n = torch.tensor([len(f) for f in feeds], device=tokens.device)                # (B,)
        is_mask = (slot[None] >= n[:, None]) & (slot[None] < n[:, None] + k - 1)        # (B, T)
        return tokens, positions, is_mask, n - 1

    def rollback(self, num_accepted):
        """Nothing to drop: the cache holds the committed tokens of before the round; the
        accepted drafts are fed as unseen tokens next round."""
        self._committed = None

    def cost_key(self):
        return CostKey("parallel", self.name)


@register("parallel")
def build(target, spec, draft_model=None, rows=1, max_len=1024, **_):
    """The parallel draft checked against the target, then its proposer: it needs a draft with
    the target's vocabulary and a mask token (`specdec train parallel` writes one)."""
    if draft_model is None:
        raise ConfigError("method 'parallel' needs a parallel draft (--draft DIR, trained by "
                          "`specdec train parallel`)")
    if getattr(draft_model, "mask_token", None) is None:
        raise ConfigError("method 'parallel' needs a draft trained with a mask token (`specdec train parallel`); "
                          "this draft has none (its config.json has no parallel_draft)")
    if getattr(draft_model, "vocab_map", None) is not None or draft_model.config.vocab_size != target.config.vocab_size:
        raise ConfigError("method 'parallel' needs a draft with the target's vocabulary; this draft has another")
    if spec.tree:
        raise ConfigError("method 'parallel' drafts chains; token trees (--tree) are not supported with it")
    return ParallelProposer(draft_model, rows, max_len)
