"""Step costs for the analysis, from the project's measured cost model (costs/cost_model.py).

`Costs` narrows `CostModel` to what the predictions need, at the cache length the runs
actually decode at:
- t_target(b, q): one target forward of q positions per row, timed alone;
- t_draft(b): one draft step per drafted token, timed alone;
- t_round(b, k, sampled): one real engine step drafting k tokens (k = 0: a plain step),
  i.e. the forwards plus the measured per-round overhead (costs/rounds.py). Predictions use
  this; the forward-only numbers are kept to show how much the overhead matters.
The cost model caches its measurements per model shape, so only the first analysis on a
machine pays for them (unless `remeasure`, the default of `specdec analyze`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..costs.cost_model import CostModel
from .predict import cost_ratio


@dataclass
class Costs:
    t_target: Callable[[int, int], float]           # (b, q) -> seconds, one forward of q positions per row
    t_draft: Callable[[int], float]                 # b -> seconds per drafted token (all rows)
    t_round: Callable[..., float]                   # (b, k, sampled[, L]) -> seconds of a real engine step
    source: str                                     # how the numbers were obtained, for the report
    raw: dict = field(default_factory=dict)         # the cost model's own table
    t_drafting: Callable[[int, int], float] | None = None   # (b, k) -> seconds of a round's drafting
                                                    # (None: k * t_draft(b); a parallel draft: one forward)

    def ratio(self, b: int, k: int, sampled: bool = False) -> float:
        """A k-draft round's cost in plain engine steps at the same batch size."""
        return self.t_round(b, k, sampled) / self.t_round(b, 0, sampled)

    def step(self, b: int, k: int, sampled: bool = False, L: float | None = None) -> float:
        """t_round at cache length L (None: the analysis's own)."""
        return self.t_round(b, k, sampled) if L is None else self.t_round(b, k, sampled, L)

    def forward_ratio(self, b: int, k: int) -> float:
        """The same from the forwards alone: (t_target(b, k+1) + k t_draft(b)) / t_target(b, 1),
        or with the drafting's own price where it is not k steps (t_drafting)."""
        if self.t_drafting is None:
            return cost_ratio(self.t_target, self.t_draft, b, k)
        return (self.t_target(b, k + 1) + self.t_drafting(b, k)) / self.t_target(b, 1)

    def table(self, batch_sizes, q_max: int) -> dict:
        """For the report: {"b", "q", "t_s": t(b, q) per b, "t_draft_s", "round_s": real step
        seconds by k = 0..q_max-1 per b (greedy), "source"}."""
        qs = list(range(1, q_max + 1))
        return {"b": list(batch_sizes), "q": qs,
                "t_s": [[self.t_target(b, q) for q in qs] for b in batch_sizes],
                "t_draft_s": [self.t_draft(b) for b in batch_sizes],
                "round_s": [[self.t_round(b, k, False) for k in range(q_max)] for b in batch_sizes],
                "source": self.source}

    def draft_cost_ratio(self, b: int = 1) -> float:
        """c = t_draft / t_target at batch b (Leviathan's c)."""
        return self.t_draft(b) / self.t_target(b, 1)


# The cost model's l_long. A context past it (long-code, about 2,000 tokens) is timed there:
# extrapolated from 128 and 512 (a lever of 4.7x on their noise), t(q)/t(1) at 1,950 cached
# tokens came out 1.06-2.91 in two passes where timing at 1,950 gave 1.13-1.89, repeatably.
L_EXTRAPOLATE = 512


def load_costs(target, proposer=None, batch_sizes=(1,), q_max: int = 9, context: int = 128,
               remeasure: bool = True,
               round_timer=None, modes=(False,),
               on_progress: Callable[[float], None] | None = None, longest: int = 0,
               ks: list[int] | None = None, rows: dict | None = None) -> Costs:
    """Costs of `target` (a LlamaModel) and `proposer` (timed if it runs a model), measured
    (or read from the cost model's cache) at every batch size in `batch_sizes` and
    q = 1..q_max, and evaluated at `context` cached tokens per row. With `round_timer`
    (adaptive/calibrate.py), real rounds are timed too, for each sampling mode in `modes`
    (False: greedy, True: sampled), at the drafting lengths `ks` (None: 1..q_max - 1; others
    are priced by their row's line) and the batch sizes `rows[mode]` (None: all; batch 1 is
    always timed). `remeasure` (default) times everything now, under the
    same machine load as the runs it predicts, rather than reusing an older cache. `longest`:
    the longest cache the runs decode at; past L_EXTRAPOLATE the forwards are timed there
    (the attention of a verify forward outgrows the caches: not linear in L from 512)."""
    bs = sorted(set(batch_sizes) | {1})
    cm = CostModel.load_or_measure(target, proposer, k_max=q_max - 1, batch_sizes=bs, remeasure=remeasure,
                                   l_long=max(L_EXTRAPOLATE, longest))
    key = proposer.cost_key() if proposer is not None else None
    modes = list(modes) if round_timer is not None and key is not None else []
    if on_progress:
        on_progress(1 / (1 + len(modes)))
    for i, sampled in enumerate(modes):
        mode_rows = bs if rows is None or rows.get(sampled) is None else sorted(set(rows[sampled]) | {1})
        cm.measure_rounds(round_timer, key, mode_rows, sampled, remeasure=remeasure, ks=ks,
                          on_row=on_progress and (lambda j, n, i=i: on_progress((i + 1 + j / n) / (1 + len(modes)))))
    return Costs(lambda b, q: cm.t_target(b, q, context), lambda b: cm.t_draft(key, b, context) if key else 0.0,
                 lambda b, k, s, L=None: cm.t_round(key, b, k, context if L is None else L, s),
                 "measured cost model (costs/cost_model.py): forwards plus real engine rounds", cost_table(cm),
                 lambda b, k: cm.t_drafting(key, b, k, context) if key else 0.0)


def cost_table(cm: CostModel) -> dict:
    """{"identity", "contended" (measured while the machine was busy), "l_ref", "l_long", "q_max",
        "target": {b: [seconds at q = 1..q_max]} (measured rows, cache length l_ref),
        "kv_effect": {b: t(b, q_max, l_long) / t(b, q_max, l_ref)},
        "draft": {key: {b: seconds per proposed token}},
        "rounds": {"<key>|greedy" or "<key>|sampled": {b: {k: measured seconds of a real step}}}}"""
    p, qs = cm.target, range(1, cm.q_max + 1)
    return {
        "identity": cm.identities.get(None), "l_ref": p.l_ref, "l_long": p.l_long, "q_max": cm.q_max,
        "contended": p.contended or any(t.contended for t in [*cm.drafts.values(), *cm.rounds.values()]),
        "target": {b: [cm.t_target(b, q) for q in qs] for b in p.rows()},
        "kv_effect": {b: p.t(b, cm.q_max, p.l_long) / max(p.t(b, cm.q_max), 1e-12) for b in p.rows()},
        "draft": {str(k): {b: cm.t_draft(k, b) for b in d.rows()} for k, d in cm.drafts.items()},
        "rounds": {f"{key}|{'sampled' if sampled else 'greedy'}":
                   {b: {k: t.points[(b, k)][0] for k in t.ks(b)} for b in t.rows()}
                   for (key, sampled), t in cm.rounds.items()},
    }
