"""k = auto from a cold start: the prior's forwards, the round table learned online
(adaptive/online.py), and what it must keep: no round timed before the first token, prices that
converge to the measured table, choices that depend only on the rounds observed, and a bounded
exploration."""
from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

from specdec.adaptive.online import CONFIRM_N, WINDOW, OnlineRounds
from specdec.adaptive.policy import AdaptiveK
from specdec.build import Models, make_engine
from specdec.config import EngineConfig, SamplingParams, SpecConfig
from specdec.costs.cost_model import DRAFT_KEY
from specdec.costs.key import CostKey
from specdec.costs.rounds import RoundTable
from specdec.engine.engine import Engine
from specdec.engine.sequence import Sequence
from tests.adaptive.fakes import K_MAX, FakeDraft, observe
from tests.conftest import random_prompts
from tests.synthetic_costs import synthetic_cost_model

TARGET = lambda b, q, L: 0.010 + 0.0002 * b * q + 1e-6 * b * L     # noqa: E731  memory-bound forwards
DRAFT = {"draft:draft": lambda b, L: 0.0005}


def true_round(b: int, k: int, L: float = 128.0) -> float:
    """What a real round costs beyond the forwards' prior: 0.4 ms of Python per round, 1.5 ms
    more when drafting, 0.3 ms per draft (a proposer's own work the forwards do not see)."""
    prior = TARGET(b, k + 1, L) + k * DRAFT["draft:draft"](b, L)
    return prior + 0.0004 + (0.0015 + 0.0003 * k if k else 0.0)


def measured_model():
    """The prior's forwards plus a measured round table holding the true rounds at b = 1, 2, 4."""
    cm = synthetic_cost_model(TARGET, DRAFT, k_max=K_MAX)
    for sampled in (False, True):
        cm.rounds[(DRAFT_KEY, sampled)] = RoundTable({(b, k): (true_round(b, k), 128.0)
                                                      for b in (1, 2, 4) for k in range(K_MAX + 1)})
    return cm


def cold_policy(n=4, max_new=1000):
    cm = synthetic_cost_model(TARGET, DRAFT, k_max=K_MAX)
    pol = AdaptiveK(K_MAX, FakeDraft(), cm, OnlineRounds(cm, persist=False))
    batch = [Sequence([2] * 128, SamplingParams(max_new_tokens=max_new)) for _ in range(n)]
    for row, seq in enumerate(batch):
        pol.start(row, seq)
    return pol, batch


def drive(pol, batch, alpha, steps, noise=None):
    """Rounds at per-position acceptance alpha (as beta) costing true_round (times `noise(i)`);
    -> the k chosen and whether each was chosen on a price not yet confirmed (fewer than
    CONFIRM_N rounds at that k)."""
    ks, unseen = [], []
    for i in range(steps):
        k = pol.choose(batch)
        table = pol.online.table(DRAFT_KEY, False).samples if pol.online is not None else None
        unseen.append(table is not None and len(table.get((len(batch), k), ())) < CONFIRM_N)
        dt = true_round(len(batch), k) * (noise(i) if noise else 1.0)
        observe(pol, batch, k, [k] * len(batch), [int(alpha > 0.5) * k] * len(batch), dt,
                accept_prob=[[alpha] * k] * len(batch))
        ks.append(k)
    return ks, unseen


def test_the_online_table_converges_to_the_measured_one():
    """Rounds observed at two k only, a third of them 40% slow (a busy machine): every k's price
    is the measured table's (the overheads are linear in k, as the line assumes)."""
    cm = synthetic_cost_model(TARGET, DRAFT, k_max=K_MAX)
    online = OnlineRounds(cm, persist=False)
    for i in range(3 * WINDOW):
        for k in (0, 2, 5):
            online.record(DRAFT_KEY, False, 4, k, 128.0, true_round(4, k) * (1.4 if i % 3 == 0 else 1.0))
    pol = AdaptiveK(K_MAX, FakeDraft(), cm, online)
    measured = AdaptiveK(K_MAX, FakeDraft(), measured_model())
    np.testing.assert_allclose(pol.step_times(4, 128, DRAFT_KEY), measured.step_times(4, 128, DRAFT_KEY), rtol=1e-9)
    # another cache length moves the price along the forwards' slope; another batch size holds
    # the offsets learnt at b = 4
    np.testing.assert_allclose(pol.step_times(4, 400, DRAFT_KEY) - pol.step_times(4, 128, DRAFT_KEY),
                               [TARGET(4, k + 1, 400) - TARGET(4, k + 1, 128) for k in range(K_MAX + 1)])
    np.testing.assert_allclose(pol.step_times(8, 128, DRAFT_KEY) - cm.curve(DRAFT_KEY, 8, K_MAX, None)[0],
                               [true_round(4, k) - cm.curve(DRAFT_KEY, 4, K_MAX, None)[0][k] for k in range(K_MAX + 1)])


def true_rate(k: int, alpha: float, b: int = 4) -> float:
    """Expected tokens per second of a round drafting k at per-position acceptance alpha."""
    return b * sum(alpha ** i for i in range(k + 1)) / true_round(b, k)


@pytest.mark.parametrize("alpha", [0.3, 0.5, 0.7, 0.9])
def test_a_cold_policy_ends_where_the_measured_one_is_and_explores_boundedly(alpha):
    """Driven by rounds that cost what they cost (0.3 ms a draft more than the forwards say, a
    slope the cold policy does not learn from rounds that never switch k), the cold policy
    settles within 2% of the measured one's tokens per second; the rounds it ran at a k with
    fewer than CONFIRM_N rounds number at most CONFIRM_N (k_max + 1) (docs/adaptive.md, the
    exploration bound)."""
    cold, batch = cold_policy()
    ks, unseen = drive(cold, batch, alpha, 200)
    warm = AdaptiveK(K_MAX, FakeDraft(), measured_model())
    for row, seq in enumerate(batch):
        warm.start(row, seq)
    ref, _ = drive(warm, batch, alpha, 200)
    got = statistics.mean(true_rate(k, alpha) for k in ks[-50:])
    best = statistics.mean(true_rate(k, alpha) for k in ref[-50:])
    assert got >= 0.98 * best, (ks, ref)
    assert sum(unseen) <= CONFIRM_N * (K_MAX + 1)


def test_a_cold_policy_chooses_only_from_the_rounds_it_observed(monkeypatch):
    """Two cold policies fed the same rounds choose the same k every round (the choice is a
    function of the past: what rejection sampling needs to keep the target's law), and neither
    reads a clock: the times come from the rounds the engine reports."""
    noise = lambda i: 1.0 + 0.5 * ((i * 7919) % 13 == 0)     # noqa: E731  an occasional slow round
    a, batch_a = cold_policy()
    b, batch_b = cold_policy()

    def no_clock():
        raise AssertionError("the policy read the clock")
    for name in ("perf_counter", "monotonic", "time"):
        monkeypatch.setattr(time, name, no_clock)
    ks_a, _ = drive(a, batch_a, 0.6, 120, noise)
    ks_b, _ = drive(b, batch_b, 0.6, 120, noise)
    monkeypatch.undo()
    assert ks_a == ks_b and len(set(ks_a)) > 1
    # and a round reported differently changes only the choices after it
    c, batch_c = cold_policy()
    ks_c, _ = drive(c, batch_c, 0.6, 120, lambda i: noise(i) * (3.0 if i == 60 else 1.0))
    assert ks_c[:61] == ks_a[:61]


def test_what_is_learnt_is_saved_and_read_by_the_next_run(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    cm = synthetic_cost_model(TARGET, DRAFT, k_max=K_MAX)
    first = OnlineRounds(cm)
    for i in range(48):                # the first saves: after 16 observations of a table (the
        first.record(DRAFT_KEY, True, 2, i % 3, 128.0, true_round(2, i % 3))   # plain one's: i = 45)
    assert list((tmp_path / "costs").glob("online-*.json"))
    second = OnlineRounds(cm)
    assert second.observed(DRAFT_KEY, True, 2) == [0, 1, 2] and second.observed(DRAFT_KEY, False, 2) == []
    np.testing.assert_allclose(second.offsets(DRAFT_KEY, True, 2, K_MAX), first.offsets(DRAFT_KEY, True, 2, K_MAX))


def test_a_cold_start_times_forwards_only_and_no_round(tiny_target, tiny_draft, tmp_path, monkeypatch):
    """An empty cache: building the engine times a few forwards (the prior) and no round, not
    one scratch engine; its first token comes from the first step; rounds are learnt after."""
    import specdec.adaptive.calibrate as calibrate
    import specdec.build as build
    import specdec.costs.profiling as profiling
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    forwards = []

    def fake_forwards(model, b, L, qs, *a, **kw):
        forwards.append((b, L, tuple(qs)))
        return {q: 1e-3 * q for q in qs}

    def forbidden(*a, **kw):
        raise AssertionError("a round was timed before the first token")
    monkeypatch.setattr(profiling, "time_forwards", fake_forwards)
    monkeypatch.setattr(build, "round_timer", forbidden)
    monkeypatch.setattr(calibrate, "Engine", forbidden)
    eng = make_engine(Models(tiny_target, None, tiny_draft), SpecConfig(method="draft", k="auto", k_max=4),
                      EngineConfig(max_batch=8, max_model_len=128))
    assert forwards and len(forwards) <= 12            # the target's 2 rows x 2 lengths, the draft's
    assert {b for b, _L, _q in forwards} == {1, 8} and all(len(q) <= 5 for _b, _L, q in forwards)
    prompt = random_prompts(1, seed=4)[0]
    seq = eng.add_request(prompt, SamplingParams(max_new_tokens=24, ignore_eos=True))
    eng.step()
    assert seq.num_output == 1                           # the first token: prefill, nothing timed
    while eng.has_unfinished():
        eng.step()
    assert eng.policy.online.observed(DRAFT_KEY, False, 1)
    plain = Engine(tiny_target, SpecConfig(method="none", k=0), EngineConfig(max_model_len=128))
    assert seq.output_ids == plain.generate([prompt], SamplingParams(max_new_tokens=24, ignore_eos=True))[0].output_ids


def test_which_rounds_are_learnt():
    """A round is learnt at the widest draft it verified; not a catch-up round (the first
    drafting round after plain ones), nor one asked to draft that drafted nothing."""
    pol, batch = cold_policy(n=2)
    seen = lambda: {k: len(s) for key in (DRAFT_KEY, pol.online.plain)  # noqa: E731
                    for (b, k), s in pol.online.table(key, False).samples.items()}
    observe(pol, batch, 4, [3, 2], [1, 0], 0.02)          # an n-gram-like short draft: verified width 3
    observe(pol, batch, 0, [0, 0], [0, 0], 0.01)
    observe(pol, batch, 4, [4, 4], [0, 0], 0.05)          # after a plain round: the draft's catch-up
    observe(pol, batch, 4, [0, 0], [0, 0], 0.01)          # asked for 4, drafted none
    observe(pol, batch, 2, [2, 2], [2, 2], 0.02)
    assert seen() == {3: 1, 0: 1, 2: 1}


def test_one_slow_forward_in_the_prior_does_not_price_its_k_out():
    """The baseline is a line through the prior's drafting forwards: a forward timed 50% slow at
    q = 3 leaves k = 2 priced as its neighbours say."""
    spiky = lambda b, q, L: TARGET(b, q, L) * (1.5 if q == 3 else 1.0)     # noqa: E731
    clean = OnlineRounds(synthetic_cost_model(TARGET, DRAFT, k_max=K_MAX), persist=False)
    noisy = OnlineRounds(synthetic_cost_model(spiky, DRAFT, k_max=K_MAX), persist=False)
    np.testing.assert_allclose(noisy.prices(DRAFT_KEY, False, 1, K_MAX), clean.prices(DRAFT_KEY, False, 1, K_MAX))


def test_a_few_rounds_may_lower_a_price_never_raise_it():
    """Fewer than CONFIRM_N rounds at a k cap its price at their level (lower it), never raise it:
    one slow round at k = 2 leaves the prices as they were; one fast round at k = 3 lowers k = 3."""
    cm = synthetic_cost_model(TARGET, DRAFT, k_max=K_MAX)
    online = OnlineRounds(cm, persist=False)
    for _ in range(5):
        online.record(DRAFT_KEY, False, 1, 1, 128.0, true_round(1, 1))
    before = online.prices(DRAFT_KEY, False, 1, K_MAX)
    online.record(DRAFT_KEY, False, 1, 2, 128.0, 3 * true_round(1, 2))           # a slow spell
    np.testing.assert_allclose(online.prices(DRAFT_KEY, False, 1, K_MAX), before)
    online.record(DRAFT_KEY, False, 1, 3, 128.0, 0.5 * before[3])               # a fast one caps at once
    after = online.prices(DRAFT_KEY, False, 1, K_MAX)
    assert after[3] == pytest.approx(0.5 * before[3]) and after[1] == pytest.approx(before[1])


def test_the_drafting_slope_comes_from_neighbouring_rounds_not_from_levels_apart_in_time():
    """k = 1 run while the machine is slow, k = 4 once it is fast: their levels alone would price
    drafting as nearly free (or dear); the slope comes from rounds at two k side by side, which
    see one machine speed, so the prices keep the true overhead per draft."""
    cm = synthetic_cost_model(TARGET, DRAFT, k_max=K_MAX)
    online = OnlineRounds(cm, persist=False)
    for _ in range(WINDOW):
        online.record(DRAFT_KEY, False, 1, 1, 128.0, 1.3 * true_round(1, 1))     # a slow spell
    for k in (2, 4) * (WINDOW // 2 + 1):                                         # switches: pairs
        online.record(DRAFT_KEY, False, 1, k, 128.0, true_round(1, k))
    for _ in range(WINDOW):
        online.record(DRAFT_KEY, False, 1, 4, 128.0, true_round(1, 4))
    p = online.prices(DRAFT_KEY, False, 1, K_MAX)
    truth = [true_round(1, k) for k in range(K_MAX + 1)]
    assert p[4] - p[1] == pytest.approx(truth[4] - truth[1], rel=1e-6)
    assert p[8] - p[4] == pytest.approx(truth[8] - truth[4], rel=1e-6)


def test_plain_rounds_are_learnt_once_for_every_key():
    """A plain round costs the same whichever proposer's policy chose it: plain rounds learnt
    under one key price k = 0 for another (auto's arms), and only k = 0; an engine whose plain
    rounds also carry the target's features keeps them under a key of their own."""
    cm = synthetic_cost_model(TARGET, {**DRAFT, "ngram": lambda b, L: 0.0}, k_max=K_MAX)
    ngram = CostKey("ngram")
    online = OnlineRounds(cm, persist=False)
    before = online.offsets(ngram, False, 1, K_MAX)
    for i in range(CONFIRM_N):
        online.record(DRAFT_KEY, False, 1, 0, 128.0, true_round(1, 0) + 0.002)
    after = online.offsets(ngram, False, 1, K_MAX)
    assert after[0] == pytest.approx(0.0024) and before[0] == 0.0
    np.testing.assert_array_equal(after[1:], before[1:])
    assert online.observed(ngram, False, 1) == [0]
    featured = OnlineRounds(cm, persist=False, plain=CostKey("none", "features"))
    assert featured.plain != online.plain
    assert featured.offsets(ngram, False, 1, K_MAX)[0] == 0.0


def test_auto_learns_its_plain_rounds_in_one_table(tiny_target, tiny_draft, tmp_path, monkeypatch):
    """`auto` cold: its arms' plain rounds all land in the one plain table, none in an arm's."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    eng = make_engine(Models(tiny_target, None, tiny_draft), SpecConfig(method="auto", k="auto", k_max=4),
                      EngineConfig(max_batch=1, max_model_len=256))
    eng.generate(random_prompts(2, seed=5), SamplingParams(max_new_tokens=48, ignore_eos=True))
    online = eng.policy.online
    assert online.plain == CostKey("none")
    assert all(k for (key, _), t in online.tables.items() if key != online.plain for (_b, k) in t.samples)
