"""Summaries from controlled measurements: aggregation, predictions, regimes, the verdict."""
import pytest

from specdec.analysis import predict as P
from specdec.analysis.costs import Costs
from specdec.analysis.measure import Cell, CellResult, Run, plan_cells
from specdec.analysis.summarize import summarize
from specdec.engine.sequence import SeqStats


def t_target(b, q):
    return 0.010 + 0.0004 * b * q          # weight read + per-position work: grows with b*q


def t_draft(b):
    return 0.001 + 0.00005 * b


def t_round(b, k, sampled=False):
    """A real round: the forwards plus engine work (more when drafting)."""
    return t_target(b, k + 1) + k * t_draft(b) + 0.001 + (0.0005 * (1 + k) if k else 0.0)


COSTS = Costs(t_target, t_draft, t_round, "synthetic")
RATIO_1 = t_round(1, 1) / t_round(1, 0)      # one round of k = 1, in plain steps


def run(tok_s, lengths_per_prompt, k, outputs=None):
    stats = []
    for lengths in lengths_per_prompt:
        st = SeqStats()
        for n in lengths:
            st.record(k, n)
        stats.append(st)
    return Run(tok_s, 60, 60 / tok_s, 1 / tok_s, outputs or [[1, 2, 3]] * len(lengths_per_prompt), stats)


def cell(w, k, b, speedup, lengths, temperature=0.0, plain_step=None):
    """A measured cell: two repeats with the given speed-up and accepted lengths; its plain
    steps take `plain_step` seconds (default: the cost model's, so no offset)."""
    r = CellResult(Cell(w, k, b, temperature))
    for g in range(2):
        plain = run(100.0, [[]], 0)
        plain.step_s = t_round(b, 0) if plain_step is None else plain_step
        r.add(plain, run(100.0 * speedup, [lengths], k))
    return r.as_dict()


def test_aggregation_of_runs():
    d = cell("code", 2, 1, 1.5, [2, 0, 1, 2])
    assert d["drafts"] == 8 and d["accepted_tokens"] == 10
    assert d["accepted_per_pos"] == [6, 4]                       # two repeats of [3, 2]
    assert d["tokens_per_step"] == pytest.approx(1 + 10 / 8)
    assert d["alpha"] == pytest.approx(P.fit_alpha([2, 0, 1, 2], 2))
    assert d["acceptance_rate"] == pytest.approx(10 / 16)
    assert d["speedup"] == pytest.approx(1.5) and d["identical_to_plain"] is True
    assert d["accepted_length_hist"] == {"0": 2, "1": 2, "2": 4}


def test_identity_check_catches_a_difference():
    r = CellResult(Cell("code", 1, 1, 0.0))
    r.add(run(100.0, [[]], 0, outputs=[[1, 2, 3]]), run(120.0, [[1]], 1, outputs=[[1, 2, 4]]))
    assert r.as_dict()["identical_to_plain"] is False


def test_plan_star_and_full():
    star = plan_cells(["code", "random"], [1, 2], [1, 8], [0.0, 1.0], sweep_workloads=["code"])
    assert Cell("random", 2, 1, 0.0) in star and Cell("code", 2, 8, 0.0) in star
    assert Cell("code", 1, 1, 1.0) in star
    assert Cell("random", 1, 8, 0.0) not in star and Cell("random", 1, 1, 1.0) not in star
    assert len(plan_cells(["code", "random"], [1, 2], [1, 8], [0.0, 1.0], full=True)) == 16


@pytest.fixture()
def summary():
    hi = [4, 4, 3, 4, 2, 4, 4, 1, 4, 4]          # predictable text
    falling = [1, 1, 1, 2, 1, 0, 1, 1, 4, 1]     # first draft usually accepted, later ones rarely
    cells = [cell("code", 4, 1, 2.0, hi), cell("code", 2, 1, 1.6, [min(n, 2) for n in hi]),
             cell("code", 4, 4, 1.5, hi), cell("code", 4, 16, 0.5, hi),
             cell("prose", 4, 1, 0.9, falling), cell("prose", 1, 1, 1.9 / RATIO_1, [min(n, 1) for n in falling]),
             cell("random", 4, 1, 0.4, [0] * 10)]
    return summarize(cells, COSTS, "the draft model `d`", [1, 4, 16], [0.0], q_max=9)


def test_predictions_use_the_measured_costs(summary):
    c = next(c for c in summary["cells"] if (c["workload"], c["k"], c["batch"]) == ("code", 4, 1))
    ratio = t_round(1, 4) / t_round(1, 0)
    assert c["ratio"] == pytest.approx(ratio)
    assert c["ratio_forward"] == pytest.approx((t_target(1, 5) + 4 * t_draft(1)) / t_target(1, 1))
    assert c["pred_iid"] == pytest.approx(P.expected_tokens(c["alpha"], 4) / ratio)
    assert c["pred_positional"] == pytest.approx(c["tokens_per_step"] / ratio)   # largest k: measured
    assert c["err_positional"] == pytest.approx(c["pred_positional"] / 2.0 - 1)
    # k = 2 is predicted from the k = 4 run's per-position acceptance (held out)
    c2 = next(c for c in summary["cells"] if (c["workload"], c["k"], c["batch"]) == ("code", 2, 1))
    assert c2["positional_held_out"] and c2["tokens_positional"] == pytest.approx(c2["tokens_per_step"])


def test_iid_formula_flagged_where_acceptance_falls_with_position(summary):
    prose4, prose1 = (next(c for c in summary["cells"] if (c["workload"], c["k"]) == ("prose", k)) for k in (4, 1))
    assert prose4["cond_alphas"][0] > 0.8 and prose4["cond_alphas"][1] < 0.3
    # one alpha fitted on k = 4 rounds underestimates k = 1 (first drafts are easy) ...
    assert prose1["alpha_ref"] == prose4["alpha"]
    assert prose1["iid_misleads"] and prose1["tokens_iid_ref"] < prose1["tokens_per_step"] / 1.1
    assert any((m["workload"], m["k"]) == ("prose", 1) for m in summary["errors"]["iid_misleads"])
    # ... while the per-position product, from the same k = 4 rounds, gets it right
    assert prose1["tokens_positional"] == pytest.approx(prose1["tokens_per_step"])
    assert abs(prose1["err_positional"]) < 1e-9
    # (the cell's own alpha, fitted on its k = 1 rounds, is exact there)
    assert prose1["tokens_iid"] == pytest.approx(prose1["tokens_per_step"])


def test_regimes_and_verdict_come_from_the_data(summary):
    regs = {r["regime"]: r["cell"] for r in summary["regimes"]}
    code1 = [c for c in summary["cells"] if (c["workload"], c["batch"]) == ("code", 1)]
    assert regs["predictable"] is max(code1, key=lambda c: c["pred"]) and regs["predictable"]["k"] == 4
    assert "hard" not in regs                      # no long-code cell; `random` is never a regime
    assert (regs["heavy batching"]["workload"], regs["heavy batching"]["batch"]) == ("code", 16)
    v = summary["verdict"]
    assert v.startswith("On `code` at batch 1, speculation with the draft model `d` gives 2.00× (2.00–2.00×) at k = 4")
    # measured: 1.5x at batch 4, 0.5x at batch 16 -> crosses 1 at batch 4 + 0.5 / 1.0 * 12 = 10
    assert "stops paying above batch 10 (measured)" in v
    be = P.break_even_alpha(4, t_round(1, 4) / t_round(1, 0))
    assert f"below α = {be:.2f}" in v
    assert "`random`" not in v
    assert summary["break_even"][1][4] == pytest.approx(be)
    assert summary["errors"]["greedy_identical"] is True


def test_verdict_when_nothing_pays():
    cells = [cell("random", 2, 1, 0.7, [0, 0, 1, 0])]
    s = summarize(cells, COSTS, "method `ngram`", [1], [0.0], q_max=9)
    assert "does not pay at batch 1" in s["verdict"] and "0.70×" in s["verdict"]


def test_finite_runs_predicted_round_by_round():
    # every draft accepted: rows gain k+1 = 3 tokens a round, so 10 tokens take 4 rounds
    c = cell("code", 2, 1, 2.0, [2, 2, 2, 2])
    s = summarize([c], COSTS, "m", [1], [0.0], q_max=9, new_tokens=10)["cells"][0]
    assert s["alpha"] == 1.0
    assert s["pred"] == pytest.approx(10 * t_round(1, 0) / (4 * t_round(1, 2)))
    assert s["pred_iid"] == pytest.approx(3 * t_round(1, 0) / t_round(1, 2))        # steady state
    assert s["err"] == pytest.approx(s["pred"] / 2.0 - 1)
    # nothing accepted: one token per round at a round's cost, at any length
    z = summarize([cell("random", 3, 1, 0.5, [0, 0, 0])], COSTS, "m", [1], [0.0], q_max=9, new_tokens=7)
    assert z["cells"][0]["pred"] == pytest.approx(t_round(1, 0) / t_round(1, 3))


def test_batch_prediction_uses_each_rows_alpha():
    # two rows, one always accepted, one never: the batch runs until the slow row is done,
    # with one row left once the fast row has finished
    t = lambda b, k: t_round(b, k)                                                   # noqa: E731
    got = P.simulate_speedup([1.0, 0.0], 3, 2, 8, t)
    assert got == pytest.approx(8 * t(2, 0) / (2 * t(2, 3) + 6 * t(1, 3)))
    assert P.simulate_speedup(0.0, 3, 2, 8, t) == pytest.approx(t(2, 0) / t(2, 3))
    assert P.pooled_speedup([2.0, 1.0]) == pytest.approx(2 / 1.5)


def test_verdict_for_a_free_proposer_without_batch_sweep():
    free = Costs(lambda b, q: 0.01, lambda b: 0.0, lambda b, k, s: 0.01, "synthetic")   # flat, free drafts
    s = summarize([cell("grounded", 3, 1, 1.8, [3, 3, 0, 2])], free, "method `ngram`", [1], [0.0], q_max=9)
    assert s["verdict"].startswith("On `grounded` at batch 1, speculation with method `ngram` gives 1.80× "
                                   "(1.80–1.80×) at k = 3")
    assert s["verdict"].endswith("it cannot lose at any α: a round costs no more than a plain step.")
    assert s["break_even"][1][3] == 0.0


def test_a_batch_one_miss_is_not_blamed_on_rows_finishing_apart():
    from specdec.analysis.summarize import _why
    # tokens per round 7% high and a round 6% cheap: neither misses by 10%, together 14%
    cell = dict(batch=1, tokens_per_step=4.0, tokens_iid=4.28, ratio_measured=2.2, ratio=2.07, ci=[1.8, 1.9])
    why = _why(cell)
    assert "tail effects" not in why and "4.28" in why and "2.07x" in why and "2.20x" in why
    assert "tail effects" in _why(dict(cell, batch=4))
    assert "i.i.d. formula" in _why(dict(cell, tokens_iid=5.0))


def test_rounds_that_drafted_nothing_count_as_plain_steps():
    r = CellResult(Cell("chat", 4, 1, 0.0))
    st = SeqStats()
    st.target_forwards = 1                    # admission's forward
    for n in (4, 4, 4, 4):
        st.record(4, n)
    for _ in range(4):
        st.record(0, 0)                       # nothing proposed: a plain step
    plain = run(100.0, [[]], 0)
    plain.step_s = t_round(1, 0)
    r.add(plain, Run(150.0, 60, 0.4, 0.01, [[1, 2, 3]], [st]))
    c = r.as_dict()
    assert c["draft_rate"] == 0.5 and c["group_rows"] == [[[1.0, 0.5]]]
    (got,) = summarize([c], COSTS, "m", [1], [0.0], q_max=9, new_tokens=32)["cells"]
    full = P.simulate_speedup([1.0], 4, 1, 32, lambda a, k: t_round(a, k))
    assert got["pred"] < full and got["pred_iid"] == pytest.approx(
        P.with_draft_rate(5.0, t_round(1, 4) / t_round(1, 0), 0.5))
