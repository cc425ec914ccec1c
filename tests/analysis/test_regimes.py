"""The regime rule (regimes.py) on a chat model and on the bundled code models, the seed's
ranges, α's interval over prompts, and the quick grid's sweeps."""
import pytest

from specdec.analysis.acceptance import alpha_interval, prompt_counts
from specdec.analysis.measure import Cell, plan_cells
from specdec.analysis.regimes import SEED_RANGE, headline, outside, regimes
from specdec.analysis.session import sweeps


def c(w, k, b, t, pred, alpha=0.5, counts=((5, 5), (5, 5))):
    return {"workload": w, "k": k, "batch": b, "temperature": t, "pred": pred, "alpha": alpha,
            "prompt_counts": [list(x) for x in counts]}


def test_a_chat_model_regimes_by_rule():
    cells = [c("chat-rewrite", 1, 1, 0.0, 1.2, 0.95), c("chat-rewrite", 3, 1, 0.0, 1.5, 0.95),
             c("chat", 3, 1, 0.0, 1.9, 0.4),                  # the best prediction is no regime's
             c("chat", 1, 1, 1.0, 0.9, 0.1), c("chat", 3, 1, 1.0, 0.8, 0.1), c("chat", 3, 1, 1.5, 0.7, 0.05),
             c("chat-rewrite", 3, 4, 0.0, 1.1), c("chat-rewrite", 1, 16, 0.0, 0.7), c("chat-rewrite", 3, 16, 0.0, 0.6)]
    rows = {r["regime"]: r for r in regimes(cells, 0.0)}
    assert set(rows) == {"predictable", "hard", "heavy batching"}
    assert (rows["predictable"]["cell"]["workload"], rows["predictable"]["cell"]["k"]) == ("chat-rewrite", 3)
    hard = rows["hard"]["cell"]
    assert (hard["workload"], hard["temperature"], hard["k"]) == ("chat", 1.0, 1)
    heavy = rows["heavy batching"]["cell"]
    assert (heavy["workload"], heavy["batch"], heavy["k"]) == ("chat-rewrite", 16, 1)
    assert headline(cells, 0.0) is rows["predictable"]["cell"]
    # the seed's ranges: 95% lies 5 points above 70-90%, 10% lies 10 points below 20-30%
    assert rows["predictable"]["seed_range"] == list(SEED_RANGE["predictable"])
    assert rows["predictable"]["outside_seed"] == pytest.approx(0.05)
    assert rows["hard"]["outside_seed"] == pytest.approx(-0.10)
    assert "seed_range" not in rows["heavy batching"]
    assert all(r["alpha_ci"] is not None for r in rows.values())      # every row carries an interval


def test_the_code_models_keep_their_regimes():
    cells = [c("code", 2, 1, 0.0, 1.5), c("long-code", 2, 1, 0.0, 1.1), c("chat-like", 2, 1, 1.0, 3.0)]
    rows = {r["regime"]: r["cell"]["workload"] for r in regimes(cells, 0.0)}
    assert rows == {"predictable": "code", "hard": "long-code"}


def test_no_regime_cell_no_row():
    rows = regimes([c("chat-rewrite", 1, 1, 0.0, 1.2), c("chat", 1, 1, 0.7, 1.0)], 0.0)
    assert [r["regime"] for r in rows] == ["predictable"]       # no chat cell at T = 1


def test_outside_the_range():
    assert outside(0.8, 0.7, 0.9) == 0 and outside(0.65, 0.7, 0.9) == pytest.approx(-0.05)
    assert outside(0.95, 0.7, 0.9) == pytest.approx(0.05)


def test_alpha_interval_over_prompts():
    assert alpha_interval([]) is None and alpha_interval([(0, 0)]) is None
    same = alpha_interval([(8, 2)] * 6)
    assert same == pytest.approx([0.8, 0.8])
    lo, hi = alpha_interval([(9, 1), (1, 9), (5, 5), (8, 2), (2, 8)])
    assert 0.2 < lo < 0.5 < hi < 0.8
    assert alpha_interval([(9, 1), (1, 9)], seed=3) == alpha_interval([(9, 1), (1, 9)], seed=3)
    # counted as fit_alpha counts: a round accepting fewer than it drafted ended on a rejection
    assert prompt_counts([2, 0, 3], [3, 2, 3]) == (5, 2)


def test_quick_sweeps_measure_the_regimes():
    names = ["chat-rewrite", "chat"]
    sw = sweeps(names, quick=True)
    assert sw == {"sweep_workloads": ["chat-rewrite"], "temperature_workloads": ["chat"]}
    cells = plan_cells(names, [1, 3], [1, 4], [0.0, 1.0], **sw)
    assert Cell("chat", 3, 1, 1.0) in cells and Cell("chat-rewrite", 3, 4, 0.0) in cells
    assert Cell("chat-rewrite", 3, 1, 1.0) not in cells and Cell("chat", 3, 4, 0.0) not in cells
    assert sweeps(["code", "long-code", "prose"], quick=True) == {"sweep_workloads": ["code"],
                                                                  "temperature_workloads": ["code"]}
    assert sweeps(["code", "long-code"], quick=False) == {"sweep_workloads": ["code"]}
