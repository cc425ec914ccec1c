"""specdec: lossless speculative decoding, measured.

    from specdec import LLM, SamplingParams
    print(LLM().generate(["def f(x):"], SamplingParams(max_new_tokens=8))[0].text)

The public names (see docs/api.md) are imported on first use, so `import specdec.errors`
or the command line do not load the whole engine.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import LLM, Analysis, RequestOutput, SpecStats, analyze
    from .config import EngineConfig, SamplingParams, SpecConfig
    from .errors import CheckpointError, ConfigError, PromptError, ResourceError, SpecdecError

# public name -> the module that defines it
_EXPORTS = {
    "LLM": "specdec.api", "Analysis": "specdec.api", "RequestOutput": "specdec.api",
    "SpecStats": "specdec.api", "analyze": "specdec.api",
    "SamplingParams": "specdec.config", "SpecConfig": "specdec.config", "EngineConfig": "specdec.config",
    "SpecdecError": "specdec.errors", "CheckpointError": "specdec.errors", "ConfigError": "specdec.errors",
    "PromptError": "specdec.errors", "ResourceError": "specdec.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'specdec' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
