"""The decode loop: continuous batching, one verify forward per step."""
from .engine import Engine
from .metrics import EngineMetrics
from .sequence import Sequence

__all__ = ["Engine", "EngineMetrics", "Sequence"]
