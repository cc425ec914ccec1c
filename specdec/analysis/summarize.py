"""Turn measured cells and step costs into the analysis: predictions, errors, regimes, verdict.

Input: cell dicts from `measure.CellResult.as_dict()` and a `costs.Costs`. Output: one
JSON-able dict that `report.py` renders. Every number in it comes from the measurements.

Two predictions per cell, both from the acceptance measured at the block's largest k
(held out for every smaller k; in-sample for the largest k itself) and the measured
round cost:
- `iid`: Leviathan's formula with the alpha fitted there;
- `positional`: the per-position acceptance measured there.
They differ exactly where acceptance depends on the position in the draft.
"""
from __future__ import annotations

import statistics

from . import predict as P

THEORY_KS = tuple(range(1, 9))
MISLEAD = 0.10      # the i.i.d. tokens-per-round estimate is "misleading" beyond this relative error


def _ratio(costs, b, k):
    return P.cost_ratio(costs.t_target, costs.t_draft, b, k)


def annotate(cells: list[dict], costs) -> list[dict]:
    """Add predictions and errors to every cell (in place) and return them."""
    largest: dict[tuple, dict] = {}
    for c in cells:
        key = (c["workload"], c["batch"], c["temperature"])
        if key not in largest or c["k"] > largest[key]["k"]:
            largest[key] = c
    for c in cells:
        k, b = c["k"], c["batch"]
        ref = largest[(c["workload"], b, c["temperature"])]
        cond = P.conditional_alphas(ref["accepted_per_pos"], ref["drafts"]) if ref["drafts"] else []
        c["cond_alphas"] = P.conditional_alphas(c["accepted_per_pos"], c["drafts"]) if c["drafts"] else []
        c["ratio"] = _ratio(costs, b, k)
        c["ratio_measured"] = c["spec_step_s"] / c["plain_step_s"] if c["plain_step_s"] else None
        c["alpha_ref"] = ref["alpha"]
        c["tokens_iid"] = P.expected_tokens(ref["alpha"], k)
        c["tokens_mixture"] = P.expected_tokens_mixture(c["prompt_alphas"], k) if c["prompt_alphas"] else None
        c["tokens_positional"] = P.expected_tokens_positional(cond, k) if len(cond) >= k else c["tokens_iid"]
        c["positional_held_out"] = ref is not c
        c["pred_iid"] = P.speedup(c["tokens_iid"], c["ratio"])
        c["pred_positional"] = P.speedup(c["tokens_positional"], c["ratio"])
        # engine work outside the forwards, per step, from the plain runs (the baseline, not
        # the runs being predicted): the same bookkeeping happens once per speculative round
        o = max(0.0, c["plain_step_s"] - costs.t_target(b, 1)) if c["plain_step_s"] else 0.0
        c["overhead_s"] = o
        c["pred_calibrated"] = c["tokens_positional"] * (costs.t_target(b, 1) + o) / (
            P.round_cost(costs.t_target, costs.t_draft, b, k) + o)
        m = c["speedup"]
        c["err_calibrated"] = P.relative_error(c["pred_calibrated"], m) if m else None
        c["err_iid"] = P.relative_error(c["pred_iid"], m) if m else None
        c["err_positional"] = P.relative_error(c["pred_positional"], m) if m else None
        t = c["tokens_per_step"]
        c["iid_misleads"] = abs(c["tokens_iid"] - t) / t > MISLEAD
        c["why"] = _why(c) if c["err_positional"] is not None and abs(c["err_positional"]) > MISLEAD else ""
    return cells


def _why(c: dict) -> str:
    """Data-driven reasons a prediction missed by more than 10%."""
    reasons = []
    t = c["tokens_per_step"]
    if abs(c["tokens_positional"] - t) / t > MISLEAD:
        reasons.append(f"acceptance at k={c['k']} differs from the largest-k run "
                       f"({c['tokens_positional']:.2f} vs {t:.2f} tokens/step)")
    rm = c["ratio_measured"]
    if rm and abs(rm - c["ratio"]) / c["ratio"] > MISLEAD:
        reasons.append(f"a round cost {rm:.2f}x a plain step in the run but {c['ratio']:.2f}x in the cost model "
                       "(work outside the forwards, or timing noise)")
    s = c["speedups"]
    if len(s) >= 2 and (max(s) - min(s)) / statistics.median(s) > 0.25:
        reasons.append(f"repeats spread {min(s):.2f}-{max(s):.2f}x (noisy machine)")
    return "; ".join(reasons) or "tail effects: rows finish at different rounds and the batch shrinks"


def _find(cells, **kw):
    return [c for c in cells if all(c[k] == v for k, v in kw.items())]


def break_even_table(costs, batch_sizes, ks=THEORY_KS) -> dict:
    """{batch: {k: minimum alpha that pays, or None}}."""
    return {b: {k: P.break_even_alpha(k, _ratio(costs, b, k)) for k in ks} for b in batch_sizes}


def regimes(cells: list[dict], t0: float) -> list[dict]:
    """The seed's three regimes: predictable text, hard text, heavy batching (measured)."""
    base = _find(cells, batch=1, temperature=t0)
    if not base:
        return []
    by_w: dict[str, list[dict]] = {}
    for c in base:
        by_w.setdefault(c["workload"], []).append(c)
    alpha = {w: max(x["alpha"] for x in cs) for w, cs in by_w.items()}
    easy = max(alpha, key=alpha.get)
    best = max(by_w[easy], key=lambda c: c["speedup"])
    rows = [dict(regime="predictable text", cell=best)]
    hard = min(alpha, key=alpha.get)
    if hard != easy:
        rows.append(dict(regime="hard text", cell=_find(base, workload=hard, k=best["k"])[0]))
    swept = [c for c in cells if c["batch"] > 1 and c["temperature"] == t0 and c["k"] == best["k"]]
    if swept:
        bmax = max(c["batch"] for c in swept)
        heavy = [c for c in swept if c["batch"] == bmax]
        heavy = [c for c in heavy if c["workload"] == easy] or heavy
        rows.append(dict(regime="heavy batching", cell=max(heavy, key=lambda c: c["alpha"])))
    return rows


def best_k_for(cell: dict, costs, ks=THEORY_KS) -> dict:
    """Best k predicted (i.i.d. with the cell's alpha; positional within measured k) and measured."""
    b = cell["batch"]
    k_iid, s_iid = P.best_k(lambda k: P.expected_tokens(cell["alpha_ref"], k), lambda k: _ratio(costs, b, k), ks)
    cond = cell["cond_alphas"]
    k_pos, s_pos = P.best_k(lambda k: P.expected_tokens_positional(cond, k), lambda k: _ratio(costs, b, k),
                            [k for k in ks if k <= len(cond)])
    return {"iid": [k_iid, s_iid], "positional": [k_pos, s_pos]}


def batch_crossover(cells, costs, workload, k, t0, batch_grid) -> dict:
    """Batch size above which speculation stops paying: measured (interpolated) and predicted."""
    swept = sorted(_find(cells, workload=workload, k=k, temperature=t0), key=lambda c: c["batch"])
    measured = P.crossover([c["batch"] for c in swept], [c["speedup"] for c in swept]) if len(swept) > 1 else None
    base = _find(swept, batch=1)
    predicted = None
    if base:
        tok = base[0]["tokens_positional"]
        predicted = P.crossover(batch_grid, [P.speedup(tok, _ratio(costs, b, k)) for b in batch_grid])
    return {"measured": measured, "predicted": predicted,
            "largest_batch": max((c["batch"] for c in swept), default=1)}


def error_summary(cells) -> dict:
    def med(key, sel):
        v = [abs(c[key]) for c in sel if c[key] is not None]
        return statistics.median(v) if v else None
    held = [c for c in cells if c["positional_held_out"]]
    return {"cells": len(cells),
            "median_abs_err_iid": med("err_iid", cells),
            "median_abs_err_positional": med("err_positional", cells),
            "median_abs_err_positional_held_out": med("err_positional", held),
            "median_abs_err_calibrated": med("err_calibrated", cells),
            "cells_over_10pct": [{k: c[k] for k in ("workload", "k", "batch", "temperature", "speedup",
                                                    "pred_positional", "why")}
                                 for c in cells if c["why"]],
            "iid_misleads": [{k: c[k] for k in ("workload", "k", "batch", "temperature", "tokens_per_step",
                                                "tokens_iid", "tokens_positional", "tokens_mixture")}
                             for c in cells if c["iid_misleads"]],
            "greedy_identical": all(c["identical_to_plain"] for c in cells if c["identical_to_plain"] is not None),
            "greedy_cells_checked": sum(1 for c in cells if c["identical_to_plain"] is not None)}


def verdict(cells, costs, method: str, t0: float, batch_grid) -> tuple[str, dict]:
    """One plain-words paragraph from the data, and the facts behind it."""
    base = _find(cells, batch=1, temperature=t0) or cells
    best = max(base, key=lambda c: c["speedup"])
    if best["speedup"] < 1.0:
        text = (f"On this machine, speculation with {method} does not pay at batch 1: the best cell, "
                f"`{best['workload']}` with k = {best['k']}, runs at {best['speedup']:.2f}× plain decoding "
                f"(predicted {best['pred_positional']:.2f}×).")
        return text, {"workload": best["workload"], "k": best["k"]}
    # the headline: the most predictable workload (highest acceptance) at its best measured k
    easy = max(base, key=lambda c: c["alpha"])["workload"]
    top = max(_find(base, workload=easy), key=lambda c: c["speedup"])
    w, k = top["workload"], top["k"]
    cross = batch_crossover(cells, costs, w, k, t0, batch_grid)
    be = P.break_even_alpha(k, _ratio(costs, 1, k))
    text = (f"On `{w}` at batch 1, speculation with {method} gives {top['speedup']:.2f}× at k = {k} "
            f"(predicted {top['pred_positional']:.2f}×, α = {top['alpha']:.2f}); ")
    m, p = cross["measured"], cross["predicted"]
    batch = (f"above batch {m:.0f} (measured)" if m is not None else
             f"above batch {p:.0f} (predicted)" if p is not None and p > 1 else None)
    if batch and be not in (None, 0.0):
        text += f"it stops paying {batch} or below α = {be:.2f}."
    else:
        parts = [f"it stops paying {batch}" if batch else
                 "the cost model predicts no gain even at batch 1 (prediction and measurement disagree)"
                 if p is not None else
                 f"it still pays at batch {cross['largest_batch']}, the largest measured"
                 if cross["largest_batch"] > 1 else ""]
        parts.append("by the measured costs no α makes it pay" if be is None else
                     "it cannot lose at any α: a round costs no more than a plain step" if be == 0.0 else
                     f"it stops paying below α = {be:.2f}")
        text += "; ".join(x for x in parts if x) + "."
    hard = min(base, key=lambda c: c["alpha"])
    if hard is not top:
        text += (f" On `{hard['workload']}` (α = {hard['alpha']:.2f}) the same machinery gives "
                 f"{hard['speedup']:.2f}×.")
    return text, {"workload": w, "k": k, "crossover": cross, "break_even_alpha": be}


def summarize(cells: list[dict], costs, method: str, batch_sizes, temperatures, q_max: int) -> dict:
    annotate(cells, costs)
    t0 = temperatures[0]
    grid = sorted(set(batch_sizes) | {1})
    text, facts = verdict(cells, costs, method, t0, grid)
    regs = regimes(cells, t0)
    for r in regs:
        r["best_k"] = best_k_for(r["cell"], costs)
    return {"method": method, "verdict": text, "verdict_facts": facts,
            "draft_cost_ratio": {b: costs.draft_cost_ratio(b) for b in grid},
            "cost_table": costs.table(grid, q_max),
            "break_even": break_even_table(costs, grid),
            "regimes": regs, "errors": error_summary(cells), "cells": cells}
