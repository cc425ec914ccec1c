"""The plots and figures of docs/how-it-works.md, from stored result files only (measures nothing).

    python benchmarks/how_it_works_plots.py            # writes docs/img/how_*.png, prints the figures

Inputs (each written by its own command, quoted in the doc):
- benchmarks/results/decode_cost/results.json   t(q)/t(1) at batch 1 (benchmarks/decode_cost.py)
- benchmarks/results/adaptive/adaptive.json     tokens/s of plain, k = 1, 2, 4, 8 and adaptive on
                                                code, prose and random at batch 1..64, T = 1, with
                                                the cost model of that run (benchmarks/adaptive.py)
- benchmarks/results/trace/trace.json           one traced request (specdec trace)
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
FIXED_K = (1, 2, 4, 8)                 # the fixed k the adaptive benchmark ran
BAND = (2.0, 3.0)                      # the "2-3x" figure the doc tests against the measurements
DPI = 110                              # readable in a browser at the doc's width


def load():
    return (json.loads((RESULTS / "decode_cost" / "results.json").read_text()),
            json.loads((RESULTS / "adaptive" / "adaptive.json").read_text()),
            json.loads((RESULTS / "trace" / "trace.json").read_text()))


def tokens_per_round(result: dict, k: int) -> float:
    """Median over repeats of the runs' tokens per draft round (1 + accepted / drafts)."""
    return statistics.median(r["mean_acceptance_length"] for r in result["runs"] if r["config"] == f"k={k}")


def iid_tokens(alpha: float, k: int) -> float:
    """Expected tokens per round when every draft is accepted independently with alpha."""
    return (1 - alpha ** (k + 1)) / (1 - alpha) if alpha < 1 else k + 1.0


def speedup(result: dict, config: str) -> float:
    m = result["medians"]
    return m[config]["decode_tok_s"] / m["plain"]["decode_tok_s"]


def cost_curve(decode, adaptive, trace, out: Path) -> dict:
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    rows = decode["rows"]
    qs = [r["q"] for r in rows]
    for key in [k for k in rows[0] if k.endswith("t(q)/t(1)")]:
        a.plot(qs, [r[key] for r in rows], marker="o", label=key.replace(" t(q)/t(1)", ""))
    # the stored trace ran the draft model at a fixed k: every round verified num_draft + 1 positions
    ratios = [r["time"]["ratio"] for r in trace["rounds"] if r["num_draft"]]
    qr = [r["num_draft"] + 1 for r in trace["rounds"] if r["num_draft"]]
    a.scatter(qr, ratios, color="k", marker="x", zorder=3, label="traced rounds (verify / plain forward)")
    a.plot(qs, qs, ls=":", color="grey", label="t proportional to q")
    a.set(xlabel="positions per sequence q", ylabel="t(q) / t(1)", ylim=(0, 4.5),
          title=f"batch 1, {decode['params_m']:.0f}M target, {decode['threads']} threads")
    a.legend(fontsize=7)
    tgt = adaptive["cost_model"]["target"]
    curve = {}
    for bs, ts in tgt.items():
        curve[int(bs)] = [t / ts[0] for t in ts]
        b.plot(range(1, len(ts) + 1), curve[int(bs)], marker=".", label=f"batch {bs}")
    b.plot(range(1, 10), range(1, 10), ls=":", color="grey")
    b.set(xlabel="positions per sequence q", ylabel="t(b, q) / t(b, 1)", title="the cost model, by batch size")
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "how_cost_curve.png", dpi=DPI)
    plt.close(fig)
    native = next(k for k in rows[0] if k.startswith("chosen"))
    return {"batch1_t_over_t1": {r["q"]: round(r[native], 2) for r in rows},
            "trace_verify_over_plain": [round(min(ratios), 2), round(statistics.median(ratios), 2), round(max(ratios), 2)],
            "cost_model_t5_over_t1": {b: round(c[4], 2) for b, c in curve.items()},
            "cost_model_t9_over_t1": {b: round(c[8], 2) for b, c in curve.items()}}


def tokens_plot(adaptive, out: Path) -> dict:
    fig, ax = plt.subplots(figsize=(6, 4))
    figures = {}
    for res in (r for r in adaptive["results"] if r["batch"] == 1):
        alpha = res["medians"]["k=1"]["acceptance_rate"]      # at k = 1 the rate is the MLE of alpha
        measured = [tokens_per_round(res, k) for k in FIXED_K]
        line = ax.plot(FIXED_K, measured, marker="o", label=f"{res['workload']}: measured")[0]
        ks = range(1, max(FIXED_K) + 1)
        ax.plot(ks, [iid_tokens(alpha, k) for k in ks], ls="--", color=line.get_color(),
                label=f"{res['workload']}: i.i.d., α = {alpha:.2f} (from k = 1)")
        figures[res["workload"]] = {"alpha_k1": round(alpha, 2), **{
            f"k={k}": [round(m, 2), round(iid_tokens(alpha, k), 2)] for k, m in zip(FIXED_K, measured)}}
    ax.set(xlabel="k (drafts per round)", ylabel="tokens per round", title="batch 1, T = 1: measured and (1 − α^(k+1))/(1 − α)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "how_tokens_per_round.png", dpi=DPI)
    plt.close(fig)
    return figures


def formula_plot(adaptive, out: Path) -> dict:
    rounds = next(iter(adaptive["cost_model"]["rounds"].values()))
    pts = []
    for res in adaptive["results"]:
        cost = rounds[str(res["batch"])]
        for k in FIXED_K:
            pred = tokens_per_round(res, k) * cost["0"] / cost[str(k)]
            pts.append((res["workload"], res["batch"], k, pred, speedup(res, f"k={k}")))
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for bs in sorted({p[1] for p in pts}):
        sel = [p for p in pts if p[1] == bs]
        ax.scatter([p[4] for p in sel], [p[3] for p in sel], label=f"batch {bs}")
    top = max(max(p[3], p[4]) for p in pts) * 1.05
    ax.plot([0, top], [0, top], color="grey", ls=":")
    ax.set(xlabel="measured speed-up", ylabel="tokens per round × t_round(b, 0) / t_round(b, k)",
           title="the speed-up formula against measurement", xlim=(0, top), ylim=(0, top))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "how_speedup_formula.png", dpi=DPI)
    plt.close(fig)
    errs = [abs(p[3] / p[4] - 1) for p in pts]
    return {"cells": len(pts), "median_abs_err": round(statistics.median(errs), 3), "max_abs_err": round(max(errs), 3),
            "round_cost_b1": {k: round(rounds["1"][str(k)] / rounds["1"]["0"], 2) for k in FIXED_K}}


def spread_plot(adaptive, out: Path) -> dict:
    fig, ax = plt.subplots(figsize=(7, 4))
    marks = {"code": "o", "prose": "s", "random": "^"}
    batches = sorted({r["batch"] for r in adaptive["results"]})
    ax.axhspan(*BAND, color="#fde2e2", label="the folklore 2–3×")
    ax.axhline(1, color="grey", lw=1)
    every = []
    for i, k in enumerate(FIXED_K):
        for res in adaptive["results"]:
            s = speedup(res, f"k={k}")
            every.append((res["workload"], res["batch"], k, s))
            x = batches.index(res["batch"]) + (i - 1.5) * 0.12
            ax.scatter(x, s, marker=marks.get(res["workload"], "o"), color=f"C{i}",
                       label=f"k = {k}" if res is adaptive["results"][0] else None)
    ax.set_xticks(range(len(batches)), [str(b) for b in batches])
    ax.set(xlabel="batch size (markers: ○ code, □ prose, △ random)", ylabel="speed-up over plain decoding",
           title="measured speed-up, T = 1: one number does not describe it")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "how_speedup_spread.png", dpi=DPI)
    plt.close(fig)
    lo, hi = min(every, key=lambda e: e[3]), max(every, key=lambda e: e[3])
    return {"cells": len(every), "min": [lo[0], lo[1], lo[2], round(lo[3], 2)],
            "max": [hi[0], hi[1], hi[2], round(hi[3], 2)],
            "in_band": sum(BAND[0] <= e[3] <= BAND[1] for e in every),
            "best_by_batch": {b: round(max(e[3] for e in every if e[1] == b), 2) for b in batches},
            "adaptive": {f"{r['workload']}/{r['batch']}": round(speedup(r, "adaptive"), 2) for r in adaptive["results"]}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    decode, adaptive, trace = load()
    figures = {"cost_curve": cost_curve(decode, adaptive, trace, args.out),
               "tokens_per_round": tokens_plot(adaptive, args.out),
               "speedup_formula": formula_plot(adaptive, args.out),
               "speedup_spread": spread_plot(adaptive, args.out)}
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
