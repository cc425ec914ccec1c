"""Everything a cost model holds, as one JSON-ready dict (`specdec profile`, the analyzer's
report, benchmark records)."""
from __future__ import annotations

from .cost_model import CostModel


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
