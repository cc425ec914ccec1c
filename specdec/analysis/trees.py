"""Token trees against chains: `specdec analyze --tree N|auto`.

A tree of depth k spends up to N verify positions on several guesses where a chain spends
k + 1 on one (docs/trees.md). It pays only where the extra acceptance outweighs the extra
positions, which depends on the machine's verify curve t(q) and on the workload. So every
batch-1 block also decodes, for each k of the block, the tree of depth k in the same lockstep
group as plain decoding and the chains: the same prompts and seeds, the same wall-clock window.
Each cell then carries the tree's pooled decode tokens/s over its chain's, both mean
acceptance lengths, the nodes a round scored and how often a non-first child was accepted.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..engine.metrics import mean_acceptance_length

TREE = "tree"      # the name of a tree run in a lockstep group: (TREE, k)


def tree_specs(spec_for_k, ks, tree) -> dict:
    """{(TREE, k): the chain's SpecConfig at k with `tree` set} for every k; {} without a tree."""
    return {(TREE, k): replace(spec_for_k(k), tree=tree) for k in ks} if tree else {}


@dataclass
class TreeSide:
    """A cell's tree runs beside its chain runs, pooled over groups."""
    budget: int | str
    totals: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])  # tree tok, s; chain tok, s
    drafts: list[int] = field(default_factory=lambda: [0, 0])                    # tree rounds, chain rounds
    accepted: list[int] = field(default_factory=lambda: [0, 0])                  # accepted tokens: tree, chain
    nodes: int = 0                      # draft tokens the tree rounds scored
    branch_accepts: int = 0             # accepted nodes that were not their parent's first child
    identical: bool | None = None       # greedy: tree outputs equal the chain's

    def add(self, tree, chain, greedy: bool) -> None:
        """One group's measure.Run of the tree and of its chain."""
        for i, x in enumerate((tree.tokens, tree.decode_s, chain.tokens, chain.decode_s)):
            self.totals[i] += x
        for side, run in enumerate((tree, chain)):
            self.drafts[side] += sum(len(st.accepted_lengths) for st in run.stats)
            self.accepted[side] += sum(sum(st.accepted_lengths) for st in run.stats)
        self.nodes += sum(sum(st.draft_lengths) for st in tree.stats)
        self.branch_accepts += tree.metrics.get("branch_accepts", 0)
        if greedy:
            same = tree.outputs == chain.outputs
            self.identical = same if self.identical is None else self.identical and same

    def as_dict(self) -> dict:
        tn, ts, cn, cs = self.totals
        tree_rate, chain_rate = (tn / ts if ts else 0.0), (cn / cs if cs else 0.0)
        return {"budget": self.budget, "tok_s": tree_rate, "chain_tok_s": chain_rate,
                "vs_chain": tree_rate / chain_rate if chain_rate else 0.0,
                "mean_acceptance_length": mean_acceptance_length(self.accepted[0], self.drafts[0]),
                "chain_mean_acceptance_length": mean_acceptance_length(self.accepted[1], self.drafts[1]),
                "nodes_per_round": self.nodes / self.drafts[0] if self.drafts[0] else 0.0,
                "branch_share": self.branch_accepts / self.accepted[0] if self.accepted[0] else 0.0,
                "identical_to_chain": self.identical}


def tree_rows(cells: list[dict]) -> list[list]:
    """Report rows, one per cell measured with a tree."""
    rows = []
    for c in cells:
        t = c.get("tree")
        if not t:
            continue
        rows.append([c["workload"], c["k"], f"{c['temperature']:g}", str(t["budget"]),
                     f"{t['nodes_per_round']:.1f}", f"{t['chain_mean_acceptance_length']:.2f}",
                     f"{t['mean_acceptance_length']:.2f}", f"{t['branch_share']:.0%}",
                     f"{t['chain_tok_s']:.1f}", f"{t['tok_s']:.1f}", f"{t['vs_chain']:.2f}×",
                     {True: "yes", False: "NO", None: "n/a"}[t["identical_to_chain"]]])
    return rows


def tree_blocks(cells: list[dict]) -> list:
    """The report's section comparing tree and chain (nothing without tree runs)."""
    rows = tree_rows(cells)
    if not rows:
        return []
    wins = sum(c["tree"]["vs_chain"] > 1.0 for c in cells if c.get("tree"))
    return [("h", 2, "Token tree against chain"),
            ("p", f"Batch-1 cells: a token tree of depth k (node budget {rows[0][3]}) decoded in the same "
                  "lockstep group as the chain of k drafts, on the same prompts and seeds. Mean acceptance "
                  "length is tokens per round, 1 + accepted / rounds; branch share is the accepted tokens "
                  "that were not their parent's first child. Tokens/s pool the groups' decode steps. "
                  f"The tree is faster than its chain in {wins} of {len(rows)} cells: a tree pays only where "
                  "its extra acceptance outweighs verifying its extra nodes (see the cost table: t(1, q) "
                  "for q up to the node count). Greedy trees must reproduce the chain's output exactly."),
            ("table", ["workload", "k", "T", "budget", "nodes per round", "mean accepted, chain",
                       "mean accepted, tree", "branch share", "chain tok/s", "tree tok/s", "tree / chain",
                       "identical"], rows)]
