"""specdec's Python API: `LLM` (generate, stream) and `analyze`, re-exported by `specdec`."""
from .analyze import Analysis, analyze
from .llm import LLM
from .outputs import RequestOutput, SpecStats

__all__ = ["LLM", "Analysis", "RequestOutput", "SpecStats", "analyze"]
