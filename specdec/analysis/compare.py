"""Proposers side by side: `specdec analyze --method M --compare A,B`.

Every batch-1 block also decodes, for each k of the block, methods A and B at that k in the same
lockstep group as plain decoding and M's chains: the same prompts and seeds, the same wall-clock
window, so their tokens/s compare without the machine's drift between runs. Each cell then
carries, per compared method, its pooled decode tokens/s over M's at the same k and both mean
acceptance lengths (trees.TreeSide's record, with the method's name in place of a node budget).
"""
from __future__ import annotations

from dataclasses import replace

VS = "vs"          # the name of a compared run in a lockstep group: (VS, method, k)


def compare_specs(spec_for_k, ks, methods) -> dict:
    """{(VS, m, k): M's SpecConfig at k with method m} for every compared method and k."""
    return {(VS, m, k): replace(spec_for_k(k), method=m) for m in methods for k in ks}


def compare_blocks(cells: list[dict]) -> list:
    """The report's section of compared proposers (nothing without compared runs)."""
    rows = []
    for c in cells:
        for m, s in (c.get("compare") or {}).items():
            rows.append([c["workload"], c["k"], f"{c['temperature']:g}", m,
                         f"{s['chain_mean_acceptance_length']:.2f}", f"{s['mean_acceptance_length']:.2f}",
                         f"{s['chain_tok_s']:.1f}", f"{s['tok_s']:.1f}", f"{s['vs_chain']:.2f}×",
                         f"{c['speedup'] * s['vs_chain']:.2f}×",
                         {True: "yes", False: "NO", None: "n/a"}[s["identical_to_chain"]]])
    if not rows:
        return []
    return [("h", 2, "Proposers side by side"),
            ("p", "Batch-1 cells: each compared method decoded at the cell's k in the same lockstep group as "
                  "plain decoding and the analyzed method, on the same prompts and seeds. Mean acceptance length "
                  "is tokens per round, 1 + accepted / rounds. Tokens/s pool the groups' decode steps; the "
                  "speed-up over plain is the cell's speed-up times the compared method's ratio to the "
                  "analyzed one. Greedy rows must reproduce the analyzed method's output exactly."),
            ("table", ["workload", "k", "T", "compared", "mean accepted, analyzed", "mean accepted, compared",
                       "analyzed tok/s", "compared tok/s", "compared / analyzed", "compared vs plain",
                       "identical"], rows)]
