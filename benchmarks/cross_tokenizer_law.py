"""The p-values of the cross-vocabulary law tests and their negative controls
(tests/proposers/test_cross_vocab_law.py), printed one per line:

    python benchmarks/cross_tokenizer_law.py

The tests assert p > 1e-3 for the rule and p < 1e-3 for the controls; this prints the values.
"""
from __future__ import annotations

import torch

import specdec.proposers.cross_vocab as cross_vocab
from specdec.proposers.vocab_map import VocabMap
from tests.conftest import make_model
from tests.proposers import test_cross_vocab_law as law
from tests.proposers.test_exact_law import N, N_CONTROL, V, exact_law, p_value
from tests.proposers.xvocab import DRAFT_PIECES, TARGET_PIECES, tiny_tokenizer


def main():
    torch.set_num_threads(1)
    target = make_model(3, std=0.5, vocab=V)                  # the test module's pair fixture
    draft = make_model(5, std=0.5, vocab=len(DRAFT_PIECES))
    draft.vocab_map = VocabMap.build(tiny_tokenizer(TARGET_PIECES), tiny_tokenizer(DRAFT_PIECES), V, len(DRAFT_PIECES))
    pair = (target, draft)
    for T, k in [(0.7, 3), (1.0, 0), (1.3, 3)]:
        print("law", T, k, p_value(law.sampled(pair, T, k), exact_law(target, T, k)))
    print("mixed greedy", p_value(law.sampled(pair, 1.0, greedy_every=4, n=N // 2), exact_law(target)))
    restrict, pick = cross_vocab.restrict, cross_vocab.CrossRule.pick
    cross_vocab.restrict = law._unnormalised
    print("control unnormalised", p_value(law.sampled(pair, n=N_CONTROL), exact_law(target)))
    cross_vocab.restrict = restrict
    cross_vocab.CrossRule.pick = law._drawn_at_another_temperature
    print("control other temperature", p_value(law.sampled(pair, 0.7, n=N_CONTROL), exact_law(target, 0.7)))
    cross_vocab.CrossRule.pick = pick


if __name__ == "__main__":
    main()
