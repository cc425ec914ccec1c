"""The key under which a round's cost and its acceptance are recorded."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostKey:
    """What a round's cost and its acceptance depend on, besides the target: the proposer's
    method and, for one that runs a model, which model."""
    method: str            # registry name: "draft", "ngram", "layerskip", ...
    model: str = ""        # the draft's name; layerskip: its depth

    def __str__(self) -> str:
        return f"{self.method}:{self.model}" if self.model else self.method

    @classmethod
    def parse(cls, text: str) -> "CostKey":
        """The inverse of str(): "draft:draft" -> CostKey("draft", "draft")."""
        method, _, model = text.partition(":")
        return cls(method, model)
