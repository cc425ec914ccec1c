"""Everything a cost model has measured, as one JSON-ready dict (`specdec profile`, the
analyzer's report, benchmark records)."""
from __future__ import annotations

from .cost_model import CostModel, mode_name


def cost_table(cm: CostModel) -> dict:
    """{"identity", "contended" (measured while the machine was busy), "l_ref", "l_long", "q_max",
        "target": {b: [seconds at q = 1..q_max]} (measured rows, cache length l_ref),
        "measured_q": {b: [q measured]}, "kv_sigma": [s per row per cached token, by q],
        "kv_effect": {b: t(b, q_max, l_long) / t(b, q_max, l_ref)},
        "draft": {key: {b: seconds per proposed token}}}"""
    p, qs = cm.target, range(1, cm.q_max + 1)
    rows = p.rows(p.l_ref)
    ident = next((s.identity for s in cm.sources if s.is_target), None)
    return {
        "identity": ident, "contended": any(s.contended for s in cm.sources), "l_ref": p.l_ref, "l_long": p.l_long, "q_max": cm.q_max,
        "target": {b: [cm.t_target(b, q) for q in qs] for b in rows},
        "measured_q": {b: sorted(p.row(p.l_ref, b)) for b in rows},
        "kv_sigma": [p.sigma(q) for q in qs],
        "kv_effect": {b: p.t(b, cm.q_max, p.l_long) / max(p.t(b, cm.q_max, p.l_ref), 1e-12)
                      for b in rows},
        "draft": {str(k): {b: cm.t_draft(k, b) for b in d.rows(d.l_ref)} for k, d in cm.drafts.items()},
        "rounds": {mode_name(m): {"step_s": {b: {k: r.points[(b, k)][0] for k in r.ks(b)} for b in r.rows()},
                                  "overhead_s": {b: {k: cm.overhead(m[0], b, k, m[1]) for k in r.ks(b)}
                                                 for b in r.rows()},
                                  "contended": r.contended}
                   for m, r in cm.rounds.items()},
    }
