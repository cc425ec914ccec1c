"""The method/k rule, written once (build.spec_config), as the CLI and the API apply it."""
from __future__ import annotations

import argparse

import pytest

from specdec.build import NGRAM_MAX, NGRAM_MIN, spec_config
from specdec.commands.common import add_method_args, spec_from_args
from specdec.errors import ConfigError


def _cli(argv: list[str], has_draft: bool):
    p = argparse.ArgumentParser()
    add_method_args(p)
    return spec_from_args(p.parse_args(argv), has_draft)


def test_known_answers():
    s = spec_config(None, "auto", 8, True, {})
    assert (s.method, s.k, s.k_max) == ("draft", "auto", 8)
    assert s.opts == {"ngram_min": NGRAM_MIN, "ngram_max": NGRAM_MAX}
    s = spec_config(None, 4, 8, False, {})
    assert (s.method, s.k) == ("none", 0)                              # no draft model: plain decoding
    assert spec_config("ngram", 12, 8, False, {"ngram_max": 3}).k_max == 12   # a fixed k raises k_max
    assert spec_config("ngram", 12, 8, False, {"ngram_max": 3}).opts["ngram_max"] == 3
    with pytest.raises(ConfigError, match="needs a draft model"):
        spec_config("draft", 2, 8, False, {})


NGRAM = {"ngram_min": NGRAM_MIN, "ngram_max": NGRAM_MAX}


@pytest.mark.parametrize("argv,has_draft,want", [
    ([], True, ("draft", "auto", 8, NGRAM)),
    ([], False, ("none", 0, 8, NGRAM)),
    (["--method", "ngram", "--k", "12", "--ngram-max", "3"], False, ("ngram", 12, 12, {**NGRAM, "ngram_max": 3})),
    (["--k", "heuristic", "--layerskip-layers", "2"], True, ("draft", "heuristic", 8, {**NGRAM, "layerskip_layers": 2})),
])
def test_the_command_line_applies_the_same_rule(argv, has_draft, want):
    s = _cli(argv, has_draft)
    assert (s.method, s.k, s.k_max, s.opts) == want
