"""A cell's acceptance α with its 95% interval over prompts.

α is the maximum-likelihood i.i.d. acceptance of the cell's rounds (predict.fit_alpha):
accepted / (accepted + rejections), pooled over every prompt. Prompts are what varies in a
workload (one passage copies, the next does not), so the interval resamples prompts, each
with all its rounds: the percentile bootstrap of the pooled α over prompts drawn with
replacement. A cell's counts per prompt are measure.CellResult's `prompt_counts`.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .interval import LEVEL

DRAWS = 2000          # resamples: the quantiles move by well under a point of α between seeds


def alpha_interval(counts: Sequence[Sequence[int]], seed: int = 0) -> list[float] | None:
    """[lo, hi] of α over prompts, from each prompt's (accepted, rejections); None without
    prompts that drafted."""
    c = np.array([x for x in counts if x[0] + x[1] > 0], dtype=float).reshape(-1, 2)
    if not len(c):
        return None
    picks = np.random.default_rng(seed).integers(0, len(c), size=(DRAWS, len(c)))
    acc, rej = c[picks, 0].sum(1), c[picks, 1].sum(1)
    alphas = acc / (acc + rej)
    tail = (1 - LEVEL) / 2
    return [float(np.quantile(alphas, tail)), float(np.quantile(alphas, 1 - tail))]


def prompt_counts(accepted_lengths: Sequence[int], draft_lengths: Sequence[int]) -> tuple[int, int]:
    """One prompt's (accepted, rejections) as fit_alpha counts them: a round that accepted
    fewer than it drafted ended on a rejection."""
    return sum(accepted_lengths), sum(1 for n, d in zip(accepted_lengths, draft_lengths) if n < d)
