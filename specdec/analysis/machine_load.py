"""How busy the machine is before an analysis starts, and how many threads that leaves it.

The cores other processes use are sampled directly (cpu_load.py). A forward on 2 OpenMP
threads with one core taken by another process waits at every barrier for the thread that
shares that core: in a quick analysis with a Python busy loop on one of 2 cores, every
cell's 95% interval stayed wider than +-10% (median half-width 37%), so the analysis then
runs on the cores that are free.
"""
from __future__ import annotations

from ..cpu_load import HELD

BUSY = 0.5          # cores in use per CPU above which the machine is busy (half the cores taken)


def free_threads(busy: float | None, cpus: int | None, current: int) -> int:
    """Threads for the analysis: `current`, capped at the cores others do not hold."""
    if busy is None or not cpus:
        return current
    taken = int(busy + (1 - HELD))                  # round, counting a core taken above HELD
    return max(1, min(current, cpus - taken))


def busy_warning(load: float | None, cpus: int | None) -> str:
    """A warning line when the cores in use before the analysis starts (the larger of the
    load average and the direct sample) exceed BUSY per CPU; "" otherwise."""
    if load is None or not cpus or load <= BUSY * cpus:
        return ""
    return (f"warning: the machine is busy ({load:.1f} of {cpus} CPUs in use before the analysis "
            "started): timings will be noisy; cells whose interval stays wide are marked uncertain")
