"""Acceptance by draft position, per method, from a benchmarks/proposers.py run.

    python benchmarks/plot_positions.py RESULTS/proposers.json --methods eagle,draft,ngram --out docs/img/x.png

One panel per workload and sampling mode; each line is a method's share of rounds whose
draft token at position i was accepted (vLLM's per-position acceptance: accepted at i over
drafts), medians over the run's repeats.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path)
    p.add_argument("--methods", default="eagle,draft,ngram")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    data = json.loads(a.results.read_text())
    panels = list(data["results"].items())
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2), squeeze=False)
    for ax, (key, per) in zip(axes[0], panels):
        for m in [m for m in a.methods.split(",") if m in per]:
            acc = per[m].get("per_position") or []
            ax.plot(range(1, len(acc) + 1), acc, marker="o", label=f"{m} (mean length "
                    f"{per[m]['mean_acceptance_length']:.2f})")
        ax.set_title(key, fontsize=9)
        ax.set_xticks(range(1, max((len(per[m].get("per_position") or []) for m in per), default=1) + 1))
        ax.set_xlabel("draft position")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("accepted / drafts")
    meta = data["meta"]
    fig.suptitle(f"k = {meta['k']}, batch {meta.get('batch', 1)}; {meta['cpu']}", fontsize=9)
    fig.tight_layout()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
