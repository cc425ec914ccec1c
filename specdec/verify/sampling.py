"""Logits -> probabilities with temperature, top-k and top-p, per row.

The same function is applied to the target (p) and the draft (q) so both are filtered
identically, which rejection sampling needs to stay lossless for the filtered target.
"""
from __future__ import annotations

import torch

from .coupling import coupled_scores
from .processors import LogitProcessing, needs_processing


def probs_from_logits(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor | None = None,
                      top_p: torch.Tensor | None = None) -> torch.Tensor:
    """logits (B, T, V); temperature, top_k, top_p (B,) -> probs (B, T, V).

    Rows with temperature 0 get a (harmless) temperature of 1; callers treat them as greedy.
    top_k = 0 and top_p = 1 disable those filters. Pass None to skip a filter for all rows.
    """
    t = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    logits = logits.float() / t[:, None, None]
    if top_k is not None or top_p is not None:
        logits = _filter(logits, top_k, top_p)
    return torch.softmax(logits, dim=-1)


def _filter(logits, top_k, top_p):
    B, T, V = logits.shape
    sorted_logits, order = logits.sort(dim=-1, descending=True)               # (B, T, V)
    drop = torch.zeros_like(sorted_logits, dtype=torch.bool)
    if top_k is not None:
        rank = torch.arange(V, device=logits.device)
        k = torch.where(top_k > 0, top_k, torch.full_like(top_k, V))
        drop |= rank[None, None, :] >= k[:, None, None]
    if top_p is not None:
        probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
        before = probs.cumsum(-1) - probs                                     # mass strictly above
        drop |= before >= top_p[:, None, None]
    drop[..., 0] = False                                                      # always keep the top token
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


def sample(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling. probs (B, V), uniforms (B,) in [0, 1) -> tokens (B,)."""
    cdf = probs.cumsum(-1)
    u = uniforms[:, None] * cdf[:, -1:]
    idx = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    # never pick a zero-probability token at the numerical edge of the CDF
    idx = idx.clamp_(max=probs.shape[-1] - 1)
    bad = probs.gather(-1, idx[:, None]).squeeze(-1) <= 0
    # the usual case skips a second pass over the vocabulary; reading `bad` is free on the
    # CPU, a device sync elsewhere, so other devices always take the branch-free form
    if probs.device.type == "cpu" and not bool(bad.any()):
        return idx
    return torch.where(bad, probs.argmax(-1), idx)


class BatchSampling:
    """Per-row sampling settings of the running batch as tensors, built once per batch change.

    Rows verified by argmax: greedy rows (on the logits) and coupled rows (on the coupled
    scores, verify/coupling.py). The others are verified by rejection sampling.

    `rows` (the running sequences) are needed when a request processes its logits
    (logit_bias, penalties, min_tokens: verify/processors.py); `processed` says so, and
    then every `probs`/`scores` call takes the positions it chooses and the drafts before
    them, so that the target's p and the draft's q see the same history."""

    def __init__(self, params: list, generators: list, device="cpu", noises: list | None = None,
                 rows: list | None = None):
        self.generators = generators
        self.greedy = [p.greedy for p in params]
        self.all_greedy = all(self.greedy)
        self.any_greedy = any(self.greedy)
        self.greedy_mask = torch.tensor(self.greedy, dtype=torch.bool, device=device)
        self.noises = noises if noises is not None else [None] * len(params)   # CoupledNoise | None
        self.any_coupled = any(n is not None for n in self.noises)
        argmax = [g or n is not None for g, n in zip(self.greedy, self.noises)]
        self.all_argmax, self.any_argmax = all(argmax), any(argmax)
        self.argmax_mask = torch.tensor(argmax, dtype=torch.bool, device=device)
        self.temperature = torch.tensor([float(p.temperature) for p in params], device=device)
        self.top_k = (torch.tensor([p.top_k for p in params], device=device)
                      if any(p.top_k > 0 for p in params) else None)
        self.top_p = (torch.tensor([float(p.top_p) for p in params], device=device)
                      if any(p.top_p < 1 for p in params) else None)
        self.device = device
        self.processed = any(needs_processing(p) for p in params)
        if self.processed and rows is None:
            raise ValueError("a request that processes its logits needs the batch's rows")
        self.processing = LogitProcessing(rows) if self.processed else None
        # sampled rows only, filtered by temperature alone and no logits processing: what the
        # compiled draft loop samples
        self.temperature_only = (not self.any_argmax and self.top_k is None and self.top_p is None
                                 and not self.processed)
        # the round's mode, derived here once for the engine, the proposers and the runner:
        # some row is verified by rejection sampling (not argmax)
        self.sampled = not self.all_argmax
        # every row argmax on its raw logits (no coupled scores, no processing): the forwards
        # compute the argmaxes themselves
        self.fused_argmax = self.all_argmax and not self.any_coupled and not self.processed
        # a token tree can be drafted (proposers/draft_tree.py): greedy rows, or temperature-only
        # sampling without coupled rows
        self.tree_ok = self.fused_argmax or (self.temperature_only and not self.any_coupled)

    def process(self, logits: torch.Tensor, positions=None, drafts=None, rows=None) -> torch.Tensor:
        """logits (B, T, V) -> the processed logits (the same tensor when no row processes).
        positions (B, T): the absolute positions chosen (default: those after the committed
        tokens); drafts (B, D): the tokens proposed after the committed ones."""
        if self.processing is None:
            return logits
        return self.processing.apply(logits.float(), positions, drafts,
                                     rows.tolist() if rows is not None else None)

    def probs(self, logits: torch.Tensor, rows: torch.Tensor | None = None, positions=None,
              drafts=None) -> torch.Tensor:
        """logits (B, T, V) -> filtered probabilities (B, T, V). With `rows` (n,) indices,
        logits (n, T, V) belong to those rows of the batch and get their settings.
        positions, drafts: as for `process`."""
        logits = self.process(logits, positions, drafts, rows)
        if rows is None:
            return probs_from_logits(logits, self.temperature, self.top_k, self.top_p)
        pick = lambda t: None if t is None else t[rows]                                 # noqa: E731
        return probs_from_logits(logits, self.temperature[rows], pick(self.top_k), pick(self.top_p))

    def scores(self, logits: torch.Tensor, positions: list[list[int]], drafts=None) -> torch.Tensor:
        """logits (B, T, V), positions (B, T) of the tokens being chosen, drafts as for
        `process` -> (B, T, V) scores whose argmax is the row's token: the (processed)
        logits for greedy rows, log p + g for coupled rows (the others' are the logits too,
        unused)."""
        logits = self.process(logits, positions, drafts)
        if not self.any_coupled:
            return logits
        noise = torch.stack([n.at(pos) if n is not None else torch.zeros(len(pos), logits.shape[-1])
                             for n, pos in zip(self.noises, positions)]).to(logits.device)  # (B, T, V)
        coupled = torch.tensor([n is not None for n in self.noises], device=logits.device)
        probs = probs_from_logits(logits, self.temperature, self.top_k, self.top_p)
        return torch.where(coupled[:, None, None], coupled_scores(probs, noise), logits.float())

    def uniforms(self, n: int) -> torch.Tensor:
        """(B, n) uniforms, each row from its own request's generator (greedy rows: zeros)."""
        rows = [torch.rand(n, generator=g) if g is not None and not greedy else torch.zeros(n)
                for g, greedy in zip(self.generators, self.greedy)]
        return torch.stack(rows).to(self.device) if rows else torch.zeros(0, n)
