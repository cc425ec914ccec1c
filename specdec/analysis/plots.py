"""The report's five plots, drawn with matplotlib (Agg) from the summary dict, as PNG bytes.

- speedup_vs_alpha: theory curves for k = 1..8 at batch 1, with the measured cells;
- speedup_vs_batch: measured and predicted speed-up against batch size (the crossover);
- acceptance_by_position: P(draft j accepted | drafts before it accepted), per workload;
- tokens_per_round: histogram of tokens gained per round, per workload;
- cost_curve: t(b, q) / t(1, 1), the verification cost against positions verified.
"""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import predict as P  # noqa: E402

MARKERS = "osD^vP*X"
MIN_REACH = 5       # plot P(accept j | ...) only where at least this many rounds reached position j


def _reached(c) -> list[float]:
    """Conditional acceptance by position, cut where too few rounds got that far."""
    reach = [c["drafts"]] + c["accepted_per_pos"][:-1]
    return [a for a, n in zip(c["cond_alphas"], reach) if n >= MIN_REACH]      # reach only falls: a prefix


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def _base_cells(summary):
    t0 = min(c["temperature"] for c in summary["cells"]) if summary["cells"] else 0.0
    return [c for c in summary["cells"] if c["batch"] == 1 and c["temperature"] == t0]


def _largest_k(cells):
    out: dict[str, dict] = {}
    for c in cells:
        if c["workload"] not in out or c["k"] > out[c["workload"]]["k"]:
            out[c["workload"]] = c
    return out


def speedup_vs_alpha(summary, costs) -> bytes:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    cmap = plt.get_cmap("viridis")
    alphas = [i / 200 for i in range(200)]
    for k in range(1, 9):
        r = costs.ratio(1, k)
        ax.plot(alphas, [P.predicted_speedup(a, k, r) for a in alphas], color=cmap((k - 1) / 7), lw=1.2,
                label=f"theory k={k}")
    workloads = sorted({c["workload"] for c in summary["cells"]})
    for c in [c for c in summary["cells"] if c["batch"] == 1]:
        m = MARKERS[workloads.index(c["workload"]) % len(MARKERS)]
        ax.scatter(c["alpha"], c["speedup"], color=cmap((min(c["k"], 8) - 1) / 7), marker=m, s=45,
                   edgecolors="black", zorder=3)
    for i, w in enumerate(workloads):
        ax.scatter([], [], marker=MARKERS[i % len(MARKERS)], color="white", edgecolors="black", label=w)
    ax.axhline(1.0, color="grey", ls=":", lw=1)
    ax.set(xlabel="acceptance α (fitted, i.i.d.)", ylabel="speed-up over plain",
           title="Speed-up vs acceptance, batch 1 (curves: theory with measured costs; points: measured)")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    return _png(fig)


def speedup_vs_batch(summary, costs) -> bytes:
    t0 = min(c["temperature"] for c in summary["cells"])
    swept: dict[str, set] = {}
    for c in summary["cells"]:
        if c["temperature"] == t0:
            swept.setdefault(c["workload"], set()).add(c["batch"])
    w = summary["verdict_facts"]["workload"]        # the verdict's workload, if its batch was swept
    if len(swept.get(w, ())) < 2:
        w = max(swept, key=lambda x: len(swept[x]))
    cells = [c for c in summary["cells"] if c["workload"] == w and c["temperature"] == t0]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    cmap = plt.get_cmap("viridis")
    bs = sorted({c["batch"] for c in cells})
    for k in sorted({c["k"] for c in cells}):
        row = sorted([c for c in cells if c["k"] == k], key=lambda c: c["batch"])
        col = cmap((min(k, 8) - 1) / 7)
        ax.plot([c["batch"] for c in row], [c["speedup"] for c in row], "o-", color=col, label=f"measured k={k}")
        base = [c for c in row if c["batch"] == 1]
        if base:
            tok = base[0]["tokens_iid"]
            ax.plot(bs, [P.speedup(tok, costs.ratio(b, k, t0 > 0)) for b in bs],
                    "--", color=col, lw=1, label=f"predicted k={k}")
    ax.axhline(1.0, color="grey", ls=":", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(bs, [str(b) for b in bs])
    ax.set(xlabel="batch size", ylabel="speed-up over plain",
           title=f"Speed-up vs batch size on `{w}` (below the dotted line, speculation loses)")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, ncol=2)
    return _png(fig)


def acceptance_by_position(summary) -> bytes:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (w, c) in enumerate(sorted(_largest_k(_base_cells(summary)).items())):
        ca = _reached(c)
        ax.plot(range(1, len(ca) + 1), ca, marker=MARKERS[i % len(MARKERS)], label=f"{w} (α={c['alpha']:.2f})")
    temps = [c for c in summary["cells"] if c["batch"] == 1 and c["temperature"] > 0]
    for t, c in sorted(_largest_by_temp(temps).items()):
        ca = _reached(c)
        ax.plot(range(1, len(ca) + 1), ca, ls="--", lw=1, label=f"{c['workload']} T={t:g}")
    ax.set_ylim(0, 1.02)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set(xlabel="draft position j", ylabel="P(accept j | 1..j-1 accepted)",
           title=f"Acceptance by draft position (flat = i.i.d. holds; shown where >= {MIN_REACH} rounds reached j)")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7)
    return _png(fig)


def _largest_by_temp(cells):
    out: dict[float, dict] = {}
    for c in cells:
        t = c["temperature"]
        if t not in out or (c["k"], c["drafts"]) > (out[t]["k"], out[t]["drafts"]):
            out[t] = c
    return out


def tokens_per_round(summary) -> bytes:
    groups = sorted(_largest_k(_base_cells(summary)).items())
    fig, ax = plt.subplots(figsize=(7, 4.5))
    width = 0.8 / max(len(groups), 1)
    for i, (w, c) in enumerate(groups):
        hist = {int(n) + 1: m for n, m in c["accepted_length_hist"].items()}
        total = sum(hist.values()) or 1
        xs = range(1, c["k"] + 2)
        pos = [x + (i - len(groups) / 2 + 0.5) * width for x in xs]
        ax.bar(pos, [hist.get(x, 0) / total for x in xs], width=width,
               label=f"{w} (k={c['k']}, mean {c['tokens_per_step']:.2f})")
        a, k = c["alpha"], c["k"]       # what i.i.d. acceptance with the fitted alpha would give
        iid = [a ** (x - 1) * (1 - a) if x <= k else a ** k for x in xs]
        ax.scatter(pos, iid, marker="_", s=120, color="black", linewidths=2, zorder=3)
    ax.scatter([], [], marker="_", s=120, color="black", label="i.i.d. prediction (fitted α)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set(xlabel="tokens gained in the round (accepted drafts + 1)", ylabel="fraction of rounds",
           title="Tokens per round at batch 1")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7)
    return _png(fig)


def cost_curve(summary) -> bytes:
    tab = summary["cost_table"]
    t11 = tab["t_s"][0][0]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for b, row, td in zip(tab["b"], tab["t_s"], tab["t_draft_s"]):
        ax.plot(tab["q"], [t / t11 for t in row], "o-", ms=3,
                label=f"b={b}: t(b,1)={row[0] * 1e3:.1f} ms, draft {td * 1e3:.1f} ms/token")
    ax.set(xlabel="positions verified per row, q = k + 1", ylabel="t(b, q) / t(1, 1)",
           title=f"Verification cost curve ({tab['source']})")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7)
    return _png(fig)


def all_plots(summary, costs) -> dict[str, bytes]:
    """{name: PNG bytes} for the five plots."""
    return {"speedup_vs_alpha": speedup_vs_alpha(summary, costs),
            "speedup_vs_batch": speedup_vs_batch(summary, costs),
            "acceptance_by_position": acceptance_by_position(summary),
            "tokens_per_round": tokens_per_round(summary),
            "cost_curve": cost_curve(summary)}
