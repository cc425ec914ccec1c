"""The key under which a round's cost and its acceptance are recorded."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostKey:
    method: str            # the proposer's registry name: "draft", "ngram", "layerskip", ...
    model: str = ""        # which model it runs: the draft's name; layerskip: its depth

    def __str__(self) -> str:
        return f"{self.method}:{self.model}" if self.model else self.method

    @classmethod
    def parse(cls, text: str) -> "CostKey":
        """The inverse of str(): "draft:draft" -> CostKey("draft", "draft")."""
        return cls(*text.split(":", 1))
