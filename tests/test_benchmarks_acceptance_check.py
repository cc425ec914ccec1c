"""The closed-batch simulation that benchmarks/acceptance_check.py sets beside measured rounds."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from acceptance_check import simulate_closed_batch  # noqa: E402


def test_certain_outcomes_leave_no_tail():
    assert simulate_closed_batch([1.0, 1.0], rows=8, tokens=63, draws=5) == (21.0, 0.0)   # 3 a round
    assert simulate_closed_batch([0.0, 0.0], rows=8, tokens=64, draws=5) == (64.0, 0.0)   # 1 a round


def test_chance_alone_makes_a_tail_that_grows_with_the_batch():
    one = simulate_closed_batch([0.8, 0.6, 0.45, 0.35], rows=1, tokens=64, draws=200)
    many = simulate_closed_batch([0.8, 0.6, 0.45, 0.35], rows=16, tokens=64, draws=200)
    assert one[1] == 0.0 and many[1] > 3.0
    assert many[0] + many[1] == pytest.approx(64 / 3.2, rel=0.35)
