"""Logit processing ahead of temperature, top-k and top-p: logit_bias, min_tokens and the
repetition, frequency and presence penalties (vLLM's definitions and order).

For row b choosing the token at absolute position t (its index in prompt + output):

    logits += bias                                       (logit_bias)
    logits[stop ids] = -inf   while output tokens < min_tokens
    logits = logits / r if > 0 else logits * r   on tokens seen in prompt or output
    logits -= frequency * count_out(v) + presence * [count_out(v) > 0]

where the output counted is every token between the prompt and t: the committed ones
and, inside a speculative round, the drafts before t. Target and draft process a
position with the same history, so p and q are the processed distributions and
rejection sampling stays exact for them; greedy rows take the argmax of the processed
logits, at every position the same numbers whether scored alone or in a round (the
operations are elementwise).

Rows are duck-typed: each has `params` (with the fields below), `token_ids` (prompt +
output, a live list), `prompt_len` and `stop_ids`.
"""
from __future__ import annotations

import torch


def needs_processing(params) -> bool:
    """Whether a request's logits are changed before temperature (a no-op row costs nothing)."""
    return bool(getattr(params, "logit_bias", ()) or getattr(params, "min_tokens", 0)
                or getattr(params, "frequency_penalty", 0) or getattr(params, "presence_penalty", 0)
                or getattr(params, "repetition_penalty", 1) != 1)


class LogitProcessing:
    """The processing of a batch's rows; built with the batch, reads each row's live history."""

    def __init__(self, rows: list):
        self.rows = rows
        self.active = [needs_processing(r.params) for r in rows]
        self._prompt_masks: dict[int, torch.Tensor] = {}
        self._bias: dict[int, torch.Tensor] = {}

    def apply(self, logits: torch.Tensor, positions: list[list[int]] | None,
              drafts=None, rows: list[int] | None = None) -> torch.Tensor:
        """logits (B, T, V) float -> processed (B, T, V) (a new tensor; inputs untouched).
        positions[b][j]: the absolute position logits[b, j] chooses (default: the T
        positions after the committed tokens); drafts (B, D) tensor or lists: the tokens
        proposed after the committed ones, so that position t's history is
        token_ids + drafts[b][:t - len(token_ids)]. `rows`: the batch rows logits[b] is."""
        B, T, V = logits.shape
        which = rows if rows is not None else list(range(B))
        if not any(self.active[r] for r in which):
            return logits
        if drafts is not None and not isinstance(drafts, list):
            drafts = drafts.tolist()
        out = logits.clone()
        for b, r in enumerate(which):
            if not self.active[r]:
                continue
            seq = self.rows[r]
            L = len(seq.token_ids)
            pos = positions[b] if positions is not None else [L + j for j in range(T)]
            extra = [max(0, t - L) for t in pos]                                  # drafts before each
            row_drafts = (drafts[b] if drafts is not None else [])[:max(extra)]
            out[b] = self._row(out[b], r, seq, extra, row_drafts, V)
        return out

    def _row(self, lg: torch.Tensor, r: int, seq, extra: list[int], drafts: list[int], V: int):
        """lg (T, V) of one row; extra[j] drafts precede position j."""
        p = seq.params
        dev = lg.device
        out_ids = seq.token_ids[seq.prompt_len:]
        base = torch.bincount(torch.tensor(out_ids, dtype=torch.long), minlength=V)[:V].float()  # (V,)
        if drafts:
            steps = torch.nn.functional.one_hot(torch.tensor(drafts), V).float().cumsum(0)       # (D, V)
            steps = torch.cat([torch.zeros(1, V), steps])                                        # (D+1, V)
            counts = base[None] + steps[torch.tensor(extra)]                                     # (T, V)
        else:
            counts = base[None].expand(len(extra), V)
        counts = counts.to(dev)
        if p.logit_bias:
            lg = lg + self._bias_of(r, p.logit_bias, V, dev)
        if p.min_tokens and seq.stop_ids:
            early = torch.tensor([len(out_ids) + e < p.min_tokens for e in extra], device=dev)  # (T,)
            stops = torch.zeros(V, dtype=torch.bool, device=dev)
            stops[[t for t in seq.stop_ids if 0 <= t < V]] = True
            lg = lg.masked_fill(early[:, None] & stops[None], float("-inf"))
        seen = counts > 0
        if p.repetition_penalty != 1:
            rep = float(p.repetition_penalty)
            mask = seen | self._prompt_mask(r, seq, V, dev)[None]
            lg = torch.where(mask, torch.where(lg > 0, lg / rep, lg * rep), lg)
        if p.frequency_penalty:
            lg = lg - float(p.frequency_penalty) * counts
        if p.presence_penalty:
            lg = lg - float(p.presence_penalty) * seen.float()
        return lg

    def _prompt_mask(self, r: int, seq, V: int, dev) -> torch.Tensor:
        m = self._prompt_masks.get(r)
        if m is None:
            m = torch.zeros(V, dtype=torch.bool)
            ids = [t for t in seq.token_ids[:seq.prompt_len] if 0 <= t < V]
            m[ids] = True
            m = self._prompt_masks[r] = m.to(dev)
        return m

    def _bias_of(self, r: int, logit_bias, V: int, dev) -> torch.Tensor:
        bias = self._bias.get(r)
        if bias is None:
            bias = torch.zeros(V)
            for t, v in logit_bias:
                if 0 <= t < V:
                    bias[t] = float(v)
            bias = self._bias[r] = bias.to(dev)
        return bias
