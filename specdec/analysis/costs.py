"""Step costs for the analysis: t_target(b, q) and t_draft(b), in seconds.

The project's measured cost model (`analysis/cost_model.py`, `CostModel.load_or_measure`)
is the source when it is present. Without it, `_time_forwards` times the forwards
directly: median of a few calls per (b, q) after a warm-up, over a KV cache filled to a
realistic context length. Either way the analysis sees the same small interface, `Costs`.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass
class Costs:
    t_target: Callable[[int, int], float]      # (b, q) -> seconds for one forward of q positions per row
    t_draft: Callable[[int], float]            # b -> seconds per drafted token (all rows)
    source: str                                # "cost_model" or "timed here"
    raw: dict = field(default_factory=dict)    # the cost model's own table, when there is one

    def table(self, batch_sizes, q_max: int) -> dict:
        """t(b, q) for the report: {"b": [...], "q": [...], "t_s": [[...per q] per b], "t_draft_s": [...]}."""
        qs = list(range(1, q_max + 1))
        return {"b": list(batch_sizes), "q": qs,
                "t_s": [[self.t_target(b, q) for q in qs] for b in batch_sizes],
                "t_draft_s": [self.t_draft(b) for b in batch_sizes], "source": self.source}

    def draft_cost_ratio(self, b: int = 1) -> float:
        """c = t_draft / t_target at batch b (Leviathan's c)."""
        return self.t_draft(b) / self.t_target(b, 1)


def load_costs(target, draft=None, proposer_key: str | None = None, batch_sizes=(1,), q_max: int = 9,
               context: int = 192, device: str = "cpu", threads: int | None = None, quick: bool = True,
               on_progress: Callable[[float], None] | None = None) -> Costs:
    """Costs for `target` (a LlamaModel) and the proposer: the cost model if available, else timed."""
    try:
        from .cost_model import CostModel  # written separately; optional until it lands
    except ModuleNotFoundError as e:
        if e.name != f"{__package__}.cost_model":
            raise
        CostModel = None
    if CostModel is not None:
        cm = CostModel.load_or_measure(target, draft, device=device, threads=threads, quick=quick)
        key = proposer_key or "none"
        raw = cm.table() if hasattr(cm, "table") else {}
        if on_progress:
            on_progress(1.0)
        return Costs(lambda b, q: cm.t_target(b, q), lambda b: cm.t_draft(key, b), "cost_model",
                     raw if isinstance(raw, dict) else {"table": raw})
    return _time_forwards(target, draft, batch_sizes, q_max, context, on_progress)


@torch.inference_mode()
def _median_forward(model, b: int, q: int, context: int, reps: int) -> float:
    cache = model.new_cache(b, context + q + 64)
    cache.lengths = [context] * b
    dev = model.device
    tokens = torch.randint(2, model.config.vocab_size, (b, q), device=dev)          # (b, q)
    pos = context + torch.arange(q, device=dev)[None].expand(b, q)                  # (b, q)
    model(tokens, pos, cache)                                                      # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        model(tokens, pos, cache)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _time_forwards(target, draft, batch_sizes, q_max, context, on_progress) -> Costs:
    """Fallback: time target forwards on the (b, q) grid and draft forwards at q = 1."""
    bs = sorted(set(batch_sizes) | {1})
    reps = 5
    grid: dict[tuple[int, int], float] = {}
    drafts: dict[int, float] = {}
    total, done = len(bs) * (q_max + (1 if draft is not None else 0)), 0
    for b in bs:
        for q in range(1, q_max + 1):
            grid[b, q] = _median_forward(target, b, q, context, reps)
            done += 1
            if on_progress:
                on_progress(done / total)
        if draft is not None:
            drafts[b] = _median_forward(draft, b, 1, context, reps)
            done += 1
            if on_progress:
                on_progress(done / total)

    def t_target(b: int, q: int) -> float:
        return _interp_b(b, bs, lambda bb: grid[bb, min(max(q, 1), q_max)])

    def t_draft(b: int) -> float:
        return _interp_b(b, bs, lambda bb: drafts[bb]) if drafts else 0.0

    return Costs(t_target, t_draft, "timed here")


def _interp_b(b: int, bs: list[int], f) -> float:
    """Linear interpolation in batch size between measured points (clamped at the ends)."""
    if b <= bs[0]:
        return f(bs[0])
    for lo, hi in zip(bs, bs[1:]):
        if b <= hi:
            w = (b - lo) / (hi - lo)
            return (1 - w) * f(lo) + w * f(hi)
    return f(bs[-1])
