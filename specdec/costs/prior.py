"""The cold start's cost model: a handful of forwards, timed in about a second.

    cm = prior_costs(target, proposer, k_max=8, max_batch=8)

`--k auto` needs prices before its first round. The full table (real rounds at every batch
row, `specdec profile`) takes minutes; this prior times only the forwards a round is made of:
the target at every q = 1..k_max + 1 at batch 1, and sparsely (q = 1, 2, 3, the middle and
k_max + 1) at max_batch, the proposer's model at q = 1, each at cache lengths l_ref and l_long.
In between, the forward model interpolates (piecewise linear in q, linear in b: profiling.py).
Batch 1 is timed at every q because a forward's time is not linear in q there (the decoder's
kernels step at tile widths), and a line through q = 5 and 9 across such a step priced the k
between them too high: cold runs settled one k below the measured table's. The adaptive policy
then learns what a whole round costs from the rounds it runs (adaptive/online.py). Read from
the cache and timed only where it lacks them, as every table.
"""
from __future__ import annotations

from . import cache
from .cost_model import CostModel

# time_forwards' budget per (rows, cache length, q) for the prior: 3 calls after a warm-up and
# at least 20 ms (the full table's 50 ms and up to 15 calls buy a steadier median, which the
# online round table makes up for within a few rounds); at most 9 calls
PRIOR_TIMING = {"min_time": 0.02, "min_reps": 3, "max_reps": 9}


def prior_rows(max_batch: int) -> list[int]:
    """The batch rows the prior times: 1 and max_batch (a forward is about linear in b)."""
    return sorted({1, max_batch})


def prior_qs(k_max: int, b: int) -> list[int]:
    """The target's positions per row the prior times at batch row b: at b = 1 every q, else
    1, 2, 3 (k = 0, 1, 2, where drafting starts to pay or not), the middle, and k_max + 1."""
    if b == 1:
        return list(range(1, k_max + 2))
    return sorted({q for q in (1, 2, 3, (k_max + 3) // 2, k_max + 1) if q <= k_max + 1})


def prior_costs(target, proposer, k_max: int, max_batch: int) -> CostModel:
    """A CostModel of forwards only, at the prior's rows and qs (one line on stderr when any is
    timed now: once per machine)."""
    for b in prior_rows(max_batch):  # each row's points join the cached table; the last call reads all
        line = (f"specdec: timing a few forwards (batch {b}) for k = auto's starting costs, "
                f"refined while decoding; cached in {cache.cache_dir() / 'costs'}")
        cm = CostModel.load_or_measure(target, proposer, k_max=k_max, batch_sizes=[b], qs=prior_qs(k_max, b),
                                       timing=PRIOR_TIMING, announce=line)
    return cm
