"""Which cells the headline and the regime rows show: a fixed rule, never a measured maximum.

The seed's three regimes, each tied to a workload by what it is, not by how it measured:
- predictable: held-out code, in distribution for the bundled models (`code`);
- hard: code past the models' 256-token training context (`long-code`), where the draft's
  and the target's guesses part ways;
- heavy batching: the largest batch measured, on the predictable workload (else on the
  workload whose batch was swept).
Within a regime's (workload, batch, base temperature), the k is the one with the best
*predicted* speed-up (ties: the smaller k). Picking the largest measured speed-up would
pick the cell whose noise ran highest (the winner's curse); the prediction is built from
acceptance and step costs, so it does not chase a lucky timing. The headline is the
predictable row (else the first workload at batch 1). `random` tokens fall into
self-repetition with these models; they are no regime and are never picked.
"""
from __future__ import annotations

PREDICTABLE = "code"
HARD = "long-code"
ROLES = {"predictable": ("held-out code (in distribution)", PREDICTABLE),
         "hard": ("code past the models' training context (out of distribution)", HARD)}


def _at(cells, workload, batch, temperature):
    return [c for c in cells if (c["workload"], c["batch"], c["temperature"]) == (workload, batch, temperature)]


def best_predicted(cells: list[dict]) -> dict | None:
    """The cell with the highest prediction, the smaller k on a tie; None for no cells."""
    return max(cells, key=lambda c: (c["pred"], -c["k"]), default=None)


def regimes(cells: list[dict], t0: float) -> list[dict]:
    """Rows {"regime", "what", "cell"} for the regimes whose workload was measured."""
    rows = []
    for name, (what, workload) in ROLES.items():
        cell = best_predicted(_at(cells, workload, 1, t0))
        if cell is not None:
            rows.append(dict(regime=name, what=what, cell=cell))
    swept = [c for c in cells if c["batch"] > 1 and c["temperature"] == t0]
    if swept:
        bmax = max(c["batch"] for c in swept)
        names = sorted({c["workload"] for c in swept if c["batch"] == bmax})
        workload = PREDICTABLE if PREDICTABLE in names else names[0]
        rows.append(dict(regime="heavy batching", what=f"`{workload}` at batch {bmax}, the largest measured",
                         cell=best_predicted(_at(cells, workload, bmax, t0))))
    return rows


def headline(cells: list[dict], t0: float) -> dict | None:
    """The verdict's cell: the predictable regime's, else the best predicted cell of the
    first workload at batch 1 and the base temperature (else of any cell)."""
    row = next((r for r in regimes(cells, t0) if r["regime"] == "predictable"), None)
    if row:
        return row["cell"]
    base = [c for c in cells if c["batch"] == 1 and c["temperature"] == t0] or cells
    return best_predicted([c for c in base if c["workload"] == base[0]["workload"]]) if base else None
