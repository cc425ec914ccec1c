"""The prediction math: Leviathan's formula, its better estimates, break-even, best k."""
import random

import pytest

from specdec.analysis import predict as P


def test_expected_tokens_known_values():
    assert P.expected_tokens(0.5, 1) == pytest.approx(1.5)
    assert P.expected_tokens(0.8, 4) == pytest.approx((1 - 0.8 ** 5) / 0.2)  # 3.3616
    assert P.expected_tokens(0.8, 4) == pytest.approx(3.3616)
    assert P.expected_tokens(0.0, 5) == 1.0
    assert P.expected_tokens(1.0, 5) == 6.0
    assert P.expected_tokens(0.9, 0) == 1.0


def test_leviathan_anchor():
    # Leviathan et al.: alpha = .75, gamma = 7 gives ~3.6 tokens per round; with c = 0.05 the
    # wall-time speed-up is (1 - a^8) / ((1 - a)(7c + 1)) ~ 2.67.
    tokens = P.expected_tokens(0.75, 7)
    assert tokens == pytest.approx(3.5995, abs=1e-4)
    assert P.predicted_speedup(0.75, 7, 7 * 0.05 + 1) == pytest.approx(tokens / 1.35)


def test_positional_equals_iid_when_flat_and_below_when_falling():
    assert P.expected_tokens_positional([0.7] * 6, 6) == pytest.approx(P.expected_tokens(0.7, 6))
    assert P.expected_tokens_positional([0.9, 0.5], 2) == pytest.approx(1 + 0.9 + 0.45)
    with pytest.raises(ValueError):
        P.expected_tokens_positional([0.9], 2)


def test_mixture_is_at_least_the_formula_at_the_mean_alpha():
    # E(alpha) is convex in alpha, so averaging over prompts (Jensen) never gives less.
    alphas = [0.1, 0.95]
    mix = P.expected_tokens_mixture(alphas, 6)
    assert mix > P.expected_tokens(sum(alphas) / 2, 6) + 0.3


def test_fit_alpha_recovers_iid_alpha_and_beats_acceptance_rate():
    rng = random.Random(0)
    k, alpha = 4, 0.7
    lengths = []
    for _ in range(20000):
        n = 0
        while n < k and rng.random() < alpha:
            n += 1
        lengths.append(n)
    assert P.fit_alpha(lengths, k) == pytest.approx(alpha, abs=0.01)
    rate = sum(lengths) / (k * len(lengths))                    # vLLM's acceptance rate
    assert rate < alpha - 0.1
    # the empirical estimate is the measured mean, and the formula agrees with it here
    assert P.expected_tokens_empirical(lengths, k) == pytest.approx(1 + sum(lengths) / len(lengths))
    assert P.expected_tokens_empirical(lengths, k) == pytest.approx(P.expected_tokens(alpha, k), rel=0.02)
    assert P.expected_tokens_empirical(lengths, 2) == pytest.approx(1 + sum(min(n, 2) for n in lengths) / len(lengths))


def test_conditional_alphas_from_per_position_counts():
    assert P.conditional_alphas([8, 4, 1], 10) == pytest.approx([0.8, 0.5, 0.25])
    assert P.conditional_alphas([0, 0], 5) == [0.0, 0.0]
    # positional estimate from counts reproduces the empirical mean of the same rounds
    lengths = [0, 1, 2, 3, 3, 1]
    per_pos = [sum(1 for n in lengths if n > j) for j in range(3)]
    cond = P.conditional_alphas(per_pos, len(lengths))
    assert P.expected_tokens_positional(cond, 3) == pytest.approx(P.expected_tokens_empirical(lengths, 3))


def test_break_even_alpha():
    assert P.break_even_alpha(1, 1.5) == pytest.approx(0.5, abs=1e-6)        # 1 + a = 1.5
    assert P.break_even_alpha(2, 1.75) == pytest.approx(0.5, abs=1e-6)       # 1 + a + a^2 = 1.75
    assert P.break_even_alpha(3, 0.9) == 0.0                                 # cheaper than plain: always pays
    assert P.break_even_alpha(3, 4.5) is None                                # costs more than k+1 tokens
    for k, r in [(1, 1.2), (4, 1.6), (8, 3.0)]:
        a = P.break_even_alpha(k, r)
        assert P.predicted_speedup(a, k, r) == pytest.approx(1.0, abs=1e-6)
        assert P.predicted_speedup(a - 0.01, k, r) < 1.0


def test_cost_ratio_and_best_k():
    t_target = lambda b, q: 10.0 * b * (1 + 0.1 * (q - 1))     # noqa: E731
    t_draft = lambda b: 1.0 * b                                 # noqa: E731
    assert P.round_cost(t_target, t_draft, 1, 4) == pytest.approx(10 * 1.4 + 4)
    assert P.cost_ratio(t_target, t_draft, 2, 4) == pytest.approx((20 * 1.4 + 8) / 20)
    ratio = lambda k: P.cost_ratio(t_target, t_draft, 1, k)     # noqa: E731
    k, s = P.best_k(lambda k: P.expected_tokens(0.8, k), ratio, range(1, 9))
    manual = max(range(1, 9), key=lambda k: P.expected_tokens(0.8, k) / ratio(k))
    assert k == manual and s > 1
    assert P.best_k(lambda k: 1.0, ratio, range(1, 9)) == (0, 1.0)            # nothing accepted: plain


def test_crossover():
    assert P.crossover([1, 2, 4], [2.0, 1.5, 0.5]) == pytest.approx(3.0)
    assert P.crossover([1, 2, 4], [2.0, 1.5, 1.1]) is None
    assert P.crossover([4, 1, 2], [0.5, 2.0, 1.5]) == pytest.approx(3.0)     # order does not matter
    assert P.crossover([1, 2], [0.8, 0.7]) == 1


def test_relative_error():
    assert P.relative_error(1.1, 1.0) == pytest.approx(0.1)
    assert P.relative_error(0.9, 1.0) == pytest.approx(-0.1)


def test_rounds_without_a_draft_are_plain_steps():
    from specdec.analysis.predict import simulate_speedup, with_draft_rate
    cost = lambda a, k: 0.010 * a + 0.001 * k        # noqa: E731
    full = simulate_speedup(0.8, 4, 1, 64, cost)
    assert simulate_speedup(0.8, 4, 1, 64, cost, draft_rate=1.0) == full
    assert simulate_speedup(0.8, 4, 1, 64, cost, draft_rate=0.0) == pytest.approx(1.0)
    half = simulate_speedup(0.8, 4, 1, 64, cost, draft_rate=0.5)
    assert 1.0 < half < full
    tokens, ratio = 3.0, 1.4
    assert with_draft_rate(tokens, ratio, 1.0) == pytest.approx(tokens / ratio)
    assert with_draft_rate(tokens, ratio, 0.5) == pytest.approx(2.0 / 1.2)
    assert half == pytest.approx(with_draft_rate(*_steady(0.8, 4), 0.5), rel=0.1)


def _steady(alpha, k):
    from specdec.analysis.predict import expected_tokens
    return expected_tokens(alpha, k), (0.010 + 0.001 * k) / 0.010
