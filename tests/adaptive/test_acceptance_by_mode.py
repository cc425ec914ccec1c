"""Acceptance is estimated per proposer *and* verification mode (greedy, standard or invariant
coupling): a batch mixing rows of different modes keeps one estimate per mode, each converging
on its own rows' acceptance; a new request starts from its own mode's; the policy's choice of
k follows the mode of the rows it runs."""
from __future__ import annotations

import numpy as np
import pytest

from specdec.adaptive.acceptance import AcceptanceTracker
from specdec.config import SamplingParams
from specdec.engine.sequence import Sequence

from tests.adaptive.fakes import K_MAX, LINEAR, FakeNgram, exact_choice, make_policy, observe

# true per-position acceptance of each mode's rows (invariant below standard, as measured:
# first-draft acceptance 0.63-0.77 invariant, 0.73-0.80 standard)
TRUE = {"greedy": 0.9, "standard": 0.78, "invariant": 0.65}
MODES = ["greedy"] * 4 + ["standard"] * 4 + ["invariant"] * 8     # 16 rows, mixed in one batch


def _mixed_rounds(acc: AcceptanceTracker, rounds: int, k: int, rng, read: bool = True) -> list[dict]:
    """Drive `rounds` rounds of the mixed batch, reported as the engine reports a mixed batch:
    argmax rows (greedy, invariant) by their 0/1 outcome, standard rows by beta. Returns the
    proposer estimate of each mode after every round (if `read`: reading folds the queue in)."""
    readings = []
    for _ in range(rounds):
        a = np.array([TRUE[m] for m in MODES])
        ok = rng.random((len(MODES), k)) < a[:, None]                  # each position's outcome
        accepted = [int(np.argmin(np.append(row, False))) for row in ok]   # up to the first miss
        beta = [[TRUE[m]] * k if m == "standard" else [1.0 * (j < n) for j in range(k)]
                for m, n in zip(MODES, accepted)]
        acc.record("d", [k] * len(MODES), accepted, k, beta)
        if read:
            readings.append({m: acc.proposer_means("d", m) for m in TRUE})
    return readings


def _tracker() -> AcceptanceTracker:
    acc = AcceptanceTracker(4)
    for row, m in enumerate(MODES):
        acc.start(row, m)
    return acc


def test_a_mixed_batch_keeps_one_estimate_per_mode_each_converging_on_its_rows():
    acc = _tracker()
    readings = _mixed_rounds(acc, 600, 4, np.random.default_rng(0))
    late = readings[200:]                                               # past the prior's pull
    for m, a in TRUE.items():
        # a proposer's estimate holds ~50 rounds (PROPOSER_DECAY): 0/1 outcomes of 4-8 rows
        # leave it a noise of +-0.02 (seeds 0-5: invariant 0.625-0.667); beta leaves none
        first = np.mean([r[m][0] for r in late])
        assert first == pytest.approx(a, abs=0.001 if m == "standard" else 0.035), m   # the first draft's
        deep = np.mean([r[m] for r in late], axis=0)
        assert deep == pytest.approx([a] * 4, abs=0.05), m              # and every later position's
    pooled = np.mean([TRUE[m] for m in MODES])                          # what one estimate would hold
    assert abs(np.mean([r["invariant"][0] for r in late]) - pooled) > 0.05
    assert set(acc.keys) == {("d", m) for m in TRUE}


def test_a_new_request_starts_from_its_own_modes_estimate():
    acc = _tracker()
    _mixed_rounds(acc, 300, 4, np.random.default_rng(1))
    acc.start(0, "invariant")                                           # row 0 was greedy
    acc.start(len(MODES) - 1, "standard")                               # the last was invariant
    rows = acc.row_means("d", len(MODES))
    assert rows[0] == pytest.approx(acc.proposer_means("d", "invariant"))
    assert rows[-1] == pytest.approx(acc.proposer_means("d", "standard"))
    acc.rows[4] = acc.rows.pop(0)                                       # the row table moves row 0 to 4:
    assert acc.rows[4].mode == "invariant"                              # it keeps its mode
    assert acc.row_means("d", 5)[4] == pytest.approx(acc.proposer_means("d", "invariant"))


def test_queued_rounds_of_a_mixed_batch_fold_in_as_one_at_a_time():
    lazy, eager, longest = _tracker(), _tracker(), 0
    rng_l, rng_e = np.random.default_rng(2), np.random.default_rng(2)
    for i in range(40):
        k = 1 + i % 3 // 2 * 3                                          # k = 1, 1, 4, 1, 1, 4, ..
        _mixed_rounds(lazy, 1, k, rng_l, read=False)
        _mixed_rounds(eager, 1, k, rng_e, read=False)
        eager.flush()
        longest = max(longest, len(lazy._queue))
        if i == 20:
            for t in (lazy, eager):                                     # the row table moves an invariant
                t.rows[0] = t.rows.pop(12)                              # row into a greedy's slot, and a new
                t.start(12, t.rows[0].mode)                             # request of its mode takes row 12
    assert longest >= 2                                                 # runs of rounds were folded at once
    assert np.allclose(lazy.row_means("d", len(MODES)), eager.row_means("d", len(MODES)))
    assert all(np.allclose(lazy.keys[key], eager.keys[key]) for key in eager.keys)


def test_the_policy_chooses_k_by_the_mode_of_the_rows_it_runs():
    """On LINEAR (batch 1: acceptance 0.8 -> k = 2, 0.3 -> k = 0, their pool 0.55 -> k = 1): after
    a standard row at 0.8 and an invariant row at 0.3 ran side by side, a new request drafts by
    its own mode's estimate, not by their pool."""
    assert (exact_choice(0.8), exact_choice(0.3), exact_choice(0.55)) == (2, 0, 1)
    sampled = {c: SamplingParams(temperature=1.0, coupling=c, max_new_tokens=1000) for c in ("standard", "invariant")}
    pol, batch = make_policy(LINEAR, proposer=FakeNgram(), params=[sampled["standard"], sampled["invariant"]])
    assert [pol.acc.rows[b].mode for b in range(2)] == ["standard", "invariant"]
    for _ in range(300):                                                # evidence at every position
        observe(pol, batch, K_MAX, [K_MAX] * 2, [K_MAX] * 2, 0.0, accept_prob=[[0.8] * K_MAX, [0.3] * K_MAX])
    for coupling, want in (("standard", 2), ("invariant", 0)):
        seq = Sequence(list(range(2, 12)), sampled[coupling])
        pol.start(0, seq)                                               # a new request: no counts of its own
        assert pol.choose([seq]) == want, coupling
