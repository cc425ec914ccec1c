"""Admission: prefill the requests a step admits in as few target forwards as their prompts allow.

Requests admitted together take consecutive cache rows in arrival order. A run of neighbours
with prompts of one length is one forward over those rows (the forward is shape-invariant,
docs/exactness.md, so a prompt's logits do not depend on its neighbours). Each request then
gets its first token: by argmax for greedy and coupled rows, else sampled from the target's
processed distribution, each row with its own generator.
"""
from __future__ import annotations

import torch

from ..models.prefill import prefill_rows
from ..verify.sampling import BatchSampling, sample
from .logprobs import emitted_logprobs


def prefill(target, cache, prompts: list[list[int]], base: int, features: list | None = None
            ) -> tuple[torch.Tensor, int]:
    """Write `prompts` into cache rows base, base + 1, ... -> ((n, 1, V) logits of each prompt's
    last position, forwards run). `features`: a list that receives each prompt's final hidden
    states (P, hidden), for a proposer that drafts from them."""
    outs = prefill_rows(target, cache, prompts, base, features)
    return torch.cat([out[:, -1:] for out in outs]), len(outs)


def first_tokens(seqs: list, logits: torch.Tensor, device) -> list[tuple[int, object]]:
    """(token, logprobs) of each admitted sequence from its prompt's last logits (n, 1, V)."""
    argmax = [s.params.greedy or s.noise is not None for s in seqs]
    tokens: list[int] = [0] * len(seqs)
    for mode in (True, False):
        idx = [i for i, a in enumerate(argmax) if a is mode]
        if not idx:
            continue
        group = [seqs[i] for i in idx]
        s = BatchSampling([q.params for q in group], [q.generator for q in group], device,
                          [q.noise for q in group], group)
        lg = logits[idx]                                                                 # (m, 1, V)
        if mode:
            picked = s.scores(lg, [[len(q.token_ids)] for q in group])[:, 0].argmax(-1)
        else:
            picked = sample(s.probs(lg)[:, 0], s.uniforms(1)[:, 0])
        for i, t in zip(idx, picked.tolist()):
            tokens[i] = int(t)
    tops = [s.params.logprobs for s in seqs]
    lps = (emitted_logprobs(logits, [[t] for t in tokens], tops) if any(t is not None for t in tops)
           else [None] * len(seqs))
    return list(zip(tokens, lps))
