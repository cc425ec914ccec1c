"""One round's verification, for the engine: the target's logits and the draft in, the
accepted counts and the next token out, as host lists. Pure functions over the verify/
rules."""
from __future__ import annotations

import torch

from ..proposers.base import Draft
from ..verify.greedy import greedy_verify
from ..verify.rejection import acceptance_probability, rejection_verify
from ..verify.tree import tree_greedy, tree_rejection
from ..verify.sampling import BatchSampling, sample


def plain_next(logits, target_argmax: list[list[int]] | None, sampling: BatchSampling,
               chosen: list[list[int]], native=None) -> list[int] | None:
    """The next token per row for a round without drafts, or None for a batch mixing argmax
    and sampled rows (verification handles that). Same draws as verification's.
    target_argmax: the forward's (B, 1) argmaxes when it computed them (greedy batches);
    native: the compiled decoder (models/native), which samples temperature-only batches in
    one C call while the logits are in cache, or None."""
    if sampling.all_argmax:
        if target_argmax is not None:
            return [best[0] for best in target_argmax]
        return sampling.scores(logits, chosen)[:, 0].argmax(-1).tolist()
    if native is not None and sampling.temperature_only and logits.device.type == "cpu":
        B = logits.shape[0]
        return native.verify_sample(logits, sampling.temperature, torch.zeros(B, 0, dtype=torch.long),
                                    None, [0] * B, sampling.uniforms(1), False)[1]
    if not sampling.any_argmax:
        p = sampling.probs(logits, positions=chosen)[:, 0]                          # (B, V)
        return sample(p, sampling.uniforms(1)[:, 0]).tolist()
    return None


def verify_round(logits, target_argmax: list[list[int]] | None, draft: Draft, draft_rows: list[list[int]],
                 num_draft: list[int], sampling: BatchSampling, chosen: list[list[int]], want_beta: bool,
                 native=None):
    """-> (num_accepted (B,), next_token (B,), beta (B, k) or None), host lists.
    Greedy and coupled rows are verified by argmax on their scores (target_argmax, when the
    forward computed it, for greedy batches), the others by rejection sampling. beta, each
    draft's acceptance probability, is computed for sampled batches when `want_beta` (the
    policy learns from it; argmax acceptance is already deterministic given the context).
    native: as for plain_next; temperature-only batches are verified by the same rule and
    draws in one C call (NativeForward.verify_sample)."""
    if sampling.all_argmax:
        if target_argmax is None:
            target_argmax = sampling.scores(logits, chosen, draft.tokens.to(logits.device)).argmax(-1).tolist()
        return (*greedy_verify(target_argmax, draft_rows, num_draft), None)
    dev = logits.device
    tokens = draft.tokens.to(dev)
    kk = tokens.shape[1]
    if native is not None and sampling.temperature_only and dev.type == "cpu":
        return native.verify_sample(logits, sampling.temperature, tokens, draft.probs, num_draft,
                                    sampling.uniforms(kk + 1), want_beta and kk > 0)
    p = sampling.probs(logits, positions=chosen, drafts=tokens)                     # (B, k+1, V)
    u = sampling.uniforms(kk + 1)
    n_acc, nxt = rejection_verify(p, draft.probs, tokens, torch.tensor(num_draft, device=dev),
                                  u[:, :kk], u[:, kk])
    beta = (acceptance_probability(p, draft.probs, tokens)                          # (B, k)
            if kk > 0 and want_beta else None)
    if sampling.any_argmax:
        best = sampling.scores(logits, chosen, tokens).argmax(-1)                   # (B, k+1)
        g_acc, g_nxt = greedy_verify(best.tolist(), draft_rows, num_draft)
        mask = sampling.argmax_mask
        n_acc = torch.where(mask, torch.tensor(g_acc, device=dev), n_acc)
        nxt = torch.where(mask, torch.tensor(g_nxt, device=dev), nxt)
        if beta is not None:
            match = (tokens == best[:, :kk]).to(beta.dtype)
            beta = torch.where(mask[:, None], match, beta)
    return n_acc.tolist(), nxt.tolist(), beta.tolist() if beta is not None else None


def verify_tree(logits, target_argmax: list[list[int]] | None, draft: Draft, draft_rows: list[list[int]],
                sampling: BatchSampling) -> tuple[list[list[int]], list[int]]:
    """A tree round (draft.parents set; greedy or temperature-only rows, which is all a tree
    proposer drafts for) -> (accepted path of node indices (B, a), next token (B,)), host lists."""
    if sampling.all_argmax:
        best = target_argmax if target_argmax is not None else logits.argmax(-1).tolist()
        return tree_greedy(best, draft_rows, draft.parents)
    p = sampling.probs(logits)                                                      # (B, n+1, V)
    n = logits.shape[1] - 1
    return tree_rejection(p, draft.probs, draft_rows, draft.parents, sampling.uniforms(n + 1))
