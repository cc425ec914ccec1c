"""Greedy verification: accept draft tokens while they equal the target's argmax."""
from __future__ import annotations

import torch


def accepted_prefix(accept: torch.Tensor, num_draft: torch.Tensor) -> torch.Tensor:
    """accept (B, k) bool, num_draft (B,) -> length of the all-true prefix within num_draft (B,)."""
    k = accept.shape[1]
    valid = torch.arange(k, device=accept.device)[None, :] < num_draft[:, None]
    return (accept & valid).long().cumprod(dim=1).sum(dim=1)


def greedy_verify(target_argmax: list[list[int]], draft_tokens: list[list[int]],
                  num_draft: list[int]) -> tuple[list[int], list[int]]:
    """target_argmax (B, k+1), draft_tokens (B, >= num_draft[b]), num_draft (B,), host lists
    -> (num_accepted (B,), next_token (B,)).

    next_token is the recovered token (the target's argmax at the first mismatch) or,
    when every draft token was accepted, the bonus token after them. On host lists: a
    round's k + 1 argmaxes per row are a few integers, and tensor ops right after a forward
    that streamed the weights through the caches cost ~25 us each (measured).
    """
    accepted, next_token = [], []
    for best, draft, n in zip(target_argmax, draft_tokens, num_draft):
        a = 0
        while a < n and draft[a] == best[a]:
            a += 1
        accepted.append(a)
        next_token.append(best[a])
    return accepted, next_token
