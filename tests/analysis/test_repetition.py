from specdec.repetition import mean_repetition, repetition_fraction


def test_fresh_text_has_no_repetition():
    assert repetition_fraction(list(range(100))) == 0.0
    assert repetition_fraction([]) == 0.0


def test_a_loop_is_counted_from_its_second_lap():
    loop = [1, 2, 3, 4] * 10                     # 40 tokens, period 4
    # the first 8-gram (tokens 0..7) is new, and so are the next 3 (they start at 1, 2, 3);
    # from token 11 on every 8-gram was seen 4 tokens earlier: 29 of 40
    assert repetition_fraction(loop) == 29 / 40
    assert repetition_fraction([5] * 20, n=8) == 12 / 20


def test_the_mean_is_weighted_by_tokens():
    a, b = [7] * 10, list(range(30))
    assert mean_repetition([a, b]) == repetition_fraction(a) * 10 / 40
