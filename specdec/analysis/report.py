"""Write the analysis to --out: results.json, report.md, report.html and plots/*.png.

The report opens with the plain-words verdict, then the regime table (regime | acceptance |
tokens per target step | speed-up ± interval | prediction | repetition), prediction errors
(uncertain cells apart), where the i.i.d. formula misleads,
break-even acceptance, the best k per regime, every measured cell, the costs and the plots.
All numbers are read from the summary dict built by `summarize.py`.
"""
from __future__ import annotations

import json
from pathlib import Path

from .couplings import coupling_blocks
from .plots import all_plots
from .render import to_html, to_markdown
from ..repetition import FLAG, NGRAM
from .samples import sample_blocks
from .summarize import measured
from .compare import compare_blocks
from .trees import tree_blocks

CAPTIONS = {
    "speedup_vs_alpha": "Speed-up against acceptance α at batch 1: theory curves for k = 1..8 using the "
                        "measured costs, and the measured cells (colour = k, marker = workload).",
    "speedup_vs_batch": "Speed-up against batch size: measured (solid) and predicted (dashed). "
                        "Where the curves cross 1, speculation stops paying.",
    "acceptance_by_position": "Acceptance by draft position. A falling curve means the i.i.d. formula "
                              "overestimates long drafts.",
    "tokens_per_round": "Histogram of tokens gained per verification round.",
    "cost_curve": "The verification cost curve t(b, q) / t(1, 1).",
}


def _f(x, fmt="{:.2f}", none="—"):
    return none if x is None else fmt.format(x)


def _pct(x, signed=True):
    return _f(None if x is None else 100 * x, "{:+.0f}%" if signed else "{:.0f}%")


def _rep(c):
    r = c.get("repetition", 0.0)
    return f"{r:.0%}" + (" self-repeating" if r > FLAG else "")


def _alpha(r):
    ci = r.get("alpha_ci")
    return _f(r["cell"]["alpha"]) + (f" ({ci[0]:.2f}–{ci[1]:.2f})" if ci else "")


def _range(r):
    return "—" if "seed_range" not in r else f"{r['seed_range'][0]:.0%}–{r['seed_range'][1]:.0%}"


def _outside(r):
    if "outside_seed" not in r:
        return "—"
    d = r["outside_seed"]
    return "inside" if d == 0 else f"{100 * d:+.0f} points ({'above' if d > 0 else 'below'})"


def _per_step(c):
    """Tokens per target step over every round: a round that drafted nothing gives one."""
    rate = min(c.get("draft_rate", 1.0), 1.0)
    return rate * c["tokens_per_step"] + 1 - rate


def _cell_name(c):
    return f"`{c['workload']}`, b={c['batch']}, T={c['temperature']:g}, k={c['k']}"


def build_blocks(summary: dict, meta: dict) -> list:
    cells, err = summary["cells"], summary["errors"]
    B = [("h", 1, f"Does speculation pay? {summary['method']}"),
         ("p", summary["verdict"], "verdict"),
         ("p", f"Target `{meta['target']}`{_weights(meta.get('target_weights'))}; proposer: {summary['method']}. "
               f"{meta['when']}, device {meta['device']}, "
               f"{meta['threads']} threads. {meta['groups']} repeats per cell (different prompts; plain and "
               f"every k decoded in lockstep), {meta['max_new_tokens']} new tokens per prompt; costs: "
               f"{summary['cost_table']['source']}. Wall time {meta['wall_s']:.0f} s.")]
    load = [x for x in meta.get("load_average", []) if x is not None]
    if meta.get("busy_warning") or (load and meta.get("cpus") and max(load) > meta["cpus"] + 1):
        B.append(("p", f"**Warning: the machine was busy** (load average up to {max(load):.1f} on {meta['cpus']} "
                       "CPUs): other processes competed for the cores. Every speed-up carries its 95% "
                       "interval; cells whose interval stayed wider than ±10% are marked uncertain and left "
                       "out of the error statistic."))
    B += [("h", 2, "Regimes"),
          ("p", "Each regime is a workload chosen for what it is (regimes.py), at the k with the best "
                "*predicted* speed-up, never the largest measured one. Measured: the pooled speed-up and its "
                "95% bootstrap interval over paired stretches of the lockstep runs. Repeats: the fraction "
                f"of generated tokens that repeat an earlier {NGRAM}-gram of the same output (flagged above "
                f"{FLAG:.0%}: then the figures describe self-repetition, not the workload)."),
          ("p", "Acceptance α: the maximum-likelihood i.i.d. acceptance of the cell's rounds, with its 95% "
                "bootstrap interval over prompts. The seed's range is what it expected of the regime; where α "
                "lands outside it, \"α outside it by\" says by how many points. The measured figure "
                "is the answer: no workload is tuned toward the range."),
          ("table", ["regime", "what", "cell", "acceptance α (95%)", "seed's range", "α outside it by",
                     "rounds that drafted", "tokens per target step", "speed-up, measured (95%)", "predicted",
                     "error", "repeats"],
           [[r["regime"], r["what"], _cell_name(r["cell"]), _alpha(r), _range(r), _outside(r),
             f"{r['cell'].get('draft_rate', 1.0):.0%}", _f(_per_step(r["cell"])), measured(r["cell"]),
             _f(r["cell"]["pred"], "{:.2f}×"), _pct(r["cell"]["err"]), _rep(r["cell"])] for r in summary["regimes"]])]
    B += [("h", 2, "How good are the predictions?"),
          ("p", f"Median absolute error over {err['cells']} of {err['cells_total']} cells: "
                f"**{_pct(err['median_abs_err'], False)}** (the {len(err['uncertain'])} uncertain cells, "
                f"whose 95% interval stayed wider than ±10% after {len(meta.get('extra_groups', []))} extra "
                f"groups in a budget of {meta.get('extend_budget_s', 0):.0f} s, are left out; over every cell: {_pct(err['median_abs_err_all'], False)}). "
                f"The prediction combines each cell's acceptance α (Leviathan's i.i.d. model) with the cost of "
                f"a real round from the cost model, shifted by the per-step offset the cell's own plain steps "
                f"show over the cost model's plain step (steps inside the runs pay for taking turns), and "
                f"follows the finite request round by round (the last round is cut short; a batch shrinks "
                f"as rows finish). Variants: the cost model alone, without the offset "
                f"{_pct(err['median_abs_err_model'], False)}; Leviathan's steady state "
                f"{_pct(err['median_abs_err_iid'], False)}; per-position acceptance taken from the block's "
                f"largest k {_pct(err['median_abs_err_positional'], False)} (held-out k only: "
                f"{_pct(err['median_abs_err_positional_held_out'], False)}); and the forwards alone, "
                f"t_target(b, k+1) + k·t_draft(b), without the rest of a round "
                f"{_pct(err['median_abs_err_forward_only'], False)}. "
                f"Greedy outputs identical to plain decoding: "
                f"**{'yes' if err['greedy_identical'] else 'NO'}** in {err['greedy_cells_checked']} cells."),
          ("p", f"Timing estimator: the median 95% half-width of a cell's speed-up is "
                f"{_pct(err['median_ci_half'], False)} in wall time and {_pct(err['median_ci_half_cpu'], False)} "
                f"in the stepping thread's CPU time (time.thread_time). Speed-ups are reported in wall time, "
                f"what a user waits for; the CPU-time figure is in results.json per cell.")]
    if err["uncertain"]:
        B.append(("table", ["uncertain cell", "measured", "predicted"],
                  [[_cell_name(c), measured(c), _f(c["pred"], "{:.2f}×")] for c in err["uncertain"]]))
    if err["cells_over_10pct"]:
        B.append(("table", ["cell", "measured", "predicted", "why"],
                  [[_cell_name(c), measured(c), _f(c["pred"], "{:.2f}×"), c["why"]]
                   for c in err["cells_over_10pct"]]))
    B.append(("h", 2, "Where the i.i.d. formula misleads"))
    if err["iid_misleads"]:
        B += [("p", "Cells where (1 − α^(k+1))/(1 − α), with the α fitted at the block's largest k, misses "
                    "the measured tokens per round by more than 10%. Acceptance varies by position (see the "
                    "plot) or by prompt; the per-position product (from the same run) and the per-prompt "
                    "mixture are the better estimates."),
              ("table", ["cell", "measured tokens/step", "i.i.d.", "per-position", "per-prompt mixture"],
               [[_cell_name(c), _f(c["tokens_per_step"]), _f(c["tokens_iid_ref"]), _f(c["tokens_positional"]),
                 _f(c["tokens_mixture"])] for c in err["iid_misleads"]])]
    else:
        B.append(("p", "In every cell the i.i.d. formula, with the α fitted at the block's largest k, is "
                       "within 10% of the measured tokens per round."))
    spread = _prompt_spread(cells)
    if spread:
        B += [("p", "Acceptance by prompt (batch 1, largest k): one α hides this spread, and because the "
                    "formula is convex in α, the mixture over prompts yields more than the formula at the "
                    "pooled α."),
              ("table", ["cell", "pooled α", "α by prompt: min", "median", "max", "prompts"], spread)]
    ks = sorted({k for row in summary["break_even"].values() for k in row})
    B += [("h", 2, "Break-even acceptance"),
          ("p", "The smallest α at which k drafts pay, from the measured costs (— : no α pays)."),
          ("table", ["batch"] + [f"k={k}" for k in ks],
           [[b] + [_f(row[k]) for k in ks] for b, row in summary["break_even"].items()])]
    if summary.get("k_table"):
        kt = summary["k_table"]
        B += [("h", 2, "k by batch size"),
              ("p", "The k with the best predicted speed-up at each batch size of the cost model (geometric "
                    "mean over the workloads at batch 1's acceptance). `k_table.json` holds it as vLLM's "
                    "`num_speculative_tokens_per_batch_size`: `specdec serve --k-table k_table.json` runs it, "
                    "and `specdec analyze --check-config k_table.json` replays it against that server."),
              ("table", ["batch sizes", "k", "predicted speed-up"],
               [[rng, k, f"{r['speedup']:.2f}×"] for (rng, k), r in
                zip(kt["num_speculative_tokens_per_batch_size"].items(), kt["per_batch"])])]
    B += [("h", 2, "Best k per regime"),
          ("table", ["regime", "measured best k (of those run)", "predicted, i.i.d.", "predicted, per-position"],
           [[r["regime"], _measured_best(cells, r["cell"]),
             f"k={r['best_k']['iid'][0]} ({r['best_k']['iid'][1]:.2f}×)",
             f"k={r['best_k']['positional'][0]} ({r['best_k']['positional'][1]:.2f}×)"] for r in summary["regimes"]])]
    B += [("h", 2, "Every cell"),
          ("table", ["workload", "k", "batch", "T", "α", "accept rate", "tokens/step", "round cost", "speed-up",
                     "95% interval", "groups", "predicted", "error", "cost model alone", "steady state",
                     "per-position", "forwards only", "repeats", "identical"],
           [[c["workload"], c["k"], c["batch"], f"{c['temperature']:g}", _f(c["alpha"]),
             _f(c["acceptance_rate"]), _f(c["tokens_per_step"]), _f(c["ratio"], "{:.2f}×"),
             _f(c["speedup"], "{:.2f}×"), "{:.2f}–{:.2f}×".format(*c["ci"]) + (" uncertain" if c["uncertain"] else ""),
             c["groups"], _f(c["pred"], "{:.2f}×"), _pct(c["err"]), _f(c["pred_model"], "{:.2f}×"),
             _f(c["pred_iid"], "{:.2f}×"), _f(c["pred_positional"], "{:.2f}×"), _f(c["pred_forward"], "{:.2f}×"),
             _rep(c), {True: "yes", False: "NO", None: "n/a"}[c["identical_to_plain"]]] for c in cells])]
    B += coupling_blocks(cells)
    B += tree_blocks(cells)
    B += compare_blocks(cells)
    tab = summary["cost_table"]
    t11 = tab["t_s"][0][0]
    B += [("h", 2, "Costs"),
          ("p", ("Draft cost ratio c = t_draft / t_target: " + ", ".join(
              f"{_f(c)} at batch {b}" for b, c in summary["draft_cost_ratio"].items())
                 if any(summary["draft_cost_ratio"].values()) else
                 "No draft model's forward is timed for this proposer (its drafting cost is in the round "
                 "table below)")
           + f". t(1, 1) = {t11 * 1e3:.2f} ms. Table: t(b, q) / t(1, 1)."),
          ("table", ["batch"] + [f"q={q}" for q in tab["q"]],
           [[b] + [_f(t / t11) for t in row] for b, row in zip(tab["b"], tab["t_s"])]),
          ("p", "A real round (an engine step drafting k tokens, greedy) in plain steps at the same batch "
                "size; the forwards alone would predict less (the draft loop's Python and sampling, the "
                "draft re-reading its weights after the target's forward, verification)."),
          ("table", ["batch"] + [f"k={k}" for k in range(1, len(tab["round_s"][0]))],
           [[b] + [_f(t / row[0]) for t in row[1:]] for b, row in zip(tab["b"], tab["round_s"])])]
    B += sample_blocks(summary.get("samples", []))
    B.append(("h", 2, "Plots"))
    B += [("img", name, cap) for name, cap in CAPTIONS.items()]
    return B


def _prompt_spread(cells) -> list[list]:
    best: dict[tuple, dict] = {}
    for c in cells:
        key = (c["workload"], c["temperature"])
        if c["batch"] == 1 and c["prompt_alphas"] and (key not in best or c["k"] > best[key]["k"]):
            best[key] = c
    rows = []
    for c in best.values():
        a = sorted(c["prompt_alphas"])
        rows.append([_cell_name(c), _f(c["alpha"]), _f(a[0]), _f(a[len(a) // 2]), _f(a[-1]), len(a)])
    return rows


def _measured_best(cells, ref):
    same = [c for c in cells if (c["workload"], c["batch"], c["temperature"]) ==
            (ref["workload"], ref["batch"], ref["temperature"])]
    top = max(same, key=lambda c: c["speedup"])
    return f"k={top['k']} ({top['speedup']:.2f}×)"


def write_report(out: Path, summary: dict, costs, meta: dict) -> dict[str, Path]:
    """Write everything into `out`; return the paths written."""
    out = Path(out)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    images = all_plots(summary, costs)
    for name, png in images.items():
        (out / "plots" / f"{name}.png").write_bytes(png)
    blocks = build_blocks(summary, meta)
    paths = {"json": out / "results.json", "md": out / "report.md", "html": out / "report.html"}
    paths["json"].write_text(json.dumps({"meta": meta, **summary}, indent=1, default=str), encoding="utf-8")
    paths["md"].write_text(to_markdown(blocks), encoding="utf-8")
    paths["html"].write_text(to_html(blocks, images, f"specdec analyze: {summary['method']}"), encoding="utf-8")
    if summary.get("k_table"):
        paths["k_table"] = out / "k_table.json"
        paths["k_table"].write_text(json.dumps({"num_speculative_tokens_per_batch_size":
                                                summary["k_table"]["num_speculative_tokens_per_batch_size"]},
                                               indent=1) + "\n", encoding="utf-8")
    return paths


def _weights(prov: dict | None) -> str:
    """" (weights: stored Q4_1 x210, ...; dequantized to float32 at load)", or "" for a
    model loaded as stored."""
    if not prov or prov.get("how") == "as stored":
        return ""
    stored = ", ".join(f"{t} x{n}" if n else t for t, n in prov["stored"].items())
    return f" (stored {stored}; {prov['how']})"
