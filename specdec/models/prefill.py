"""Prefill several prompts into consecutive cache rows, one forward per run of equal lengths."""
from __future__ import annotations

import torch

from ..batch import prompt_runs


def prefill_rows(model, cache, prompts: list[list[int]], first_row: int, features: list | None = None,
                 **forward) -> list[torch.Tensor]:
    """Write prompt i into cache row first_row + i (its length set to the prompt's) and return
    each run's forward output, (rows, P, V) or with `forward` options (num_layers,
    hidden_only) what the model returns. Empty prompts only reset their rows. `features`: a
    list that receives each prompt's final hidden states (P, hidden), in order."""
    outs = []
    for i, j in prompt_runs([len(p) for p in prompts]):
        rows = range(first_row + i, first_row + j)
        for row in rows:
            cache.reset(row)
        if not prompts[i]:
            continue
        ids = torch.tensor(prompts[i:j], dtype=torch.long, device=model.device)              # (n, P)
        pos = torch.arange(ids.shape[1], device=ids.device)[None].expand(j - i, -1).contiguous()
        hidden = None if features is None else torch.empty(*ids.shape, model.config.hidden_size, device=ids.device)
        outs.append(model(ids, pos, cache.rows(rows.start, rows.stop), hidden_out=hidden, **forward))
        if hidden is not None:
            features.extend(hidden.unbind(0))
        for row in rows:
            cache.advance(row, ids.shape[1])
    return outs
