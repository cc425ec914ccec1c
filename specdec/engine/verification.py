"""One round's verification, for the engine: the block the target scores, then the target's
logits and the draft in, the accepted path and the next token out, as host lists. Pure
functions over the verify/ rules; `verify` is the one entry, for chains, trees and plain
rounds alike."""
from __future__ import annotations

import torch

from ..models.tree import TreeAttention, block_layout
from ..proposers.base import Draft
from ..verify.greedy import greedy_verify
from ..verify.rejection import acceptance_probability, rejection_verify
from ..verify.tree import tree_greedy, tree_rejection
from ..verify.sampling import BatchSampling, sample


def block_inputs(seqs, lengths: list[int], draft: Draft, rows: list[list[int]], last: int, device
                 ) -> tuple[torch.Tensor, torch.Tensor, TreeAttention | None]:
    """The verify forward's inputs: [pending, d_1..d_kk] per row -> (tokens (B, kk+1),
    positions (B, kk+1), tree attention or None). A chain's positions follow the row's cache
    length (clamped to `last`, the cache's final slot); a tree's go by node depth, its slots
    by node, and it attends along branches. Built on the host from lists: two small tensors."""
    kk = draft.tokens.shape[1]
    tokens = torch.tensor([[s.token_ids[-1]] + d for s, d in zip(seqs, rows)], device=device)      # (B, kk+1)
    tree = None
    if draft.parents is None:
        pos_rows = [[min(n + j, last) for j in range(kk + 1)] for n in lengths]
    else:
        pos_rows, tree = block_layout(lengths, draft.parents, kk + 1)
    return tokens, torch.tensor(pos_rows, device=device), tree                                  # (B, kk+1)


def verify(logits, target_argmax: list[list[int]] | None, proposal, sampling: BatchSampling,
           chosen: list[list[int]], want_beta: bool, runner):
    """-> (accepted (B,), next_token (B,), paths (B, accepted), beta (B, kk) or None), host
    lists, for any round: without drafts (plain_next), a chain (verify_round) or a tree
    (verify_tree). `proposal`: engine.round.Proposal; the rest as verify_round's."""
    draft, rows, B = proposal.draft, proposal.rows, len(proposal.rows)
    nxt = plain_next(logits, target_argmax, sampling, chosen, runner) if logits.shape[1] == 1 else None
    if nxt is not None:
        return [0] * B, nxt, [[] for _ in range(B)], None
    if draft.parents is not None:
        paths, nxt = verify_tree(logits, target_argmax, draft, rows, sampling)
        return [len(p) for p in paths], nxt, paths, None
    accepted, nxt, beta = verify_round(logits, target_argmax, draft, rows, proposal.num_draft, sampling, chosen,
                                       want_beta, runner)
    return accepted, nxt, [list(range(n)) for n in accepted], beta


def plain_next(logits, target_argmax: list[list[int]] | None, sampling: BatchSampling,
               chosen: list[list[int]], runner) -> list[int] | None:
    """The next token per row for a round without drafts, or None for a batch mixing argmax
    and sampled rows (verification handles that). Same draws as verification's.
    target_argmax: the forward's (B, 1) argmaxes when it computed them (greedy batches);
    runner: the target's ModelRunner (models/runner.py), which samples temperature-only
    batches (fused where it can)."""
    if sampling.all_argmax:
        if target_argmax is not None:
            return [best[0] for best in target_argmax]
        return sampling.scores(logits, chosen)[:, 0].argmax(-1).tolist()
    if sampling.temperature_only:
        B, u = logits.shape[0], sampling.uniforms(1)                                   # (B, 1)
        return runner.sample_verify(logits, sampling.temperature, torch.zeros(B, 0, dtype=torch.long), None,
                                    [0] * B, u, False, lambda: (None, _sample_first(logits, sampling, u), None))[1]
    if not sampling.any_argmax:
        p = sampling.probs(logits, positions=chosen)[:, 0]                          # (B, V)
        return sample(p, sampling.uniforms(1)[:, 0]).tolist()
    return None


def verify_round(logits, target_argmax: list[list[int]] | None, draft: Draft, draft_rows: list[list[int]],
                 num_draft: list[int], sampling: BatchSampling, chosen: list[list[int]], want_beta: bool,
                 runner):
    """-> (num_accepted (B,), next_token (B,), beta (B, k) or None), host lists.
    Greedy and coupled rows are verified by argmax on their scores (target_argmax, when the
    forward computed it, for greedy batches), the others by rejection sampling. beta, each
    draft's acceptance probability, is computed for sampled batches when `want_beta` (the
    policy learns from it; argmax acceptance is already deterministic given the context).
    runner: as for plain_next; temperature-only batches are verified by the same rule and
    draws, fused where the runner can (ModelRunner.sample_verify)."""
    if sampling.all_argmax:
        if target_argmax is None:
            target_argmax = sampling.scores(logits, chosen, draft.tokens.to(logits.device)).argmax(-1).tolist()
        return (*greedy_verify(target_argmax, draft_rows, num_draft), None)
    dev = logits.device
    tokens = draft.tokens.to(dev)
    kk = tokens.shape[1]
    u = sampling.uniforms(kk + 1)                                                   # (B, k+1)
    if sampling.temperature_only:
        return runner.sample_verify(logits, sampling.temperature, tokens, draft.probs, num_draft, u,
                                    want_beta and kk > 0, lambda: _rejection(logits, draft, num_draft, sampling,
                                                                             chosen, want_beta, u))
    n_acc, nxt, beta = _rejection(logits, draft, num_draft, sampling, chosen, want_beta, u, lists=False)
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


def _rejection(logits, draft: Draft, num_draft: list[int], sampling: BatchSampling, chosen, want_beta: bool,
               u: torch.Tensor, lists: bool = True):
    """verify/rejection.py's rule in torch -> (num_accepted, next_token, beta or None) as host
    lists, or with lists=False as tensors (B,), (B,), (B, k)."""
    dev = logits.device
    tokens = draft.tokens.to(dev)
    kk = tokens.shape[1]
    p = sampling.probs(logits, positions=chosen, drafts=tokens)                     # (B, k+1, V)
    n_acc, nxt = rejection_verify(p, draft.probs, tokens, torch.tensor(num_draft, device=dev),
                                  u[:, :kk], u[:, kk])
    beta = (acceptance_probability(p, draft.probs, tokens)                          # (B, k)
            if kk > 0 and want_beta else None)
    if not lists:
        return n_acc, nxt, beta
    return n_acc.tolist(), nxt.tolist(), beta.tolist() if beta is not None else None


def _sample_first(logits, sampling: BatchSampling, u: torch.Tensor) -> list[int]:
    """A plain round's sampled token per row, from p at the uniforms u (B, 1)."""
    p = sampling.probs(logits)[:, 0]                                                # (B, V)
    return sample(p, u[:, 0]).tolist()


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
