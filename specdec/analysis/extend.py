"""More groups for cells whose interval is still wide, within a time budget.

A block (workload, batch, temperature) decodes plain and every k together, so extending a
wide cell means one more lockstep group of its block, on the next prompts. An interval's
width shrinks about as 1/sqrt(groups), so a block of n groups at relative half-width w
needs about n·(w/WIDE)² − n more to get under WIDE; at its mean group duration that is its
price. Each turn runs one group of the block with the lowest price that still fits in what
is left of the budget: the budget goes where it can turn wide cells narrow, not to a block
too noisy or too slow to get there. Blocks that stay wide are the caller's "uncertain".
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Hashable

from .interval import WIDE


def groups_needed(n: int, width: float, wide: float = WIDE) -> int:
    """More groups for a block of `n` groups at relative half-width `width` to reach `wide`."""
    if width <= wide:
        return 0
    if not math.isfinite(width):
        return n                                # no usable interval yet: double the groups
    return max(1, math.ceil(n * (width / wide) ** 2) - n)


def extend_wide(run_group: Callable[[Hashable, int], None], width: Callable[[Hashable], float],
                groups: dict, durations: dict, budget_s: float, wide: float = WIDE,
                clock: Callable[[], float] = time.perf_counter) -> list[tuple[Hashable, int]]:
    """Run extra groups until no block is wider than `wide` or none can be afforded.

    `groups[block]`: groups run so far (the next group's index; updated); `durations[block]`:
    seconds of each group so far (appended to); `width(block)`: the widest relative
    half-width among the block's cells, read after every group; `run_group(block, g)` decodes
    group g of the block. Returns the (block, g) pairs run, in order."""
    start, done = clock(), []
    while True:
        left = budget_s - (clock() - start)
        prices = {}
        for blk in groups:
            w = width(blk)
            if w <= wide:
                continue
            each = statistics.mean(durations[blk]) if durations.get(blk) else 0.0
            if each > left:
                continue                       # not even one more group fits
            prices[blk] = groups_needed(groups[blk], w, wide) * each
        affordable = {blk: p for blk, p in prices.items() if p <= left} or prices
        if not affordable:
            return done
        blk = min(affordable, key=lambda b: (affordable[b], -width(b)))
        t0 = clock()
        run_group(blk, groups[blk])
        durations.setdefault(blk, []).append(clock() - t0)
        done.append((blk, groups[blk]))
        groups[blk] += 1
