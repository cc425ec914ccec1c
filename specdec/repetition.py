"""How much of an output repeats itself: the guard beside every acceptance figure.

Tiny models fall into loops, and on a loop n-gram and suffix proposers (and a draft that
has learned the same loop) look far better than they are on real text. Every benchmark
row and analyzer cell reports this fraction next to its speed-up; above `FLAG` the row's
figures describe self-repetition, not the workload.
"""
from __future__ import annotations

from collections.abc import Sequence

NGRAM = 8      # an 8-gram of code tokens repeated verbatim is a loop, not an idiom
FLAG = 0.5     # above this, most of the output is a copy of itself


def repeated_positions(ids: Sequence[int], n: int = NGRAM) -> list[bool]:
    """Per token of `ids`: whether it completes an n-gram already seen earlier in `ids` (the
    first n - 1 tokens complete none). Unlikelihood training penalises exactly these tokens."""
    seen: set[tuple[int, ...]] = set()
    out = [False] * len(ids)
    for i in range(n - 1, len(ids)):
        gram = tuple(ids[i - n + 1:i + 1])
        out[i] = gram in seen
        seen.add(gram)
    return out


def repetition_fraction(ids: Sequence[int], n: int = NGRAM) -> float:
    """The fraction of `ids` whose token completes an n-gram already seen earlier in `ids`
    (tokens before the first complete n-gram count as new). 0.0 for an empty output."""
    return sum(repeated_positions(ids, n)) / len(ids) if len(ids) else 0.0


def mean_repetition(outputs: Sequence[Sequence[int]], n: int = NGRAM) -> float:
    """Token-weighted repetition over several outputs."""
    total = sum(len(o) for o in outputs)
    if total == 0:
        return 0.0
    return sum(repetition_fraction(o, n) * len(o) for o in outputs) / total
