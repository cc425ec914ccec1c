"""The acceptance of sampled cells under both couplings, measured on the same prompts.

The timed runs verify sampled drafts by the `standard` rule (min(1, p/q)). For each sampled
block at batch 1, one group's prompts and seeds are decoded again with `invariant` coupling
(position-keyed Gumbel noise; a draft is accepted when it equals the target's coupled
sample), acceptance only: nothing of this pass is timed. Each cell then carries both
couplings' alpha and mean acceptance length side by side, and the invariant prediction
uses the invariant alpha with the cell's own round cost (assumed the same under either
coupling; this pass is not timed).
"""
from __future__ import annotations

from ..config import SamplingParams
from . import predict as P

COUPLED_GROUPS = 1     # one group per sampled block, acceptance only: --quick's three sampled blocks
                       # (k = 1, 3, 6, 64 tokens) add 6-7 s on the 2-core AMD EPYC (warm engines)


def coupled_pass(lockstep, models, specs: dict, group: list[list[int]], params: list[SamplingParams],
                 max_len: int, device: str) -> dict:
    """{k: (accepted lengths, draft lengths)} of `group` decoded with every spec in `specs`
    ({k: SpecConfig}) under the invariant coupling, same seeds as `params`."""
    inv = [SamplingParams(temperature=p.temperature, seed=p.seed, max_new_tokens=p.max_new_tokens,
                          ignore_eos=p.ignore_eos, coupling="invariant") for p in params]
    runs = lockstep(models, specs, group, inv, max_len, device)
    return {k: round_lengths(r) for k, r in runs.items()}


def round_lengths(run) -> tuple[list[int], list[int]]:
    """(accepted lengths, draft lengths) of every round of every sequence of a measure.Run."""
    return ([a for st in run.stats for a in st.accepted_lengths],
            [d for st in run.stats for d in st.draft_lengths])


def coupling_entry(k: int, lengths: list[int], drafts: list[int]) -> dict:
    """alpha, mean acceptance length and rounds of one coupling's rounds at draft length k."""
    return {"alpha": P.fit_alpha(lengths, k, drafts),
            "mean_acceptance_length": sum(lengths) / len(lengths) if lengths else 0.0,
            "rounds": len(lengths)}


def annotate_couplings(c: dict, ratio: float) -> None:
    """The invariant prediction of cell `c` (in place) from its own measured alpha and the
    cell's round-cost ratio; nothing for cells without an invariant measurement."""
    inv = (c.get("couplings") or {}).get("invariant")
    if inv and inv["rounds"]:
        inv["tokens_iid"] = P.expected_tokens(inv["alpha"], c["k"])
        inv["pred_iid"] = P.speedup(inv["tokens_iid"], ratio)


def coupling_rows(cells: list[dict]) -> list[list]:
    """Report rows: workload, k, T, then alpha and mean acceptance length under standard and
    invariant, and the invariant prediction, for every cell measured under both."""
    rows = []
    for c in cells:
        both = c.get("couplings") or {}
        if "invariant" not in both:
            continue
        s, i = both["standard"], both["invariant"]
        rows.append([c["workload"], c["k"], f"{c['temperature']:g}", f"{s['alpha']:.2f}", f"{i['alpha']:.2f}",
                     f"{s['mean_acceptance_length']:.2f}", f"{i['mean_acceptance_length']:.2f}",
                     f"{c['pred_iid']:.2f}×", f"{i.get('pred_iid', 0.0):.2f}×"])
    return rows


def coupling_blocks(cells: list[dict]) -> list:
    """The report's section comparing the couplings (nothing when no cell has both)."""
    rows = coupling_rows(cells)
    if not rows:
        return []
    temps = sorted({r[2] for r in rows}, key=float)
    return [("h", 2, "Sampling couplings: standard vs invariant"),
            ("p", f"Sampled cells at batch 1 (temperature {', '.join(temps)}): one group's prompts and seeds "
                  "decoded under each coupling. `standard` accepts a draft with probability min(1, p/q); "
                  "`invariant` (same output for a seed whatever the proposer, k or batch) accepts it only "
                  "when it equals the target's noise-coupled sample, so its α is lower. The invariant "
                  "prediction uses its own α with the cell's round cost. The (1−TV)/(1+TV) lower bound "
                  "is not shown: the analyzer does not measure the draft/target total variation."),
            ("table", ["workload", "k", "T", "α standard", "α invariant", "mean accepted, standard",
                       "mean accepted, invariant", "predicted, standard", "predicted, invariant"], rows)]
