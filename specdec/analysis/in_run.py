"""Step costs in the conditions of the runs: the cost model's rounds, anchored on the run's own plain steps.

The cost model times its rounds apart from the runs: one scratch engine pair at a time,
on synthetic prompts. Inside the runs, four engines or more take turns (plain and every
k of a block, each with its own caches), and every step pays what that costs (threads
woken again, caches refilled, the scheduler's bookkeeping) on top of its forwards: the
plain steps of a run come out slower than the cost model's plain step at the same batch
and cache length. That extra is paid per step, whatever the step drafts, so it is an
offset, not a factor: a run's plain steps measure it (`offset`), and every round the
prediction prices gets it added (`shifted`). The speculative steps of the run are not
used: the prediction stays a prediction.
"""
from __future__ import annotations

from typing import Callable

FLOOR = 0.5     # a shifted step never drops below half the cost model's: an offset corrects, it does not erase


def offset(plain_step_s: float | None, model_plain_s: float) -> float:
    """Seconds a run's plain step took beyond the cost model's (0 when the run has none)."""
    return plain_step_s - model_plain_s if plain_step_s else 0.0


def shifted(step: Callable[[int, int], float], extra: float) -> Callable[[int, int], float]:
    """`step(a, k)` (seconds of a round of a rows drafting k) plus the per-step `extra`."""
    return lambda a, k: max(step(a, k) + extra, FLOOR * step(a, k))
