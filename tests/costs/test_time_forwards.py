"""time_forwards: a machine whose speed drifts while it times must not tilt the curve in q."""
from __future__ import annotations

import types

import pytest
import torch

from specdec.costs import profiling


class DriftingModel:
    """A stand-in model whose every call takes `cost(q) + drift * calls` seconds of a fake clock:
    a machine that slows down steadily while the forwards are timed."""

    def __init__(self, clock: list[float], cost, drift: float):
        self.clock, self.cost, self.drift, self.calls = clock, cost, drift, 0
        self.device = torch.device("cpu")
        self.config = types.SimpleNamespace(vocab_size=32)

    def new_cache(self, b, n, num_layers=None):
        return types.SimpleNamespace(lengths=[0] * b)

    def __call__(self, tokens, positions, cache, num_layers=None):
        self.clock[0] += self.cost(tokens.shape[1]) + self.drift * self.calls
        self.calls += 1


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(profiling.time, "perf_counter", lambda: now[0])
    return now


def test_a_steady_slowdown_leaves_a_flat_curve_flat(clock):
    model = DriftingModel(clock, lambda q: 4e-3, drift=2e-4)
    t = profiling.time_forwards(model, 1, 128, list(range(1, 10)), min_time=0.02, min_reps=3, max_reps=9)
    assert model.drift * model.calls > 4e-3           # by the last call the machine is twice as slow
    assert max(t.values()) / min(t.values()) < 1.1    # timed q by q (q = 9 last) it read 2.5x


def test_a_real_rise_in_q_is_kept(clock):
    model = DriftingModel(clock, lambda q: 4e-3 + 5e-4 * q, drift=1e-4)
    t = profiling.time_forwards(model, 1, 128, [1, 3, 9], min_time=0.02, min_reps=3, max_reps=9)
    assert t[9] / t[1] == pytest.approx((4e-3 + 4.5e-3) / (4e-3 + 5e-4), rel=0.1)
    assert t[1] < t[3] < t[9]
