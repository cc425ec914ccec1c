"""Fixtures: the tiny model pair loaded once, and a live server on it per module."""
from __future__ import annotations

import pytest

from liveserver import live_server
from specdec.config import SpecConfig
from specdec.build import load_models


@pytest.fixture(scope="session")
def tiny_models(tiny_dirs):
    t, d = tiny_dirs
    return load_models(t, d)


@pytest.fixture(scope="module")
def server(tiny_models):
    """A server with the draft model, speculation on by default (k=3), small batch."""
    with live_server(tiny_models, spec=SpecConfig(method="draft", k=3), max_batch=8, max_queue=64,
                     model_name="tiny") as s:
        yield s
