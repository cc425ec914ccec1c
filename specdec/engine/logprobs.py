"""The target's log-probabilities of the tokens a round emits, read off the forward that
verified them: no extra forward, and the same numbers plain decoding would give (the
forward is bitwise shape-invariant, docs/exactness.md). They are the model's own
distribution, log_softmax of the raw logits, before temperature, top-k or top-p (vLLM's
default `raw_logprobs`)."""
from __future__ import annotations

import torch

# One emitted token's record: its log-probability and the top alternatives as (id, logprob).
TokenLogprob = tuple[float, list[tuple[int, float]]]


def emitted_logprobs(logits: torch.Tensor, emitted: list[list[int]], tops: list[int | None],
                     inputs: list[list[int]] | None = None) -> list[list[TokenLogprob] | None]:
    """logits (B, T, V): the round's target forward; emitted[b]: the tokens row b emits, the
    j-th predicted by logits[b, inputs[b][j]] (default j: a chain; a tree's accepted branch
    reads its nodes' rows); tops[b]: None where the row did not ask for log-probabilities,
    else how many alternatives to list. -> one list per row, or None."""
    out: list[list[TokenLogprob] | None] = []
    for b, (ids, top) in enumerate(zip(emitted, tops)):
        if top is None or not ids:
            out.append(None if top is None else [])
            continue
        rows = inputs[b][:len(ids)] if inputs is not None else list(range(len(ids)))
        lp = torch.log_softmax(logits[b, rows].float(), dim=-1)                        # (n, V)
        at = torch.tensor(ids, device=lp.device)
        chosen = lp[torch.arange(len(ids), device=lp.device), at].tolist()             # (n,)
        if top:
            vals, idx = lp.topk(top, dim=-1)                                            # (n, top)
            alts = [list(zip(i, v)) for i, v in zip(idx.tolist(), vals.tolist())]
        else:
            alts = [[] for _ in ids]
        out.append(list(zip(chosen, alts)))
    return out
