"""Which cells the headline and the regime rows show: a fixed rule, never a measured maximum.

The seed's three regimes, each tied to a workload by what it is, not by how it measured. On
a chat model (a chat workload was measured, workloads.CHAT_WORKLOADS):
- predictable: `chat-rewrite`, a given passage to rewrite or proofread: text the model can
  largely copy, at the base temperature;
- hard: `chat`, open-ended ShareGPT first turns, at T = 1.
On the bundled code models (otherwise):
- predictable: held-out code, in distribution for the bundled models (`code`);
- hard: code past the models' 256-token training context (`long-code`), where the draft's
  and the target's guesses part ways.
Both: heavy batching is the largest batch measured, on the predictable workload (else on the
workload whose batch was swept).

Within a regime's (workload, batch, temperature), the k is the one with the best *predicted*
speed-up (ties: the smaller k). Picking the largest measured speed-up would pick the cell
whose noise ran highest (the winner's curse); the prediction is built from acceptance and
step costs, so it does not chase a lucky timing. The headline is the predictable row (else
the first workload at batch 1). `random` tokens fall into self-repetition with these models;
they are no regime and are never picked.

Each row carries the seed's acceptance range for its regime (SEED_RANGE) and how far the
measured α lies outside it, with α's 95% interval over prompts (acceptance.py): the measured
figure is the answer, the range only what the seed expected.
"""
from __future__ import annotations

from .acceptance import alpha_interval

PREDICTABLE = "code"
HARD = "long-code"
CHAT_PREDICTABLE, CHAT_HARD = "chat-rewrite", "chat"
HARD_CHAT_T = 1.0          # the seed's hard regime: open-ended chat, sampled at T = 1
# (what, workload, temperature: None for the base temperature), per kind of model
CODE_ROLES = {"predictable": ("held-out code (in distribution)", PREDICTABLE, None),
              "hard": ("code past the models' training context (out of distribution)", HARD, None)}
CHAT_ROLES = {"predictable": ("a given passage to rewrite or proofread: text the model can largely copy",
                              CHAT_PREDICTABLE, None),
              "hard": (f"open-ended chat (ShareGPT first turns) at T = {HARD_CHAT_T:g}", CHAT_HARD, HARD_CHAT_T)}
ROLES = CODE_ROLES          # the bundled models' (kept for callers that name them)
SEED_RANGE = {"predictable": (0.70, 0.90), "hard": (0.20, 0.30)}   # the seed's acceptance per regime


def roles_for(workloads) -> dict:
    """CHAT_ROLES where a chat workload is among `workloads`, else CODE_ROLES."""
    return CHAT_ROLES if {CHAT_PREDICTABLE, CHAT_HARD} & set(workloads) else CODE_ROLES


def predictable_workload(workloads) -> str:
    """The predictable regime's workload for this set of workloads."""
    return roles_for(workloads)["predictable"][1]


def _at(cells, workload, batch, temperature):
    return [c for c in cells if (c["workload"], c["batch"], c["temperature"]) == (workload, batch, temperature)]


def best_predicted(cells: list[dict]) -> dict | None:
    """The cell with the highest prediction, the smaller k on a tie; None for no cells."""
    return max(cells, key=lambda c: (c["pred"], -c["k"]), default=None)


def outside(alpha: float, lo: float, hi: float) -> float:
    """How far α lies outside [lo, hi]: negative below, positive above, 0 inside."""
    return alpha - lo if alpha < lo else alpha - hi if alpha > hi else 0.0


def _row(name: str, what: str, cell: dict) -> dict:
    row = dict(regime=name, what=what, cell=cell, alpha_ci=alpha_interval(cell.get("prompt_counts") or []))
    if name in SEED_RANGE and cell.get("alpha") is not None:
        lo, hi = SEED_RANGE[name]
        row.update(seed_range=[lo, hi], outside_seed=outside(cell["alpha"], lo, hi))
    return row


def regimes(cells: list[dict], t0: float) -> list[dict]:
    """Rows {"regime", "what", "cell", "alpha_ci", "seed_range", "outside_seed"} for the
    regimes whose cells were measured (heavy batching has no seed range)."""
    roles, rows = roles_for({c["workload"] for c in cells}), []
    for name, (what, workload, temp) in roles.items():
        cell = best_predicted(_at(cells, workload, 1, t0 if temp is None else temp))
        if cell is not None:
            rows.append(_row(name, what, cell))
    swept = [c for c in cells if c["batch"] > 1 and c["temperature"] == t0]
    if swept:
        bmax = max(c["batch"] for c in swept)
        names = sorted({c["workload"] for c in swept if c["batch"] == bmax})
        predictable = roles["predictable"][1]
        workload = predictable if predictable in names else names[0]
        rows.append(_row("heavy batching", f"`{workload}` at batch {bmax}, the largest measured",
                         best_predicted(_at(cells, workload, bmax, t0))))
    return rows


def headline(cells: list[dict], t0: float) -> dict | None:
    """The verdict's cell: the predictable regime's, else the best predicted cell of the
    first workload at batch 1 and the base temperature (else of any cell)."""
    row = next((r for r in regimes(cells, t0) if r["regime"] == "predictable"), None)
    if row:
        return row["cell"]
    base = [c for c in cells if c["batch"] == 1 and c["temperature"] == t0] or cells
    return best_predicted([c for c in base if c["workload"] == base[0]["workload"]]) if base else None
