"""Step costs for the analysis, from the project's measured cost model (cost_model.py).

`Costs` narrows `CostModel` to what the predictions need, at the cache length the runs
actually decode at: t_target(b, q) for one target forward of q positions per row, and
t_draft(b) per drafted token. The cost model caches its measurements per model shape, so
only the first analysis on a machine pays for them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..costs.cost_model import CostModel


@dataclass
class Costs:
    t_target: Callable[[int, int], float]      # (b, q) -> seconds for one forward of q positions per row
    t_draft: Callable[[int], float]            # b -> seconds per drafted token (all rows)
    source: str                                # how the numbers were obtained, for the report
    raw: dict = field(default_factory=dict)    # the cost model's own table

    def table(self, batch_sizes, q_max: int) -> dict:
        """t(b, q) for the report: {"b": [...], "q": [...], "t_s": [[...per q] per b], "t_draft_s": [...]}."""
        qs = list(range(1, q_max + 1))
        return {"b": list(batch_sizes), "q": qs,
                "t_s": [[self.t_target(b, q) for q in qs] for b in batch_sizes],
                "t_draft_s": [self.t_draft(b) for b in batch_sizes], "source": self.source}

    def draft_cost_ratio(self, b: int = 1) -> float:
        """c = t_draft / t_target at batch b (Leviathan's c)."""
        return self.t_draft(b) / self.t_target(b, 1)


def load_costs(target, proposer=None, batch_sizes=(1,), q_max: int = 9, context: int = 128,
               device: str | None = None, threads: int | None = None, remeasure: bool = True,
               on_progress: Callable[[float], None] | None = None) -> Costs:
    """Costs of `target` (a LlamaModel) and `proposer` (timed if it runs a model), measured
    (or read from the cost model's cache) for every batch size in `batch_sizes` and
    q = 1..q_max, and evaluated at `context` cached tokens per row. `remeasure` (default)
    times the forwards now, under the same machine load as the runs they predict, rather
    than reusing the cost model's cache from another time."""
    bs = sorted(set(batch_sizes) | {1})
    cm = CostModel.load_or_measure(target, proposer, device=device, threads=threads, quick=True,
                                   k_max=q_max - 1, batch_sizes=bs, remeasure=remeasure)
    for i, b in enumerate(bs):
        while cm.ensure(b):          # complete the measured rows around b, one q at a time
            if on_progress:
                on_progress((i + 0.5) / len(bs))
        if on_progress:
            on_progress((i + 1) / len(bs))
    key = proposer.cost_key() if proposer is not None else "none"
    return Costs(lambda b, q: cm.t_target(b, q, context), lambda b: cm.t_draft(key, b, context),
                 "measured cost model (costs/cost_model.py)", cm.table())
