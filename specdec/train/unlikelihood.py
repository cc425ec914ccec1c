"""Sequence-level unlikelihood fine-tuning: teach the target to write code, not loops.

A small model decoded greedily falls into loops (`name, name, name, ...`): its argmax
continuation repeats an 8-gram it has already written. More next-token training shrinks
that slowly; penalising the loops directly does not (Welleck et al., 2019, "Neural Text
Generation with Unlikelihood Training", section 4.2). Each step:

1. the usual next-token loss on a corpus batch (keeps perplexity where it was);
2. the current model continues each row's first `PROMPT` tokens greedily for `NEW` tokens;
3. every generated token that completes an n-gram already generated earlier in the same
   continuation gets the unlikelihood loss -log(1 - p(token)), pushing its probability down
   at exactly the places where the model loops. log(1 - p) is computed from the logits as the
   log-sum-exp of every other token's, so a loop the model is sure of (p -> 1) still has a
   gradient, where 1 - p clamped away from 0 would have none.

The loss changes the model, not the decoder: greedy decoding stays argmax, and speculation
stays lossless against the tuned model.
"""
from __future__ import annotations

import torch

from ..repetition import NGRAM, repeated_positions
from .trainer import lm_loss

PROMPT = 128   # the model card's held-out prompts are 128 tokens, its continuations 128 new ones
NEW = 128
# Welleck et al. weigh the two losses equally (alpha = 1). On the bundled target the loop loss's
# gradient is then 3x the next-token loss's (4.1 against 1.3), the clip at norm 1 lets it drown
# the next-token term, and held-out code perplexity rose 17% in 40 minutes; at 0.25 the two
# gradients are of one size
UL_WEIGHT = 0.25


def repeat_mask(ids: torch.Tensor, n: int = NGRAM) -> torch.Tensor:
    """ids (B, T) int64 -> (B, T) bool: True where the token completes an n-gram that already
    occurred earlier in the same row (the repetition fraction's count, position by position)."""
    return torch.tensor([repeated_positions(row, n) for row in ids.tolist()], dtype=torch.bool).reshape(ids.shape)


@torch.no_grad()
def greedy_continue(model, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """prompts (B, P) -> (B, new_tokens): the model's argmax continuation, in eager PyTorch
    with a KV cache (the weights change every step, so nothing is prepared or packed). Outside
    any bf16 autocast of the trainer: these are the loops of the fp32 model that greedy
    decoding runs, and the cache keeps the weights' dtype."""
    with torch.autocast(prompts.device.type, enabled=False):
        return _greedy(model, prompts, new_tokens)


def _greedy(model, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    B, P = prompts.shape
    cache = model.new_cache(B, P + new_tokens)
    pos = torch.arange(P, device=prompts.device).expand(B, P)
    nxt = model(prompts, pos, cache)[:, -1].argmax(-1)                       # (B,)
    out = [nxt]
    for t in range(P, P + new_tokens - 1):
        pos = torch.full((B, 1), t, device=prompts.device)
        nxt = model(nxt[:, None], pos, cache)[:, -1].argmax(-1)              # (B,)
        out.append(nxt)
    return torch.stack(out, 1)                                               # (B, new)


def unlikelihood_loss(model, prompts: torch.Tensor, new_tokens: int = NEW, n: int = NGRAM) -> torch.Tensor:
    """The sequence-level unlikelihood loss of the model's own greedy continuations of
    `prompts` (B, P): mean over generated tokens of -log(1 - p(token)) where the token
    completes a repeated n-gram, 0 elsewhere."""
    was_training = model.training
    model.eval()
    cont = greedy_continue(model, prompts, new_tokens)                       # (B, N)
    model.train(was_training)
    mask = repeat_mask(cont.cpu(), n).to(cont.device)                        # (B, N)
    if not mask.any():
        return torch.zeros((), device=prompts.device)
    seq = torch.cat([prompts, cont], 1)                                      # (B, P + N)
    pos = torch.arange(seq.shape[1], device=seq.device).expand_as(seq)
    logits = model(seq[:, :-1], pos[:, :-1])[:, prompts.shape[1] - 1:]       # (B, N, V): predicts cont
    logits = logits.float()
    others = logits.scatter(-1, cont[..., None], float("-inf"))              # (B, N, V): all but the token
    log_one_minus_p = others.logsumexp(-1) - logits.logsumexp(-1)            # (B, N): log(1 - p), exact
    return -(log_one_minus_p * mask).sum() / mask.numel()


def mle_and_unlikelihood(prompt_len: int = PROMPT, new_tokens: int = NEW, weight: float = UL_WEIGHT,
                         n: int = NGRAM):
    """A trainer loss: next-token loss on the batch, plus `weight` times the unlikelihood loss
    of greedy continuations of the batch rows' first `prompt_len` tokens."""
    def loss_fn(model, x, y):
        return lm_loss(model, x, y) + weight * unlikelihood_loss(model, x[:, :prompt_len], new_tokens, n)
    return loss_fn
