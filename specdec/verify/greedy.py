"""Greedy verification: accept draft tokens while they equal the target's argmax."""
from __future__ import annotations

import torch


def accepted_prefix(accept: torch.Tensor, num_draft: torch.Tensor) -> torch.Tensor:
    """accept (B, k) bool, num_draft (B,) -> length of the all-true prefix within num_draft (B,)."""
    k = accept.shape[1]
    valid = torch.arange(k, device=accept.device)[None, :] < num_draft[:, None]
    return (accept & valid).long().cumprod(dim=1).sum(dim=1)


def greedy_verify(target_logits: torch.Tensor, draft_tokens: torch.Tensor,
                  num_draft: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """target_logits (B, k+1, V), draft_tokens (B, k), num_draft (B,) ->
    (num_accepted (B,), next_token (B,)).

    next_token is the recovered token (the target's argmax at the first mismatch) or,
    when every draft token was accepted, the bonus token after them.
    """
    target_argmax = target_logits.argmax(dim=-1)                             # (B, k+1)
    k = draft_tokens.shape[1]
    num_accepted = accepted_prefix(draft_tokens == target_argmax[:, :k], num_draft)
    next_token = target_argmax.gather(1, num_accepted[:, None]).squeeze(1)
    return num_accepted, next_token
