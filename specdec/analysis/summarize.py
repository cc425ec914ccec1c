"""Turn measured cells and step costs into the analysis: predictions, errors, regimes, verdict.

Input: cell dicts from `measure.CellResult.as_dict()` and a `costs.Costs`. Output: one
JSON-able dict that `report.py` renders. Every number in it comes from the measurements.

The cost of a round is the measured real engine step (`Costs.t_round`: forwards plus the
per-round overhead) at the cell's cache length, plus the per-step offset the cell's own
plain steps show over the cost model's (in_run.py), in units of a plain step at the same
batch size (`ratio`; `ratio_model` without the offset). Predictions per cell:
- `pred` (the headline): each prompt's fitted alpha, Leviathan's i.i.d. acceptance, and
  the finite request length followed round by round (`predict.simulate_speedup`: the last
  round is cut short, the batch shrinks as rows finish), pooled over the groups as the
  measurement is; `pred_model` is the same from the cost model alone (no offset);
- `pred_iid`: Leviathan's steady state (1 - a^(k+1))/(1 - a) divided by the round's cost;
- `pred_positional`: per-position acceptance measured at the block's largest k (held out
  for every smaller k), steady state: this tests whether one run's acceptance predicts
  another k;
- `pred_forward`: the steady state with forward-only costs, t_target(b, k+1) + k t_draft(b),
  which leaves out the overhead: kept to show how much that matters.
"""
from __future__ import annotations

import statistics

from . import predict as P
from .couplings import annotate_couplings
from .in_run import offset, shifted
from .interval import WIDE
from .regimes import headline, regimes
from .schedule import table_from_costs

THEORY_KS = tuple(range(1, 9))
MISLEAD = 0.10      # the i.i.d. tokens-per-round estimate is "misleading" beyond this relative error


def _ratio(costs, b, k, temperature=0.0):
    return costs.ratio(b, k, temperature > 0)


def annotate(cells: list[dict], costs, new_tokens: int | None = None) -> list[dict]:
    """Add predictions and errors to every cell (in place) and return them. `new_tokens`:
    decode tokens per request in the runs (None: predict the steady state only)."""
    largest: dict[tuple, dict] = {}
    for c in cells:
        key = (c["workload"], c["batch"], c["temperature"])
        if key not in largest or c["k"] > largest[key]["k"]:
            largest[key] = c
    for c in cells:
        k, b, sampled = c["k"], c["batch"], c["temperature"] > 0
        L = c.get("context") or None
        model = lambda a, kk: costs.step(a, kk, sampled, L)                          # noqa: E731
        c["plain_step_model_s"] = model(b, 0)
        c["step_offset_s"] = offset(c["plain_step_s"], c["plain_step_model_s"])
        step = shifted(model, c["step_offset_s"])
        ref = largest[(c["workload"], b, c["temperature"])]
        cond = P.conditional_alphas(ref["accepted_per_pos"], ref["drafts"]) if ref["drafts"] else []
        c["cond_alphas"] = P.conditional_alphas(c["accepted_per_pos"], c["drafts"]) if c["drafts"] else []
        c["ratio"] = step(b, k) / step(b, 0)
        c["ratio_model"] = model(b, k) / model(b, 0)
        c["ratio_forward"] = costs.forward_ratio(b, k)
        c["ratio_measured"] = c["spec_step_s"] / c["plain_step_s"] if c["plain_step_s"] else None
        c["alpha_ref"] = ref["alpha"]
        c["tokens_iid"] = P.expected_tokens(c["alpha"], k)
        c["tokens_mixture"] = P.expected_tokens_mixture(c["prompt_alphas"], k) if c["prompt_alphas"] else None
        c["tokens_positional"] = (P.expected_tokens_positional(cond, k) if len(cond) >= k
                                  else P.expected_tokens(ref["alpha"], k))
        c["positional_held_out"] = ref is not c
        rate = min(c.get("draft_rate", 1.0), 1.0)      # rounds that drafted: below 1 for draft-free proposers
        c["pred_iid"] = P.with_draft_rate(c["tokens_iid"], c["ratio"], rate)
        annotate_couplings(c, c["ratio"])
        c["pred_positional"] = P.with_draft_rate(c["tokens_positional"], c["ratio"], rate)
        c["pred_forward"] = P.with_draft_rate(c["tokens_iid"], c["ratio_forward"], rate)
        c["pred"] = _predict_runs(c, step, new_tokens) if new_tokens else c["pred_iid"]
        c["pred_model"] = (_predict_runs(c, model, new_tokens) if new_tokens
                           else P.with_draft_rate(c["tokens_iid"], c["ratio_model"], rate))
        c["uncertain"] = not c.get("ci_half", 0.0) <= WIDE
        m = c["speedup"]
        for name in ("", "_model", "_iid", "_positional", "_forward"):
            c["err" + name] = P.relative_error(c["pred" + name], m) if m else None
        t = c["tokens_per_step"]
        # one alpha, fitted at the block's largest k, carried to this k: misleading where
        # acceptance depends on the draft position
        c["tokens_iid_ref"] = P.expected_tokens(ref["alpha"], k)
        c["iid_misleads"] = abs(c["tokens_iid_ref"] - t) / t > MISLEAD
        c["why"] = _why(c) if c["err"] is not None and abs(c["err"]) > MISLEAD else ""
    return cells


def _predict_runs(c: dict, t_round, new_tokens: int) -> float:
    """The cell's runs, predicted: each group from its rows' own alphas (rows without one take
    the cell's) and shares of rounds that drafted, followed round by round at t_round(active
    rows, k), then pooled as the measurement pools them."""
    groups = [g for g in c.get("group_rows", []) if g] or [[[c["alpha"], c.get("draft_rate", 1.0)]]]
    preds = []
    for g in groups:
        rows = (list(g) + [[c["alpha"], c.get("draft_rate", 1.0)]] * c["batch"])[:c["batch"]]
        alphas = [c["alpha"] if a is None else a for a, _ in rows]
        preds.append(P.simulate_speedup(alphas, c["k"], c["batch"], new_tokens, t_round,
                                        draft_rate=[min(rate, 1.0) for _, rate in rows]))
    return P.pooled_speedup(preds)


def _why(c: dict) -> str:
    """Data-driven reasons a prediction missed by more than 10%."""
    reasons = []
    t = c["tokens_per_step"]
    if abs(c["tokens_iid"] - t) / t > MISLEAD:
        reasons.append(f"the i.i.d. formula gives {c['tokens_iid']:.2f} tokens/round at this α, the run "
                       f"{t:.2f} (acceptance varies by position or prompt)")
    rm = c["ratio_measured"]
    if rm and abs(rm - c["ratio"]) / c["ratio"] > MISLEAD:
        reasons.append(f"a round cost {rm:.2f}x a plain step in the run but {c['ratio']:.2f}x in the cost model "
                       "(work outside the forwards, or timing noise)")
    if c.get("uncertain"):
        lo, hi = c["ci"]
        reasons.append(f"95% interval {lo:.2f}-{hi:.2f}x, wider than ±{WIDE:.0%} (noisy machine): uncertain")
    if reasons:
        return "; ".join(reasons)
    if c["batch"] == 1:                        # no rows to finish apart: the two factors added up
        run = f"{rm:.2f}x" if rm else "?"
        return (f"tokens per round {c['tokens_iid']:.2f} predicted, {t:.2f} measured, and a round "
                f"{c['ratio']:.2f}x a plain step predicted, {run} in the run: each within "
                f"{MISLEAD:.0%}, together more")
    return "tail effects: rows finish at different rounds and the batch shrinks"


def _find(cells, **kw):
    return [c for c in cells if all(c[k] == v for k, v in kw.items())]


def break_even_table(costs, batch_sizes, ks=THEORY_KS) -> dict:
    """{batch: {k: minimum alpha that pays, or None}}."""
    return {b: {k: P.break_even_alpha(k, _ratio(costs, b, k)) for k in ks} for b in batch_sizes}


def best_k_for(cell: dict, costs, ks=THEORY_KS) -> dict:
    """Best k predicted (i.i.d. with the cell's alpha; positional within measured k) and measured."""
    b = cell["batch"]
    T = cell["temperature"]
    k_iid, s_iid = P.best_k(lambda k: P.expected_tokens(cell["alpha_ref"], k), lambda k: _ratio(costs, b, k, T), ks)
    cond = cell["cond_alphas"]
    k_pos, s_pos = P.best_k(lambda k: P.expected_tokens_positional(cond, k), lambda k: _ratio(costs, b, k, T),
                            [k for k in ks if k <= len(cond)])
    return {"iid": [k_iid, s_iid], "positional": [k_pos, s_pos]}


def batch_crossover(cells, costs, workload, k, t0, batch_grid) -> dict:
    """Batch size above which speculation stops paying: measured (interpolated) and predicted."""
    swept = sorted(_find(cells, workload=workload, k=k, temperature=t0), key=lambda c: c["batch"])
    measured = P.crossover([c["batch"] for c in swept], [c["speedup"] for c in swept]) if len(swept) > 1 else None
    base = _find(swept, batch=1)
    predicted = None
    if base:
        tok = base[0]["tokens_iid"]
        predicted = P.crossover(batch_grid, [P.speedup(tok, _ratio(costs, b, k, t0)) for b in batch_grid])
    return {"measured": measured, "predicted": predicted,
            "largest_batch": max((c["batch"] for c in swept), default=1)}


def error_summary(cells) -> dict:
    """Median |error| over the cells whose interval is within ±WIDE (the uncertain ones are
    listed apart), each prediction variant beside the headline's."""
    sure = [c for c in cells if not c["uncertain"]]

    def med(key, sel):
        v = [abs(c[key]) for c in sel if c[key] is not None]
        return statistics.median(v) if v else None
    held = [c for c in sure if c["positional_held_out"]]
    pick = ("workload", "k", "batch", "temperature", "speedup", "ci", "pred", "why")
    return {"cells": len(sure), "cells_total": len(cells),
            "median_abs_err": med("err", sure),
            "median_abs_err_model": med("err_model", sure),
            "median_abs_err_iid": med("err_iid", sure),
            "median_abs_err_positional": med("err_positional", sure),
            "median_abs_err_positional_held_out": med("err_positional", held),
            "median_abs_err_forward_only": med("err_forward", sure),
            "median_abs_err_all": med("err", cells),
            "uncertain": [{k: c[k] for k in pick} for c in cells if c["uncertain"]],
            "median_ci_half": med("ci_half", cells), "median_ci_half_cpu": med("ci_half_cpu", cells),
            "cells_over_10pct": [{k: c[k] for k in pick} for c in sure if c["why"]],
            "iid_misleads": [{k: c[k] for k in ("workload", "k", "batch", "temperature", "tokens_per_step",
                                                "tokens_iid_ref", "tokens_positional", "tokens_mixture")}
                             for c in cells if c["iid_misleads"]],
            "greedy_identical": all(c["identical_to_plain"] for c in cells if c["identical_to_plain"] is not None),
            "greedy_cells_checked": sum(1 for c in cells if c["identical_to_plain"] is not None)}


def measured(c: dict) -> str:
    """A cell's measured speed-up with its 95% interval, e.g. "1.84× (1.71–1.95×)"."""
    lo, hi = c.get("ci") or (c["speedup"], c["speedup"])
    return f"{c['speedup']:.2f}× ({lo:.2f}–{hi:.2f}×)"


def verdict(cells, costs, method: str, t0: float, batch_grid) -> tuple[str, dict]:
    """One plain-words paragraph from the data, about the cells the fixed rule picks
    (regimes.py), and the facts behind it."""
    top = headline(cells, t0)
    w, k = top["workload"], top["k"]
    if top["pred"] < 1.0 and top["speedup"] < 1.0:
        text = (f"On this machine, speculation with {method} does not pay at batch 1: on `{w}`, at the k "
                f"predicted best (k = {k}), it runs at {measured(top)} plain decoding "
                f"(predicted {top['pred']:.2f}×).")
        return text, {"workload": w, "k": k}
    cross = batch_crossover(cells, costs, w, k, t0, batch_grid)
    be = P.break_even_alpha(k, _ratio(costs, 1, k, t0))
    text = (f"On `{w}` at batch 1, speculation with {method} gives {measured(top)} at k = {k} "
            f"(predicted {top['pred']:.2f}×, α = {top['alpha']:.2f}); ")
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
    hard = next((r["cell"] for r in regimes(cells, t0) if r["regime"] == "hard"), None)
    if hard is not None:
        text += (f" On `{hard['workload']}` (α = {hard['alpha']:.2f}) it gives {measured(hard)} at k = "
                 f"{hard['k']} (predicted {hard['pred']:.2f}×).")
    return text, {"workload": w, "k": k, "crossover": cross, "break_even_alpha": be}


def summarize(cells: list[dict], costs, method: str, batch_sizes, temperatures, q_max: int,
              new_tokens: int | None = None) -> dict:
    annotate(cells, costs, new_tokens)
    t0 = temperatures[0]
    grid = sorted(set(batch_sizes) | {1})
    text, facts = verdict(cells, costs, method, t0, grid)
    regs = regimes(cells, t0)
    for r in regs:
        r["best_k"] = best_k_for(r["cell"], costs)
    table = table_from_costs(cells, lambda b, k: _ratio(costs, b, k, t0), grid, t0)
    return {"method": method, "verdict": text, "verdict_facts": facts,
            "k_table": {"num_speculative_tokens_per_batch_size": table[0].to_vllm(), "per_batch": table[1]}
            if table else None,
            "draft_cost_ratio": {b: costs.draft_cost_ratio(b) for b in grid},
            "cost_table": costs.table(grid, q_max),
            "break_even": break_even_table(costs, grid),
            "regimes": regs, "errors": error_summary(cells), "cells": cells}
